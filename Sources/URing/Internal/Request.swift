import CURing
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

extension EngineBackend {
    func submit(_ op: Op, keepAlive: consuming AnyObject?, handler: @escaping CompletionHandler) -> OperationID {
        submit(op, offload: false, keepAlive: consume keepAlive, handler: handler)
    }
}

/// Blocks `SIGPIPE` and `SIGXFSZ` in the calling engine thread. A write to a pipe or socket whose reader
/// has gone raises `SIGPIPE` in the thread that made the system call, and one past `ulimit -f` raises
/// `SIGXFSZ`; the default action of both ends the process. Blocked, the signal stays pending on that thread
/// and the write reports `EPIPE` or `EFBIG`, which the handler gets, on either engine. (io_uring's own
/// worker threads block every signal already.)
func blockWriteSignalsInThisThread() {
    var set = sigset_t()
    sigemptyset(&set)
    sigaddset(&set, SIGPIPE)
    sigaddset(&set, SIGXFSZ)
    pthread_sigmask(SIG_BLOCK, &set, nil)
}

/// What a backend needs to offer; ``IOEngine`` validates arguments and builds the ``Op``.
protocol EngineBackend: Sendable {
    /// Hands `op` to the engine; `handler` runs exactly once. The request takes `keepAlive` over, so that
    /// it holds the only reference the caller passed and lets go of it as it completes (see
    /// ``Request/complete(_:)``), not when the submitting thread returns: a submitting thread that lost its
    /// core held a written buffer past the handler, which had already started the next read.
    func submit(
        _ op: Op,
        offload: Bool,
        keepAlive: consuming AnyObject?,
        handler: @escaping CompletionHandler
    ) -> OperationID
    func shutdown()
    /// Whether ``Op/linkedCopy(_:)`` can be submitted.
    var linkedCopies: Bool { get }
    /// Whether a linked copy can leave its files open (``LinkedCopy/keepsOpen``).
    var linkedCopiesKeepOpen: Bool { get }
    /// Whether ``Op/linkedCopy(_:)`` can be submitted for a copy to a new file (`O_CREAT | O_EXCL`), which
    /// the backend then runs whole on one of its threads, leaving its files open when asked.
    var copiesWholeOnOneThread: Bool { get }
    var ownDescriptorCount: Int { get }
}

/// One operation as both backends see it. Pointers in it stay valid until the request completes:
/// the caller's through `keepAlive`, the engine's own (paths, iovecs, stat buffers) through the boxes.
enum Op {
    case nop
    /// Completes at once with this error, without a system call (bad arguments found at submission).
    case fail(Errno)
    case read(fd: CInt, buffer: UnsafeMutableRawPointer?, length: Int, offset: Int64)
    case write(fd: CInt, buffer: UnsafeMutableRawPointer?, length: Int, offset: Int64)
    case vector(IOVector, fd: CInt, offset: Int64, isWrite: Bool)
    /// With `how`, `openat2(2)`: the open refuses magic links.
    case openat(dirfd: CInt, path: CPath, flags: CInt, mode: mode_t, how: OpenHow? = nil)
    case close(fd: CInt)
    case statx(dirfd: CInt, path: CPath, flags: CInt, box: StatxBox)
    case fsync(fd: CInt, dataOnly: Bool)
    case pollAdd(fd: CInt, events: UInt32)
    case pollRemove(target: UInt64)
    case timeout(deadline: BootTime)
    case timeoutRemove(target: UInt64)
    case cancel(target: UInt64)
    /// A whole small file copied by one chain of linked requests (``URingBackend`` with registered files),
    /// or by one pool thread's system calls (``POSIXBackend``, to a new file); ``IOEngine`` runs the steps
    /// separately elsewhere. Its outcome is left in the ``LinkedCopy``.
    case linkedCopy(LinkedCopy)

    /// The descriptor a read or write goes to, for the ones that may have to wait for readiness.
    var transferDescriptor: CInt? {
        switch self {
        case .read(let fd, _, _, _), .write(let fd, _, _, _), .vector(_, let fd, _, _): return fd
        default: return nil
        }
    }
}

