#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension DispatchDataBuffer: RandomAccessCollection {
    /// Offsets from 0.
    public typealias Index = Int
    /// A byte.
    public typealias Element = UInt8
    /// The offsets of the bytes.
    public typealias Indices = Range<Int>

    /// Always 0.
    @inlinable
    public var startIndex: Int { 0 }

    /// The number of bytes.
    @inlinable
    public var endIndex: Int { count }

    /// The byte at offset `position`, found by a binary search over the regions (O(log regions)).
    ///
    /// Traps if `position` is not in `0 ..< count`, as every Swift collection does (A17).
    ///
    /// - Parameter position: The offset of the byte.
    @inlinable
    public subscript(position: Int) -> UInt8 {
        // The failure is a call out of line: the check costs one compare and branch per access, as a
        // precondition's would, while the message survives an optimised build, which drops a
        // precondition's and leaves a bare trap.
        if _slowPath(position < 0 || position >= count) { Self.indexOutOfRange(position, count) }
        let segment = segments[segments.segmentIndex(containing: position)]
        return segment.base.load(fromByteOffset: position &- segment.start, as: UInt8.self)
    }

    /// Stops the process for a subscript outside `0 ..< count` (A17).
    @usableFromInline
    @inline(never)
    static func indexOutOfRange(_ position: Int, _ count: Int) -> Never {
        misuse("DispatchDataBuffer: index \(position) is out of range 0..<\(count)", file: #fileID, line: #line)
    }

    /// Returns an iterator over the bytes that walks the regions directly, without flattening.
    @inlinable
    public func makeIterator() -> Iterator {
        Iterator(segments: segments)
    }

    /// Calls `body` with the bytes if they are contiguous (zero or one region), and returns `nil` otherwise.
    ///
    /// - Parameter body: Called at most once, on the calling thread.
    @inlinable
    public func withContiguousStorageIfAvailable<Result>(
        _ body: (UnsafeBufferPointer<UInt8>) throws -> Result
    ) rethrows -> Result? {
        switch segments.count {
        case 0:
            return try body(UnsafeBufferPointer(start: nil, count: 0))
        case 1:
            let segment = segments[0]
            return try body(
                UnsafeBufferPointer(start: segment.base.assumingMemoryBound(to: UInt8.self), count: segment.count)
            )
        default:
            return nil
        }
    }

    /// An iterator over the bytes of a buffer, region by region.
    public struct Iterator: IteratorProtocol {
        @usableFromInline
        let segments: Segments
        @usableFromInline
        var nextSegment = 0
        @usableFromInline
        var position: UnsafeRawPointer? = nil
        @usableFromInline
        var end: UnsafeRawPointer? = nil

        @inlinable
        init(segments: Segments) {
            self.segments = segments
        }

        /// The next byte, or `nil` after the last one.
        @inlinable
        public mutating func next() -> UInt8? {
            if position != end {
                let here = position.unsafelyUnwrapped
                position = here + 1
                return here.load(as: UInt8.self)
            }
            return nextFromNextSegment()
        }

        @usableFromInline
        mutating func nextFromNextSegment() -> UInt8? {
            guard nextSegment < segments.count else { return nil }
            let segment = segments[nextSegment]
            nextSegment += 1
            position = segment.base + 1
            end = segment.base + segment.count
            return segment.base.load(as: UInt8.self)
        }
    }
}

extension DispatchDataBuffer: Equatable {
    /// Whether two buffers hold the same bytes, however they are split into regions.
    ///
    /// - Parameters:
    ///   - lhs: A buffer.
    ///   - rhs: Another buffer.
    public static func == (lhs: DispatchDataBuffer, rhs: DispatchDataBuffer) -> Bool {
        if lhs.isIdentical(to: rhs) { return true }
        guard lhs.count == rhs.count else { return false }
        return lhs.segments.withUnsafeBufferPointer { left in
            rhs.segments.withUnsafeBufferPointer { right in
                var leftIndex = 0
                var rightIndex = 0
                var leftUsed = 0
                var rightUsed = 0
                while leftIndex < left.count {
                    let leftSegment = left[leftIndex]
                    let rightSegment = right[rightIndex]
                    let length = Swift.min(leftSegment.count - leftUsed, rightSegment.count - rightUsed)
                    if memcmp(leftSegment.base + leftUsed, rightSegment.base + rightUsed, length) != 0 {
                        return false
                    }
                    leftUsed += length
                    rightUsed += length
                    if leftUsed == leftSegment.count {
                        leftIndex += 1
                        leftUsed = 0
                    }
                    if rightUsed == rightSegment.count {
                        rightIndex += 1
                        rightUsed = 0
                    }
                }
                return true
            }
        }
    }
}

extension DispatchDataBuffer: Hashable {
    /// Feeds the count and every byte to `hasher`, so that equal buffers hash alike whatever their regions.
    ///
    /// Every byte is hashed, so hashing is linear in ``count``: fine for keys, costly for large buffers.
    ///
    /// - Parameter hasher: The hasher to feed.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(count)
        // Hasher buffers partial words, so feeding the regions one by one equals feeding the bytes in one piece.
        for segment in segments {
            hasher.combine(bytes: segment.bytes)
        }
    }
}

extension DispatchDataBuffer: ExpressibleByArrayLiteral {
    /// Creates a buffer holding a copy of the listed bytes.
    ///
    /// - Parameter elements: The bytes.
    public init(arrayLiteral elements: UInt8...) {
        self.init(elements)
    }
}

extension DispatchDataBuffer: CustomStringConvertible, CustomDebugStringConvertible {
    /// The size, like Foundation's `Data`: "12 bytes".
    public var description: String { "\(count) bytes" }

    /// The size and the region sizes.
    public var debugDescription: String {
        "DispatchDataBuffer(\(count) bytes in \(segments.count) regions: \(segments.map(\.count)))"
    }
}

extension Array where Element == UInt8 {
    /// Creates an array with a copy of the bytes of `buffer`, copied region by region.
    ///
    /// - Parameter buffer: The bytes to copy.
    public init(_ buffer: DispatchDataBuffer) {
        let count = buffer.count
        self.init(unsafeUninitializedCapacity: count) { storage, initialized in
            if count > 0 {
                buffer.copyAll(to: UnsafeMutableRawPointer(storage.baseAddress!))
            }
            initialized = count
        }
    }
}

extension String {
    /// Creates a string by decoding the bytes of `buffer` as UTF-8, copied region by region into the string.
    ///
    /// Invalid UTF-8 is replaced by U+FFFD, as with `String(decoding:as:)` on other byte collections.
    ///
    /// - Parameters:
    ///   - buffer: The bytes to decode.
    ///   - encoding: `UTF8.self`.
    public init(decoding buffer: DispatchDataBuffer, as encoding: UTF8.Type) {
        let count = buffer.count
        if count == 0 {
            self.init()
            return
        }
        self.init(unsafeUninitializedCapacity: count) { storage in
            buffer.copyAll(to: UnsafeMutableRawPointer(storage.baseAddress!))
            return count
        }
    }
}
