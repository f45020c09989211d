import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The owner of one piece of memory that buffers point into.
///
/// Every region of a ``DispatchDataBuffer`` holds a strong reference to the `Storage` its bytes live in, so
/// Swift's reference counting is the only bookkeeping: `deinit` runs exactly once, on the thread that dropped
/// the last reference, whichever buffer (or region, or I/O operation) that reference came from. That is what
/// makes the deallocator contract of SEMANTICS.md A2–A4 hold without locks.
///
/// The memory is never written through a `Storage` (A16), which is why sharing it across threads is safe and
/// the class can be `@unchecked Sendable`.
@usableFromInline
final class Storage: @unchecked Sendable {
    /// Start of the memory handed to the deallocator; `nil` when the storage only keeps something else alive.
    let base: UnsafeMutableRawPointer?
    /// Length handed to `munmap` for `.unmap`.
    let byteCount: Int
    let deallocator: DispatchDataBuffer.Deallocator
    /// How many segments, in all segment lists, point into this storage.
    ///
    /// Segments are counted here rather than with Swift's reference count because one `lock xadd` costs less than
    /// `swift_retain`'s compare-and-swap loop, and concat and subdata do one per region. All segments together
    /// hold a single Swift reference, taken when the count leaves 0 and dropped when it returns to 0; `deinit`
    /// (and with it the deallocator) runs once that reference and every other one (`Region.owner`) are gone.
    @usableFromInline
    let segmentReferences = Atomic<Int>(0)

    init(base: UnsafeMutableRawPointer?, byteCount: Int, deallocator: DispatchDataBuffer.Deallocator) {
        self.base = base
        self.byteCount = byteCount
        self.deallocator = deallocator
    }

    /// Allocates `count` bytes with `malloc` and copies `source` into them.
    ///
    /// Copies use `malloc` (not Swift's allocator) so that they are released by the same `.free` path as memory
    /// handed over by callers, and so that a bridge may hand them on to code that expects `free`.
    static func copying(_ source: UnsafeRawBufferPointer) -> Storage {
        let memory = allocate(source.count)
        memory.copyMemory(from: source.baseAddress!, byteCount: source.count)
        return Storage(base: memory, byteCount: source.count, deallocator: .free)
    }

    /// `malloc` that stops with a message instead of returning `nil`, as Swift's own allocator does.
    static func allocate(_ count: Int) -> UnsafeMutableRawPointer {
        guard let memory = malloc(count) else {
            fatalError("DispatchDataBuffer: out of memory allocating \(count) bytes")
        }
        return memory
    }

    /// Whether the memory came from `malloc` and was given to us outright, so that once nobody else can reach this
    /// storage a new owner may write to it (used by the Foundation bridge to hand memory to `Data` uncopied).
    var isPrivateMallocMemory: Bool {
        if case .free = deallocator { return base != nil }
        return false
    }

    deinit {
        Storage.release(base, byteCount, deallocator)
    }

    /// Counts one more segment pointing here.
    @inlinable
    func retainSegment() {
        if segmentReferences.wrappingAdd(1, ordering: .relaxed).oldValue == 0 {
            _ = Unmanaged.passUnretained(self).retain()
        }
    }

    /// If exactly one segment points here, stops counting it and returns `true`: the caller then owns the
    /// segments' Swift reference and must remove that segment from its list without `releaseSegment`.
    ///
    /// Only meaningful when the caller's list is the only reference to that segment, so that no other thread
    /// can count a new segment meanwhile.
    func stopCountingSoleSegment() -> Bool {
        guard segmentReferences.load(ordering: .acquiring) == 1 else { return false }
        segmentReferences.store(0, ordering: .relaxed)
        return true
    }

    /// Counts one segment fewer; the last one drops the segments' Swift reference.
    @inlinable
    func releaseSegment() {
        // Acquire-release, so that every use of the memory through any segment happens before the deallocator.
        if segmentReferences.wrappingSubtract(1, ordering: .acquiringAndReleasing).oldValue == 1 {
            Unmanaged.passUnretained(self).release()
        }
    }

