// DispatchDataBridge: implemented by its own issue.
