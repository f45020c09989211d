import DispatchData
import Testing

/// Collection conformance, equality and hashing by content, conversions.
@Suite struct CollectionTests {
    @Test func iterationAndIndexingWalkEveryRegion() {
        let data = lettered([1, 3, 2]) + DispatchDataBuffer([0, 255])
        #expect(Array(data) == Array("ABBBCC".utf8) + [0, 255])
        #expect(data.map { $0 } == Array(data))
        #expect(data.indices == 0..<8)
        #expect((0..<data.count).map { data[$0] } == Array(data))
        #expect(data.reversed().first == 255)
        #expect(data.firstIndex(of: UInt8(ascii: "C")) == 4)
        #expect(data.withContiguousStorageIfAvailable { _ in true } == nil)
        let leaf = DispatchDataBuffer("leaf")
        #expect(leaf.withContiguousStorageIfAvailable { Array($0) } == Array("leaf".utf8))
        #expect(Array(data[2..<5]) == Array("BBC".utf8))
    }

    @Test func equalityIgnoresRegionBoundaries() {
        let split = lettered([2, 3]) + DispatchDataBuffer("xyz")
        let whole = DispatchDataBuffer("AABBBxyz")
        let other = DispatchDataBuffer("AABBBxyZ")
        #expect(split == whole)
        #expect(split.hashValue == whole.hashValue)
        #expect(split != other)
        #expect(split != whole.subdata(in: 0..<7))
        #expect(DispatchDataBuffer.empty == DispatchDataBuffer([UInt8]()))
        #expect(Set([split, whole, other]).count == 2)
    }

    @Test func conversionsToArrayAndString() {
        let data = DispatchDataBuffer("héllo, ") + DispatchDataBuffer("wörld")
        #expect([UInt8](data) == Array("héllo, wörld".utf8))
        #expect(String(decoding: data, as: UTF8.self) == "héllo, wörld")
        // A character split across two regions decodes whole.
        let bytes = Array("é".utf8)
        let straddling = DispatchDataBuffer([bytes[0]]) + DispatchDataBuffer([bytes[1]])
        #expect(String(decoding: straddling, as: UTF8.self) == "é")
        #expect(String(decoding: DispatchDataBuffer([0xFF]), as: UTF8.self) == "\u{FFFD}")
        #expect([UInt8](DispatchDataBuffer.empty) == [])
    }

    @Test func descriptions() {
        let data = lettered([1, 2])
        #expect(data.description == "3 bytes")
        #expect(data.debugDescription == "DispatchDataBuffer(3 bytes in 2 regions: [1, 2])")
    }

    @Test func concatOfManyPiecesIsFlatAndLinear() {
        // Shape: concat of N buffers is one flat list of N regions, each region pointing at its piece.
        let pieces = (0..<10_000).map { DispatchDataBuffer([UInt8(truncatingIfNeeded: $0)]) }
        var all = DispatchDataBuffer()
        for piece in pieces { all.append(piece) }
        #expect(all.regions.count == 10_000)
        #expect(all.count == 10_000)
        #expect(all[9_999] == UInt8(truncatingIfNeeded: 9_999))
        #expect(all.region(location: 5_000).offset == 5_000)
        let doubled = all + all
        #expect(doubled.regions.count == 20_000)
        #expect(doubled.regions[10_000].bytes.baseAddress == pieces[0].regions[0].bytes.baseAddress)
    }
}
