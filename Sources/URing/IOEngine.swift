import Synchronization
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Which implementation of the engine runs the operations.
package enum EngineKind: String, Sendable, CaseIterable, CustomStringConvertible {
    /// One io_uring owned by one ring thread.
    case uring
    /// Blocking calls on a small thread pool, epoll for readiness and a timerfd for timeouts; used where
    /// io_uring is unavailable (seccomp profiles of container runtimes, `kernel.io_uring_disabled`).
    case posix

    package var description: String { rawValue }
}

/// Names one submitted operation, so that it can be cancelled (``IOEngine/cancel(_:then:)``), or its poll
/// or timeout removed.
package struct OperationID: Hashable, Sendable, CustomStringConvertible {
    package let rawValue: UInt64
    package var description: String { "op#\(rawValue)" }
}

/// The outcome of one operation.
///
/// `result` is what the operation produced when it succeeded or made progress: bytes transferred for
/// reads and writes (also when `error` is set after partial progress), the new descriptor for
/// `openat`, the returned event mask for `poll`, and 0 otherwise.
package struct IOCompletion: Sendable, Equatable, CustomStringConvertible {
    package var result: Int
    package var error: Errno?

    package init(result: Int, error: Errno? = nil) {
        self.result = result
        self.error = error
    }

    package var description: String {
        if let error { return "IOCompletion(result: \(result), error: \(error))" }
        return "IOCompletion(result: \(result))"
    }
}

/// Receives the outcome of one operation, exactly once.
///
/// It runs on an engine thread (the ring thread, or a POSIX engine thread), so it must be short and must
/// never block: the layers above use it to hand the result to a `WorkQueue`. It may submit further
/// operations; on the ring thread those join the next batch without a wake-up.
package typealias CompletionHandler = @Sendable (IOCompletion) -> Void

/// The status of a file as `statx(2)` reports it.
package struct FileStatus: Sendable, Equatable {
    package var size: Int64
    /// File type and permission bits, as `st_mode`.
    package var mode: UInt32
    package var uid: UInt32
    package var gid: UInt32
    package var linkCount: UInt32
    package var inode: UInt64
    package var deviceMajor: UInt32
    package var deviceMinor: UInt32
    package var blockSize: UInt32
    package var blocks: UInt64
    package var accessTime: timespec
    package var modificationTime: timespec
    package var changeTime: timespec

    package var isDirectory: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFDIR) }
    package var isRegularFile: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFREG) }
    package var isSymbolicLink: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFLNK) }
    /// Whether `other` is this file (the same device and inode), whatever names led to the two.
    package func isSameFile(as other: FileStatus) -> Bool {
        inode == other.inode && deviceMajor == other.deviceMajor && deviceMinor == other.deviceMinor
    }

    package static func == (a: FileStatus, b: FileStatus) -> Bool {
        a.size == b.size && a.mode == b.mode && a.uid == b.uid && a.gid == b.gid && a.linkCount == b.linkCount
            && a.inode == b.inode && a.deviceMajor == b.deviceMajor && a.deviceMinor == b.deviceMinor
            && a.modificationTime.tv_sec == b.modificationTime.tv_sec
            && a.modificationTime.tv_nsec == b.modificationTime.tv_nsec
    }
}

extension FileStatus {
    /// The status `stat(2)` gave, for a caller that has it already and need not ask the ring again.
    package init(_ info: stat) {
        // glibc's gnu_dev_major and gnu_dev_minor, which Swift cannot import (they are macros).
        let device = UInt64(info.st_dev)
        self.init(
            size: Int64(info.st_size),
            mode: UInt32(info.st_mode),
            uid: info.st_uid,
            gid: info.st_gid,
            linkCount: UInt32(truncatingIfNeeded: info.st_nlink),
            inode: UInt64(info.st_ino),
            deviceMajor: UInt32(truncatingIfNeeded: ((device >> 8) & 0xfff) | ((device >> 32) & ~0xfff)),
            deviceMinor: UInt32(truncatingIfNeeded: (device & 0xff) | ((device >> 12) & ~0xff)),
            blockSize: UInt32(truncatingIfNeeded: info.st_blksize),
            blocks: UInt64(info.st_blocks),
            accessTime: info.st_atim,
            modificationTime: info.st_mtim,
            changeTime: info.st_ctim
        )
    }
}

