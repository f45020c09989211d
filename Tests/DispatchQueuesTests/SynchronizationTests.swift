import DispatchQueues
import Synchronization
import Testing

@Suite("Groups, semaphores, once, work items", .timeLimit(.minutes(1)))
struct SynchronizationTests {
    // C26: wait on an empty group returns at once; a timeout leaves the count alone.
    @Test("group wait and timeout")
    func groupWait() {
        let group = WorkGroup()
        #expect(group.wait(timeout: .now) == .success)
        group.wait()
        group.enter()
        #expect(group.wait(timeout: .now) == .timedOut)
        let start = ContinuousClock.now
        #expect(group.wait(timeout: .milliseconds(30)) == .timedOut)
        #expect(ContinuousClock.now - start >= .milliseconds(30))
        WorkQueue.global().async { group.leave() }
        expectDone(group)
        #expect(group.wait(timeout: .now) == .success)
    }

    // C27: notify runs once, after the last leave; several notifies run in registration order.
    @Test("group notify runs once after the last leave")
    func groupNotify() {
        let group = WorkGroup()
        let runs = Atomic<Int>(0)
        let remaining = Atomic<Int>(100)
        let serial = WorkQueue(label: "notify")
        let log = Unsynchronized([Int]())
        let done = WorkSemaphore(value: 0)
        for _ in 0..<100 { group.enter() }
        group.notify(queue: serial) {
            runs.wrappingAdd(1, ordering: .relaxed)
            #expect(remaining.load(ordering: .acquiring) == 0)
            log.value.append(0)
        }
        group.notify(queue: serial) { log.value.append(1) }
        group.notify(queue: serial) {
            log.value.append(2)
            done.signal()
        }
        WorkQueue.concurrentPerform(iterations: 100) { _ in
            remaining.wrappingSubtract(1, ordering: .acquiringAndReleasing)
            group.leave()
        }
        expectSignalled(done)
        #expect(serial.sync { log.value } == [0, 1, 2])
        #expect(runs.load(ordering: .relaxed) == 1)
        // Empty group: notify is submitted at once. Reuse after notify (C27).
        group.notify(queue: serial) { done.signal() }
        expectSignalled(done)
        WorkQueue.global().async(group: group) {}
        group.notify(queue: serial) { done.signal() }
        expectSignalled(done)
        #expect(runs.load(ordering: .relaxed) == 1)
    }

    // C27: a notify registered while the group's notifications are being submitted (the group is empty
    // again, and a waiter has already been released) joins the end of the line: it never overtakes them.
    @Test("a group notify registered while earlier ones are submitted runs after them")
    func groupNotifyDuringFire() {
        for _ in 0..<20 {
            let group = WorkGroup()
            let serial = WorkQueue(label: "notify")
            let log = Unsynchronized([Int]())
            group.enter()
            for index in 0..<2_000 { group.notify(queue: serial) { log.value.append(index) } }
            WorkQueue.global().async { group.leave() }
            group.wait()
            let done = WorkSemaphore(value: 0)
            group.notify(queue: serial) {
                log.value.append(2_000)
                done.signal()
            }
            expectSignalled(done)
            // Compared in place: a failure would otherwise print two 2,001-element arrays.
            let order = serial.sync { log.value }
            #expect(order.count == 2_001 && order.firstIndex(of: 2_000) == 2_000 && order == order.sorted())
        }
    }

    // C27 for work items: the same for a notify registered while an item's are being submitted.
    @Test("a work item notify registered while earlier ones are submitted runs after them")
    func itemNotifyDuringCompletion() {
        for _ in 0..<20 {
            let item = WorkItem {}
            let serial = WorkQueue(label: "notify")
            let log = Unsynchronized([Int]())
            for index in 0..<2_000 { item.notify(queue: serial) { log.value.append(index) } }
            WorkQueue.global().async(execute: item)
            item.wait()
            let done = WorkSemaphore(value: 0)
            item.notify(queue: serial) {
                log.value.append(2_000)
                done.signal()
            }
            expectSignalled(done)
            // Compared in place: a failure would otherwise print two 2,001-element arrays.
            let order = serial.sync { log.value }
            #expect(order.count == 2_001 && order.firstIndex(of: 2_000) == 2_000 && order == order.sorted())
        }
    }

    // C26: async(group:) enters before and leaves after the block; works across many queues.
    @Test("group async across queues")
    func groupAsync() {
        let group = WorkGroup()
        let ran = Atomic<Int>(0)
        let queues = (0..<8).map { WorkQueue(label: "g\($0)", attributes: $0 % 2 == 0 ? [] : .concurrent) }
        for index in 0..<8_000 {
            queues[index % 8].async(group: group) { ran.wrappingAdd(1, ordering: .relaxed) }
        }
        expectDone(group)
        #expect(ran.load(ordering: .relaxed) == 8_000)
    }

