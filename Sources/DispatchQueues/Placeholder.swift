// DispatchQueues: implemented by its own issue.