/// Readiness conditions for ``IOEngine/poll(_:events:then:)``, as `poll(2)` spells them.
package struct PollEvents: OptionSet, Sendable, Hashable {
    package let rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    package static let readable = PollEvents(rawValue: UInt32(POLLIN))  // POLLIN
    package static let writable = PollEvents(rawValue: UInt32(POLLOUT))  // POLLOUT
    package static let priority = PollEvents(rawValue: UInt32(POLLPRI))  // POLLPRI
    package static let error = PollEvents(rawValue: UInt32(POLLERR))  // POLLERR
    package static let hangup = PollEvents(rawValue: UInt32(POLLHUP))  // POLLHUP
    package static let readHangup = PollEvents(rawValue: 0x2000)  // POLLRDHUP
    package static let invalid = PollEvents(rawValue: UInt32(POLLNVAL))  // POLLNVAL
}

/// An engine: the one place where this package waits on the kernel.
///
/// Every operation is submitted from any thread, runs asynchronously, and reports to its
/// ``CompletionHandler`` exactly once, on an engine thread. The two kinds behave alike:
///
/// - Reads return what one transfer gave (a short read is data, not an error; 0 is end of file), except
///   that a read longer than ``maximumTransfer`` is split into transfers of at most that size, the next
///   one issued only while the previous one came back full.
/// - Writes are complete or report an error: short writes are resubmitted for the rest; the result says
///   how many bytes were written before any error.
/// - `EINTR` is retried. `EAGAIN` from a non-blocking descriptor waits for readiness and retries. A full
///   submission queue and a full completion queue (`EBUSY`) are back-pressure inside the engine; none
///   of these reach a handler.
/// - An offset is `nil` for "at the file's current position" (the descriptor's offset advances), or
///   a non-negative position; a negative one completes with `EINVAL`. A descriptor that cannot seek (a
///   pipe, a socket, a file opened as a stream such as `trace_pipe`) transfers at its position whatever
///   the offset.
/// - After ``shutdown()``, operations still pending complete with `ECANCELED`, and new submissions
///   complete with `ESHUTDOWN` on the submitting thread, before `submit` returns.
package final class IOEngine: Sendable {
    /// `AT_EMPTY_PATH`, for ``stat(_:path:flags:then:)`` of the descriptor itself (Glibc hides it behind
    /// `_GNU_SOURCE`).
    package static let emptyPathFlag: CInt = 0x1000

    /// The largest transfer one read or write system call is asked for; larger requests are split.
    /// (The kernel caps one transfer at `MAX_RW_COUNT`, just under 2 GiB, and an SQE length at 32 bits.)
    package static let maximumTransfer = 1 << 30

    /// Which implementation this engine is.
    package let kind: EngineKind
    let backend: any EngineBackend
    private let readsCounted = Atomic<Int>(0)

    /// How many reads (``read(_:into:at:offload:keepAlive:then:)`` and `readv` calls) this engine has been
    /// asked for: what tests count when they check that a file is read in as few calls as it should be.
    package var readsRequested: Int { readsCounted.load(ordering: .relaxed) }

    /// Creates an engine of the given kind, with its own threads and descriptors.
    ///
    /// - Throws: the reason, when `kind` is `.uring` and io_uring cannot be used here.
    package init(kind: EngineKind) throws(EngineUnavailable) {
        self.kind = kind
        switch kind {
        case .uring: backend = try URingBackend()
        case .posix: backend = POSIXBackend()
        }
    }

    /// A POSIX engine that behaves as one without a descriptor to spare: it never has a reactor, so
    /// readiness waits are its pool threads' own, in `poll`, and timeouts are kept by its descriptor-free
    /// timer thread. For tests.
    package init(posixWithoutReactor: Void) {
        kind = .posix
        backend = POSIXBackend(reactorAllowed: false)
    }

    /// The process-wide engine every module uses, created on first use.
    ///
    /// `DISPATCH_ENGINE=uring` or `=posix` forces a kind. Otherwise io_uring is used when the probe finds
    /// it usable, and the POSIX engine otherwise; ``selection`` records which one and why.
    package static var shared: IOEngine { EngineSelection.shared.engine }

    /// Which engine ``shared`` is, and why it was chosen.
    package static var selection: EngineSelection { EngineSelection.shared }

    /// Stops the engine's threads after completing every pending operation with `ECANCELED`, and closes
    /// the engine's own descriptors. Idempotent. Do not call it on ``shared``.
    package func shutdown() { backend.shutdown() }

    /// The number of descriptors the engine itself holds open: on io_uring the ring's before Linux 6.3 and
    /// an eventfd before 6.8, none after; on the POSIX engine epoll, eventfd and timerfd once something
    /// has waited (none before, and none under a descriptor limit below 64). 0 after ``shutdown()``. Waits for a new io_uring engine's thread to start: it
    /// closes the ring's descriptor.
    package var ownDescriptorCount: Int { backend.ownDescriptorCount }

    // MARK: - Operations

    /// Completes with result 0 after one trip through the engine.
    @discardableResult
    package func nop(then handler: @escaping CompletionHandler) -> OperationID {
        backend.submit(.nop, keepAlive: nil, handler: handler)
    }

    /// Reads into `buffer`, which must stay valid until the handler is called, whatever happens to the
    /// caller. The engine takes `keepAlive` over for that long, and once the kernel is done with the read it
    /// lets go of it just before it calls the handler (as for every request here; a request refused before
    /// it reaches the kernel, for an invalid offset or an engine shut down, lets go of it after).
    ///
    /// - Parameter offload: run the read on the kernel's worker threads (`IOSQE_ASYNC`) instead of inline
    ///   on the ring thread. A read from the page cache is a memory copy; offloaded, several copies run on
    ///   several cores at once, which is what several reads in flight on a regular file want. Ignored by
    ///   the POSIX engine, whose calls already run on a pool.
    @discardableResult
    package func read(
        _ fd: CInt,
        into buffer: UnsafeMutableRawBufferPointer,
        at offset: Int64?,
        offload: Bool = false,
        keepAlive: consuming (any AnyObject & Sendable)? = nil,
        then handler: @escaping CompletionHandler
    ) -> OperationID {
        guard let offset = Self.validOffset(offset) else {
            return backend.submit(.fail(.invalidArgument), keepAlive: nil, handler: handler)
        }
        readsCounted.add(1, ordering: .relaxed)
        return backend.submit(
            .read(fd: fd, buffer: buffer.baseAddress, length: buffer.count, offset: offset),
            offload: offload,
            keepAlive: consume keepAlive,
            handler: handler
        )
    }

    /// Writes all of `buffer`, resubmitting short writes; the result is the number of bytes written.
    /// `offload` is as for ``read(_:into:at:offload:keepAlive:then:)``.
    @discardableResult
    package func write(
        _ fd: CInt,
        from buffer: UnsafeRawBufferPointer,
        at offset: Int64?,
        offload: Bool = false,
        keepAlive: consuming (any AnyObject & Sendable)? = nil,
        then handler: @escaping CompletionHandler
    ) -> OperationID {
        guard let offset = Self.validOffset(offset) else {
            return backend.submit(.fail(.invalidArgument), keepAlive: nil, handler: handler)
        }
        return backend.submit(
            .write(
                fd: fd,
                buffer: UnsafeMutableRawPointer(mutating: buffer.baseAddress),
                length: buffer.count,
                offset: offset
            ),
            offload: offload,
            keepAlive: consume keepAlive,
            handler: handler
        )
    }

    /// Reads into several buffers in order with one system call (`readv(2)`); a short read is returned
    /// as it is.
    @discardableResult
    package func readv(
        _ fd: CInt,
        into buffers: [UnsafeMutableRawBufferPointer],
        at offset: Int64?,
        offload: Bool = false,
        keepAlive: consuming (any AnyObject & Sendable)? = nil,
        then handler: @escaping CompletionHandler
    ) -> OperationID {
        guard let offset = Self.validOffset(offset) else {
            return backend.submit(.fail(.invalidArgument), keepAlive: nil, handler: handler)
        }
        readsCounted.add(1, ordering: .relaxed)
        return backend.submit(
            .vector(IOVector(buffers.map { UnsafeRawBufferPointer($0) }), fd: fd, offset: offset, isWrite: false),
            offload: offload,
            keepAlive: consume keepAlive,
            handler: handler
        )
    }

    /// Writes several buffers in order (`writev(2)`), resubmitting the rest after a short write; the
    /// result is the number of bytes written.
    ///
    /// With `completesShort`, a short write completes the operation instead, with the bytes it wrote (at
    /// least one), for a caller that reports progress as a pipe or socket drains and writes the rest
    /// itself; a descriptor not ready is still waited for.
    @discardableResult
    package func writev(
        _ fd: CInt,
        from buffers: [UnsafeRawBufferPointer],
        at offset: Int64?,
        completesShort: Bool = false,
        offload: Bool = false,
        keepAlive: consuming (any AnyObject & Sendable)? = nil,
        then handler: @escaping CompletionHandler
    ) -> OperationID {
        guard let offset = Self.validOffset(offset) else {
            return backend.submit(.fail(.invalidArgument), keepAlive: nil, handler: handler)
        }
        return backend.submit(
            .vector(IOVector(buffers, completesShort: completesShort), fd: fd, offset: offset, isWrite: true),
            offload: offload,
            keepAlive: consume keepAlive,
            handler: handler
        )
    }

    /// Opens `path` relative to `directory` (`AT_FDCWD` for the working directory) with `openat(2)`; the
    /// result is the new descriptor. `O_CLOEXEC` is always added.
    ///
    /// Without `O_NONBLOCK` in `flags` the open waits as `openat(2)` waits: a FIFO's reader for a writer,
    /// its writer for a reader. io_uring first tries an open inline with `O_NONBLOCK` added, which opens a
    /// FIFO for reading at once with no writer (and for writing fails with `ENXIO`), so such opens go
    /// straight to the kernel's workers (`IOSQE_ASYNC`), as one with `O_CREAT` or `O_TRUNC` always does.
    /// A cancel, or ``shutdown()``, ends a waiting open with `ECANCELED`: io_uring interrupts its worker;
    /// the POSIX engine cannot interrupt the call, so it gives the thread up (and replaces it), and that
    /// thread closes the descriptor if the open ever returns one. (It does so for any open in its system
    /// call when the cancel comes, a quick one too, which then reports ECANCELED although an `O_CREAT` may
    /// have made the file; io_uring lets such an open finish, and its cancel reports `EALREADY`.)
    ///
    /// With `refusingMagicLinks` the open is `openat2(2)`'s with `RESOLVE_NO_MAGICLINKS`: a path that meets
    /// one (`/proc/self/fd/3`, `/dev/stdin`) fails with `ELOOP`, and `ENOSYS` before Linux 5.6.
    @discardableResult
    package func openat(
        _ directory: CInt = AT_FDCWD,
        path: FilePath,
        flags: CInt,
        permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead],
        refusingMagicLinks: Bool = false,
        then handler: @escaping CompletionHandler
    ) -> OperationID {
        openat(
            directory,
            path: CPath(path),
            flags: flags,
            permissions: permissions,
            refusingMagicLinks: refusingMagicLinks,
            then: handler
        )
    }

    /// ``openat(_:path:flags:permissions:refusingMagicLinks:then:)`` of a path already copied for the kernel,
    /// which one caller can share between its requests (`dcopy -r` names a file by one name in both
    /// directories, and in its `statx`).
    @discardableResult
    package func openat(
        _ directory: CInt = AT_FDCWD,
        path: CPath,
        flags: CInt,
        permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead],
        refusingMagicLinks: Bool = false,
        then handler: @escaping CompletionHandler
    ) -> OperationID {
        let how = refusingMagicLinks ? OpenHow(flags: flags | O_CLOEXEC, mode: permissions.rawValue) : nil
        return backend.submit(
            .openat(
                dirfd: directory,
                path: path,
                flags: flags | O_CLOEXEC,
                mode: permissions.rawValue,
                how: how
            ),
            offload: flags & O_NONBLOCK == 0,
            keepAlive: nil,
            handler: handler
        )
    }

    /// Closes `fd`.
    @discardableResult
    package func close(_ fd: CInt, then handler: @escaping CompletionHandler) -> OperationID {
        backend.submit(.close(fd: fd), keepAlive: nil, handler: handler)
    }

    /// Reads the status of `path` relative to `directory` with `statx(2)`. `flags` are `AT_*` flags
    /// (`AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH` with an empty path to stat `directory` itself).
    @discardableResult
    package func stat(
        _ directory: CInt = AT_FDCWD,
        path: FilePath,
        flags: CInt = 0,
        then handler: @escaping @Sendable (Result<FileStatus, Errno>) -> Void
    ) -> OperationID {
        stat(directory, path: CPath(path), flags: flags, then: handler)
    }

    /// ``stat(_:path:flags:then:)`` of a path already copied for the kernel, which one caller can share
    /// between its requests (`dcopy -r` names each file by one name in both directories).
    @discardableResult
    package func stat(
        _ directory: CInt = AT_FDCWD,
        path: CPath,
        flags: CInt = 0,
        then handler: @escaping @Sendable (Result<FileStatus, Errno>) -> Void
    ) -> OperationID {
        let box = StatxBox()
        return backend.submit(
            .statx(dirfd: directory, path: path, flags: flags, box: box),
            keepAlive: nil
        ) { completion in
            if let error = completion.error {
                handler(.failure(error))
            } else {
                handler(.success(box.status))
            }
        }
    }

    /// Flushes `fd` to storage (`fsync(2)`, or `fdatasync(2)` when `dataOnly`).
    @discardableResult
    package func fsync(_ fd: CInt, dataOnly: Bool = false, then handler: @escaping CompletionHandler) -> OperationID {
        backend.submit(.fsync(fd: fd, dataOnly: dataOnly), keepAlive: nil, handler: handler)
    }

    /// Completes once `fd` is ready for any of `events` (one shot); the result is the ready mask, which can
    /// include ``PollEvents/error``, ``PollEvents/hangup`` and ``PollEvents/invalid``.
    @discardableResult
    package func poll(_ fd: CInt, events: PollEvents, then handler: @escaping CompletionHandler) -> OperationID {
        backend.submit(.pollAdd(fd: fd, events: events.rawValue), keepAlive: nil, handler: handler)
    }

    /// Removes a pending ``poll(_:events:then:)``, which then completes with `ECANCELED`. This operation
    /// completes with 0, or `ENOENT` when the poll had already completed.
    @discardableResult
    package func removePoll(_ target: OperationID, then handler: @escaping CompletionHandler) -> OperationID {
        backend.submit(.pollRemove(target: target.rawValue), keepAlive: nil, handler: handler)
    }

    /// Completes with result 0 no earlier than `deadline`, or with `ECANCELED` if removed first.
    @discardableResult
    package func timeout(
        deadline: ContinuousClock.Instant,
        then handler: @escaping CompletionHandler
    ) -> OperationID {
        backend.submit(.timeout(deadline: BootTime(deadline)), keepAlive: nil, handler: handler)
    }

    /// Removes a pending ``timeout(deadline:then:)``, which then completes with `ECANCELED`. This operation
    /// completes with 0, or `ENOENT` when the timeout had already fired.
    @discardableResult
    package func removeTimeout(_ target: OperationID, then handler: @escaping CompletionHandler) -> OperationID {
        backend.submit(.timeoutRemove(target: target.rawValue), keepAlive: nil, handler: handler)
    }

    /// Cancels a pending operation, which then completes with `ECANCELED` (or with its own result, if it
    /// finished first). This operation completes with 0 when it found the target waiting, `ENOENT` when it
    /// did not find it, `EALREADY` when the target was inside a system call: it then completes with its
    /// own result, or with `ECANCELED` if it would otherwise go on to wait.
    @discardableResult
    package func cancel(_ target: OperationID, then handler: @escaping CompletionHandler) -> OperationID {
        backend.submit(.cancel(target: target.rawValue), keepAlive: nil, handler: handler)
    }

    // MARK: Whole small files

    /// The largest file ``copyFile(from:in:to:in:flags:permissions:length:then:)`` takes.
    package static let wholeFileCopyLimit = 1 << 20

    /// Whether ``copyFile(from:in:to:in:flags:permissions:length:then:)`` runs as one linked submission
    /// (io_uring with a registered-descriptor table) rather than as separate operations.
    package var copiesFilesInOneSubmission: Bool { backend.linkedCopies }

    /// Lanes of registered descriptors held by linked copies now: one per copy in flight, and 0 once every
    /// copy has ended (tests check that failed copies give theirs back).
    package var copyLanesInUse: Int { (backend as? URingBackend)?.copyLanesInUse.load(ordering: .relaxed) ?? 0 }

    /// Copies a file of at most ``wholeFileCopyLimit`` bytes whole: opens `source`, opens `destination`
    /// with `flags` and `permissions`, moves `length` bytes, checks that the source ends there, and closes
    /// both.
    ///
    /// On io_uring this is one linked submission of seven requests on registered (direct) descriptors:
    /// the kernel issues each step from the previous one's completion, without a round trip through this
    /// process, so the cost per file is close to cp's system calls, where separate operations would cost
    /// a trip through the ring each. The bytes are spliced through a pipe the engine owns, so they are
    /// copied once, from the source's page cache into the destination's, and no buffer of this process
    /// holds them. On the POSIX engine a copy to a new file (`O_CREAT | O_EXCL`) runs whole on one pool
    /// thread, its system calls one after another as cp's, through that thread's 128 KiB buffer; a source
    /// that is not a regular file once opened (a directory, a FIFO put in the file's place), or whose open
    /// would wait (another process's write lease), is ``FileCopyOutcome/notStarted`` there, and such a
    /// copy, once started, cannot be given up: shutdown waits for it. Without registered
    /// descriptors (a kernel before 5.19, or a table the kernel refused), and on the POSIX engine for
    /// other destinations, the same steps run as separate operations, through a buffer of at most 128 KiB
    /// a piece at a time, with the same outcomes, except that a file the ring cannot splice is
    /// ``FileCopyOutcome/incomplete`` there.
    ///
    /// `length` is the size the caller found (its `statx`); the copy does not read past it. A source
    /// that no longer holds exactly `length` bytes once they are moved (it grew, or it was cut, which
    /// zeroes the end of the pages being moved) is reported as ``FileCopyOutcome/incomplete`` rather than
    /// copied in part, and the caller copies it again the ordinary way.
    ///
    /// The handler runs exactly once, on an engine thread (see ``CompletionHandler``). The copy cannot be
    /// cancelled on its own; after ``shutdown()`` it ends as `.failed(.openSource, …)` with `ECANCELED` or
    /// `ESHUTDOWN`. On io_uring, a request of the chain that the kernel refuses at submission also shows
    /// as `.failed(.openSource, ECANCELED)`: the kernel fails the chain's first request in its place.
    ///
    /// - Parameters:
    ///   - source: The file to copy, resolved against `sourceDirectory` when relative: a path copied for the
    ///     kernel (`CPath(filePath)`), which a caller can share with its other requests, as `dcopy -r` does
    ///     with a file's name, the same in both directories and in its `statx`.
    ///   - sourceDirectory: A descriptor of the directory a relative `source` is in (`AT_FDCWD`: the
    ///     working directory). It must stay open until the handler has run. A name resolved in its
    ///     directory costs the kernel one lookup instead of one per component of a full path, three times
    ///     per small file counting the caller's `statx`.
    ///   - destination: The file to open or create, resolved against `destinationDirectory` when relative.
    ///   - destinationDirectory: As `sourceDirectory`, for `destination`.
    ///   - flags: How to open the destination, for example `O_WRONLY | O_CREAT | O_EXCL`. `O_CLOEXEC` is
    ///     added to ordinary descriptors, and left out of registered ones (which refuse it).
    ///   - length: Bytes to copy, 0 through ``wholeFileCopyLimit``. With 0 nothing is transferred: the
    ///     destination is made, and the probe is a read of one byte at offset 0, so that a file whose size
    ///     says 0 but that holds bytes (a /proc file, or one written since) is ``FileCopyOutcome/incomplete``.
    ///   - keepOpen: Leave both files open when the copy succeeds (``FileCopyOutcome/copiedOpen(source:destination:)``),
    ///     for the caller to finish (`fchown`, `fchmod`, `futimens`) and close. On io_uring the chain then
    ///     turns its registered descriptors into ordinary ones (Linux 6.8); an older kernel's engine answers
    ///     ``FileCopyOutcome/notStarted`` at once.
    package func copyFile(
        from source: CPath,
        in sourceDirectory: CInt = AT_FDCWD,
        to destination: CPath,
        in destinationDirectory: CInt = AT_FDCWD,
        flags: CInt,
        permissions: FilePermissions,
        length: Int,
        keepOpen: Bool = false,
        then handler: @escaping @Sendable (FileCopyOutcome) -> Void
    ) {
        if length < 0 || length > Self.wholeFileCopyLimit {
            fatalError("IOEngine.copyFile: length \(length) is not 0...\(Self.wholeFileCopyLimit)")
        }
        let copy = LinkedCopy(
            source: source,
            sourceDirectory: sourceDirectory,
            destination: destination,
            destinationDirectory: destinationDirectory,
            flags: flags,
            mode: permissions.rawValue,
            length: length,
            keepsOpen: keepOpen
        )
        // A path the kernel refuses as the chain is submitted (empty, or PATH_MAX bytes or more) fails the
        // chain's first request in its place, which blamed the source: `dcopy a ''` said `cannot open 'a'
        // for reading: Operation canceled` (helper-43). Such a copy goes the ordinary way, whose opens
        // report the error of the file that has it.
        func refusedAtSubmission(_ path: CPath) -> Bool {
            path.count == 0 || path.count >= Int(PATH_MAX)
        }
        if backend.linkedCopies
            && (refusedAtSubmission(source) || refusedAtSubmission(destination)
                || keepOpen && !backend.linkedCopiesKeepOpen)
        {
            // On an engine thread, as every other outcome.
            _ = backend.submit(.nop, keepAlive: nil) { _ in handler(.notStarted) }
            return
        }
        // A destination that is not one to create could be a FIFO, whose open waits for a reader: one pool
        // thread's copy would wait with it, where separate operations can be given up.
        let creates = flags & (O_CREAT | O_EXCL) == O_CREAT | O_EXCL
        if backend.linkedCopies || backend.copiesWholeOnOneThread && creates {
            // An error here is the engine's own (shut down, or drained before the chain was submitted).
            _ = backend.submit(.linkedCopy(copy), keepAlive: nil) { completion in
                handler(completion.error.map { .failed(.openSource, $0) } ?? copy.outcome)
            }
        } else {
            StepwiseCopy(engine: self, copy: copy, handler: handler).start()
        }
    }

    private static func validOffset(_ offset: Int64?) -> Int64? {
        guard let offset else { return -1 }
        return offset >= 0 ? offset : nil
    }
}