    /// Runs a deallocator. Shared by `deinit` and by the A5 path, where an empty buffer is created from memory
    /// whose deallocator must still run (at once).
    static func release(
        _ base: UnsafeMutableRawPointer?,
        _ byteCount: Int,
        _ deallocator: DispatchDataBuffer.Deallocator
    ) {
        switch deallocator {
        case .free:
            // A2: free on the releasing thread; free(NULL) is a no-op, so the empty case needs no check.
            free(base)
        case .unmap:
            // A4 → ours: munmap of exactly the length given at creation, on the releasing thread.
            if let base, byteCount > 0 {
                let rc = munmap(base, byteCount)
                precondition(rc == 0, "DispatchDataBuffer: munmap(\(base), \(byteCount)) failed, errno \(errno)")
            }
        case .none:
            break
        case .custom(let queue, let body):
            // A3: on the given queue; without one there is no default queue in this module, so it runs right here.
            if let queue {
                queue.async(execute: body)
            } else {
                body()
            }
        }
    }
}

/// One contiguous run of bytes inside a buffer: a slice of a ``Storage``.
///
/// `end` is the logical offset, inside the buffer that holds this segment, one past its last byte. Keeping the
/// running total in each segment is what makes offset → region lookup a binary search (O(log regions)), at the
/// price of rewriting `end` when segments move into another buffer, which concat and subdata do anyway.
///
/// The owner reference is unmanaged so that a segment is a plain value: lists of segments are copied with
/// `memcpy` and destroyed with one tight loop of releases. Each segment in a ``SegmentList`` counts once in its
/// storage's ``Storage/segmentReferences``; whoever copies a segment into another list counts it again.
@usableFromInline
struct Segment: @unchecked Sendable {
    @usableFromInline let owner: Unmanaged<Storage>
    @usableFromInline let base: UnsafeRawPointer
    @usableFromInline let count: Int
    @usableFromInline let end: Int

    @inlinable
    init(owner: Unmanaged<Storage>, base: UnsafeRawPointer, count: Int, end: Int) {
        self.owner = owner
        self.base = base
        self.count = count
        self.end = end
    }

    /// Logical offset of the first byte.
    @inlinable
    var start: Int { end - count }

    @inlinable
    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }

    /// The same bytes, placed so that they end at `newEnd` in another buffer.
    @inlinable
    func moved(toEnd newEnd: Int) -> Segment {
        Segment(owner: owner, base: base, count: count, end: newEnd)
    }
}

@usableFromInline
struct SegmentListHeader {
    @usableFromInline var count: Int
    @usableFromInline let capacity: Int

    @inlinable
    init(count: Int, capacity: Int) {
        self.count = count
        self.capacity = capacity
    }
}

/// The heap object behind a non-empty buffer: its segments, in order, each holding one reference to its storage.
/// (`ManagedBuffer` is not `Sendable`; ``Segments``, which wraps it, is, for the reasons below.)
///
/// This is what copies of a ``DispatchDataBuffer`` share. It is only written while uniquely referenced (appending
/// in place) or before it is published, so sharing it across threads is safe.
@usableFromInline
final class SegmentList: ManagedBuffer<SegmentListHeader, Segment> {
    /// A list with room for `capacity` segments and none in it.
    @usableFromInline
    static func make(capacity: Int) -> SegmentList {
        let list = create(minimumCapacity: capacity) { _ in SegmentListHeader(count: 0, capacity: capacity) }
        return unsafeDowncast(list, to: SegmentList.self)
    }

    // The header is read and written through pointers only: the `header` property of `ManagedBuffer` is a class
    // `var`, and every access to it pays for a dynamic exclusivity check.

    /// The number of segments in the list.
    @inlinable
    var segmentCount: Int {
        get { withUnsafeMutablePointerToHeader { $0.pointee.count } }
        set { withUnsafeMutablePointerToHeader { $0.pointee.count = newValue } }
    }

    /// Room for this many segments.
    @inlinable
    var segmentCapacity: Int { withUnsafeMutablePointerToHeader { $0.pointee.capacity } }

    deinit {
        withUnsafeMutablePointers { header, segments in
            for index in 0..<header.pointee.count {
                segments[index].owner._withUnsafeGuaranteedRef { $0.releaseSegment() }
            }
        }
    }
}

/// The segments of a buffer: a read-only collection over a shared ``SegmentList`` (`nil` when empty).
@usableFromInline
struct Segments: RandomAccessCollection, @unchecked Sendable {
    @usableFromInline var list: SegmentList?

    @inlinable
    init(list: SegmentList?) {
        self.list = list
    }

    /// No segments; no allocation.
    @inlinable
    static var empty: Segments { Segments(list: nil) }

    /// One segment over `storage`, which the new list retains.
    @usableFromInline
    static func single(_ storage: Storage, base: UnsafeRawPointer, count: Int) -> Segments {
        var segments = Segments(capacity: 1)
        segments.appendRetaining(Segment(owner: .passUnretained(storage), base: base, count: count, end: count))
        return segments
    }

