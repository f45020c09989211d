import Synchronization
import URing

/// A counting semaphore: the counterpart of `DispatchSemaphore`.
///
/// Named `WorkSemaphore`, not `Semaphore`: the Swift `Glibc` module (re-exported by Foundation) already
/// declares a public `Semaphore` type alias, so a plain `Semaphore` would be ambiguous in every file that
/// imports Foundation.
///
/// ``wait()`` decrements the value and blocks while it is negative; ``signal()`` increments it and wakes
/// the longest waiter, so waiters are served in FIFO order (SEMANTICS C29). A `wait` that does not block
/// and a `signal` that wakes nobody are a single compare-and-swap; a blocked waiter sleeps in the kernel
/// at once (spinning first was measured slower for a two-thread ping-pong on a shared two-core machine:
/// the spinner takes the CPU the signalling thread needs).
public final class WorkSemaphore: @unchecked Sendable {
    private let lock = Lock()
    private let initialValue: Int
    /// Negative: minus the number of waiters. Changed by compare-and-swap on the fast paths (a `wait` that
    /// does not block, a `signal` that wakes nobody) and under `lock` otherwise, so that a waiter's
    /// decrement and its registration are one step for any `signal` that finds the value negative.
    private let value: Atomic<Int>
    // Guarded by `lock`.
    private var waiters: [Waiter] = []
    private var firstWaiter = 0

    /// Creates a semaphore with a starting value.
    ///
    /// A negative value is a programming error and stops the process (C returns `NULL`, SEMANTICS C29).
    /// Releasing the semaphore while its value is below `value` (someone still owes a signal, or waits)
    /// also stops the process, as libdispatch does (C30).
    public init(value: Int) {
        precondition(value >= 0, "WorkSemaphore(value:) with a negative value (\(value))")
        initialValue = value
        self.value = Atomic(value)
    }

    deinit {
        lock.lock()
        let current = value.load(ordering: .acquiring)
        lock.unlock()
        precondition(
            current >= initialValue,
            "WorkSemaphore deallocated while in use: value \(current) is below its initial value \(initialValue)"
        )
    }

    /// Increments the value, waking the longest-waiting thread if there is one.
    ///
    /// - Returns: Non-zero if a waiter was woken, zero otherwise (SEMANTICS C29).
    @discardableResult
    public func signal() -> Int {
        var current = value.load(ordering: .relaxed)
        while current >= 0 {
            let (exchanged, original) = value.compareExchange(
                expected: current,
                desired: current + 1,
                ordering: .releasing
            )
            if exchanged { return 0 }
            current = original
        }
        lock.lock()
        value.wrappingAdd(1, ordering: .acquiringAndReleasing)
        guard firstWaiter < waiters.count else {
            lock.unlock()
            return 0
        }
        let waiter = waiters[firstWaiter]
        firstWaiter += 1
        if firstWaiter == waiters.count {
            waiters.removeAll(keepingCapacity: true)
            firstWaiter = 0
        }
        waiter.wake()
        lock.unlock()
        waiter.parker.unpark()
        return 1
    }

    /// Decrements the value, blocking until a ``signal()`` if it becomes negative.
    public func wait() {
        _ = wait(deadline: nil)
    }

    /// Decrements the value, blocking until a ``signal()`` or `timeout`.
    ///
    /// - Returns: `.success`, or `.timedOut` after undoing the decrement (SEMANTICS C29).
    public func wait(timeout: ContinuousClock.Instant) -> TimeoutResult {
        wait(deadline: timeout)
    }

    /// Decrements the value, blocking until a ``signal()`` or until `timeout` has elapsed from now.
    public func wait(timeout: Duration) -> TimeoutResult {
        wait(deadline: .now + timeout)
    }

    private func wait(deadline: ContinuousClock.Instant?) -> TimeoutResult {
        var current = value.load(ordering: .relaxed)
        while current > 0 {
            let (exchanged, original) = value.compareExchange(
                expected: current,
                desired: current - 1,
                ordering: .acquiring
            )
            if exchanged { return .success }
            current = original
        }
        if let deadline, deadline <= .now { return .timedOut }
        let context = ThreadContext.current
        let waiter = context.waiter.reset()
        lock.lock()
        if value.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue >= 0 {
            // A signal came in since the fast path.
            lock.unlock()
            return .success
        }
        waiters.append(waiter)
        lock.unlock()
        context.willBlock()
        defer { context.didUnblock() }
        return blockUntilWoken(waiter, deadline: deadline, lock: lock) { [self] in
            if let index = waiters[firstWaiter...].firstIndex(where: { $0 === waiter }) {
                waiters.remove(at: index)
            }
            value.wrappingAdd(1, ordering: .relaxed)
        }
    }
}
