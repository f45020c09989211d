import DispatchQueues
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

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

/// The calling thread's id in this process, from `/proc/thread-self` (`PID/task/TID`).
func currentThreadID() -> String? {
    var buffer = [CChar](repeating: 0, count: 64)
    let count = readlink("/proc/thread-self", &buffer, buffer.count - 1)
    guard count > 0 else { return nil }
    return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        .split(separator: "/").last.map(String.init)
}

/// Waits, up to ``patience``, until thread `id` of this process sleeps in a futex wait (its
/// `/proc/self/task/ID/syscall` names the call it is blocked in); false if it never does.
func waitUntilAsleepInFutex(_ id: String) -> Bool {
    #if arch(x86_64)
    let futex = "202"
    #else
    let futex = "98"  // arm64, riscv64
    #endif
    let deadline = ContinuousClock.now + patience
    while ContinuousClock.now < deadline {
        let fd = open("/proc/self/task/\(id)/syscall", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        var bytes = [UInt8](repeating: 0, count: 128)
        let count = read(fd, &bytes, bytes.count)
        close(fd)
        if count > 0, String(decoding: bytes[..<count], as: UTF8.self).split(separator: " ").first == Substring(futex) {
            return true
        }
        sched_yield()
    }
    return false
}
