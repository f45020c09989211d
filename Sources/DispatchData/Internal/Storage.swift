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
@usableFromInline
struct Segment: @unchecked Sendable {
    @usableFromInline var owner: Storage
    @usableFromInline let base: UnsafeRawPointer
    @usableFromInline let count: Int
    @usableFromInline let end: Int

    @inlinable
    init(owner: Storage, base: UnsafeRawPointer, count: Int, end: Int) {
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

extension ContiguousArray where Element == Segment {
    /// Index of the segment containing logical offset `offset`, which must be in `0 ..< total count`.
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
