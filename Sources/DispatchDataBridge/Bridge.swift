// Filled in by this issue: Foundation and Dispatch bridges.
