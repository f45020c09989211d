import Synchronization
import URing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Runs a block exactly once for the life of the object: the counterpart of `dispatch_once`, which the
/// Swift overlay lacks (SEMANTICS C31).
///
/// After the first ``perform(_:)`` has finished, later calls cost one atomic load. Callers that arrive
/// while the block runs block until it has finished.
public final class Once: @unchecked Sendable {
    private static let idle = 0
    private static let running = 1
    private static let done = 2

    private let state = Atomic<Int>(0)
    private let lock = Lock()
    // Guarded by `lock`.
    private var owner = pthread_t()
    private var waiters: [Waiter] = []

    /// Creates a predicate whose block has not run.
    public init() {}

    /// Whether a block has finished running.
    public var isDone: Bool { state.load(ordering: .acquiring) == Self.done }

    /// Runs `body` if no call has run one yet, else waits until that call has finished.
    ///
    /// `body` runs once in total, on the thread of the first caller. Calling `perform` on the same `Once`
    /// from inside `body` would wait for itself: it stops the process with a message instead
    /// (SEMANTICS C31).
    public func perform(_ body: () -> Void) {
        if state.load(ordering: .acquiring) == Self.done { return }
        performSlow(body)
    }

    private func performSlow(_ body: () -> Void) {
        lock.lock()
        switch state.load(ordering: .acquiring) {
        case Self.done:
            lock.unlock()
            return
        case Self.running:
            if pthread_equal(owner, pthread_self()) != 0 {
                lock.unlock()
                misuse("Once.perform called recursively from its own block: this would deadlock")
            }
            let context = ThreadContext.current
            let waiter = context.waiter.reset()
            waiters.append(waiter)
            lock.unlock()
            context.willBlock()
            _ = blockUntilWoken(waiter, deadline: nil, lock: lock) {}
            context.didUnblock()
        default:
            owner = pthread_self()
            state.store(Self.running, ordering: .relaxed)
            lock.unlock()
            body()
            lock.lock()
            state.store(Self.done, ordering: .releasing)
            let woken = waiters
            waiters.removeAll()
            for waiter in woken { waiter.wake() }
            lock.unlock()
            for waiter in woken { waiter.parker.unpark() }
        }
    }
}
