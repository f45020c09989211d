import Dispatch
import DispatchQueues
import Foundation
import Testing

/// `EventSource` and its nested types are usable unqualified next to Foundation and Dispatch.
@Suite("EventSource names")
struct EventSourceNameTests {
    @Test("EventSource resolves unqualified with Foundation and Dispatch imported", .timeLimit(.minutes(1)))
    func unqualified() {
        let source: EventSource = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "names"))
        let flags: EventSource.TimerFlags = .strict
        let events: EventSource.FileSystemEvent = [.write, .rename]
        let process: EventSource.ProcessEvent = .exit
        let pressure: EventSource.MemoryPressureEvent = .warning
        #expect(
            flags.rawValue == 1 && events.rawValue == 0x22 && process.rawValue == 0x8000_0000 && pressure.rawValue == 2
        )
        let done = WorkSemaphore(value: 0)
        source.setEventHandler { done.signal() }
        source.activate()
        source.merge(data: 1)
        #expect(done.wait(timeout: .seconds(10)) == .success)
        source.cancel()
        // The toolchain's type still resolves to itself.
        let theirs: DispatchSourceUserDataAdd = DispatchSource.makeUserDataAddSource(queue: .global())
        theirs.resume()
        theirs.cancel()
        #expect(Data([1]).count == 1)
    }
}
