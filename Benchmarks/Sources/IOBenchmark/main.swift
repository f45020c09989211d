// IOBenchmark: IOChannel against the toolchain's DispatchIO on the same work.
//
// Each measurement runs in a child process of its own (this program, re-executed with `--run SIDE CASE`),
// so that each side's peak RSS is its own; the parent alternates the sides A B A B and prints medians.
//
//   IOBenchmark [--size MiB] [--reps N] [--case NAME]
//
// Cases: read (stream channel, sink handler), random-read, copy (stream → stream), copy-random, pipe
// (a writer thread pushes the bytes through a pipe; the channel reads them).

import Dispatch
import DispatchData
import DispatchIO
import DispatchQueues
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

func now() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

func peakRSSKiB() -> Int {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return usage.ru_maxrss
}

let cases = ["read", "random-read", "copy", "copy-random", "pipe"]

/// A counter shared by handlers.
final class Count: @unchecked Sendable {
    private var lock = pthread_mutex_t()
    private var value = 0
    init() { pthread_mutex_init(&lock, nil) }
    func add(_ n: Int) -> Int {
        pthread_mutex_lock(&lock)
        value += n
        let v = value
        pthread_mutex_unlock(&lock)
        return v
    }
    var current: Int { add(0) }
}

// MARK: - One measurement (child process)

func runOurs(_ name: String, input: String, output: String, size: Int) -> Int {
    let done = DispatchSemaphore(value: 0)
    let queue = WorkQueue(label: "bench")
    let bytes = Count()
    switch name {
    case "read", "random-read":
        let fd = FileDescriptor(rawValue: open(input, O_RDONLY))
        let channel = IOChannel(type: name == "read" ? .stream : .random, fileDescriptor: fd, queue: queue) { _ in }
        channel.read(offset: 0, length: .max, queue: queue) { finished, data, _ in
            _ = bytes.add(data?.count ?? 0)
            if finished { done.signal() }
        }
        done.wait()
        channel.close()
        close(fd.rawValue)
    case "copy", "copy-random":
        let type: IOChannel.StreamType = name == "copy" ? .stream : .random
        let fd = FileDescriptor(rawValue: open(input, O_RDONLY))
        let out = FileDescriptor(rawValue: open(output, O_WRONLY | O_CREAT | O_TRUNC, 0o644))
        let reader = IOChannel(type: type, fileDescriptor: fd, queue: queue) { _ in }
        let writer = IOChannel(type: type, fileDescriptor: out, queue: queue) { _ in }
        let offset = Count()
        let readDone = Count()
        reader.read(offset: 0, length: .max, queue: queue) { finished, data, _ in
            if let data, !data.isEmpty {
                let at = offset.add(data.count) - data.count
                _ = readDone.add(0)
                writer.write(offset: Int64(at), data: data, queue: queue) { wrote, _, _ in
                    if wrote, bytes.add(data.count) == size { done.signal() }
                }
            }
            if finished && offset.current == 0 { done.signal() }
        }
        done.wait()
        reader.close()
        writer.close()
        close(fd.rawValue)
        close(out.rawValue)
    case "pipe":
        var fds: [CInt] = [0, 0]
        _ = pipe(&fds)
        let writer = startWriter(fd: fds[1], size: size)
        let channel = IOChannel(type: .stream, fileDescriptor: FileDescriptor(rawValue: fds[0]), queue: queue) { _ in }
        channel.read(offset: 0, length: .max, queue: queue) { finished, data, _ in
            _ = bytes.add(data?.count ?? 0)
            if finished { done.signal() }
        }
        done.wait()
        pthread_join(writer, nil)
        channel.close()
        close(fds[0])
    default:
        fatalError("unknown case \(name)")
    }
    return bytes.current
}

