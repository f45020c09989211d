// DispatchDataBuffer next to the toolchain's DispatchData (libdispatch), in one process, on the same bytes.
//
// Each row runs its two sides alternately (ours, theirs, ours, theirs, ...) and prints the median of each and the
// ratio ours/theirs (below 1 means ours is faster). Build and run in release mode:
//     swift build -c release && .build/release/DataBenchmark [runs] [only rows whose name contains this]
//
// libdispatch pieces are created by copying: `DispatchData(bytesNoCopy:deallocator: .free)` crashes on Linux
// (SEMANTICS.md A2).

import Dispatch
import DispatchData

/// Keeps results observable so that the optimizer cannot drop the work.
nonisolated(unsafe) var sink = 0

@inline(never)
func consume(_ value: Int) {
    sink &+= value
}

/// The sum of the bytes at 65,536 offsets spread over `bytes`, each read a random access.
@inline(__always)
func sumAtSpreadOffsets<Bytes: Collection>(_ bytes: Bytes) -> Int where Bytes.Index == Int, Bytes.Element == UInt8 {
    var total = 0
    var index = 0
    for _ in 0..<(1 << 16) {
        total &+= Int(bytes[index])
        index = (index &+ 40_009) % bytes.count
    }
    return total
}

/// One comparison: the same work done by each side, `repetitions` times per timed run.
struct Row {
    let name: String
    let repetitions: Int
    let ours: () -> Void
    let theirs: () -> Void
}

func measure(_ body: () -> Void, _ repetitions: Int) -> Duration {
    let clock = ContinuousClock()
    return clock.measure {
        for _ in 0..<repetitions { body() }
    } / repetitions
}

func median(_ values: [Duration]) -> Duration {
    values.sorted()[values.count / 2]
}

func format(_ duration: Duration) -> String {
    let microseconds = Double(duration.components.seconds) * 1e6 + Double(duration.components.attoseconds) / 1e12
    if microseconds >= 1000 {
        return String(Int((microseconds / 1000 * 100).rounded())).withDecimal(2) + " ms"
    }
    return String(Int((microseconds * 100).rounded())).withDecimal(2) + " us"
}

extension String {
    /// "12345" with 2 decimals → "123.45", without Foundation.
    func withDecimal(_ places: Int) -> String {
        let padded = String(repeating: "0", count: Swift.max(0, places + 1 - count)) + self
        return padded.dropLast(places) + "." + padded.suffix(places)
    }
}

func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
}

