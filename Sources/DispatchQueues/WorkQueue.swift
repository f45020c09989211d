import Synchronization
import URing

/// A queue of blocks, run in FIFO order by this module's worker pool: the counterpart of the toolchain's
/// `DispatchQueue`, with the same method names.
///
/// A *serial* queue runs one block at a time, in submission order. A *concurrent* queue starts blocks in
/// submission order and may run many at once; a barrier block on it waits for every earlier block, runs
/// alone, and holds later blocks back until it returns. Separate queues run concurrently with each other.
///
/// Every queue runs its blocks *through its target*: a queue without an explicit target targets the global
/// queue of its quality of service, and a queue that targets a serial queue is serialised by it, so the
/// effective concurrency of a hierarchy is the smallest width along the chain (SEMANTICS C12).
///
/// Blocks are `@Sendable` closures; each runs exactly once, on a pool thread (or, for the main queue, on
/// the thread that called ``dispatchMain()``), unless the queue is released while inactive or suspended,
/// which is a programming error.
public final class WorkQueue: @unchecked Sendable {
    /// Options for creating a queue.
    public struct Attributes: OptionSet, Sendable {
        /// The raw bits.
        public let rawValue: UInt8

        /// Creates attributes from raw bits.
        public init(rawValue: UInt8) {
            self.rawValue = rawValue
        }

        /// The queue may run several blocks at once (the default is serial).
        public static let concurrent = Attributes(rawValue: 1 << 0)
        /// Blocks submitted before ``WorkQueue/activate()`` are held, not run.
        public static let initiallyInactive = Attributes(rawValue: 1 << 1)
    }

    /// Quality-of-service classes, mapped onto the four global queues.
    ///
    /// `userInteractive` and `userInitiated` share the high-priority global queue, `default` and
    /// `unspecified` the default one, `utility` the low one; `background` has its own (SEMANTICS C20).
    public enum QoSClass: Sendable {
        /// Mapped to the high-priority global queue.
        case userInteractive
        /// Mapped to the high-priority global queue.
        case userInitiated
        /// The default global queue.
        case `default`
        /// Mapped to the low-priority global queue.
        case utility
        /// The background global queue.
        case background
        /// The default global queue.
        case unspecified

        var priorityIndex: Int {
            switch self {
            case .userInteractive, .userInitiated: return 0
            case .default, .unspecified: return 1
            case .utility: return 2
            case .background: return 3
            }
        }
    }

    /// The four global-queue priorities of the C API (`DISPATCH_QUEUE_PRIORITY_*`).
    public enum GlobalQueuePriority: Sendable {
        /// `DISPATCH_QUEUE_PRIORITY_HIGH` (2).
        case high
        /// `DISPATCH_QUEUE_PRIORITY_DEFAULT` (0).
        case `default`
        /// `DISPATCH_QUEUE_PRIORITY_LOW` (-2).
        case low
        /// `DISPATCH_QUEUE_PRIORITY_BACKGROUND` (`INT16_MIN`).
        case background
    }

    /// A key for ``WorkQueue/setSpecific(key:value:)``. Keys compare by identity, as C keys compare as
    /// pointers; a queue keeps the keys it stores alive, so an identity is never reused while in use.
    public final class SpecificKey<Value: Sendable>: Sendable {
        /// Creates a new, distinct key.
        public init() {}
    }

    enum Kind {
        case serial
        case concurrent
        case root(Int)
        case mainRoot
    }

    /// The label given at creation; `""` if none (SEMANTICS C15).
    public let label: String
    let kind: Kind
    /// Serial queues run one block at a time, in order (the main queue included); concurrent and global
    /// queues do not. The I/O layer delivers straight onto a serial queue, which keeps order by itself.
    package let isSerial: Bool
    let isCustom: Bool