/// What to do after one kernel result for a request.
enum Step {
    case complete(IOCompletion)
    /// Issue the (updated) operation again: EINTR, the rest of a short write, the next piece of a split.
    case again
    /// The descriptor is non-blocking and not ready: wait for these `poll` events, then issue it again.
    case awaitReadiness(UInt32)
}

/// One submitted operation and its progress. Owned by one engine thread at a time.
final class Request: @unchecked Sendable {
    let id: UInt64
    var op: Op
    let handler: CompletionHandler
    /// Keeps the caller's memory alive until the kernel is done with it; let go by ``complete(_:)``.
    private var keepAlive: AnyObject?
    /// Bytes transferred so far, for split reads and resubmitted writes.
    var progress = 0
    /// Set while the request waits for readiness after `EAGAIN` (the poll events it waits for).
    var readinessEvents: UInt32 = 0
    // Used by the POSIX engine only: how this descriptor is transferred, and whether the reactor just
    // found it ready.
    var transferMode: UInt8 = 0
    var readyHint = false
    /// A cancel came while the request was where the kernel's (or the POSIX engine's) cancel cannot reach
    /// it: in a system call, between two steps, or not yet handed to the kernel. It ends at its next step.
    var cancelRequested = false
    /// An open that was cancelled, or the engine shut down, while it waited in its system call: it has
    /// completed with ECANCELED, and the descriptor the call may still return is closed unseen.
    var abandoned = false

    /// Asks io_uring to run the operation on its worker threads (`IOSQE_ASYNC`).
    let offload: Bool

    init(
        id: UInt64,
        op: Op,
        offload: Bool = false,
        keepAlive: consuming AnyObject?,
        handler: @escaping CompletionHandler
    ) {
        self.id = id
        self.op = op
        self.offload = offload
        self.keepAlive = consume keepAlive
        self.handler = handler
    }

    /// Ends the request: lets go of the caller's memory, which the kernel is done with, and then calls the
    /// handler. A handler often starts the next piece of work on another thread (a write's completes and
    /// the next read takes a buffer), and this thread keeps the request until the handler returns: a
    /// written buffer kept that long was alive beside the next read's. dcat, whose write handlers start its
    /// next reads, held up to 12 pooled megabytes on the POSIX engine and 8 on io_uring, where its windows
    /// account for 6.
    func complete(_ completion: IOCompletion) {
        keepAlive = nil
        handler(completion)
    }

    /// The piece of a read or write to issue now: it starts `progress` bytes in, and is at most
    /// ``IOEngine/maximumTransfer`` long.
    func currentTransfer() -> (buffer: UnsafeMutableRawPointer?, length: Int, offset: Int64) {
        switch op {
        case .read(_, let buffer, let length, let offset), .write(_, let buffer, let length, let offset):
            let rest = length - progress
            return (
                buffer.map { $0 + progress },
                min(rest, IOEngine.maximumTransfer),
                offset < 0 ? -1 : offset + Int64(progress)
            )
        case .vector(_, _, let offset, _):
            return (nil, 0, offset < 0 ? -1 : offset + Int64(progress))
        default:
            return (nil, 0, -1)
        }
    }

