import DispatchQueues
import Synchronization
import Testing

@Suite("Worker pool and concurrentPerform", .timeLimit(.minutes(1)))
struct PoolTests {
    // The pool must not starve when blocks block on other blocks (semaphores, sync, group waits).
    @Test("blocks waiting on later blocks do not starve the pool")
    func noStarvationSemaphores() {
        let blockers = 64
        let release = WorkSemaphore(value: 0)
        let group = WorkGroup()
        for _ in 0..<blockers {
            WorkQueue.global().async(group: group) { release.wait() }
        }
        // Queued behind 64 blocked blocks: runs only because blocked workers are replaced.
        WorkQueue.global().async(group: group) {
            for _ in 0..<blockers { release.signal() }
        }
        expectDone(group)
    }

    @Test("sync and group waits on workers do not starve the pool")
    func noStarvationSyncAndGroups() {
        let group = WorkGroup()
        let inner = WorkGroup()
        let serials = (0..<16).map { WorkQueue(label: "s\($0)") }
        for index in 0..<32 {
            WorkQueue.global().async(group: group) {
                let gate = WorkSemaphore(value: 0)
                // Busy serial queue: the sync is handed off and the worker blocks.
                serials[index % 16].async { _ = gate.wait(timeout: .milliseconds(5)) }
                let value = serials[index % 16].sync { index }
                #expect(value == index)
                WorkQueue.global().async(group: inner) {}
                #expect(inner.wait(timeout: patience) == .success)
            }
        }
        expectDone(group)
    }

    // A concurrent queue keeps running other blocks while some of its blocks are blocked.
    @Test("a concurrent queue's blocked blocks hand their slot over")
    func concurrentHandoff() {
        let queue = WorkQueue(label: "handoff", attributes: .concurrent)
        let count = 32
        let release = WorkSemaphore(value: 0)
        let group = WorkGroup()
        for _ in 0..<count { queue.async(group: group) { release.wait() } }
        queue.async(group: group) { for _ in 0..<count { release.signal() } }
        expectDone(group)
    }

    // C24: every index exactly once; zero iterations returns at once.
    @Test("concurrentPerform calls every index once")
    func concurrentPerform() {
        let count = 100_000
        var hits = [UInt8](repeating: 0, count: count)
        hits.withUnsafeMutableBufferPointer { buffer in
            // Distinct indices never share an element: no synchronisation needed, and TSan checks that.
            nonisolated(unsafe) let buffer = buffer
            WorkQueue.concurrentPerform(iterations: count) { index in
                buffer[index] &+= 1
            }
        }
        #expect(hits.allSatisfy { $0 == 1 })
        WorkQueue.concurrentPerform(iterations: 0) { _ in Issue.record("called with zero iterations") }
    }

    // C24: on a serial queue, in order, on the calling thread.
    @Test("concurrentPerform on a serial queue runs in order")
    func applySerial() {
        let queue = WorkQueue(label: "apply.serial")
        let key = WorkQueue.SpecificKey<Int>()
        queue.setSpecific(key: key, value: 1)
        let log = Unsynchronized([Int]())
        queue.concurrentPerform(iterations: 100) { index in
            #expect(WorkQueue.getSpecific(key: key) == 1)
            log.value.append(index)
        }
        #expect(log.value == Array(0..<100))
    }

    // C24, C25: on a concurrent queue in parallel; from inside that queue serially on the caller.
    @Test("concurrentPerform on a concurrent queue")
    func applyConcurrent() {
        let queue = WorkQueue(label: "apply.c", attributes: .concurrent)
        let sum = Atomic<Int>(0)
        queue.concurrentPerform(iterations: 1_000) { sum.wrappingAdd($0, ordering: .relaxed) }
        #expect(sum.load(ordering: .relaxed) == 499_500)
        let inside = queue.sync {
            let log = Unsynchronized([Int]())
            queue.concurrentPerform(iterations: 10) { log.value.append($0) }
            return log.value
        }
        #expect(inside == Array(0..<10))
        // Through a serial target: never more than one at a time.
        let serial = WorkQueue(label: "apply.target")
        let narrowed = WorkQueue(label: "apply.narrow", attributes: .concurrent, target: serial)
        let probe = ConcurrencyProbe()
        narrowed.concurrentPerform(iterations: 200) { _ in
            probe.enter()
            probe.leave()
        }
        #expect(probe.highest == 1)
    }

    // C25: nested applies split the threads; a triple nest of 32 gives 32768 calls.
    @Test("nested concurrentPerform")
    func nested() {
        let calls = Atomic<Int>(0)
        WorkQueue.concurrentPerform(iterations: 32) { _ in
            WorkQueue.concurrentPerform(iterations: 32) { _ in
                WorkQueue.concurrentPerform(iterations: 32) { _ in
                    calls.wrappingAdd(1, ordering: .relaxed)
                }
            }
        }
        #expect(calls.load(ordering: .relaxed) == 32_768)
    }

    // C25: finishes even when every worker is busy, because the caller does the work.
    @Test("concurrentPerform finishes while workers are busy")
    func applyContended() {
        let release = WorkSemaphore(value: 0)
        let started = WorkSemaphore(value: 0)
        let group = WorkGroup()
        for _ in 0..<8 {
            WorkQueue.global().async(group: group) {
                started.signal()
                release.wait()
            }
        }
        for _ in 0..<8 { expectSignalled(started) }
        let sum = Atomic<Int>(0)
        WorkQueue.concurrentPerform(iterations: 1_000) { sum.wrappingAdd($0, ordering: .relaxed) }
        #expect(sum.load(ordering: .relaxed) == 499_500)
        for _ in 0..<8 { release.signal() }
        expectDone(group)
    }
}
