import DispatchData
import Testing

/// Every entry point's documented outcome for arguments outside the buffer: clamping where SEMANTICS.md defines it
/// (A10, A15), a trap with a message that names the misuse everywhere else (A17). Traps are checked in exit tests, message
/// included.
@Suite struct BadInputTests {
    @Test func subdataPastTheEndClamps() {
        // A10
        let data = DispatchDataBuffer("0123456789")
        #expect(data.subdata(in: 8..<100) == DispatchDataBuffer("89"))
        #expect(data.subdata(in: 10..<11).isEmpty)
        #expect(data.subdata(in: Int.max - 1..<Int.max).isEmpty)
        #expect(data.subdata(in: 0..<0).isEmpty)
    }

    @Test func regionLookupPastTheEndGivesEmptyAtTheEnd() {
        // A15
        let data = DispatchDataBuffer("abc") + DispatchDataBuffer("def")
        #expect(data.region(location: 6) == (.empty, 6))
        #expect(data.region(location: Int.max).offset == 6)
    }

    @Test func subdataStartingBeforeZeroTraps() async {
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                _ = DispatchDataBuffer("abc").subdata(in: -1..<2)
            },
            "subdata(in:): range -1..<2 starts before offset 0"
        )
    }

    @Test func negativeRegionLocationTraps() async {
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                _ = DispatchDataBuffer("abc").region(location: -1)
            },
            "region(location:): negative location -1"
        )
    }

    @Test func concatenationPastIntMaxBytesTraps() async {
        // Views of memory that is not there (never read): their total would wrap every later offset.
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let huge = DispatchDataBuffer(
                    bytesNoCopy: UnsafeRawBufferPointer(start: UnsafeRawPointer(bitPattern: 0x1000), count: 1 << 62),
                    deallocator: .none
                )
                _ = huge + huge
            },
            "concatenating 4611686018427387904 and 4611686018427387904 bytes overflows Int"
        )
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let huge = DispatchDataBuffer(
                    bytesNoCopy: UnsafeRawBufferPointer(start: UnsafeRawPointer(bitPattern: 0x1000), count: 1 << 62),
                    deallocator: .none
                )
                var total = huge
                total.append(huge)
            },
            "concatenating 4611686018427387904 and 4611686018427387904 bytes overflows Int"
        )
    }

    @Test func subscriptOutOfRangeTraps() async {
        // A17: d[10] traps, as in the overlay.
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                _ = (DispatchDataBuffer("abc") + DispatchDataBuffer("def"))[10]
            },
            "index 10 is out of range 0..<6"
        )
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                _ = DispatchDataBuffer("abc")[-1]
            },
            "index -1 is out of range 0..<3"
        )
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                _ = DispatchDataBuffer.empty[0]
            },
            "index 0 is out of range 0..<0"
        )
    }

    @Test func copyBytesWithANegativeCountTraps() async {
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                var target = [UInt8](repeating: 0, count: 4)
                target.withUnsafeMutableBytes { DispatchDataBuffer("abc").copyBytes(to: $0, count: -1) }
            },
            "copyBytes(to:count:): negative count -1"
        )
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                var target = [UInt8](repeating: 0, count: 4)
                target.withUnsafeMutableBufferPointer {
                    DispatchDataBuffer("abc").copyBytes(to: $0.baseAddress!, count: -1)
                }
            },
            "copyBytes(to:count:): negative count -1"
        )
    }

    @Test func copyBytesOfMoreThanTheBufferHoldsTraps() async {
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                var target = [UInt8](repeating: 0, count: 8)
                target.withUnsafeMutableBytes { DispatchDataBuffer("abc").copyBytes(to: $0, count: 4) }
            },
            "range 0..<4 is outside 0..<3"
        )
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                var target = [UInt8](repeating: 0, count: 8)
                target.withUnsafeMutableBytes { DispatchDataBuffer("abc").copyBytes(to: $0, from: 1..<5) }
            },
            "range 1..<5 is outside 0..<3"
        )
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                var target = [UInt8](repeating: 0, count: 8)
                target.withUnsafeMutableBufferPointer { _ = DispatchDataBuffer("abc").copyBytes(to: $0, from: 2..<4) }
            },
            "range 2..<4 is outside 0..<3"
        )
    }

    @Test func copyBytesIntoATooSmallDestinationTraps() async {
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                var target = [UInt8](repeating: 0, count: 2)
                target.withUnsafeMutableBytes { DispatchDataBuffer("abcdef").copyBytes(to: $0, from: 0..<4) }
            },
            "destination holds 2 bytes, range has 4"
        )
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                DispatchDataBuffer("abc").copyBytes(to: UnsafeMutableRawBufferPointer(start: nil, count: 0), count: 1)
            },
            "destination holds 0 bytes, range has 1"
        )
    }

    @Test func regionsIndexOutOfRangeTraps() async {
        expectMessage(
            await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                _ = DispatchDataBuffer("abc").regions[1]
            },
            "regions: position 1 is out of range 0..<1"
        )
    }
}
