import Synchronization
import URing

/// A count of outstanding work, with callbacks and waits for when it drops to zero: the counterpart of
/// `DispatchGroup`.
///
/// ``enter()`` and ``leave()`` are single atomic operations; the lock is taken only when the count reaches
/// zero while someone has registered a ``notify(queue:flags:execute:)`` or is in ``wait()``. A group can be
/// reused after it has emptied (SEMANTICS C27).
public final class WorkGroup: @unchecked Sendable {
    private let count = Atomic<Int>(0)
    /// Registered notifications plus waiters. Registration bumps it *before* reading `count`, and `leave`
    /// reads it *after* decrementing `count`, both sequentially consistent: so either the registrant sees
    /// the zero, or the leaver sees the registrant. That keeps the lock off the enter/leave path.
    private let observers = Atomic<Int>(0)
    private let lock = Lock()
    // Guarded by `lock`.
    private var notifications: [(WorkQueue, Work)] = []
    private var waiters: [Waiter] = []
    /// A `fire` is submitting notifications outside the lock: new ones join the end of its line.
    private var firing = false

    /// Creates an empty group.
    public init() {}

    /// Counts one more piece of outstanding work.
    public func enter() {
        count.wrappingAdd(1, ordering: .relaxed)
    }

    /// Marks one piece of work, counted by ``enter()``, as finished.
    ///
    /// When the count reaches zero, every pending notification block is submitted, once, in registration
    /// order, and every waiter returns. A `leave` without a matching `enter` is a programming error and
    /// stops the process (SEMANTICS C28).
    public func leave() {
        let remaining = count.wrappingSubtract(1, ordering: .sequentiallyConsistent).newValue
        if remaining == 0 {
            if observers.load(ordering: .sequentiallyConsistent) > 0 { fire() }
        } else if remaining < 0 {
            misuse("Unbalanced WorkGroup.leave(): leave() called more times than enter()")
        }
    }

    private func fire() {
        lock.lock()
        // Someone may have entered again since our leave; the matching leave will fire instead. A fire
        // already submitting takes whatever this one would.
        guard !firing else {
            lock.unlock()
            return
        }
        firing = true
        while count.load(ordering: .acquiring) == 0, !(notifications.isEmpty && waiters.isEmpty) {
            let due = notifications
            let woken = waiters
            observers.wrappingSubtract(due.count + woken.count, ordering: .relaxed)
            notifications.removeAll()
            waiters.removeAll()
            for waiter in woken { waiter.wake() }
            lock.unlock()
            for waiter in woken { waiter.parker.unpark() }
            for (queue, work) in due { queue.submit(work) }
            lock.lock()
        }
        firing = false
        lock.unlock()
    }

    /// Submits `work` to `queue` once the group is empty: at once if it already is, otherwise when the
    /// count next reaches zero. Runs once, on `queue` (SEMANTICS C27).
    ///
    /// - Parameters:
    ///   - queue: Where `work` runs.
    ///   - flags: `.barrier` submits it as a barrier.
    ///   - work: The block.
    public func notify(queue: WorkQueue, flags: WorkItem.Flags = [], execute work: @escaping @Sendable () -> Void) {
        register(queue, flags.contains(.barrier) ? .barrier(work) : .block(work))
    }

    /// Submits `workItem` to `queue` once the group is empty (see ``notify(queue:flags:execute:)``).
    public func notify(queue: WorkQueue, work workItem: WorkItem) {
        register(queue, .item(workItem))
    }

    private func register(_ queue: WorkQueue, _ work: Work) {
        lock.lock()
        observers.wrappingAdd(1, ordering: .sequentiallyConsistent)
        // Notifications still to be submitted (a fire is under way, or the leave that emptied the group is
        // about to start one) go first: this one waits its turn behind them (C27).
        if count.load(ordering: .sequentiallyConsistent) == 0 && !firing && notifications.isEmpty {
            observers.wrappingSubtract(1, ordering: .relaxed)
            lock.unlock()
            queue.submit(work)
            return
        }
        notifications.append((queue, work))
        lock.unlock()
    }

    /// Blocks until the group is empty; returns at once if it already is (SEMANTICS C26).
    public func wait() {
        _ = wait(deadline: nil)
    }

    /// Blocks until the group is empty or `timeout` passes.
    ///
    /// - Returns: `.success` if the group emptied, `.timedOut` otherwise; the count is left as it was.
    ///   A deadline already in the past returns `.timedOut` at once for a non-empty group (SEMANTICS C26).
    public func wait(timeout: ContinuousClock.Instant) -> TimeoutResult {
        wait(deadline: timeout)
    }

    /// Blocks until the group is empty or `timeout` has elapsed from now.
    public func wait(timeout: Duration) -> TimeoutResult {
        wait(deadline: .now + timeout)
    }

    private func wait(deadline: ContinuousClock.Instant?) -> TimeoutResult {
        if count.load(ordering: .acquiring) == 0 { return .success }
        if let deadline, deadline <= .now { return .timedOut }
        let context = ThreadContext.current
        let waiter = context.waiter.reset()
        lock.lock()
        observers.wrappingAdd(1, ordering: .sequentiallyConsistent)
        if count.load(ordering: .sequentiallyConsistent) == 0 {
            observers.wrappingSubtract(1, ordering: .relaxed)
            lock.unlock()
            return .success
        }
        waiters.append(waiter)
        lock.unlock()
        context.willBlock()
        defer { context.didUnblock() }
        return blockUntilWoken(waiter, deadline: deadline, lock: lock) { [self] in
            waiters.removeAll { $0 === waiter }
            observers.wrappingSubtract(1, ordering: .relaxed)
        }
    }
}

/// Parks until `waiter` is woken (under `lock`) or `deadline` passes; on timeout runs `remove` under `lock`
/// unless the wake-up won the race.
func blockUntilWoken(
    _ waiter: Waiter,
    deadline: ContinuousClock.Instant?,
    lock: Lock,
    spin: Int = 0,
    remove: () -> Void
) -> TimeoutResult {
    while true {
        let gotPermit: Bool
        if let deadline {
            gotPermit = waiter.parker.park(until: deadline, spin: spin)
        } else {
            waiter.parker.park(spin: spin)
            gotPermit = true
        }
        if waiter.isWoken { return .success }
        if gotPermit || deadline == nil { continue }
        lock.lock()
        if waiter.isWoken {
            lock.unlock()
            return .success
        }
        if !gotPermit, let deadline, deadline <= .now {
            remove()
            lock.unlock()
            return .timedOut
        }
        lock.unlock()
    }
}
