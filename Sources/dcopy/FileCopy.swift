import DispatchData
import DispatchIO
import DispatchQueues
import Synchronization
import SystemPackage
import ToolSupport
import URing

#if canImport(Glibc)
import Glibc
#endif

/// `lseek` whences Glibc hides behind `_GNU_SOURCE` (linux/fs.h values).
private let seekData: CInt = 3  // SEEK_DATA
private let seekHole: CInt = 4  // SEEK_HOLE

/// One regular file (or, without `-r`, a FIFO or device read as a stream) copied through the ring.
///
/// The steps: `statx` of source and destination (refusing a copy of a file onto itself by device and
/// inode), `openat` of both, then chunks read at their offsets on a random channel and written at the same
/// offsets on another, at most ``Limits/perFile`` at once and only while the shared ``ChunkBudget`` has
/// room; only the data extents of a sparse file are read (`SEEK_DATA`/`SEEK_HOLE`) and the size is set
/// with `ftruncate` at the end. Then `-p` metadata, and `close` of both through the ring.
final class FileCopy: @unchecked Sendable {
    private let copier: Copier
    /// The file as the walk found it; its copier is told when this copy has ended (``Copier/copyEnded(_:errors:)``).
    private let file: PendingFile
    private var source: PathName { file.source }
    private var destination: PathName { file.destination }
    /// Where this file's completions and channel handlers run (serial).
    private let queue: WorkQueue
    private var engine: IOEngine { copier.engine }

    private let lock = Lock()
    // Guarded by `lock` once the copy runs.
    private var sourceInfo: FileStatus?
    private var destinationInfo: Result<FileStatus, Errno>?
    private var sourceFD: CInt = -1
    private var destinationFD: CInt = -1
    private var input: IOChannel?
    private var output: IOChannel?
    /// Whether the source is read at offsets (a regular file) or as a stream.
    private var seekable = true
    /// Whether writes go at offsets (a regular destination) or in order.
    private var positionedOutput = true
    /// The size to end with; nil when unknown (a size-0 /proc file, a stream): read to end of file.
    private var size: Int64?
    /// The size `statx` gave, which `size` is lowered from when a read ends short.
    private var sizeAtStart: Int64?
    private var sparse = false
    /// The data extent being read: `next` is the next offset to ask for, `extentEnd` where it stops.
    private var next: Int64 = 0
    private var extentEnd: Int64 = 0
    private var reachedEnd = false
    private var chunksInFlight = 0
    /// A stream's chunk is being read: the next one's read waits for it to end (a terminal must not be read
    /// past the end of file its user typed), not for its writes.
    private var streamReading = false
    /// A stream's write failed and its reading was stopped, as cp reads no more after a failed write.
    private var inputStopped = false
    private var waitingForBudget = false
    private var error: String?
    private var finishing = false
    /// The destination was made by the exclusive create, so it is a regular file.
    private var createdDestination = false
    /// The size from `statx` is not to be trusted: a whole-file copy found the source's size changed.
    private var readToEnd = false
    /// The copy goes on the walker's word that the destination was not there, taken before it waited in the
    /// backlog (``KnownStatus/takenEarlier``), until it takes both statuses again (once).
    private var onWalkersWord: Bool
    /// The `-v` line waits for the first attempt's outcome (see ``open(onQueue:)``).
    private var announcementDeferred = false
    /// Where the destination's written bytes stop being a prefix of the source: the lowest offset a chunk
    /// failed to read or write from. Chunks run at once, so later ones may be written past it.
    private var failedFrom: Int64?
    /// The first write's error, which may end the run as its signal would have ended cp's (`EFBIG` past
    /// `ulimit -f`, `EPIPE` into a FIFO without reader), once the file is cut back to its prefix.
    private var writeFailure: Errno?

    /// The destination's directory was made by this run, so nothing can be at the destination yet: its
    /// `statx` is skipped, as cp skips its `stat` there (the exclusive create still catches a race).
    private var destinationIsNew: Bool { file.destinationIsNew }
    /// How the ring reaches both files; holds their directories open until this copy has ended.
    private var location: FileLocation { file.location }
    /// This file's place among dcopy's messages (see ``Messages``): its `-v` line goes there once the copy
    /// is past the source's status and the destination's checks, where cp prints it (before opening
    /// anything), and its error when it ends.
    private var place: Int { file.place }
    /// Both files' status, when the walker took them just before: the ring need not take them again.
    private var known: KnownStatus? { file.known }

    init(copier: Copier, file: PendingFile) {
        self.copier = copier
        self.file = file
        self.onWalkersWord = file.known?.takenEarlier == true
        self.queue = copier.queueForNextFile()
    }

