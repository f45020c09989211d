import DispatchQueues
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Programming errors stop the process with a message naming the misuse (SEMANTICS C4, C9, C11, C25, C28,
/// C29, C30, C31). Each runs in a child process.
@Suite("Misuse", .timeLimit(.minutes(1)))
struct MisuseTests {
    // C28
    @Test("leave without enter")
    func leaveWithoutEnter() async {
        let result0 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            WorkGroup().leave()
        }
        expectMessage(result0, "Unbalanced WorkGroup.leave()")
    }

    // C9
    @Test("resume below zero")
    func overResume() async {
        let result0 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = WorkQueue(label: "over")
            queue.suspend()
            queue.resume()
            queue.resume()
        }
        expectMessage(result0, "Over-resume of WorkQueue 'over'")
    }

    // C11
    @Test("resume on an inactive queue")
    func resumeInactive() async {
        let result0 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            WorkQueue(label: "inactive", attributes: .initiallyInactive).resume()
        }
        expectMessage(result0, "WorkQueue.resume() on inactive queue 'inactive'")
    }

    // C9
    @Test("releasing a suspended queue")
    func releaseSuspended() async {
        let result0 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            do {
                let queue = WorkQueue(label: "suspended")
                queue.suspend()
            }
        }
        expectMessage(result0, "WorkQueue 'suspended' released while suspended")
    }

    // C11
    @Test("releasing an inactive queue")
    func releaseInactive() async {
        let result0 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            do { _ = WorkQueue(label: "never activated", attributes: .initiallyInactive) }
        }
        expectMessage(result0, "WorkQueue 'never activated' released while inactive")
    }

    // C4
    @Test("sync onto the queue you are on")
    func syncOntoSelf() async {
        let result0 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = WorkQueue(label: "self")
            queue.sync { queue.sync {} }
        }
        expectMessage(result0, "WorkQueue.sync onto queue 'self' already owned by the current thread")
        let result1 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = WorkQueue(label: "self.async")
            let done = WorkSemaphore(value: 0)
            queue.async {
                queue.sync {}
                done.signal()
            }
            done.wait()
        }
        expectMessage(result1, "WorkQueue.sync onto queue 'self.async' already owned by the current thread")
    }

    // C4: through a target chain.
    @Test("sync onto a queue whose target chain you hold")
    func syncThroughChain() async {
        let result0 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let root = WorkQueue(label: "root")
            let middle = WorkQueue(label: "middle", attributes: .concurrent, target: root)
            let leaf = WorkQueue(label: "leaf", target: middle)
            root.sync { leaf.sync {} }
        }
        expectMessage(result0, "whose target chain includes queue 'root' already owned by the current thread")
        // Through a handoff: the inner sync runs on a worker on behalf of a blocked caller.
        let result1 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let a = WorkQueue(label: "a")
            let b = WorkQueue(label: "b")
            let gate = WorkSemaphore(value: 0)
            b.async { gate.wait() }
            WorkQueue.global().async { gate.signal() }
            a.sync { b.sync { a.sync {} } }
        }
        expectMessage(result1, "WorkQueue.sync onto queue 'a' already owned by the current thread")
    }

    // C6/C4: a barrier sync onto the concurrent queue you are running on would wait for itself.
    @Test("barrier sync onto the concurrent queue you are on")
    func barrierSyncOntoSelf() async {
        let result0 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = WorkQueue(label: "wide", attributes: .concurrent)
            queue.sync { queue.sync(flags: .barrier) {} }
        }
        expectMessage(result0, "WorkQueue.sync with .barrier onto concurrent queue 'wide'")
    }

    // C25
    @Test("concurrentPerform on the serial queue you are on")
    func applyOntoSelf() async {
        let result0 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = WorkQueue(label: "apply")
            queue.sync { queue.concurrentPerform(iterations: 2) { _ in } }
        }
        expectMessage(result0, "WorkQueue.concurrentPerform onto queue 'apply' already owned")
    }

    // C31
    @Test("recursive once")
    func recursiveOnce() async {
        let result0 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let once = Once()
            once.perform { once.perform {} }
        }
        expectMessage(result0, "Once.perform called recursively")
    }

    // C29, C30
    @Test("semaphore misuse")
    func semaphoreMisuse() async {
        let result0 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = WorkSemaphore(value: -1)
        }
        expectMessage(result0, "WorkSemaphore(value:) with a negative value (-1)")
        let result1 = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            do {
                let semaphore = WorkSemaphore(value: 1)
                semaphore.wait()
            }
        }
        expectMessage(result1, "WorkSemaphore deallocated while in use")
    }

    // C17
    @Test("setSpecific on a global queue")
    func specificOnGlobal() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            WorkQueue.global().setSpecific(key: WorkQueue.SpecificKey<Int>(), value: 1)
        }
        expectMessage(result, "does not support queue-specific values")
    }

    // C13: cycles are undefined in C; ours refuses them.
    @Test("target cycle")
    func targetCycle() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let a = WorkQueue(label: "a", attributes: .initiallyInactive)
            let b = WorkQueue(label: "b", target: a)
            a.setTarget(queue: b)
        }
        expectMessage(result, "creates a cycle")
    }

    // C19: dispatchMain drains the main queue in order and never returns; the process ends by exit.
    @Test("dispatchMain drains the main queue")
    func mainQueue() async {
        await #expect(processExitsWith: .success) {
            let key = WorkQueue.SpecificKey<Int>()
            WorkQueue.main.setSpecific(key: key, value: 1)
            let log = Unsynchronized([Int]())
            for index in 0..<100 { WorkQueue.main.async { log.value.append(index) } }
            WorkQueue.global().async {
                let value = WorkQueue.main.sync { WorkQueue.getSpecific(key: key) }
                WorkQueue.main.asyncAfter(deadline: .now + .milliseconds(5)) {
                    exit(log.value == Array(0..<100) && value == 1 ? 0 : 1)
                }
            }
            dispatchMain()
        }
    }
}

/// Checks that a child process's standard error names the misuse.
func expectMessage(_ result: ExitTest.Result?, _ fragment: String, sourceLocation: SourceLocation = #_sourceLocation) {
    let text = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(text.contains(fragment), "standard error was: \(text.prefix(1_000))", sourceLocation: sourceLocation)
}
