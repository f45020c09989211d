#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An immutable, possibly non-contiguous sequence of bytes that is concatenated and sliced without copying.
///
/// `DispatchDataBuffer` is this package's counterpart of the toolchain's `DispatchData`: the type that I/O
/// channels hand to read handlers and take for writes. It is a value type whose contents are a list of
/// *regions*, each a contiguous run of bytes in memory that some owner keeps alive. Concatenating two buffers
/// joins their region lists; taking a sub-range keeps only the regions it touches, trimmed; neither copies a
/// byte. The list is always flat — a buffer is one region or one list of regions, never a tree — so
/// concatenating buffers with N regions in total costs O(N), and finding the byte at an offset is a binary search
/// over the regions.
///
/// The bytes themselves are never written once they are in a buffer (SEMANTICS.md A16), which is why copies of a
/// buffer can share them freely across threads.
///
/// ### Creating buffers
/// - By copying: ``init(bytes:)``, `init(_:)` from any sequence of bytes or any string (its UTF-8), and array
///   literals.
/// - Without copying: ``init(bytesNoCopy:deallocator:)``, which takes over memory together with a
///   ``Deallocator`` that runs exactly once, after the last reference to the memory is gone.
///
/// ### Bad input
/// Each entry point defines what happens with arguments outside the buffer:
/// - ``subdata(in:)`` clamps a range that reaches past the end, and returns ``empty`` for a range that starts at
///   or after the end (SEMANTICS.md A10). A range that starts before 0 is a programming error and traps.
/// - ``region(location:)`` returns ``empty`` with offset ``count`` for a location at or past the end (A15); a
///   negative location traps.
/// - The subscript traps for an index outside `0 ..< count`, like every Swift collection (A17).
/// - The `copyBytes` methods trap for negative counts and ranges outside the buffer, naming the misuse (A17).
///   Those given a count or a range trap for a destination too small for it; the one given a typed buffer
///   pointer copies what fits and returns how many bytes that was, as the toolchain's does.
/// - Creating a buffer from a `nil` address or zero bytes gives ``empty`` (A5).
///
/// Traps stop the process with a message that names the misuse, in optimised builds too (see `require`); none
/// touches memory outside the buffer.
public struct DispatchDataBuffer: Sendable {
    /// The regions, in order, with running logical offsets. Empty for the empty buffer; never holds an empty segment.
    @usableFromInline
    var segments: Segments

    @inlinable
    init(segments: Segments) {
        self.segments = segments
    }

    /// The buffer with no bytes.
    ///
    /// Every empty buffer shares one representation, so ``isIdentical(to:)`` is `true` for any two of them (A5, A6).
    public static let empty = DispatchDataBuffer(segments: .empty)

    /// Creates an empty buffer.
    @inlinable
    public init() {
        self.init(segments: .empty)
    }

    /// A buffer of one region covering `storage`'s bytes from `base`.
    init(storage: Storage, base: UnsafeRawPointer, count: Int) {
        self.init(segments: .single(storage, base: base, count: count))
    }

    // MARK: Creating by copying

    /// Creates a buffer holding a copy of `bytes`.
    ///
    /// The caller may change or free the source as soon as this returns (A1). A `nil` base address or a zero
    /// count gives ``empty``.
    ///
    /// - Parameter bytes: The bytes to copy.
    public init(bytes: UnsafeRawBufferPointer) {
        guard bytes.baseAddress != nil, bytes.count > 0 else {
            self.init()
            return
        }
        let storage = Storage.copying(bytes)
        self.init(storage: storage, base: storage.base!, count: bytes.count)
    }

