import DispatchData
import DispatchQueues
import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

/// Which file a descriptor refers to.
struct FileIdentity: Equatable {
    var device: dev_t
    var inode: ino_t
}

/// What a descriptor is, as far as channels care.
enum FileKind: Sendable {
    case regular
    case directory
    case pipe
    case socket
    case other  // ttys, character and block devices

    init(mode: mode_t) {
        switch mode & S_IFMT {
        case S_IFREG: self = .regular
        case S_IFDIR: self = .directory
        case S_IFIFO: self = .pipe
        case S_IFSOCK: self = .socket
        default: self = .other
        }
    }

    /// Regular files are read and written at explicit offsets, several operations in flight; everything
    /// else is a stream of its own.
    var isSeekableFile: Bool { self == .regular }
}

/// The state shared by every channel on one descriptor (libdispatch's fd_entry): the descriptor, its
/// validation, the order operations and barriers run in, and when cleanup handlers run.
///
/// Every channel made from the same descriptor number, and every channel derived from one of them,
/// shares the entry (B46): barriers wait for all their operations (B48), stream operations are serialised
/// across them (B9), and cleanup handlers run only once all of them are closed and idle (B4). A path
/// channel has an entry of its own (B44, B47).
final class FileEntry: @unchecked Sendable {
    enum Source {
        case descriptor
        case path(FilePath, flags: CInt, permissions: FilePermissions)
    }

    enum Item {
        case operation(IOOperation)
        case barrier(ChannelCore, WorkQueue, @Sendable () -> Void)
    }

    let engine: IOEngine
    let source: Source
    let lock = Lock()

    // Guarded by `lock`.
    private(set) var fd: CInt
    private(set) var kind: FileKind?
    /// Set when validation failed (EBADF, EISDIR, ENOENT, …): every operation fails with it.
    private(set) var failure: Errno?
    /// Set when the lazy open of a path failed: sticky, but cleanup handlers still get no error (B42).
    private(set) var openFailure: Errno?
    private(set) var isAppend = false
    /// A regular file's size when the descriptor was validated or the path opened (0 when unknown; the
    /// largest offset for other files, whose size says nothing): reads past it are expected to find little
    /// or nothing (see `ReadOperation.offloads` and `ReadOperation.progress`).
    private(set) var sizeAtOpen: Int64 = 0
    private var identity: FileIdentity?
    private var validated = false
    private var opening = false
    private var items: [Item] = []
    private var running: [IOOperation] = []
    private var barrierRunning = false
    /// Barriers in `items`: an operation queued behind one cannot start before that barrier's block has
    /// returned, and the block may wait for anything.
    private var barriersQueued = 0
    private var channels: [ChannelCore] = []
    private var tornDown = false
    /// Operations made on this entry's channels whose final handler call has not yet returned: the entry
    /// is not given up, and no cleanup handler runs, before they have (B4). Queued is not enough: on
    /// another queue, or on a concurrent one, the cleanup would overtake it (a convenience read's cleanup
    /// would hand over what the final call had not yet added).
    private var finalCallsPending = 0
    /// Channels given this entry by ``forDescriptor(_:engine:)`` and not yet attached: the entry is not
    /// given up under them, or they would join it after its teardown and never get their cleanup call.
    private var attaching = 0

    private static let registry = Locked<[CInt: FileEntry]>([:])

    private init(engine: IOEngine, fd: CInt, source: Source) {
        self.engine = engine
        self.fd = fd
        self.source = source
    }

