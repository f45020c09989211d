import DispatchData
import DispatchIO
import DispatchQueues
import SystemPackage
import Testing
import URing

#if canImport(Glibc)
import Glibc
#endif

/// How long a test waits for a handler or a promise before it fails instead of hanging.
let testWaitLimit: Duration = .seconds(30)

/// One engine of each kind for the whole suite (channels may still hold them between tests).
enum Engines {
    static let uring = try! IOEngine(kind: .uring)
    static let posix = try! IOEngine(kind: .posix)

    static func get(_ kind: EngineKind) -> IOEngine { kind == .uring ? uring : posix }
}

/// One `(done, data, error)` call as a test sees it.
struct Call: Equatable, CustomStringConvertible {
    var done: Bool
    var count: Int?
    var error: Errno?

    var description: String { "(\(done), \(count.map(String.init) ?? "nil"), \(error.map { "\($0)" } ?? "nil"))" }
}

/// Records the handler calls of one operation, and waits for the final one.
final class Recorder: @unchecked Sendable {
    private let lock = Lock()
    private var calls: [Call] = []
    private var data: [UInt8] = []
    private var waiter: CheckedContinuation<Void, Never>?
    private var finished = false
    let queue: WorkQueue

    init(queue: WorkQueue = WorkQueue(label: "recorder")) { self.queue = queue }

    var handler: @Sendable (Bool, DispatchDataBuffer?, Errno?) -> Void {
        { [self] done, buffer, error in record(done, buffer, error) }
    }

    func record(_ done: Bool, _ buffer: DispatchDataBuffer?, _ error: Errno?) {
        lock.lock()
        calls.append(Call(done: done, count: buffer?.count, error: error))
        if let buffer { data += Array(buffer) }
        if done {
            finished = true
            let waiter = self.waiter
            self.waiter = nil
            lock.unlock()
            waiter?.resume()
        } else {
            lock.unlock()
        }
    }

    /// Waits for the final call; returns every call. A final call that has not come within `limit` is a
    /// failed test, not a hung one: the suites' time limits cannot end a wait on a continuation.
    func wait(limit: Duration = testWaitLimit) async -> [Call] {
        await withCheckedContinuation { continuation in
            lock.lock()
            if finished {
                lock.unlock()
                continuation.resume()
            } else {
                waiter = continuation
                lock.unlock()
                WorkQueue.global().asyncAfter(deadline: .now + limit) { [self] in
                    let late = lock.withLock { () -> CheckedContinuation<Void, Never>? in
                        defer { waiter = nil }
                        return waiter
                    }
                    late?.resume()
                }
            }
        }
        return lock.withLock {
            if !finished { Issue.record("no final handler call within \(limit); calls so far: \(calls)") }
            return calls
        }
    }

    var bytes: [UInt8] { lock.withLock { data } }
    var soFar: [Call] { lock.withLock { calls } }
}

/// Waits for a value set once from any thread.
final class Promise<Value: Sendable>: @unchecked Sendable {
    private let lock = Lock()
    private var value: Value?
    private var waiter: CheckedContinuation<Value, Never>?

    func fulfil(_ newValue: Value) {
        lock.lock()
        precondition(value == nil, "promise fulfilled twice")
        value = newValue
        let waiter = self.waiter
        self.waiter = nil
        lock.unlock()
        waiter?.resume(returning: newValue)
    }

    var isFulfilled: Bool { lock.withLock { value != nil } }

    /// The value, once fulfilled. One not fulfilled within `limit` stops the test run with a message (there
    /// is no value to go on with), rather than hanging it: the suites' time limits cannot end this wait.
    func get(limit: Duration = testWaitLimit) async -> Value {
        await withCheckedContinuation { continuation in
            lock.lock()
            if let value {
                lock.unlock()
                continuation.resume(returning: value)
            } else {
                waiter = continuation
                lock.unlock()
                WorkQueue.global().asyncAfter(deadline: .now + limit) { [self] in
                    let unfulfilled = lock.withLock { waiter != nil }
                    if unfulfilled { fatalError("a promise was not fulfilled within \(limit)") }
                }
            }
        }
    }
}

/// A fresh directory under /tmp, removed by `cleanup`.
struct TemporaryDirectory {
    let path: String