    // Guarded by `lock`.
    let lock = Lock()
    var items = WorkDeque()
    var target: WorkQueue?
    var suspendCount = 0
    var isActive: Bool
    /// Serial: 1 while a drainer (or an inline `sync`) owns the queue. Concurrent: drainer slots in use.
    var drainers = 0
    /// Concurrent: blocks running, including inline `sync` blocks.
    var inflight = 0
    var barrierRunning = false
    var specifics: [ObjectIdentifier: (key: AnyObject, value: any Sendable)] = [:]
    /// Mirrors `suspendCount` so that a serial drain notices a suspension between blocks without the lock.
    let suspendHint = Atomic<Int>(0)

    /// Creates a queue.
    ///
    /// - Parameters:
    ///   - label: A name for debugging; ``label`` returns it.
    ///   - qos: Chooses the global queue used as target when `target` is `nil`.
    ///   - attributes: `.concurrent` for a concurrent queue; `.initiallyInactive` to hold blocks until
    ///     ``activate()``.
    ///   - target: The queue this queue's blocks run through; `nil` means the global queue of `qos`.
    public init(label: String, qos: QoSClass = .unspecified, attributes: Attributes = [], target: WorkQueue? = nil) {
        self.label = label
        let concurrent = attributes.contains(.concurrent)
        kind = concurrent ? .concurrent : .serial
        isSerial = !concurrent
        isCustom = true
        isActive = !attributes.contains(.initiallyInactive)
        self.target = target ?? WorkQueue.globalQueues[qos.priorityIndex]
    }

    private init(label: String, kind: Kind, target: WorkQueue?) {
        self.label = label
        self.kind = kind
        switch kind {
        case .serial:
            isSerial = true
            isCustom = true
        case .concurrent, .root, .mainRoot:
            isSerial = false
            isCustom = false
        }
        isActive = true
        self.target = target
    }

    deinit {
        guard isCustom else { return }
        lock.lock()
        let suspended = suspendCount > 0
        let inactive = !isActive
        lock.unlock()
        // SEMANTICS C9 and C11: libdispatch crashes on both; held blocks would otherwise vanish silently.
        if suspended { misuse("WorkQueue '\(label)' released while suspended (resume it before the last release)") }
        if inactive { misuse("WorkQueue '\(label)' released while inactive (activate it before the last release)") }
    }

    // MARK: Global and main queues

    static let globalQueues: [WorkQueue] = [
        WorkQueue(label: "com.apple.root.user-initiated-qos", kind: .root(0), target: nil),
        WorkQueue(label: "com.apple.root.default-qos", kind: .root(1), target: nil),
        WorkQueue(label: "com.apple.root.utility-qos", kind: .root(2), target: nil),
        WorkQueue(label: "com.apple.root.background-qos", kind: .root(3), target: nil),
    ]

    static let mainRoot = WorkQueue(label: "main-thread-root", kind: .mainRoot, target: nil)

    /// The serial queue drained by the thread that calls ``dispatchMain()``.
    ///
    /// Until ``dispatchMain()`` runs, blocks submitted here wait (SEMANTICS C19). Its label is
    /// `"com.apple.main-thread"`, as libdispatch's. ``suspend()`` and ``resume()`` do nothing on it.
    public static let main = WorkQueue(label: "com.apple.main-thread", kind: .serial, target: mainRoot)

    /// The global concurrent queue of a quality-of-service class.
    ///
    /// Global queues run blocks on the worker pool as soon as a worker is free, higher priorities first.
    /// Barriers on them are ordinary blocks, and ``suspend()``, ``resume()`` and ``setTarget(queue:)`` do
    /// nothing (SEMANTICS C7, C10, C13).
    public static func global(qos: QoSClass = .default) -> WorkQueue {
        globalQueues[qos.priorityIndex]
    }

    /// The global queue of one of the C API's four priorities (SEMANTICS C20).
    public static func global(priority: GlobalQueuePriority) -> WorkQueue {
        switch priority {
        case .high: return globalQueues[0]
        case .default: return globalQueues[1]
        case .low: return globalQueues[2]
        case .background: return globalQueues[3]
        }
    }

    var isMain: Bool { self === WorkQueue.main }

