import DispatchQueues
import Synchronization
import Testing

@Suite("asyncAfter", .timeLimit(.minutes(1)))
struct TimerTests {
    // C21, C22: never early, whatever order the timers are armed in.
    @Test("asyncAfter never fires early")
    func neverEarly() {
        let group = WorkGroup()
        let early = Atomic<Int>(0)
        let queue = WorkQueue(label: "timers", attributes: .concurrent)
        let start = ContinuousClock.now
        // Deadlines in a scrambled order, so earlier ones arrive after later ones and re-arm the engine.
        for index in 0..<500 {
            let offset = (index * 7919) % 500
            let deadline = start + .microseconds(200 + offset * 97)
            group.enter()
            queue.asyncAfter(deadline: deadline) {
                if ContinuousClock.now < deadline { early.wrappingAdd(1, ordering: .relaxed) }
                group.leave()
            }
        }
        expectDone(group)
        #expect(early.load(ordering: .relaxed) == 0)
    }

    // C21: a deadline now or in the past submits at once.
    @Test("asyncAfter with a past deadline runs at once")
    func pastDeadline() {
        let done = WorkSemaphore(value: 0)
        WorkQueue.global().asyncAfter(deadline: .now - .seconds(1)) { done.signal() }
        expectSignalled(done)
        WorkQueue.global().asyncAfter(deadline: .now) { done.signal() }
        expectSignalled(done)
    }

    // C21: fire windows (T:dispatch_after.c uses ±0.5 s; ours are tighter but generous for a loaded box).
    @Test("asyncAfter fires close to its deadline, within its leeway")
    func window() {
        let queue = WorkQueue(label: "window")
        for (delay, leeway) in [(Duration.milliseconds(30), Duration.zero), (.milliseconds(20), .milliseconds(10))] {
            let done = WorkSemaphore(value: 0)
            let lateness = Unsynchronized(Duration.zero)
            let deadline = ContinuousClock.now + delay
            queue.asyncAfter(deadline: deadline, leeway: leeway) {
                lateness.value = ContinuousClock.now - deadline
                done.signal()
            }
            expectSignalled(done)
            let late = queue.sync { lateness.value }
            #expect(late >= .zero)
            #expect(late < leeway + .milliseconds(250))
        }
    }

    // Timers on several queues with equal deadlines are all delivered, each once, to the right queue.
    @Test("batched timers reach their own queues")
    func batches() {
        let queues = (0..<4).map { WorkQueue(label: "t\($0)") }
        let key = WorkQueue.SpecificKey<Int>()
        for (index, queue) in queues.enumerated() { queue.setSpecific(key: key, value: index) }
        let group = WorkGroup()
        let wrong = Atomic<Int>(0)
        let deadline = ContinuousClock.now + .milliseconds(10)
        for index in 0..<4_000 {
            let target = index % 4
            group.enter()
            queues[target].asyncAfter(deadline: deadline, leeway: .milliseconds(1)) {
                if WorkQueue.getSpecific(key: key) != target { wrong.wrappingAdd(1, ordering: .relaxed) }
                group.leave()
            }
        }
        expectDone(group)
        #expect(wrong.load(ordering: .relaxed) == 0)
    }

    // Barrier flag on asyncAfter, and the main-queue-free path: a suspended queue holds a fired timer.
    @Test("a fired timer on a suspended queue waits for resume")
    func timerOnSuspended() {
        let queue = WorkQueue(label: "timer.suspended")
        queue.suspend()
        let group = WorkGroup()
        group.enter()
        queue.asyncAfter(deadline: .now + .milliseconds(1), flags: .barrier) { group.leave() }
        #expect(group.wait(timeout: .milliseconds(50)) == .timedOut)
        queue.resume()
        expectDone(group)
    }
}
