import SystemPackage
import Testing
import URing

#if canImport(Glibc)
import Glibc
#endif

/// Runs one engine operation and returns its completion (or, after 30 s without one, records an issue and
/// returns `ETIMEDOUT`).
func complete(
    sourceLocation: SourceLocation = #_sourceLocation,
    _ submit: (@escaping CompletionHandler) -> Void
) async -> IOCompletion {
    await awaitCallback(orElse: IOCompletion(result: -1, error: .timedOut), sourceLocation: sourceLocation) {
        submit($0)
    }
}

/// Awaits a value delivered to a callback, giving up after `limit`: a value that never comes records an
/// issue and returns `fallback`, so that a regression fails its test instead of hanging the whole run (a
/// suite's `.timeLimit` cannot end a wait on a continuation). A value after that is dropped.
func awaitCallback<T: Sendable>(
    _ limit: Duration = .seconds(30),
    orElse fallback: T,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ start: (@escaping @Sendable (T) -> Void) -> Void
) async -> T {
    let waiter = Locked<CheckedContinuation<T, Never>?>(nil)
    let take: @Sendable () -> CheckedContinuation<T, Never>? = {
        waiter.withLock { slot in
            defer { slot = nil }
            return slot
        }
    }
    return await withCheckedContinuation { continuation in
        waiter.withLock { $0 = continuation }
        let timer = Task {
            try? await Task.sleep(for: limit)
            guard !Task.isCancelled, let continuation = take() else { return }
            Issue.record("no result within \(limit)", sourceLocation: sourceLocation)
            continuation.resume(returning: fallback)
        }
        start { value in
            timer.cancel()
            take()?.resume(returning: value)
        }
    }
}

/// An engine of `kind` for the duration of `body`, shut down afterwards.
func withEngine<T>(_ kind: EngineKind, _ body: (IOEngine) async throws -> T) async throws -> T {
    let engine = try IOEngine(kind: kind)
    defer { engine.shutdown() }
    return try await body(engine)
}

/// A pipe's two ends.
struct Pipe {
    let read: CInt
    let write: CInt

    init(nonBlocking: Bool = false) {
        var fds: [CInt] = [0, 0]
        let rc = pipe(&fds)
        precondition(rc == 0)
        read = fds[0]
        write = fds[1]
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            if nonBlocking { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        }
    }

    func close() {
        Glibc.close(read)
        Glibc.close(write)
    }
}

/// A connected pair of Unix stream sockets.
func socketPair() -> (CInt, CInt) {
    var fds: [CInt] = [0, 0]
    let rc = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds)
    precondition(rc == 0)
    return (fds[0], fds[1])
}

/// A fresh empty directory under /tmp, removed with everything in it by `cleanup`.
struct TemporaryDirectory {
    let path: String

