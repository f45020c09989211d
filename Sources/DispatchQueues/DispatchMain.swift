import URing

/// Turns the calling thread into the main queue's drainer and never returns.
///
/// Call it once, from the program's main thread, after setting up work; blocks submitted to
/// ``WorkQueue/main`` before the call wait for it (SEMANTICS C19). The process ends when some block calls
/// `exit`. Unlike libdispatch on Linux, which hands the main queue to pool workers after
/// `dispatch_main()`, main-queue blocks keep running on this one thread, so code that must stay on the
/// main thread can rely on it. Calling it twice is a programming error.
public func dispatchMain() -> Never {
    MainRunner.shared.run()
}

/// The main queue's only target: a FIFO drained by the thread in ``dispatchMain()``.
final class MainRunner: @unchecked Sendable {
    static let shared = MainRunner()

    private let lock = Lock()
    private var items = WorkDeque()
    private var drainer: ThreadContext?

    /// Whether some thread has called ``dispatchMain()``.
    var hasDrainer: Bool {
        lock.lock()
        defer { lock.unlock() }
        return drainer != nil
    }

    func push(_ work: consuming Work) {
        lock.lock()
        items.append(work)
        let parker = drainer?.parker
        lock.unlock()
        parker?.unpark()
    }

    func run() -> Never {
        let context = ThreadContext.current
        lock.lock()
        if drainer != nil { misuse("dispatchMain() called twice") }
        drainer = context
        lock.unlock()
        context.isMainDrainer = true
        while true {
            lock.lock()
            let work = items.popFirst()
            lock.unlock()
            if let work {
                WorkQueue.mainRoot.runRootWork(work, context: context)
            } else {
                context.parker.park()
            }
        }
    }
}