    /// The entry for descriptor `fd`, shared with every live channel on that number.
    /// `known`: the descriptor's `fstat` and open flags, when its caller has just opened it.
    static func forDescriptor(_ fd: CInt, engine: IOEngine, known: (status: stat, flags: CInt)? = nil) -> FileEntry {
        // Entries go by number, so a number closed and reused while a channel still held it would find the
        // old file's entry (B37); checking the file's identity gives the new file an entry of its own.
        var st = known?.status ?? stat()
        let identity =
            known != nil || fstat(fd, &st) == 0 ? FileIdentity(device: st.st_dev, inode: st.st_ino) : nil
        return registry.withLock { entries in
            if let entry = entries[fd], entry.engine === engine,
                entry.lock.withLock({ () -> Bool in
                    guard !entry.tornDown && entry.identity == identity && identity != nil else { return false }
                    entry.attaching += 1
                    return true
                })
            {
                return entry
            }
            let entry = FileEntry(engine: engine, fd: fd, source: .descriptor)
            entry.attaching = 1
            entry.validateDescriptor(identity == nil ? nil : st, flags: known?.flags)
            entries[fd] = entry
            return entry
        }
    }

    /// A new entry for a path, opened lazily at its first operation (B41).
    static func forPath(_ path: FilePath, flags: CInt, permissions: FilePermissions, engine: IOEngine) -> FileEntry {
        let entry = FileEntry(engine: engine, fd: -1, source: .path(path, flags: flags, permissions: permissions))
        entry.attaching = 1
        entry.validatePath()
        return entry
    }

    /// `fstat` does not wait on anything, so descriptors are validated at once; failures are still
    /// reported asynchronously, through cleanup handlers and operations (B2).
    /// `status`: the descriptor's `fstat`, already taken by the caller; nil when it failed. `flags`: its
    /// open flags, when the caller knows them.
    private func validateDescriptor(_ status: stat?, flags: CInt?) {
        var st = status ?? stat()
        if status == nil, fstat(fd, &st) != 0 {
            failure = Errno(rawValue: errno)
        } else {
            identity = FileIdentity(device: st.st_dev, inode: st.st_ino)
            kind = FileKind(mode: st.st_mode)
            sizeAtOpen = kind == .regular ? Int64(st.st_size) : .max
            if kind == .directory { failure = .isDirectory }
            isAppend = (flags ?? fcntl(fd, F_GETFL)) & O_APPEND != 0
        }
        validated = true
    }

    /// Paths are validated with `statx` through the engine, asynchronously (B40).
    private func validatePath() {
        guard case .path(let path, let flags, _) = source else { return }
        let statFlags: CInt = flags & O_NOFOLLOW != 0 ? CInt(AT_SYMLINK_NOFOLLOW) : 0
        engine.stat(path: path, flags: statFlags) { [self] result in
            switch result {
            case .success(let status):
                let kind = FileKind(mode: mode_t(status.mode))
                finishValidation(kind: kind, failure: kind == .directory ? .isDirectory : nil)
            case .failure(.noSuchFileOrDirectory) where flags & O_CREAT != 0:
                // With O_CREAT a missing file is fine if its directory is there, as libdispatch checks with
                // a stat of the parent; otherwise ENOENT now, not only at the open (B40).
                engine.stat(path: path.removingLastComponent()) { [self] parent in
                    switch parent {
                    case .success: finishValidation(kind: .regular, failure: nil)
                    case .failure: finishValidation(kind: nil, failure: .noSuchFileOrDirectory)
                    }
                }
            case .failure(let error):
                finishValidation(kind: nil, failure: error)
            }
        }
    }

    private func finishValidation(kind: FileKind?, failure: Errno?) {
        let actions = lock.withLock { () -> [() -> Void] in
            self.kind = kind
            self.failure = failure
            validated = true
            var actions = channels.compactMap { $0.validationFinished() }
            actions += pump()
            return actions
        }
        for action in actions { action() }
    }

    // MARK: Channels

    /// Holds the entry for a channel about to be made on it from another channel's (a descriptor's entry
    /// is shared): ``attach(_:)`` follows. ``forDescriptor(_:engine:)`` and ``forPath(_:flags:permissions:engine:)``
    /// do this themselves.
    func willAttach() {
        lock.withLock { attaching += 1 }
    }

