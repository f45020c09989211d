import DispatchData
import URing

#if canImport(Glibc)
import Glibc
#endif

/// Page-aligned read buffers of one size, reused instead of freed.
///
/// A fresh `malloc` of a large block is a fresh `mmap`: every page faults and is zeroed on first touch,
/// which costs as much as the copy from the page cache that fills it. Reused buffers are already
/// faulted in. A buffer goes back to the pool when the last `DispatchDataBuffer` region over it is
/// released, on the releasing thread; the pool keeps at most `limit` idle buffers, so memory stays
/// bounded by what is in use plus that.
final class BufferPool: @unchecked Sendable {
    let size: Int
    private let limit: Int
    private let lock = Lock()
    private var idle: [UnsafeMutableRawPointer] = []

    init(size: Int, limit: Int) {
        self.size = size
        self.limit = limit
    }

    /// The pool for read chunks of regular files and streams.
    static let shared = BufferPool(size: IOTuning.chunkSize, limit: 16)

    /// Small buffers for reads that most likely find the end of a file (see `ReadOperation.progress`).
    static let probes = BufferPool(size: 64 << 10, limit: 16)

    func take() -> UnsafeMutableRawPointer {
        if let buffer = lock.withLock({ idle.popLast() }) { return buffer }
        var pointer: UnsafeMutableRawPointer?
        let rc = posix_memalign(&pointer, 4096, size)
        // fatalError, whose message an optimised build keeps (a precondition's it drops).
        guard rc == 0, let pointer else { fatalError("out of memory allocating a \(size)-byte I/O buffer") }
        return pointer
    }

    /// The idle buffers, the next one to be taken last (for tests).
    var idleBuffers: [UnsafeMutableRawPointer] { lock.withLock { idle } }

    func give(_ buffer: UnsafeMutableRawPointer) {
        let kept = lock.withLock { () -> Bool in
            guard idle.count < limit else { return false }
            idle.append(buffer)
            return true
        }
        if !kept { free(buffer) }
    }

    /// Wraps the first `count` bytes of `buffer` as data that returns `buffer` to the pool when released.
    func data(_ buffer: UnsafeMutableRawPointer, count: Int) -> DispatchDataBuffer {
        guard count > 0 else {
            give(buffer)
            return DispatchDataBuffer()
        }
        return DispatchDataBuffer(
            bytesNoCopy: UnsafeRawBufferPointer(start: buffer, count: count),
            deallocator: .custom(nil) { [self, address = UInt(bitPattern: buffer)] in
                give(UnsafeMutableRawPointer(bitPattern: address)!)
            }
        )
    }
}

/// Keeps memory alive while the kernel uses it.
final class KeepAlive: @unchecked Sendable {
    let buffer: UnsafeMutableRawPointer?
    let data: DispatchDataBuffer?
    init(buffer: UnsafeMutableRawPointer? = nil, data: DispatchDataBuffer? = nil) {
        self.buffer = buffer
        self.data = data
    }
}

/// Sizes that trade throughput against memory; measured with the benchmarks (see the README).
enum IOTuning {
    /// Bytes asked for by one read system call (libdispatch: 1 MiB). Measured on warm 1 GiB reads (an
    /// earlier day): 512 KiB × 4 in flight 6.0 GiB/s, 256 KiB × 4 4.7, 1 MiB × 4 5.0, 128 KiB × 8 4.7. On
    /// 2026-11-24, 1 MiB × 2 against 512 KiB × 4 (the same bytes in flight, half the system calls and
    /// worker hand-offs): IOBenchmark's read 17.0–17.9 GiB/s against 12.8–15.1, random read and pipe even;
    /// `dcat 1 GiB > /dev/null` 0.87× the time.
    static let chunkSize = 1 << 20
    /// Reads in flight at once on a regular file (2 MiB with ``chunkSize``).
    static let readAheadDepth = 2
    /// Whether read-ahead asks io_uring to copy on its worker threads (see `IOEngine.read(offload:)`):
    /// measured 5.7–6.0 GiB/s against 4.1 inline, on 1 GiB warm reads with two cores.
    static let offload = true
    /// The fewest bytes a read must expect to find for it to be offloaded (see `ReadOperation.offloads`).
    static let offloadMinimum = 128 << 10
    /// A read of a regular file that comes back short (a file's end) with at most this many bytes is copied
    /// out of its pooled buffer (see `ReadOperation.deliverArrived`): a small file's bytes then hold a few
    /// pages, not a megabyte. A pipe's or socket's short read is copied when it fills at most half of its
    /// buffer, so that bytes held never hold more than twice their size in buffers.
    static let copiedChunk = 256 << 10
    /// Bytes one write system call takes at most (libdispatch: 1 MiB).
    static let writeChunk = 1 << 20
    /// At most this many regions go into one `writev`.
    static let maxIOVecs = 1024
    /// Default low water mark (B21).
    static let defaultLowWater = 1 << 20
}

/// Bytes submitted for writing to regular files and not yet written, process-wide, and the reads that
/// wait for that backlog to shrink.
///
/// The usual copy — a read handler that writes each chunk to another channel — reads a warm file far
/// faster than the page cache takes writes, and without this the difference piles up in pending writes
/// (390 MiB for a 1 GiB copy, measured). libdispatch bounds it by running one system call per device at
/// a time; here reads from regular files simply stop issuing while more than `limit` bytes wait to be
/// written to regular files. Writes to regular files make progress on their own, unless they wait behind
/// such a read on its own file (a stream channel's lane, or a barrier): a read only waits while nothing is
/// queued on its file, and wakes when something is (``wakeReads(of:)``). A write queued behind a barrier
/// counts only from its start, since the barrier's block may wait for a read of another file. Writes to
/// pipes and sockets are not counted, since they may wait on a peer forever.
final class WriteBacklog: @unchecked Sendable {
    static let shared = WriteBacklog(limit: 16 << 20)

    let limit: Int
    private let lock = Lock()
    private var bytes = 0
    private var waiting: [IOOperation] = []

    init(limit: Int) { self.limit = limit }

    func add(_ count: Int) { lock.withLock { bytes += count } }

    func remove(_ count: Int) {
        let wake = lock.withLock { () -> [IOOperation] in
            bytes -= count
            guard bytes <= limit, !waiting.isEmpty else { return [] }
            defer { waiting.removeAll() }
            return waiting
        }
        for operation in wake { operation.progress() }
    }

    /// Wakes the reads of `entry` that wait for the backlog: something was queued behind them there, which
    /// may be a write the backlog counts and which cannot start before they end.
    func wakeReads(of entry: FileEntry) {
        let wake = lock.withLock { () -> [IOOperation] in
            guard !waiting.isEmpty else { return [] }
            let woken = waiting.filter { $0.entry === entry }
            waiting.removeAll { $0.entry === entry }
            return woken
        }
        for operation in wake { operation.progress() }
    }

    /// Takes back a wait ``admit(_:)`` registered; false when a wake-up has already taken it (and will run
    /// the operation's `progress`).
    func withdraw(_ operation: IOOperation) -> Bool {
        lock.withLock {
            guard let index = waiting.firstIndex(where: { $0 === operation }) else { return false }
            waiting.remove(at: index)
            return true
        }
    }

    /// Whether a read may issue now; if not, `operation` is woken once the backlog is under the limit.
    func admit(_ operation: IOOperation) -> Bool {
        lock.withLock {
            if bytes <= limit { return true }
            if !waiting.contains(where: { $0 === operation }) { waiting.append(operation) }
            return false
        }
    }
}