    // MARK: Opening

    func start() {
        // Queued before a write's error ended the run: cp never reached it.
        if copier.isEnding { return end() }
        if let known, known.takenEarlier {
            // Only the walker's word on the destination, its absence, which the exclusive create checks
            // again: the source's status is taken now, as cp takes it, for its mode, kind and size (a
            // source made private, or replaced by a FIFO, while the copy waited was copied as it had been,
            // helper-57). Opened from that status's completion, on the ring thread.
            lock.withLock { destinationInfo = known.destination }
            return statSource { [self] in open() }
        }
        if let known {
            lock.withLock {
                sourceInfo = known.source
                destinationInfo = known.destination
            }
            return open()
        }
        takeStatuses()
    }

    /// Takes the statuses the copy starts from through the ring, then opens.
    private func takeStatuses() {
        if destinationIsNew {
            lock.withLock { destinationInfo = .failure(.noSuchFileOrDirectory) }
            // The source's status is all there is to wait for: open from its completion, without a hop
            // through the queue (submitting to the ring does not block).
            statSource { [self] in open() }
            return
        }
        // Both statuses come back on the ring thread; the second to arrive opens from there, as the source's
        // alone does above. A join on the queue cost a hop per file: 10,000 files named on the command line,
        // which mostly start here from the backlog, took 1.12-1.22x cp's time with it, 1.0-1.1x without.
        let pending = Atomic(2)
        let arrived: @Sendable () -> Void = { [self] in
            if pending.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { open() }
        }
        statSource(then: arrived)
        let (destinationDirectory, destinationPath) = location.destination(destination)
        engine.stat(destinationDirectory, path: destinationPath) { [self] result in
            lock.withLock { destinationInfo = result }
            arrived()
        }
    }

    /// Takes the source's status through the ring, then runs `next` on the ring thread.
    private func statSource(then next: @escaping @Sendable () -> Void) {
        let (directory, path) = location.source(source)
        engine.stat(directory, path: path) { [self] result in
            lock.withLock {
                switch result {
                case .success(let info): sourceInfo = info
                case .failure(let error): self.error = "cannot stat \(source.quoted): \(describe(error))"
                }
            }
            next()
        }
    }

    /// Runs on the queue, the walker's thread or the ring thread (a completion): anything but a submission
    /// goes to the queue. `onQueue`: it runs on the queue, where it may make a blocking call.
    private func open(onQueue: Bool = false) {
        let (info, existing, failure) = lock.withLock { (sourceInfo, destinationInfo, error) }
        guard let info, failure == nil else { return queue.async { [self] in end() } }
        if case .success(let other) = existing, other.isSameFile(as: info) || other.isDirectory {
            // cp refuses before opening anything.
            let refusal =
                other.isSameFile(as: info)
                ? sameFileRefusal(source, destination)
                : "cannot overwrite directory \(destination.quoted) with non-directory"
            return queue.async { [self] in
                // Unless the status came through a name of one of dcopy's own descriptors (`d/f` a link to
                // `/dev/fd/5`, 5 a directory the run holds: helper-46), which dangles, as for cp.
                let reach = DescriptorNames.reach(creating: destination)
                lock.withLock { error = reach.map { danglingNameRefusal(destination, $0) } ?? refusal }
                end()
            }
        }
        if let refusal = destinationStatRefusal(existing) {
            lock.withLock { error = refusal }
            return queue.async { [self] in end() }
        }
        let existed = if case .success = existing { true } else { false }
        // An empty source is looked at once more (a `statfs`: is it a kernel's file?), which may block on a
        // network file system: not on the ring thread (helper-49).
        if !onQueue && !existed && info.isRegularFile && info.size == 0 {
            return queue.async { [self] in open(onQueue: true) }
        }
        let whole = !existed && copiesWhole(info)
        // The walker's word on the destination stands only for a copy in one submission, whose exclusive
        // create fails if anything has been made there since: any other copy takes it again now.
        if !whole && retakesStatuses() { return takeStatuses() }
        // From the walker's word, the `-v` line waits for the first attempt: cp prints it only for a copy it
        // goes on with, and an attempt that cannot open the files takes their statuses again, which may end
        // in a refusal.
        if takesStatusesAgainOnFailure {
            lock.withLock { announcementDeferred = true }
        } else {
            copier.fileAnnounced(place, source: source, destination: destination)
        }
        if whole { return copyWhole(info) }
        openSource(info, existed: existed)
    }

