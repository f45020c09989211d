import DispatchQueues
import SystemPackage
import Testing
import URing

#if canImport(Glibc)
import Glibc
#endif

/// An engine of `kind` for one test, shut down at the end (after the sources are cancelled).
func withSourceEngine(_ kind: EngineKind, _ body: (IOEngine) throws -> Void) rethrows {
    let engine = try! IOEngine(kind: kind)
    defer { engine.shutdown() }
    try body(engine)
}

/// Values a handler saw, in order.
final class Seen: Sendable {
    private let values = Locked<[UInt]>([])
    let semaphore = WorkSemaphore(value: 0)

    func add(_ value: UInt) {
        values.withLock { $0.append(value) }
        semaphore.signal()
    }

    var all: [UInt] { values.withLock { $0 } }
    var count: Int { values.withLock { $0.count } }

    /// Waits for one more value (fails the test after `patience`).
    func next(sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(semaphore.wait(timeout: patience) == .success, sourceLocation: sourceLocation)
    }

    /// Whether no value comes within `window` (a negative check, not synchronisation).
    func nothing(within window: Duration) -> Bool {
        semaphore.wait(timeout: window) == .timedOut
    }
}

/// Cancels `source` and waits for its cancel handler, which it sets.
func cancelAndWait(_ source: EventSource, sourceLocation: SourceLocation = #_sourceLocation) {
    let cancelled = WorkSemaphore(value: 0)
    source.setCancelHandler { cancelled.signal() }
    source.cancel()
    #expect(cancelled.wait(timeout: patience) == .success, sourceLocation: sourceLocation)
}

/// A pipe's two ends.
struct SourcePipe {
    let read: FileDescriptor
    let write: FileDescriptor

    init() {
        var fds: [CInt] = [0, 0]
        precondition(pipe(&fds) == 0)
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        read = FileDescriptor(rawValue: fds[0])
        write = FileDescriptor(rawValue: fds[1])
    }
}

/// A fresh directory under /tmp, removed with `remove()`.
struct SourceTemporaryDirectory {
    let path: String

    init() {
        var template = Array("/tmp/eventsource-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil)
        path = String(cString: made!)
    }

    /// Removes the files in the directory (tests create no subdirectories), then the directory.
    func remove() {
        if let directory = opendir(path) {
            while let entry = readdir(directory) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) {
                    String(cString: $0.bindMemory(to: CChar.self).baseAddress!)
                }
                if name != "." && name != ".." { _ = unlink(path + "/" + name) }
            }
            closedir(directory)
        }
        _ = rmdir(path)
    }
}