    /// Decides what follows a kernel result `res` (a count, or a negated errno) for this request.
    func step(after res: Int) -> Step {
        switch op {
        case .read(_, _, let length, _):
            if res == -Int(EINTR) { return .again }
            if res == -Int(EAGAIN) { return .awaitReadiness(UInt32(POLLIN)) }
            if res < 0 { return .complete(IOCompletion(result: progress, error: Errno(rawValue: CInt(-res)))) }
            let asked = currentTransfer().length
            progress += res
            // Only a read that was split goes on, and only while each piece came back full.
            if res == asked && res > 0 && progress < length { return .again }
            return .complete(IOCompletion(result: progress))
        case .write(_, _, let length, _):
            if res == -Int(EINTR) { return .again }
            if res == -Int(EAGAIN) { return .awaitReadiness(UInt32(POLLOUT)) }
            if res < 0 { return .complete(IOCompletion(result: progress, error: Errno(rawValue: CInt(-res)))) }
            progress += res
            if progress >= length { return .complete(IOCompletion(result: progress)) }
            // A write that makes no progress would spin forever; the kernel only does this on odd devices.
            if res == 0 { return .complete(IOCompletion(result: progress, error: .ioError)) }
            return .again
        case .vector(let vector, _, _, let isWrite):
            if res == -Int(EINTR) { return .again }
            if res == -Int(EAGAIN) { return .awaitReadiness(UInt32(isWrite ? POLLOUT : POLLIN)) }
            if res < 0 { return .complete(IOCompletion(result: progress, error: Errno(rawValue: CInt(-res)))) }
            progress += res
            guard isWrite else { return .complete(IOCompletion(result: progress)) }
            vector.consume(res)
            if vector.isEmpty || (vector.completesShort && res > 0) { return .complete(IOCompletion(result: progress)) }
            if res == 0 { return .complete(IOCompletion(result: progress, error: .ioError)) }
            return .again
        case .close:
            // Linux closes the descriptor even when close reports EINTR: retrying could close a reused number.
            if res == -Int(EINTR) || res >= 0 { return .complete(IOCompletion(result: 0)) }
            return .complete(IOCompletion(result: 0, error: Errno(rawValue: CInt(-res))))
        case .timeout:
            // The kernel reports an expired timeout as -ETIME: that is this operation's success.
            if res == -Int(ETIME) || res >= 0 { return .complete(IOCompletion(result: 0)) }
            return .complete(IOCompletion(result: 0, error: Errno(rawValue: CInt(-res))))
        case .fsync, .openat, .statx:
            if res == -Int(EINTR) { return .again }
            if res < 0 { return .complete(IOCompletion(result: 0, error: Errno(rawValue: CInt(-res)))) }
            return .complete(IOCompletion(result: res))
        case .fail(let error):
            return .complete(IOCompletion(result: 0, error: error))
        case .nop, .linkedCopy, .pollAdd, .pollRemove, .timeoutRemove, .cancel:
            if res < 0 { return .complete(IOCompletion(result: 0, error: Errno(rawValue: CInt(-res)))) }
            return .complete(IOCompletion(result: res))
        }
    }
}

/// A NUL-terminated copy of a path, alive as long as the request that uses it. The bytes follow their
/// storage object's header in one allocation: a `strdup` beside the object was a second `malloc` and
/// `free` for every path, three for each small file `dcopy -r` copies. (A struct: `ManagedBuffer` cannot
/// be `Sendable`; nothing changes the bytes once made.)
package struct CPath: @unchecked Sendable {
    private let storage: ManagedBuffer<Int, CChar>

    /// A copy of `path`'s bytes.
    package init(_ path: FilePath) {
        self = path.withPlatformString { CPath(UnsafeBufferPointer(start: $0, count: strlen($0))) }
    }

    /// A copy of `bytes`, which hold no NUL (one is added after them).
    package init(_ bytes: UnsafeBufferPointer<CChar>) {
        storage = .create(minimumCapacity: bytes.count + 1) { _ in bytes.count }
        storage.withUnsafeMutablePointerToElements { elements in
            if let base = bytes.baseAddress { elements.initialize(from: base, count: bytes.count) }
            (elements + bytes.count).initialize(to: 0)
        }
    }

    /// The number of bytes before the NUL.
    var count: Int { storage.header }

    /// The bytes, NUL-terminated; valid while a copy of this value is alive (the request's).
    var pointer: UnsafeMutablePointer<CChar> { storage.withUnsafeMutablePointerToElements { $0 } }
}

/// The arguments and the progress of ``IOEngine/copyFile(from:in:to:in:flags:permissions:length:then:)``.
final class LinkedCopy: @unchecked Sendable {
    let source: CPath
    let sourceDirectory: CInt
    let destination: CPath
    let destinationDirectory: CInt
    let flags: CInt
    let mode: mode_t
    let length: Int
    /// Both files are left open on ordinary descriptors for the caller (`-p` needs them for `fchown`,
    /// `fchmod`, `futimens` and the ACL), instead of closed.
    let keepsOpen: Bool