    private func openSource(_ info: FileStatus, existed: Bool) {
        // The source first: cp creates nothing when the source cannot be read.
        let (directory, path) = location.source(source)
        engine.openat(directory, path: path, flags: O_RDONLY) { [self] result in
            let opened = lock.withLock { () -> Bool in
                if let failure = result.error {
                    error = message(.openSource, failure)
                    return false
                }
                sourceFD = CInt(result.result)
                return true
            }
            guard opened else { return queue.async { [self] in end() } }
            openDestination(info, existed: existed)
        }
    }

    // MARK: Small files

    /// Whether the file goes whole through one linked submission instead of two channels: a small
    /// regular file without holes and a destination to create. With `-p` the submission leaves both files
    /// open for `fchown`, the ACL, `fchmod` and `futimens` (where the engine cannot, it does not start).
    /// An empty file goes this way too: through channels it took cp's time four times over (helper-37:
    /// 10,000 empty files in 0.8 s against cp's 0.2). One whose size says 0 but that holds bytes comes
    /// back `.incomplete` from the probe and is read to its end through channels, except a kernel's file
    /// (procfs, sysfs, tracefs, debugfs), which goes through channels from the start: `trace_pipe` and
    /// `/proc/kmsg` give each byte once, and the probe's would be lost (helper-40).
    private func copiesWhole(_ info: FileStatus) -> Bool {
        guard Self.fitsOneSubmission(info) else { return false }
        return info.size > 0 || !isKernelMadeFile(atPath: source.cString)
    }

    /// A small regular file without holes, which ``copiesWhole(_:)`` takes unless it is an empty kernel's
    /// file (which is read to its end through channels, whatever its status said).
    static func fitsOneSubmission(_ info: FileStatus) -> Bool {
        info.isRegularFile && info.size >= 0 && info.size <= IOChannel.smallFileLimit
            && Int64(info.blocks) * 512 >= info.size
    }

    /// With `-p`, whether a small file's metadata is set by its name once its copy has closed it, rather
    /// than through both files kept open (an `IORING_OP_FIXED_FD_INSTALL` for each, and their closes through
    /// the ring afterwards). 10,000 files of 4 KiB with `-rp` took 1.11x cp's time the other way.
    private var setsMetadataByName: Bool {
        copier.options.preserve && location.privateDestination != nil
    }

    /// Copies a small file in one submission; the steps and the messages are the channel path's.
    private func copyWhole(_ info: FileStatus) {
        let (sourceDirectory, sourcePath) = location.source(source)
        let (destinationDirectory, destinationPath) = location.destination(destination)
        IOChannel.copySmallFile(
            from: sourcePath,
            in: sourceDirectory,
            to: destinationPath,
            in: destinationDirectory,
            flags: O_WRONLY | O_CREAT | O_EXCL,
            permissions: creationPermissions(info),
            size: Int(info.size),
            keepOpen: copier.options.preserve && !setsMetadataByName
        ) { [self] outcome in
            if case .failed(let step, _) = outcome, step == .openSource || step == .openDestination,
                retakesStatuses()
            {
                // Nothing was written. Something may have been made at the destination while the copy
                // waited with the walker's word on it: both statuses are taken again, as cp takes them just
                // before it opens, and the copy goes on from them (a link made to the source is then the
                // same file, a dangling one cp's refusal).
                return queue.async { [self] in takeStatuses() }
            }
            announceIfDeferred()
            switch outcome {
            case .copied where setsMetadataByName:
                copier.meter?.add(Int(info.size))
                // Blocking system calls, and this runs on the ring thread.
                queue.async { [self] in
                    if let directory = location.directories?.destination {
                        preserveMetadata(info, byNameIn: directory)
                    }
                    end()
                }
            case .copied:
                copier.meter?.add(Int(info.size))
                copier.copyEnded(file, errors: [])
            case .copiedOpen(let sourceFD, let destinationFD):
                copier.meter?.add(Int(info.size))
                lock.withLock {
                    self.sourceFD = sourceFD
                    self.destinationFD = destinationFD
                }
                // The -p metadata and the closes, as after a copy through channels; on the queue, since
                // `fchown` and the rest are system calls that can block, and this runs on the ring thread.
                queue.async { [self] in finish() }
            case .notStarted:
                openSource(info, existed: false)
            case .incomplete:
                // The source changed size since its statx, or cannot be spliced: copy it again through
                // channels, to its end whatever its size now. The file just made is removed first, and
                // made again by the exclusive create: it has the source's mode, which may not let its owner
                // open it for writing again (a read-only source). On the queue: `unlink` can block, and
                // this handler runs on the ring thread.
                queue.async { [self] in
                    unlink(destination.cString)
                    lock.withLock { readToEnd = true }
                    openSource(info, existed: false)
                }
            case .failed(let step, let failure):
                // cp dies of SIGXFSZ past `ulimit -f`, and of SIGPIPE writing a FIFO without reader, with
                // no message.
                let ends = step == .write && copier.endRun(after: failure)
                queue.async { [self] in
                    copier.copyEnded(file, errors: ends ? [] : [message(step, failure)])
                }
            }
        }
    }

