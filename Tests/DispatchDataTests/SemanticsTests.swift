import DispatchData
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// SEMANTICS.md section A, item by item. Deallocator timing (A2–A5) is in `DeallocatorTests`, misuse that traps
/// in `BadInputTests`.
@Suite struct SemanticsTests {
    @Test func createCopiesTheSourceAtOnce() {
        // A1
        var source: [UInt8] = Array("abc".utf8)
        let buffer = source.withUnsafeBytes { DispatchDataBuffer(bytes: $0) }
        source[0] = UInt8(ascii: "x")
        #expect(String(decoding: buffer, as: UTF8.self) == "abc")
        source.withUnsafeBytes { original in
            #expect(buffer.regions.first?.bytes.baseAddress != original.baseAddress)
        }
        // A1: append of raw bytes copies too.
        var appended = DispatchDataBuffer("ab")
        source.withUnsafeBytes { appended.append($0) }
        source[1] = UInt8(ascii: "y")
        #expect(String(decoding: appended, as: UTF8.self) == "abxbc")
    }

    @Test func everyCopyingInitializerCopies() {
        // A1 for each way in: array, contiguous and non-contiguous sequences, strings, substrings, literals.
        let expected: [UInt8] = Array("hello".utf8)
        #expect(Array(DispatchDataBuffer(expected)) == expected)
        #expect(Array(DispatchDataBuffer(expected.lazy.map { $0 })) == expected)
        #expect(Array(DispatchDataBuffer(AnySequence(expected))) == expected)
        #expect(Array(DispatchDataBuffer("hello")) == expected)
        #expect(Array(DispatchDataBuffer("say hello"[...].dropFirst(4))) == expected)
        #expect(Array(DispatchDataBuffer("hello".utf8)) == expected)
        let literal: DispatchDataBuffer = [104, 101, 108, 108, 111]
        #expect(Array(literal) == expected)
        let long = (0..<100_000).lazy.map { UInt8(truncatingIfNeeded: $0) }
        #expect(Array(DispatchDataBuffer(long)) == Array(long))
    }

    @Test func noCopyInitializerUsesTheMemoryItIsGiven() {
        // A2: bytesNoCopy does not copy.
        let memory = mallocCopy(Array("abcdef".utf8))
        let buffer = DispatchDataBuffer(bytesNoCopy: memory, deallocator: .free)
        #expect(buffer.regions.count == 1)
        #expect(buffer.regions[0].bytes.baseAddress == memory.baseAddress)
        #expect(String(decoding: buffer, as: UTF8.self) == "abcdef")
    }

    @Test func nilOrZeroBytesGiveTheEmptyBuffer() {
        // A5
        #expect(DispatchDataBuffer(bytes: UnsafeRawBufferPointer(start: nil, count: 0)).isIdentical(to: .empty))
        let byte: [UInt8] = [1]
        byte.withUnsafeBytes { bytes in
            let zero = UnsafeRawBufferPointer(rebasing: bytes[0..<0])
            #expect(DispatchDataBuffer(bytes: zero).isIdentical(to: .empty))
            #expect(DispatchDataBuffer(bytesNoCopy: zero, deallocator: .none).isIdentical(to: .empty))
        }
        #expect(DispatchDataBuffer([UInt8]()).isIdentical(to: .empty))
        #expect(DispatchDataBuffer("").isIdentical(to: .empty))
        #expect(DispatchDataBuffer(EmptyCollection<UInt8>()).isIdentical(to: .empty))
        #expect(DispatchDataBuffer().isIdentical(to: .empty))
    }

    @Test func theEmptyBuffer() {
        // A6
        let empty = DispatchDataBuffer.empty
        #expect(empty.count == 0)
        #expect(empty.isEmpty)
        var calls = 0
        let completed = empty.enumerateBytes { _, _, _ in calls += 1 }
        #expect(completed)
        #expect(calls == 0)
        #expect(empty.regions.isEmpty)
        // A6 / A7 → ours: map of empty calls the body with a zero-length buffer and never traps.
        let mapped = empty.withUnsafeBytes { ($0.baseAddress, $0.count) }
        #expect(mapped.0 == nil)
        #expect(mapped.1 == 0)
        let region = empty.region(location: 0)
        #expect(region.data.isIdentical(to: .empty))
        #expect(region.offset == 0)
        // A7: the byte iterator over empty data works.
        #expect(Array(empty).isEmpty)
        var iterator = empty.makeIterator()
        #expect(iterator.next() == nil)
        #expect(empty.withContiguousStorageIfAvailable { $0.count } == 0)
        #expect(String(decoding: empty, as: UTF8.self) == "")
    }

