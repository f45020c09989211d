import Synchronization
import URing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The threads that run every queue except the main queue.
///
/// ## Sizing and overcommit
/// The pool aims to keep exactly `cores` threads *running* work. Threads are created lazily, up to
/// `cores`, when work arrives and nobody is idle. When a worker is about to block in one of this module's
/// waits (`sync` that cannot run inline, `WorkSemaphore.wait`, `WorkGroup.wait`, `WorkItem.wait`, `Once`
/// contention, a `concurrentPerform` caller waiting for helpers) it tells the pool, which no longer
/// counts it as running and, if work is pending, wakes or creates another worker in its place. When the
/// wait ends the thread counts as running again; the pool is briefly oversubscribed and shrinks back
/// because a worker only picks new work while fewer than `cores` are running. Surplus idle threads exit
/// after a few seconds.
///
/// This is compensation, not libdispatch's per-queue overcommit flag: every queue gets it, so work that
/// blocks on other work never starves the pool, and no queue can create threads merely by being busy
/// (unlike overcommit queues, which get a thread per drained queue). What it cannot see is blocking
/// outside this module (a `read(2)`, a foreign lock): such blocks keep their worker, exactly as on
/// libdispatch's non-overcommit roots; the I/O layer never blocks workers because it waits in the engine.
/// The thread count is capped at `maxThreads`; past it, waits can deadlock as in libdispatch.
///
/// ## Priorities
/// The four global queues are four FIFOs; an idle worker takes from the highest non-empty one. Thread
/// priorities are not changed (that needs privileges on Linux).
final class WorkerPool: @unchecked Sendable {
    static let shared = WorkerPool()

    /// Running workers the pool aims for: the processors this process may run on (``usableProcessorCount()``).
    let cores: Int
    /// Hard cap on threads, as libdispatch's 255-thread workqueue limit.
    let maxThreads = 255

    private let lock = Lock()
    private var queueHigh = WorkDeque()
    private var queueDefault = WorkDeque()
    private var queueLow = WorkDeque()
    private var queueBackground = WorkDeque()
    private var pending = 0
    /// Workers running work and not blocked.
    private var running = 0
    private var threads = 0
    /// Wake-ups (or thread creations) issued whose worker has not yet taken the lock.
    private var wakesInFlight = 0
    /// Workers spinning before they park; they will see new work without a wake-up.
    private var spinning = 0
    private var idle: [ThreadContext] = []
    /// `pending`, readable without the lock by spinning workers.
    private let pendingHint = Atomic<Int>(0)

    /// How long an idle worker polls for work before parking, in polls. A wake-up through the kernel costs
    /// tens of microseconds on a loaded machine; a worker that polls for a few microseconds catches the
    /// next item of a steady stream without one.
    private static let idleSpin = 2_000

    private init() {
        cores = usableProcessorCount()
    }

    // MARK: Submission

    /// Adds `work` to the global FIFO of `priority` (0 = high ... 3 = background).
    func push(_ work: consuming Work, priority: Int) {
        lock.lock()
        appendLocked(work, priority: priority)
        let wake = takeWakeLocked()
        lock.unlock()
        perform(wake)
    }

    /// Adds several items with one lock round trip (timer batches, engine completions).
    func push(contentsOf works: inout [Work], priority: Int) {
        guard !works.isEmpty else { return }
        lock.lock()
        for work in works { appendLocked(work, priority: priority) }
        var wakes: [Wake] = []
        while true {
            let wake = takeWakeLocked()
            if case .none = wake { break }
            wakes.append(wake)
        }
        lock.unlock()
        works.removeAll()
        for wake in wakes { perform(wake) }
    }

    private func appendLocked(_ work: consuming Work, priority: Int) {
        switch priority {
        case 0: queueHigh.append(work)
        case 1: queueDefault.append(work)
        case 2: queueLow.append(work)
        default: queueBackground.append(work)
        }
        pending += 1
        pendingHint.store(pending, ordering: .relaxed)
    }