    /// Whether the copy runs on the walker's word on the destination (see ``onWalkersWord``).
    private var takesStatusesAgainOnFailure: Bool { lock.withLock { onWalkersWord } }

    /// Whether the copy takes both statuses again: once, where it ran on the walker's word.
    private func retakesStatuses() -> Bool {
        lock.withLock {
            guard onWalkersWord else { return false }
            onWalkersWord = false
            sourceInfo = nil
            destinationInfo = nil
            announcementDeferred = false
            return true
        }
    }

    /// Puts the `-v` line that ``open(onQueue:)`` held back in its place, now that the copy goes on.
    private func announceIfDeferred() {
        let deferred = lock.withLock {
            defer { announcementDeferred = false }
            return announcementDeferred
        }
        if deferred { copier.fileAnnounced(place, source: source, destination: destination) }
    }

    /// The mode a new destination is made with: the source's permission bits (less the umask, which the
    /// kernel applies), and with `-p` only its owner's, as cp makes it, until `finish` has set the owner and
    /// then the whole mode. The copy of a file the copier does not own (640 root:shadow) was readable by the
    /// copier's group while it was written, and stayed so when the copy failed (helper-41).
    private func creationPermissions(_ info: FileStatus) -> FilePermissions {
        FilePermissions(rawValue: CModeT(info.mode & (copier.options.preserve ? 0o700 : 0o777)))
    }

    /// cp's message for a failed step, on either path. `existed`: the destination was there before (it is
    /// opened for writing, not created).
    private func message(_ step: FileCopyStep, _ failure: Errno, existed: Bool = false) -> String {
        switch step {
        case .openSource: "cannot open \(source.quoted) for reading: \(describe(failure))"
        // coreutils 9 says "create" also when the file existed and could not be opened for writing.
        case .openDestination:
            danglingLinkRefusal(failure, existed: existed)
                ?? "cannot create regular file \(destination.quoted): \(describe(failure))"
        case .read: "error reading \(source.quoted): \(describe(failure))"
        case .write: "error writing \(destination.quoted): \(describe(failure))"
        case .closeDestination: "failed to close \(destination.quoted): \(describe(failure))"
        }
    }

    /// `refusingMagicLinks`: an existing destination is opened only if no magic link leads to it, since
    /// one may name one of dcopy's own descriptors (`d/f` a link to `/dev/fd/5`, helper-46: another
    /// source's file was cut and written over). Such a name dangles, as it would for cp with the
    /// descriptor closed; one that leads to a descriptor the process was started with is opened again
    /// without the check.
    private func openDestination(_ info: FileStatus, existed: Bool, refusingMagicLinks: Bool = true) {
        // A new file gets the source's permission bits less the umask (the kernel applies it), as with cp.
        let permissions = creationPermissions(info)
        // A new file is made with O_EXCL, as cp does, so that a dangling symbolic link is not written through.
        let flags = O_WRONLY | O_CREAT | O_TRUNC | (existed ? 0 : O_EXCL)
        let (directory, path) = location.destination(destination)
        let refusing = existed && refusingMagicLinks
        engine.openat(directory, path: path, flags: flags, permissions: permissions, refusingMagicLinks: refusing) {
            [self] result in
            // ELOOP: a magic link on the way; ENOENT: a link to a descriptor closed since the status was
            // taken; ENOSYS, EPERM: no openat2 here.
            if refusing, let failure = result.error,
                [.tooManySymbolicLinkLevels, .noSuchFileOrDirectory, .noFunction, .notPermitted].contains(failure)
            {
                return queue.async { [self] in
                    guard let reach = DescriptorNames.reach(destination) else {
                        return openDestination(info, existed: existed, refusingMagicLinks: false)
                    }
                    lock.withLock { error = danglingNameRefusal(destination, reach) }
                    begin(info)
                }
            }
            lock.withLock {
                if let failure = result.error {
                    error = message(.openDestination, failure, existed: existed)
                } else {
                    destinationFD = CInt(result.result)
                    createdDestination = !existed
                }
            }
            queue.async { [self] in begin(info) }
        }
    }

