import DispatchData
import PropertyBased
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A buffer next to what it must equal: its bytes as an array and the sizes of its regions.
private struct Modelled {
    var buffer: DispatchDataBuffer
    var bytes: [UInt8]
    var regions: [Int]

    static let empty = Modelled(buffer: .empty, bytes: [], regions: [])
}

/// Splits a 64-bit program word into small numbers, the way a random op's arguments are drawn from it.
private struct Word {
    var bits: UInt64

    mutating func take(_ bound: Int) -> Int {
        let value = Int(bits % UInt64(bound))
        bits /= UInt64(bound)
        return value
    }
}

/// Random programs of create / concat / append / subdata / map / region-walk / copy-region / index steps, each
/// checked against a `[UInt8]` model with its region boundaries (A8–A15).
@Suite struct PropertyTests {
    @Test func randomProgramsMatchTheArrayModel() async {
        await propertyCheck(count: 300, input: Gen.uint64().array(of: 1...40)) { program in
            Self.run(program)
        }
    }

    /// Runs one random program, checking every intermediate buffer.
    private static func run(_ program: [UInt64]) {
        var pool: [Modelled] = [.empty]
        var serial: UInt8 = 0
        for instruction in program {
            var word = Word(bits: instruction)
            let op = word.take(7)
            let a = pool[word.take(pool.count)]
            let b = pool[word.take(pool.count)]
            var result: Modelled
            switch op {
            case 0, 1:
                result = Self.create(&word, serial: &serial)
            case 2:
                // A9: concat.
                result = Modelled(buffer: a.buffer + b.buffer, bytes: a.bytes + b.bytes, regions: a.regions + b.regions)
            case 3:
                // A9: append in place, on a copy that shares the representation of a pool entry.
                var buffer = a.buffer
                buffer.append(b.buffer)
                result = Modelled(buffer: buffer, bytes: a.bytes + b.bytes, regions: a.regions + b.regions)
                #expect(Array(a.buffer) == a.bytes, "append must not change other copies")
            case 4:
                // A10, A11: subdata, including ranges past the end.
                let lower = word.take(a.bytes.count + 3)
                let upper = lower + word.take(a.bytes.count + 3)
                result = Self.subdata(a, lower..<upper)
            case 5:
                // A15: copy-region.
                let location = word.take(a.bytes.count + 2)
                let (region, offset) = a.buffer.region(location: location)
                let model = Self.region(a, location)
                #expect(offset == model.offset)
                result = Modelled(
                    buffer: region,
                    bytes: model.bytes,
                    regions: model.bytes.isEmpty ? [] : [model.bytes.count]
                )
            default:
                // A12: map, plus index lookups.
                let mapped = a.buffer.withUnsafeBytes { Array($0) }
                #expect(mapped == a.bytes)
                if !a.bytes.isEmpty {
                    let index = word.take(a.bytes.count)
                    #expect(a.buffer[index] == a.bytes[index])
                }
                result = Modelled(
                    buffer: a.buffer.flattened(),
                    bytes: a.bytes,
                    regions: a.bytes.isEmpty ? [] : [a.bytes.count]
                )
            }
            Self.check(result)
            pool.append(result)
        }
    }

    @Test func equalityAndHashingIgnoreBoundaries() async {
        await propertyCheck(input: Gen.uint8().array(of: 0...64), Gen.int(in: 0...64).array(of: 0...8)) {
            Self.checkBoundaries($0, $1)
        }
    }

    /// Splits `bytes` at `cuts` and compares with the unsplit buffer.
    private static func checkBoundaries(_ bytes: [UInt8], _ cuts: [Int]) {
        let points = ([0, bytes.count] + cuts.map { Swift.min($0, bytes.count) }).sorted()
        var split = DispatchDataBuffer()
        for (from, to) in zip(points, points.dropFirst()) {
            split.append(DispatchDataBuffer(bytes[from..<to]))
        }
        let whole = DispatchDataBuffer(bytes)
        #expect(split == whole)
        #expect(split.hashValue == whole.hashValue)
        if !bytes.isEmpty {
            var changed = bytes
            changed[changed.count / 2] &+= 1
            #expect(split != DispatchDataBuffer(changed))
        }
    }

