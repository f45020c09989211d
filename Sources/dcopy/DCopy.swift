import ArgumentParser
import DispatchIO
import DispatchQueues
import Synchronization
import SystemPackage
import ToolSupport
import URing

#if canImport(Glibc)
import Glibc
#endif

/// `dcopy`: GNU `cp` for `SRC DST`, `SRC... DIR` and `-r`, with `-p`, `-v` and `--progress`.
///
/// The main thread walks the sources with plain metadata calls (`lstat`, `readdir`, `mkdir`, `symlink`)
/// and hands every regular file to a ``FileCopy``, at most ``Limits/files`` at once; each file is
/// stat'ed, opened and closed through the engine's ring and its bytes move through two ``IOChannel``s.
@main
struct DCopy: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dcopy",
        abstract: "Copy files and directories, through io_uring.",
        usage: """
            dcopy [-r] [-p] [-v] [--progress] SRC DST
            dcopy [-r] [-p] [-v] [--progress] SRC... DIR
            """,
        // `--help` only: cp refuses `-h` as an invalid option, and so does dcopy.
        helpNames: .long
    )

    @Flag(name: [.customShort("r"), .customShort("R"), .long], help: "Copy directories recursively.")
    var recursive = false

    @Flag(name: .customShort("p"), help: "Keep mode, ownership and timestamps.")
    var preserve = false

    @Flag(name: .shortAndLong, help: "Explain what is being done.")
    var verbose = false

    @Flag(name: .long, help: "Show a progress bar on standard error when it is a terminal.")
    var progress = false

    /// Never filled by the parser, which sees only the options; declared for the help text. The operands
    /// are taken from ``words``.
    @Argument(help: "Sources, then the destination.")
    var paths: [String] = []

    static func main() {
        if let problem = unreadableCommandLine() {
            printError("dcopy: \(problem)\n")
            Glibc.exit(1)
        }
        // A command line without options (`dcopy a b`, cp's commonest use) skips ArgumentParser, as dcat's
        // does: with nothing to parse, its parse only costs the start-up its reflection over every protocol
        // conformance of the binary, and its defaults are the flags' (all off). The operands are argv's
        // anyway (``words``), and their checks (a missing one, a directory without -r) are the copier's.
        if words.options.isEmpty {
            copy(recursive: false, preserve: false, verbose: false, progress: false)
        }
        // Abbreviated long options written out, as getopt takes them (`--rec`).
        let (options, ambiguity) = expandingAbbreviations(
            words.optionStrings,
            longFlags: ["recursive", "verbose", "progress", "help"]
        )
        // cp's words and exit status (1) for an option it does not have, not ArgumentParser's (64).
        let refusal =
            ambiguity
            ?? unknownOptionMessage(
                in: options,
                shortFlags: ["r", "R", "p", "v"],
                longFlags: ["recursive", "verbose", "progress", "help"]
            )
        do {
            if let refusal { throw ValidationError(refusal) }
            // ArgumentParser gets the options alone: its parse of positional arguments takes time that
            // grows with their square (6,000 sources: 1.1 s, where cp takes 0.02 s of user time), and the
            // operands are read from argv anyway (``words``).
            var command = try parseAsRoot(options)
            try command.run()
        } catch  where exitCode(for: error) == .validationFailure {
            printError("dcopy: \(refusal ?? message(for: error))\nTry 'dcopy --help' for more information.\n")
            Glibc.exit(1)
        } catch {
            exit(withError: error)
        }
    }

    func run() throws {
        Self.copy(recursive: recursive, preserve: preserve, verbose: verbose, progress: progress)
    }

    /// Copies the operands with these options and exits with the copier's status.
    private static func copy(recursive: Bool, preserve: Bool, verbose: Bool, progress: Bool) -> Never {
        // Before anything opens a descriptor (the engine opens its ring when the copier is made).
        let standard = StandardDescriptors.reserve()
        WriteSignals.noteDispositions()
        // cp's -v lines wait in stdio's buffer, so a reader that went away ends cp by SIGPIPE at a flush,
        // after its copies (at the end, for a short run): dcopy's lines are written one by one, and a
        // thread that writes one would otherwise die of it part-way through the tree.
        WriteSignals.holdBrokenPipe()
        let options = Options(recursive: recursive, preserve: preserve, verbose: verbose)
        let copier = Copier(
            options: options,
            showProgress: progress && isatty(STDERR_FILENO) == 1,
            standardDescriptors: standard
        )
        Glibc.exit(copier.run(words.operands))
    }

    /// The command line, split as getopt splits it; the operands are its bytes as the kernel gave them.
    private static let words = CommandLineWords.current()
}

/// What the command line asked for.
struct Options: Sendable {
    var recursive: Bool
    var preserve: Bool
    var verbose: Bool
}

/// Bounds on concurrency and memory.
enum Limits {
    /// Files copied at once: enough to keep the ring busy with small files' opens, stats and closes, and
    /// as many as the engine has lanes for whole-file copies (64: see `URingBackend.copyLanes` for the
    /// measurements). Each may hold two descriptors, so under a low descriptor limit fewer run: a quarter
    /// of the limit left after 16 for the process itself (standard streams, the walk's open directory), as
    /// cp copies a tree with a handful. `ulimit -n 64` gives 12; 64 files need a limit of 272.
    static let files = max(1, min(64, (descriptorLimit - 16) / 4))
    /// Files found by the walk and not yet started, at most; the walker waits when there are this many.
    static let backlog = 1024
    /// Read chunks (each at most ``chunk`` bytes) read but not yet written, across all files: the data in
    /// memory stays under `chunks × chunk` (4 MiB) whatever the file sizes or how slow the destination.
    static let chunks = 4
    /// Bytes one read asks for: the channel's pooled buffer size, so one read is one system call.
    static let chunk = 1 << 20
    /// The least a stream's read system call asks for (a FIFO, pipe, device or terminal copied for its
    /// bytes): cp's 128 KiB. A chunk's read ends where its next system call would ask for less. A system call
    /// asking for less than the next packet of a packet-mode pipe (`pipe2` with `O_DIRECT`, whose read end
    /// cannot be told from any other pipe's) gets its first bytes while the kernel drops the rest, and a
    /// chunk's last read used to ask only for what the megabyte had left: 2,000 packets of 3,000 bytes gave
    /// 5,992,880 bytes, status 0, where cp copied all 6,000,000. A device may do the same with its records,
    /// or refuse such a read (`/dev/kmsg`: `EINVAL`). (A socket, the other source that keeps messages,
    /// cannot be opened by name: `/dev/stdin` on one fails with `ENXIO`, for cp too.) Chunks of one system
    /// call each made every packet a chunk: 10,000 packets of 4 KiB took 0.34 s against 0.14 (helper-67).
    static let leastStreamRead = 128 << 10
    /// Chunks of one file in flight at once (reads on a regular file can overlap their writes). With 1 MiB
    /// chunks, 2 per file and 4 in all copied 1 GiB in 0.96× the time of 4 × 512 KiB per file and 8 in all,
    /// with half the user CPU (alternating runs, 2026-11-24).
    static let perFile = 2
    /// Directory pairs held open for the files queued or running in them (two descriptors each): 64, or
    /// fewer under a low descriptor limit, so that they take at most a quarter of it. Past this, files are
    /// named by their whole paths: a wide tree cannot starve the walk's own opens. None in a serial walk.
    static let openDirectories = serialWalk ? 0 : min(64, descriptorLimit / 8)
    /// Under a limit below 16 the walk reads a directory only while no file is being copied. Otherwise a
    /// directory opened for reading while a file's two are open could be the descriptor too many (then the
    /// ring's too: at `ulimit -n 6` a two-file tree failed one time in two with `Too many open files`).
    /// cp, doing one thing at a time, needs 5, and so does a serial walk.
    static let serialWalk = descriptorLimit < 16
    /// The soft limit on open descriptors (`RLIMIT_NOFILE`).
    static let descriptorLimit: Int = {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        return Int(min(limit.rlim_cur, 1 << 20))
    }()
}

/// A source directory and its copy, held open while files in them are copied: the ring then looks up
/// each file's name in its directory instead of walking its whole path, for the source's `statx`, the
/// source's open and the destination's create. On 10,000 files of 4 KiB copied from
/// /dev/shm/bench-tools/small (five components deep) this took 1.5–4 % off (100.8 against 102.3 ms, and
/// 99.8 against 103.7, alternating; cp: 69.5 ms): the kernel's dentry lookups fell from 11 % of its
/// worker threads' time to 3 %.
///
/// Both descriptors are `O_PATH`: they only name the directories. They are closed when the last file
/// that uses them lets the pair go.
final class DirectoryPair: Sendable {
    let source: CInt
    let destination: CInt
    /// Where the destination directory, as opened, is private (`privateDirectoryOwner`): the owner and group
    /// of a file made in it (see ``FileLocation/privateDestination``).
    let privateOwner: FileOwner?
    private static let count = Atomic<Int>(0)

