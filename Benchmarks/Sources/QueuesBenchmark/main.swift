// QueuesBenchmark: DispatchQueues against the toolchain's libdispatch, side by side in one run.
//
// Every row runs ours and theirs alternately (A B A B ...) for `rounds` rounds and prints the medians and
// the ratio ours/theirs (below 1.0: ours is faster). Build with `swift build -c release` in Benchmarks/
// and run `.build/release/QueuesBenchmark [rounds]`.
import Dispatch
import DispatchQueues
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

let rounds = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 5 : 5
let million = 1_000_000
/// Optional second argument: run only the rows whose name contains it.
let filter = CommandLine.arguments.count > 2 ? CommandLine.arguments[2] : ""

func nanoseconds(_ duration: Duration) -> Double {
    let (seconds, attoseconds) = duration.components
    return Double(seconds) * 1e9 + Double(attoseconds) / 1e9
}

/// Runs `body` and returns nanoseconds per operation.
func timed(_ operations: Int, _ body: () -> Void) -> Double {
    let start = ContinuousClock.now
    body()
    return nanoseconds(ContinuousClock.now - start) / Double(operations)
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.count % 2 == 1
        ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

func pad(_ text: String, _ width: Int = 44) -> String {
    text + String(repeating: " ", count: max(0, width - text.count))
}

/// `value` with `decimals` decimals, right-aligned in `width` columns (no Foundation here).
func fixed(_ value: Double, _ decimals: Int, width: Int) -> String {
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    let scaled = Int((abs(value) * scale).rounded())
    let integer = scaled / Int(scale)
    var fraction = String(scaled % Int(scale))
    while fraction.count < decimals { fraction = "0" + fraction }
    let text = (value < 0 ? "-" : "") + String(integer) + (decimals > 0 ? "." + fraction : "")
    return String(repeating: " ", count: max(0, width - text.count)) + text
}

func format(_ nanos: Double, unit: String) -> String {
    switch unit {
    case "us": return fixed(nanos / 1_000, 2, width: 9) + " us"
    default: return fixed(nanos, 1, width: 9) + " ns"
    }
}

func row(_ name: String, unit: String = "ns", reference: String, ours: () -> Double, theirs: () -> Double) {
    guard filter.isEmpty || name.contains(filter) else { return }
    var a: [Double] = []
    var b: [Double] = []
    for _ in 0..<rounds {
        a.append(ours())
        b.append(theirs())
    }
    let mineValue = median(a)
    let theirValue = median(b)
    print(
        pad(name),
        format(mineValue, unit: unit),
        format(theirValue, unit: unit),
        fixed(mineValue / theirValue, 2, width: 7),
        "  (issue: \(reference))"
    )
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
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            box.body()
            return nil
        },
        box
    )
    pthread_detach(thread)
}

print("QueuesBenchmark: \(rounds) rounds per row, alternating ours/libdispatch, medians")
print(pad("row"), "       ours", "  libdispatch", " ratio")

// Warm both pools up.
WorkQueue.concurrentPerform(iterations: 1_000) { _ in }
DispatchQueue.concurrentPerform(iterations: 1_000) { _ in }

row("serial async, 1M empty blocks", reference: "287 ns/op") {
    let queue = WorkQueue(label: "bench.serial")
    let done = WorkSemaphore(value: 0)
    return timed(million) {
        for _ in 0..<million { queue.async {} }
        queue.async { done.signal() }
        done.wait()
    }
} theirs: {
    let queue = DispatchQueue(label: "bench.serial")
    let done = DispatchSemaphore(value: 0)
    return timed(million) {
        for _ in 0..<million { queue.async {} }
        queue.async { done.signal() }
        done.wait()
    }
}

row("concurrent queue async, 1M empty blocks", reference: "949 ns/op") {
    let queue = WorkQueue(label: "bench.concurrent", attributes: .concurrent)
    return timed(million) {
        for _ in 0..<million { queue.async {} }
        queue.sync(flags: .barrier) {}
    }
} theirs: {
    let queue = DispatchQueue(label: "bench.concurrent", attributes: .concurrent)
    return timed(million) {
        for _ in 0..<million { queue.async {} }
        queue.sync(flags: .barrier) {}
    }
}

row("global async with a group, 1M empty blocks", reference: "1150 ns/op") {
    let group = WorkGroup()
    let queue = WorkQueue.global()
    return timed(million) {
        for _ in 0..<million { queue.async(group: group) {} }
        group.wait()
    }
} theirs: {
    let group = DispatchGroup()
    let queue = DispatchQueue.global()
    return timed(million) {
        for _ in 0..<million { queue.async(group: group) {} }
        group.wait()
    }
}