    init() {
        var template = Array("/tmp/uring-tests-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil)
        path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    func file(_ name: String) -> String { path + "/" + name }

    func cleanup() { Self.remove(path) }

    /// Removes `path` and, if it is a directory, what is in it (some tests make subdirectories).
    private static func remove(_ path: String) {
        guard unlink(path) != 0, errno == EISDIR, let dir = opendir(path) else { return }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(cString: $0.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { remove(path + "/" + name) }
        }
        closedir(dir)
        rmdir(path)
    }
}

/// Opens (creating, truncating) a file for reading and writing.
func openFile(_ path: String, flags: CInt = O_RDWR | O_CREAT | O_TRUNC) -> CInt {
    let fd = open(path, flags | O_CLOEXEC, 0o644)
    precondition(fd >= 0, "open \(path): \(errno)")
    return fd
}

/// A descriptor number that is certainly not open now.
func closedDescriptor() -> CInt {
    let pipe = Pipe()
    pipe.close()
    return pipe.read
}

/// A byte buffer whose memory the test owns and frees.
final class Buffer: @unchecked Sendable {
    let pointer: UnsafeMutableRawBufferPointer

    init(count: Int, fill: UInt8? = nil) {
        pointer = .allocate(byteCount: max(count, 1), alignment: 4096)
        if let fill { pointer.initializeMemory(as: UInt8.self, repeating: fill) }
    }

    init(_ bytes: [UInt8]) {
        pointer = .allocate(byteCount: max(bytes.count, 1), alignment: 4096)
        pointer.copyBytes(from: bytes)
    }

    var bytes: UnsafeMutableRawBufferPointer { pointer }

    func slice(_ count: Int) -> UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(rebasing: pointer[0..<count])
    }

    func array(_ count: Int) -> [UInt8] { Array(pointer[0..<count]) }

    deinit { pointer.deallocate() }
}

/// Calls `released` when the last reference to it goes.
final class ReleaseWatch: Sendable {
    private let released: @Sendable () -> Void
    init(_ released: @escaping @Sendable () -> Void) { self.released = released }
    deinit { released() }
}

/// The number of entries in /proc/self/fd.
func openDescriptorCount() -> Int {
    guard let dir = opendir("/proc/self/fd") else { return -1 }
    var count = 0
    while readdir(dir) != nil { count += 1 }
    closedir(dir)
    return count
}

/// Checks that a suite leaves no more descriptors open than it found (the suite runs serialized, and the
/// whole test run with `--no-parallel`, so no other test opens descriptors meanwhile). Fewer is not a
/// leak: a suite that ran before may still be closing its last descriptors asynchronously (a channel's
/// cleanup, an event source's cancel), and one such close landed inside this suite once (45 → 44).
struct NoDescriptorLeaks: SuiteTrait, TestScoping {
    var isRecursive: Bool { false }

    func provideScope(
        for test: Test,
        testCase: Test.Case?,
        performing function: @Sendable () async throws -> Void
    ) async throws {
        // The shared engine lives for the whole process; create it first so it is not counted as a leak.
        _ = IOEngine.shared
        // So do the concurrency runtime's timers (libdispatch's, on Linux), which open a descriptor for each
        // clock on its first use: `awaitCallback`'s time limit is a `Task.sleep` on the continuous clock,
        // and a sleep for a delay is on the monotonic one. Something in the test process other than this
        // package's code arms a timer on that clock now and then: in about one run of the suite in ten its
        // count went up by that timerfd (CLOCK_MONOTONIC, in /proc/self/fdinfo) once the suite had new tests.
        try? await Task.sleep(for: .milliseconds(1))
        try? await Task.sleep(nanoseconds: 1_000_000)
        let before = openDescriptorCount()
        try await function()
        let after = openDescriptorCount()
        #expect(after <= before, "descriptors open before the suite: \(before), after: \(after)")
    }
}

extension Trait where Self == NoDescriptorLeaks {
    static var noDescriptorLeaks: Self { NoDescriptorLeaks() }
}

/// An operation submitted now, whose completion is awaited later. (`async let` would submit whenever the
/// child task happens to run, which races with what the test does next.)
final class Pending: @unchecked Sendable {
    private let lock = Lock()
    private var result: IOCompletion?
    private var waiter: (@Sendable (IOCompletion) -> Void)?
    private(set) var id: OperationID?

    init(_ submit: (@escaping CompletionHandler) -> OperationID) {
        let id = submit { [self] completion in resolve(completion) }
        lock.withLock { self.id = id }
    }

    private func resolve(_ completion: IOCompletion) {
        lock.lock()
        if let waiter {
            self.waiter = nil
            lock.unlock()
            waiter(completion)
        } else {
            result = completion
            lock.unlock()
        }
    }

    var value: IOCompletion {
        get async {
            await awaitCallback(orElse: IOCompletion(result: -1, error: .timedOut)) { deliver in
                lock.lock()
                if let result {
                    lock.unlock()
                    deliver(result)
                } else {
                    waiter = deliver
                    lock.unlock()
                }
            }
        }
    }

    /// Whether it has completed (without waiting).
    var isDone: Bool { lock.withLock { result != nil } }
}
