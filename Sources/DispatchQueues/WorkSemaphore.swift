import URing

/// A counting semaphore: the counterpart of `DispatchSemaphore`.
///
/// Named `WorkSemaphore`, not `Semaphore`: the Swift `Glibc` module (re-exported by Foundation) already
/// declares a public `Semaphore` type alias, so a plain `Semaphore` would be ambiguous in every file that
/// imports Foundation.
///
/// ``wait()`` decrements the value and blocks while it is negative; ``signal()`` increments it and wakes
/// the longest waiter, so waiters are served in FIFO order (SEMANTICS C29). A blocked waiter spins for a
/// few microseconds before it parks, which keeps a two-thread ping-pong off the kernel's wake-up path.
public final class WorkSemaphore: @unchecked Sendable {
    /// Polls of a waiter before it parks.
    static let waitSpin = 4_000

    private let lock = Lock()
    private let initialValue: Int
    // Guarded by `lock`. Negative: minus the number of waiters.
    private var value: Int
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
        self.value = value
    }

    deinit {
        lock.lock()
        let current = value
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
        lock.lock()
        value += 1
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
        waiter.woken = true
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
        lock.lock()
        if value > 0 {
            value -= 1
            lock.unlock()
            return .success
        }
        if let deadline, deadline <= .now {
            lock.unlock()
            return .timedOut
        }
        let context = ThreadContext.current
        let waiter = Waiter(context.parker)
        value -= 1
        waiters.append(waiter)
        lock.unlock()
        context.willBlock()
        defer { context.didUnblock() }
        return blockUntilWoken(waiter, deadline: deadline, lock: lock, spin: Self.waitSpin) { [self] in
            if let index = waiters[firstWaiter...].firstIndex(where: { $0 === waiter }) {
                waiters.remove(at: index)
            }
            value += 1
        }
    }
}