func runTheirs(_ name: String, input: String, output: String, size: Int) -> Int {
    let done = DispatchSemaphore(value: 0)
    let queue = DispatchQueue(label: "bench")
    let bytes = Count()
    switch name {
    case "read", "random-read":
        let fd = open(input, O_RDONLY)
        let channel = DispatchIO(type: name == "read" ? .stream : .random, fileDescriptor: fd, queue: queue) { _ in }
        channel.read(offset: 0, length: .max, queue: queue) { finished, data, _ in
            _ = bytes.add(data?.count ?? 0)
            if finished { done.signal() }
        }
        done.wait()
        channel.close()
        close(fd)
    case "copy", "copy-random":
        let type: DispatchIO.StreamType = name == "copy" ? .stream : .random
        let fd = open(input, O_RDONLY)
        let out = open(output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let reader = DispatchIO(type: type, fileDescriptor: fd, queue: queue) { _ in }
        let writer = DispatchIO(type: type, fileDescriptor: out, queue: queue) { _ in }
        let offset = Count()
        reader.read(offset: 0, length: .max, queue: queue) { finished, data, _ in
            if let data, !data.isEmpty {
                let at = offset.add(data.count) - data.count
                writer.write(offset: off_t(at), data: data, queue: queue) { wrote, _, _ in
                    if wrote, bytes.add(data.count) == size { done.signal() }
                }
            }
            if finished && offset.current == 0 { done.signal() }
        }
        done.wait()
        reader.close()
        writer.close()
        close(fd)
        close(out)
    case "pipe":
        var fds: [CInt] = [0, 0]
        _ = pipe(&fds)
        let writer = startWriter(fd: fds[1], size: size)
        let channel = DispatchIO(type: .stream, fileDescriptor: fds[0], queue: queue) { _ in }
        channel.read(offset: 0, length: .max, queue: queue) { finished, data, _ in
            _ = bytes.add(data?.count ?? 0)
            if finished { done.signal() }
        }
        done.wait()
        pthread_join(writer, nil)
        channel.close()
        close(fds[0])
    default:
        fatalError("unknown case \(name)")
    }
    return bytes.current
}

/// A thread that writes `size` bytes into `fd` with plain 1 MiB writes, then closes it.
func startWriter(fd: CInt, size: Int) -> pthread_t {
    final class Job {
        let fd: CInt
        let size: Int
        init(_ fd: CInt, _ size: Int) {
            self.fd = fd
            self.size = size
        }
    }
    var thread = pthread_t()
    let context = Unmanaged.passRetained(Job(fd, size)).toOpaque()
    pthread_create(
        &thread,
        nil,
        { context in
            let job = Unmanaged<Job>.fromOpaque(context!).takeRetainedValue()
            let block = UnsafeMutableRawPointer.allocate(byteCount: 1 << 20, alignment: 4096)
            memset(block, 0x5A, 1 << 20)
            var left = job.size
            while left > 0 {
                let n = write(job.fd, block, min(left, 1 << 20))
                if n <= 0 { break }
                left -= n
            }
            close(job.fd)
            block.deallocate()
            return nil
        },
        context
    )
    return thread
}

// MARK: - Parent: alternate the sides, report medians

func spawnChild(_ arguments: [String]) -> (seconds: Double, rssKiB: Int, bytes: Int)? {
    var pipeFDs: [CInt] = [0, 0]
    _ = pipe(&pipeFDs)
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], STDOUT_FILENO)
    posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
    let argv = ([CommandLine.arguments[0]] + arguments).map { strdup($0) } + [nil]
    var pid = pid_t()
    let rc = posix_spawn(&pid, "/proc/self/exe", &actions, nil, argv, environ)
    for pointer in argv { free(pointer) }
    posix_spawn_file_actions_destroy(&actions)
    close(pipeFDs[1])
    guard rc == 0 else { return nil }
    var output: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(pipeFDs[0], $0.baseAddress, $0.count) }
        if n <= 0 { break }
        output += buffer[0..<n]
    }
    close(pipeFDs[0])
    var status: CInt = 0
    waitpid(pid, &status, 0)
    let fields = String(decoding: output, as: UTF8.self).split(separator: " ").map { String($0).trimmingSpaces }
    guard fields.count == 3, let seconds = Double(fields[0]), let rss = Int(fields[1]), let bytes = Int(fields[2])
    else {
        return nil
    }
    return (seconds, rss, bytes)
}

