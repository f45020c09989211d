import DispatchQueues
import Synchronization
import Testing

@Suite("Queues", .timeLimit(.minutes(1)))
struct QueueTests {
    // C1: a serial queue runs its blocks one at a time in FIFO order.
    @Test("serial queue keeps FIFO order over 1M blocks")
    func serialFIFO() {
        let queue = WorkQueue(label: "fifo")
        let count = 1_000_000
        let log = Unsynchronized([Int]())
        log.value.reserveCapacity(count)
        let probe = ConcurrencyProbe()
        for index in 0..<count {
            queue.async {
                probe.enter()
                log.value.append(index)
                probe.leave()
            }
        }
        let done = WorkSemaphore(value: 0)
        queue.async { done.signal() }
        expectSignalled(done)
        let inOrder = queue.sync { log.value.elementsEqual(0..<count) }
        #expect(inOrder)
        #expect(probe.highest == 1)
    }

    // C1: separate serial queues run concurrently with each other.
    @Test("separate serial queues run concurrently")
    func serialQueuesAreIndependent() {
        let a = WorkQueue(label: "a")
        let b = WorkQueue(label: "b")
        let aStarted = WorkSemaphore(value: 0)
        let bStarted = WorkSemaphore(value: 0)
        let group = WorkGroup()
        a.async(group: group) {
            aStarted.signal()
            #expect(bStarted.wait(timeout: patience) == .success)
        }
        b.async(group: group) {
            bStarted.signal()
            #expect(aStarted.wait(timeout: patience) == .success)
        }
        expectDone(group)
    }

    // C1: a concurrent queue may run several blocks at once, starting them in FIFO order.
    @Test("concurrent queue runs blocks at once and starts them in order")
    func concurrentQueue() {
        let queue = WorkQueue(label: "c", attributes: .concurrent)
        let first = WorkSemaphore(value: 0)
        let second = WorkSemaphore(value: 0)
        let group = WorkGroup()
        queue.async(group: group) {
            first.signal()
            #expect(second.wait(timeout: patience) == .success)
        }
        queue.async(group: group) {
            second.signal()
            #expect(first.wait(timeout: patience) == .success)
        }
        expectDone(group)

        let starts = Unsynchronized([Int]())
        let order = WorkQueue(label: "order")
        for index in 0..<1_000 {
            queue.async(group: group) { order.sync { starts.value.append(index) } }
        }
        expectDone(group)
        // Starting order is FIFO, but the append happens after the start; allow local reordering only.
        order.sync {
            #expect(starts.value.count == 1_000)
            #expect(Set(starts.value).count == 1_000)
        }
    }

    // C2: async returns at once; a queue released while blocks are pending still runs them.
    @Test("releasing a queue with pending blocks is safe")
    func releaseWithPending() {
        let group = WorkGroup()
        let ran = Atomic<Int>(0)
        do {
            let queue = WorkQueue(label: "transient")
            for _ in 0..<1_000 {
                queue.async(group: group) { ran.wrappingAdd(1, ordering: .relaxed) }
            }
        }
        expectDone(group)
        #expect(ran.load(ordering: .relaxed) == 1_000)
    }

    // C3: sync runs the block before returning, returns its value and rethrows.
    @Test("sync returns the value and rethrows")
    func syncValueAndThrow() throws {
        struct Failure: Error {}
        let queue = WorkQueue(label: "sync")
        #expect(queue.sync { 42 } == 42)
        #expect(throws: Failure.self) { try queue.sync { () throws(Failure) -> Int in throw Failure() } }
        let concurrent = WorkQueue(label: "sync.c", attributes: .concurrent)
        #expect(concurrent.sync { "x" } == "x")
        #expect(WorkQueue.global().sync { 7 } == 7)
        // A busy queue: the sync waits its turn behind earlier blocks (FIFO).
        let log = Unsynchronized([Int]())
        for index in 0..<100 { queue.async { log.value.append(index) } }
        let snapshot = queue.sync { log.value }
        #expect(snapshot == Array(0..<100))
    }

