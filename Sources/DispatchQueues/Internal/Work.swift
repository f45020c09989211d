/// A unit of work as queues store it: an enum held inline in a ring buffer, so that submitting a block
/// costs no allocation beyond the closure's own context.
enum Work: Sendable {
    /// A plain block.
    case block(@Sendable () -> Void)
    /// A block submitted with the barrier flag.
    case barrier(@Sendable () -> Void)
    /// A block submitted with a group: the group was entered at submission and is left after the block.
    case group(@Sendable () -> Void, WorkGroup, barrier: Bool)
    /// A work item (its flags say whether it is a barrier).
    case item(WorkItem)
    /// A `sync` request whose caller is blocked waiting for it.
    case sync(SyncRequest)
    /// A drain token: a child queue asking its target for a turn.
    case drain(WorkQueue)
    /// Library code's own job object (the I/O layer reuses its operation objects as jobs).
    case job(any QueueJob)
    /// A `concurrentPerform` helper.
    case apply(ApplyContext)
    /// Re-targeting of an active queue, run as a barrier between blocks.
    case retarget(WorkQueue)
    /// An `asyncAfter` block released by the timer scheduler, possibly a little before its deadline.
    case timer(TimerRelease)

    var isBarrier: Bool {
        switch self {
        case .barrier, .retarget: return true
        case .group(_, _, let barrier): return barrier
        case .item(let item): return item.flags.contains(.barrier)
        case .sync(let request): return request.barrier
        case .timer(let release): return release.work.isBarrier
        case .block, .drain, .job, .apply: return false
        }
    }
}

/// A job that library code enqueues without wrapping it in a closure.
///
/// The I/O layer enqueues one completion handler per finished chunk from the engine thread; making its
/// own operation object conform and enqueueing it with ``WorkQueue/enqueue(_:)`` costs no allocation.
package protocol QueueJob: AnyObject, Sendable {
    /// Runs the job, once, on a thread the queue chose.
    func run()
}

/// A growable ring buffer of ``Work``, moved in and out, never copied.
struct WorkDeque: ~Copyable {
    private var storage: UnsafeMutablePointer<Work>?
    private var mask = -1
    private var head = 0
    private(set) var count = 0

    init() {}

    deinit {
        guard let storage else { return }
        var index = head
        for _ in 0..<count {
            (storage + index).deinitialize(count: 1)
            index = (index + 1) & mask
        }
        storage.deallocate()
    }

    var isEmpty: Bool { count == 0 }

    /// Whether the first element is a barrier; `false` when empty.
    var firstIsBarrier: Bool {
        guard count > 0, let storage else { return false }
        return storage[head].isBarrier
    }

    /// Whether the first element is a re-targeting; `false` when empty.
    var firstIsRetarget: Bool {
        guard count > 0, let storage else { return false }
        if case .retarget = storage[head] { return true }
        return false
    }

    mutating func append(_ work: consuming Work) {
        if count == mask + 1 { grow() }
        (storage.unsafelyUnwrapped + ((head + count) & mask)).initialize(to: work)
        count += 1
    }

    mutating func prepend(_ work: consuming Work) {
        if count == mask + 1 { grow() }
        head = (head - 1) & mask
        (storage.unsafelyUnwrapped + head).initialize(to: work)
        count += 1
    }

    mutating func popFirst() -> Work? {
        guard count > 0 else { return nil }
        let work = (storage.unsafelyUnwrapped + head).move()
        head = (head + 1) & mask
        count -= 1
        return work
    }

    /// Moves up to `limit` elements from the front into `buffer`; returns how many.
    mutating func moveFront(into buffer: UnsafeMutablePointer<Work>, limit: Int) -> Int {
        let n = min(limit, count)
        guard n > 0, let storage else { return 0 }
        let firstRun = min(n, mask + 1 - head)
        buffer.moveInitialize(from: storage + head, count: firstRun)
        if firstRun < n {
            (buffer + firstRun).moveInitialize(from: storage, count: n - firstRun)
        }
        head = (head + n) & mask
        count -= n
        return n
    }

    /// Puts `n` elements of `buffer` back at the front, in order.
    mutating func moveBackToFront(from buffer: UnsafeMutablePointer<Work>, count n: Int) {
        var i = n - 1
        while i >= 0 {
            prepend((buffer + i).move())
            i -= 1
        }
    }

    private mutating func grow() {
        let oldCapacity = mask + 1
        let newCapacity = max(16, oldCapacity * 2)
        let fresh = UnsafeMutablePointer<Work>.allocate(capacity: newCapacity)
        if let storage {
            let firstRun = min(count, oldCapacity - head)
            fresh.moveInitialize(from: storage + head, count: firstRun)
            if firstRun < count {
                (fresh + firstRun).moveInitialize(from: storage, count: count - firstRun)
            }
            storage.deallocate()
        }
        storage = fresh
        mask = newCapacity - 1
        head = 0
    }
}