    /// Creates a buffer holding a copy of the bytes of a sequence.
    ///
    /// Arrays, contiguous collections and `String.UTF8View` are copied with one `memcpy`; other sequences are read
    /// one byte at a time into memory that grows as needed.
    ///
    /// - Parameter bytes: The bytes to copy.
    public init(_ bytes: some Sequence<UInt8>) {
        let contiguous = bytes.withContiguousStorageIfAvailable {
            DispatchDataBuffer(bytes: UnsafeRawBufferPointer($0))
        }
        if let buffer = contiguous {
            self = buffer
            return
        }
        var capacity = Swift.max(bytes.underestimatedCount, 64)
        var memory = Storage.allocate(capacity)
        var count = 0
        for byte in bytes {
            if count == capacity {
                capacity *= 2
                guard let grown = realloc(memory, capacity) else {
                    fatalError("DispatchDataBuffer: out of memory allocating \(capacity) bytes")
                }
                memory = grown
            }
            memory.storeBytes(of: byte, toByteOffset: count, as: UInt8.self)
            count += 1
        }
        guard count > 0 else {
            free(memory)
            self.init()
            return
        }
        self.init(storage: Storage(base: memory, byteCount: count, deallocator: .free), base: memory, count: count)
    }

    /// Creates a buffer holding a copy of a string's UTF-8 encoding, without a terminating NUL.
    ///
    /// - Parameter string: The text to encode.
    public init(_ string: some StringProtocol) {
        var utf8 = String(string)
        self = utf8.withUTF8 { DispatchDataBuffer(bytes: UnsafeRawBufferPointer($0)) }
    }

    // MARK: Creating without copying

    /// Creates a buffer over existing memory, without copying, that releases the memory with `deallocator`.
    ///
    /// The buffer takes ownership: from now on the memory must not be written or freed by anyone else. The
    /// deallocator runs exactly once, after the last reference to the memory is gone — copies of this buffer,
    /// buffers derived from it by concatenation or ``subdata(in:)``, regions, and buffers held by I/O in flight
    /// all count (A2, A3, A4).
    ///
    /// A `nil` base address or a zero count gives ``empty``, and the deallocator runs at once (before this
    /// returns, or on its queue for `.custom` with a queue), so that memory handed over is never leaked (A5, as in
    /// libdispatch's C API; the toolchain's Swift overlay skips the deallocator there).
    ///
    /// This is how the I/O layer turns a buffer it read into (page-aligned, pooled) into data for a handler:
    /// `.custom` with no queue returns the memory to its pool on the releasing thread.
    ///
    /// - Parameters:
    ///   - bytes: The memory to use. Its count is the number of bytes in the buffer and, for `.unmap`, the length
    ///     passed to `munmap`.
    ///   - deallocator: What releases the memory; `.free` by default, as in the toolchain.
    public init(bytesNoCopy bytes: UnsafeRawBufferPointer, deallocator: Deallocator = .free) {
        require(bytes.count >= 0, "DispatchDataBuffer(bytesNoCopy:): negative byte count \(bytes.count)")
        let base = UnsafeMutableRawPointer(mutating: bytes.baseAddress)
        guard let base, bytes.count > 0 else {
            Storage.release(base, bytes.count, deallocator)
            self.init()
            return
        }
        self.init(
            storage: Storage(base: base, byteCount: bytes.count, deallocator: deallocator),
            base: base,
            count: bytes.count
        )
    }

    /// Creates a buffer over several pieces of memory, in order, without copying, all released together by one
    /// deallocator.
    ///
    /// For the bridges and the I/O layer, whose memory comes in pieces that one owner keeps alive (a toolchain
    /// `DispatchData`, a vectored read). Empty pieces are skipped. The deallocator's start address is `nil`, so
    /// only `.custom` and `.none` make sense here.
    ///
    /// - Parameters:
    ///   - pieces: The regions, in order.
    ///   - deallocator: Runs once, when no region is in use any more, or at once if there are no bytes.
    package init(piecesNoCopy pieces: some Sequence<UnsafeRawBufferPointer>, deallocator: Deallocator) {
        let storage = Storage(base: nil, byteCount: 0, deallocator: deallocator)
        let pieces = pieces.filter { $0.count > 0 }
        guard !pieces.isEmpty else {
            // `storage` goes away at the end of this scope and runs the deallocator at once (A5).
            self.init()
            return
        }
        var segments = Segments(capacity: pieces.count)
        var end = 0
        for piece in pieces {
            end += piece.count
            segments.appendRetaining(
                Segment(owner: .passUnretained(storage), base: piece.baseAddress!, count: piece.count, end: end)
            )
        }
        self.init(segments: segments)
    }