    init() {
        var template = Array("/tmp/dispatchio-tests-XXXXXX".utf8CString)
        _ = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    func file(_ name: String) -> String { path + "/" + name }

    /// Writes `bytes` to a new file and returns its path.
    @discardableResult
    func make(_ name: String, _ bytes: [UInt8]) -> String {
        let path = file(name)
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        precondition(fd >= 0)
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, $0.count - written) }
            precondition(n > 0)
            written += n
        }
        close(fd)
        return path
    }

    func cleanup() {
        _ = path.withCString { p in
            // Tests only make flat directories.
            if let dir = opendir(p) {
                while let entry = readdir(dir) {
                    let name = withUnsafeBytes(of: entry.pointee.d_name) {
                        String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self)
                    }
                    if name != "." && name != ".." { unlink(file(name)) }
                }
                closedir(dir)
            }
            return rmdir(p)
        }
    }
}

/// Deterministic bytes: every value, no runs.
func pattern(_ count: Int, seed: Int = 0) -> [UInt8] {
    [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
        for index in 0..<count { buffer[index] = UInt8(truncatingIfNeeded: (index &* 131) &+ (index >> 8) &+ seed) }
        initialized = count
    }
}

func openRead(_ path: String) -> FileDescriptor {
    FileDescriptor(rawValue: open(path, O_RDONLY | O_CLOEXEC))
}

func makePipe() -> (read: FileDescriptor, write: FileDescriptor) {
    var fds: [CInt] = [0, 0]
    precondition(pipe(&fds) == 0)
    for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    return (FileDescriptor(rawValue: fds[0]), FileDescriptor(rawValue: fds[1]))
}

/// A cleanup handler that fulfils `promise` with its error.
func cleanup(_ promise: Promise<Errno?>) -> @Sendable (Errno?) -> Void {
    { error in promise.fulfil(error) }
}

/// Runs an engine round trip, which lets anything already submitted reach the kernel.
func settle(_ engine: IOEngine) async {
    await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in engine.nop { _ in c.resume() } }
}

/// Byte-for-byte equality, reported as one Boolean: `#expect(a == b)` on megabyte arrays would make the
/// testing library compute a diff of millions of elements when they differ.
/// Records one short issue when `actual` differs from `expected`: `#expect` would print both arrays, megabytes
/// of them (which once made a failure look like a hang).
func expectSameBytes(
    _ actual: [UInt8],
    _ expected: [UInt8],
    sourceLocation: SourceLocation = #_sourceLocation
) {
    guard !sameBytes(actual, expected) else { return }
    let firstDifference =
        zip(actual, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        ?? min(actual.count, expected.count)
    Issue.record(
        "bytes differ: \(actual.count) bytes, \(expected.count) expected, first difference at \(firstDifference)",
        sourceLocation: sourceLocation
    )
}

func sameBytes(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    if a.isEmpty { return true }
    return a.withUnsafeBytes { x in b.withUnsafeBytes { y in memcmp(x.baseAddress!, y.baseAddress!, a.count) == 0 } }
}

/// Whether a write to a pipe may come back short instead of waiting until all of it is written: pipes take
/// `RWF_NOWAIT` (`FMODE_NOWAIT`) since Linux 6.4, which both engines' short pipe writes rest on.
func pipesTakeShortWrites() -> Bool {
    var name = utsname()
    uname(&name)
    let release = withUnsafeBytes(of: name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    let numbers = release.split(whereSeparator: { !$0.isNumber }).prefix(2).compactMap { Int($0) }
    return numbers.count == 2 && (numbers[0], numbers[1]) >= (6, 4)
}

/// A channel on `fd` with the suite's engine of `kind`, whose cleanup fulfils `cleaned` when one is given.
func makeChannel(
    _ type: IOChannel.StreamType,
    _ fd: FileDescriptor,
    _ kind: EngineKind,
    cleaned: Promise<Errno?>? = nil
) -> IOChannel {
    IOChannel(type: type, fileDescriptor: fd, queue: WorkQueue(label: "c"), engine: Engines.get(kind)) { error in
        cleaned?.fulfil(error)
    }
}

/// Reads `length` bytes at `offset` (to the end by default) and waits for the final call.
@discardableResult
func readAndWait(_ channel: IOChannel, offset: Int64 = 0, length: Int = .max) async -> Recorder {
    let recorder = Recorder()
    channel.read(offset: offset, length: length, queue: recorder.queue, handler: recorder.handler)
    _ = await recorder.wait()
    return recorder
}
