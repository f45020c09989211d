// uring-demo: the engine on its own, before the tools exist.
//
//   uring-demo FILE...          open, stat, read and close each file through the engine; print a summary
//   uring-demo bench [--quick]  the engine benchmark: io_uring and POSIX engines side by side
//
// The engine is internal to the package, so its benchmark lives here rather than under Benchmarks/.

import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

func printError(_ message: String) {
    let line = message + "\n"
    _ = line.withCString { Glibc.write(STDERR_FILENO, $0, strlen($0)) }
}

/// A counting semaphore over `sem_t`, for waiting on engine handlers from the main thread.
final class Signal: @unchecked Sendable {
    private let semaphore = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
    init() { sem_init(semaphore, 0, 0) }
    deinit {
        sem_destroy(semaphore)
        semaphore.deallocate()
    }
    func signal() { sem_post(semaphore) }
    func wait() { while sem_wait(semaphore) != 0 && errno == EINTR {} }
}

func now() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// Page-aligned memory the engine reads into; freed when the last reference goes.
final class IOBuffer: @unchecked Sendable {
    let bytes: UnsafeMutableRawBufferPointer
    init(count: Int) {
        bytes = .allocate(byteCount: count, alignment: 4096)
        memset(bytes.baseAddress!, 0, count)  // fault the pages in before anything is timed
    }
    deinit { bytes.deallocate() }
}

// MARK: - Demo

/// FNV-1a, to show the bytes arrived intact without printing them.
func fnv1a(_ bytes: UnsafeRawBufferPointer, _ hash: inout UInt64) {
    for byte in bytes {
        hash ^= UInt64(byte)
        hash = hash &* 0x100_0000_01b3
    }
}

final class FileReport: @unchecked Sendable {
    var line = ""
    var ok = false
    var total = 0
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
}

/// Reads one file entirely through the engine: openat, statx, read until end of file, close.
func demo(_ path: String, engine: IOEngine) -> (line: String, ok: Bool) {
    let done = Signal()
    let report = FileReport()
    let buffer = IOBuffer(count: 1 << 20)
    engine.openat(path: FilePath(path), flags: O_RDONLY) { opened in
        if let error = opened.error {
            report.line = "\(path): \(error)"
            done.signal()
            return
        }
        let fd = CInt(opened.result)
        engine.stat(fd, path: "", flags: IOEngine.emptyPathFlag) { status in
            let size = (try? status.get().size).map(String.init) ?? "?"
            // Each completion submits the next read from the engine thread: no wake-ups, one batch each.
            @Sendable func next() {
                engine.read(fd, into: buffer.bytes, at: Int64(report.total), keepAlive: buffer) { read in
                    if let error = read.error {
                        report.line = "\(path): \(error)"
                    } else if read.result > 0 {
                        fnv1a(UnsafeRawBufferPointer(rebasing: buffer.bytes[0..<read.result]), &report.hash)
                        report.total += read.result
                        next()
                        return
                    } else {
                        let hex = String(report.hash, radix: 16)
                        report.line = "\(path): statx size \(size), read \(report.total) bytes, fnv1a \(hex)"
                        report.ok = true
                    }
                    engine.close(fd) { _ in done.signal() }
                }
            }
            next()
        }
    }
    done.wait()
    return (report.line, report.ok)
}

// MARK: - Benchmark

/// Reads `size` bytes of `fd` with `depth` reads of `block` bytes in flight; returns seconds taken.
func readFile(_ fd: CInt, size: Int, block: Int, depth: Int, offload: Bool = false, engine: IOEngine) -> Double {
    final class State: @unchecked Sendable {
        let lock = Lock()
        var nextOffset = 0
        var bytes = 0
        var active = 0
        var failed: Errno?
    }
    let state = State()
    let done = Signal()
    let buffers = (0..<depth).map { _ in IOBuffer(count: block) }

    @Sendable func issue(_ buffer: IOBuffer) {
        let offset = state.lock.withLock { () -> Int? in
            guard state.nextOffset < size else { return nil }
            defer { state.nextOffset += block }
            return state.nextOffset
        }
        guard let offset else {
            if state.lock.withLock({ () -> Bool in
                state.active -= 1
                return state.active == 0
            }) {
                done.signal()
            }
            return
        }
        engine.read(fd, into: buffer.bytes, at: Int64(offset), offload: offload, keepAlive: buffer) { completion in
            if let error = completion.error { state.lock.withLock { state.failed = error } }
            state.lock.withLock { state.bytes += completion.result }
            issue(buffer)
        }
    }
    let start = now()
    state.lock.withLock { state.active = depth }
    for buffer in buffers { issue(buffer) }
    done.wait()
    let elapsed = now() - start
    precondition(
        state.failed == nil && state.bytes == size,
        "read \(state.bytes) of \(size): \(String(describing: state.failed))"
    )
    return elapsed
}