    // MARK: Submitting

    /// Submits `work` to run once on this queue and returns at once.
    ///
    /// This overload has no other parameters so that `queue.async` can be passed where a function of type
    /// `(@escaping @Sendable () -> Void) -> Void` is expected: the I/O and data layers use that to run
    /// handlers "later, on the caller's queue".
    public func async(execute work: @escaping @Sendable () -> Void) {
        submit(.block(work))
    }

    /// Submits `work` with flags: `.barrier` makes it a barrier on a concurrent queue (SEMANTICS C6, C7).
    /// `work` runs once, on this queue, and receives nothing.
    public func async(flags: WorkItem.Flags, execute work: @escaping @Sendable () -> Void) {
        submit(flags.contains(.barrier) ? .barrier(work) : .block(work))
    }

    /// Submits `work` as part of `group`: the group is entered now and left after `work` has run once
    /// (SEMANTICS C26).
    public func async(group: WorkGroup, flags: WorkItem.Flags = [], execute work: @escaping @Sendable () -> Void) {
        group.enter()
        submit(.group(work, group, barrier: flags.contains(.barrier)))
    }

    /// Submits a work item; it runs once unless cancelled first (SEMANTICS C32). Its `.barrier` flag is
    /// honoured.
    public func async(execute workItem: WorkItem) {
        submit(.item(workItem))
    }

    /// Submits a job object from library code (the I/O layer, the engine's completion path) without a
    /// closure allocation; `job.run()` is called once on this queue.
    package func enqueue(_ job: any QueueJob) {
        submit(.job(job))
    }

    /// Submits several jobs in order with one lock round trip.
    package func enqueue(contentsOf jobs: [any QueueJob]) {
        var works = jobs.map { Work.job($0) }
        submit(contentsOf: &works)
    }

    @inline(__always)
    func submit(_ work: consuming Work) {
        switch kind {
        case .root(let priority): WorkerPool.shared.push(work, priority: priority)
        case .mainRoot: MainRunner.shared.push(work)
        case .serial, .concurrent: enqueueLocal(work)
        }
    }

    /// Submits in order, emptying `works`.
    func submit(contentsOf works: inout [Work]) {
        switch kind {
        case .root(let priority):
            WorkerPool.shared.push(contentsOf: &works, priority: priority)
        case .mainRoot:
            for work in works { MainRunner.shared.push(work) }
            works.removeAll()
        case .serial, .concurrent:
            lock.lock()
            for work in works { items.append(work) }
            let spawn = drainersToSpawnLocked()
            let target = self.target
            lock.unlock()
            works.removeAll()
            spawnDrainers(spawn, on: target)
        }
    }

    private func enqueueLocal(_ work: consuming Work) {
        lock.lock()
        items.append(work)
        let spawn = drainersToSpawnLocked()
        let target = spawn > 0 ? self.target : nil
        lock.unlock()
        spawnDrainers(spawn, on: target)
    }

    @inline(__always)
    func spawnDrainers(_ count: Int, on target: WorkQueue?) {
        guard count > 0, let target else { return }
        for _ in 0..<count { target.submit(.drain(self)) }
    }

    // MARK: Suspension and activation

    /// Stops the queue from starting new blocks until a matching ``resume()``; a running block is not
    /// interrupted (SEMANTICS C8). Counts: two suspends need two resumes. Does nothing on the main and
    /// global queues (C10).
    public func suspend() {
        guard isCustom && !isMain else { return }
        lock.lock()
        suspendCount += 1
        suspendHint.store(suspendCount, ordering: .relaxed)
        lock.unlock()
    }