/// The step of ``IOEngine/copyFile(from:in:to:in:flags:permissions:length:then:)`` that failed.
package enum FileCopyStep: Sendable, Equatable {
    case openSource
    case openDestination
    case read
    case write
    case closeDestination
}

/// How ``IOEngine/copyFile(from:in:to:in:flags:permissions:length:then:)`` ended.
package enum FileCopyOutcome: Sendable, Equatable {
    /// The source held exactly the bytes asked for; they are in the destination, and both are closed.
    case copied
    /// As ``copied``, with both files left open on these descriptors (`O_CLOEXEC`), which the caller
    /// closes; only when the copy was asked to keep them open.
    case copiedOpen(source: CInt, destination: CInt)
    /// A transfer came back short: the source does not hold exactly the bytes asked for any more (it
    /// shrank or grew since its size was taken), or the destination took fewer; or the kernel cannot
    /// splice between these two files (`EINVAL`: a directory, a device), where plain reads and writes
    /// would report the real error. The destination was opened (created, with `O_EXCL`), so it exists
    /// with unspecified content and must be copied again the ordinary way. The engine closes both.
    case incomplete
    /// Nothing was made at the destination: the engine could not take this copy (no pipe for it, or a
    /// pipe smaller than the file; on the POSIX engine, a source that is not a regular file once opened,
    /// or whose open would wait). Copy the file the ordinary way.
    case notStarted
    /// A step failed with this error, and nothing after it ran; the engine closes whatever was opened.
    /// The destination exists if the failed step was `.read`, `.write` or `.closeDestination`. (On
    /// io_uring, closing a registered descriptor only drops the table's reference, so an error a file
    /// system reports at close is not seen there.)
    case failed(FileCopyStep, Errno)
}