    /// A new list of exactly `count` segments, all initialized by `body`, which must also retain their storages.
    @inlinable
    init(filling count: Int, _ body: (UnsafeMutablePointer<Segment>) -> Void) {
        let list = SegmentList.make(capacity: count)
        list.withUnsafeMutablePointers { header, segments in
            body(segments)
            header.pointee.count = count
        }
        self.list = list
    }

    /// An empty, unshared list with room for `capacity` segments, to be filled with `appendRetaining`.
    @usableFromInline
    init(capacity: Int) {
        list = SegmentList.make(capacity: capacity)
    }

    @inlinable
    var startIndex: Int { 0 }

    @inlinable
    var endIndex: Int { list?.segmentCount ?? 0 }

    @inlinable
    subscript(position: Int) -> Segment {
        precondition(position >= 0 && position < endIndex, "segment index out of range")
        return list.unsafelyUnwrapped.withUnsafeMutablePointerToElements { $0[position] }
    }

    /// The logical end of the last segment: the buffer's byte count.
    @inlinable
    var byteCount: Int {
        guard let list else { return 0 }
        return list.withUnsafeMutablePointers { header, segments in
            header.pointee.count == 0 ? 0 : segments[header.pointee.count &- 1].end
        }
    }

    @inlinable
    func withUnsafeBufferPointer<Result>(_ body: (UnsafeBufferPointer<Segment>) throws -> Result) rethrows -> Result {
        guard let list else { return try body(UnsafeBufferPointer(start: nil, count: 0)) }
        return try list.withUnsafeMutablePointers { header, segments in
            try body(UnsafeBufferPointer(start: segments, count: header.pointee.count))
        }
    }

    /// Whether two values share one list (or are both empty).
    @inlinable
    func isIdentical(to other: Segments) -> Bool {
        list === other.list
    }

    /// Adds `segment` to a list built by this code and not yet shared, retaining its storage.
    @usableFromInline
    mutating func appendRetaining(_ segment: Segment) {
        segment.owner._withUnsafeGuaranteedRef { $0.retainSegment() }
        list.unsafelyUnwrapped.withUnsafeMutablePointers { header, segments in
            precondition(header.pointee.count < header.pointee.capacity, "segment list overflow")
            (segments + header.pointee.count).initialize(to: segment)
            header.pointee.count += 1
        }
    }

    /// Appends `added`'s segments moved by `shift`, in place when this list is not shared and has room.
    ///
    /// Capacity grows geometrically, so N appends cost O(N) segment copies in total. When this list is not shared
    /// its segments move to the new list without touching their storages' reference counts.
    @usableFromInline
    mutating func append(_ added: Segments, shift: Int) {
        let addedCount = added.count
        let oldCount = count
        let unique = isKnownUniquelyReferenced(&list)
        if !unique || list.unsafelyUnwrapped.segmentCapacity < oldCount + addedCount {
            let capacity = Swift.max(oldCount + addedCount, 2 * oldCount, 4)
            let grown = SegmentList.make(capacity: capacity)
            list.unsafelyUnwrapped.withUnsafeMutablePointers { oldHeader, oldSegments in
                grown.withUnsafeMutablePointers { header, segments in
                    segments.initialize(from: oldSegments, count: oldCount)
                    if unique {
                        // The references move with the segments; the old list must not release them.
                        oldHeader.pointee.count = 0
                    } else {
                        for index in 0..<oldCount {
                            segments[index].owner._withUnsafeGuaranteedRef { $0.retainSegment() }
                        }
                    }
                    header.pointee.count = oldCount
                }
            }
            list = grown
        }
        added.withUnsafeBufferPointer { addedSegments in
            list.unsafelyUnwrapped.withUnsafeMutablePointers { header, segments in
                var slot = segments + oldCount
                for segment in addedSegments {
                    segment.owner._withUnsafeGuaranteedRef { $0.retainSegment() }
                    slot.initialize(to: segment.moved(toEnd: segment.end &+ shift))
                    slot += 1
                }
                header.pointee.count = oldCount + addedCount
            }
        }
    }

    /// Index of the segment containing logical offset `offset`, which must be in `0 ..< byteCount`.
    @inlinable
    func segmentIndex(containing offset: Int) -> Int {
        withUnsafeBufferPointer { segments in
            var low = 0
            var high = segments.count - 1
            while low < high {
                let middle = low &+ (high &- low) / 2
                if segments[middle].end <= offset {
                    low = middle &+ 1
                } else {
                    high = middle
                }
            }
            return low
        }
    }
}
