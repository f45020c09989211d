extension DispatchDataBuffer {
    /// One contiguous run of bytes of a buffer, with what keeps its memory alive.
    ///
    /// Holding a `Region` keeps its memory valid, so the I/O layer can hand ``bytes`` to the kernel and keep the
    /// region until the operation completes. A region keeps the memory of every region of the buffer it came from
    /// alive, because that is free to walk; to keep only this region's memory, hold ``owner`` or ``data`` instead.
    public struct Region: @unchecked Sendable {
        // Sendable: the memory is immutable (A16) and `list`, which keeps it alive, is only read.
        @usableFromInline
        let list: SegmentList?
        @usableFromInline
        let segment: Segment

        @inlinable
        init(list: SegmentList?, segment: Segment) {
            self.list = list
            self.segment = segment
        }

        /// The bytes of the region. Valid while this region, its owner, or a buffer holding them is alive; never
        /// to be written (A16).
        @inlinable
        public var bytes: UnsafeRawBufferPointer { segment.bytes }

        /// The offset of the region's first byte in the buffer it came from.
        @inlinable
        public var offset: Int { segment.start }

        /// The number of bytes in the region; never 0.
        @inlinable
        public var count: Int { segment.count }

        /// An object that keeps the region's memory alive for as long as it is referenced.
        ///
        /// Its deallocator (if the memory was handed over with one) cannot run while this object is alive.
        @inlinable
        public var owner: AnyObject & Sendable { segment.owner.takeUnretainedValue() }

        /// A buffer of exactly this region's bytes, without copying.
        ///
        /// Unlike libdispatch's apply, which may pass the whole underlying allocation (A14), this covers only the
        /// region's bytes.
        @inlinable
        public var data: DispatchDataBuffer {
            DispatchDataBuffer(
                segments: .single(segment.owner.takeUnretainedValue(), base: segment.base, count: segment.count)
            )
        }
    }

    /// The regions of a buffer, in order: a random-access collection that allocates nothing to walk.
    public struct Regions: RandomAccessCollection, Sendable {
        @usableFromInline
        let segments: Segments

        @inlinable
        init(segments: Segments) {
            self.segments = segments
        }

        /// The position of the first region.
        @inlinable
        public var startIndex: Int { 0 }

        /// One past the position of the last region.
        @inlinable
        public var endIndex: Int { segments.count }

        /// The region at `position`; traps with a message if there is no such region (A17).
        ///
        /// - Parameter position: A position in `startIndex ..< endIndex`.
        @inlinable
        public subscript(position: Int) -> Region {
            let count = segments.count
            if _slowPath(position < 0 || position >= count) { Self.indexOutOfRange(position, count) }
            return Region(list: segments.list, segment: segments[position])
        }

        /// Stops the process for a position outside `0 ..< count` (A17).
        @usableFromInline
        @inline(never)
        static func indexOutOfRange(_ position: Int, _ count: Int) -> Never {
            misuse(
                "DispatchDataBuffer.regions: position \(position) is out of range 0..<\(count)",
                file: #fileID,
                line: #line
            )
        }
    }

    /// The buffer's regions: contiguous runs of bytes, in order, none of them empty.
    ///
    /// Walking them (`for region in buffer.regions`) allocates nothing, so the I/O layer can build an iovec from
    /// them per write. Stop early with `break`. An empty buffer has no regions (A6).
    @inlinable
    public var regions: Regions { Regions(segments: segments) }

    /// Calls `block` once per region, in order, until it sets `stop` (apply, A13, A17).
    ///
    /// `block` runs on the calling thread, once for each region until it sets `stop` to `true`; no call follows
    /// that one. It receives the region's bytes (valid only during the call, never to be written, A16) and the
    /// offset of the region's first byte in this buffer. An empty buffer makes no call.
    ///
    /// - Parameter block: The function to call for each region.
    /// - Returns: `true` if every region was visited (also for an empty buffer), `false` if `block` stopped the walk
    ///   early. The toolchain's version returns nothing; the result can be ignored.
    @inlinable
    @discardableResult
    public func enumerateBytes<Failure: Error>(
        _ block: (_ buffer: UnsafeBufferPointer<UInt8>, _ byteIndex: Int, _ stop: inout Bool) throws(Failure) -> Void
    ) throws(Failure) -> Bool {
        var stop = false
        for index in segments.indices {
            let segment = segments[index]
            let bytes = UnsafeBufferPointer(
                start: segment.base.assumingMemoryBound(to: UInt8.self),
                count: segment.count
            )
            try block(bytes, segment.start, &stop)
            if stop { return false }
        }
        return true
    }
}