/// Nop round trips: one at a time from this thread (the submit-wake-complete-signal latency), and
/// chained in the handler on the engine thread (the engine's own cost per operation).
func nops(_ engine: IOEngine, count: Int, chained: Bool) -> Double {
    let done = Signal()
    let start = now()
    if chained {
        final class Counter: @unchecked Sendable { var left = 0 }
        let counter = Counter()
        counter.left = count
        @Sendable func go() {
            engine.nop { _ in
                counter.left -= 1
                if counter.left == 0 { done.signal() } else { go() }
            }
        }
        go()
        done.wait()
    } else {
        for _ in 0..<count {
            engine.nop { _ in done.signal() }
            done.wait()
        }
    }
    return now() - start
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted[sorted.count / 2]
}

func pad(_ s: String, _ width: Int) -> String {
    s.count >= width ? s : s + String(repeating: " ", count: width - s.count)
}

func format(_ value: Double, _ digits: Int = 2) -> String {
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let rounded = (value * scale).rounded() / scale
    return String(rounded)
}

func benchmark(quick: Bool) {
    let size = quick ? 256 << 20 : 1 << 30
    let path = "/tmp/uring-demo-bench-\(size >> 20)m"
    var st = stat()
    if stat(path, &st) != 0 || Int(st.st_size) != size {
        printError("creating \(path) (\(size >> 20) MiB)…")
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        precondition(fd >= 0, "cannot create \(path)")
        let block = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
        for index in 0..<(1 << 20) { block[index] = UInt8(truncatingIfNeeded: index &* 31 &+ 7) }
        for _ in 0..<(size >> 20) { precondition(write(fd, block.baseAddress, 1 << 20) == 1 << 20) }
        block.deallocate()
        close(fd)
    }
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    precondition(fd >= 0)
    defer { close(fd) }
    let engines = EngineKind.allCases.map { try! IOEngine(kind: $0) }
    defer { for engine in engines { engine.shutdown() } }
    // Warm the page cache and both engines.
    for engine in engines { _ = readFile(fd, size: size, block: 1 << 20, depth: 8, engine: engine) }

    let reps = quick ? 3 : 5
    print("engine benchmark: \(size >> 20) MiB warm file \(path); median of \(reps) alternating runs")
    print("default engine: \(IOEngine.selection.kind) (\(IOEngine.selection.reason))")
    print("")
    print(pad("operation", 34) + pad("uring", 14) + pad("posix", 14) + "uring/posix")
    let nopCount = quick ? 20_000 : 100_000
    for chained in [false, true] {
        var times: [[Double]] = [[], []]
        for _ in 0..<reps {
            for (index, engine) in engines.enumerated() {
                times[index].append(nops(engine, count: nopCount, chained: chained))
            }
        }
        let rates = times.map { Double(nopCount) / median($0) }
        let label = chained ? "nop, chained in handler" : "nop round trip from caller"
        print(
            pad(label, 34) + pad("\(format(rates[0] / 1e6, 3)) M/s", 14) + pad("\(format(rates[1] / 1e6, 3)) M/s", 14)
                + format(rates[0] / rates[1]) + "x"
        )
    }
    for block in [128 << 10, 1 << 20] {
        for (depth, offload) in [(1, false), (8, false), (32, false), (8, true), (32, true)] {
            var times: [[Double]] = [[], []]
            for _ in 0..<reps {
                for (index, engine) in engines.enumerated() {
                    times[index].append(
                        readFile(fd, size: size, block: block, depth: depth, offload: offload, engine: engine)
                    )
                }
            }
            let rates = times.map { Double(size) / median($0) / Double(1 << 30) }
            let label = "read \(block >> 10) KiB x QD \(depth)" + (offload ? " offload" : "")
            print(
                pad(label, 34) + pad("\(format(rates[0])) GiB/s", 14) + pad("\(format(rates[1])) GiB/s", 14)
                    + format(rates[0] / rates[1]) + "x"
            )
        }
    }
}

// MARK: - Main

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "bench" {
    benchmark(quick: arguments.contains("--quick"))
} else if arguments.isEmpty || arguments.first?.hasPrefix("-") == true {
    printError("usage: uring-demo FILE...      read files through the engine and summarise them")
    printError("       uring-demo bench [--quick]  engine benchmark, io_uring and POSIX side by side")
    exit(2)
} else {
    let engine = IOEngine.shared
    print("engine: \(engine.kind) (\(IOEngine.selection.reason))")
    var failed = false
    for path in arguments {
        let (line, ok) = demo(path, engine: engine)
        print(line)
        if !ok { failed = true }
    }
    exit(failed ? 1 : 0)
}
