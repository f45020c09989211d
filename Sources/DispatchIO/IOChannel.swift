import DispatchData
import DispatchQueues
import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

/// A channel for asynchronous reads and writes on a file descriptor, on io_uring: the counterpart of the
/// toolchain's `DispatchIO`.
///
/// A *stream* channel reads and writes at the descriptor's current position, one operation at a time in
/// submission order; a *random* channel reads and writes at offsets relative to the position the
/// descriptor had when the channel was created, several operations at once. Every operation reports to
/// its handler through `(done, data, error)` calls whose exact sequences are documented on
/// ``read(offset:length:queue:handler:)`` and ``write(offset:data:queue:handler:)``.
///
/// Channels made from the same descriptor number, and channels made from them, share the descriptor:
/// barriers wait for all their operations, and cleanup handlers run only once all of them are closed and
/// idle. The channel never changes the descriptor's flags (the engine never blocks a thread on it), and
/// never closes a descriptor it was given; it closes the ones it opened from a path, before the cleanup
/// handler runs. Writes to a pipe or socket whose reader has gone report `EPIPE`; `SIGPIPE` never
/// reaches the process from a channel's write.
public final class IOChannel: Sendable {
    /// How a channel reads and writes.
    public enum StreamType: Sendable {
        /// At the descriptor's current position, which advances; offsets are ignored (B8).
        case stream
        /// At offsets relative to the descriptor's position at creation; the position never moves (B10).
        case random
    }

    /// Flags for ``close(flags:)``.
    public struct CloseFlags: OptionSet, Sendable {
        /// The flags' bits.
        public let rawValue: UInt
        /// Creates flags from their raw value.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Cancel unfinished operations: they end with `ECANCELED` (B30).
        public static let stop = CloseFlags(rawValue: 1)
    }

    /// Flags for ``setInterval(interval:flags:)``.
    public struct IntervalFlags: OptionSet, Sendable {
        /// The flags' bits.
        public let rawValue: UInt
        /// Creates flags from their raw value.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Deliver at every interval, whatever the low water mark, even with no new data (B27).
        public static let strictInterval = IntervalFlags(rawValue: 1)
    }

    let core: ChannelCore

    /// Creates a channel on an open descriptor.
    ///
    /// The channel is returned at once, even for a bad descriptor (B2). The descriptor is checked
    /// asynchronously: if it is invalid (`EBADF`), a directory (`EISDIR`), or a pipe or socket for a random
    /// channel (`ESPIPE`), the cleanup handler runs promptly with that error, and every operation ends with
    /// one call carrying it.
    ///
    /// - Parameters:
    ///   - type: Stream or random access.
    ///   - fileDescriptor: The descriptor; the channel never closes it. Close it in the cleanup handler.
    ///   - queue: Where the cleanup handler runs.
    ///   - cleanupHandler: Runs exactly once, on `queue`: with the validation error promptly if the
    ///     descriptor is unusable, otherwise with `nil` once this channel and every channel sharing the
    ///     descriptor are closed (or released) and all their operations have delivered their final calls.
    ///     Errors of individual operations never reach it (B5).
    public convenience init(
        type: StreamType,
        fileDescriptor: FileDescriptor,
        queue: WorkQueue,
        cleanupHandler: @escaping @Sendable (_ error: Errno?) -> Void
    ) {
        self.init(
            type: type,
            fileDescriptor: fileDescriptor,
            queue: queue,
            engine: .shared,
            cleanupHandler: cleanupHandler
        )
    }

    package init(
        type: StreamType,
        fileDescriptor: FileDescriptor,
        queue: WorkQueue,
        engine: IOEngine,
        cleanupHandler: @escaping @Sendable (_ error: Errno?) -> Void
    ) {
        let entry = FileEntry.forDescriptor(fileDescriptor.rawValue, engine: engine)
        core = ChannelCore(entry: entry, type: type, queue: queue, cleanupHandler: cleanupHandler)
        entry.attach(core)
    }

    /// Creates a channel on a descriptor the caller has just opened with `flags` and looked at with
    /// `fstat`, as ``init(type:fileDescriptor:queue:cleanupHandler:)`` does, without asking the kernel
    /// again what the caller knows: the file's identity and kind (`status`), its mode (`flags`), and its
    /// position, the start. dcat of 10,000 small files made three calls fewer per file.
    package init(
        type: StreamType,
        justOpened fileDescriptor: FileDescriptor,
        flags: CInt,
        status: stat,
        queue: WorkQueue,
        cleanupHandler: @escaping @Sendable (_ error: Errno?) -> Void
    ) {
        let entry = FileEntry.forDescriptor(fileDescriptor.rawValue, engine: .shared, known: (status, flags))
        core = ChannelCore(
            entry: entry,
            type: type,
            queue: queue,
            position: 0,
            cleanupHandler: cleanupHandler
        )
        entry.attach(core)
    }

