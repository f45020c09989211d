import Synchronization
import URing

/// A block with a lifecycle: it can be submitted, performed, cancelled, waited for and observed; the
/// counterpart of `DispatchWorkItem` (SEMANTICS C32).
///
/// Each time the item is run (by a queue it was submitted to, or by ``perform()``), its block runs unless
/// the item was cancelled first. The first run to finish, cancelled or not, completes the item: waiters
/// return and ``notify(queue:flags:execute:)`` blocks are submitted, once each. A cancelled item that is
/// never run never completes.
public final class WorkItem: @unchecked Sendable {
    /// Flags for submitting blocks and work items.
    public struct Flags: OptionSet, Sendable {
        /// The raw bits.
        public let rawValue: UInt8

        /// Creates flags from raw bits.
        public init(rawValue: UInt8) {
            self.rawValue = rawValue
        }

        /// On a custom concurrent queue, the block waits for earlier blocks and runs alone; elsewhere it is
        /// an ordinary block (SEMANTICS C6, C7).
        public static let barrier = Flags(rawValue: 1 << 0)
    }

    /// The flags given at creation.
    public let flags: Flags
    private let block: @Sendable () -> Void
    private let cancelled = Atomic<Bool>(false)
    private let lock = Lock()
    // Guarded by `lock`.
    private var completed = false
    /// `complete` is submitting notifications outside the lock: new ones join the end of its line.
    private var delivering = false
    private var notifications: [(WorkQueue, Work)] = []
    private var waiters: [Waiter] = []

    /// Creates a work item.
    ///
    /// - Parameters:
    ///   - flags: `.barrier` to run it as a barrier when submitted to a concurrent queue.
    ///   - block: Runs at most once per run of the item, and receives nothing: on the queue the item was
    ///     submitted to, or on the calling thread for ``perform()``; never once the item is cancelled.
    public init(flags: Flags = [], block: @escaping @Sendable () -> Void) {
        self.flags = flags
        self.block = block
    }

    /// Runs the item on the calling thread now: the block, unless cancelled, then completion.
    public func perform() {
        run()
    }

    func run() {
        if !cancelled.load(ordering: .acquiring) { block() }
        complete()
    }

    private func complete() {
        lock.lock()
        guard !completed else {
            lock.unlock()
            return
        }
        completed = true
        var due = notifications
        let woken = waiters
        notifications.removeAll()
        waiters.removeAll()
        for waiter in woken { waiter.wake() }
        delivering = !due.isEmpty
        lock.unlock()
        for waiter in woken { waiter.parker.unpark() }
        // Notifications registered meanwhile were queued behind these (C27): submitted next, in order.
        while !due.isEmpty {
            for (queue, work) in due { queue.submit(work) }
            lock.lock()
            due = notifications
            notifications.removeAll()
            delivering = !due.isEmpty
            lock.unlock()
        }
    }

    /// Keeps the block from running if it has not started; a running block is not interrupted.
    public func cancel() {
        cancelled.store(true, ordering: .releasing)
    }

    /// Whether ``cancel()`` has been called.
    public var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

    /// Submits `work` to `queue`, once, after the item completes (at once if it already has).
    public func notify(queue: WorkQueue, flags: Flags = [], execute work: @escaping @Sendable () -> Void) {
        register(queue, flags.contains(.barrier) ? .barrier(work) : .block(work))
    }

    /// Submits `workItem` to `queue`, once, after this item completes (at once if it already has); it runs
    /// there as any submitted item does.
    public func notify(queue: WorkQueue, execute workItem: WorkItem) {
        register(queue, .item(workItem))
    }

    private func register(_ queue: WorkQueue, _ work: Work) {
        lock.lock()
        if completed && !delivering {
            lock.unlock()
            queue.submit(work)
            return
        }
        notifications.append((queue, work))
        lock.unlock()
    }

    /// Blocks until the item has completed.
    public func wait() {
        _ = wait(deadline: nil)
    }

    /// Blocks until the item has completed or `timeout` passes.
    public func wait(timeout: ContinuousClock.Instant) -> TimeoutResult {
        wait(deadline: timeout)
    }

    /// Blocks until the item has completed or `timeout` has elapsed from now.
    public func wait(timeout: Duration) -> TimeoutResult {
        wait(deadline: .now + timeout)
    }

    private func wait(deadline: ContinuousClock.Instant?) -> TimeoutResult {
        let context = ThreadContext.current
        let waiter = context.waiter.reset()
        lock.lock()
        if completed {
            lock.unlock()
            return .success
        }
        if let deadline, deadline <= .now {
            lock.unlock()
            return .timedOut
        }
        waiters.append(waiter)
        lock.unlock()
        context.willBlock()
        defer { context.didUnblock() }
        return blockUntilWoken(waiter, deadline: deadline, lock: lock) { [self] in
            waiters.removeAll { $0 === waiter }
        }
    }
}