    // Touched by the ring thread only, until the handler reads `outcome`.
    /// The ordinary descriptors the chain installed (`keepsOpen`): a descriptor or `-errno`, and whether
    /// each has come.
    var installedSource: Int32 = 0
    var installedDestination: Int32 = 0
    var installsDone = 0
    /// The lane of registered-descriptor slots the copy runs in.
    var lane: UInt32 = 0
    /// The probe's buffer (see ``probeOffset``), and whether its completion and the last close's have come.
    let probe = UnsafeMutablePointer<UInt8>.allocate(capacity: 2)
    var probeResult: Int32 = 0
    var probeDone = false
    var closeResult: Int32 = 0
    var closeDone = false
    var outcome = FileCopyOutcome.copied

    init(
        source: CPath,
        sourceDirectory: CInt,
        destination: CPath,
        destinationDirectory: CInt,
        flags: CInt,
        mode: mode_t,
        length: Int,
        keepsOpen: Bool = false
    ) {
        self.keepsOpen = keepsOpen
        self.source = source
        self.sourceDirectory = sourceDirectory
        self.destination = destination
        self.destinationDirectory = destinationDirectory
        self.flags = flags
        self.mode = mode
        self.length = length
    }

    deinit { probe.deallocate() }

    /// The most bytes a copy moves at once through a buffer of this process, where it cannot splice
    /// (separate operations, or the POSIX engine's pool thread): cp's buffer size.
    static let pieceSize = 128 << 10

    /// Where the probe reads, after the bytes are moved: the last byte expected and the one after it, so
    /// that a source that grew gives 2 bytes and one that shrank gives none (an empty file's probe reads one
    /// byte at 0). A shrunk source was not noticed: a truncation zeroes the rest of the last page in the
    /// page cache, pages the pipe held by reference, and the copy kept the old size with zeros where the
    /// file ended (helper-43: 9 of 330 runs on tmpfs, cp 0 of 500).
    var probeOffset: UInt64 { UInt64(max(length - 1, 0)) }
    /// Bytes the probe asks for.
    var probeLength: UInt32 { length > 0 ? 2 : 1 }
    /// What the probe finds when the source holds exactly ``length`` bytes.
    var probeExpects: Int32 { length > 0 ? 1 : 0 }
}

/// An `iovec` array the engine owns, which a short write advances in place.
final class IOVector: @unchecked Sendable {
    let base: UnsafeMutablePointer<iovec>
    /// Index of the first element not yet fully transferred.
    private(set) var start = 0
    /// A short write completes the request with what it wrote, instead of going on with the rest.
    let completesShort: Bool

    init(_ buffers: [UnsafeRawBufferPointer], completesShort: Bool = false) {
        self.completesShort = completesShort
        base = .allocate(capacity: max(buffers.count, 1))
        for (index, buffer) in buffers.enumerated() {
            (base + index).initialize(
                to: iovec(iov_base: UnsafeMutableRawPointer(mutating: buffer.baseAddress), iov_len: buffer.count)
            )
        }
        count = buffers.count
    }

    private var count: Int

    deinit { base.deallocate() }

    /// The elements still to transfer.
    var remaining: (pointer: UnsafeMutablePointer<iovec>, count: Int) { (base + start, count - start) }

    var isEmpty: Bool { start >= count }

    /// Drops the first `bytes` bytes, after a short transfer.
    func consume(_ bytes: Int) {
        var bytes = bytes
        while start < count && bytes > 0 {
            let length = base[start].iov_len
            if bytes >= length {
                bytes -= length
                start += 1
            } else {
                base[start].iov_base = base[start].iov_base.map { $0 + bytes }
                base[start].iov_len = length - bytes
                bytes = 0
            }
        }
        // Elements of length 0 count as done: a writev whose rest is all empty is complete.
        while start < count && base[start].iov_len == 0 { start += 1 }
    }
}

/// The `struct open_how` of an `openat2(2)` that refuses magic links (`RESOLVE_NO_MAGICLINKS`): the kernel
/// reads it when the request is submitted.
final class OpenHow: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<open_how>

    init(flags: CInt, mode: mode_t) {
        // openat2 refuses a mode (EINVAL) unless the open may make a file: O_CREAT, or O_TMPFILE's own bit.
        let makes = flags & (O_CREAT | 0o20_000_000) != 0
        pointer = .allocate(capacity: 1)
        pointer.initialize(
            to: open_how(
                flags: UInt64(UInt32(bitPattern: flags)),
                mode: makes ? UInt64(mode) : 0,
                resolve: UInt64(RESOLVE_NO_MAGICLINKS)
            )
        )
    }

    deinit { pointer.deallocate() }
}