    /// cp's `cannot stat` when the destination's status failed for a reason other than its absence (a
    /// non-directory or an unsearchable directory on the way): cp stops there, before opening anything.
    private func destinationStatRefusal(_ existing: Result<FileStatus, Errno>?) -> String? {
        guard case .failure(let failure) = existing, failure != .noSuchFileOrDirectory else { return nil }
        return "cannot stat \(destination.quoted): \(describe(failure))"
    }

    /// cp's refusal when the exclusive create found a name that `stat` did not: a symbolic link to nothing.
    private func danglingLinkRefusal(_ failure: Errno, existed: Bool) -> String? {
        var byte: CChar = 0
        guard failure == .fileExists, !existed, readlink(destination.cString, &byte, 1) >= 0 else { return nil }
        return "not writing through dangling symlink \(destination.quoted)"
    }

    private func begin(_ info: FileStatus) {
        let canRun = lock.withLock { error == nil }
        guard canRun else { return end() }
        seekable = info.isRegularFile
        if info.mode & UInt32(S_IFMT) == UInt32(S_IFIFO) { growPipe(sourceFD) }
        var status = stat()
        // A file this copy created is regular; an existing destination may be a device or a FIFO.
        positionedOutput =
            createdDestination || fstat(destinationFD, &status) == 0 && status.st_mode & S_IFMT == S_IFREG
        if seekable && info.size > 0 && !lock.withLock({ readToEnd }) {
            size = info.size
            sizeAtStart = info.size
            // Fewer blocks than the size needs means holes: copy only the data extents.
            sparse = positionedOutput && Int64(info.blocks) * 512 < info.size
        }
        input = IOChannel(
            type: seekable ? .random : .stream,
            fileDescriptor: FileDescriptor(rawValue: sourceFD),
            queue: queue
        ) { _ in }
        output = IOChannel(
            type: positionedOutput ? .random : .stream,
            fileDescriptor: FileDescriptor(rawValue: destinationFD),
            queue: queue
        ) { _ in }
        // A regular file's reads deliver in one call (a chunk is one pooled buffer); a stream's deliver what
        // arrives, which is written at once, as cp writes each read (see `readStream`). Writes report only
        // their end.
        input?.setLimit(lowWater: seekable ? Int.max : 1)
        output?.setLimit(lowWater: Int.max)
        lock.withLock {
            if sparse {
                findExtent(from: 0)
            } else {
                extentEnd = size ?? Int64.max
            }
        }
        pump()
    }

    // MARK: Data

    /// Moves `next`/`extentEnd` to the data extent at or after `offset`. Lock held. The holes it skips count
    /// as copied for `--progress`, whose total is the files' sizes: a sparse file's bar ended at 0 % (helper-63).
    private func findExtent(from offset: Int64) {
        let start = lseek(sourceFD, off_t(offset), seekData)
        if start < 0 && errno == ENXIO {
            // No data after `offset`: the rest is a hole that ftruncate makes.
            reachedEnd = true
            if let size, size > offset { copier.meter?.add(Int(size - offset)) }
            return
        }
        if start < 0 {
            // The file system cannot tell (EINVAL: a procfs file whose size says 498 bytes in 0 blocks,
            // /proc/cmdline): the rest is copied whole, as cp copies it. Taken as no data, the copy was the
            // size in zeros, with status 0 (helper-48).
            sparse = false
            next = offset
            extentEnd = size ?? Int64.max
            return
        }
        if start > offset { copier.meter?.add(Int(Int64(start) - offset)) }
        let end = lseek(sourceFD, start, seekHole)
        next = Int64(start)
        extentEnd = end < 0 ? (size ?? Int64.max) : Int64(end)
    }

    /// Issues reads while the file has chunks to read, room of its own, and room in the shared budget.
    private func pump() {
        var reads: [(offset: Int64, length: Int)] = []
        var done = false
        lock.withLock {
            // A regular file whose size says 0 but holds data is generated as it is read (/proc): one chunk
            // at a time, in order, since a read far ahead makes the kernel generate everything before it.
            // A stream's reads run one at a time in order; its chunks' writes may overlap the next read.
            let limit = (seekable && positionedOutput && size != nil) || !seekable ? Limits.perFile : 1
            while error == nil, !reachedEnd, !waitingForBudget, !streamReading, chunksInFlight < limit {
                if next >= extentEnd {
                    if sparse, size.map({ extentEnd < $0 }) == true {
                        findExtent(from: extentEnd)
                        continue
                    }
                    reachedEnd = true
                    break
                }
                guard copier.budget.take(orWhenFree: { [self] in wake() }) else {
                    waitingForBudget = true
                    break
                }
                let length = Int(min(Int64(Limits.chunk), extentEnd - next))
                reads.append((next, length))
                next += Int64(length)
                chunksInFlight += 1
                streamReading = !seekable
            }
            done = chunksInFlight == 0 && (reachedEnd || error != nil) && !finishing
            if done { finishing = true }
        }
        for (offset, length) in reads { read(offset: offset, length: length) }
        if done { finish() }
    }

