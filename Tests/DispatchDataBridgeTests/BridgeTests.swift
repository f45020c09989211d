import Dispatch
import DispatchData
import DispatchDataBridge
import Foundation
import Synchronization
import Testing

/// Counts deallocator runs and lets a test wait for one without sleeping.
private final class Runs: Sendable {
    private let runs = Atomic<Int>(0)
    private let ran = DispatchSemaphore(value: 0)

    var count: Int { runs.load(ordering: .acquiring) }

    func record() {
        runs.add(1, ordering: .releasing)
        ran.signal()
    }

    func waitForRun() -> Bool {
        ran.wait(timeout: .now() + .seconds(10)) == .success
    }
}

/// `malloc`ed bytes to hand over with `.free` or `.custom`.
private func mallocCopy(_ bytes: [UInt8]) -> UnsafeRawBufferPointer {
    let memory = malloc(max(bytes.count, 1))!
    bytes.withUnsafeBytes { memory.copyMemory(from: $0.baseAddress!, byteCount: bytes.count) }
    return UnsafeRawBufferPointer(start: memory, count: bytes.count)
}

@Suite(.timeLimit(.minutes(1))) struct BridgeTests {
    @Test func publicNamesDoNotCollideWithFoundationOrDispatch() {
        // This file imports Foundation, Dispatch and DispatchData; every public name is used unqualified.
        let buffer: DispatchDataBuffer = DispatchDataBuffer("names")
        let regions: DispatchDataBuffer.Regions = buffer.regions
        let region: DispatchDataBuffer.Region = regions[0]
        let deallocator: DispatchDataBuffer.Deallocator = .none
        let queue: any DeallocationQueue = DispatchQueue.global()
        var iterator: DispatchDataBuffer.Iterator = buffer.makeIterator()
        // Foundation's and Dispatch's own types keep their names.
        let data: Data = Data(buffer)
        let dispatchData: DispatchData = DispatchData(buffer)
        #expect(region.count == 5)
        #expect(iterator.next() == UInt8(ascii: "n"))
        #expect(data.count == dispatchData.count)
        _ = (deallocator, queue)
    }

    @Test func dataOnTheHeapBecomesABufferWithoutCopying() {
        let data = Data((0..<4096).map { UInt8(truncatingIfNeeded: $0) })
        let buffer = DispatchDataBuffer(data)
        #expect(Array(buffer) == Array(data))
        data.withUnsafeBytes { bytes in
            #expect(buffer.regions[0].bytes.baseAddress == bytes.baseAddress)
        }
        // The buffer keeps the bytes alive and unchanged after the Data is mutated and dropped.
        var mutable: Data? = Data(repeating: 7, count: 1000)
        let kept = DispatchDataBuffer(mutable!)
        mutable![0] = 8
        mutable = nil
        #expect(kept.allSatisfy { $0 == 7 })
    }

    @Test func smallDataIsCopied() {
        let data = Data([1, 2, 3])
        let buffer = DispatchDataBuffer(data)
        #expect(Array(buffer) == [1, 2, 3])
        #expect(DispatchDataBuffer(Data()).isIdentical(to: .empty))
    }

    @Test func aBufferNobodyElseSeesBecomesDataWithoutCopying() {
        let buffer = DispatchDataBuffer(Array(repeating: 9, count: 4096))
        let address = buffer.regions[0].bytes.baseAddress
        var data = Data(consume buffer)
        #expect(data.count == 4096)
        data.withUnsafeBytes { #expect($0.baseAddress == address) }
        data[0] = 1
        #expect(data.first == 1)
    }

    @Test func aSharedBufferIsCopiedIntoData() {
        // Data writes in place to memory it holds alone, so shared memory must be copied to keep `buffer` intact.
        let buffer = DispatchDataBuffer(Array(repeating: 9, count: 4096))
        var data = Data(buffer)
        data.withUnsafeBytes { #expect($0.baseAddress != buffer.regions[0].bytes.baseAddress) }
        data[0] = 1
        #expect(buffer[0] == 9)
        let composite = DispatchDataBuffer("abc") + DispatchDataBuffer("def")
        #expect(Data(composite) == Data("abcdef".utf8))
        #expect(Data(DispatchDataBuffer.empty).isEmpty)
        // Memory the buffer does not own outright (here `.none`) is never handed to Data, even when unique.
        let bytes: [UInt8] = [1, 2, 3]
        bytes.withUnsafeBytes { memory in
            let borrowed = DispatchDataBuffer(bytesNoCopy: memory, deallocator: .none)
            var copy = Data(consume borrowed)
            copy.withUnsafeBytes { #expect($0.baseAddress != memory.baseAddress) }
            copy[0] = 0
        }
        #expect(bytes == [1, 2, 3])
    }

    @Test func memoryReachableFromElsewhereIsCopiedIntoData() {
        // The buffer's list is unique, but another buffer shares the storage: copy, and the other stays intact.
        let first = DispatchDataBuffer(Array(repeating: 5, count: 256))
        let other = first + DispatchDataBuffer("x")
        var data = Data(consume first)
        data[0] = 6
        #expect(other[0] == 5)
        // Only a `Region.owner` keeps the storage: copy too, and the memory stays valid for that holder.
        let second = DispatchDataBuffer(Array(repeating: 7, count: 256))
        let owner = second.regions[0].owner
        let address = second.regions[0].bytes.baseAddress!
        var copied = Data(consume second)
        copied[0] = 8
        #expect(address.load(as: UInt8.self) == 7)
        withExtendedLifetime(owner) {}
    }

    @Test func dispatchDataBecomesABufferWithoutCopyingAndKeepsItsRegions() {
        var dispatchData = DispatchData.empty
        Array("hello ".utf8).withUnsafeBytes { dispatchData.append($0) }
        Array("world".utf8).withUnsafeBytes { dispatchData.append($0) }
        var pointers: [UnsafeRawPointer] = []
        dispatchData.enumerateBytes { bytes, _, _ in pointers.append(UnsafeRawPointer(bytes.baseAddress!)) }
        var buffer: DispatchDataBuffer? = DispatchDataBuffer(dispatchData)
        dispatchData = .empty
        #expect(buffer!.regions.map { $0.bytes.baseAddress! } == pointers)
        #expect(String(decoding: buffer!, as: UTF8.self) == "hello world")
        #expect(buffer!.regions.map(\.count) == [6, 5])
        buffer = nil
    }

    @Test func bufferBecomesDispatchDataWithoutCopyingAndStaysAliveUntilReleased() {
        let runs = Runs()
        var buffer: DispatchDataBuffer? =
            DispatchDataBuffer(bytesNoCopy: mallocCopy(Array("abc".utf8)), deallocator: .custom(nil) { runs.record() })
            + DispatchDataBuffer("def")
        let addresses = buffer!.regions.map { $0.bytes.baseAddress! }
        var dispatchData: DispatchData? = DispatchData(buffer!)
        buffer = nil
        #expect(runs.count == 0)
        var seen: [UnsafeRawPointer] = []
        dispatchData!.enumerateBytes { bytes, _, _ in seen.append(UnsafeRawPointer(bytes.baseAddress!)) }
        #expect(seen == addresses)
        #expect(Array(dispatchData!) == Array("abcdef".utf8))
        #expect(runs.count == 0)
        dispatchData = nil
        // libdispatch runs its destructor block on a global queue; that releases our region's owner.
        #expect(runs.waitForRun())
        #expect(runs.count == 1)
        #expect(DispatchData(DispatchDataBuffer.empty).isEmpty)
    }

    /// The regions are joined in pairs, then pairs of pairs: they must come out in order, each once, without
    /// copies. (Joined one by one, this test took 3.0 s in a debug build; in pairs, 0.2 s.)
    @Test func manyRegionsBecomeDispatchDataInOrder() {
        var buffer = DispatchDataBuffer()
        var expected: [UInt8] = []
        for index in 0..<20_001 {
            let piece = [UInt8(truncatingIfNeeded: index), UInt8(truncatingIfNeeded: index >> 8), 7]
            buffer += DispatchDataBuffer(piece)
            expected += piece
        }
        let addresses = buffer.regions.map { $0.bytes.baseAddress! }
        #expect(addresses.count == 20_001)
        let dispatchData = DispatchData(buffer)
        var seen: [UnsafeRawPointer] = []
        dispatchData.enumerateBytes { bytes, _, _ in seen.append(UnsafeRawPointer(bytes.baseAddress!)) }
        #expect(seen == addresses)
        #expect(Array(dispatchData) == expected)
    }

    @Test func dispatchQueueRunsCustomDeallocators() {
        // A3: `.custom(queue)` with a toolchain queue runs the deallocator once, on that queue.
        let queue = DispatchQueue(label: "bridge deallocation queue")
        let key = DispatchSpecificKey<Int>()
        queue.setSpecific(key: key, value: 1)
        let runs = Runs()
        var buffer: DispatchDataBuffer? = DispatchDataBuffer(
            bytesNoCopy: mallocCopy([1, 2, 3]),
            deallocator: .custom(queue) {
                #expect(DispatchQueue.getSpecific(key: key) == 1)
                runs.record()
            }
        )
        #expect(buffer!.count == 3)
        buffer = nil
        #expect(runs.waitForRun())
        queue.sync {}
        #expect(runs.count == 1)
    }
}
