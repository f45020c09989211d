import Synchronization
import SystemPackage
import URing

private func nanoseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
}

/// Arms one engine timeout. The only place the module talks to the engine about time: the handler runs on
/// the engine's ring thread with `true` when the deadline passed, `false` when the timeout was removed.
func armEngineTimeout(at deadline: ContinuousClock.Instant, _ handler: @escaping @Sendable (Bool) -> Void)
    -> OperationID
{
    IOEngine.shared.timeout(deadline: deadline) { completion in handler(completion.error == nil) }
}

/// Removes a timeout armed by ``armEngineTimeout(at:_:)``; its handler then runs with `false`.
func disarmEngineTimeout(_ id: OperationID) {
    IOEngine.shared.removeTimeout(id) { _ in }
}

/// Every pending `asyncAfter`, in one heap, behind at most one engine timeout.
///
/// Arming an engine operation per `asyncAfter` would cost a submission and a ring wake-up each; instead
/// the heap is ordered by *fire time* (deadline plus leeway) and a single engine timeout is kept armed for
/// the earliest one. When it fires, on the ring thread, every entry whose fire time has come, and also
/// every entry whose deadline has passed (the leeway lets it ride along), is taken out and submitted to its
/// queue, grouped so that each queue is locked once; then the timeout is re-armed for the new earliest
/// entry. A new entry that fires earlier than the armed timeout arms a new one and removes the old.
///
/// Never early: an entry is released only when `ContinuousClock.now` is at or past its deadline, whatever
/// the engine reports.
final class TimerScheduler: @unchecked Sendable {
    static let shared = TimerScheduler()

    private struct Entry {
        var fireAt: ContinuousClock.Instant
        var deadline: ContinuousClock.Instant
        var sequence: UInt64
        var queue: WorkQueue
        var work: Work

        func firesBefore(_ other: Entry) -> Bool {
            fireAt < other.fireAt || (fireAt == other.fireAt && sequence < other.sequence)
        }
    }

    /// Reference point for ``nextFireHint``.
    private let epoch = ContinuousClock.now
    /// Nanoseconds from `epoch` to the armed fire time (`Int64.max`: none), readable without the lock.
    private let nextFireHint = Atomic<Int64>(Int64.max)

    private let lock = Lock()
    // Guarded by `lock`.
    private var heap: [Entry] = []
    private var sequence: UInt64 = 0
    private var armedAt: ContinuousClock.Instant? {
        didSet { nextFireHint.store(armedAt.map { nanoseconds(epoch.duration(to: $0)) } ?? Int64.max, ordering: .relaxed) }
    }
    private var armedID: OperationID?
    private var generation: UInt64 = 0

    func schedule(_ work: Work, on queue: WorkQueue, deadline: ContinuousClock.Instant, leeway: Duration) {
        lock.lock()
        sequence &+= 1
        let fireAt = deadline + max(leeway, .zero)
        push(Entry(fireAt: fireAt, deadline: deadline, sequence: sequence, queue: queue, work: work))
        let rearm = armedAt.map { fireAt < $0 } ?? true
        var stale: OperationID?
        var armGeneration: UInt64 = 0
        if rearm {
            stale = armedID
            armedID = nil
            armedAt = fireAt
            generation &+= 1
            armGeneration = generation
        }
        lock.unlock()
        if rearm { arm(fireAt, generation: armGeneration) }
        if let stale { disarmEngineTimeout(stale) }
    }

    private func arm(_ fireAt: ContinuousClock.Instant, generation armGeneration: UInt64) {
        let id = armEngineTimeout(at: fireAt) { [self] fired in
            if fired { fire(generation: armGeneration) }
        }
        lock.lock()
        if generation == armGeneration && armedAt != nil { armedID = id }
        lock.unlock()
    }

    /// Runs on the ring thread: releases what is due and re-arms. Short, never runs user code.
    private func fire(generation firedGeneration: UInt64) {
        let now = ContinuousClock.now
        var due: [Entry] = []
        lock.lock()
        if generation == firedGeneration {
            armedAt = nil
            armedID = nil
        }
        while let top = heap.first, top.fireAt <= now || top.deadline <= now {
            due.append(pop())
        }
        var next: ContinuousClock.Instant?
        var nextGeneration: UInt64 = 0
        if let top = heap.first, armedAt.map({ top.fireAt < $0 }) ?? true {
            next = top.fireAt
            armedAt = top.fireAt
            generation &+= 1
            nextGeneration = generation
        }
        lock.unlock()
        submit(&due)
        if let next { arm(next, generation: nextGeneration) }
    }

    /// Whether the armed timeout fires within `window` of now, before or after: an idle worker that keeps
    /// polling through that window picks the timer's block up without a kernel wake-up.
    func fireIsImminent(window: Int64) -> Bool {
        let next = nextFireHint.load(ordering: .relaxed)
        guard next != Int64.max else { return false }
        let now = nanoseconds(epoch.duration(to: .now))
        return next - now < window && now - next < window
    }

    /// Submits due entries, one lock round trip per run of entries sharing a queue.
    private func submit(_ due: inout [Entry]) {
        var index = 0
        var batch: [Work] = []
        while index < due.count {
            let queue = due[index].queue
            while index < due.count && due[index].queue === queue {
                batch.append(due[index].work)
                index += 1
            }
            queue.submit(contentsOf: &batch)
        }
    }

    private func push(_ entry: Entry) {
        heap.append(entry)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].firesBefore(heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private func pop() -> Entry {
        let last = heap.count - 1
        heap.swapAt(0, last)
        let top = heap.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            guard left < heap.count else { break }
            var smallest = left
            if left + 1 < heap.count && heap[left + 1].firesBefore(heap[left]) { smallest = left + 1 }
            guard heap[smallest].firesBefore(heap[parent]) else { break }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
        return top
    }
}