    @Test func sizeIsTheSumOfTheRegions() {
        // A8
        let buffer = lettered([3, 1, 7, 2])
        #expect(buffer.count == 13)
        #expect(buffer.regionSizes.reduce(0, +) == buffer.count)
    }

    @Test func concatCopiesNoBytesAndStaysFlat() {
        // A9
        let a = DispatchDataBuffer("AAAAA")
        let b = DispatchDataBuffer("BBBBB")
        let c = DispatchDataBuffer("CCCCC")
        let abc = (a + b) + c
        #expect(abc.regionSizes == [5, 5, 5])
        #expect(abc.regions[0].bytes.baseAddress == a.regions[0].bytes.baseAddress)
        #expect(abc.regions[1].bytes.baseAddress == b.regions[0].bytes.baseAddress)
        #expect(abc.regions[2].bytes.baseAddress == c.regions[0].bytes.baseAddress)
        #expect((abc + abc).regions.count == 6)
        let sub = abc.subdata(in: 3..<12)
        #expect((sub + sub).regions.count == 6)
        #expect((a + (b + c)).regionSizes == [5, 5, 5])
        // A9: concat with an empty side is the other buffer itself.
        #expect((abc + .empty).isIdentical(to: abc))
        #expect((DispatchDataBuffer.empty + abc).isIdentical(to: abc))
        var appended = DispatchDataBuffer.empty
        appended.append(abc)
        #expect(appended.isIdentical(to: abc))
        appended.append(.empty)
        #expect(appended.isIdentical(to: abc))
        // A9: the operands may go away; the result keeps their memory.
        var result = DispatchDataBuffer()
        do {
            let x = DispatchDataBuffer("xy")
            let y = DispatchDataBuffer("z")
            result = x + y
        }
        #expect(String(decoding: result, as: UTF8.self) == "xyz")
    }

    @Test func appendInPlaceKeepsOtherCopiesUnchanged() {
        // A9 with value semantics: appending to one copy never changes another.
        var first = lettered([2, 2])
        let snapshot = first
        first.append(DispatchDataBuffer("zz"))
        first += DispatchDataBuffer("!")
        #expect(String(decoding: first, as: UTF8.self) == "AABBzz!")
        #expect(String(decoding: snapshot, as: UTF8.self) == "AABB")
        #expect(snapshot.regionSizes == [2, 2])
    }

    @Test func subdataBounds() {
        // A10
        let data = lettered([5, 5, 5])
        #expect(data.subdata(in: 15..<20).isIdentical(to: .empty))
        #expect(data.subdata(in: 100..<200).isIdentical(to: .empty))
        #expect(data.subdata(in: 4..<4).isIdentical(to: .empty))
        #expect(data.subdata(in: 10..<1000) == DispatchDataBuffer("CCCCC"))
        #expect(data.subdata(in: 0..<15).isIdentical(to: data))
        // Unlike libdispatch's (0, SIZE_MAX) quirk, a clamped whole range is also the same buffer.
        #expect(data.subdata(in: 0..<Int.max).isIdentical(to: data))
    }

