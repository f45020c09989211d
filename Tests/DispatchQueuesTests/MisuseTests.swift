#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import DispatchQueues
import Testing

/// Programming errors stop the process with a message naming the misuse (SEMANTICS C4, C9, C11, C25, C28,
/// C29, C30, C31). Each runs in a child process.
@Suite("Misuse", .timeLimit(.minutes(1)))
struct MisuseTests {
    // C28
    @Test("leave without enter")
    func leaveWithoutEnter() async {
        await #expect(processExitsWith: .failure) {
            WorkGroup().leave()
        }
    }

    // C9
    @Test("resume below zero")
    func overResume() async {
        await #expect(processExitsWith: .failure) {
            let queue = WorkQueue(label: "over")
            queue.suspend()
            queue.resume()
            queue.resume()
        }
    }

    // C11
    @Test("resume on an inactive queue")
    func resumeInactive() async {
        await #expect(processExitsWith: .failure) {
            WorkQueue(label: "inactive", attributes: .initiallyInactive).resume()
        }
    }

    // C9
    @Test("releasing a suspended queue")
    func releaseSuspended() async {
        await #expect(processExitsWith: .failure) {
            do {
                let queue = WorkQueue(label: "suspended")
                queue.suspend()
            }
        }
    }

    // C11
    @Test("releasing an inactive queue")
    func releaseInactive() async {
        await #expect(processExitsWith: .failure) {
            do { _ = WorkQueue(label: "never activated", attributes: .initiallyInactive) }
        }
    }

    // C4
    @Test("sync onto the queue you are on")
    func syncOntoSelf() async {
        await #expect(processExitsWith: .failure) {
            let queue = WorkQueue(label: "self")
            queue.sync { queue.sync {} }
        }
        await #expect(processExitsWith: .failure) {
            let queue = WorkQueue(label: "self.async")
            let done = WorkSemaphore(value: 0)
            queue.async {
                queue.sync {}
                done.signal()
            }
            done.wait()
        }
    }

    // C4: through a target chain.
    @Test("sync onto a queue whose target chain you hold")
    func syncThroughChain() async {
        await #expect(processExitsWith: .failure) {
            let root = WorkQueue(label: "root")
            let middle = WorkQueue(label: "middle", attributes: .concurrent, target: root)
            let leaf = WorkQueue(label: "leaf", target: middle)
            root.sync { leaf.sync {} }
        }
        // Through a handoff: the inner sync runs on a worker on behalf of a blocked caller.
        await #expect(processExitsWith: .failure) {
            let a = WorkQueue(label: "a")
            let b = WorkQueue(label: "b")
            let gate = WorkSemaphore(value: 0)
            b.async { gate.wait() }
            WorkQueue.global().async { gate.signal() }
            a.sync { b.sync { a.sync {} } }
        }
    }

    // C6/C4: a barrier sync onto the concurrent queue you are running on would wait for itself.
    @Test("barrier sync onto the concurrent queue you are on")
    func barrierSyncOntoSelf() async {
        await #expect(processExitsWith: .failure) {
            let queue = WorkQueue(label: "wide", attributes: .concurrent)
            queue.sync { queue.sync(flags: .barrier) {} }
        }
    }

    // C25
    @Test("concurrentPerform on the serial queue you are on")
    func applyOntoSelf() async {
        await #expect(processExitsWith: .failure) {
            let queue = WorkQueue(label: "apply")
            queue.sync { queue.concurrentPerform(iterations: 2) { _ in } }
        }
    }

    // C31
    @Test("recursive once")
    func recursiveOnce() async {
        await #expect(processExitsWith: .failure) {
            let once = Once()
            once.perform { once.perform {} }
        }
    }

    // C29, C30
    @Test("semaphore misuse")
    func semaphoreMisuse() async {
        await #expect(processExitsWith: .failure) {
            _ = WorkSemaphore(value: -1)
        }
        await #expect(processExitsWith: .failure) {
            do {
                let semaphore = WorkSemaphore(value: 1)
                semaphore.wait()
            }
        }
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