    // C29: signal returns non-zero iff it woke a waiter; wait with timeout undoes its decrement.
    @Test("semaphore signal result and timeouts")
    func semaphore() {
        let semaphore = WorkSemaphore(value: 0)
        #expect(semaphore.signal() == 0)
        semaphore.wait()
        #expect(semaphore.wait(timeout: .now) == .timedOut)
        let start = ContinuousClock.now
        #expect(semaphore.wait(timeout: .milliseconds(30)) == .timedOut)
        #expect(ContinuousClock.now - start >= .milliseconds(30))
        // The timed-out waits gave their decrements back: one signal is enough for one wait.
        #expect(semaphore.signal() == 0)
        #expect(semaphore.wait(timeout: .now) == .success)
        // A blocked waiter makes signal return non-zero.
        let waiting = WorkSemaphore(value: 0)
        let woke = WorkSemaphore(value: 0)
        WorkQueue.global().async {
            waiting.signal()
            semaphore.wait()
            woke.signal()
        }
        expectSignalled(waiting)
        var result = 0
        while result == 0 {
            // The waiter may not have blocked yet; a 0 result means the signal was banked: take it back.
            result = semaphore.signal()
            if result == 0 {
                _ = semaphore.wait(timeout: .now)
                _ = woke.wait(timeout: .milliseconds(1))
            }
        }
        expectSignalled(woke)
    }

    // C29: waiters are served in FIFO order. Each waiter is asleep in the kernel before the next comes, and
    // each woken one has recorded itself before the next signal: the test used to give each 5 ms for both,
    // and under ThreadSanitizer on a busy machine read [0, 2, 1, 3] once.
    @Test("semaphore waiters are woken in FIFO order")
    func semaphoreFIFO() {
        let semaphore = WorkSemaphore(value: 0)
        let order = Unsynchronized([Int]())
        let orderQueue = WorkQueue(label: "order")
        let recorded = WorkSemaphore(value: 0)
        let group = WorkGroup()
        let threads = 4
        for index in 0..<threads {
            let queue = WorkQueue(label: "waiter\(index)")
            let thread = Unsynchronized<String?>(nil)
            let named = WorkSemaphore(value: 0)
            queue.async(group: group) {
                thread.value = currentThreadID()
                named.signal()
                semaphore.wait()
                orderQueue.sync { order.value.append(index) }
                recorded.signal()
            }
            expectSignalled(named)
            #expect(thread.value.map { waitUntilAsleepInFutex($0) } == true, "waiter \(index)")
        }
        for _ in 0..<threads {
            semaphore.signal()
            expectSignalled(recorded)
        }
        expectDone(group)
        #expect(orderQueue.sync { order.value } == Array(0..<threads))
    }

    // C29 (T:dispatch_sema.c): 10,000 increments under a sema(1) lock in apply.
    @Test("semaphore as a lock under concurrentPerform")
    func semaphoreLock() {
        let semaphore = WorkSemaphore(value: 1)
        let counter = Unsynchronized(0)
        WorkQueue.concurrentPerform(iterations: 10_000) { _ in
            semaphore.wait()
            counter.value += 1
            semaphore.signal()
        }
        semaphore.wait()
        #expect(counter.value == 10_000)
        semaphore.signal()
    }

    // C31: once runs its block exactly once; concurrent callers wait for it.
    @Test("once runs exactly once")
    func once() {
        let once = Once()
        let runs = Atomic<Int>(0)
        let finished = Atomic<Bool>(false)
        WorkQueue.concurrentPerform(iterations: 64) { _ in
            once.perform {
                runs.wrappingAdd(1, ordering: .relaxed)
                _ = WorkSemaphore(value: 0).wait(timeout: .milliseconds(20))
                finished.store(true, ordering: .releasing)
            }
            let isFinished = finished.load(ordering: .acquiring)
            #expect(isFinished)
        }
        #expect(runs.load(ordering: .relaxed) == 1)
        #expect(once.isDone)
    }

    // C32: work items: cancel before start, wait, notify, barrier flag.
    @Test("work items")
    func workItems() {
        let queue = WorkQueue(label: "items")
        let ran = Atomic<Int>(0)
        let item = WorkItem { ran.wrappingAdd(1, ordering: .relaxed) }
        let notified = WorkSemaphore(value: 0)
        item.notify(queue: .global()) { notified.signal() }
        queue.async(execute: item)
        item.wait()
        expectSignalled(notified)
        #expect(ran.load(ordering: .relaxed) == 1)
        #expect(item.wait(timeout: .now) == .success)

        let cancelled = WorkItem { ran.wrappingAdd(100, ordering: .relaxed) }
        queue.suspend()
        queue.async(execute: cancelled)
        cancelled.cancel()
        #expect(cancelled.isCancelled)
        #expect(cancelled.wait(timeout: .milliseconds(10)) == .timedOut)
        queue.resume()
        #expect(cancelled.wait(timeout: patience) == .success)  // completes without running
        #expect(ran.load(ordering: .relaxed) == 1)

        let performed = WorkItem { ran.wrappingAdd(1, ordering: .relaxed) }
        performed.perform()
        #expect(ran.load(ordering: .relaxed) == 2)
        queue.sync(execute: performed)
        #expect(ran.load(ordering: .relaxed) == 3)

        let concurrent = WorkQueue(label: "items.c", attributes: .concurrent)
        let probe = ConcurrencyProbe()
        let group = WorkGroup()
        for _ in 0..<50 {
            concurrent.async(group: group) {
                probe.enter()
                probe.leave()
            }
        }
        let alone = Atomic<Bool>(false)
        let barrier = WorkItem(flags: .barrier) { alone.store(probe.current == 0, ordering: .relaxed) }
        concurrent.async(execute: barrier)
        barrier.wait()
        let ranAlone = alone.load(ordering: .relaxed)
        #expect(ranAlone)
        expectDone(group)
        let after = WorkItem { notified.signal() }
        queue.asyncAfter(deadline: .now + .milliseconds(1), execute: after)
        expectSignalled(notified)
        group.enter()
        group.notify(queue: queue, work: WorkItem { notified.signal() })
        group.leave()
        expectSignalled(notified)
    }
}