    private func popLocked() -> (Work, Int)? {
        guard pending > 0 else { return nil }
        pending -= 1
        pendingHint.store(pending, ordering: .relaxed)
        if let w = queueHigh.popFirst() { return (w, 0) }
        if let w = queueDefault.popFirst() { return (w, 1) }
        if let w = queueLow.popFirst() { return (w, 2) }
        if let w = queueBackground.popFirst() { return (w, 3) }
        preconditionFailure("WorkerPool: pending count out of sync")
    }

    private enum Wake {
        case none
        case unpark(Parker)
        case spawn
    }

    private func takeWakeLocked() -> Wake {
        guard pending > wakesInFlight + spinning, running + wakesInFlight < cores else { return .none }
        if let context = idle.popLast() {
            context.inIdleList = false
            wakesInFlight += 1
            return .unpark(context.parker)
        }
        if threads < maxThreads {
            threads += 1
            wakesInFlight += 1
            return .spawn
        }
        return .none
    }

    private func perform(_ wake: Wake) {
        switch wake {
        case .none: break
        case .unpark(let parker): parker.unpark()
        case .spawn: spawnWorker()
        }
    }

    // MARK: Blocking compensation

    func workerWillBlock() {
        lock.lock()
        running -= 1
        let wake = takeWakeLocked()
        lock.unlock()
        perform(wake)
    }

    func workerDidUnblock() {
        lock.lock()
        running += 1
        lock.unlock()
    }

    // MARK: Workers

    /// Starts a worker thread; `threads` and `wakesInFlight` already count it.
    ///
    /// When it cannot be started and no other worker exists, nothing would ever run the queued work: the
    /// pool tries again for a while (a thread of the process may be ending, as libdispatch, which tries
    /// forever, expects), then stops the process with the reason instead of hanging. With other workers,
    /// they take the work, as before.
    private func spawnWorker() {
        var attempts = 0
        while true {
            var thread = pthread_t()
            let rc = pthread_create(
                &thread,
                nil,
                { _ in
                    WorkerPool.shared.workerMain()
                    return nil
                },
                nil
            )
            if rc == 0 {
                pthread_detach(thread)
                return
            }
            lock.lock()
            threads -= 1
            wakesInFlight -= 1
            let stranded = threads == 0 && pending > 0
            if stranded && rc == EAGAIN && attempts < Self.spawnAttempts {
                threads += 1
                wakesInFlight += 1
                lock.unlock()
                attempts += 1
                usleep(Self.spawnPause)
                continue
            }
            lock.unlock()
            if stranded { cannotStartThread("a worker thread for queued work", error: rc) }
            return
        }
    }

    /// Attempts, and the pause in microseconds between them, to start a worker when there is none: 100 ms
    /// in all, after which a limit on threads is not a passing one.
    private static let spawnAttempts = 50
    private static let spawnPause: UInt32 = 2_000

    private func workerMain() {
        let context = ThreadContext.current
        context.isWorker = true
        lock.lock()
        wakesInFlight -= 1
        while true {
            if pending > 0 && running < cores, let (work, priority) = popLocked() {
                running += 1
                let wake = takeWakeLocked()
                lock.unlock()
                perform(wake)
                WorkQueue.globalQueues[priority].runRootWork(work, context: context)
                lock.lock()
                running -= 1
                continue
            }
            // Nothing to do: poll a little, then park.
            if Self.idleSpin > 0 && running < cores {
                spinning += 1
                lock.unlock()
                var polls = 0
                while polls < Self.idleSpin && pendingHint.load(ordering: .relaxed) == 0 { polls += 1 }
                lock.lock()
                spinning -= 1
                if pending > 0 && running < cores { continue }
            }
            let surplus = threads > cores
            idle.append(context)
            context.inIdleList = true
            lock.unlock()
            let woken: Bool
            if surplus {
                woken = context.parker.park(until: .now + .seconds(5))
            } else {
                context.parker.park()
                woken = true
            }
            lock.lock()
            if context.inIdleList {
                // Timed out or spurious: nobody counted a wake-up for us.
                if let index = idle.firstIndex(where: { $0 === context }) { idle.remove(at: index) }
                context.inIdleList = false
                if !woken && threads > cores && pending == 0 {
                    threads -= 1
                    lock.unlock()
                    return
                }
            } else {
                wakesInFlight -= 1
            }
        }
    }
}
