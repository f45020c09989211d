import Synchronization
import URing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What a thread is running right now: one frame per queue it holds, innermost first.
///
/// Frames live on the stack of the thread that pushed them. They answer three questions: which queue is
/// current (for ``WorkQueue/getSpecific(key:)``), which queues this thread holds exclusively (so that a
/// `sync` onto one of them traps instead of deadlocking, SEMANTICS C4), and which concurrent-queue drain
/// slots to hand back when the thread is about to block. `inherited` links the frames of a thread that is
/// blocked in `sync` while a worker runs its block, so that ownership checks see through the handoff.
struct Frame {
    unowned(unsafe) let queue: WorkQueue
    /// A serial queue, or a concurrent queue while a barrier runs.
    var exclusive: Bool
    /// This frame is a drainer of a concurrent queue and holds one of its drainer slots.
    var holdsDrainerSlot: Bool
    /// The slot was handed back because the thread blocked.
    var released = false
    var parent: UnsafeMutablePointer<Frame>?
    var inherited: UnsafeMutablePointer<Frame>?
}

/// Walks `start` and everything reachable through `parent` and `inherited` links.
func anyFrame(
    from start: UnsafeMutablePointer<Frame>?,
    where predicate: (UnsafeMutablePointer<Frame>) -> Bool
)
    -> Bool
{
    var cursor = start
    while let frame = cursor {
        if predicate(frame) { return true }
        if let inherited = frame.pointee.inherited, anyFrame(from: inherited, where: predicate) { return true }
        cursor = frame.pointee.parent
    }
    return false
}

private let contextKey: pthread_key_t = {
    var key = pthread_key_t()
    let rc = pthread_key_create(&key) { raw in
        guard let raw else { return }
        Unmanaged<ThreadContext>.fromOpaque(raw).release()
    }
    precondition(rc == 0, "pthread_key_create failed: \(rc)")
    return key
}()

/// Per-thread state of the scheduler. Only its own thread touches it, except the parker.
final class ThreadContext: @unchecked Sendable {
    let parker: Parker
    let waiter: Waiter
    var frame: UnsafeMutablePointer<Frame>?
    /// A pool worker: blocking on it is compensated by waking or creating another worker.
    var isWorker = false
    /// The thread that runs `dispatchMain()`.
    var isMainDrainer = false
    /// Pool bookkeeping, guarded by the pool's lock.
    var inIdleList = false

    /// Whether this is the process's initial thread, asked once per thread and only when a `sync` onto
    /// the main queue needs to know.
    lazy var isProcessMainThread: Bool = isProcessInitialThread()

    init() {
        parker = Parker()
        waiter = Waiter(parker)
    }

    static var current: ThreadContext {
        if let raw = pthread_getspecific(contextKey) {
            return Unmanaged<ThreadContext>.fromOpaque(raw).takeUnretainedValue()
        }
        let context = ThreadContext()
        pthread_setspecific(contextKey, Unmanaged.passRetained(context).toOpaque())
        return context
    }

    /// Runs `body` with a new innermost frame for `queue`.
    @inline(__always)
    func withFrame<R>(
        _ queue: WorkQueue,
        exclusive: Bool,
        holdsDrainerSlot: Bool = false,
        _ body: (UnsafeMutablePointer<Frame>) -> R
    ) -> R {
        withUnsafeTemporaryAllocation(of: Frame.self, capacity: 1) { buffer in
            let frame = buffer.baseAddress.unsafelyUnwrapped
            frame.initialize(
                to: Frame(
                    queue: queue,
                    exclusive: exclusive,
                    holdsDrainerSlot: holdsDrainerSlot,
                    parent: self.frame,
                    inherited: nil
                )
            )
            let saved = self.frame
            self.frame = frame
            defer {
                self.frame = saved
                frame.deinitialize(count: 1)
            }
            return body(frame)
        }
    }

    /// Whether this thread (or a thread blocked in `sync` on its behalf) holds `queue`; with `exclusively`,
    /// only holds that keep every other block of `queue` out count.
    func holds(_ queue: WorkQueue, exclusively: Bool) -> Bool {
        anyFrame(from: frame) { $0.pointee.queue === queue && (!exclusively || $0.pointee.exclusive) }
    }

    /// Called before this thread blocks in one of the module's waits. Hands concurrent-queue drainer slots
    /// back (so other blocks of those queues keep running) and lets the pool replace this worker.
    func willBlock() {
        var cursor = frame
        while let current = cursor {
            if current.pointee.holdsDrainerSlot && !current.pointee.released {
                current.pointee.released = true
                current.pointee.queue.releaseDrainerSlot()
            }
            cursor = current.pointee.parent
        }
        if isWorker { WorkerPool.shared.workerWillBlock() }
    }

    /// Called after a wait that began with ``willBlock()`` ends.
    func didUnblock() {
        if isWorker { WorkerPool.shared.workerDidUnblock() }
    }
}

/// A blocked waiter: the thread's parker and the flag that the waking side sets.
///
/// Each thread has one, reused for every wait: a thread waits on one thing at a time, and a waiter is in
/// no list once its wait has returned (the waker removed it, or the timed-out waiter removed itself).
final class Waiter: @unchecked Sendable {
    let parker: Parker
    /// Set by the waker under the lock of the object waited on, after removing the waiter from its list;
    /// atomic so that the woken thread can check it without that lock.
    let woken = Atomic<Bool>(false)

    init(_ parker: Parker) {
        self.parker = parker
    }

    /// Readies the waiter for a new wait.
    func reset() -> Waiter {
        woken.store(false, ordering: .relaxed)
        return self
    }

    func wake() {
        woken.store(true, ordering: .releasing)
    }

    var isWoken: Bool { woken.load(ordering: .acquiring) }
}

/// Stops the process because of a programming error, printing `message`.
///
/// `fatalError`, not `preconditionFailure`: optimised builds drop a precondition's message, and a misuse
/// report that does not name the misuse is the garbled crash the design rules out.
func misuse(_ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) -> Never {
    fatalError(message(), file: file, line: line)
}