extension String {
    var trimmingSpaces: String { String(self.filter { !$0.isWhitespace }) }
}

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

func format(_ value: Double, _ digits: Int = 2) -> String {
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    return String((value * scale).rounded() / scale)
}

func pad(_ s: String, _ width: Int) -> String {
    s.count >= width ? s : s + String(repeating: " ", count: width - s.count)
}

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "--run" {
    let side = arguments[1]
    let name = arguments[2]
    let input = arguments[3]
    let output = arguments[4]
    let size = Int(arguments[5])!
    let start = now()
    let bytes =
        side == "ours"
        ? runOurs(name, input: input, output: output, size: size)
        : runTheirs(name, input: input, output: output, size: size)
    let seconds = now() - start
    print("\(seconds) \(peakRSSKiB()) \(bytes)")
    exit(0)
}

var sizeMiB = 1024
var reps = 5
var only: String?
var index = 0
while index < arguments.count {
    switch arguments[index] {
    case "--size":
        sizeMiB = Int(arguments[index + 1])!
        index += 1
    case "--reps":
        reps = Int(arguments[index + 1])!
        index += 1
    case "--case":
        only = arguments[index + 1]
        index += 1
    default: break
    }
    index += 1
}
let size = sizeMiB << 20
let input = "/tmp/iobench-input-\(sizeMiB)m"
let output = "/tmp/iobench-output"
var st = stat()
if stat(input, &st) != 0 || Int(st.st_size) != size {
    let fd = open(input, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    let block = UnsafeMutableRawPointer.allocate(byteCount: 1 << 20, alignment: 4096)
    for i in 0..<(1 << 20) {
        block.storeBytes(of: UInt8(truncatingIfNeeded: i &* 131), toByteOffset: i, as: UInt8.self)
    }
    for _ in 0..<sizeMiB { _ = write(fd, block, 1 << 20) }
    block.deallocate()
    close(fd)
}
// Warm the page cache.
let warm = open(input, O_RDONLY)
let scratch = UnsafeMutableRawPointer.allocate(byteCount: 1 << 20, alignment: 4096)
while read(warm, scratch, 1 << 20) > 0 {}
close(warm)

print(
    "IOChannel vs DispatchIO, \(sizeMiB) MiB, warm page cache, median of \(reps) alternating runs (each in its own process)"
)
print(
    pad("case", 14) + pad("ours GiB/s", 12) + pad("theirs GiB/s", 14) + pad("speed-up", 10) + pad("ours RSS", 11)
        + "theirs RSS"
)
for name in cases where only == nil || only == name {
    var times: [[Double]] = [[], []]
    var rss: [[Double]] = [[], []]
    for _ in 0..<reps {
        for (side, label) in ["ours", "theirs"].enumerated() {
            guard let result = spawnChild(["--run", label, name, input, output, String(size)]) else {
                print("\(name) \(label): child failed")
                continue
            }
            if result.bytes != size {
                print("\(name) \(label): \(result.bytes) bytes of \(size) — lost or duplicated!")
            }
            times[side].append(result.seconds)
            rss[side].append(Double(result.rssKiB))
        }
        unlink(output)
    }
    guard !times[0].isEmpty, !times[1].isEmpty else { continue }
    let ours = Double(size) / median(times[0]) / Double(1 << 30)
    let theirs = Double(size) / median(times[1]) / Double(1 << 30)
    print(
        pad(name, 14) + pad(format(ours), 12) + pad(format(theirs), 14) + pad(format(ours / theirs) + "x", 10)
            + pad(format(median(rss[0]) / 1024, 1) + " MiB", 11) + format(median(rss[1]) / 1024, 1) + " MiB"
    )
}