    @Test func subdataStructureAndNoCopy() {
        // A11
        let data = lettered([5, 5, 5])
        let spanning = data.subdata(in: 3..<12)
        #expect(spanning.regionStrings == ["AA", "BBBBB", "CC"])
        #expect(spanning.regions[0].bytes.baseAddress == data.regions[0].bytes.baseAddress! + 3)
        #expect(spanning.regions[1].bytes.baseAddress == data.regions[1].bytes.baseAddress)
        #expect(spanning.regions[2].bytes.baseAddress == data.regions[2].bytes.baseAddress)
        let inside = data.subdata(in: 6..<9)
        #expect(inside.regionStrings == ["BBB"])
        #expect(inside.regions[0].bytes.baseAddress == data.regions[1].bytes.baseAddress! + 1)
        // No nesting: a subrange of a subrange points straight at the original memory.
        let nested = spanning.subdata(in: 1..<8)
        #expect(nested.regionStrings == ["A", "BBBBB", "C"])
        #expect(nested.regions[0].bytes.baseAddress == data.regions[0].bytes.baseAddress! + 4)
        let leaf = DispatchDataBuffer("hello world")
        let word = leaf.subdata(in: 6..<11)
        #expect(word.regions.count == 1)
        #expect(word.regions[0].bytes.baseAddress == leaf.regions[0].bytes.baseAddress! + 6)
    }

    @Test func mapOfOneRegionDoesNotCopy() {
        // A12
        let leaf = DispatchDataBuffer("abcdef")
        let address = leaf.withUnsafeBytes { $0.baseAddress }
        #expect(address == leaf.regions[0].bytes.baseAddress)
        let trivial = leaf.subdata(in: 1..<4)
        #expect(trivial.withUnsafeBytes { $0.baseAddress } == leaf.regions[0].bytes.baseAddress! + 1)
        #expect(trivial.withUnsafeBytes { String(decoding: $0, as: UTF8.self) } == "bcd")
    }

    @Test func mapOfSeveralRegionsCopiesOnce() {
        // A12: a composite is flattened into new memory; each map copies again (nothing cached).
        let composite = lettered([3, 4, 5])
        let first = composite.withUnsafeBytes { bytes -> String in
            for region in composite.regions {
                #expect(bytes.baseAddress != region.bytes.baseAddress)
            }
            return String(decoding: bytes, as: UTF8.self)
        }
        #expect(first == "AAABBBBCCCCC")
        // Large enough for the mmap path of the flat copy.
        let big = lettered([1 << 20, 1 << 20, 3])
        let sum = big.withUnsafeBytes { bytes in bytes.reduce(0) { $0 + Int($1) } }
        #expect(sum == (1 << 20) * 65 + (1 << 20) * 66 + 3 * 67)
        // flattened() is the explicit, cached form.
        let flat = composite.flattened()
        #expect(flat.regions.count == 1)
        #expect(flat == composite)
        #expect(flat.flattened().isIdentical(to: flat))
    }

    @Test func applyVisitsRegionsInOrderWithOffsetsAndStopsEarly() {
        // A13
        let data = lettered([2, 3, 4])
        var seen: [(Int, Int)] = []
        let completed = data.enumerateBytes { bytes, offset, _ in seen.append((offset, bytes.count)) }
        #expect(completed)
        #expect(seen.map(\.0) == [0, 2, 5])
        #expect(seen.map(\.1) == [2, 3, 4])
        var calls = 0
        let stopped = data.enumerateBytes { _, _, stop in
            calls += 1
            if calls == 2 { stop = true }
        }
        #expect(!stopped)
        #expect(calls == 2)
        // A13 through the regions view: offsets and early stop with break.
        #expect(data.regions.map(\.offset) == [0, 2, 5])
        var visited = 0
        for region in data.regions {
            visited += 1
            if region.offset == 2 { break }
        }
        #expect(visited == 2)
    }

    @Test func regionObjectsCoverExactlyTheRegion() {
        // A14 → ours: the region handed out is exactly the region, not the whole underlying allocation.
        let leaf = DispatchDataBuffer("ABCDE")
        let piece = leaf.subdata(in: 1..<3) + DispatchDataBuffer("xyz")
        #expect(piece.regions[0].data.count == 2)
        #expect(piece.regions[0].data == DispatchDataBuffer("BC"))
        #expect(piece.regions[1].data == DispatchDataBuffer("xyz"))
    }