// Trivial iteration: one store into a distinct slot of a preallocated buffer.
row("concurrentPerform, 1M trivial iterations", reference: "11.7 ns/op") {
    nonisolated(unsafe) let buffer = UnsafeMutableBufferPointer<Int>.allocate(capacity: million)
    buffer.initialize(repeating: 0)
    defer { buffer.deallocate() }
    return timed(million) { WorkQueue.concurrentPerform(iterations: million) { buffer[$0] = $0 } }
} theirs: {
    nonisolated(unsafe) let buffer = UnsafeMutableBufferPointer<Int>.allocate(capacity: million)
    buffer.initialize(repeating: 0)
    defer { buffer.deallocate() }
    return timed(million) { DispatchQueue.concurrentPerform(iterations: million) { buffer[$0] = $0 } }
}

row("group enter+leave, 1M pairs", reference: "19.7 ns/op") {
    let group = WorkGroup()
    return timed(million) {
        for _ in 0..<million {
            group.enter()
            group.leave()
        }
    }
} theirs: {
    let group = DispatchGroup()
    return timed(million) {
        for _ in 0..<million {
            group.enter()
            group.leave()
        }
    }
}

let pingPongs = 20_000
row("semaphore ping-pong, per round trip", unit: "us", reference: "11 us") {
    let ping = WorkSemaphore(value: 0)
    let pong = WorkSemaphore(value: 0)
    startThread {
        for _ in 0..<pingPongs {
            ping.wait()
            pong.signal()
        }
    }
    return timed(pingPongs) {
        for _ in 0..<pingPongs {
            ping.signal()
            pong.wait()
        }
    }
} theirs: {
    let ping = DispatchSemaphore(value: 0)
    let pong = DispatchSemaphore(value: 0)
    startThread {
        for _ in 0..<pingPongs {
            ping.wait()
            pong.signal()
        }
    }
    return timed(pingPongs) {
        for _ in 0..<pingPongs {
            ping.signal()
            pong.wait()
        }
    }
}

// Timers: 10,000 asyncAfter on a global queue, deadlines 50 us apart starting 20 ms out, submitted in
// deadline order. Lateness = block start - deadline, each side on its own clock.
let timerCount = 10_000
final class Lateness: @unchecked Sendable {
    let values = UnsafeMutableBufferPointer<Double>.allocate(capacity: timerCount)
}

func percentiles(_ lateness: Lateness) -> (p50: Double, p99: Double, early: Int) {
    let sorted = Array(lateness.values).sorted()
    return (sorted[timerCount / 2], sorted[timerCount * 99 / 100], sorted.filter { $0 < 0 }.count)
}

let runTimers = filter.isEmpty || "10,000 asyncAfter timers".contains(filter)
var oursP50: [Double] = []
var oursP99: [Double] = []
var theirsP50: [Double] = []
var theirsP99: [Double] = []
var oursEarly = 0
var theirsEarly = 0
for _ in 0..<(runTimers ? rounds : 0) {
    do {
        let lateness = Lateness()
        let group = WorkGroup()
        let start = ContinuousClock.now + .milliseconds(20)
        for index in 0..<timerCount {
            let deadline = start + .microseconds(50 * index)
            group.enter()
            WorkQueue.global().asyncAfter(deadline: deadline) {
                lateness.values[index] = nanoseconds(ContinuousClock.now - deadline)
                group.leave()
            }
        }
        group.wait()
        let (p50, p99, early) = percentiles(lateness)
        oursP50.append(p50)
        oursP99.append(p99)
        oursEarly += early
    }
    do {
        let lateness = Lateness()
        let group = DispatchGroup()
        let start = DispatchTime.now().uptimeNanoseconds + 20_000_000
        for index in 0..<timerCount {
            let deadline = start + UInt64(50_000 * index)
            group.enter()
            DispatchQueue.global().asyncAfter(deadline: DispatchTime(uptimeNanoseconds: deadline)) {
                lateness.values[index] = Double(Int64(DispatchTime.now().uptimeNanoseconds) - Int64(deadline))
                group.leave()
            }
        }
        group.wait()
        let (p50, p99, early) = percentiles(lateness)
        theirsP50.append(p50)
        theirsP99.append(p99)
        theirsEarly += early
    }
}
for (name, mine, their, reference) in !runTimers
    ? []
    : [
        ("10,000 asyncAfter timers, lateness p50", oursP50, theirsP50, "5.6 us"),
        ("10,000 asyncAfter timers, lateness p99", oursP99, theirsP99, "8 us"),
    ]
{
    print(
        pad(name),
        format(median(mine), unit: "us"),
        format(median(their), unit: "us"),
        fixed(median(mine) / median(their), 2, width: 7),
        "  (issue: \(reference))"
    )
}
if runTimers {
    print("timers fired early: ours \(oursEarly), libdispatch \(theirsEarly) (over \(rounds * timerCount) each)")
}