    /// A chunk of the budget was handed to this file: use it for the next read, or hand it on.
    private func wake() {
        queue.async { [self] in
            var chunk: (offset: Int64, length: Int)?
            lock.withLock {
                waitingForBudget = false
                if error == nil, !reachedEnd, !streamReading, next < extentEnd {
                    let length = Int(min(Int64(Limits.chunk), extentEnd - next))
                    chunk = (next, length)
                    next += Int64(length)
                    chunksInFlight += 1
                    streamReading = !seekable
                }
            }
            if let chunk {
                read(offset: chunk.offset, length: chunk.length)
            } else {
                copier.budget.give()
            }
            pump()
        }
    }

    private func read(offset: Int64, length: Int) {
        guard let input, let output else { return }
        if !seekable { return readStream(input, output, offset: offset, length: length) }
        let collected = Locked(DispatchDataBuffer())
        input.read(offset: offset, length: length, queue: queue) { [self] done, data, failure in
            if let data { collected.withLock { $0.append(data) } }
            guard done else { return }
            if let failure {
                chunkDone(error: message(.read, failure), failedFrom: offset)
                return
            }
            let data = collected.withLock { $0 }
            if data.count < length {
                // Shorter than asked: the end of the file (a /proc file, a stream, a file that shrank, a
                // sysfs file whose size says 4096 whatever it holds). A sparse copy sets its size at the
                // end, so it must be where the data ended, not the size from statx, or the copy would end
                // in zeros the source never had. Chunks complete in any order: the first end counts.
                lock.withLock {
                    reachedEnd = true
                    if seekable { size = min(size ?? Int64.max, offset + Int64(data.count)) }
                }
            }
            guard !data.isEmpty else { return chunkDone(error: nil) }
            output.write(offset: offset, data: data, queue: queue) { [self] done, remaining, failure in
                guard done else { return }
                let written = data.count - (failure == nil ? 0 : remaining?.count ?? data.count)
                copier.meter?.add(written)
                if let failure { lock.withLock { writeFailure = writeFailure ?? failure } }
                chunkDone(
                    error: failure.map { message(.write, $0) },
                    failedFrom: failure == nil ? nil : offset + Int64(written)
                )
            }
        }
    }

    /// Reads a chunk of a FIFO, pipe, socket or device and writes each piece as it arrives, as cp writes what
    /// each read brought: the chunk waited for a megabyte or the end, so bytes taken from a pipe whose writer
    /// paused sat in memory, and a dcopy killed meanwhile lost them (helper-48: `(echo a; sleep 2; echo b) |
    /// timeout 1 dcopy /dev/stdin out` left `out` empty; cp's held `a`). The chunk is done once the read has
    /// ended and every piece is written.
    private func readStream(_ input: IOChannel, _ output: IOChannel, offset: Int64, length: Int) {
        // Writes under way plus one for the read; bytes read; the first error and where the prefix ends.
        let state = Locked<(pending: Int, received: Int, error: String?, failedFrom: Int64?)>((1, 0, nil, nil))
        let release: @Sendable () -> Void = { [self] in
            let ended = state.withLock { state -> (String?, Int64?)? in
                state.pending -= 1
                return state.pending == 0 ? (state.error, state.failedFrom) : nil
            }
            if let (error, failedFrom) = ended { chunkDone(error: error, failedFrom: failedFrom) }
        }
        // No system call asks for less than cp's 128 KiB: the chunk ends where the next one would (see
        // `Limits.leastStreamRead`), and the next chunk goes on after the bytes this one brought.
        input.read(length: length, askingAtLeast: Limits.leastStreamRead, queue: queue) {
            [self] done, data, failure in
            if let data, !data.isEmpty, !lock.withLock({ inputStopped }) {
                // Handlers run in order on the serial queue: each piece goes after the one before.
                let at = state.withLock { state -> Int64 in
                    state.pending += 1
                    defer { state.received += data.count }
                    return offset + Int64(state.received)
                }
                output.write(offset: at, data: data, queue: queue) { [self] done, remaining, failure in
                    guard done else { return }
                    let written = data.count - (failure == nil ? 0 : remaining?.count ?? data.count)
                    copier.meter?.add(written)
                    if let failure {
                        let stop = lock.withLock { () -> Bool in
                            writeFailure = writeFailure ?? failure
                            defer { inputStopped = true }
                            return !inputStopped
                        }
                        state.withLock { state in
                            state.error = state.error ?? message(.write, failure)
                            state.failedFrom = min(state.failedFrom ?? .max, at + Int64(written))
                        }
                        // cp reads no more after a failed write: the read under way is stopped, or a FIFO
                        // whose writer paused held the copy, and its SIGPIPE, until it wrote a megabyte or
                        // closed (helper-49: 7 s, where cp ended in 13 ms).
                        if stop { input.close(flags: .stop) }
                    }
                    release()
                }
            }
            guard done else { return }
            // A read stopped after a failed write ends canceled: the write's error is the copy's.
            let stopped = failure == .canceled && lock.withLock { inputStopped }
            let received = state.withLock { state -> Int in
                if let failure, !stopped {
                    state.error = state.error ?? message(.read, failure)
                    state.failedFrom = min(state.failedFrom ?? .max, offset + Int64(state.received))
                }
                return state.received
            }
            let endOfFile = failure == nil && (data?.isEmpty ?? true)
            lock.withLock {
                streamReading = false
                next = offset + Int64(received)
                // Only the end of file ends the read with a final call that brings nothing.
                if endOfFile { reachedEnd = true }
            }
            release()
            // The next chunk's read, while this one's pieces may still be written.
            pump()
        }
    }