    @Test func copyRegion() {
        // A15, on sub(3,9) = "AA|BBBBB|CC"
        let sub = lettered([5, 5, 5]).subdata(in: 3..<12)
        let expectations: [(location: Int, offset: Int, size: Int)] = [(0, 0, 2), (4, 2, 5), (8, 7, 2), (12, 9, 0)]
        for expected in expectations {
            let (data, offset) = sub.region(location: expected.location)
            #expect(offset == expected.offset, "location \(expected.location)")
            #expect(data.count == expected.size, "location \(expected.location)")
            #expect(data.regions.count <= 1)
        }
        #expect(sub.region(location: 1_000).data.isIdentical(to: .empty))
        #expect(sub.region(location: 1_000).offset == 9)
        #expect(sub.region(location: 4).data == DispatchDataBuffer("BBBBB"))
        // A15: no bytes copied.
        #expect(sub.region(location: 4).data.regions[0].bytes.baseAddress == sub.regions[1].bytes.baseAddress)
        // A15: a one-region input returns itself with offset 0.
        let leaf = DispatchDataBuffer("leaf")
        #expect(leaf.region(location: 2).data.isIdentical(to: leaf))
        #expect(leaf.region(location: 2).offset == 0)
    }

    @Test func memoryIsOnlyExposedReadOnly() {
        // A16: map, apply and regions expose only read-only pointers; there is no API to write into a buffer.
        let buffer = lettered([2, 2])
        let _: UnsafeRawBufferPointer = buffer.regions[0].bytes
        buffer.withUnsafeBytes { (_: UnsafeRawBufferPointer) in }
        buffer.enumerateBytes { (_: UnsafeBufferPointer<UInt8>, _, _) in }
    }

    @Test func overlayHelpers() {
        // A17: subscript, region(location:), copyBytes, append, enumerateBytes.
        let data = lettered([3, 4, 5])
        #expect(data[0] == UInt8(ascii: "A"))
        #expect(data[3] == UInt8(ascii: "B"))
        #expect(data[11] == UInt8(ascii: "C"))
        var target = [UInt8](repeating: 0, count: 6)
        target.withUnsafeMutableBytes { data.copyBytes(to: $0, from: 2..<8) }
        #expect(String(decoding: target, as: UTF8.self) == "ABBBBC")
        target.withUnsafeMutableBytes { data.copyBytes(to: $0, count: 4) }
        #expect(String(decoding: target, as: UTF8.self) == "AAABBC")
        target.withUnsafeMutableBufferPointer { data.copyBytes(to: $0.baseAddress!, count: 2) }
        #expect(String(decoding: target, as: UTF8.self) == "AAABBC")
        target.withUnsafeMutableBufferPointer { data.copyBytes(to: $0.baseAddress!, from: 9..<12) }
        #expect(String(decoding: target, as: UTF8.self) == "CCCBBC")
        // The typed variant copies what fits and says how much.
        var small = [UInt8](repeating: 0, count: 5)
        let copied = small.withUnsafeMutableBufferPointer { data.copyBytes(to: $0) }
        #expect(copied == 5)
        #expect(String(decoding: small, as: UTF8.self) == "AAABB")
        var words = [UInt16](repeating: 0, count: 2)
        let copiedWords = words.withUnsafeMutableBufferPointer { data.copyBytes(to: $0, from: 6..<12) }
        #expect(copiedWords == 4)
        let zeroCopied = small.withUnsafeMutableBufferPointer { data.copyBytes(to: $0, from: 12..<12) }
        #expect(zeroCopied == 0)
    }

    @Test func whatIOHandsOut() {
        // A18: page-aligned malloc chunks taken over without copying and joined by concat keep their boundaries.
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        var read = DispatchDataBuffer()
        var addresses: [UnsafeRawPointer] = []
        for chunk in 0..<4 {
            var memory: UnsafeMutableRawPointer?
            #expect(posix_memalign(&memory, page, page) == 0)
            memset(memory!, Int32(chunk), page)
            addresses.append(UnsafeRawPointer(memory!))
            read.append(DispatchDataBuffer(bytesNoCopy: UnsafeRawBufferPointer(start: memory, count: page)))
        }
        #expect(read.regionSizes == [page, page, page, page])
        #expect(read.regions.map { $0.bytes.baseAddress! } == addresses)
        #expect(read.regions.allSatisfy { Int(bitPattern: $0.bytes.baseAddress!) % page == 0 })
        #expect(read[2 * page] == 2)
    }
}
