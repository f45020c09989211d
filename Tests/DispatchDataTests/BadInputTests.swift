import DispatchData
import Testing

/// Every entry point's documented outcome for arguments outside the buffer: clamping where SEMANTICS.md defines it
/// (A10, A15), a trap with a message everywhere else (A17). Traps are checked in exit tests.
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
        await #expect(processExitsWith: .failure) {
            _ = DispatchDataBuffer("abc").subdata(in: -1..<2)
        }
    }

    @Test func negativeRegionLocationTraps() async {
        await #expect(processExitsWith: .failure) {
            _ = DispatchDataBuffer("abc").region(location: -1)
        }
    }

    @Test func concatenationPastIntMaxBytesTraps() async {
        // Views of memory that is not there (never read): their total would wrap every later offset.
        await #expect(processExitsWith: .failure) {
            let huge = DispatchDataBuffer(
                bytesNoCopy: UnsafeRawBufferPointer(start: UnsafeRawPointer(bitPattern: 0x1000), count: 1 << 62),
                deallocator: .none
            )
            _ = huge + huge
        }
        await #expect(processExitsWith: .failure) {
            let huge = DispatchDataBuffer(
                bytesNoCopy: UnsafeRawBufferPointer(start: UnsafeRawPointer(bitPattern: 0x1000), count: 1 << 62),
                deallocator: .none
            )
            var total = huge
            total.append(huge)
        }
    }

    @Test func subscriptOutOfRangeTraps() async {
        // A17: d[10] traps, as in the overlay.
        await #expect(processExitsWith: .failure) {
            _ = (DispatchDataBuffer("abc") + DispatchDataBuffer("def"))[10]
        }
        await #expect(processExitsWith: .failure) {
            _ = DispatchDataBuffer("abc")[-1]
        }
        await #expect(processExitsWith: .failure) {
            _ = DispatchDataBuffer.empty[0]
        }
    }

    @Test func copyBytesWithANegativeCountTraps() async {
        await #expect(processExitsWith: .failure) {
            var target = [UInt8](repeating: 0, count: 4)
            target.withUnsafeMutableBytes { DispatchDataBuffer("abc").copyBytes(to: $0, count: -1) }
        }
        await #expect(processExitsWith: .failure) {
            var target = [UInt8](repeating: 0, count: 4)
            target.withUnsafeMutableBufferPointer {
                DispatchDataBuffer("abc").copyBytes(to: $0.baseAddress!, count: -1)
            }
        }
    }

    @Test func copyBytesOfMoreThanTheBufferHoldsTraps() async {
        await #expect(processExitsWith: .failure) {
            var target = [UInt8](repeating: 0, count: 8)
            target.withUnsafeMutableBytes { DispatchDataBuffer("abc").copyBytes(to: $0, count: 4) }
        }
        await #expect(processExitsWith: .failure) {
            var target = [UInt8](repeating: 0, count: 8)
            target.withUnsafeMutableBytes { DispatchDataBuffer("abc").copyBytes(to: $0, from: 1..<5) }
        }
        await #expect(processExitsWith: .failure) {
            var target = [UInt8](repeating: 0, count: 8)
            target.withUnsafeMutableBufferPointer { _ = DispatchDataBuffer("abc").copyBytes(to: $0, from: 2..<4) }
        }
    }

    @Test func copyBytesIntoATooSmallDestinationTraps() async {
        await #expect(processExitsWith: .failure) {
            var target = [UInt8](repeating: 0, count: 2)
            target.withUnsafeMutableBytes { DispatchDataBuffer("abcdef").copyBytes(to: $0, from: 0..<4) }
        }
        await #expect(processExitsWith: .failure) {
            DispatchDataBuffer("abc").copyBytes(to: UnsafeMutableRawBufferPointer(start: nil, count: 0), count: 1)
        }
    }

    @Test func regionsIndexOutOfRangeTraps() async {
        await #expect(processExitsWith: .failure) {
            _ = DispatchDataBuffer("abc").regions[1]
        }
    }
}
