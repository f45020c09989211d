import DispatchQueues
import Synchronization
import Testing

/// Mutable state handed to blocks whose exclusivity the queue under test is supposed to guarantee. If the
/// queue broke its promise, ThreadSanitizer would report the race.
final class Unsynchronized<Value>: @unchecked Sendable {
    var value: Value

    init(_ value: Value) {
        self.value = value
    }
}

/// Tracks how many blocks run at once.
final class ConcurrencyProbe: Sendable {
    private let running = Atomic<Int>(0)
    private let maximum = Atomic<Int>(0)

    func enter() {
        let now = running.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue
        var seen = maximum.load(ordering: .relaxed)
        while now > seen {
            let (exchanged, original) = maximum.compareExchange(expected: seen, desired: now, ordering: .relaxed)
            if exchanged { break }
            seen = original
        }
    }

    func leave() {
        running.wrappingSubtract(1, ordering: .acquiringAndReleasing)
    }

    var current: Int { running.load(ordering: .acquiring) }
    var highest: Int { maximum.load(ordering: .acquiring) }
}

/// A generous bound for waits that should succeed; hitting it means a hang, which fails the test.
let patience: Duration = .seconds(30)

func expectDone(_ group: WorkGroup, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(group.wait(timeout: patience) == .success, sourceLocation: sourceLocation)
}

func expectSignalled(_ semaphore: WorkSemaphore, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(semaphore.wait(timeout: patience) == .success, sourceLocation: sourceLocation)
}