/// The copy's steps as separate operations, for a backend without linked copies. Each step starts from
/// the previous one's completion, on the engine thread.
private final class StepwiseCopy: @unchecked Sendable {
    private let engine: IOEngine
    private let copy: LinkedCopy
    private let handler: @Sendable (FileCopyOutcome) -> Void
    // Written by one step's completion and read by the next, which the engine orders.
    private var sourceFD: CInt = -1
    private var destinationFD: CInt = -1
    private var outcome = FileCopyOutcome.copied
    /// The bytes between a read and its write; alive as long as this copy, which outlives its operations.
    /// At most 128 KiB, moved a piece at a time: a buffer of the file's size made each of dcopy's 64 copies
    /// in flight hold up to a megabyte, and `dcopy -r` of 1,000 files of 1 MiB peaked at 71 MiB of RSS (on
    /// the POSIX engine, which ran copies so then; a kernel before 5.19 still does).
    private let buffer: UnsafeMutableRawBufferPointer

    init(engine: IOEngine, copy: LinkedCopy, handler: @escaping @Sendable (FileCopyOutcome) -> Void) {
        self.engine = engine
        self.copy = copy
        self.handler = handler
        buffer = .allocate(byteCount: min(max(copy.length, 1), LinkedCopy.pieceSize), alignment: 4096)
    }

