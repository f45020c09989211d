import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One thread's sleep and wake-up primitive: a permit that `unpark` grants and `park` consumes.
///
/// Every blocking operation of the module (sync waits, semaphores, groups, once, idle workers, the main
/// drainer) parks its own thread on its own parker, so wake-ups are targeted: waking one waiter never
/// wakes the rest. The state word makes `unpark` on a thread that is not asleep cost one atomic exchange
/// and no system call, and lets `park` poll briefly before it goes to the kernel where a caller asks. The sleeping itself uses raw POSIX objects (a
/// semaphore, and for timed waits a condition variable with its own mutex, which the package `Lock` does
/// not expose); they are used only on the slow path.
final class Parker: @unchecked Sendable {
    private static let empty = 0
    private static let notified = 1
    /// Asleep in `sem_wait`: woken by `sem_post`.
    private static let parkedOnSemaphore = 2
    /// Asleep in `pthread_cond_timedwait`: woken by the condition variable.
    private static let parkedOnCondition = 3

    private let state = Atomic<Int>(0)
    /// Untimed parks sleep on a POSIX semaphore: glibc's `sem_post`/`sem_wait` are a bare futex, about half
    /// the system calls of a mutex plus condition variable, which shows in a semaphore ping-pong.
    private let semaphore: UnsafeMutablePointer<sem_t>
    /// Timed parks use a condition variable on CLOCK_MONOTONIC (`sem_timedwait` only takes CLOCK_REALTIME,
    /// which can jump).
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let cond: UnsafeMutablePointer<pthread_cond_t>

    init() {
        semaphore = .allocate(capacity: 1)
        semaphore.initialize(to: sem_t())
        sem_init(semaphore, 0, 0)
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        var rc = pthread_mutex_init(mutex, nil)
        precondition(rc == 0, "pthread_mutex_init failed: \(rc)")
        cond = .allocate(capacity: 1)
        cond.initialize(to: pthread_cond_t())
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        rc = pthread_cond_init(cond, &attr)
        pthread_condattr_destroy(&attr)
        precondition(rc == 0, "pthread_cond_init failed: \(rc)")
    }

    deinit {
        sem_destroy(semaphore)
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        semaphore.deallocate()
        cond.deallocate()
        mutex.deallocate()
    }

    /// Grants the permit, waking the owner thread if it is parked.
    func unpark() {
        switch state.exchange(Self.notified, ordering: .acquiringAndReleasing) {
        case Self.parkedOnSemaphore:
            sem_post(semaphore)
        case Self.parkedOnCondition:
            // Taking the mutex orders this signal after the parker's transition into the wait.
            pthread_mutex_lock(mutex)
            pthread_mutex_unlock(mutex)
            pthread_cond_signal(cond)
        default:
            break
        }
    }

    /// Consumes the permit, sleeping until it is granted. May return spuriously: callers re-check their
    /// condition in a loop.
    func park(spin: Int = 0) {
        if consumePermit(spinning: spin) { return }
        guard
            state.compareExchange(
                expected: Self.empty,
                desired: Self.parkedOnSemaphore,
                ordering: .acquiringAndReleasing
            ).exchanged
        else {
            // Notified since the spin.
            state.store(Self.empty, ordering: .releasing)
            return
        }
        // Exactly one sem_post follows the unpark that moves us out of parkedOnSemaphore.
        while sem_wait(semaphore) != 0 {}
        state.store(Self.empty, ordering: .releasing)
    }

    /// Like ``park(spin:)`` but gives up at `deadline`. Returns `true` if the permit was consumed, `false`
    /// on timeout.
    func park(until deadline: ContinuousClock.Instant, spin: Int = 0) -> Bool {
        if consumePermit(spinning: spin) { return true }
        let remaining = ContinuousClock.now.duration(to: deadline)
        if remaining <= .zero {
            return state.compareExchange(expected: Self.notified, desired: Self.empty, ordering: .acquiring)
                .exchanged
        }
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let (seconds, attoseconds) = remaining.components
        // Round the nanoseconds up so that a wake-up by timeout is never before the deadline.
        var nanos = Int64(ts.tv_nsec) + (attoseconds + 999_999_999) / 1_000_000_000
        var secs = Int64(ts.tv_sec) + min(seconds, Int64(Int32.max))
        if nanos >= 1_000_000_000 {
            nanos -= 1_000_000_000
            secs += 1
        }
        ts.tv_sec = Int(secs)
        ts.tv_nsec = Int(nanos)
        pthread_mutex_lock(mutex)
        guard
            state.compareExchange(
                expected: Self.empty,
                desired: Self.parkedOnCondition,
                ordering: .acquiringAndReleasing
            ).exchanged
        else {
            state.store(Self.empty, ordering: .releasing)
            pthread_mutex_unlock(mutex)
            return true
        }
        var timedOut = false
        while true {
            let rc = pthread_cond_timedwait(cond, mutex, &ts)
            if state.compareExchange(expected: Self.notified, desired: Self.empty, ordering: .acquiringAndReleasing)
                .exchanged
            {
                break
            }
            if rc == ETIMEDOUT {
                timedOut = true
                break
            }
        }
        if timedOut {
            // Back to empty, unless an unpark slipped in after the last check: then take it.
            if state.exchange(Self.empty, ordering: .acquiringAndReleasing) == Self.notified {
                timedOut = false
            }
        }
        pthread_mutex_unlock(mutex)
        return !timedOut
    }

    @inline(__always)
    private func consumePermit(spinning: Int) -> Bool {
        if state.compareExchange(expected: Self.notified, desired: Self.empty, ordering: .acquiring).exchanged {
            return true
        }
        var i = 0
        while i < spinning {
            if state.load(ordering: .relaxed) == Self.notified,
                state.compareExchange(expected: Self.notified, desired: Self.empty, ordering: .acquiring).exchanged
            {
                return true
            }
            i += 1
        }
        return false
    }
}