    /// Registers a channel; returns what to run outside the lock (a prompt failed cleanup, B2).
    func attach(_ channel: ChannelCore) {
        let action = lock.withLock { () -> (() -> Void)? in
            attaching -= 1
            channels.append(channel)
            guard validated else { return nil }
            return channel.validationFinished()
        }
        action?()
    }

    /// Validation result for a channel of `type`, under the lock: a random channel on a pipe or socket is
    /// ESPIPE (B2, B53).
    func failure(for type: IOChannel.StreamType) -> Errno? {
        if let failure { return failure }
        if type == .random, kind == .pipe || kind == .socket { return .illegalSeek }
        return nil
    }

    /// Whether operations or barriers wait to start.
    var hasQueuedItems: Bool { lock.withLock { !items.isEmpty } }

    /// A channel closed: tear down once nothing uses the entry.
    func channelClosed() {
        let actions = lock.withLock { pump() }
        for action in actions { action() }
    }

    // MARK: Scheduling

    func enqueue(_ item: Item) {
        if case .operation(let operation) = item { operation.queued() }
        let (actions, behindBarrier) = lock.withLock { () -> ([() -> Void], Bool) in
            let behindBarrier = barrierRunning || barriersQueued > 0
            if case .barrier = item { barriersQueued += 1 }
            items.append(item)
            return (pump(), behindBarrier)
        }
        // Before the actions, which may start it.
        if case .operation(let operation) = item { operation.enqueued(behindBarrier: behindBarrier) }
        for action in actions { action() }
        WriteBacklog.shared.wakeReads(of: self)
    }

    /// An operation was made on one of this entry's channels; it ends with ``finalCallReturned()``. Returns
    /// the file's kind, which the operation would otherwise take the lock again to read.
    func operationCreated() -> FileKind? {
        lock.withLock {
            finalCallsPending += 1
            return kind
        }
    }

    /// An operation's final handler call has returned: the entry may be given up now (B4).
    func finalCallReturned() {
        let actions = lock.withLock { () -> [() -> Void] in
            finalCallsPending -= 1
            return pump()
        }
        for action in actions { action() }
    }

    /// An operation has queued its final handler call and its kernel work has drained.
    func finished(_ operation: IOOperation) {
        let actions = lock.withLock { () -> [() -> Void] in
            running.removeAll { $0 === operation }
            return pump()
        }
        for action in actions { action() }
    }

    /// Removes and returns the operations of `channel` that have not started (for stop, B30).
    func takeQueued(of channel: ChannelCore) -> [IOOperation] {
        lock.withLock {
            var taken: [IOOperation] = []
            items.removeAll { item in
                if case .operation(let op) = item, op.channel === channel {
                    taken.append(op)
                    return true
                }
                return false
            }
            return taken
        }
    }

    func runningOperations(of channel: ChannelCore) -> [IOOperation] {
        lock.withLock { running.filter { $0.channel === channel } }
    }