    private init(source: CInt, destination: CInt, privateOwner: FileOwner?) {
        self.source = source
        self.destination = destination
        self.privateOwner = privateOwner
    }

    /// Opens both directories, or returns nil (too many pairs open, or either open failed): the files
    /// are then named by their paths, which reach the same errors. `checkingPrivacy`: whether to look at
    /// the destination, as opened, for ``privateOwner``.
    static func open(_ source: PathName, _ destination: PathName, checkingPrivacy: Bool) -> DirectoryPair? {
        let flags = openPath | O_DIRECTORY | O_CLOEXEC
        guard
            let (sourceFD, destinationFD) = opening(
                { Glibc.open(source.cString, flags) },
                { Glibc.open(destination.cString, flags) }
            )
        else { return nil }
        // Looked at through the descriptor the copies use: the path leads where its parent says, and a
        // parent others can write let them put their own directory there between the `mkdir` and this open
        // (helper-57).
        let owner = checkingPrivacy ? privateDirectoryOwner(destinationFD) : nil
        return DirectoryPair(source: sourceFD, destination: destinationFD, privateOwner: owner)
    }

    /// A pair of copies (`dup`) of two directories the caller holds open, or nil as ``open(_:_:checkingPrivacy:)``
    /// gives it: the copies' calls then reach the directories the caller looked in, whatever their paths
    /// name meanwhile. Not for a destination whose privacy matters.
    static func sharing(source: CInt, destination: CInt) -> DirectoryPair? {
        guard
            let (sourceFD, destinationFD) = opening(
                { fcntl(source, F_DUPFD_CLOEXEC, 0) },
                { fcntl(destination, F_DUPFD_CLOEXEC, 0) }
            )
        else { return nil }
        return DirectoryPair(source: sourceFD, destination: destinationFD, privateOwner: nil)
    }

    /// Takes a place among the pairs open at once, then a descriptor from `source` and, if it gave one, from
    /// `destination`; nil (the place given back, a descriptor taken closed) when there is no place or either
    /// fails.
    private static func opening(_ source: () -> CInt, _ destination: () -> CInt) -> (CInt, CInt)? {
        guard count.add(1, ordering: .relaxed).newValue <= Limits.openDirectories else {
            count.subtract(1, ordering: .relaxed)
            return nil
        }
        let sourceFD = source()
        let destinationFD = sourceFD < 0 ? -1 : destination()
        guard sourceFD >= 0, destinationFD >= 0 else {
            if sourceFD >= 0 { close(sourceFD) }
            count.subtract(1, ordering: .relaxed)
            return nil
        }
        return (sourceFD, destinationFD)
    }

    deinit {
        close(source)
        close(destination)
        Self.count.subtract(1, ordering: .relaxed)
    }
}

/// Where a file is, for the calls that reach it through the ring: its name in an open directory, or its
/// path.
struct FileLocation: Sendable {
    /// The directories, held open as long as this location is.
    let directories: DirectoryPair?
    let name: PathName
    /// `name` copied once for the kernel, where the file is named in its directories: the source's `statx`
    /// and both opens of its copy take it (see ``source(_:)``). The walker makes it; each of those
    /// requests used to make its own on the ring thread, through a `FilePath`.
    private let kernelName: CPath?

    init(directories: DirectoryPair?, name: PathName) {
        self.directories = directories
        self.name = name
        // A directory entry's name: no slash, so nothing a `FilePath` would normalize.
        kernelName =
            directories == nil ? nil : name.withCString { CPath(UnsafeBufferPointer(start: $0, count: name.count)) }
    }

    /// With `-p`, where the destination's directory was made by this run and, as held open, is private (see
    /// `privateDirectoryOwner`: `-p` makes it without the group's and others' bits until the run ends, and
    /// it has no default ACL): the owner and group a file made in it gets, the directory's own (a new
    /// file takes the directory's group where it is set-group-ID, and otherwise the process's, which the
    /// directory took too). Such a file, made by the exclusive create through that descriptor, is still the
    /// copy's own when the copy has closed it: its `-p` metadata is set by its name in the directory's
    /// descriptor, and the copy need not keep both files open for it (see `FileCopy.setsMetadataByName`).
    var privateDestination: FileOwner? { directories?.privateOwner }

    /// The source, for the engine's calls: a directory descriptor (`AT_FDCWD` without a pair) and the path
    /// relative to it, copied for the kernel (the name's copy made once, see ``kernelName``).
    func source(_ path: PathName) -> (CInt, CPath) {
        if let directories, let kernelName { return (directories.source, kernelName) }
        return (AT_FDCWD, CPath(path.filePath))
    }

    /// The destination, as ``source(_:)``.
    func destination(_ path: PathName) -> (CInt, CPath) {
        if let directories, let kernelName { return (directories.destination, kernelName) }
        return (AT_FDCWD, CPath(path.filePath))
    }

    /// A file named by its paths alone.
    static let paths = FileLocation(directories: nil, name: "")
}

/// cp's refusal to copy a file onto itself: the destination is the source by another name (a hard link,
/// a symbolic link, the same path), and truncating it would destroy the source.
func sameFileRefusal(_ source: PathName, _ destination: PathName) -> String {
    "\(source.quoted) and \(destination.quoted) are the same file"
}

/// cp's refusal of a destination that names a descriptor that is closed, which is how one of dcopy's own
/// looks (see DescriptorNames): a link to it dangles, and its entry in `/proc/PID/fd` is not there.
func danglingNameRefusal(_ destination: PathName, _ reach: DescriptorNames.Reach) -> String {
    switch reach {
    case .link: "not writing through dangling symlink \(destination.quoted)"
    case .entry: "cannot create regular file \(destination.quoted): \(describe(.noSuchFileOrDirectory))"
    }
}

/// A file by device and inode.
struct FileID: Hashable {
    let device: dev_t
    let inode: ino_t

    init(_ info: stat) {
        device = info.st_dev
        inode = info.st_ino
    }

    init(device: dev_t, inode: ino_t) {
        self.device = device
        self.inode = inode
    }
}

/// The files that copies under way read and write, by count: a copy that would write a file another one
/// reads or writes, or read one another writes, waits for every copy before it (see `Copier.startFile`).
struct FilesInUse {
    var reading: [FileID: Int] = [:]
    var writing: [FileID: Int] = [:]
    /// Destinations that did not exist when their copy started, by name without `.` components: such a
    /// copy has no file to count until it has made one, and another operand may name that file as it is
    /// being written, as a destination spelled otherwise (`e/./d` for `e/d`, from a source `s/.`) or as a
    /// source. Two copies into one new file wrote it at once, and it came out a mix of both (helper-34).
    var creating: [PathName: Int] = [:]
    /// How many copies into an existing file have ended: a status taken before one of them ended may be
    /// out of date (that file may have been a source, through a destination that is a link to it).
    private(set) var overwritesEnded = 0

    private func conflicts(_ copy: FileInUse) -> Bool {
        if writing[copy.reading] != nil { return true }
        if let names = copy.names, creating[names.reading] != nil || creating[names.writing] != nil { return true }
        guard let destination = copy.writing else { return false }
        return writing[destination] != nil || reading[destination] != nil
    }

    /// Adds a copy's files, unless they conflict with a copy under way; whether they were added.
    mutating func add(_ copy: FileInUse) -> Bool {
        if conflicts(copy) { return false }
        reading[copy.reading, default: 0] += 1
        if let destination = copy.writing {
            writing[destination, default: 0] += 1
        } else if let names = copy.names {
            creating[names.writing, default: 0] += 1
        }
        return true
    }

    mutating func remove(_ copy: FileInUse) {
        Self.decrement(&reading, copy.reading)
        if let destination = copy.writing {
            Self.decrement(&writing, destination)
            overwritesEnded += 1
        } else if let names = copy.names {
            Self.decrement(&creating, names.writing)
        }
    }

    /// Whether a copy under way reads or writes `file`.
    func isUsed(_ file: FileID) -> Bool { reading[file] != nil || writing[file] != nil }

    private static func decrement<Key: Hashable>(_ counts: inout [Key: Int], _ key: Key) {
        if counts[key] == 1 { counts[key] = nil } else { counts[key, default: 0] -= 1 }
    }
}

