// DispatchData: implemented by its own issue.