    private func chunkDone(error failure: String?, failedFrom offset: Int64? = nil) {
        lock.withLock {
            chunksInFlight -= 1
            if let failure, error == nil { error = failure }
            if let offset { failedFrom = min(failedFrom ?? offset, offset) }
        }
        copier.budget.give()
        pump()
    }

    // MARK: Ending

    /// Every chunk is written: set the size of a sparse file, or of a file that ended before its size, the
    /// `-p` metadata, then close both files.
    ///
    /// A file that shrank while it was read ends where the first short read found its end; chunks past
    /// it, read before the file shrank, may have been written already (chunks complete in any order), and
    /// the destination is cut back to that end. cp, reading in order, never goes past it: without this the
    /// copy held bytes past the end, and zeros where the chunks between were never written.
    ///
    /// A copy that failed (a full disk, a read error) is cut back to where its first failed chunk stopped,
    /// so that it holds a prefix of the source, as cp's does: later chunks may have been written past it,
    /// and the file had the source's size with zeros in between (helper-37: 13 runs in 20 of a 1 MiB file
    /// into a 512 KiB tmpfs).
    private func finish() {
        let (failure, sizeToSet, failedFrom) = lock.withLock { () -> (String?, Int64?, Int64?) in
            let shrank = positionedOutput && size.map { $0 < sizeAtStart ?? .max } == true
            // A source that also shrank ends where it ended, if that is sooner.
            let cut = positionedOutput ? self.failedFrom.map { min($0, size ?? .max) } : nil
            return (error, sparse || shrank ? size : nil, cut)
        }
        if let failedFrom {
            // Best effort: the error already reported is the copy's.
            _ = ftruncate(destinationFD, off_t(failedFrom))
        }
        // cp dies of SIGXFSZ past `ulimit -f`, and of SIGPIPE writing a FIFO without reader, with no message.
        if let writeFailure = lock.withLock({ writeFailure }), copier.endRun(after: writeFailure) {
            lock.withLock { error = nil }
            return end()
        }
        if failure == nil, let sizeToSet, ftruncate(destinationFD, off_t(sizeToSet)) != 0 {
            let failure = Errno(rawValue: errno)
            lock.withLock { error = message(.write, failure) }
        }
        if failure == nil && copier.options.preserve, let info = lock.withLock({ sourceInfo }) {
            preserveMetadata(info)
        }
        end()
    }

