import Dispatch
import DispatchQueues
import Synchronization

// SourcesBenchmark: EventSource against the toolchain's DispatchSource, side by side in one run.
//
// Rows (issue 6):
// - 10,000 one-shot strict timers with deadlines spread over one second: lateness (handler start minus
//   deadline) p50 and p99.
// - 1M merges into a data-add source from two threads: merges per second, and how many handler runs the
//   merges were coalesced into.
// Each row runs ours and libdispatch alternately (A B A B ...) for `rounds` rounds and prints the medians.
// Build with `swift build -c release` in Benchmarks/ and run `.build/release/SourcesBenchmark [rounds]`.
#if canImport(Glibc)
import Glibc
#endif

let rounds = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 5 : 5
let timerCount = 10_000
let mergeCount = 1_000_000

func nanoseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.count % 2 == 1
        ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

func percentile(_ sorted: [Int64], _ p: Double) -> Double {
    Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))])
}

/// `value` with `decimals` decimals, right-aligned in `width` columns (no Foundation here).
func fixed(_ value: Double, _ decimals: Int, width: Int = 12) -> String {
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    let scaled = Int((abs(value) * scale).rounded())
    let integer = scaled / Int(scale)
    var fraction = String(scaled % Int(scale))
    while fraction.count < decimals { fraction = "0" + fraction }
    let text = (value < 0 ? "-" : "") + String(integer) + (decimals > 0 ? "." + fraction : "")
    return String(repeating: " ", count: max(0, width - text.count)) + text
}

func pad(_ text: String, _ width: Int = 40) -> String {
    text + String(repeating: " ", count: max(0, width - text.count))
}

/// Lateness samples, one slot per timer, written by the handlers.
final class Samples: @unchecked Sendable {
    let values: UnsafeMutablePointer<Int64>
    let count: Int

    init(_ count: Int) {
        self.count = count
        values = .allocate(capacity: count)
        values.initialize(repeating: 0, count: count)
    }

    deinit { values.deallocate() }

    func sorted() -> [Int64] { Array(UnsafeBufferPointer(start: values, count: count)).sorted() }
}

/// Carries a value the toolchain's Dispatch overlay does not mark `Sendable` (its sources are thread-safe).
final class UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// Starts a detached pthread running `body`.
func startThread(_ body: @escaping @Sendable () -> Void) {
    final class Box: @unchecked Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    var thread = pthread_t()
    let box = Unmanaged.passRetained(Box(body)).toOpaque()
    pthread_create(
        &thread,
        nil,
        { raw in
            Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        },
        box
    )
    pthread_detach(thread)
}

// MARK: Timers

/// Returns (p50, p99) lateness in nanoseconds.
func oursTimers() -> (Double, Double) {
    let samples = Samples(timerCount)
    let done = WorkSemaphore(value: 0)
    let remaining = Atomic<Int>(timerCount)
    let start = ContinuousClock.now + .milliseconds(100)
    var sources: [EventSource] = []
    sources.reserveCapacity(timerCount)
    for index in 0..<timerCount {
        let deadline = start + .microseconds(index * 100)
        let source = EventSource.makeTimerSource(flags: .strict)
        source.setEventHandler {
            samples.values[index] = nanoseconds(deadline.duration(to: .now))
            if remaining.wrappingSubtract(1, ordering: .relaxed).newValue == 0 { done.signal() }
        }
        source.schedule(deadline: deadline)
        source.activate()
        sources.append(source)
    }
    done.wait()
    for source in sources { source.cancel() }
    let sorted = samples.sorted()
    return (percentile(sorted, 0.5), percentile(sorted, 0.99))
}

func theirTimers() -> (Double, Double) {
    let samples = Samples(timerCount)
    let done = DispatchSemaphore(value: 0)
    let remaining = Atomic<Int>(timerCount)
    let start = DispatchTime.now() + .milliseconds(100)
    var sources: [DispatchSourceTimer] = []
    sources.reserveCapacity(timerCount)
    for index in 0..<timerCount {
        let deadline = start + .microseconds(index * 100)
        let source = DispatchSource.makeTimerSource(flags: .strict, queue: .global())
        source.setEventHandler {
            samples.values[index] = Int64(DispatchTime.now().uptimeNanoseconds) - Int64(deadline.uptimeNanoseconds)
            if remaining.wrappingSubtract(1, ordering: .relaxed).newValue == 0 { done.signal() }
        }
        source.schedule(deadline: deadline, leeway: .nanoseconds(0))
        source.activate()
        sources.append(source)
    }
    done.wait()
    for source in sources { source.cancel() }
    let sorted = samples.sorted()
    return (percentile(sorted, 0.5), percentile(sorted, 0.99))
}