/// What one copy reads and writes, for ``FilesInUse``: the source's file and the destination's when it
/// exists, and, where two operands can name one file differently, both names without `.` components.
struct FileInUse {
    let reading: FileID
    let writing: FileID?
    let names: (reading: PathName, writing: PathName)?
}

/// A command-line source as cp tells two apart: the file, its last component and its directory.
struct SourceMention: Hashable {
    let file: FileID
    let name: PathName
    let directory: FileID
}

/// The command-line sources seen so far, and the destinations they were copied to (whether a directory).
struct CommandLineSources {
    var mentions: Set<SourceMention> = []
    var made: [PathName: Bool] = [:]
}

/// A regular file found by the walk, waiting for its copy to start. A class: the backlog, the copy's
/// completion and the walker pass it on, and a structure of nine references was copied, retained and
/// released at each step (a few per cent of the ring thread's own time in `dcopy -r` of small files).
/// The walker alone changes it (``markQueued()``), before it hands it on.
final class PendingFile: @unchecked Sendable {
    let source: PathName
    let destination: PathName
    let location: FileLocation
    let destinationIsNew: Bool
    /// Its place among the messages, taken when the walk reached it.
    let place: Int
    /// The files it reads and writes (see ``FilesInUse``).
    let inUse: FileInUse
    /// Both files' status, when the walker has just taken them.
    private(set) var known: KnownStatus?

    init(
        source: PathName,
        destination: PathName,
        location: FileLocation,
        destinationIsNew: Bool,
        place: Int,
        inUse: FileInUse,
        known: KnownStatus?
    ) {
        self.source = source
        self.destination = destination
        self.location = location
        self.destinationIsNew = destinationIsNew
        self.place = place
        self.inUse = inUse
        self.known = known
    }

    /// Makes the file what the backlog keeps. A copy that starts later takes both statuses itself when it
    /// starts, as cp takes them just before it copies. With the walker's, a copy queued behind a FIFO that
    /// waited for its writer found its destination as it had been: `d/f`, made a link to its source `f` in
    /// the meantime, was opened with O_TRUNC and the source emptied, with status 0 (helper-47).
    ///
    /// Except the destination's absence, where the source is a small regular file with bytes in it: the
    /// copy still takes the source's status when it starts, and if that is still such a file, copies it in
    /// one linked submission whose exclusive create fails if anything has been made at the destination
    /// since (the copy then takes both statuses again: see ``KnownStatus/takenEarlier``). With `-v` the line
    /// waits for that first attempt, which cp's would follow. Ten thousand files named on the command line,
    /// which mostly wait here, each took a `statx` more through the ring without this.
    func markQueued() {
        known = known.flatMap { known in
            guard case .failure(.noSuchFileOrDirectory) = known.destination,
                known.source.size > 0, FileCopy.fitsOneSubmission(known.source)
            else { return nil }
            return KnownStatus(source: known.source, destination: known.destination, takenEarlier: true)
        }
    }
}

/// `stat(2)` of `path`.
private func status(of path: PathName) -> Result<stat, Errno> {
    var info = stat()
    return stat(path.cString, &info) == 0 ? .success(info) : .failure(Errno(rawValue: errno))
}

/// `realpath` of command-line sources, where those named one after another in one directory (`dcopy src/*
/// dir`) share their directory's: a source whose last component is no link then costs one `readlinkat` of
/// its name in the directory, held open (`O_PATH`) while the next sources share it, where `realpath` took a
/// `getcwd` and a `readlink` per component. Call ``close()`` when done.
struct ResolvedParent {
    private var last: (path: PathName, resolved: PathName?, fd: CInt)?

    /// `source.resolved`, or nil when it cannot be resolved. `source` is not `.` or `..` itself.
    mutating func resolve(_ source: PathName) -> PathName? {
        guard !source.endsWithSlash else { return source.resolved }
        let parent = source.parent
        if last?.path != parent {
            close()
            last = (parent, parent.resolved, open(parent.cString, openPath | O_DIRECTORY | O_CLOEXEC))
        }
        let name = source.lastComponent
        var byte: CChar = 0
        let fd = last!.fd
        guard (fd >= 0 ? readlinkat(fd, name.cString, &byte, 1) : readlink(source.cString, &byte, 1)) < 0,
            errno == EINVAL
        else { return source.resolved }
        return last!.resolved?.appending(name)
    }

    /// Lets go of the directory held.
    mutating func close() {
        if let fd = last?.fd, fd >= 0 { Glibc.close(fd) }
        last = nil
    }
}

/// The status of a file's source and destination, taken by the walker just before the file was handed on;
/// the copy need not take them again through the ring (for a file named on the command line, whose copy
/// would otherwise take the status of both again, then wait for both before going on).
struct KnownStatus: Sendable {
    let source: FileStatus
    let destination: Result<FileStatus, Errno>
    /// The copy waited in the backlog before it started: only `destination`, the absence the walker found,
    /// is taken from here, and the source's status is taken again. Something may have been made at the
    /// destination since: an exclusive create that finds it sends the copy back to take both statuses.
    var takenEarlier = false
}

extension PathName {
    /// The path for the engine's calls, with the same bytes.
    var filePath: FilePath { withCString { FilePath(platformString: $0) } }
}

/// The files waiting to start, first in first out, and the number of copies running.
struct FileBacklog {
    var queue: [PendingFile] = []
    /// Index of the first file in `queue` not yet started.
    private var head = 0
    var running = 0
    /// The walker waits on `room` until fewer files wait.
    var walkerWaits = false

    var waiting: Int { queue.count - head }

    mutating func next() -> PendingFile? {
        guard head < queue.count else { return nil }
        let file = queue[head]
        head += 1
        // Drop what was taken once it is half the array, so the array stays within twice the backlog.
        if head * 2 >= queue.count {
            queue.removeFirst(head)
            head = 0
        }
        return file
    }
}

/// Copies sources to a destination, as cp does.
final class Copier: @unchecked Sendable {
    let options: Options
    let engine = IOEngine.shared
    /// Where files' completions run: one serial queue per core, a file on one of them. Serial queues take
    /// the channels' handlers directly (a concurrent queue needs a private serial queue per operation to
    /// keep its handlers in order), and a file's steps never run at once anyway.
    private let queues: [WorkQueue] = (0..<usableProcessorCount()).map { _ in
        WorkQueue(label: "dcopy")
    }
    private let nextQueue = Locked(0)
    let budget = ChunkBudget(Limits.chunks)
    /// Files found and not yet started, and how many copies run; see ``startFile(_:to:location:destinationIsNew:sourceFile:)``.
    private let files = Locked(FileBacklog())
    /// Signalled when the walker waits for the backlog to shrink and it has.
    private let room = WorkSemaphore(value: 0)
    private let running = WorkGroup()
    private let inUse = Locked(FilesInUse())
    private let failed = Locked(false)
    /// A write's error that ends the run by its signal, as it ends cp (`EFBIG` past `ulimit -f`, `EPIPE`
    /// into a FIFO without reader): set once, by ``endRun(after:)``.
    private let ending = Locked<Errno?>(nil)
    let meter: ProgressMeter?
    /// `-v` lines and errors, printed in the walk's order.
    private let messages: Messages
    /// What cp remembers of the sources on a command line with two or more: set before the walk, then
    /// used by the walker alone.
    private var commandLine: CommandLineSources?
    /// Directories whose mode and times are set once their contents are in (`-p`), innermost first.
    /// `kept`: mode bits the new directory got from its parent that -p keeps (set-group-ID).
    private var directoriesToFinish: [(path: PathName, source: PathName, info: stat, kept: mode_t)] = []
    /// Directories made writable by their owner while being filled (without `-p`), and their final mode.
    private var directoriesToRestrict: [(path: PathName, mode: mode_t)] = []

