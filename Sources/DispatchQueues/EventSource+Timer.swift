import URing

extension EventSource {
    /// Flags for ``EventSource/makeTimerSource(flags:queue:)``.
    public struct TimerFlags: OptionSet, Sendable {
        /// The raw bits, as ``EventSource/mask`` reports them.
        public let rawValue: UInt

        /// Creates flags from raw bits.
        public init(rawValue: UInt) {
            self.rawValue = rawValue
        }

        /// Ignore the leeway: fire as close to each deadline as the system can (`DISPATCH_TIMER_STRICT`).
        public static let strict = TimerFlags(rawValue: 0x1)  // DISPATCH_TIMER_STRICT
    }

    /// Makes a timer source. It fires only once ``schedule(deadline:repeating:leeway:)`` has given it a
    /// schedule and it has been activated.
    ///
    /// The event handler runs on `queue` at or after each deadline, never before; ``data`` is the number of
    /// deadlines that passed since the previous call, counting those missed while the handler ran, while
    /// the queue was busy or while the source was suspended (SEMANTICS D11). ``handle`` is 0 and ``mask``
    /// is `flags`.
    ///
    /// - Parameters:
    ///   - flags: `.strict` to ignore leeway.
    ///   - queue: The queue the handlers run on; `nil` means the default global queue.
    public static func makeTimerSource(flags: TimerFlags = [], queue: WorkQueue? = nil) -> EventSource {
        makeTimerSource(flags: flags, queue: queue, engine: .shared)
    }

    /// Fires and `asyncAfter` blocks waiting in the shared timer scheduler, including fires of rescheduled
    /// timer sources not yet swept out (for the package's tests).
    package static var pendingSharedTimers: Int { TimerScheduler.shared.pendingCount }

    package static func makeTimerSource(flags: TimerFlags = [], queue: WorkQueue?, engine: IOEngine) -> EventSource {
        sourceRequire(
            flags.rawValue & ~TimerFlags.strict.rawValue == 0,
            "EventSource.makeTimerSource: unknown flags \(flags.rawValue)"
        )
        return EventSource(
            core: SourceCore(kind: .timer, handle: 0, mask: flags.rawValue, target: queue, engine: engine)
        )
    }

    /// Sets a timer source's schedule: the first fire at `deadline`, then, if `interval` is given, at
    /// `deadline + k × interval`, so the schedule does not drift (SEMANTICS D26).
    ///
    /// Each fire is delivered no earlier than its deadline and, on an unloaded machine, no later than
    /// `deadline + leeway`; leeway lets fires be batched with other timers, and is clamped to half the
    /// interval (D28). Calling it again replaces the schedule and forgets fires not yet delivered; it may
    /// be called from inside the event handler. A one-shot timer stays alive after firing (D27). An
    /// interval of zero or less means 1 ns; an interval too long to count in nanoseconds means one-shot.
    /// After ``cancel()`` it does nothing (D20). Calling it on a source that is not a timer is a
    /// programming error and stops the process.
    ///
    /// - Parameters:
    ///   - deadline: The first fire time.
    ///   - interval: The time between fires; `nil` for a one-shot timer.
    ///   - leeway: How much later than each deadline a fire may be delivered.
    public func schedule(
        deadline: ContinuousClock.Instant,
        repeating interval: Duration? = nil,
        leeway: Duration = .zero
    ) {
        sourceRequire(
            core.kind == .timer,
            "EventSource.schedule on a \(core.kind.name) source: only timer sources have a schedule"
        )
        core.schedule(deadline: deadline, interval: interval, leeway: leeway)
    }

    /// Makes a timer source never fire until the next ``schedule(deadline:repeating:leeway:)``, forgetting
    /// fires not yet delivered (libdispatch: a start of `DISPATCH_TIME_FOREVER`, SEMANTICS D27).
    public func unschedule() {
        sourceRequire(
            core.kind == .timer,
            "EventSource.unschedule on a \(core.kind.name) source: only timer sources have a schedule"
        )
        core.schedule(deadline: nil, interval: nil, leeway: .zero)
    }
}
