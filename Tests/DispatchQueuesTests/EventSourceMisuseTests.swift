import DispatchQueues
import SystemPackage
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Misuse of sources stops the process with a message naming it (SEMANTICS D2, D3, C9, D37). Each runs in
/// a child process.
@Suite("EventSource misuse", .timeLimit(.minutes(1)))
struct EventSourceMisuseTests {
    // D2
    @Test("releasing a source that was never activated")
    func releaseInactive() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            do { _ = EventSource.makeUserDataAddSource() }
        }
        expectMessage(result, "released before it was activated")
    }

    // D2, C9
    @Test("releasing a suspended source")
    func releaseSuspended() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            do {
                let source = EventSource.makeUserDataAddSource()
                source.activate()
                source.suspend()
            }
        }
        expectMessage(result, "released while suspended")
    }

    // C9
    @Test("resume without suspend on an active source")
    func overResume() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let source = EventSource.makeUserDataAddSource()
            source.activate()
            source.resume()
        }
        expectMessage(result, "Over-resume of EventSource")
    }

    // D37
    @Test("merge on a timer source")
    func mergeOnTimer() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let source = EventSource.makeTimerSource()
            source.activate()
            source.merge(data: 1)
        }
        expectMessage(result, "merge(data:) on a timer source")
    }

    // D26: schedule is for timers only.
    @Test("schedule on a custom source")
    func scheduleOnCustom() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let source = EventSource.makeUserDataOrSource()
            source.activate()
            source.schedule(deadline: .now)
        }
        expectMessage(result, "EventSource.schedule on a data-or source")
    }

    // D3 [BUG] → ours: validated at creation.
    @Test("bad signal numbers")
    func badSignal() async {
        let zero = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = EventSource.makeSignalSource(signal: 0)
        }
        expectMessage(zero, "0 is not a signal number")
        let kill = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = EventSource.makeSignalSource(signal: SIGKILL)
        }
        expectMessage(kill, "cannot be watched")
        await #expect(processExitsWith: .failure) {
            _ = EventSource.makeSignalSource(signal: 99)
        }
    }

    // D3
    @Test("process source for pid 0")
    func pidZero() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = EventSource.makeProcessSource(identifier: 0, eventMask: .exit)
        }
        expectMessage(result, "0 is not a process identifier")
    }

    // D3, D36
    @Test("file-system source with an empty mask")
    func emptyMask() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = EventSource.makeFileSystemObjectSource(fileDescriptor: .standardInput, eventMask: [])
        }
        expectMessage(result, "the event mask must be a non-empty subset")
    }
}
