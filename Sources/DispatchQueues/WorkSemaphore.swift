import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A counting semaphore: the counterpart of `DispatchSemaphore`.
///
/// Named `WorkSemaphore`, not `Semaphore`: the Swift `Glibc` module (re-exported by Foundation) already
/// declares a public `Semaphore` type alias, so a plain `Semaphore` would be ambiguous in every file that
/// imports Foundation.
///
/// ``wait()`` decrements the value and blocks while it is negative; ``signal()`` increments it and wakes
/// one blocked waiter. It is libdispatch's design: the value is one atomic word, so a `wait` that does not
/// block and a `signal` that wakes nobody are a single atomic operation, and blocked waiters sleep on a
/// POSIX semaphore (a bare futex in glibc) that a `signal` posts once per waiter it owes. The kernel queues
/// futex sleepers in arrival order, so waiters are woken first-come first-served (SEMANTICS C29).
///
/// A waiter that would block, and is the only waiter, first polls for a signal for a few microseconds, *if
/// polling has been paying off* on this semaphore. (Only the sole waiter polls, so a poller never
/// overtakes a sleeper that came before it; a sleeper that came after could in principle beat the poller
/// to a post, but it needs a kernel wake-up to do so and the poller checks every few nanoseconds.) On an idle machine a two-thread ping-pong then never sleeps (well under a
/// microsecond per round trip instead of two futex wake-ups); on a loaded one polling loses (the poller
/// takes the CPU the signalling thread needs), the credit runs out, and waiters sleep at once, polling
/// only on one wait in 32 to notice when things improve.
public final class WorkSemaphore: @unchecked Sendable {
    private let initialValue: Int
    /// Negative: minus the number of blocked waiters (each owed one post).
    private let value: Atomic<Int>
    private let sleepers: UnsafeMutablePointer<sem_t>
    /// How many recent polls found a signal, capped; zero means waiters sleep at once.
    private let pollCredit = Atomic<Int>(1)
    private let waitsWithoutCredit = Atomic<Int>(0)

    /// Attempts to take a pending post per poll (`sem_trywait` is a user-space atomic in glibc).
    static let polls = 2_000

    /// Creates a semaphore with a starting value.
    ///
    /// A negative value is a programming error and stops the process (C returns `NULL`, SEMANTICS C29).
    /// Releasing the semaphore while its value is below `value` (someone still owes a signal, or waits)
    /// also stops the process, as libdispatch does (C30).
    public init(value: Int) {
        if value < 0 { misuse("WorkSemaphore(value:) with a negative value (\(value))") }
        initialValue = value
        self.value = Atomic(value)
        sleepers = .allocate(capacity: 1)
        sleepers.initialize(to: sem_t())
        sem_init(sleepers, 0, 0)
    }

    deinit {
        let current = value.load(ordering: .acquiring)
        if current < initialValue {
            misuse(
                "WorkSemaphore deallocated while in use: value \(current) is below its initial value \(initialValue)"
            )
        }
        sem_destroy(sleepers)
        sleepers.deallocate()
    }

    /// Increments the value, waking the longest-waiting thread if there is one.
    ///
    /// - Returns: Non-zero if a waiter was woken, zero otherwise (SEMANTICS C29).
    @discardableResult
    public func signal() -> Int {
        if value.wrappingAdd(1, ordering: .releasing).newValue > 0 { return 0 }
        sem_post(sleepers)
        return 1
    }

    /// Decrements the value, blocking until a ``signal()`` if it becomes negative.
    public func wait() {
        let after = value.wrappingSubtract(1, ordering: .acquiring).newValue
        if after >= 0 { return }
        if after == -1 && pollForSignal() { return }
        let context = ThreadContext.current
        context.willBlock()
        while sem_wait(sleepers) != 0 {}
        context.didUnblock()
    }

    /// Decrements the value, blocking until a ``signal()`` or `timeout`.
    ///
    /// - Returns: `.success`, or `.timedOut` after undoing the decrement (SEMANTICS C29).
    public func wait(timeout: ContinuousClock.Instant) -> TimeoutResult {
        let after = value.wrappingSubtract(1, ordering: .acquiring).newValue
        if after >= 0 { return .success }
        if after == -1 && timeout > .now && pollForSignal() { return .success }
        let context = ThreadContext.current
        context.willBlock()
        defer { context.didUnblock() }
        while true {
            let remaining = ContinuousClock.now.duration(to: timeout)
            if remaining > .zero {
                // sem_timedwait only takes CLOCK_REALTIME: wait for the remaining time measured on that
                // clock, then re-check the continuous clock, so a wall-clock step never makes us early.
                var deadline = timespec()
                clock_gettime(CLOCK_REALTIME, &deadline)
                let (seconds, attoseconds) = remaining.components
                var nanos = Int64(deadline.tv_nsec) + (attoseconds + 999_999_999) / 1_000_000_000
                var secs = Int64(deadline.tv_sec) + min(seconds, Int64(Int32.max))
                if nanos >= 1_000_000_000 {
                    nanos -= 1_000_000_000
                    secs += 1
                }
                deadline.tv_sec = Int(secs)
                deadline.tv_nsec = Int(nanos)
                if sem_timedwait(sleepers, &deadline) == 0 { return .success }
                if errno != ETIMEDOUT { continue }
                if ContinuousClock.now < timeout { continue }
            } else if sem_trywait(sleepers) == 0 {
                return .success
            }
            // Timed out: give the decrement back, unless a signal already counted on us, in which case its
            // post is on its way and is ours.
            var current = value.load(ordering: .relaxed)
            while current < 0 {
                let (exchanged, original) = value.compareExchange(
                    expected: current,
                    desired: current + 1,
                    ordering: .relaxed
                )
                if exchanged { return .timedOut }
                current = original
            }
            while sem_wait(sleepers) != 0 {}
            return .success
        }
    }

    /// Having decremented below zero, polls briefly for the post a `signal` owes us; adjusts the credit.
    private func pollForSignal() -> Bool {
        let credit = pollCredit.load(ordering: .relaxed)
        if credit == 0 && waitsWithoutCredit.wrappingAdd(1, ordering: .relaxed).newValue % 32 != 0 {
            return false
        }
        var polls = 0
        while polls < Self.polls {
            if sem_trywait(sleepers) == 0 {
                if credit < 4 { pollCredit.store(credit + 1, ordering: .relaxed) }
                return true
            }
            polls += 1
        }
        pollCredit.store(credit / 2, ordering: .relaxed)
        return false
    }

    /// Decrements the value, blocking until a ``signal()`` or until `timeout` has elapsed from now.
    public func wait(timeout: Duration) -> TimeoutResult {
        wait(timeout: .now + timeout)
    }
}