    /// Whether a command-line file's destination is checked for a name of one of dcopy's own descriptors
    /// (see DescriptorNames): where it is the target itself, or the target is a procfs directory. Set
    /// before the walk.
    private var destinationsMayNameDescriptors = false
    /// Whether ``FilesInUse`` counts the names of destinations still to be made: with two sources or more,
    /// where one can name another's copy otherwise. Set before the walk, then read by the walker alone.
    private var tracksNames = false
    /// The top-level operands being copied, for the message of a copy into itself found during the walk.
    private var topLevelPair: (source: PathName, destination: PathName)?
    /// Directories copied, by identity, with where each went, as cp remembers them (`remember_copied`; walker
    /// only): the source of each directory named on the command line, and the first directory each operand
    /// made. One met again, as a later operand or in a tree, is not copied a second time: cp's answers are
    /// in ``copyDirectory(_:to:info:topLevel:)``. The made one catches a copy into itself that the paths did
    /// not show, through a second path to a directory (a bind mount of one of the source's subdirectories,
    /// helper-44), or an operand that names an earlier one's copy (`dcopy -r s t/s/. t`, helper-61). Only
    /// the first one an operand made: with every one, `dcopy -r s t/s/sub t` refused `t/s/sub/deep` as a
    /// copy into itself where cp copies `t/s/sub` to `t/sub` (helper-60).
    private var copiedDirectories: [FileID: PathName] = [:]
    /// The operand being walked has made a directory (see ``copiedDirectories``).
    private var operandMadeDirectory = false
    /// How command-line sources are looked up (walker only).
    private var sourceLookup = SourceLookup(holdsDirectory: Limits.openDirectories > 0)
    /// The directories of the last command-line file copied into the target, for the ring: those
    /// the walker holds (``sourceLookup``'s look at the source's parent, which one is noted, and
    /// ``namedFilesTargetFD``), so that its looks and the copy's calls reach the same files (walker only).
    private var namedFilesDirectories: (look: Int, pair: DirectoryPair?)?
    /// The target directory held open (`O_PATH`) for the walker's look at each operand's destination there,
    /// by its name instead of its path, as cp looks through its descriptor of the target; -1 without.
    private var namedFilesTargetFD: CInt = -1
    /// The name in ``namedFilesTargetFD`` of the operand being walked, where it has one.
    private var operandNameInTarget: PathName?
    /// The operand being walked is a regular file, handed on to be copied.
    private var operandIsRegularFile = false
    /// Such a copy into itself was found: the walk of this top-level operand stops there, as cp's does.
    private var foundCopyIntoItself = false
    /// The process's umask, read once before any copy runs: reading it means setting it, and a file made
    /// on another thread in between would get the wrong mode.
    private let umaskAtStart: mode_t

    init(options: Options, showProgress: Bool, standardDescriptors: StandardDescriptors? = nil) {
        self.options = options
        let mask = umask(0)
        umask(mask)
        umaskAtStart = mask
        messages = Messages(
            outputWasClosed: standardDescriptors?.outputWasClosed ?? false,
            clearingProgress: showProgress
        )
        let messages = self.messages
        meter = showProgress ? ProgressMeter(drawing: { messages.onPrinter($0) }) : nil
    }

    /// Runs the command; returns the exit status.
    func run(_ paths: [PathName]) -> Int32 {
        copyAll(paths)
        if let ending = ending.withLock({ $0 }) {
            // The messages before the failed copy's place, then the signal, where cp died.
            _ = messages.flush { meter?.finish() }
            WriteSignals.endAsTheKernelWould(after: ending)
        }
        // The bar's last state below every message.
        let outputFailure = messages.flush { meter?.finish() }
        // cp reports a failed -v line once, at the end, as its standard output is closed; a reader that
        // went away ends it by SIGPIPE there (its lines wait in stdio's buffer until then).
        if let error = outputFailure {
            WriteSignals.endAsTheKernelWould(after: error)
            printError("dcopy: write error: \(describe(error))\n")
            return 1
        }
        return failed.withLock { $0 } ? 1 : 0
    }

    /// Copies the sources to the target; failures are in `failed`, their messages posted.
    private func copyAll(_ paths: [PathName]) {
        guard let target = paths.last else {
            return fail("missing file operand\nTry 'dcopy --help' for more information.")
        }
        guard paths.count >= 2 else {
            return fail(
                "missing destination file operand after \(target.quoted)\nTry 'dcopy --help' for more information."
            )
        }
        let sources = paths.dropLast()
        var targetInfo = stat()
        // A name for one of dcopy's own descriptors dangles (see `copy`).
        let targetFound = DescriptorNames.status(target, followingLinks: true, &targetInfo) == 0
        let targetIsDirectory = targetFound && targetInfo.st_mode & S_IFMT == S_IFDIR
        // A destination named by the command line, or made in a directory of descriptors (`dcopy 3
        // /dev/fd`), may name one of dcopy's own descriptors when it is opened.
        destinationsMayNameDescriptors = !targetIsDirectory || target.withCString { isKernelMadeFile(atPath: $0) }
        if !destinationsMayNameDescriptors && Limits.openDirectories > 0 {
            namedFilesTargetFD = open(target.cString, openPath | O_DIRECTORY | O_CLOEXEC)
        }
        defer {
            if namedFilesTargetFD >= 0 { close(namedFilesTargetFD) }
            namedFilesTargetFD = -1
        }
        if sources.count > 1 && !targetIsDirectory {
            return fail("target \(target.quoted)", targetFound ? .notDirectory : Errno(rawValue: errno))
        }
        if let meter {
            meter.total = sources.reduce(0) { $0 + Self.bytes(under: $1, recursive: options.recursive) }
            meter.start()
        }
        // Sources that may lie in what an earlier source's copies are writing.
        var inTarget = [Bool](repeating: false, count: sources.count)
        if sources.count >= 2 {
            commandLine = CommandLineSources()
            let target = target.resolved
            var parents = ResolvedParent()
            inTarget = sources.map { source in
                // A source not there yet may be made by an earlier one's copy.
                guard let target, let resolved = parents.resolve(source) else { return true }
                return resolved.isWithin(target)
            }
            parents.close()
            // One source's copies have one name each. Another may name one of them otherwise, where a
            // source's last component is `.` or `..` (`s/.` gives `e/./d` where `t/d` gives `e/d`), or read
            // it as it is made, where a source lies in the target. Counting names cost `dcopy -r` of ten
            // trees 8 % of its time (367 against 341 ms, 25 rounds in turn), so only then.
            tracksNames =
                inTarget.contains(true)
                || sources.contains { source in
                    let last = source.lastComponent
                    return last == "." || last == ".."
                }
        }
        for (index, source) in sources.enumerated() {
            // A source in the target is walked once every copy before it has ended, as cp's order has it:
            // `dcopy -r s/sub t/sub/deep t` read `t/sub/deep` while the first operand's copies were still
            // making its files, and copied 8 of its 200 into `t/deep`, with status 0.
            if inTarget[index] {
                running.wait()
                finishDirectories()
            }
            // A source ending in `..` is copied into the target itself, as by cp (`DIR/.`), never into
            // `DIR/..`: that would write over the target's parent's files.
            let name = source.lastComponent == ".." ? "." : source.lastComponent
            let destination = targetIsDirectory ? target.appending(name) : target
            operandNameInTarget = namedFilesTargetFD >= 0 && !source.endsWithSlash && !name.isDotOrDotDot ? name : nil
            operandIsRegularFile = false
            copy(source, to: destination, topLevel: true)
            // Anything else may have replaced a directory or link that later operands' paths go through
            // (`dcopy -rv t/n/a t/n/n t/n/f t`, a FIFO `t/n/n` copied over the link `t/n`: cp cannot stat
            // `t/n/f` then, and with the directory held, dcopy copied it, helper-65): they are looked up by
            // their paths again.
            if !operandIsRegularFile {
                sourceLookup.close()
                namedFilesDirectories = nil
            }
        }
        // The copies still running hold the directories they use.
        namedFilesDirectories = nil
        sourceLookup.close()
        running.wait()
        finishDirectories()
    }

    /// Gives the directories copied so far their final mode, and with -p their metadata, once every copy into
    /// them has ended (the caller waits for that): at the end of the run, and before an operand in the target
    /// is walked, which may read them as cp would, finished (helper-61: `t/sub/deep` read with its mode of
    /// the copy, 700 with -p and the run's time, gave `t/deep` those where cp gives the source's). Times
    /// last: writing a directory's contents changes them.
    private func finishDirectories() {
        for (path, mode) in directoriesToRestrict { chmod(path.cString, mode) }
        for (path, source, info, kept) in directoriesToFinish {
            setMetadata(path: path, source: source, info: info, isLink: false, keeping: kept)
        }
        directoriesToRestrict.removeAll()
        directoriesToFinish.removeAll()
    }

    /// Whether a write that failed with `error` ends the run, as its signal would end cp; then the walk
    /// starts nothing more, the copies under way finish, and ``run(_:)`` raises the signal. cp copies
    /// one file at a time: files it copied before stay whole, and it never reaches those after. Raised at
    /// once, the signal cut short the other files being copied at the same time (helper-40).
    func endRun(after error: Errno) -> Bool {
        guard WriteSignals.signalEnding(after: error) != nil else { return false }
        ending.withLock { $0 = $0 ?? error }
        return true
    }