/// The `struct statx` a stat request fills in, after its storage object's header in one allocation.
struct StatxBox: @unchecked Sendable {
    private let storage: ManagedBuffer<Void, statx>

    init() {
        storage = .create(minimumCapacity: 1) { _ in }
        storage.withUnsafeMutablePointerToElements { $0.initialize(to: statx()) }
    }

    /// Valid while a copy of this value is alive (the request's, and its handler's).
    var pointer: UnsafeMutablePointer<statx> { storage.withUnsafeMutablePointerToElements { $0 } }

    static let mask = UInt32(STATX_BASIC_STATS)

    var status: FileStatus {
        let s = pointer.pointee
        func time(_ t: statx_timestamp) -> timespec { timespec(tv_sec: Int(t.tv_sec), tv_nsec: Int(t.tv_nsec)) }
        return FileStatus(
            size: Int64(s.stx_size),
            mode: UInt32(s.stx_mode),
            uid: s.stx_uid,
            gid: s.stx_gid,
            linkCount: s.stx_nlink,
            inode: s.stx_ino,
            deviceMajor: s.stx_dev_major,
            deviceMinor: s.stx_dev_minor,
            blockSize: s.stx_blksize,
            blocks: s.stx_blocks,
            accessTime: time(s.stx_atime),
            modificationTime: time(s.stx_mtime),
            changeTime: time(s.stx_ctime)
        )
    }
}

/// An absolute time on `CLOCK_BOOTTIME`, the clock of `ContinuousClock` on Linux, in a stable allocation
/// the kernel can read.
final class BootTime: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<__kernel_timespec>

    /// The latest deadline kept, in seconds since boot (about 292 years): its nanoseconds still fit an
    /// `Int64`, and the kernel's timers stop there too (`KTIME_SEC_MAX`). A deadline past it never comes,
    /// as an overflowing time means forever for libdispatch (C23): `.now + .seconds(Int64.max)` used to
    /// trap in the sum below, and a deadline past 292 years wrapped negative and fired at once on the POSIX
    /// engine.
    static let latestSecond = Int64.max / 1_000_000_000

    /// Converts `deadline`. The boot-time clock is read after the continuous one, so the converted
    /// deadline is never earlier than the one asked for.
    init(_ deadline: ContinuousClock.Instant) {
        let remaining = deadline - ContinuousClock.now
        var now = timespec()
        clock_gettime(CLOCK_BOOTTIME, &now)
        pointer = .allocate(capacity: 1)
        guard remaining < .seconds(Self.latestSecond - Int64(now.tv_sec) - 1) else {
            pointer.initialize(to: __kernel_timespec(tv_sec: Self.latestSecond, tv_nsec: 0))
            return
        }
        // A deadline past is due now; one more than `Int64.max` seconds past trapped in `components`.
        guard remaining > .zero else {
            pointer.initialize(to: __kernel_timespec(tv_sec: 0, tv_nsec: 0))
            return
        }
        // Both parts are positive here, and less than a second each is at most two seconds' worth.
        let (seconds, attoseconds) = remaining.components
        var sec = Int64(now.tv_sec) + seconds
        // Round partial nanoseconds up, so that rounding never makes a deadline early.
        var nsec = Int64(now.tv_nsec) + attoseconds / 1_000_000_000 + (attoseconds % 1_000_000_000 > 0 ? 1 : 0)
        if nsec >= 1_000_000_000 {
            nsec -= 1_000_000_000
            sec += 1
        }
        pointer.initialize(to: __kernel_timespec(tv_sec: sec, tv_nsec: nsec))
    }

    deinit { pointer.deallocate() }

    /// Nanoseconds since boot.
    var nanoseconds: Int64 { pointer.pointee.tv_sec &* 1_000_000_000 &+ pointer.pointee.tv_nsec }

    static func now() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_BOOTTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }
}