    /// `-p`: the source's owner, ACL, mode and times, through the descriptors the copy holds, or given
    /// `directory`, the descriptor of the destination's directory, by the destination's name in it (see
    /// ``FileLocation/privateDestination``) and the source's path. Failures go in `error`.
    private func preserveMetadata(_ info: FileStatus, byNameIn directory: CInt? = nil) {
        let name = location.name
        // cp leaves the owner as it is where the new file already has the source's, as in a directory this
        // run made (see ``FileLocation/privateDestination``): 7 % of `-rp` of small files' time.
        let alreadyOwned = directory != nil && location.privateDestination == FileOwner(user: info.uid, group: info.gid)
        let ownerKept = alreadyOwned || changeOwner(info.uid, info.gid, byNameIn: directory)
        // cp -p keeps the group if it can when the owner cannot be kept, and says nothing.
        if !ownerKept { _ = changeOwner(uid_t.max, info.gid, byNameIn: directory) }
        // One message, as cp gives: an fchmod after a failed ACL fails the same way.
        var permissionsFailure: Errno?
        // Where the source's ACL could not be looked at or set by name, the copy keeps the owner's bits it
        // was made with: its mode alone could give the group what the ACL's mask held back (helper-59:
        // procfs unmounted during the run). Except where the destination's file system holds no ACLs, as
        // cp then sets the mode.
        var keepsCreationMode = false
        if let directory {
            // The new file has no ACL to remove (its directory has no default ACL); a source's is set through
            // procfs's name for the directory, since there is no `fsetxattrat`. Rare: an ACL on every file.
            switch accessControlList(of: .path(source)) {
            case .absent:
                break
            case .present:
                let target = PathName("/proc/self/fd/\(directory)").appending(name)
                if let failure = preserveAccessControlLists(
                    from: .path(source),
                    to: .path(target),
                    isDirectory: false
                ) {
                    permissionsFailure = Errno(rawValue: failure)
                    keepsCreationMode = failure != EOPNOTSUPP
                }
            case .unknown(let failure):
                // (The source gone since its copy.)
                permissionsFailure = Errno(rawValue: failure)
                keepsCreationMode = true
            }
        } else {
            permissionsFailure = preserveAccessControlLists(
                from: .descriptor(sourceFD),
                to: .descriptor(destinationFD),
                isDirectory: false
            ).map { Errno(rawValue: $0) }
        }
        // The destination is a regular file whatever the source was (a FIFO or a device read for its
        // bytes without -r): cp 9.1 drops set-ID and sticky bits by the destination's type.
        let mode = mode_t(info.mode) & preservedModeBits(ownerKept: ownerKept, type: S_IFREG)
        if !keepsCreationMode
            && (directory.map { fchmodat($0, name.cString, mode, 0) } ?? fchmod(destinationFD, mode)) != 0
        {
            permissionsFailure = permissionsFailure ?? Errno(rawValue: errno)
        }
        if let permissionsFailure {
            lock.withLock {
                error = "preserving permissions for \(destination.quotedForLocale): \(describe(permissionsFailure))"
            }
        }
        let times = [info.accessTime, info.modificationTime]
        let timesSet =
            directory.map { utimensat($0, name.cString, times, AT_SYMLINK_NOFOLLOW) } ?? futimens(destinationFD, times)
        if timesSet != 0 {
            let failure = Errno(rawValue: errno)
            lock.withLock { error = "preserving times for \(destination.quoted): \(describe(failure))" }
        }
    }

    private func changeOwner(_ owner: uid_t, _ group: gid_t, byNameIn directory: CInt?) -> Bool {
        guard let directory else { return fchown(destinationFD, owner, group) == 0 }
        return fchownat(directory, location.name.cString, owner, group, AT_SYMLINK_NOFOLLOW) == 0
    }

    /// Closes the channels and the descriptors through the ring, reports any error, and frees the slot.
    private func end() {
        let (input, output, sourceFD, destinationFD, failure) = lock.withLock {
            (self.input, self.output, self.sourceFD, self.destinationFD, error)
        }
        input?.close()
        output?.close()
        lock.withLock {
            self.input = nil
            self.output = nil
        }
        let descriptors = [sourceFD, destinationFD].filter { $0 >= 0 }
        guard !descriptors.isEmpty else {
            return copier.copyEnded(file, errors: failure.map { [$0] } ?? [])
        }
        // The file's messages wait for both closes: a close can fail (EIO from a network file system's
        // write-back), which cp reports as `failed to close`, the destination's then the source's, after
        // any earlier error.
        let remaining = Locked((count: descriptors.count, source: String?.none, destination: String?.none))
        for fd in descriptors {
            engine.close(fd) { [self] result in
                let ended = remaining.withLock { state -> [String]? in
                    if let error = result.error {
                        let isDestination = fd == destinationFD
                        let text =
                            "failed to close \((isDestination ? destination : source).quoted): \(describe(error))"
                        if isDestination { state.destination = text } else { state.source = text }
                    }
                    state.count -= 1
                    guard state.count == 0 else { return nil }
                    return [failure, state.destination, state.source].compactMap { $0 }
                }
                // The completion only frees a slot (a semaphore signal and a group leave), so it runs
                // straight from the last close's completion instead of taking a hop through the queue.
                if let ended {
                    copier.copyEnded(file, errors: ended)
                }
            }
        }
    }
}