    // MARK: Size

    /// The number of bytes: the sum of the sizes of the regions (A8).
    @inlinable
    public var count: Int { segments.byteCount }

    /// Whether the buffer has no bytes.
    @inlinable
    public var isEmpty: Bool { segments.list == nil }

    /// Whether two buffers share one representation, which implies that they are equal.
    ///
    /// It is `true` for a buffer and its copies, for every two empty buffers, and where libdispatch would return
    /// "the same object": concatenation with an empty buffer (A9), ``subdata(in:)`` of the whole range (A10),
    /// ``region(location:)`` of a one-region buffer (A15). It runs in constant time.
    ///
    /// - Parameter other: The buffer to compare with.
    @inlinable
    public func isIdentical(to other: DispatchDataBuffer) -> Bool {
        segments.isIdentical(to: other.segments)
    }

    // MARK: Concatenation

    /// Appends the bytes of another buffer, without copying them (A9, A17).
    ///
    /// The regions of `other` follow the regions of `self`; the result is still one flat list. If either side is
    /// empty the result is the other buffer itself. Appending to a buffer whose representation is not shared
    /// with other copies extends it in place, so building a buffer from N pieces costs O(N) in total.
    ///
    /// - Parameter other: The bytes to append.
    @inlinable
    public mutating func append(_ other: DispatchDataBuffer) {
        guard !other.isEmpty else { return }
        guard !isEmpty else {
            self = other
            return
        }
        Self.checkTotal(count, other.count)
        segments.append(other.segments, shift: count)
    }

    /// Stops on a total past `Int.max` bytes, which only views of memory that is not there can reach, and
    /// which would otherwise wrap the offsets of every region after it.
    @inlinable
    static func checkTotal(_ first: Int, _ second: Int) {
        require(
            !first.addingReportingOverflow(second).overflow,
            "DispatchDataBuffer: concatenating \(first) and \(second) bytes overflows Int"
        )
    }