    /// A new buffer made in one of the ways in, with fresh content.
    private static func create(_ word: inout Word, serial: inout UInt8) -> Modelled {
        let count = word.take(33)
        let bytes = (0..<count).map { serial &+ UInt8(truncatingIfNeeded: $0 &* 7) }
        serial &+= 13
        let buffer: DispatchDataBuffer
        switch word.take(5) {
        case 0: buffer = DispatchDataBuffer(bytes)
        case 1: buffer = bytes.withUnsafeBytes { DispatchDataBuffer(bytes: $0) }
        case 2: buffer = DispatchDataBuffer(bytes.lazy.map { $0 })
        case 3: buffer = DispatchDataBuffer(bytesNoCopy: mallocCopy(bytes), deallocator: .free)
        default:
            let memory = mallocCopy(bytes)
            let address = Int(bitPattern: memory.baseAddress)
            buffer = DispatchDataBuffer(
                bytesNoCopy: memory,
                deallocator: .custom(nil) {
                    free(UnsafeMutableRawPointer(bitPattern: address))
                }
            )
        }
        return Modelled(buffer: buffer, bytes: bytes, regions: bytes.isEmpty ? [] : [bytes.count])
    }

    /// The model of `subdata(in:)`: clamp (A10), then keep the touched regions, trimmed (A11).
    private static func subdata(_ source: Modelled, _ range: Range<Int>) -> Modelled {
        let lower = range.lowerBound
        guard lower < source.bytes.count, !range.isEmpty else { return .empty }
        let upper = Swift.min(range.upperBound, source.bytes.count)
        var regions: [Int] = []
        var start = 0
        for size in source.regions {
            let from = Swift.max(start, lower)
            let to = Swift.min(start + size, upper)
            if from < to { regions.append(to - from) }
            start += size
        }
        return Modelled(
            buffer: source.buffer.subdata(in: range),
            bytes: Array(source.bytes[lower..<upper]),
            regions: regions
        )
    }

    /// The model of `region(location:)`: the bytes of the region holding `location`, and its offset (A15).
    private static func region(_ source: Modelled, _ location: Int) -> (bytes: [UInt8], offset: Int) {
        var start = 0
        for size in source.regions {
            if location < start + size {
                return (Array(source.bytes[start..<(start + size)]), start)
            }
            start += size
        }
        return ([], source.bytes.count)
    }

    /// Checks content, count and region boundaries, through every way of reading a buffer.
    private static func check(_ model: Modelled) {
        let buffer = model.buffer
        #expect(buffer.count == model.bytes.count)
        #expect(buffer.isEmpty == model.bytes.isEmpty)
        #expect(Array(buffer) == model.bytes)
        #expect(buffer.regionSizes == model.regions)
        var offsets: [Int] = []
        var running = 0
        for size in model.regions {
            offsets.append(running)
            running += size
        }
        #expect(buffer.regions.map(\.offset) == offsets)
        var walked: [UInt8] = []
        var walkedOffsets: [Int] = []
        let completed = buffer.enumerateBytes { bytes, offset, _ in
            walked.append(contentsOf: bytes)
            walkedOffsets.append(offset)
        }
        #expect(completed)
        #expect(walked == model.bytes)
        #expect(walkedOffsets == offsets)
        #expect(buffer.withUnsafeBytes { Array($0) } == model.bytes)
        #expect(buffer.map { $0 } == model.bytes)
        #expect(buffer == DispatchDataBuffer(model.bytes))
        var copied = [UInt8](repeating: 0, count: model.bytes.count)
        copied.withUnsafeMutableBytes { buffer.copyBytes(to: $0, count: model.bytes.count) }
        #expect(copied == model.bytes)
        if let last = model.bytes.indices.last {
            #expect(buffer[last] == model.bytes[last])
            #expect(buffer[0] == model.bytes[0])
        }
    }
}
