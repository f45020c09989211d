import Dispatch
import DispatchData
import Foundation

// Bridges between `DispatchDataBuffer` and Foundation's `Data` and the toolchain's `DispatchData`, kept out of
// `DispatchData` so that its users do not pay for Foundation.
//
// Which directions copy, and why:
// - `DispatchData` → buffer: never. libdispatch data is immutable (SEMANTICS.md A16), so its regions can be
//   borrowed as they are while the `DispatchData` is kept alive.
// - buffer → `DispatchData`: never. Each region becomes a libdispatch leaf whose custom destructor keeps the
//   region's owner alive; libdispatch never writes to it either.
// - `Data` → buffer: not for `Data` kept on the heap (every `Data` above 14 bytes on 64-bit Linux); the buffer
//   keeps a copy of the `Data` value, and the bytes of a `Data` do not move or change while a value that shares
//   them exists (a mutating copy copies first). Small inline `Data` is copied: it has no stable address.
// - buffer → `Data`: only when the memory cannot be seen by anyone else, because `Data` writes through to memory it
//   was given without copying whenever it holds the only reference to it, which would break every other buffer
//   sharing that memory. So a one-region buffer whose `malloc` memory nothing else references is handed over
//   uncopied; everything else is copied once.

extension DispatchDataBuffer {
    /// Creates a buffer with the bytes of a Foundation `Data`, without copying them when `data` is on the heap.
    ///
    /// The buffer keeps a copy of the `Data` value (sharing its storage) until its last reference is gone. `Data`
    /// of at most 63 bytes, which may be stored inline, is copied.
    ///
    /// - Parameter data: The bytes.
    public init(_ data: Data) {
        let count = data.count
        guard count > 0 else {
            self.init()
            return
        }
        if count >= Self.smallestBorrowedData {
            // Two reads of the address agree only for heap storage: an inline `Data` hands out a fresh copy.
            let first = data.withUnsafeBytes { $0.baseAddress }
            let second = data.withUnsafeBytes { $0.baseAddress }
            if let first, first == second {
                self.init(
                    bytesNoCopy: UnsafeRawBufferPointer(start: first, count: count),
                    deallocator: .custom(nil) { withExtendedLifetime(data) {} }
                )
                return
            }
        }
        self = data.withUnsafeBytes { DispatchDataBuffer(bytes: $0) }
    }

    /// Below this size, `Data` → buffer copies: copying is cheaper than keeping the `Data` alive, and `Data` this
    /// small may be stored inline without a stable address.
    static var smallestBorrowedData: Int { 64 }

    /// Creates a buffer with the regions of a toolchain `DispatchData`, without copying.
    ///
    /// The buffer keeps `data` alive until its last reference (or the last reference to any buffer derived from
    /// it) is gone. Region boundaries are kept.
    ///
    /// - Parameter data: The bytes.
    public init(_ data: DispatchData) {
        var pieces: [UnsafeRawBufferPointer] = []
        data.enumerateBytes { bytes, _, _ in
            pieces.append(UnsafeRawBufferPointer(bytes))
        }
        let owner = DispatchDataOwner(data)
        self.init(piecesNoCopy: pieces, deallocator: .custom(nil) { withExtendedLifetime(owner) {} })
    }
}

/// Keeps a toolchain `DispatchData` alive for the buffers that borrow its regions.
///
/// `DispatchData` is not declared `Sendable`, but libdispatch data objects are immutable (A16) and reference-counted
/// atomically, so holding one from any thread and releasing it on another is safe.
private final class DispatchDataOwner: @unchecked Sendable {
    let data: DispatchData

    init(_ data: DispatchData) {
        self.data = data
    }
}

extension Data {
    /// Creates a `Data` with the bytes of a buffer, handing its memory over without a copy where nobody else can
    /// see it.
    ///
    /// That is the case when `buffer` is one region of memory the buffer allocated (or took over with `.free`),
    /// and neither another copy of `buffer` nor a buffer derived from it shares the memory: typically a buffer
    /// just read or built, passed with `consume`. `Data` may then write to the memory, harmlessly. Otherwise the
    /// bytes are copied once, because `Data` writes in place to memory it holds the only reference to.
    ///
    /// - Parameter buffer: The bytes. Pass it with `consume` to let the memory move without a copy.
    public init(_ buffer: consuming DispatchDataBuffer) {
        if let (bytes, owner) = buffer.takeUniquelyOwnedBytes() {
            self.init(
                bytesNoCopy: bytes.baseAddress!,
                count: bytes.count,
                deallocator: .custom { _, _ in withExtendedLifetime(owner) {} }
            )
            return
        }
        let count = buffer.count
        self.init(count: count)
        if count > 0 {
            withUnsafeMutableBytes { (target: UnsafeMutableRawBufferPointer) in
                buffer.copyBytes(to: target, count: count)
            }
        }
    }
}

extension DispatchData {
    /// Creates a toolchain `DispatchData` with the bytes of a buffer, without copying.
    ///
    /// Each region becomes one libdispatch region whose destructor keeps the region's memory alive; libdispatch
    /// releases it on one of its global queues when the last `DispatchData` using it is gone. libdispatch's
    /// concatenation copies the region lists of both sides, so the regions are joined in pairs, then pairs of
    /// pairs: O(regions · log regions), where appending them one by one cost O(regions²) (20,000 regions took
    /// seconds).
    ///
    /// - Parameter buffer: The bytes.
    public init(_ buffer: DispatchDataBuffer) {
        var level: [DispatchData] = buffer.regions.map { region in
            let owner = region.owner
            // Not `.free` or `.unmap`: those crash in the toolchain's overlay on Linux (A2, A4).
            return DispatchData(
                bytesNoCopy: region.bytes,
                deallocator: .custom(nil) { withExtendedLifetime(owner) {} }
            )
        }
        while level.count > 1 {
            var joined: [DispatchData] = []
            joined.reserveCapacity((level.count + 1) / 2)
            var index = 0
            while index + 1 < level.count {
                var pair = level[index]
                pair.append(level[index + 1])
                joined.append(pair)
                index += 2
            }
            if index < level.count { joined.append(level[index]) }
            level = joined
        }
        self = level.first ?? .empty
    }
}

extension DispatchQueue: DeallocationQueue {
    /// Submits `work` to run once on this queue, as `async(group:qos:flags:execute:)` with its defaults does.
    ///
    /// This makes a toolchain queue usable as the queue of a `.custom` deallocator.
    ///
    /// - Parameter work: Runs once, on this queue.
    public func async(execute work: @escaping @Sendable () -> Void) {
        async(group: nil, qos: .unspecified, flags: [], execute: work)
    }
}