    /// Appends a copy of `bytes` (A1: the source may change right afterwards).
    ///
    /// - Parameter bytes: The bytes to copy and append.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        append(DispatchDataBuffer(bytes: bytes))
    }

    /// Returns the bytes of `lhs` followed by those of `rhs`, without copying them (A9).
    ///
    /// - Parameters:
    ///   - lhs: The first bytes.
    ///   - rhs: The bytes that follow.
    @inlinable
    public static func + (lhs: DispatchDataBuffer, rhs: DispatchDataBuffer) -> DispatchDataBuffer {
        guard !lhs.isEmpty else { return rhs }
        guard !rhs.isEmpty else { return lhs }
        checkTotal(lhs.count, rhs.count)
        var segments = Segments(capacity: lhs.segments.count + rhs.segments.count)
        segments.append(lhs.segments, shift: 0)
        segments.append(rhs.segments, shift: lhs.count)
        return DispatchDataBuffer(segments: segments)
    }

    /// Appends the bytes of `rhs` to `lhs`, without copying them.
    ///
    /// - Parameters:
    ///   - lhs: The buffer to extend.
    ///   - rhs: The bytes to append.
    @inlinable
    public static func += (lhs: inout DispatchDataBuffer, rhs: DispatchDataBuffer) {
        lhs.append(rhs)
    }

    // MARK: Sub-ranges

    /// Returns the bytes in `range`, without copying them (A10, A11).
    ///
    /// The result holds only the regions that `range` touches, the first and last trimmed; a range inside one
    /// region gives a one-region buffer. Despite its name (kept from the toolchain), nothing is copied: the result
    /// keeps the touched memory alive.
    ///
    /// Out-of-range input, as in libdispatch (A10):
    /// - a range that starts at or after ``count``, or is empty, gives ``empty``;
    /// - a range that ends after ``count`` is clamped to end at ``count``;
    /// - the whole range gives `self` (``isIdentical(to:)`` is `true`).
    ///
    /// A range that starts before 0 is a programming error: it traps with a message naming the range.
    ///
    /// - Parameter range: Offsets of the bytes wanted.
    /// - Returns: The bytes in `range`, clamped to the buffer.
    public func subdata(in range: Range<Int>) -> DispatchDataBuffer {
        require(
            range.lowerBound >= 0,
            "DispatchDataBuffer.subdata(in:): range \(range) starts before offset 0"
        )
        let total = count
        guard range.lowerBound < total, !range.isEmpty else { return .empty }
        let lower = range.lowerBound
        let upper = Swift.min(range.upperBound, total)
        if lower == 0 && upper == total { return self }
        let first = segments.segmentIndex(containing: lower)
        let last = segments.segmentIndex(containing: upper - 1)
        let result = segments.withUnsafeBufferPointer { segments in
            Segments(filling: last - first + 1) { slot in
                // Every touched segment moves by -lower; only the first and the last are trimmed.
                var slot = slot
                for index in first...last {
                    let segment = segments[index]
                    segment.owner._withUnsafeGuaranteedRef { $0.retainSegment() }
                    if index == first || index == last {
                        let from = Swift.max(segment.start, lower)
                        let to = Swift.min(segment.end, upper)
                        slot.initialize(
                            to: Segment(
                                owner: segment.owner,
                                base: segment.base + (from - segment.start),
                                count: to - from,
                                end: to - lower
                            )
                        )
                    } else {
                        slot.initialize(to: segment.moved(toEnd: segment.end &- lower))
                    }
                    slot += 1
                }
            }
        }
        return DispatchDataBuffer(segments: result)
    }

    /// Returns the region that contains the byte at `location`, and the offset of that region's first byte in this
    /// buffer (copy-region, A15).
    ///
    /// The returned buffer is always a single region, exactly the bytes of that region, and nothing is copied.
    /// For a buffer that is one region the result is `(self, 0)`. A location at or past the end gives
    /// `(empty, count)`, as in libdispatch. A negative location is a programming error and traps.
    ///
    /// - Parameter location: The offset of a byte.
    /// - Returns: The region containing it and the region's offset.
    public func region(location: Int) -> (data: DispatchDataBuffer, offset: Int) {
        require(location >= 0, "DispatchDataBuffer.region(location:): negative location \(location)")
        guard location < count else { return (.empty, count) }
        if segments.count == 1 { return (self, 0) }
        let segment = segments[segments.segmentIndex(containing: location)]
        let region = Segments.single(segment.owner.takeUnretainedValue(), base: segment.base, count: segment.count)
        return (DispatchDataBuffer(segments: region), segment.start)
    }

    // MARK: Contiguous access

    /// Calls `body` with all the bytes in one contiguous piece of memory (map, A12).
    ///
    /// Flattens at most once per call: a buffer of one region is passed as it is, without copying; a buffer of
    /// several regions is copied once into a new allocation that is freed when `body` returns. Nothing is cached,
    /// as in libdispatch (A12), so a buffer that is mapped often is better flattened once with ``flattened()``.
    ///
    /// An empty buffer calls `body` with a zero-length buffer whose base address is `nil`; it never traps (A7 →
    /// ours).
    ///
    /// - Parameter body: Called exactly once, on the calling thread. The pointer is valid only during the call and
    ///   the memory must not be written (A16).
    /// - Returns: What `body` returns.
    @inlinable
    public func withUnsafeBytes<Result, Failure: Error>(
        _ body: (UnsafeRawBufferPointer) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        switch segments.count {
        case 0:
            return try body(UnsafeRawBufferPointer(start: nil, count: 0))
        case 1:
            return try body(segments[0].bytes)
        default:
            let total = count
            let (memory, mapped) = Self.allocateFlat(total)
            defer { Self.deallocateFlat(memory, total, mapped: mapped) }
            copyAll(to: memory)
            return try body(UnsafeRawBufferPointer(start: memory, count: total))
        }
    }

    /// Returns a buffer with the same bytes in a single region, copying them if there is more than one region.
    ///
    /// A buffer that is already one region (or empty) is returned as it is.
    public func flattened() -> DispatchDataBuffer {
        guard segments.count > 1 else { return self }
        let total = count
        let memory = Storage.allocate(total)
        copyAll(to: memory)
        return DispatchDataBuffer(
            storage: Storage(base: memory, byteCount: total, deallocator: .free),
            base: memory,
            count: total
        )
    }

    /// Copies every byte, region after region, to `destination`.
    @usableFromInline
    func copyAll(to destination: UnsafeMutableRawPointer) {
        segments.withUnsafeBufferPointer { segments in
            var target = destination
            for segment in segments {
                target.copyMemory(from: segment.base, byteCount: segment.count)
                target += segment.count
            }
        }
    }

    /// Allocations of at least this size are taken straight from the kernel with their pages populated at once.
    ///
    /// A large flat copy is written exactly once, front to back; letting `malloc` hand out an `mmap`ed block and
    /// then taking one page fault per 4 KiB costs more than the copy itself, so map asks `mmap` for
    /// `MAP_POPULATE`, which faults every page in one system call.
    @usableFromInline
    static var populateThreshold: Int { 1 << 20 }

    /// Memory for a flat copy of `count` bytes, and whether it was mapped (else it came from `malloc`, when
    /// `mmap` failed or the copy is small): ``deallocateFlat(_:_:mapped:)`` must be told which.
    @usableFromInline
    static func allocateFlat(_ count: Int) -> (memory: UnsafeMutableRawPointer, mapped: Bool) {
        if count >= populateThreshold {
            let memory = mmap(
                nil,
                count,
                PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                -1,
                0
            )
            if let memory, memory != MAP_FAILED {
                return (memory, true)
            }
            // Fall through to malloc, which reports running out of memory the usual way.
        }
        return (Storage.allocate(count), false)
    }

    /// Frees what ``allocateFlat(_:)`` gave. By what it says, not by the size: a large `malloc` block can
    /// come from the heap and be page-aligned, and `munmap` would then take part of the heap with it.
    @usableFromInline
    static func deallocateFlat(_ memory: UnsafeMutableRawPointer, _ count: Int, mapped: Bool) {
        if mapped {
            munmap(memory, count)
        } else {
            free(memory)
        }
    }

    // MARK: Copying out

    /// Copies the bytes in `range` to `destination` (A17).
    ///
    /// Walks the regions that `range` touches and stops after the last one; nothing else is read.
    ///
    /// Traps, naming the misuse, if `range` is not inside `0 ..< count` or if `destination` is shorter than
    /// `range` (a `nil` destination is shorter than any non-empty range).
    ///
    /// - Parameters:
    ///   - destination: Where to copy to, starting at its first byte.
    ///   - range: Offsets of the bytes to copy.
    public func copyBytes(to destination: UnsafeMutableRawBufferPointer, from range: Range<Int>) {
        require(
            range.lowerBound >= 0 && range.upperBound <= count,
            "DispatchDataBuffer.copyBytes(to:from:): range \(range) is outside 0..<\(count)"
        )
        require(
            destination.count >= range.count,
            "DispatchDataBuffer.copyBytes(to:from:): destination holds \(destination.count) bytes, range has \(range.count)"
        )
        guard !range.isEmpty else { return }
        let target = destination.baseAddress!
        let first = segments.segmentIndex(containing: range.lowerBound)
        segments.withUnsafeBufferPointer { segments in
            var index = first
            while index < segments.count {
                let segment = segments[index]
                let from = Swift.max(segment.start, range.lowerBound)
                let to = Swift.min(segment.end, range.upperBound)
                if from >= to { break }
                (target + (from - range.lowerBound)).copyMemory(
                    from: segment.base + (from - segment.start),
                    byteCount: to - from
                )
                index += 1
            }
        }
    }

    /// Copies the first `count` bytes to `destination`.
    ///
    /// Traps if `count` is negative, larger than the buffer, or larger than `destination`.
    ///
    /// - Parameters:
    ///   - destination: Where to copy to.
    ///   - count: How many bytes to copy from the start of the buffer.
    public func copyBytes(to destination: UnsafeMutableRawBufferPointer, count: Int) {
        require(count >= 0, "DispatchDataBuffer.copyBytes(to:count:): negative count \(count)")
        copyBytes(to: destination, from: 0..<count)
    }

    /// Copies the first `count` bytes to the memory at `destination`, which must have room for them.
    ///
    /// Traps if `count` is negative or larger than the buffer.
    ///
    /// - Parameters:
    ///   - destination: Where to copy to.
    ///   - count: How many bytes to copy from the start of the buffer.
    public func copyBytes(to destination: UnsafeMutablePointer<UInt8>, count: Int) {
        require(count >= 0, "DispatchDataBuffer.copyBytes(to:count:): negative count \(count)")
        copyBytes(to: UnsafeMutableRawBufferPointer(start: destination, count: count), from: 0..<count)
    }

    /// Copies the bytes in `range` to the memory at `destination`, which must have room for them.
    ///
    /// Traps if `range` is not inside `0 ..< count`.
    ///
    /// - Parameters:
    ///   - destination: Where to copy to.
    ///   - range: Offsets of the bytes to copy.
    public func copyBytes(to destination: UnsafeMutablePointer<UInt8>, from range: Range<Int>) {
        copyBytes(to: UnsafeMutableRawBufferPointer(start: destination, count: range.count), from: range)
    }

    /// Copies as many bytes as fit into `destination`, from `range` or from the start, and returns how many bytes
    /// were copied.
    ///
    /// As in the toolchain, a destination smaller than the range is not an error: only what fits is copied, counted
    /// in bytes (the destination is treated as raw memory). Traps if `range` is not inside `0 ..< count`.
    ///
    /// - Parameters:
    ///   - destination: Where to copy to.
    ///   - range: Offsets of the bytes to copy; `nil` means the whole buffer.
    /// - Returns: The number of bytes copied: the smaller of the range's count and the destination's size in bytes.
    @discardableResult
    public func copyBytes<DestinationType>(
        to destination: UnsafeMutableBufferPointer<DestinationType>,
        from range: Range<Int>? = nil
    ) -> Int {
        let range = range ?? 0..<count
        require(
            range.lowerBound >= 0 && range.upperBound <= count,
            "DispatchDataBuffer.copyBytes(to:from:): range \(range) is outside 0..<\(count)"
        )
        let raw = UnsafeMutableRawBufferPointer(destination)
        let copied = Swift.min(range.count, raw.count)
        copyBytes(to: raw, from: range.lowerBound..<(range.lowerBound + copied))
        return copied
    }
}