    /// Whether the run is ending by a write's signal: nothing more is started.
    var isEnding: Bool { ending.withLock { $0 != nil } }

    /// Whether a copy under way makes `destination`, named perhaps otherwise. Walker only.
    private func isBeingMade(_ destination: PathName) -> Bool {
        guard tracksNames else { return false }
        let name = destination.withoutDotComponents
        return inUse.withLock { $0.creating[name] != nil }
    }

    /// The queue for the next file, round robin.
    func queueForNextFile() -> WorkQueue {
        let index = nextQueue.withLock { next in
            defer { next = (next + 1) % queues.count }
            return next
        }
        return queues[index]
    }

    // MARK: Messages

    /// Prints `dcopy: message` on standard error, in the walk's order, and marks the exit status.
    func fail(_ message: String) {
        messages.post(error: message)
        failed.withLock { $0 = true }
    }

    func fail(_ what: String, _ error: Errno) {
        fail("\(what): \(describe(error))")
    }

    /// Prints the `-v` line of a copy the walker made itself (a directory, a link, a special file).
    func announce(_ source: PathName, _ destination: PathName) {
        guard options.verbose else { return }
        messages.post(line: verboseLine(source, destination))
    }

    /// A file copy got as far as cp prints its `-v` line (before copying): the line goes out in the copy's
    /// place as soon as every message before it has.
    func fileAnnounced(_ place: Int, source: PathName, destination: PathName) {
        guard options.verbose else { return }
        messages.announce(place, line: verboseLine(source, destination))
    }

    private func verboseLine(_ source: PathName, _ destination: PathName) -> String {
        "\(source.quoted) -> \(destination.quoted)"
    }

    // MARK: Walking

    /// Copies one source (a file, a directory with `-r`, a symbolic link with `-r`) to `destination`.
    /// `destinationIsNew`: the destination's directory was made by this run, so nothing is there yet.
    private func copy(
        _ source: PathName,
        to destination: PathName,
        topLevel: Bool,
        destinationIsNew: Bool = false
    ) {
        if isEnding { return }
        // A source in the target that an earlier source's copy is making is there once that copy ends, as
        // cp's order has it (`dcopy -r t/y e/y/x e` said `cannot stat 'e/y/x'`).
        if topLevel && isBeingMade(source) { running.wait() }
        // Copies into existing files ended so far: the copy takes the status below only if none ends before
        // it is registered (see startFile).
        let overwritesBefore = topLevel ? inUse.withLock { $0.overwritesEnded } : nil
        var info = stat()
        // With -r, links are copied as links (cp's -P default for -R); without it they are followed.
        // `/dev/stdin`, `/dev/fd/3` and the like may name one of dcopy's own descriptors, and then dangle
        // (see DescriptorNames): they would have opened the /dev/null that fills a closed descriptor 0
        // (`dcopy /dev/stdin a <&-` emptied `a`), or another source's file. With -r a link operand is
        // still copied as a link (helper-44: `cp -r /dev/stdin x <&-` makes a link).
        let rc =
            topLevel
            ? sourceLookup.status(source, followingLinks: !options.recursive, &info)
            : options.recursive ? lstat(source.cString, &info) : stat(source.cString, &info)
        if rc != 0 {
            fail("cannot stat \(source.quoted)", Errno(rawValue: errno))
            return
        }
        if info.st_mode & S_IFMT == S_IFDIR && !options.recursive {
            fail("-r not specified; omitting directory \(source.quoted)")
            return
        }
        // (A directory meets the name itself, as cp's does.)
        if topLevel && destinationsMayNameDescriptors && info.st_mode & S_IFMT != S_IFDIR,
            let reach = DescriptorNames.reach(creating: destination)
        {
            return fail(danglingNameRefusal(destination, reach))
        }
        if topLevel && !isFirstMention(of: source, info) { return }
        // The destination's status when settle took it (a file, without -r), for the copy to use again.
        var destinationStatus: Result<stat, Errno>?
        if topLevel && !settle(destination, for: source, info, &destinationStatus) { return }
        switch info.st_mode & S_IFMT {
        case S_IFDIR:
            copyDirectory(source, to: destination, info: info, topLevel: topLevel)
        case S_IFLNK:
            if isNotADirectory(destination) { return }
            copyLink(source, to: destination, info: info)
        case S_IFIFO where options.recursive, S_IFCHR where options.recursive, S_IFBLK where options.recursive,
            S_IFSOCK where options.recursive:
            if isNotADirectory(destination) { return }
            // cp -r recreates special files instead of reading them (which could block forever).
            let made = creatingOver(destination, for: source, info) {
                mknod(destination.cString, info.st_mode, info.st_rdev) == 0
            }
            guard let made else { return }
            // cp prints the line before it tries, so a failure comes with it.
            let error = Errno(rawValue: errno)
            announce(source, destination)
            if !made {
                // cp makes a FIFO with mkfifo and words its failure so.
                let what = info.st_mode & S_IFMT == S_IFIFO ? "fifo" : "special file"
                fail("cannot create \(what) \(destination.quoted)", error)
                return
            }
            if options.preserve { setMetadata(path: destination, source: source, info: info, isLink: false) }
        default:
            if destination.endsWithSlash { return refuseFile(source, toSlashed: destination) }
            if topLevel { operandIsRegularFile = true }
            startFile(
                source,
                to: destination,
                location: topLevel ? namedFileLocation(source) : .paths,
                destinationIsNew: destinationIsNew,
                sourceFile: FileID(info),
                sourceStatus: overwritesBefore.map { (info, $0) },
                destinationStatus: destinationStatus
            )
        }
    }

    /// Where the ring finds a regular file named on the command line: in its directory and the target, by
    /// its name, where it is copied into a target directory under its own name (`dcopy src/* dir`); by its
    /// paths otherwise. The directories are the ones the walker holds and has just looked the file up in
    /// (see ``namedFilesDirectories``), shared by the next operands in the same directory, as a tree's are
    /// (see ``DirectoryPair``): the source's `statx`, its open and the destination's create each look up one
    /// name, not a whole path, as cp creates its copies through its descriptor of the target.
    private func namedFileLocation(_ source: PathName) -> FileLocation {
        let name = source.lastComponent
        // The destination is `target/name` (copyAll), except for `..`, copied into the target itself.
        guard operandNameInTarget != nil, !name.isDotOrDotDot, let held = sourceLookup.held else { return .paths }
        if namedFilesDirectories?.look != held.look {
            namedFilesDirectories = (held.look, DirectoryPair.sharing(source: held.fd, destination: namedFilesTargetFD))
        }
        guard let pair = namedFilesDirectories?.pair else { return .paths }
        return FileLocation(directories: pair, name: name)
    }

    /// Whether a command-line source is named for the first time; cp warns about a file or directory named
    /// twice (`a a`, `s/a s/./a`: the same file, last component and directory) and copies it once.
    private func isFirstMention(of source: PathName, _ info: stat) -> Bool {
        guard commandLine != nil else { return true }
        let mention = SourceMention(
            file: FileID(info),
            name: source.lastComponent,
            directory: sourceLookup.directoryID(of: source)
        )
        if commandLine!.mentions.insert(mention).inserted { return true }
        let kind = info.st_mode & S_IFMT == S_IFDIR ? "directory" : "file"
        messages.post(error: "warning: source \(kind) \(source.quoted) specified more than once")
        return false
    }

    /// Whether a command-line source may be copied to `destination` now. cp will not copy a file onto a
    /// file an earlier source on the same command line made (two sources with one name, copied into a
    /// directory). Otherwise, when an earlier source went to the same place (a directory merging into an
    /// earlier one's copy, or a file meeting a directory), that source's copies land first, as they would
    /// have with cp, which copies one file at a time: then the checks below see what cp would see.
    /// `destinationStatus`: the destination's status, where this took it and nothing can have changed it
    /// before the copy starts.
    private func settle(
        _ destination: PathName,
        for source: PathName,
        _ info: stat,
        _ destinationStatus: inout Result<stat, Errno>?
    ) -> Bool {
        guard commandLine != nil else { return true }
        let isDirectory = info.st_mode & S_IFMT == S_IFDIR
        guard let earlierIsDirectory = commandLine!.made[destination] else {
            // A file copied onto itself makes nothing (its copy is refused), and a later source may go there.
            if isDirectory || !isSameFile(source, info, destination, &destinationStatus) {
                commandLine!.made[destination] = isDirectory
            }
            return true
        }
        if !isDirectory && !earlierIsDirectory {
            var taken: Result<stat, Errno>?
            // cp's look for the same file comes first (`dcopy f d/f d`: d/f onto itself).
            fail(
                isSameFile(source, info, destination, &taken)
                    ? sameFileRefusal(source, destination)
                    : "will not overwrite just-created \(destination.quoted) with \(source.quoted)"
            )
            return false
        }
        running.wait()
        return true
    }

