// DispatchIO: implemented by its own issue.