// MARK: - Package API for the bridges and the I/O layer

extension DispatchDataBuffer {
    /// Takes this buffer's memory for a new owner that may write to it, if nobody else can reach it.
    ///
    /// Succeeds only when the buffer is one region, no other copy shares its representation, nothing else
    /// references its storage, and the storage is `malloc` memory the buffer owns outright (copies and `.free`).
    /// Then `self` becomes empty and the caller gets the bytes and the owner to keep alive while it uses them;
    /// writing to them cannot be seen by any buffer. Otherwise `self` is left unchanged and the result is `nil`.
    package mutating func takeUniquelyOwnedBytes() -> (
        bytes: UnsafeMutableRawBufferPointer, owner: AnyObject & Sendable
    )? {
        guard segments.count == 1, isKnownUniquelyReferenced(&segments.list), let list = segments.list else {
            return nil
        }
        let segment = segments[0]
        var storage = segment.owner.takeUnretainedValue()
        // Only this list's segment points into the storage: take over the segments' Swift reference (dropping our
        // extra one) and empty the list, so that `storage` is the only reference if nobody else holds one.
        guard storage.stopCountingSoleSegment() else { return nil }
        list.segmentCount = 0
        segments = .empty
        Unmanaged.passUnretained(storage).release()
        guard isKnownUniquelyReferenced(&storage), storage.isPrivateMallocMemory else {
            segments = .single(storage, base: segment.base, count: segment.count)
            return nil
        }
        return (UnsafeMutableRawBufferPointer(mutating: segment.bytes), storage)
    }
}