    /// Whether a command-line source and its destination are one file as its copy will see them: links
    /// followed, or with `-r`, which keeps links, by ``creatingOver(_:for:_:_:)``'s rule (two links to one
    /// file are two files). `info`: the source's status as the walk took it (`lstat` with `-r`). `taken`:
    /// the destination's status as a copy takes it (without `-r`).
    private func isSameFile(
        _ source: PathName,
        _ info: stat,
        _ destination: PathName,
        _ taken: inout Result<stat, Errno>?
    ) -> Bool {
        guard options.recursive else {
            taken = operandDestinationStatus(destination, followingLinks: true)
            guard case .success(let to) = taken else { return false }
            return FileID(info) == FileID(to)
        }
        guard case .success(let to) = operandDestinationStatus(destination, followingLinks: false) else { return false }
        return FileID(info) == FileID(to) || isFollowedSameFile(source, info, destination, to)
    }

    /// `stat`, or `lstat` without `followingLinks`, of the operand being walked's `destination`: by its name
    /// in the target's descriptor where it has one there (see ``operandNameInTarget``).
    private func operandDestinationStatus(_ destination: PathName, followingLinks: Bool) -> Result<stat, Errno> {
        var info = stat()
        let rc =
            if let name = operandNameInTarget {
                fstatat(namedFilesTargetFD, name.cString, &info, followingLinks ? 0 : AT_SYMLINK_NOFOLLOW)
            } else {
                followingLinks ? stat(destination.cString, &info) : lstat(destination.cString, &info)
            }
        return rc == 0 ? .success(info) : .failure(Errno(rawValue: errno))
    }

    private func copyDirectory(_ source: PathName, to destination: PathName, info: stat, topLevel: Bool) {
        // A directory copied onto itself (`dcopy -r s/sub s`) is the same file to cp before it is a copy
        // into itself.
        var target = stat()
        if topLevel && stat(destination.cString, &target) == 0 && FileID(target) == FileID(info) {
            fail(sameFileRefusal(source, destination))
            return
        }
        if topLevel, let message = Self.intoItself(source, destination, sourceID: FileID(info)) {
            fail(message)
            return
        }
        if topLevel {
            topLevelPair = (source, destination)
            foundCopyIntoItself = false
            operandMadeDirectory = false
        }
        var existing = stat()
        var made = false
        var inherited: mode_t = 0
        // A copy under way that makes this name as a file (spelled otherwise: `e/./d` for `e/d`) ends
        // first, as in cp's order; the mkdir raced its exclusive create, and the message depended on which
        // came first.
        if isBeingMade(destination) { running.wait() }
        let exists = lstat(destination.cString, &existing) == 0
        let lookup = Errno(rawValue: errno)
        if exists && existing.st_mode & S_IFMT != S_IFDIR {
            fail("cannot overwrite non-directory \(destination.quoted) with directory \(source.quoted)")
            return
        }
        if !exists && lookup != .noSuchFileOrDirectory {
            // Only a missing name is made; a path through a non-directory or an unsearchable one is cp's
            // `cannot stat`, not a failed mkdir.
            fail("cannot stat \(destination.quoted)", lookup)
            return
        }
        // A directory copied before (see `copiedDirectories`): an operand is remembered unless one is already,
        // a directory met in a tree only looked up (`dcopy -r s/sub s d` copies `s/sub` to `d/sub` and then
        // refuses `d/s/sub`; `dcopy -r s s/sub d` copies both).
        let earlier = copiedDirectories[FileID(info)]
        if topLevel && earlier == nil { copiedDirectories[FileID(info)] = destination }
        if let earlier {
            // cp's three answers, in its order: the source is that copy (a copy into itself), the destination
            // is it (the same directory named twice otherwise than `isFirstMention` tells: `s/sub/.. s/.`, or
            // by a bind mount; and `s/sub s/.` meets `s/./sub` in the tree), or another name for it would be
            // made. The top-level names in the first two, as cp's.
            let (topSource, topDestination) = topLevelPair ?? (source, destination)
            if Self.isSameEntry(source, earlier) {
                fail("cannot copy a directory, \(topSource.quoted), into itself, \(topDestination.quoted)")
                foundCopyIntoItself = true
            } else if Self.isSameEntry(destination, earlier) {
                messages.post(error: "warning: source directory \(topSource.quoted) specified more than once")
            } else {
                fail("will not create hard link \(destination.quoted) to directory \(earlier.quoted)")
            }
            return
        }
        if !exists {
            // cp creates the directory writable by its owner while it fills it, then gives it its mode.
            // All the mode bits, as cp passes them: mkdir keeps the sticky bit and drops set-user-ID and
            // set-group-ID (a directory inherits its parent's set-group-ID). Less what cp leaves out until
            // the end: the group's and others' write (with -p, all their bits, until the owner is set).
            // Where the parent has a default ACL the kernel applies no umask, and a directory made with them
            // let its group write where cp's did not (helper-34).
            let omitted: mode_t = options.preserve ? S_IRWXG | S_IRWXO : S_IWGRP | S_IWOTH
            if mkdir(destination.cString, ((info.st_mode & 0o7777) | S_IRWXU) & ~omitted) != 0 {
                fail("cannot create directory \(destination.quoted)", Errno(rawValue: errno))
                return
            }
            made = true
            var new = stat()
            let madeFound = lstat(destination.cString, &new) == 0
            if madeFound && !operandMadeDirectory && copiedDirectories[FileID(new)] == nil {
                copiedDirectories[FileID(new)] = destination
            }
            operandMadeDirectory = operandMadeDirectory || madeFound
            announce(source, destination)
            let restricted = info.st_mode & S_IRWXU != S_IRWXU
            let writableByOthers = info.st_mode & omitted & ~umaskAtStart != 0
            if madeFound && (options.preserve || restricted || writableByOthers) {
                // A directory made in a set-group-ID one inherits the bit, and cp's last chmod leaves it on:
                // the directory's files then keep taking its group. (A chmod without it cleared it.)
                inherited = new.st_mode & S_ISGID
            }
            if !options.preserve && (restricted || writableByOthers) {
                directoriesToRestrict.append((destination, info.st_mode & 0o1777 & ~umaskAtStart | inherited))
            }
        }
        if Limits.serialWalk { running.wait() }
        guard let directory = opendir(source.cString) else {
            fail("cannot access \(source.quoted)", Errno(rawValue: errno))
            // cp still gives the copy the source's mode and times (an unreadable directory's 000).
            if options.preserve { directoriesToFinish.append((destination, source, info, inherited)) }
            return
        }
        var entries: [(name: PathName, isRegular: Bool, inode: UInt64)] = []
        while let entry = readdir(directory) {
            let name = Self.name(of: entry)
            if !name.isDotOrDotDot {
                entries.append((name, entry.pointee.d_type == DT_REG, UInt64(entry.pointee.d_ino)))
            }
        }
        closedir(directory)
        // In inode order, as cp reads a directory (gnulib's savedir, SAVEDIR_SORT_FASTREAD): files made one
        // after another lie near each other on disk, and `-v` lines come in cp's order.
        entries.sort { $0.inode < $1.inode }
        // Opened for the first regular file, and let go once the walk has left this directory and every
        // file in it has been copied.
        var directories: DirectoryPair??
        for (name, isRegular, inode) in entries {
            let from = source.appending(name)
            let to = destination.appending(name)
            if isRegular {
                if directories == nil {
                    directories = DirectoryPair.open(source, destination, checkingPrivacy: made && options.preserve)
                }
                // The directory entry already says it is a regular file, and the copy takes its status
                // through the ring: no lstat here (a file replaced meanwhile is copied as what it is now).
                let location = FileLocation(directories: directories ?? nil, name: name)
                let file = FileID(device: info.st_dev, inode: ino_t(inode))
                startFile(from, to: to, location: location, destinationIsNew: made, sourceFile: file)
            } else {
                copy(from, to: to, topLevel: false, destinationIsNew: made)
                if foundCopyIntoItself { break }
            }
        }
        if options.preserve { directoriesToFinish.append((destination, source, info, inherited)) }
    }