// MARK: Merges

/// Returns (merges per second, handler runs).
func oursMerges() -> (Double, Double) {
    let source = EventSource.makeUserDataAddSource()
    let total = Atomic<UInt>(0)
    let runs = Atomic<Int>(0)
    let done = WorkSemaphore(value: 0)
    source.setEventHandler {
        runs.wrappingAdd(1, ordering: .relaxed)
        if total.wrappingAdd(source.data, ordering: .relaxed).newValue == UInt(mergeCount) { done.signal() }
    }
    source.activate()
    let go = WorkGroup()
    let clock = ContinuousClock.now
    for _ in 0..<2 {
        go.enter()
        startThread {
            for _ in 0..<(mergeCount / 2) { source.merge(data: 1) }
            go.leave()
        }
    }
    go.wait()
    done.wait()
    let elapsed = Double(nanoseconds(ContinuousClock.now - clock))
    source.cancel()
    return (Double(mergeCount) / elapsed * 1e9, Double(runs.load(ordering: .relaxed)))
}

func theirMerges() -> (Double, Double) {
    let source = DispatchSource.makeUserDataAddSource(queue: .global())
    let total = Atomic<UInt>(0)
    let runs = Atomic<Int>(0)
    let done = DispatchSemaphore(value: 0)
    source.setEventHandler {
        runs.wrappingAdd(1, ordering: .relaxed)
        if total.wrappingAdd(source.data, ordering: .relaxed).newValue == UInt(mergeCount) { done.signal() }
    }
    source.activate()
    let go = DispatchGroup()
    let clock = ContinuousClock.now
    let shared = UncheckedBox(source)
    for _ in 0..<2 {
        go.enter()
        startThread {
            for _ in 0..<(mergeCount / 2) { shared.value.add(data: 1) }
            go.leave()
        }
    }
    go.wait()
    done.wait()
    let elapsed = Double(nanoseconds(ContinuousClock.now - clock))
    source.cancel()
    return (Double(mergeCount) / elapsed * 1e9, Double(runs.load(ordering: .relaxed)))
}

// MARK: Run

func compare(_ name: String, _ columns: (String, String), ours: () -> (Double, Double), theirs: () -> (Double, Double))
{
    var a: [(Double, Double)] = []
    var b: [(Double, Double)] = []
    for _ in 0..<rounds {
        a.append(ours())
        b.append(theirs())
    }
    let mine = (median(a.map(\.0)), median(a.map(\.1)))
    let their = (median(b.map(\.0)), median(b.map(\.1)))
    print(pad(name + " " + columns.0), fixed(mine.0, 1), fixed(their.0, 1), fixed(mine.0 / their.0, 2, width: 8))
    print(pad(name + " " + columns.1), fixed(mine.1, 1), fixed(their.1, 1), fixed(mine.1 / their.1, 2, width: 8))
}

/// The first field of /proc/loadavg: timer tails are dominated by other load on the machine, so it is printed.
func loadAverage() -> String {
    guard let file = fopen("/proc/loadavg", "r") else { return "?" }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 64)
    guard fgets(&buffer, 64, file) != nil else { return "?" }
    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return String(text.split(separator: " ").first ?? "?")
}

print("SourcesBenchmark: \(rounds) rounds per row, alternating ours/libdispatch, medians; load \(loadAverage())")
print(pad("row"), "        ours", " libdispatch", "   ratio")
compare("10k timers over 1 s, lateness", ("p50 us", "p99 us")) {
    let (p50, p99) = oursTimers()
    return (p50 / 1000, p99 / 1000)
} theirs: {
    let (p50, p99) = theirTimers()
    return (p50 / 1000, p99 / 1000)
}
compare("1M merges, 2 threads:", ("merges/s (M)", "handler runs")) {
    let (rate, runs) = oursMerges()
    return (rate / 1e6, runs)
} theirs: {
    let (rate, runs) = theirMerges()
    return (rate / 1e6, runs)
}