    // C3, C18: inside sync, getSpecific sees the target's keys.
    @Test("sync sees the target chain's specific values")
    func syncSpecific() {
        let key = WorkQueue.SpecificKey<String>()
        let target = WorkQueue(label: "t")
        target.setSpecific(key: key, value: "target")
        let queue = WorkQueue(label: "q", target: target)
        #expect(queue.sync { WorkQueue.getSpecific(key: key) } == "target")
        #expect(queue.getSpecific(key: key) == nil)
        #expect(WorkQueue.getSpecific(key: key) == nil)
        queue.setSpecific(key: key, value: "own")
        #expect(queue.sync { WorkQueue.getSpecific(key: key) } == "own")
        // Also when the sync is handed to a worker (the queue is busy).
        let gate = WorkSemaphore(value: 0)
        let other = WorkQueue(label: "busy", target: target)
        other.async { gate.wait() }
        WorkQueue.global().async { gate.signal() }
        #expect(other.sync { WorkQueue.getSpecific(key: key) } == "target")
        let group = WorkGroup()
        queue.async(group: group) { #expect(WorkQueue.getSpecific(key: key) == "own") }
        WorkQueue.global().async(group: group) { #expect(WorkQueue.getSpecific(key: key) == nil) }
        expectDone(group)
    }

    // C5: sync on a suspended queue blocks until the queue is resumed.
    @Test("sync on a suspended queue waits for resume")
    func syncOnSuspended() {
        let queue = WorkQueue(label: "suspended")
        queue.suspend()
        let resumed = Atomic<Bool>(false)
        WorkQueue.global().asyncAfter(deadline: .now + .milliseconds(20)) {
            resumed.store(true, ordering: .releasing)
            queue.resume()
        }
        let sawResumed = queue.sync { resumed.load(ordering: .acquiring) }
        #expect(sawResumed)
    }

    // C6: a barrier waits for earlier blocks, runs alone, and later blocks wait for it; under contention.
    @Test("barriers are exclusive on a concurrent queue under contention")
    func barrierExclusivity() {
        let queue = WorkQueue(label: "barrier", attributes: .concurrent)
        let probe = ConcurrencyProbe()
        let inBarrier = Atomic<Bool>(false)
        let violations = Atomic<Int>(0)
        let shared = Unsynchronized(0)
        let group = WorkGroup()
        WorkQueue.concurrentPerform(iterations: 4) { producer in
            for index in 0..<5_000 {
                if index % 100 == 0 {
                    queue.async(group: group, flags: .barrier) {
                        if probe.current != 0 { violations.wrappingAdd(1, ordering: .relaxed) }
                        inBarrier.store(true, ordering: .relaxed)
                        shared.value += 1  // TSan would flag this if anything ran alongside
                        inBarrier.store(false, ordering: .relaxed)
                    }
                } else {
                    queue.async(group: group) {
                        probe.enter()
                        if inBarrier.load(ordering: .relaxed) { violations.wrappingAdd(1, ordering: .relaxed) }
                        probe.leave()
                    }
                }
            }
        }
        expectDone(group)
        #expect(violations.load(ordering: .relaxed) == 0)
        #expect(queue.sync(flags: .barrier) { shared.value } == 200)
    }

    // C6: barrier order: earlier blocks finish first, later ones start after.
    @Test("barrier async and sync order earlier and later blocks")
    func barrierOrder() {
        let queue = WorkQueue(label: "barrier.order", attributes: .concurrent)
        let log = Unsynchronized([String]())
        let logQueue = WorkQueue(label: "log")
        let group = WorkGroup()
        for _ in 0..<10 { queue.async(group: group) { logQueue.sync { log.value.append("before") } } }
        queue.async(group: group, flags: .barrier) { logQueue.sync { log.value.append("barrier") } }
        for _ in 0..<10 { queue.async(group: group) { logQueue.sync { log.value.append("after") } } }
        expectDone(group)
        let entries = logQueue.sync { log.value }
        #expect(entries == Array(repeating: "before", count: 10) + ["barrier"] + Array(repeating: "after", count: 10))
        let running = ConcurrencyProbe()
        for _ in 0..<20 {
            queue.async {
                running.enter()
                running.leave()
            }
        }
        let alone = queue.sync(flags: .barrier) { running.current == 0 }
        #expect(alone)
    }

    // C7: a barrier on a serial queue is a plain block; on a global queue it is not exclusive.
    @Test("barriers on serial and global queues are ordinary blocks")
    func barrierOnSerialAndGlobal() {
        let serial = WorkQueue(label: "serial.barrier")
        let log = Unsynchronized([Int]())
        serial.async { log.value.append(1) }
        serial.async(flags: .barrier) { log.value.append(2) }
        serial.async { log.value.append(3) }
        #expect(serial.sync(flags: .barrier) { log.value } == [1, 2, 3])

        let blockRunning = WorkSemaphore(value: 0)
        let barrierRan = WorkSemaphore(value: 0)
        let group = WorkGroup()
        WorkQueue.global().async(group: group) {
            blockRunning.signal()
            // Still running while the barrier runs: only possible without exclusivity.
            #expect(barrierRan.wait(timeout: patience) == .success)
        }
        expectSignalled(blockRunning)
        WorkQueue.global().async(group: group, flags: .barrier) { barrierRan.signal() }
        expectDone(group)
    }

    // C8: suspend holds new work, resume releases it; two suspends need two resumes.
    @Test("suspend holds new blocks and resume releases them")
    func suspendResume() {
        let queue = WorkQueue(label: "suspend")
        let ran = Atomic<Int>(0)
        queue.suspend()
        queue.suspend()
        for _ in 0..<100 { queue.async { ran.wrappingAdd(1, ordering: .relaxed) } }
        let group = WorkGroup()
        queue.async(group: group) {}
        #expect(group.wait(timeout: .milliseconds(50)) == .timedOut)
        #expect(ran.load(ordering: .relaxed) == 0)
        queue.resume()
        #expect(group.wait(timeout: .milliseconds(50)) == .timedOut)
        #expect(ran.load(ordering: .relaxed) == 0)
        queue.resume()
        expectDone(group)
        #expect(ran.load(ordering: .relaxed) == 100)
    }

    // C8: suspension takes effect between blocks: the running block finishes, the next waits.
    @Test("suspend from inside a block stops the queue after that block")
    func suspendBetweenBlocks() {
        let queue = WorkQueue(label: "between")
        let log = Unsynchronized([String]())
        let firstDone = WorkSemaphore(value: 0)
        queue.async {
            queue.suspend()
            log.value.append("A")
            firstDone.signal()
        }
        let group = WorkGroup()
        queue.async(group: group) { log.value.append("B") }
        expectSignalled(firstDone)
        #expect(group.wait(timeout: .milliseconds(50)) == .timedOut)
        queue.resume()
        expectDone(group)
        #expect(queue.sync { log.value } == ["A", "B"])
    }

    // C10: suspend and resume do nothing on the main and global queues.
    @Test("suspend on global and main queues does nothing")
    func suspendGlobal() {
        let global = WorkQueue.global()
        global.suspend()
        let group = WorkGroup()
        global.async(group: group) {}
        expectDone(group)
        global.resume()
        global.resume()  // no over-resume trap: a no-op
        WorkQueue.main.suspend()
        WorkQueue.main.resume()
        WorkQueue.main.resume()
    }

    // C11: an initially inactive queue holds blocks until activate; a second activate does nothing.
    @Test("initially inactive queue runs nothing until activated")
    func initiallyInactive() {
        let queue = WorkQueue(label: "inactive", attributes: .initiallyInactive)
        let group = WorkGroup()
        let log = Unsynchronized([Int]())
        for index in 0..<10 { queue.async(group: group) { log.value.append(index) } }
        #expect(group.wait(timeout: .milliseconds(50)) == .timedOut)
        queue.activate()
        queue.activate()
        expectDone(group)
        #expect(queue.sync { log.value } == Array(0..<10))
        // Inactive and suspended: activation alone does not run it.
        let both = WorkQueue(label: "both", attributes: [.initiallyInactive, .concurrent])
        both.suspend()
        both.async(group: group) {}
        both.activate()
        #expect(group.wait(timeout: .milliseconds(50)) == .timedOut)
        both.resume()
        expectDone(group)
    }

    // C12: a serial target serialises every queue that targets it, concurrent ones included, along chains.
    @Test("target chains serialise", arguments: [1, 2, 3])
    func targetChainsSerialise(depth: Int) {
        let root = WorkQueue(label: "root")
        var leaves: [WorkQueue] = []
        for branch in 0..<3 {
            var queue = root
            for level in 0..<depth {
                queue = WorkQueue(label: "q\(branch).\(level)", attributes: .concurrent, target: queue)
            }
            leaves.append(queue)
        }
        let probe = ConcurrencyProbe()
        let shared = Unsynchronized(0)
        let group = WorkGroup()
        for index in 0..<3_000 {
            leaves[index % 3].async(group: group) {
                probe.enter()
                shared.value += 1
                probe.leave()
            }
        }
        expectDone(group)
        #expect(probe.highest == 1)
        #expect(root.sync { shared.value } == 3_000)
    }

    // C12: a serial queue targeting a concurrent queue stays serial.
    @Test("a serial queue through a concurrent target stays serial")
    func serialThroughConcurrent() {
        let concurrent = WorkQueue(label: "wide", attributes: .concurrent)
        let serial = WorkQueue(label: "narrow", target: concurrent)
        let probe = ConcurrencyProbe()
        let log = Unsynchronized([Int]())
        let group = WorkGroup()
        for index in 0..<2_000 {
            serial.async(group: group) {
                probe.enter()
                log.value.append(index)
                probe.leave()
            }
        }
        expectDone(group)
        #expect(probe.highest == 1)
        #expect(serial.sync { log.value } == Array(0..<2_000))
    }

    // C13: setTarget on an inactive queue, nil meaning the default global queue; on an active queue it
    // takes effect between blocks.
    @Test("setTarget before activation and on an active queue")
    func retarget() {
        let key = WorkQueue.SpecificKey<Int>()
        let first = WorkQueue(label: "first")
        first.setSpecific(key: key, value: 1)
        let second = WorkQueue(label: "second")
        second.setSpecific(key: key, value: 2)
        let queue = WorkQueue(label: "retarget", attributes: .initiallyInactive)
        queue.setTarget(queue: first)
        queue.activate()
        #expect(queue.sync { WorkQueue.getSpecific(key: key) } == 1)
        let gate = WorkSemaphore(value: 0)
        queue.async { gate.wait() }
        queue.setTarget(queue: second)  // active and busy: applied as a barrier
        gate.signal()
        #expect(queue.sync { WorkQueue.getSpecific(key: key) } == 2)
        queue.setTarget(queue: nil)
        #expect(queue.sync { WorkQueue.getSpecific(key: key) } == nil)
        WorkQueue.global().setTarget(queue: first)  // no-op
    }

    // C13: re-targeting an active concurrent queue. Its drain tokens already waiting on the old target
    // must not run blocks submitted after the change there: they wait for the new target, busy here.
    @Test("setTarget on an active concurrent queue with drainers waiting on the old target")
    func retargetConcurrent() {
        final class Flag: Sendable { let value = Atomic<Int>(0) }
        let old = WorkQueue(label: "old")
        let middle = WorkQueue(label: "middle", attributes: .concurrent, target: old)
        let queue = WorkQueue(label: "queue", attributes: .concurrent, target: middle)
        let new = WorkQueue(label: "new")
        old.suspend()
        // The queue's drain tokens wait on `middle`, whose own waits on the suspended `old`.
        for _ in 0..<4 { queue.async {} }
        queue.setTarget(queue: new)
        let gate = WorkSemaphore(value: 0)
        new.async { gate.wait() }
        let opened = Flag()
        let early = Flag()
        let after = WorkGroup()
        for _ in 0..<8 {
            queue.async(group: after) {
                if opened.value.load(ordering: .acquiring) == 0 { early.value.add(1, ordering: .relaxed) }
            }
        }
        old.resume()
        // Nothing submitted after the change may run while the new target is busy.
        #expect(after.wait(timeout: .milliseconds(200)) == .timedOut)
        opened.value.store(1, ordering: .releasing)
        gate.signal()
        #expect(after.wait(timeout: patience) == .success)
        #expect(early.value.load(ordering: .relaxed) == 0)
    }

    // C15: labels.
    @Test("labels")
    func labels() {
        #expect(WorkQueue(label: "").label == "")
        #expect(WorkQueue(label: "x.y").label == "x.y")
        #expect(WorkQueue.main.label == "com.apple.main-thread")
        #expect(WorkQueue.global().label == "com.apple.root.default-qos")
    }

    // C16, C18: setting, replacing and removing specific values; lookups.
    @Test("queue-specific values")
    func specifics() {
        final class Value: Sendable {
            let released: WorkSemaphore
            init(_ released: WorkSemaphore) { self.released = released }
            deinit { released.signal() }
        }
        let key = WorkQueue.SpecificKey<Value>()
        let queue = WorkQueue(label: "specific")
        let released = WorkSemaphore(value: 0)
        queue.setSpecific(key: key, value: Value(released))
        #expect(queue.getSpecific(key: key) != nil)
        queue.setSpecific(key: key, value: Value(released))
        expectSignalled(released)  // the replaced value is released (asynchronously)
        queue.setSpecific(key: key, value: nil)
        expectSignalled(released)
        #expect(queue.getSpecific(key: key) == nil)
        let other = WorkQueue.SpecificKey<Int>()
        #expect(WorkQueue.global().getSpecific(key: other) == nil)
        WorkQueue.main.setSpecific(key: other, value: 5)  // C17: the main queue accepts keys
        #expect(WorkQueue.main.getSpecific(key: other) == 5)
        WorkQueue.main.setSpecific(key: other, value: nil)
    }

    // C20: four global queues, by QoS and by priority.
    @Test("global queues")
    func globals() {
        #expect(WorkQueue.global(priority: .high) === WorkQueue.global(qos: .userInitiated))
        #expect(WorkQueue.global(priority: .high) === WorkQueue.global(qos: .userInteractive))
        #expect(WorkQueue.global(priority: .default) === WorkQueue.global())
        #expect(WorkQueue.global(priority: .low) === WorkQueue.global(qos: .utility))
        #expect(WorkQueue.global(priority: .background) === WorkQueue.global(qos: .background))
        let group = WorkGroup()
        for priority in [WorkQueue.GlobalQueuePriority.high, .default, .low, .background] {
            WorkQueue.global(priority: priority).async(group: group) {}
        }
        expectDone(group)
    }

    // Library enqueue path: job objects and batches run once each, in order on a serial queue.
    @Test("package job enqueue")
    func jobs() {
        final class Job: QueueJob {
            let index: Int
            let log: Unsynchronized<[Int]>
            let group: WorkGroup
            init(_ index: Int, _ log: Unsynchronized<[Int]>, _ group: WorkGroup) {
                self.index = index
                self.log = log
                self.group = group
            }
            func run() {
                log.value.append(index)
                group.leave()
            }
        }
        let queue = WorkQueue(label: "jobs")
        let log = Unsynchronized([Int]())
        let group = WorkGroup()
        for index in 0..<10 {
            group.enter()
            queue.enqueue(Job(index, log, group))
        }
        let batch: [any QueueJob] = (10..<20).map { Job($0, log, group) }
        for _ in batch { group.enter() }
        queue.enqueue(contentsOf: batch)
        expectDone(group)
        #expect(queue.sync { log.value } == Array(0..<20))
    }

    // The plain async(execute:) fits a "run this later" function type.
    @Test("async(execute:) as a function value")
    func asyncAsFunction() {
        let runLater: (@escaping @Sendable () -> Void) -> Void = WorkQueue(label: "later").async(execute:)
        let done = WorkSemaphore(value: 0)
        runLater { done.signal() }
        expectSignalled(done)
    }
}