/// Runs every row and prints the table; locals keep the data out of global (main-actor) state.
func runBenchmark() {
    let pieceCount = 10_000
    let pieceSize = 4096
    let runs = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 9 : 9

    let pattern = (0..<pieceSize).map { UInt8(truncatingIfNeeded: $0 &* 31) }
    let ourPieces = (0..<pieceCount).map { index in
        var bytes = pattern
        bytes[0] = UInt8(truncatingIfNeeded: index)
        return bytes.withUnsafeBytes { DispatchDataBuffer(bytes: $0) }
    }
    let theirPieces = (0..<pieceCount).map { index in
        var bytes = pattern
        bytes[0] = UInt8(truncatingIfNeeded: index)
        return bytes.withUnsafeBytes { DispatchData(bytes: $0) }
    }

    func ourConcat() -> DispatchDataBuffer {
        var whole = DispatchDataBuffer()
        for piece in ourPieces { whole.append(piece) }
        return whole
    }

    func theirConcat() -> DispatchData {
        var whole = DispatchData.empty
        for piece in theirPieces { whole.append(piece) }
        return whole
    }

    let ours = ourConcat()
    let theirs = theirConcat()
    precondition(ours.count == theirs.count && ours.count == pieceCount * pieceSize)
    precondition(Array(ours) == Array(theirs), "both sides must hold the same bytes")
    let middle = (ours.count / 4)..<(ours.count / 4 * 3)

    let rows = [
        Row(
            name: "concat 10,000 x 4 KiB",
            repetitions: 1,
            ours: { consume(ourConcat().count) },
            theirs: { consume(theirConcat().count) }
        ),
        Row(
            name: "subdata, middle half",
            repetitions: 100,
            ours: { consume(ours.subdata(in: middle).count) },
            theirs: { consume(theirs.subdata(in: middle).count) }
        ),
        Row(
            name: "region walk, enumerateBytes",
            repetitions: 1000,
            ours: {
                var total = 0
                ours.enumerateBytes { bytes, _, _ in total &+= bytes.count &+ Int(bytes[0]) }
                consume(total)
            },
            theirs: {
                var total = 0
                theirs.enumerateBytes { bytes, _, _ in total &+= bytes.count &+ Int(bytes[0]) }
                consume(total)
            }
        ),
        Row(
            name: "region walk, ours: regions view",
            repetitions: 1000,
            ours: {
                var total = 0
                for region in ours.regions { total &+= region.count &+ Int(region.bytes[0]) }
                consume(total)
            },
            theirs: {
                var total = 0
                theirs.enumerateBytes { bytes, _, _ in total &+= bytes.count &+ Int(bytes[0]) }
                consume(total)
            }
        ),
        Row(
            name: "map 40 MiB (10,000 regions)",
            repetitions: 1,
            ours: { consume(ours.withUnsafeBytes { Int($0[$0.count - 1]) &+ Int($0[0]) }) },
            theirs: {
                consume(
                    theirs.withUnsafeBytes { (bytes: UnsafePointer<UInt8>) in
                        Int(bytes[theirs.count - 1]) &+ Int(bytes[0])
                    }
                )
            }
        ),
        Row(
            name: "byte iteration 40 MiB",
            repetitions: 1,
            ours: {
                var total = 0
                for byte in ours { total &+= Int(byte) }
                consume(total)
            },
            theirs: {
                var total = 0
                for byte in theirs { total &+= Int(byte) }
                consume(total)
            }
        ),
        Row(
            // Random access: each read a binary search over the regions, and the index check (A17).
            name: "subscript, 65,536 offsets",
            repetitions: 1,
            ours: { consume(sumAtSpreadOffsets(ours)) },
            theirs: { consume(sumAtSpreadOffsets(theirs)) }
        ),
    ]

    print(
        "DataBenchmark: DispatchDataBuffer (ours) vs toolchain DispatchData (libdispatch), median of \(runs) alternating runs"
    )
    print("\(pad("operation", 34)) \(pad("ours", 12)) \(pad("libdispatch", 12)) ours/theirs")
    let only = CommandLine.arguments.count > 2 ? CommandLine.arguments[2] : ""
    for row in rows where only.isEmpty || row.name.contains(only) {
        var mine: [Duration] = []
        var theirTimes: [Duration] = []
        // One warm-up each, then alternate.
        row.ours()
        row.theirs()
        for _ in 0..<runs {
            mine.append(measure(row.ours, row.repetitions))
            theirTimes.append(measure(row.theirs, row.repetitions))
        }
        let ratio = median(mine) / median(theirTimes)
        let ratioText = String(Int((ratio * 1000).rounded())).withDecimal(3)
        print(
            "\(pad(row.name, 34)) \(pad(format(median(mine)), 12)) \(pad(format(median(theirTimes)), 12)) \(ratioText)"
        )
    }

    // Allocations made by one region walk over the 10,000-region buffers. The control row shows the counter works.
    let ourEnumerate = swiftAllocations {
        var total = 0
        ours.enumerateBytes { bytes, _, _ in total &+= bytes.count }
        consume(total)
    }
    let ourRegions = swiftAllocations {
        var total = 0
        for region in ours.regions { total &+= region.bytes.count }
        consume(total)
    }
    let theirEnumerate = swiftAllocations {
        var total = 0
        theirs.enumerateBytes { bytes, _, _ in total &+= bytes.count }
        consume(total)
    }
    let control = swiftAllocations { consume([Int](repeating: sink, count: 100).count) }
    func shown(_ count: Int?) -> String { count.map(String.init) ?? "not countable" }
    print("")
    print("Swift heap allocations in one walk of 10,000 regions (hook on swift_allocObject, this thread only):")
    print("  ours enumerateBytes: \(shown(ourEnumerate))")
    print("  ours regions view:   \(shown(ourRegions))")
    print("  libdispatch enumerateBytes through the toolchain overlay: \(shown(theirEnumerate))")
    print("  control, one [Int](repeating:count:): \(shown(control))")
    // The claim is checked, not just printed: the run fails if a walk of ours allocates.
    precondition((ourEnumerate ?? 0) == 0 && (ourRegions ?? 0) == 0, "a region walk of DispatchDataBuffer allocated")
}

runBenchmark()
if sink == 42 { print("") }
