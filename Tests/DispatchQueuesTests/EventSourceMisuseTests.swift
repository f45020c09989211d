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
        await #expect(processExitsWith: .failure) {
            do { _ = EventSource.makeUserDataAddSource() }
        }
    }

    // D2, C9
    @Test("releasing a suspended source")
    func releaseSuspended() async {
        await #expect(processExitsWith: .failure) {
            do {
                let source = EventSource.makeUserDataAddSource()
                source.activate()
                source.suspend()
            }
        }
    }

    // C9
    @Test("resume without suspend on an active source")
    func overResume() async {
        await #expect(processExitsWith: .failure) {
            let source = EventSource.makeUserDataAddSource()
            source.activate()
            source.resume()
        }
    }

    // D37
    @Test("merge on a timer source")
    func mergeOnTimer() async {
        await #expect(processExitsWith: .failure) {
            let source = EventSource.makeTimerSource()
            source.activate()
            source.merge(data: 1)
        }
    }

    // D26: schedule is for timers only.
    @Test("schedule on a custom source")
    func scheduleOnCustom() async {
        await #expect(processExitsWith: .failure) {
            let source = EventSource.makeUserDataOrSource()
            source.activate()
            source.schedule(deadline: .now)
        }
    }

    // D3 [BUG] → ours: validated at creation.
    @Test("bad signal numbers")
    func badSignal() async {
        await #expect(processExitsWith: .failure) {
            _ = EventSource.makeSignalSource(signal: 0)
        }
        await #expect(processExitsWith: .failure) {
            _ = EventSource.makeSignalSource(signal: SIGKILL)
        }
        await #expect(processExitsWith: .failure) {
            _ = EventSource.makeSignalSource(signal: 99)
        }
    }

    // D3
    @Test("process source for pid 0")
    func pidZero() async {
        await #expect(processExitsWith: .failure) {
            _ = EventSource.makeProcessSource(identifier: 0, eventMask: .exit)
        }
    }

    // D3, D36
    @Test("file-system source with an empty mask")
    func emptyMask() async {
        await #expect(processExitsWith: .failure) {
            _ = EventSource.makeFileSystemObjectSource(fileDescriptor: .standardInput, eventMask: [])
        }
    }
}
