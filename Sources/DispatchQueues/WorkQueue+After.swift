import URing

extension WorkQueue {
    /// Submits `work` to this queue, once, no earlier than `deadline` (SEMANTICS C21, C22).
    ///
    /// The wait happens in the I/O engine (an io_uring timeout shared by every pending `asyncAfter`), not
    /// on a sleeping thread. `work` is submitted at or after `deadline` and, unless the machine is
    /// overloaded, no later than `deadline + leeway`: a leeway lets it be batched with other timers. Unlike
    /// libdispatch, which on Linux ignores leeway and defaults it to 10 % of the delay elsewhere, the
    /// default is zero. A deadline in the past submits at once; one too far to represent (past about 292
    /// years after boot, such as `.now + .seconds(Int64.max)`) never comes, as libdispatch's overflowing
    /// times mean forever (C23). Deadlines are on `ContinuousClock`, which on Linux is `CLOCK_BOOTTIME`:
    /// time the machine spends suspended counts toward them, where libdispatch's `CLOCK_MONOTONIC` does not.
    ///
    /// - Parameters:
    ///   - deadline: The earliest time `work` may be submitted.
    ///   - leeway: How much later than `deadline` it may be submitted.
    ///   - flags: `.barrier` submits it as a barrier.
    ///   - work: The block.
    public func asyncAfter(
        deadline: ContinuousClock.Instant,
        leeway: Duration = .zero,
        flags: WorkItem.Flags = [],
        execute work: @escaping @Sendable () -> Void
    ) {
        after(deadline, leeway, flags.contains(.barrier) ? .barrier(work) : .block(work))
    }

    /// Submits `workItem` to this queue no earlier than `deadline` (see
    /// ``asyncAfter(deadline:leeway:flags:execute:)``); it runs unless cancelled by then.
    public func asyncAfter(deadline: ContinuousClock.Instant, leeway: Duration = .zero, execute workItem: WorkItem) {
        after(deadline, leeway, .item(workItem))
    }

    private func after(_ deadline: ContinuousClock.Instant, _ leeway: Duration, _ work: Work) {
        if deadline <= .now {
            submit(work)
        } else {
            TimerScheduler.shared.schedule(work, on: self, deadline: deadline, leeway: leeway)
        }
    }
}