    /// Starts what may start now, in order; returns the actions to run outside the lock. Lock held.
    ///
    /// A barrier starts when everything before it has finished, and nothing after it starts until it has
    /// returned (B48). A stream operation waits for earlier stream operations of its lane: one lane on a
    /// regular file, one per direction on pipes and sockets (B9). Random operations only wait for barriers.
    private func pump() -> [() -> Void] {
        guard validated else { return [] }
        var actions: [() -> Void] = []
        if failure == nil, case .path = source, fd < 0, openFailure == nil, !tornDown, needsDescriptor {
            if !opening {
                opening = true
                actions.append { [self, kind] in openPath(validatedKind: kind) }
            }
            return actions
        }
        if opening { return actions }
        // Lanes are 0, 1 and 2 (see `IOOperation.lane`): a bit mask, not a set, since this runs several
        // times per operation.
        var busyLanes = 0
        for operation in running {
            if let lane = operation.lane { busyLanes |= 1 << lane }
        }
        var index = 0
        while index < items.count {
            if barrierRunning { break }
            switch items[index] {
            case .barrier(_, let queue, let block):
                guard running.isEmpty && index == 0 else {
                    appendTeardownIfIdle(to: &actions)
                    return actions
                }
                items.remove(at: 0)
                barriersQueued -= 1
                barrierRunning = true
                actions.append { [self] in
                    queue.async {
                        block()
                        let next = self.lock.withLock { () -> [() -> Void] in
                            self.barrierRunning = false
                            return self.pump()
                        }
                        for action in next { action() }
                    }
                }
                return actions
            case .operation(let op):
                if let lane = op.lane, busyLanes & (1 << lane) != 0 {
                    index += 1
                    continue
                }
                items.remove(at: index)
                if let lane = op.lane { busyLanes |= 1 << lane }
                if let error = op.channel.startFailure ?? openFailure {
                    actions.append { op.fail(error) }
                } else {
                    running.append(op)
                    actions.append { op.start(fd: self.fd) }
                }
            }
        }
        appendTeardownIfIdle(to: &actions)
        return actions
    }

    /// Whether a queued item needs the file open: an operation that will run, or a barrier of a channel
    /// that is open and has not failed (it may ask for the descriptor, B41). A failed, stopped or closed
    /// channel's operations fail without it, and its barriers run without it (its `fileDescriptor` is nil):
    /// a path channel made from a closed one opens nothing, so its `O_CREAT` or `O_TRUNC` does not touch
    /// the file (B45). Lock held.
    private var needsDescriptor: Bool {
        items.contains { item in
            switch item {
            case .operation(let op): return op.channel.startFailure == nil
            case .barrier(let channel, _, _): return channel.startFailure == nil && !channel.isClosed
            }
        }
    }

    /// Opens the path, with `O_NONBLOCK` for anything but a regular file (`validatedKind`) and
    /// without it for a regular file (B41). A FIFO's open would otherwise wait for the other end, where
    /// neither stop nor teardown can reach it: a reader's opens at once, a writer's fails with `ENXIO`.
    private func openPath(validatedKind: FileKind?) {
        guard case .path(let path, let flags, let permissions) = source else { return }
        let openFlags = validatedKind == .regular ? flags & ~O_NONBLOCK : flags | O_NONBLOCK
        engine.openat(path: path, flags: openFlags, permissions: permissions) { [self] completion in
            let actions = lock.withLock { () -> [() -> Void] in
                opening = false
                if let error = completion.error {
                    openFailure = error
                } else {
                    fd = CInt(completion.result)
                    var st = stat()
                    if fstat(fd, &st) == 0 {
                        kind = FileKind(mode: st.st_mode)
                        sizeAtOpen = kind == .regular ? Int64(st.st_size) : .max
                    }
                    isAppend = flags & O_APPEND != 0
                }
                return pump()
            }
            for action in actions { action() }
        }
    }

    /// When every channel is closed and nothing runs or waits, the entry goes: a path's descriptor is
    /// closed first (B43), then every channel's cleanup handler is queued (B4). Lock held.
    private func appendTeardownIfIdle(to actions: inout [() -> Void]) {
        guard !tornDown, items.isEmpty, running.isEmpty, !barrierRunning, !opening, finalCallsPending == 0,
            attaching == 0, !channels.isEmpty, channels.allSatisfy(\.isClosed)
        else { return }
        tornDown = true
        let channels = self.channels
        self.channels = []
        let fd = self.fd
        let closesDescriptor: Bool
        if case .path = source { closesDescriptor = fd >= 0 } else { closesDescriptor = false }
        actions.append { [self] in
            if case .descriptor = source {
                FileEntry.registry.withLock { entries in
                    if entries[fd] === self { entries[fd] = nil }
                }
            }
            if closesDescriptor { Glibc.close(fd) }
            for channel in channels { channel.runCleanup() }
        }
    }
}
