import Synchronization
import SystemPackage
import URing

/// Arms one engine timeout. The only place the module talks to the engine about time: the handler runs on
/// the engine's ring thread with `true` when the deadline passed, `false` when the timeout was removed.
func armEngineTimeout(
    at deadline: ContinuousClock.Instant,
    _ handler: @escaping @Sendable (Bool) -> Void
)
    -> OperationID
{
    IOEngine.shared.timeout(deadline: deadline) { completion in handler(completion.error == nil) }
}

/// Removes a timeout armed by ``armEngineTimeout(at:_:)``; its handler then runs with `false`.
func disarmEngineTimeout(_ id: OperationID) {
    IOEngine.shared.removeTimeout(id) { _ in }
}

private func nanoseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
}

/// Every pending `asyncAfter`, in one heap, behind at most one engine timeout.
///
/// Arming an engine operation per `asyncAfter` would cost a submission and a ring wake-up each; instead
/// the heap is ordered by *fire time* (deadline plus leeway) and a single engine timeout is kept armed for
/// the earliest one. When it fires, on the ring thread, the due entries are taken out and submitted to
/// their queues, grouped so that each queue is locked once, and the timeout is re-armed for the new
/// earliest entry. A new entry that fires earlier than the armed timeout arms a new one and removes the
/// old.
///
/// ## Lead
/// Between the engine timeout expiring and the block starting there are two thread wake-ups (the ring
/// thread, then a worker), several microseconds each on a virtual machine. libdispatch pays one, because
/// its event thread goes on to run the block itself; our ring thread must never run user code. So the
/// engine timeout is armed a little *before* the fire time, by `lead`, the 90th percentile of how long
/// that path has actually taken (tracked as it goes), capped at ``maximumLead``. Entries released early travel as
/// ``TimerRelease`` items: the worker that picks one up waits out the rest (at most the lead, usually
/// less than a microsecond) before running the block.
///
/// Never early: a block runs only once `ContinuousClock.now` is at or past its deadline, whatever the
/// engine reports and whatever the lead.
final class TimerScheduler: @unchecked Sendable {
    static let shared = TimerScheduler()

    /// Cap on the lead; a wake-up path slower than this is a loaded machine, not something to predict.
    static let maximumLead: Int64 = 50_000

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

    /// Nanoseconds between an engine timeout's expiry and its blocks reaching a worker, averaged.
    private let leadNanos = Atomic<Int64>(0)

    private let lock = Lock()
    // Guarded by `lock`.
    private var heap: [Entry] = []
    private var sequence: UInt64 = 0
    /// Fire time of the entry the armed engine timeout is for.
    private var armedFireAt: ContinuousClock.Instant?
    private var armedID: OperationID?
    private var generation: UInt64 = 0
    /// Entries added since the heap was last swept of timer-source fires that can only be ignored.
    private var pushedSinceSweep = 0

    /// A timer source that is rescheduled leaves its old fire in the heap until that fire's time (a
    /// watchdog pushed back 60 s on every event kept one entry per event for a minute). Once the entries
    /// added since the last sweep are half the heap, and it holds this many, the stale ones are swept
    /// out: O(n) every n/2 additions, and stale entries stay fewer than live ones plus this many.
    static let sweepThreshold = 1024

    /// Entries waiting, stale ones included (for tests).
    var pendingCount: Int { lock.withLock { heap.count } }

    private var lead: Duration { .nanoseconds(leadNanos.load(ordering: .relaxed)) }

    func schedule(_ work: Work, on queue: WorkQueue, deadline: ContinuousClock.Instant, leeway: Duration) {
        lock.lock()
        pushedSinceSweep += 1
        if heap.count >= Self.sweepThreshold && 2 * pushedSinceSweep >= heap.count { sweep() }
        sequence &+= 1
        let fireAt = deadline + max(leeway, .zero)
        push(Entry(fireAt: fireAt, deadline: deadline, sequence: sequence, queue: queue, work: work))
        let rearm = armedFireAt.map { fireAt < $0 } ?? true
        var stale: OperationID?
        var armGeneration: UInt64 = 0
        if rearm {
            stale = armedID
            armedID = nil
            armedFireAt = fireAt
            generation &+= 1
            armGeneration = generation
        }
        lock.unlock()
        if rearm { arm(fireAt - lead, generation: armGeneration) }
        if let stale { disarmEngineTimeout(stale) }
    }