    /// Creates a channel on a file that it opens itself, at its first operation or barrier (B41).
    ///
    /// Anything but a regular file is opened with `O_NONBLOCK` (and a regular file without it), as
    /// libdispatch opens it: a FIFO's open does not wait for its other end. Read with no writer yet, a FIFO
    /// is at its end; written with no reader, the write fails with `ENXIO`. A channel made from a closed one
    /// (``init(type:io:queue:cleanupHandler:)``) opens nothing: `.create` and `.truncate` do not touch the
    /// file.
    ///
    /// Returns `nil` when `path` is not absolute (B39). The path is checked asynchronously: a missing file
    /// (without `.create`), a directory, or a FIFO or socket for a random channel make the cleanup handler
    /// run promptly with the error, and every operation fail with it (B40). If the open itself fails
    /// (`EACCES`, …), every operation fails with that error, and the cleanup handler still gets `nil` (B42).
    ///
    /// - Parameters:
    ///   - type: Stream or random access.
    ///   - path: An absolute path.
    ///   - mode: How to open it.
    ///   - options: Open options (`.create`, `.truncate`, `.append`, `.exclusiveCreate`, `.noFollow`, …).
    ///   - permissions: For a file that `.create` makes.
    ///   - queue: Where the cleanup handler runs.
    ///   - cleanupHandler: Runs exactly once on `queue`, after the channel closed the file (B43); see
    ///     ``init(type:fileDescriptor:queue:cleanupHandler:)``.
    public convenience init?(
        type: StreamType,
        path: FilePath,
        mode: FileDescriptor.AccessMode,
        options: FileDescriptor.OpenOptions = [],
        permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead],
        queue: WorkQueue,
        cleanupHandler: @escaping @Sendable (_ error: Errno?) -> Void
    ) {
        self.init(
            type: type,
            path: path,
            mode: mode,
            options: options,
            permissions: permissions,
            queue: queue,
            engine: .shared,
            cleanupHandler: cleanupHandler
        )
    }

    package init?(
        type: StreamType,
        path: FilePath,
        mode: FileDescriptor.AccessMode,
        options: FileDescriptor.OpenOptions = [],
        permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead],
        queue: WorkQueue,
        engine: IOEngine,
        cleanupHandler: @escaping @Sendable (_ error: Errno?) -> Void
    ) {
        guard path.isAbsolute else { return nil }
        let flags = mode.rawValue | options.rawValue
        let entry = FileEntry.forPath(path, flags: flags, permissions: permissions, engine: engine)
        core = ChannelCore(entry: entry, type: type, queue: queue, cleanupHandler: cleanupHandler)
        entry.attach(core)
    }

    /// Creates a channel on the same file as `channel` (B45–B47).
    ///
    /// From a descriptor channel, the new channel shares its descriptor, its barriers and its cleanup timing;
    /// a random channel's offsets start at the descriptor's position now. From a path channel, the new
    /// channel opens the path again on its own. Water marks and interval start at their defaults. If
    /// `channel` is already closed, the new channel fails with `ECANCELED` like a channel on a bad descriptor.
    ///
    /// - Parameters:
    ///   - type: Stream or random access.
    ///   - channel: The channel whose file to use.
    ///   - queue: Where the cleanup handler runs.
    ///   - cleanupHandler: Runs exactly once on `queue`; see ``init(type:fileDescriptor:queue:cleanupHandler:)``.
    public init(
        type: StreamType,
        io channel: IOChannel,
        queue: WorkQueue,
        cleanupHandler: @escaping @Sendable (_ error: Errno?) -> Void
    ) {
        let source = channel.core.entry
        let entry: FileEntry
        switch source.source {
        case .descriptor:
            entry = source
            entry.willAttach()
        case .path(let path, let flags, let permissions):
            entry = FileEntry.forPath(path, flags: flags, permissions: permissions, engine: source.engine)
        }
        core = ChannelCore(entry: entry, type: type, queue: queue, cleanupHandler: cleanupHandler)
        if channel.core.isClosed {
            core.markFailed(.canceled)
        }
        entry.attach(core)
    }

    deinit {
        // Releasing a channel without closing it closes it (B6).
        core.close(stop: false)
    }

    // MARK: Operations

    /// Reads up to `length` bytes, or to end of file with `Int.max` (B14).
    ///
    /// The handler runs on `queue`, one call at a time and in order even when `queue` is concurrent (B13):
    ///
    /// - zero or more `(false, data, nil)` calls with the data read since the last call, each at least the
    ///   low water mark and at most the high water mark in size (B24), or anything buffered at a strict
    ///   interval, possibly empty (B27). At end of file or on an error, what is buffered below the low
    ///   water mark comes in one more such call before the final one;
    /// - then exactly one final call: `(true, rest, nil)` when `length` bytes were read (the rest may be
    ///   empty: an exact-length read of a file is one call, B16); `(true, empty, nil)` at end of file
    ///   (B17); `(true, nil, error)` on an error, after a `(false, data, nil)` call with anything buffered
    ///   (B18). A closed or stopped channel, or one whose file failed, gives only the final call.
    ///
    /// A zero-length read completes at once with `(true, empty, nil)`, or `(true, nil, error)` on a closed
    /// channel (ECANCELED) or one whose file failed (B12).
    ///
    /// - Parameters:
    ///   - offset: For a random channel, the position relative to the descriptor's position when the
    ///     channel was created; ignored by stream channels. Negative offsets, and offsets that with the
    ///     starting position pass the largest file position (`Int64.max`), fail with `EINVAL`.
    ///   - length: Bytes to read; `Int.max` reads to end of file. Negative lengths fail with `EINVAL`.
    ///   - queue: Where the handler runs.
    ///   - handler: Receives `done`, the data (which belongs to you from then on), and the error.
    public func read(
        offset: Int64,
        length: Int,
        queue: WorkQueue,
        handler: @escaping @Sendable (_ done: Bool, _ data: DispatchDataBuffer?, _ error: Errno?) -> Void
    ) {
        read(offset: offset, length: length, handlerQueue: queue) { done, data, error in handler(done, data, error) }
    }

    /// A read's handler that takes the data over (`consuming`): `done`, the data, and the error. Nothing else
    /// holds the data while the handler runs, so what it moves on is the only reference.
    package typealias OwningReadHandler =
        @Sendable (
            _ done: Bool, _ data: consuming DispatchDataBuffer?, _ error: Errno?
        ) -> Void
    /// A write's handler: `done`, the data not yet written, and the error.
    package typealias OperationHandler = @Sendable (_ done: Bool, _ data: DispatchDataBuffer?, _ error: Errno?) -> Void

    /// Reads as ``read(offset:length:queue:handler:)`` does, with the same calls, but runs the handler on
    /// the thread that makes each call due, with no queue between: as a rule an engine thread, as the
    /// kernel's read completes; the calling thread, before this returns, when the read fails or ends at
    /// once (a zero length, a closed channel); now and then another thread busy with the channels' own work
    /// (a write whose end lets reads waiting on the write backlog go on). Calls still come one at a time
    /// and in order.
    ///
    /// For a handler that only hands the bytes on and submits the next operation (`dcat`'s windows): a
    /// hop to a queue costs a thread's wake-up per call, 30–60 µs on a virtual machine whose idle CPUs
    /// halt, where the next submission from the engine's own thread costs none. The handler must be short
    /// and must not block (no waiting on a semaphore or a `sync`, no writes to a terminal or pipe with
    /// plain system calls): it holds up every completion of the engine while it runs. It takes the data
    /// over: a handler that moves it on and then submits more work holds no buffer the read gave it.
    package func read(
        offset: Int64,
        length: Int,
        onCompletingThread handler: @escaping OwningReadHandler
    ) {
        read(offset: offset, length: length, handlerQueue: nil, handler: handler)
    }

    /// Reads up to `length` bytes as ``read(offset:length:queue:handler:)`` does, with the same calls, but
    /// on a pipe, socket, terminal or device no system call asks for fewer than `minimum` bytes (or than
    /// `length`, where that is less). Once something has been read, the read ends where the next call would
    /// ask for less (what is left of `length`, or the room under the high water mark beside bytes held
    /// below the low water mark), with its last bytes in the final call `(true, data, nil)`: a final call
    /// without bytes, `(true, empty, nil)`, is the end of file, and only that. With `minimum` at `length` or
    /// more, the read ends with the first system call that brings bytes, as the convenience read does
    /// (B55). A regular file is read to `length` or to its end, as by any read. The high water mark must not
    /// be below `minimum`: it bounds each system call.
    ///
    /// For descriptors that keep messages or records (a datagram or sequenced-packet socket, a packet-mode
    /// pipe, some devices): a plain read asks the kernel for no more than its length has left, and a system
    /// call asking for less than the next message gets its first bytes while the kernel drops the rest (or,
    /// for some devices, fails with `EINVAL`). With this read a message is cut only where it is longer than
    /// `minimum`, as `read(2)` of that many bytes would cut it.
    package func read(
        length: Int,
        askingAtLeast minimum: Int,
        queue: WorkQueue,
        handler: @escaping @Sendable (_ done: Bool, _ data: DispatchDataBuffer?, _ error: Errno?) -> Void
    ) {
        read(offset: 0, length: length, handlerQueue: queue, minimumRead: max(minimum, 1)) { done, data, error in
            handler(done, data, error)
        }
    }

    private func read(
        offset: Int64,
        length: Int,
        handlerQueue queue: WorkQueue?,
        minimumRead: Int = 1,
        handler: @escaping OwningReadHandler
    ) {
        if length == 0 {
            // A closed channel, or one whose file failed, refuses it first, as any other (B28, B2).
            let refusal = zeroLengthRefusal
            let call: @Sendable () -> Void = { handler(true, refusal == nil ? DispatchDataBuffer() : nil, refusal) }
            if let queue { queue.async(execute: call) } else { call() }
            return
        }
        let operation = ReadOperation(
            channel: core,
            offset: offset,
            length: length,
            settings: core.currentSettings,
            queue: queue,
            minimumRead: minimumRead,
            handler: handler
        )
        submit(operation, invalid: length < 0 || !isRepresentable(offset: offset))
    }

    /// Writes `data`.
    ///
    /// The handler runs on `queue`, one call at a time and in order (B13):
    ///
    /// - zero or more `(false, remaining, nil)` calls, each after at least the low water mark was written
    ///   since the last one, with the data not yet written (B19, B26);
    /// - then exactly one final call: `(true, nil, nil)` when everything was written; `(true, remaining,
    ///   error)` on an error, with exactly the data that was not written (all of it if nothing was).
    ///
    /// On a pipe or socket, when the low water mark is below a system call's piece (at most 1 MiB) or an
    /// interval is set, each system call that the pipe or socket takes only part of reports its progress,
    /// as libdispatch does: a pipe's progress comes as its reader drains it. That rests on the kernel
    /// answering short: pipes do since Linux 6.4 (`RWF_NOWAIT`), FIFOs opened by name without
    /// `O_NONBLOCK` do not, and there a piece is written whole before its progress is reported.
    ///
    /// Empty data completes at once with `(true, nil, nil)`, or `(true, data, error)` on a closed channel
    /// (ECANCELED) or one whose file failed (B12). The data's regions go to the kernel as they are
    /// (`writev`); nothing is copied.
    ///
    /// - Parameters:
    ///   - offset: As for ``read(offset:length:queue:handler:)``; the data must also end within a file's 63-bit
    ///     range (EINVAL otherwise).
    ///   - data: The bytes to write.
    ///   - queue: Where the handler runs.
    ///   - handler: Receives `done`, the data not yet written, and the error.
    public func write(
        offset: Int64,
        data: DispatchDataBuffer,
        queue: WorkQueue,
        handler: @escaping @Sendable (_ done: Bool, _ data: DispatchDataBuffer?, _ error: Errno?) -> Void
    ) {
        write(offset: offset, data: data, handlerQueue: queue, handler: handler)
    }

    /// Writes as ``write(offset:data:queue:handler:)`` does, with the same calls, but runs the handler on the
    /// thread that makes each call due, as ``read(offset:length:onCompletingThread:)`` does, with the same
    /// rules: short, never blocking. A write that fails or ends at once (empty data, a closed channel) calls
    /// it on the calling thread before this returns.
    package func write(
        offset: Int64,
        data: DispatchDataBuffer,
        onCompletingThread handler: @escaping OperationHandler
    ) {
        write(offset: offset, data: data, handlerQueue: nil, handler: handler)
    }

    private func write(
        offset: Int64,
        data: DispatchDataBuffer,
        handlerQueue queue: WorkQueue?,
        handler: @escaping @Sendable (_ done: Bool, _ data: DispatchDataBuffer?, _ error: Errno?) -> Void
    ) {
        if data.isEmpty {
            let refusal = zeroLengthRefusal
            let call: @Sendable () -> Void = { handler(true, refusal == nil ? nil : data, refusal) }
            if let queue { queue.async(execute: call) } else { call() }
            return
        }
        let operation = WriteOperation(
            channel: core,
            offset: offset,
            data: data,
            settings: core.currentSettings,
            queue: queue,
            handler: handler
        )
        submit(operation, invalid: !isRepresentable(offset: offset, length: data.count))
    }

    /// What a zero-length operation fails with: as libdispatch, the channel's state comes before the
    /// length (closed: ECANCELED; a bad descriptor or a failed path: its error, once known).
    private var zeroLengthRefusal: Errno? {
        core.refusal ?? core.entry.lock.withLock { core.operationFailure }
    }

    /// Whether a random channel's `offset` (and the `length` bytes from it) lies within a file's 63-bit
    /// range once the channel's starting position is added; a stream channel ignores offsets. Anything
    /// else fails with EINVAL, as the kernel's own check would, rather than overflowing.
    private func isRepresentable(offset: Int64, length: Int = 0) -> Bool {
        guard type == .random else { return true }
        guard offset >= 0 else { return false }
        let (start, overflow) = core.baseOffset.addingReportingOverflow(offset)
        return !overflow && Int64(length) <= Int64.max - start
    }

    /// Queues an operation, or fails it at once: EINVAL for bad arguments, ECANCELED on a closed channel.
    private func submit(_ operation: IOOperation, invalid: Bool) {
        if invalid {
            operation.fail(.invalidArgument)
        } else if let refusal = core.refusal {
            operation.fail(refusal)
        } else {
            core.entry.enqueue(.operation(operation))
        }
    }

    /// Closes the channel.
    ///
    /// Without `.stop`, operations already submitted run to completion; operations submitted afterwards
    /// fail at once with `ECANCELED` (B28). With `.stop`, unfinished operations end with their `ECANCELED`
    /// sequence too (B30). A second close is ignored, except that `.stop` after a plain close still stops
    /// (B32).
    public func close(flags: CloseFlags = []) {
        core.close(stop: flags.contains(.stop))
    }

    /// Runs `barrier` once, on the channel's target queue (the default global queue unless
    /// ``setTarget(queue:)`` chose another), after every operation submitted earlier on this channel and
    /// on every channel sharing its descriptor has completed; operations submitted later wait until it
    /// returns (B48, B49). It may use ``fileDescriptor`` (`fsync`, `lseek`), but must not close it. On a
    /// path channel the file is opened before the barrier runs, so ``fileDescriptor`` is there (B41), unless
    /// the channel is closed or failed: then nothing is opened, and ``fileDescriptor`` is nil.
    public func barrier(execute barrier: @escaping @Sendable () -> Void) {
        core.entry.enqueue(.barrier(core, core.targetQueue, barrier))
    }

    /// Sets the queue that barriers submitted afterwards run on (B59).
    public func setTarget(queue: WorkQueue) {
        core.targetQueue = queue
    }

    /// The descriptor, or `nil` once the channel is closed or stopped, if it failed, or, for a path
    /// channel, before the file has been opened (B50).
    public var fileDescriptor: FileDescriptor? {
        core.descriptor.map { FileDescriptor(rawValue: $0) }
    }

    /// The channel's type.
    public var type: StreamType { core.type }

    /// Sets the most data one non-final read call delivers, for operations submitted afterwards (B7, B22).
    /// 0 counts as 1; a low water mark above it is lowered to it.
    public func setLimit(highWater: Int) {
        core.update { settings in
            settings.highWater = max(highWater, 1)
            if settings.lowWater > settings.highWater { settings.lowWater = settings.highWater }
        }
    }

    /// Sets the least data a non-final call delivers, for operations submitted afterwards (B7, B23); a high
    /// water mark below it is raised to it. The default is 1 MiB (B21): a pipe read delivers nothing before
    /// 1 MiB or end of file unless this is lowered (B25).
    public func setLimit(lowWater: Int) {
        core.update { settings in
            settings.lowWater = max(lowWater, 0)
            if settings.highWater < settings.lowWater { settings.highWater = max(settings.lowWater, 1) }
        }
    }

    /// Ticks every `interval` (B27) for operations submitted afterwards, from when each is queued until it
    /// ends; a tick calls the handler on its handler queue as the flags say.
    ///
    /// With `.strictInterval` every tick calls the handler, `done` false: a read receives whatever was read
    /// since its last call, even nothing; a write receives the bytes it has still to write, the same ones
    /// again if none moved. Without it a tick calls only once what was read, or written, since the last call
    /// reaches the low water mark, which the call after each system call has then already made. `.zero`
    /// turns it off.
    public func setInterval(interval: Duration, flags: IntervalFlags = []) {
        core.update { settings in
            settings.interval = interval > .zero ? interval : nil
            settings.strictInterval = flags.contains(.strictInterval)
        }
    }
}

extension WorkQueue: DeallocationQueue {}