    /// Whether two paths name one directory entry, as gnulib's `same_name` tells: the same last component
    /// in the same directory, by identity (`t/.` and `t/./.`; `t/./sub` and `t/sub`).
    private static func isSameEntry(_ first: PathName, _ second: PathName) -> Bool {
        guard first.lastComponent == second.lastComponent else { return false }
        var one = stat()
        var other = stat()
        return stat(first.parent.cString, &one) == 0 && stat(second.parent.cString, &other) == 0
            && FileID(one) == FileID(other)
    }

    private func copyLink(_ source: PathName, to destination: PathName, info: stat) {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(source.cString, &buffer, buffer.count - 1)
        guard count >= 0 else {
            fail("cannot read symbolic link \(source.quoted)", Errno(rawValue: errno))
            return
        }
        buffer[count] = 0
        guard let made = creatingOver(destination, for: source, info, { symlink(buffer, destination.cString) == 0 })
        else { return }
        // cp prints the line before it tries, so a failure comes with it.
        let error = Errno(rawValue: errno)
        announce(source, destination)
        if !made {
            fail("cannot create symbolic link \(destination.quoted)", error)
            return
        }
        if options.preserve { setMetadata(path: destination, source: source, info: info, isLink: true) }
    }

    /// Runs `create` (a `symlink` or `mknod` at `destination`, a copy of `source`, whose `lstat` is `info`),
    /// and where something is already there, replaces it as cp does: a non-directory is unlinked and
    /// `create` runs again. Refused with cp's message, and nil: the source itself (`dcopy -r d/fifo d`,
    /// which unlinked the source), a directory, and a name that cannot be unlinked. Otherwise, whether
    /// `create` succeeded (`errno` says why not).
    private func creatingOver(
        _ destination: PathName,
        for source: PathName,
        _ info: stat,
        _ create: () -> Bool
    )
        -> Bool?
    {
        // A copy under way that makes this name, or reads or writes the file there, ends first, as in cp's
        // order: the name replaced meanwhile made its source a FIFO, whose open then waited for a writer
        // for ever, or its exclusive create failed (helper-34).
        if isBeingMade(destination) { running.wait() }
        if create() { return true }
        guard errno == EEXIST else { return false }
        var existing = stat()
        guard lstat(destination.cString, &existing) == 0 else {
            errno = EEXIST
            return false
        }
        if FileID(existing) == FileID(info) || isFollowedSameFile(source, info, destination, existing) {
            fail(sameFileRefusal(source, destination))
            return nil
        }
        if existing.st_mode & S_IFMT == S_IFDIR {
            fail("cannot overwrite directory \(destination.quoted) with non-directory")
            return nil
        }
        if inUse.withLock({ $0.isUsed(FileID(existing)) }) { running.wait() }
        if unlink(destination.cString) != 0 {
            fail("cannot remove \(destination.quoted)", Errno(rawValue: errno))
            return nil
        }
        // cp -v says so, before the copy's own line.
        if options.verbose { messages.post(line: "removed \(destination.quoted)") }
        return create()
    }

    /// cp's second look, for copies that keep links (-r), at a source and an existing destination whose
    /// `lstat`s differ: each is followed when it is a symbolic link, and the two are the same file when they
    /// then meet (`dcopy -r l a` with `l -> a` replaced `a`, the link's own target, with a link to itself,
    /// and its data was gone). Two links are two files, which cp replaces one with the other, and a link
    /// that leads nowhere is no file.
    private func isFollowedSameFile(
        _ source: PathName,
        _ info: stat,
        _ destination: PathName,
        _ existing: stat
    )
        -> Bool
    {
        let sourceIsLink = info.st_mode & S_IFMT == S_IFLNK
        let destinationIsLink = existing.st_mode & S_IFMT == S_IFLNK
        guard sourceIsLink != destinationIsLink else { return false }
        var followed = stat()
        guard stat((sourceIsLink ? source : destination).cString, &followed) == 0 else { return false }
        return FileID(followed) == FileID(sourceIsLink ? existing : info)
    }

    /// Whether `destination` ends in "/" and names something that is not a directory: cp looks there first
    /// and stops with "cannot stat 'a/': Not a directory" (dcopy printed the `-v` line, then "cannot create
    /// symbolic link 'a/': File exists"). A missing name goes on to the create, which fails as cp's does.
    private func isNotADirectory(_ destination: PathName) -> Bool {
        guard destination.endsWithSlash else { return false }
        var existing = stat()
        if stat(destination.cString, &existing) == 0 || errno == ENOENT { return false }
        fail("cannot stat \(destination.quoted)", Errno(rawValue: errno))
        return true
    }