    private func arm(_ expiry: ContinuousClock.Instant, generation armGeneration: UInt64) {
        let id = armEngineTimeout(at: expiry) { [self] fired in
            if fired { fire(generation: armGeneration, expiry: expiry) }
        }
        lock.lock()
        if generation == armGeneration && armedFireAt != nil { armedID = id }
        lock.unlock()
    }

    /// Runs on the ring thread: releases what is due and re-arms. Short, never runs user code.
    private func fire(generation firedGeneration: UInt64, expiry: ContinuousClock.Instant) {
        let now = ContinuousClock.now
        let lead = self.lead
        var due: [(WorkQueue, Work)] = []
        lock.lock()
        if generation == firedGeneration {
            armedFireAt = nil
            armedID = nil
        }
        // Due: the fire time is within the lead; riders: the deadline is (the leeway lets them go now).
        while let top = heap.first, top.fireAt - lead <= now || top.deadline - lead <= now {
            let entry = pop()
            due.append((entry.queue, .timer(TimerRelease(deadline: entry.deadline, expiry: expiry, work: entry.work))))
        }
        var next: ContinuousClock.Instant?
        var nextGeneration: UInt64 = 0
        if let top = heap.first, armedFireAt.map({ top.fireAt < $0 }) ?? true {
            next = top.fireAt
            armedFireAt = top.fireAt
            generation &+= 1
            nextGeneration = generation
        }
        lock.unlock()
        submit(&due)
        if let next { arm(next - lead, generation: nextGeneration) }
    }

    /// Feeds one observed expiry-to-worker delay into the lead.
    ///
    /// A stochastic quantile tracker: up by nine steps when a sample is above the lead, down by one when it
    /// is below, so the lead settles where one sample in ten is above it, the 90th percentile. Aiming at
    /// the median would leave half the timers late; aiming higher costs more spinning per timer.
    func observe(arrivalAfterExpiry delay: Duration) {
        let sample = nanoseconds(delay)
        let old = leadNanos.load(ordering: .relaxed)
        let updated = sample > old ? min(old + 9 * Self.leadStep, Self.maximumLead) : max(old - Self.leadStep, 0)
        // Racing updates may lose a step; the tracker does not need to be exact.
        leadNanos.store(updated, ordering: .relaxed)
    }

    /// Nanoseconds per tracker step.
    static let leadStep: Int64 = 50

    /// Submits due entries, one lock round trip per run of entries sharing a queue.
    private func submit(_ due: inout [(WorkQueue, Work)]) {
        var index = 0
        var batch: [Work] = []
        while index < due.count {
            let queue = due[index].0
            while index < due.count && due[index].0 === queue {
                batch.append(due[index].1)
                index += 1
            }
            queue.submit(contentsOf: &batch)
        }
    }

    /// Drops the fires of timer sources that can only be ignored, and rebuilds the heap. Lock held. An
    /// engine timeout armed for a dropped entry fires into an empty slot and re-arms for the new first.
    private func sweep() {
        pushedSinceSweep = 0
        let before = heap.count
        heap.removeAll { entry in
            if case .job(let job) = entry.work, let fire = job as? TimerFireJob { return fire.isStale }
            return false
        }
        guard heap.count != before, heap.count > 1 else { return }
        for index in stride(from: heap.count / 2 - 1, through: 0, by: -1) { siftDown(from: index) }
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
        siftDown(from: 0)
        return top
    }

    private func siftDown(from start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            guard left < heap.count else { break }
            var smallest = left
            if left + 1 < heap.count && heap[left + 1].firesBefore(heap[left]) { smallest = left + 1 }
            guard heap[smallest].firesBefore(heap[parent]) else { break }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }
}

/// A timer's block, released to its queue by the engine up to the lead before its deadline.
final class TimerRelease: Sendable {
    let deadline: ContinuousClock.Instant
    /// When the engine timeout that released it expired.
    let expiry: ContinuousClock.Instant
    let work: Work

    init(deadline: ContinuousClock.Instant, expiry: ContinuousClock.Instant, work: Work) {
        self.deadline = deadline
        self.expiry = expiry
        self.work = work
    }

    /// Reports how long the release took to reach a thread, then waits out what is left before the
    /// deadline (at most the lead) on the CPU: a sleep would cost the very wake-up the lead avoids.
    func waitUntilDue() {
        var now = ContinuousClock.now
        TimerScheduler.shared.observe(arrivalAfterExpiry: expiry.duration(to: now))
        while now < deadline { now = .now }
    }
}