    /// Undoes one ``suspend()``; after the last one, held blocks run in order.
    ///
    /// Resuming more often than suspending, or resuming an inactive queue that was never suspended (use
    /// ``activate()``), is a programming error and stops the process (SEMANTICS C9, C11).
    public func resume() {
        guard isCustom && !isMain else { return }
        lock.lock()
        guard suspendCount > 0 else {
            let inactive = !isActive
            lock.unlock()
            if inactive {
                misuse("WorkQueue.resume() on inactive queue '\(label)': use activate() to start it")
            }
            misuse("Over-resume of WorkQueue '\(label)': resume() called more times than suspend()")
        }
        suspendCount -= 1
        suspendHint.store(suspendCount, ordering: .relaxed)
        let spawn = drainersToSpawnLocked()
        let target = self.target
        lock.unlock()
        spawnDrainers(spawn, on: target)
    }

    /// Starts a queue created with `.initiallyInactive`: held blocks start running, in order. A second call
    /// does nothing (SEMANTICS C11).
    public func activate() {
        guard isCustom else { return }
        lock.lock()
        guard !isActive else {
            lock.unlock()
            return
        }
        isActive = true
        let spawn = drainersToSpawnLocked()
        let target = self.target
        lock.unlock()
        spawnDrainers(spawn, on: target)
    }

    // MARK: Targets

    /// Makes the queue run its blocks through `queue` (`nil`: the default global queue).
    ///
    /// Meant for inactive queues. On an active queue the change is made as a barrier: blocks submitted
    /// before it run through the old target, blocks after it through the new one (SEMANTICS C13). Does
    /// nothing on the main and global queues. A cycle is a programming error and stops the process.
    public func setTarget(queue: WorkQueue?) {
        guard isCustom && !isMain else { return }
        let newTarget = queue ?? WorkQueue.globalQueues[1]
        var cursor: WorkQueue? = newTarget
        while let current = cursor {
            if current === self {
                misuse("WorkQueue.setTarget: making '\(label)' target '\(newTarget.label)' creates a cycle")
            }
            cursor = current.currentTarget
        }
        lock.lock()
        if !isActive || (items.isEmpty && drainers == 0 && inflight == 0) {
            target = newTarget
            lock.unlock()
            return
        }
        lock.unlock()
        submit(.retarget(newTarget))
    }

    var currentTarget: WorkQueue? {
        guard isCustom else { return nil }
        lock.lock()
        defer { lock.unlock() }
        return target
    }

    // MARK: Queue-specific values

    /// Associates `value` with `key` on this queue; `nil` removes it (SEMANTICS C16).
    ///
    /// A replaced or removed value is released asynchronously on a global queue, as libdispatch calls the
    /// old destructor there, so that a value's `deinit` never runs under the queue's lock. The global
    /// queues do not support values: calling this on one is a programming error (C17).
    public func setSpecific<Value>(key: SpecificKey<Value>, value: Value?) {
        if !isCustom {
            misuse("WorkQueue.setSpecific: global queue '\(label)' does not support queue-specific values")
        }
        let id = ObjectIdentifier(key)
        lock.lock()
        let old: (key: AnyObject, value: any Sendable)?
        if let value {
            old = specifics.updateValue((key, value), forKey: id)
        } else {
            old = specifics.removeValue(forKey: id)
        }
        lock.unlock()
        if let oldValue = old?.value {
            WorkQueue.globalQueues[1].async { withExtendedLifetime(oldValue) {} }
        }
    }

    /// The value for `key` on this queue only; the target chain is not consulted (SEMANTICS C18). `nil`
    /// on global queues.
    public func getSpecific<Value>(key: SpecificKey<Value>) -> Value? {
        guard isCustom else { return nil }
        lock.lock()
        defer { lock.unlock() }
        return specifics[ObjectIdentifier(key)]?.value as? Value
    }

    /// The value for `key` on the queue running the current block, or else on the first queue of its
    /// target chain that has one; `nil` outside any queue and on global queues (SEMANTICS C3, C18).
    public static func getSpecific<Value>(key: SpecificKey<Value>) -> Value? {
        guard let frame = ThreadContext.current.frame else { return nil }
        var cursor: WorkQueue? = frame.pointee.queue
        while let queue = cursor {
            if let value = queue.getSpecific(key: key) { return value }
            cursor = queue.currentTarget
        }
        return nil
    }
}
