import Synchronization
import URing

extension WorkQueue {
    /// Calls `work(i)` exactly once for every `i` in `0..<iterations`, in parallel on the worker pool, and
    /// returns when every call has returned (SEMANTICS C24).
    ///
    /// The calling thread takes part, so this finishes even when every worker is busy (C25), and nested
    /// calls are fine. Indices are handed out in chunks from a shared counter; helpers are queued on the
    /// global queue of the current block's priority (the default one outside any queue). `work` is called
    /// concurrently from several threads, with distinct indices; as with `DispatchQueue`, it is not
    /// required to be `@Sendable`, so it must itself be safe to call that way.
    public static func concurrentPerform(iterations: Int, execute work: (Int) -> Void) {
        guard iterations > 0 else { return }
        let root = currentRoot()
        ApplyContext.run(iterations: iterations, helpersOn: root, helpers: WorkerPool.shared.cores - 1, work)
    }

    /// `dispatch_apply` on this queue: calls `work(i)` once for every `i` in `0..<iterations` through this
    /// queue and returns when all calls have returned (SEMANTICS C24, C25).
    ///
    /// On a serial queue the calls run in order 0, 1, ..., on the calling thread when the queue is idle,
    /// as one `sync` (so calling it on the serial queue you are running on stops the process, as `sync`
    /// does). On a concurrent queue they run in parallel through the queue (and its target chain); called
    /// from a block already running on that queue, they run serially on the caller. On a global queue it
    /// is ``concurrentPerform(iterations:execute:)`` on that queue's priority.
    public func concurrentPerform(iterations: Int, execute work: (Int) -> Void) {
        guard iterations > 0 else { return }
        switch kind {
        case .root, .mainRoot:
            ApplyContext.run(iterations: iterations, helpersOn: self, helpers: WorkerPool.shared.cores - 1, work)
        case .serial:
            let context = ThreadContext.current
            checkSyncAllowed(barrier: false, context: context, operation: "concurrentPerform")
            runSync(barrier: false, context: context) {
                for index in 0..<iterations { work(index) }
            }
        case .concurrent:
            let context = ThreadContext.current
            if context.holds(self, exclusively: false) {
                for index in 0..<iterations { work(index) }
                return
            }
            checkSyncAllowed(barrier: false, context: context, operation: "concurrentPerform")
            runSync(barrier: false, context: context) {
                ApplyContext.run(iterations: iterations, helpersOn: self, helpers: drainerLimit - 1, work)
            }
        }
    }

    /// The global queue at the end of the current block's target chain.
    private static func currentRoot() -> WorkQueue {
        var cursor = ThreadContext.current.frame?.pointee.queue
        while let queue = cursor {
            if case .root = queue.kind { return queue }
            cursor = queue.currentTarget
        }
        return globalQueues[1]
    }
}

/// One `concurrentPerform` in progress: a shared index counter and a completion count.
///
/// The body is referenced by pointer into the caller's stack and only called for indices below
/// `iterations`; the caller returns only after `completed` reaches `iterations`, so a helper that arrives
/// late touches nothing but this object.
final class ApplyContext: @unchecked Sendable {
    private let next = Atomic<Int>(0)
    private let completed = Atomic<Int>(0)
    private let iterations: Int
    private let chunk: Int
    private let body: UnsafeRawPointer
    private let caller: Parker

    private init(iterations: Int, chunk: Int, body: UnsafeRawPointer, caller: Parker) {
        self.iterations = iterations
        self.chunk = chunk
        self.body = body
        self.caller = caller
    }

    static func run(iterations: Int, helpersOn queue: WorkQueue, helpers: Int, _ work: (Int) -> Void) {
        let helpers = max(0, min(helpers, iterations - 1))
        if helpers == 0 {
            for index in 0..<iterations { work(index) }
            return
        }
        // About 16 chunks per thread: few enough that the shared counter stays cold, enough to balance
        // uneven iterations.
        let chunk = max(1, iterations / ((helpers + 1) * 16))
        let context = ThreadContext.current
        withoutActuallyEscaping(work) { escapable in
            var closure = escapable
            withUnsafePointer(to: &closure) { pointer in
                let apply = ApplyContext(
                    iterations: iterations,
                    chunk: chunk,
                    body: UnsafeRawPointer(pointer),
                    caller: context.parker
                )
                var works = [Work](repeating: .apply(apply), count: helpers)
                queue.submit(contentsOf: &works)
                apply.help(context: context)
                if apply.completed.load(ordering: .acquiring) < iterations {
                    context.willBlock()
                    while apply.completed.load(ordering: .acquiring) < iterations {
                        context.parker.park()
                    }
                    context.didUnblock()
                }
            }
        }
    }

    /// Takes chunks of indices and runs them until none are left.
    func help(context: ThreadContext) {
        while true {
            let start = next.wrappingAdd(chunk, ordering: .relaxed).oldValue
            if start >= iterations { return }
            let end = min(start + chunk, iterations)
            invokeRange(body, start, end)
            let done = completed.wrappingAdd(end - start, ordering: .acquiringAndReleasing).newValue
            if done == iterations {
                caller.unpark()
                return
            }
        }
    }
}

/// Calls the `(Int) -> Void` closure at `pointer` for `start..<end`. Out of line for the same reason as
/// ``invokeBorrowed(_:)``.
@inline(never)
private func invokeRange(_ pointer: UnsafeRawPointer, _ start: Int, _ end: Int) {
    // One copy of the closure per chunk, not per index: each copy is a retain and a release.
    let body = pointer.assumingMemoryBound(to: ((Int) -> Void).self).pointee
    var index = start
    while index < end {
        body(index)
        index += 1
    }
}