    /// A file cannot be written at a path ending in "/", and the ring would not see the slash (a `FilePath`
    /// drops it: `x/` is `x`), so this copy's outcome is settled here with plain calls, in cp's order and
    /// words: the destination's `stat`, the source's `open`, then the create, which fails.
    private func refuseFile(_ source: PathName, toSlashed destination: PathName) {
        var existing = stat()
        if stat(destination.cString, &existing) == 0 {
            fail("cannot overwrite directory \(destination.quoted) with non-directory")
            return
        }
        if errno != ENOENT {
            fail("cannot stat \(destination.quoted)", Errno(rawValue: errno))
            return
        }
        announce(source, destination)
        // Only whether the source could be read matters: a FIFO must not block this open.
        let fd = open(source.cString, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        if fd < 0 {
            fail("cannot open \(source.quoted) for reading", Errno(rawValue: errno))
            return
        }
        close(fd)
        // The create fails (a missing directory on the way, or EISDIR for the name itself, which cp reports
        // as ENOTDIR); Linux never makes a file whose name ends in "/".
        let created = open(destination.cString, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        let failure = created < 0 && errno != EISDIR ? Errno(rawValue: errno) : .notDirectory
        if created >= 0 { close(created) }
        fail("cannot create regular file \(destination.quoted)", failure)
    }

    /// Starts a file copy now if fewer than ``Limits/files`` run, or queues it.
    ///
    /// A copy that ends starts the next queued one itself, on the thread it ended on: usually the ring
    /// thread, whose submissions then join its next batch without a wake-up. So the walker is not woken
    /// once per file (a futex wake and a context switch each, which cost as much as a small file's copy);
    /// it only waits when ``Limits/backlog`` files are queued, until half of them have started.
    ///
    /// cp copies one file at a time, so a destination that is another destination's file (hard links, or a
    /// link to it, in an existing tree), or a source's, gets what cp's order gives it. Copies run at once
    /// here: one that would write a file another reads or writes, or read one another writes, waits for
    /// every copy before it to end. They overlapped, and `e/x` and `e/y`, one file, got a mix of both
    /// sources. A destination in a directory made by this copy is new, and is not looked at.
    private func startFile(
        _ source: PathName,
        to destination: PathName,
        location: FileLocation,
        destinationIsNew: Bool,
        sourceFile: FileID,
        sourceStatus: (info: stat, overwritesBefore: Int)? = nil,
        destinationStatus taken: Result<stat, Errno>? = nil
    ) {
        var destinationStatus: Result<FileStatus, Errno> = .failure(.noSuchFileOrDirectory)
        func currentFiles(_ taken: Result<stat, Errno>?) -> FileInUse {
            var destinationFile: FileID?
            if !destinationIsNew {
                switch taken ?? status(of: destination) {
                case .success(let found):
                    destinationFile = FileID(found)
                    destinationStatus = .success(FileStatus(found))
                case .failure(let error):
                    destinationStatus = .failure(error)
                }
            }
            return FileInUse(
                reading: sourceFile,
                writing: destinationFile,
                names: tracksNames ? (source.withoutDotComponents, destination.withoutDotComponents) : nil
            )
        }
        var inUse = currentFiles(taken)
        var known = sourceStatus.map { KnownStatus(source: FileStatus($0.info), destination: destinationStatus) }
        let (added, overwritesNow) = self.inUse.withLock { ($0.add(inUse), $0.overwritesEnded) }
        // A copy into an existing file ended since the source's status was taken: that file may have been
        // this source, written through a destination that is a link to it (the copy of `x` into `d/x -> ../y`
        // gives `y` new bytes and, with -p, new times, before `y` is copied).
        if overwritesNow != sourceStatus?.overwritesBefore { known = nil }
        if !added {
            running.wait()
            // Every copy has ended: nothing is in use, and the destination may have been made meanwhile.
            // The source may have been written too (through a destination that is a link to it).
            inUse = currentFiles(nil)
            known = nil
            _ = self.inUse.withLock { $0.add(inUse) }
        }
        running.enter()
        // Its messages come out in walking order, as cp's do, although the copies overlap.
        let file = PendingFile(
            source: source,
            destination: destination,
            location: location,
            destinationIsNew: destinationIsNew,
            place: messages.reserve(),
            inUse: inUse,
            known: known
        )
        let (startNow, mustWait) = files.withLock { backlog -> (Bool, Bool) in
            if backlog.running < Limits.files {
                backlog.running += 1
                return (true, false)
            }
            file.markQueued()
            backlog.queue.append(file)
            backlog.walkerWaits = backlog.waiting >= Limits.backlog
            return (false, backlog.walkerWaits)
        }
        if startNow { begin(file) }
        if mustWait { room.wait() }
    }

    private func begin(_ file: PendingFile) {
        FileCopy(copier: self, file: file).start()
    }

    /// A file's copy has ended (once per file, on the thread it ended on): its errors, if any, go out in its
    /// place and mark the exit status, and the next file waiting starts.
    func copyEnded(_ file: PendingFile, errors: [String]) {
        if !errors.isEmpty { failed.withLock { $0 = true } }
        messages.fill(file.place, line: nil, errors: errors)
        inUse.withLock { $0.remove(file.inUse) }
        let (next, wakeWalker) = files.withLock { backlog -> (PendingFile?, Bool) in
            let next = backlog.next()
            if next == nil { backlog.running -= 1 }
            guard backlog.walkerWaits && backlog.waiting <= Limits.backlog / 2 else { return (next, false) }
            backlog.walkerWaits = false
            return (next, true)
        }
        if wakeWalker { room.signal() }
        running.leave()
        if let next { begin(next) }
    }

    /// Sets mode, owner and times as `cp -p` does; ownership that cannot be kept is not an error.
    func setMetadata(path: PathName, source: PathName, info: stat, isLink: Bool, keeping kept: mode_t = 0) {
        let flags = isLink ? AT_SYMLINK_NOFOLLOW : 0
        let ownerKept = fchownat(AT_FDCWD, path.cString, info.st_uid, info.st_gid, flags) == 0
        if !ownerKept { _ = fchownat(AT_FDCWD, path.cString, uid_t.max, info.st_gid, flags) }
        // One "preserving permissions" message, as cp gives: a chmod after a failed ACL fails the same way.
        var permissionsFailure: Errno?
        if !isLink,
            let failure = preserveAccessControlLists(
                from: .path(source),
                to: .path(path),
                isDirectory: info.st_mode & S_IFMT == S_IFDIR
            )
        {
            permissionsFailure = Errno(rawValue: failure)
        }
        let mode = info.st_mode & preservedModeBits(ownerKept: ownerKept, type: info.st_mode) | kept
        if !isLink && chmod(path.cString, mode) != 0 {
            permissionsFailure = permissionsFailure ?? Errno(rawValue: errno)
        }
        if let permissionsFailure { fail("preserving permissions for \(path.quotedForLocale)", permissionsFailure) }
        let times = [info.st_atim, info.st_mtim]
        if utimensat(AT_FDCWD, path.cString, times, flags) != 0 {
            fail("preserving times for \(path.quoted)", Errno(rawValue: errno))
        }
    }

    // MARK: Paths

    /// A directory entry's name, as its bytes.
    static func name(of entry: UnsafeMutablePointer<dirent>) -> PathName {
        withUnsafeBytes(of: entry.pointee.d_name) { PathName($0.bindMemory(to: CChar.self).baseAddress!) }
    }

    /// cp's refusal to copy a directory into itself, when `destination` would lie inside `source`: by its
    /// path, or by the identity of one of the destination's directories. The same directory can have two
    /// paths (a bind mount), and the copy of `m` into `s`, `m` a bind mount of `s`, found its own new
    /// directory in the source and copied it into itself, 2,048 levels deep until names grew too long, with
    /// the source's files in each (helper-43); cp refuses it before it starts.
    static func intoItself(_ source: PathName, _ destination: PathName, sourceID: FileID) -> String? {
        let message = "cannot copy a directory, \(source.quoted), into itself, \(destination.quoted)"
        if let resolvedSource = source.resolved, let resolvedParent = destination.parent.resolved,
            resolvedParent.appending(destination.lastComponent).isWithin(resolvedSource)
        {
            return message
        }
        return hasAncestor(destination.parent, sourceID) ? message : nil
    }

    /// Whether `directory`, or a directory above it (by `..`, up to the root), is the file `ancestor`.
    private static func hasAncestor(_ directory: PathName, _ ancestor: FileID) -> Bool {
        var fd = open(directory.cString, openPath | O_DIRECTORY | O_CLOEXEC)
        while fd >= 0 {
            var info = stat()
            guard fstat(fd, &info) == 0 else { break }
            if FileID(info) == ancestor {
                close(fd)
                return true
            }
            let parent = openat(fd, "..", openPath | O_DIRECTORY | O_CLOEXEC)
            var parentInfo = stat()
            close(fd)
            // The root is its own parent.
            if parent >= 0 && fstat(parent, &parentInfo) == 0 && FileID(parentInfo) == FileID(info) {
                close(parent)
                return false
            }
            fd = parent
        }
        if fd >= 0 { close(fd) }
        return false
    }

    /// Bytes of regular files under `path`, for the progress bar's total.
    static func bytes(under path: PathName, recursive: Bool) -> Int64 {
        var info = stat()
        guard (recursive ? lstat(path.cString, &info) : stat(path.cString, &info)) == 0 else { return 0 }
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            return Int64(info.st_size)
        case S_IFDIR where recursive:
            guard let directory = opendir(path.cString) else { return 0 }
            defer { closedir(directory) }
            var total: Int64 = 0
            while let entry = readdir(directory) {
                let name = name(of: entry)
                if !name.isDotOrDotDot { total += bytes(under: path.appending(name), recursive: true) }
            }
            return total
        default:
            return 0
        }
    }
}

/// The mode bits `-p` keeps for a file of `type` (its `st_mode`): all of them, or fewer when the owner could
/// not be kept, as cp 9.1 does: a set-user-ID file of root's copied by another user must not become a
/// set-user-ID file of that user's. Then a regular file loses set-user-ID, set-group-ID and the sticky bit
/// (cp's copy of a regular file clears all three), a directory the first two; a special file keeps all
/// three, since cp makes it with them (`mknod`) and does not change its mode again.
func preservedModeBits(ownerKept: Bool, type: mode_t) -> mode_t {
    if ownerKept { return 0o7777 }
    switch type & S_IFMT {
    case S_IFREG: return 0o0777
    case S_IFDIR: return 0o1777
    default: return 0o7777
    }
}

/// Read chunks that may be held at once across all files; a file that finds none waits its turn.
final class ChunkBudget: @unchecked Sendable {
    private let lock = Lock()
    private var available: Int
    private var waiters: [@Sendable () -> Void] = []

    init(_ count: Int) { available = count }

    /// Takes a chunk if one is free; otherwise `wake` runs (once) when one has been given back.
    func take(orWhenFree wake: @escaping @Sendable () -> Void) -> Bool {
        lock.withLock {
            if available > 0 {
                available -= 1
                return true
            }
            waiters.append(wake)
            return false
        }
    }

    /// Gives a chunk back: straight to the longest waiter, if any, which then holds it.
    func give() {
        let waiter = lock.withLock { () -> (@Sendable () -> Void)? in
            if waiters.isEmpty {
                available += 1
                return nil
            }
            return waiters.removeFirst()
        }
        waiter?()
    }
}

/// The text `strerror` gives, as cp prints it.
func describe(_ error: Errno) -> String {
    String(cString: strerror(error.rawValue))
}

/// Writes a message to standard error in one system call.
func printError(_ message: String) {
    var message = message
    let written = message.withUTF8 { bytes in Glibc.write(STDERR_FILENO, bytes.baseAddress, bytes.count) }
    // cp's unbuffered standard error ends it by SIGPIPE at once when its reader has gone; dcopy blocks the
    // signal from the start (see `WriteSignals.holdBrokenPipe`), so it raises it here (helper-40).
    if written < 0 && errno == EPIPE { WriteSignals.endAsTheKernelWould(after: .brokenPipe) }
}

/// Writes a `-v` line to standard output in one system call; returns the error if that failed.
func printOutput(_ message: String) -> Errno? {
    var message = message
    return message.withUTF8 { bytes in
        Glibc.write(STDOUT_FILENO, bytes.baseAddress, bytes.count) < 0 ? Errno(rawValue: errno) : nil
    }
}