    deinit { buffer.deallocate() }

    func start() {
        _ = engine.backend.submit(
            .openat(dirfd: copy.sourceDirectory, path: copy.source, flags: O_RDONLY | O_CLOEXEC, mode: 0),
            keepAlive: nil
        ) { [self] opened in
            if let error = opened.error { return handler(.failed(.openSource, error)) }
            sourceFD = CInt(opened.result)
            openDestination()
        }
    }

    private func openDestination() {
        _ = engine.backend.submit(
            .openat(
                dirfd: copy.destinationDirectory,
                path: copy.destination,
                flags: copy.flags | O_CLOEXEC,
                mode: copy.mode
            ),
            keepAlive: nil
        ) { [self] opened in
            if let error = opened.error {
                outcome = .failed(.openDestination, error)
                return closeSource()
            }
            destinationFD = CInt(opened.result)
            move(from: 0)
        }
    }

    /// Reads the piece at `offset` and writes it, then the next, until the copy's bytes are moved.
    private func move(from offset: Int) {
        guard offset < copy.length else { return probe() }
        let length = min(buffer.count, copy.length - offset)
        let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<length])
        engine.read(sourceFD, into: piece, at: Int64(offset), keepAlive: self) { [self] read in
            if let error = read.error {
                outcome = .failed(.read, error)
            } else if read.result != length {
                outcome = .incomplete
            }
            guard outcome == .copied else { return closeSource() }
            let piece = UnsafeRawBufferPointer(rebasing: buffer[0..<length])
            engine.write(destinationFD, from: piece, at: Int64(offset), keepAlive: self) { [self] wrote in
                if let error = wrote.error { outcome = .failed(.write, error) }
                guard outcome == .copied else { return closeSource() }
                move(from: offset + length)
            }
        }
    }

    /// The last byte expected and the one after it tell whether the source grew or shrank since its size
    /// was taken (see `LinkedCopy.probeOffset`).
    private func probe() {
        let probe = UnsafeMutableRawBufferPointer(start: copy.probe, count: Int(copy.probeLength))
        engine.read(sourceFD, into: probe, at: Int64(copy.probeOffset), keepAlive: self) { [self] extra in
            if let error = extra.error {
                outcome = .failed(.read, error)
            } else if extra.result != Int(copy.probeExpects) {
                outcome = .incomplete
            }
            closeSource()
        }
    }

    private func closeSource() {
        if copy.keepsOpen && outcome == .copied {
            return handler(.copiedOpen(source: sourceFD, destination: destinationFD))
        }
        // An engine shut down meanwhile refuses a close (ESHUTDOWN), or drops it unrun (ECANCELED, which a
        // close that ran never gives), without closing anything: the descriptor is still the copy's.
        let refused: @Sendable (IOCompletion) -> Bool = { $0.error == .socketShutdown || $0.error == .canceled }
        engine.close(sourceFD) { [self] closed in
            if refused(closed) { Glibc.close(sourceFD) }
            guard destinationFD >= 0 else { return handler(outcome) }
            engine.close(destinationFD) { [self] closed in
                if refused(closed) {
                    Glibc.close(destinationFD)
                } else if let error = closed.error, outcome == .copied {
                    outcome = .failed(.closeDestination, error)
                }
                handler(outcome)
            }
        }
    }
}

/// Why io_uring could not be used.
package struct EngineUnavailable: Error, Sendable, CustomStringConvertible {
    package var description: String
}
