/// The outcome of a wait with a deadline: the counterpart of `DispatchTimeoutResult`.
public enum TimeoutResult: Sendable, Equatable {
    /// The awaited event happened before the deadline.
    case success
    /// The deadline passed first; nothing was consumed.
    case timedOut
}
