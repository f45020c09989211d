import ArgumentParser
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

/// `dcat`: GNU `cat` without options, on ``IOChannel``.
///
/// Every byte goes through ``IOChannel``: a channel on each input (random on a regular file, stream
/// otherwise), except that a regular file under 64 KiB is read with one `IOChannel.readSmallFile`, and one
/// on standard output. The main thread opens files, issues their first reads and waits; a regular file's
/// handlers run on the engine's thread as its reads and writes complete (a stream's on a serial queue) and
/// hand what was read straight to the output channel, so the tool has no read or write loop of its own.
@main
enum Main {
    static func main() {
        // Before anything opens a descriptor.
        _ = standardDescriptors
        if let problem = unreadableCommandLine() {
            printError("dcat: \(problem)\n")
            exit(1)
        }
        // dcat has no options, so a command line without any is only operands. Parsing it with
        // ArgumentParser costs 0.9 ms of a 3.9 ms run on an empty file (its reflection scans every protocol
        // conformance of a statically linked binary), so such command lines skip it; anything that looks
        // like an option (--help, --version, a mistake) goes to the parser for its help and errors. The
        // words are argv's bytes, not `CommandLine.arguments`, whose making cost 0.1 ms of an empty file's
        // run.
        let words = CommandLineWords.current()
        // `-u` (POSIX's unbuffered output) changes nothing, for cat or for dcat, which never holds output back.
        if words.optionStrings.allSatisfy({ $0.count > 1 && $0.dropFirst().allSatisfy { $0 == "u" } }) {
            concatenate(words.operands.isEmpty ? ["-"] : words.operands)
        }
        // cat's words and exit status (1) for an option it does not have, not ArgumentParser's (64).
        let (options, ambiguity) = expandingAbbreviations(words.optionStrings, longFlags: ["help"])
        let refusal = ambiguity ?? unknownOptionMessage(in: options, shortFlags: ["u"], longFlags: ["help"])
        do {
            if let refusal { throw ValidationError(refusal) }
            // The parser gets the options alone, for its help and errors (it throws them); the operands are
            // argv's bytes.
            var command = try DCat.parseAsRoot(options)
            try command.run()
            concatenate(words.operands.isEmpty ? ["-"] : words.operands)
        } catch  where DCat.exitCode(for: error) == .validationFailure {
            printError("dcat: \(refusal ?? DCat.message(for: error))\nTry 'dcat --help' for more information.\n")
            exit(1)
        } catch {
            DCat.exit(withError: error)
        }
    }
}

/// The command line as ArgumentParser sees it: help, version and errors.
struct DCat: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dcat",
        abstract: "Concatenate files to standard output, through io_uring.",
        discussion: """
            With no FILE, or when FILE is -, read standard input. A file that cannot be read is reported \
            on standard error and skipped; the exit status is then 1. When the reader of standard output \
            goes away, dcat ends as cat does: quietly by SIGPIPE, or where SIGPIPE is ignored with \
            "write error: Broken pipe".
            """,
        // `--help` only: cat refuses `-h` as an invalid option, and so does dcat.
        helpNames: .long
    )

    @Flag(name: .customShort("u"), help: "Ignored, as cat ignores it: dcat never holds output back.")
    var unbuffered = false

    /// Never filled by the parser, which sees only the options; declared for the help text. The operands
    /// are taken from argv (``CommandLineWords``).
    @Argument(help: "Files to concatenate, in order; - is standard input.")
    var files: [String] = []

    /// Nothing: `main` copies the operands once the options are parsed.
    func run() throws {}
}

/// The bytes one read operation of a regular file asks for: one read system call (the channel reads at most
/// 1 MiB per call). Reads are issued in windows so that a fast input cannot run ahead of a slow output: a
/// window is read only while fewer than ``windows`` (``fileOutputWindows``) are read or being written.
private let window = 1 << 20
/// Windows read or being written at once when standard output is a regular file. Writes to one file run one
/// at a time on one of io_uring's workers, and that writer sets the pace; more reads beside it make more
/// busy threads on two cores, and the writer loses its core to them. Measured on 2026-11-26, 1 GiB warm from
/// tmpfs to a new file on tmpfs, in three batches of 21–40 alternating runs: 3 windows of 1 MiB took
/// 0.94–0.96× the time of 3 of 2 MiB (653 ms against 695 in the longest), dd writing zeros alone 0.90×.
private let fileOutputWindows = 3
/// Windows read or being written at once to any other output. Peak data in memory is about
/// `windows × window`. A window's place stays taken from the end of its read until its write completes and
/// the next read is submitted. When the pump ran on a queue, that took four hand-offs between threads
/// (to the handler queue, to the ring thread, back, and to the ring thread again for the next read),
/// 150–200 µs on this host, while two of io_uring's workers copy a megabyte every 30 µs: with 3 windows of
/// 2 MiB, 2.1 reads were in flight on average and the two cores idled half of `dcat 1 GiB > /dev/null`.
/// Measured then (2026-11-27; cat read the gigabyte in 57 ms), in batches of 11–21 alternating runs: 3 × 2
/// MiB took 1.17–1.22× cat's time, 4 × 2 MiB 1.14–1.15×, 8 × 1 MiB 1.09–1.13× and 10 × 1 MiB 1.08× (13.6
/// MiB peak RSS). With the pump on the engine's thread the bytes in flight still count, less: against 8 × 1
/// MiB, 3 × 1 MiB took 1.10× the time, 4 × 1 MiB 1.11×, 3 × 2 MiB 1.07×, 4 × 2 MiB 0.98× (21 runs in turn,
/// later that day). 8 × 1 MiB peaks at 11.4 MiB, to /dev/null or a pipe, against 9.4 for 3 × 2 MiB, and at
/// 13.2–14.2 MiB for the worst mixes of many files found (helper-51, 11.3–11.9 before); an earlier, slower
/// host had measured 4 × 2 MiB no faster than 3 at 15.6 MiB.
private let windows = 8
/// ``windows`` on the POSIX engine, whose pool threads complete reads several at once, so that fewer
/// windows keep it as busy: `dcat 1 GiB > /dev/null` took 55.4 ms with 5 windows, 56.6 with 6 and 58.5 with
/// 8 (68.6 when the pump ran on a queue; 15 runs in turn, 2026-11-27), and 3 MiB of buffers less. (With 8,
/// mixes of 3,000 files had peaked at 16.3–18.9 MiB there, until the pump let go of each window's bytes as
/// soon as its write was submitted: see ``FileRun``'s `pumpOnce`.)
private let posixWindows = 5
/// Stream windows read or being written at once (see ``streamWindow``).
private let streamWindows = 3
/// The most one read handler call delivers on a stream, and so the most one read system call asks for:
/// half a pooled buffer, of which a read touches only what it asks for.
private let piece = 512 << 10
/// The bytes one read operation asks for on a stream. A pipe's reads take a pooled buffer each, whatever
/// they bring, and every buffer stays until its bytes are written: 2 MiB windows read in 1 MiB pieces
/// peaked at 9.5–15.5 MiB RSS for `cat big | dcat`, 1 MiB windows in 1 MiB pieces at 9.2–12.1, 1 MiB
/// windows in 512 KiB pieces at 9.0–9.3, as fast in alternating runs (with 512 KiB pooled buffers: 8.0–8.6).
private let streamWindow = 1 << 20
/// The least a stream's read system call asks for: cat's 128 KiB, also the size of each write to an output
/// that keeps messages (see ``Concatenator``'s `outputTakesMessages`). A window ends where its next read would
/// ask for less (``IOChannel/read(length:askingAtLeast:queue:handler:)``): a read that asks for less than
/// the next message of a datagram or sequenced-packet socket, or packet of a packet-mode pipe, gets its
/// first bytes and the kernel drops the rest, and a window's last read used to ask only for what the window
/// had left (eleven datagrams of 100,000 bytes gave 1,048,576 bytes, status 0, helper-38; 2,000 packets of
/// 3,000 bytes, 5,992,880 bytes, helper-62). A device may do the same with its records (a tun device's
/// packets), or refuse the read (`/dev/kmsg`, an input device's events: `EINVAL`; helper-66). A socket that
/// keeps messages is read in system calls of exactly this size, so that a longer message is cut where
/// cat's read cuts it.
///
/// Measured against windows of one system call each (2026-11-28, runs in turn): `cat big | dcat >
/// /dev/null` took 304 ms in 1 MiB windows read in pieces, 344 in single reads of 512 KiB and 324 in single
/// reads of 1 MiB (cat 834, 15 runs); `dcat /dev/zero | head -c 1G` 235 ms in windows, 419 in single reads
/// of 128 KiB and 200 in single reads of 1 MiB (cat 500–544, 9 runs); and single reads made each of a
/// packet-mode pipe's packets a window of its own (dcopy's chunks: 0.34 s for 10,000 packets of 4 KiB
/// against 0.14, helper-67).
private let messageRead = 128 << 10

/// The standard descriptors the process started without, each now open on /dev/null.
let standardDescriptors = StandardDescriptors.reserve()

/// Copies `operands` to standard output, as cat does, and exits with cat's status.
func concatenate(_ operands: [PathName]) -> Never {
    // cat checks its output before reading anything.
    if standardDescriptors.outputWasClosed {
        printError("dcat: standard output: \(describe(.badFileDescriptor))\n")
        exit(1)
    }
    // One malloc arena, before any thread starts. The pump runs on whichever thread a window's read or
    // write completes on, several at once on the POSIX engine, and glibc gives each thread that meets
    // another in malloc an arena of its own, which keeps what was freed in it: there mixes of 3,000 files
    // peaked at 10.9–11.9 MiB with one arena and 11.7–13.2 without (2026-11-27). dcat allocates little
    // beside its pooled buffers, and one arena cost no time measured (50.5 against 50.8 ms for 1 GiB to
    // /dev/null on that engine).
    useOneMallocArena()
    // The concatenator lives until the exit: its release would close the output channel, whose teardown
    // runs on a queue and started a worker thread just to end (the run may have used none).
    let concatenator = Concatenator()
    withExtendedLifetime(concatenator) { exit(concatenator.run(operands)) }
}

/// Copies inputs to standard output in order.
final class Concatenator: @unchecked Sendable {
    fileprivate let queue = WorkQueue(label: "dcat")
    private let output: IOChannel
    /// Windows of regular files read or being written at once: ``fileOutputWindows`` when standard output is
    /// a regular file, ``windows`` otherwise.
    fileprivate let windowCount: Int
    /// Standard output keeps message boundaries (a datagram or sequenced-packet socket, a packet-mode pipe):
    /// each write is one message, or one packet per `PIPE_BUF` bytes.
    private let outputTakesMessages: Bool
    /// Standard output is a socket that keeps messages: one whose peer has gone answers `EPIPE` without
    /// `SIGPIPE`, where a pipe's comes with it.
    private let outputIsMessageSocket: Bool
    /// Whether small windows that reach the output together may go out in one write: not as messages,
    /// where cat writes each file's own.
    fileprivate var joinsWrites: Bool { !outputTakesMessages }
    /// Standard output is a regular file without O_APPEND: writes go at explicit offsets on a random
    /// channel, several at once (a stream channel would run them one by one), and the descriptor's position
    /// follows them as they complete (``OutputCursor``), where cat's writes would have left it.
    private let positionedOutput: Bool
    /// The descriptor's position at start.
    private let outputStart: off_t
    /// Device and inode of standard output when it is a regular file, for cat's "input file is output file".
    private let outputFile: (device: dev_t, inode: ino_t)?
    /// Positioned output's next offset and writes under way; nil for other output.
    private let cursor: OutputCursor?
    /// One credit per stream window whose bytes are not yet all written (regular files' windows are
    /// counted by the ``FileRun``).
    private let credits = WorkSemaphore(value: streamWindows)
    private let status = Locked<Int32>(0)
    /// Writes to output other than a positioned file, for the failure to report (see ``StreamWrites``).
    private let streamWrites = Locked(StreamWrites())

    init() {
        var info = stat()
        let regular = fstat(STDOUT_FILENO, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
        if info.st_mode & S_IFMT == S_IFIFO { growPipe(STDOUT_FILENO) }
        positionedOutput = regular && fcntl(STDOUT_FILENO, F_GETFL) & O_APPEND == 0
        windowCount = regular ? fileOutputWindows : IOEngine.shared.kind == .posix ? posixWindows : windows
        outputTakesMessages = keepsMessages(STDOUT_FILENO, mode: info.st_mode)
        outputIsMessageSocket = outputTakesMessages && info.st_mode & S_IFMT == S_IFSOCK
        outputStart = positionedOutput ? lseek(STDOUT_FILENO, 0, SEEK_CUR) : 0
        cursor = positionedOutput ? OutputCursor(start: outputStart, sizeAtStart: info.st_size) : nil
        outputFile = regular ? (info.st_dev, info.st_ino) : nil
        let type: IOChannel.StreamType = positionedOutput ? .random : .stream
        // Standard output unusable from the start (a directory, say) fails the first write, which reports
        // it: with nothing to write, cat never learns, and neither does dcat.
        output = IOChannel(type: type, fileDescriptor: .standardOutput, queue: queue) { _ in }
        WriteSignals.noteDispositions()
        // Writes report only their final call: progress calls would be noise here.
        output.setLimit(lowWater: Int.max)
        // A datagram or sequenced-packet socket takes each write as one message, which must fit its send
        // buffer: a window's megabyte failed with EMSGSIZE (helper-38: nothing past 212,992 bytes went
        // through a SOCK_SEQPACKET pair). cat's 128 KiB writes are what such a reader gets from cat.
        // Windows are multiples of 128 KiB, so each file's messages are cat's. A packet-mode pipe cuts each
        // write into packets of PIPE_BUF bytes: the same writes, never joined, make cat's packets.
        if outputTakesMessages { output.setLimit(highWater: messageRead) }
    }

    /// Copies every input; returns the exit status.
    func run(_ paths: [PathName]) -> Int32 {
        let files = FileRun(concatenator: self)
        for path in paths {
            copy(path, files: files)
        }
        files.drain()
        waitForWrites()
        cursor?.moveToEnd()
        // cat closes standard input at the end if it read it, and reports that failing.
        if standardDescriptors.inputWasClosed && paths.contains("-") {
            printError("dcat: closing standard input: \(describe(.badFileDescriptor))\n")
            status.withLock { $0 = 1 }
        }
        return status.withLock { $0 }
    }

    /// Reports a failed input the way cat does and marks the exit status.
    private func report(_ path: PathName, _ error: Errno) {
        printBetweenOutputs(Self.message(path, error))
        markFailed()
    }

    /// cat's message for an input that failed.
    fileprivate static func message(_ path: PathName, _ error: Errno) -> String {
        "dcat: \(path.quotedIfNeeded): \(describe(error))\n"
    }

    fileprivate func markFailed() { status.withLock { $0 = 1 } }

    /// Prints a message on standard error where cat's would land when standard error shares standard
    /// output's open file (`> out 2>&1`): after the bytes before it, and before the ones after. cat writes
    /// at the shared position; positioned output writes at offsets, and the position follows only the writes
    /// that have completed, so a message printed meanwhile would land among bytes still to be written, which
    /// then overwrite it. Here the output written so far is waited for, the position put after it, the
    /// message printed, and the output goes on after wherever the message left the position (the same
    /// place when standard error is another file).
    private func printBetweenOutputs(_ message: String) {
        if positionedOutput { waitForWrites() }
        placeMessage(message)
    }

    /// Prints `message` as ``printBetweenOutputs(_:)`` does, for a caller that knows no write is in flight.
    fileprivate func placeMessage(_ message: String) {
        guard let cursor else { return printError(message) }
        cursor.place(message)
    }

    /// Waits until every write submitted so far has completed: each window's credit is back.
    private func waitForWrites() {
        for _ in 0..<streamWindows { credits.wait() }
        // Hand them back: a semaphore released below its initial value is a programming error (C30).
        for _ in 0..<streamWindows { credits.signal() }
    }

    /// Opens `path` for reading; -1 with `errno` set when it cannot. Files read ahead hold descriptors:
    /// while the process's limit leaves none, it waits for one of them to close, keeps its place (the run
    /// holds one file fewer from then on), and tries again.
    private func openInput(_ path: PathName, _ files: FileRun) -> CInt {
        // A name for one of dcat's own descriptors (`/dev/fd/3`, or `/dev/stdin` with descriptor 0 closed
        // and filled) dangles, as it does for cat, which has none open when it opens the next file.
        var opened = DescriptorNames.open(path, flags: O_RDONLY | O_CLOEXEC)
        while opened < 0 && (errno == EMFILE || errno == ENFILE) {
            let waited = files.giveUpAPlace()
            // Once more even when no file of the run held a descriptor: the last one may have closed
            // between the failed open and the look.
            opened = DescriptorNames.open(path, flags: O_RDONLY | O_CLOEXEC)
            if !waited { break }
        }
        return opened
    }

    /// Copies one operand. A regular file joins `files`, which reads it while earlier ones are still being
    /// read or written; anything else (standard input that is not a regular file, a pipe, a terminal, a
    /// device, a directory) waits until everything before it is written, and is copied on its own.
    private func copy(_ path: PathName, files: FileRun) {
        let fd: CInt
        let ownsDescriptor = path != "-"
        if !ownsDescriptor {
            if standardDescriptors.inputWasClosed {
                files.drain()
                return report(path, .badFileDescriptor)
            }
            fd = STDIN_FILENO
        } else {
            // Opening moves no file data: a plain open gives cat's errors (ENOENT, EACCES) at once.
            files.reserveDescriptor()
            var opened = openInput(path, files)
            if opened < 0 {
                // cat opens a file at its turn, once everything before it is written: a file made, or made
                // readable, meanwhile is read. So the error reported is the one an open gets at that turn.
                files.drain()
                opened = openInput(path, files)
            }
            if opened < 0 {
                let error = Errno(rawValue: errno)
                files.releaseDescriptor()
                return report(path, error)
            }
            fd = opened
        }
        var info = stat()
        let isRegular = fstat(fd, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
        if isRegular {
            // Standard input, and standard output's own file, go only once everything before them is written:
            // the one's position is moved after what was read, the other's size is checked as cat checks it.
            let alone = !ownsDescriptor || isOutputFile(info)
            if alone { files.drain() }
            if isUnreadOutput(fd, info) {
                printBetweenOutputs("dcat: \(path.quotedIfNeeded): input file is output file\n")
                markFailed()
                if ownsDescriptor {
                    Glibc.close(fd)
                    files.releaseDescriptor()
                }
                return
            }
            // An empty file at its turn (nothing before it still read or written, as when cat comes to it)
            // whose file system keeps each file's length as its size (tmpfs, ext4, ...: one fstatfs) has
            // nothing to read. cat's read finds the end at once, and marks the file accessed as the mount's
            // rule has it (with relatime, when the access time is not after the last change, or a day old).
            // Where that read would leave the access time as it is, the read can change nothing, and dcat
            // leaves it out: dcat's read took a trip through the engine's thread and an io_uring worker,
            // 0.14 ms of a 0.98 ms run on an empty tmpfs file. Otherwise it reads, as cat does. The status
            // is taken again at that turn, as cat's read would see it, and so is that of a file that waited
            // above (standard output's may have grown). An empty file opened ahead, behind writes still under
            // way, is read as any other: it may grow before its turn. So is standard input, which may be open
            // for writing only (`0>>empty`), where cat's read fails with EBADF (helper-55); dcat opens the
            // others for reading.
            let atItsTurn = alone || (info.st_size == 0 && files.isIdle)
            var size = info
            if !atItsTurn || fstat(fd, &size) != 0 { size = info }
            let system = size.st_size == 0 ? FileSystemFacts(fd) : nil
            let meaning = system?.sizeMeaning ?? .unknown
            if ownsDescriptor && atItsTurn, meaning == .length, let system, system.readKeepsAccessTime(size) {
                Glibc.close(fd)
                files.releaseDescriptor()
                return
            }
            // The kernel's own files say they are empty and are made as they are read, and some wait for more
            // (trace_pipe, /proc/kmsg). They go as streams, each read's bytes written as they come, as cat
            // writes them; a window would hold them until it was full. An empty file elsewhere (FUSE, NFS,
            // cgroupfs: its size may not be its length) is read here, as any other: the stream's hand-offs
            // cost dcat of an empty file 1.09x its time.
            if meaning != .madeAsRead {
                if !ownsDescriptor { files.reserveDescriptor() }
                // Standard input's channel reads from its position (a random channel's offsets start there):
                // what lies ahead is the size less that position.
                let position = ownsDescriptor ? 0 : max(Int64(lseek(fd, 0, SEEK_CUR)), 0)
                files.add(
                    path: path,
                    fd: fd,
                    size: Int64(size.st_size) - position,
                    // The status after the wait above, as the channel would take it itself.
                    openedWithStatus: ownsDescriptor ? size : nil
                )
                if !ownsDescriptor {
                    // Standard input is left where cat leaves it: after what was read.
                    lseek(fd, off_t(files.drain()), SEEK_CUR)
                }
                return
            }
        }
        files.drain()
        if ownsDescriptor { files.releaseDescriptor() }
        if info.st_mode & S_IFMT == S_IFIFO { growPipe(fd) }
        let closed = WorkSemaphore(value: 0)
        let input = IOChannel(type: .stream, fileDescriptor: FileDescriptor(rawValue: fd), queue: queue) { _ in
            if ownsDescriptor { Glibc.close(fd) }
            closed.signal()
        }
        let failure = copyStream(input, messages: keepsMessages(fd, mode: info.st_mode))
        input.close()
        closed.wait()
        // Its writes done before a later file's messages, which are printed from the handler queue.
        waitForWrites()
        if let failure { report(path, failure) }
    }

    // MARK: Regular files

    /// Writes one window's data and runs `written` on the thread the write completes on (an engine thread),
    /// once it has completed; at once when there is nothing to write, or once a write has failed. The end of
    /// the output, after a failed write, is reported from the queue, since the message may block.
    fileprivate func writeWindow(_ data: DispatchDataBuffer, written: @escaping @Sendable () -> Void) {
        guard !data.isEmpty else { return written() }
        let cursor = self.cursor
        let sequence = cursor == nil ? streamWrites.withLock { $0.take() } : nil
        let offset = cursor.map { $0.take(data.count) } ?? sequence.map { _ in 0 }
        // After a failed write nothing more is written (see `OutputCursor`, `StreamWrites`).
        guard let offset else { return written() }
        let count = data.count
        output.write(offset: offset, data: data) { [self] done, unwritten, error in
            guard done else { return }
            if let cursor {
                if let over = cursor.ended(at: offset, count: count, unwritten: unwritten?.count ?? 0, error: error) {
                    return queue.async { cursor.end(over) }
                }
            } else {
                let report = streamWrites.withLock { $0.ended(sequence!, error: error) }
                // A message socket whose peer has gone sends no SIGPIPE with its EPIPE: cat says `write
                // error: Broken pipe`, status 1 (helper-64).
                if let report {
                    let signalled = !outputIsMessageSocket
                    return queue.async { Concatenator.writeFailed(report, signalled: signalled) }
                }
                // A failure is reported once the writes before it have ended, by the last of them.
                if error != nil { return }
            }
            written()
        }
    }

    // MARK: Streams

    /// Reads a pipe, socket, terminal or device one window at a time, delivering whatever arrives at once,
    /// and writes each piece as it comes. The next window waits to know whether this one reached end of
    /// file, so a terminal is never read past the end of file its user typed. No read asks for less than
    /// ``messageRead``, and one of a socket that keeps `messages` for exactly that.
    private func copyStream(_ input: IOChannel, messages: Bool) -> Errno? {
        // Deliver whatever arrives at once (a terminal line, a pipe's few bytes), in pieces of at most `piece`
        // bytes, which is also the most one system call asks for.
        input.setLimit(lowWater: 1)
        input.setLimit(highWater: messages ? messageRead : piece)
        let reads = WorkGroup()
        let progress = Locked<(ended: Bool, error: Errno?)>((false, nil))
        while true {
            credits.wait()
            if progress.withLock({ $0.ended }) {
                credits.signal()
                break
            }
            reads.enter()
            startWindow(input, reads: reads, progress: progress)
            reads.wait()
        }
        return progress.withLock { $0.error }
    }

    /// Whether `info` is standard output's own file (device and inode).
    private func isOutputFile(_ info: stat) -> Bool {
        guard let outputFile else { return false }
        return info.st_dev == outputFile.device && info.st_ino == outputFile.inode
    }

    /// cat's refusal to read standard output's own file where bytes lie ahead of the input's position:
    /// copying them would append them again and again until the device is full. As cat 9.1 does, the
    /// size that counts is the one after everything before this input has been written.
    private func isUnreadOutput(_ fd: CInt, _ info: stat) -> Bool {
        guard isOutputFile(info) else { return false }
        // A stream's writes may still be in flight (a regular file's are done when its copy returns).
        waitForWrites()
        var current = stat()
        guard fstat(fd, &current) == 0 else { return false }
        return lseek(fd, 0, SEEK_CUR) < current.st_size
    }

    /// Reads one window from `input` and writes each piece to standard output; the window's credit comes
    /// back once the read has ended and every write of its data has completed.
    private func startWindow(
        _ input: IOChannel,
        reads: WorkGroup,
        progress: Locked<(ended: Bool, error: Errno?)>
    ) {
        // Writes of this window still running, plus one for the read itself.
        let pending = Locked<Int>(1)
        let credits = self.credits
        let release: @Sendable () -> Void = {
            let last = pending.withLock { count -> Bool in
                count -= 1
                return count == 0
            }
            if last { credits.signal() }
        }
        input.read(length: streamWindow, askingAtLeast: messageRead, queue: queue) { [self] done, data, error in
            if let data, !data.isEmpty {
                pending.withLock { $0 += 1 }
                // Handlers run one at a time on the serial queue, in read order: offsets follow the bytes.
                writeWindow(data, written: release)
            }
            guard done else { return }
            progress.withLock { state in
                if let error {
                    state.ended = true
                    state.error = error
                } else if data?.isEmpty ?? true {
                    // Only the end of file ends the read with a final call that brings nothing.
                    state.ended = true
                }
            }
            release()
            reads.leave()
        }
    }

    /// Standard output failed: a reader that went away ends the process quietly, as `cat` dies of
    /// `SIGPIPE`; any other error, and that one where SIGPIPE is ignored or blocked, is reported like cat's
    /// `write error` and ends the process with status 1. `signalled`: the output is one whose `EPIPE` the
    /// kernel sends `SIGPIPE` with (not a datagram or sequenced-packet socket).
    static func writeFailed(_ error: Errno, signalled: Bool = true) -> Never {
        // The channel reports EPIPE and EFBIG instead of letting SIGPIPE or SIGXFSZ end the process; cat
        // would have died of them.
        if signalled || error != .brokenPipe { WriteSignals.endAsTheKernelWould(after: error) }
        // The channel refuses a directory with EISDIR; a directory can only be open for reading, so cat's
        // write gets EBADF.
        printError("dcat: write error: \(describe(error == .isDirectory ? .badFileDescriptor : error))\n")
        exit(1)
    }
}

/// The writes to output other than a positioned file, in the order they were taken, for the failure that
/// ends the output: the earliest in that order, once every write before it has ended, as cat's output ends
/// at its first failed write. The channel runs its writes one after another, but each one's final call runs
/// on the thread that completed it, so a later write's failure can be seen first: a TCP peer's reset failed
/// one write with `ECONNRESET` and the next ones with `EPIPE`, and on the POSIX engine dcat died of `SIGPIPE`
/// in 7 of 20 runs where cat reports `Connection reset by peer` (helper-62).
struct StreamWrites {
    /// Sequence numbers taken so far.
    private var taken = 0
    /// Every write before this one has ended.
    private var endedBelow = 0
    /// The writes at or after `endedBelow` that have ended.
    private var endedAfter: Set<Int> = []
    /// The earliest failed write seen, by sequence number.
    private var failure: (sequence: Int, error: Errno)?
    private var reported = false

    /// The next write's sequence number; nil once a write has failed, and nothing more is written.
    mutating func take() -> Int? {
        guard failure == nil else { return nil }
        defer { taken += 1 }
        return taken
    }

    /// Notes that write `sequence` ended, with `error` if it failed. Returns the failure to report, once:
    /// when the earliest failed write and every write before it have ended.
    mutating func ended(_ sequence: Int, error: Errno?) -> Errno? {
        if let error, failure.map({ sequence < $0.sequence }) ?? true { failure = (sequence, error) }
        endedAfter.insert(sequence)
        while endedAfter.remove(endedBelow) != nil { endedBelow += 1 }
        guard !reported, let failure, failure.sequence < endedBelow else { return nil }
        reported = true
        return failure.error
    }
}

/// Where positioned output goes: the next write's offset from the descriptor's position at start, and the
/// writes under way, in the order they were taken.
///
/// The descriptor's position follows the writes as they complete, to the end of what is written without a
/// gap, as cat's own writes move it. It used to move only at the end: a dcat that was killed (`timeout`)
/// left it at the start, and what the shell wrote next went over dcat's bytes (`{ timeout 1 dcat; echo
/// TAIL; } > o`), as did any other writer of the same open file meanwhile.
///
/// A failed write (`ENOSPC`, `EIO`) ends the output where it failed, as cat's output ends at its failed
/// write: nothing more is taken, and once the writes under way have ended, the file is cut back to the
/// failure (never below its size at start, so that bytes dcat did not write stay), then the error ends the
/// process. Writes complete in any order, and a later one done before an earlier one failed left its bytes
/// past a stretch of zeros (13 of 40 runs into a full 6 MiB tmpfs on the POSIX engine). Output that starts
/// inside a file's old bytes (`1<>file`) keeps what a later write put there before the failure, where cat
/// would have left the old bytes.
final class OutputCursor: Sendable {
    private let start: off_t
    private let sizeAtStart: off_t
    private let state = Locked<State>(State())

    private struct State {
        var next: Int64 = 0
        var underway: [Int64] = []
        /// The earliest failure: its error, and where the bytes written without a gap end.
        var failure: (error: Errno, end: Int64)?
    }

    init(start: off_t, sizeAtStart: off_t) {
        self.start = start
        self.sizeAtStart = sizeAtStart
    }

    /// The offset for a write of `count` bytes, which ``ended(at:count:unwritten:error:)`` ends; nil once a
    /// write has failed, and the bytes are not written.
    func take(_ count: Int) -> Int64? {
        state.withLock { state in
            guard state.failure == nil else { return nil }
            let offset = state.next
            state.next += Int64(count)
            state.underway.append(offset)
            return offset
        }
    }

    /// The write taken at `offset` has ended, `unwritten` of its `count` bytes not written, with `error`
    /// if it failed. Returns, once, where the output is over (see the type's comment), for ``end(_:)``.
    func ended(at offset: Int64, count: Int, unwritten: Int, error: Errno?) -> Over? {
        state.withLock { state -> Over? in
            guard let index = state.underway.firstIndex(of: offset) else { return nil }
            state.underway.remove(at: index)
            if let error {
                let end = offset + Int64(count - unwritten)
                if state.failure.map({ end < $0.end }) ?? true { state.failure = (error, end) }
            }
            guard let failure = state.failure else {
                // A later write done first leaves the gap before it: the position stays.
                if index == 0 { lseek(STDOUT_FILENO, start + off_t(state.underway.first ?? state.next), SEEK_SET) }
                return nil
            }
            return state.underway.isEmpty ? Over(error: failure.error, end: start + off_t(failure.end)) : nil
        }
    }

    /// Where the output ended after a failed write, once no write is under way: the first failure's error,
    /// and where the bytes written without a gap end.
    struct Over: Sendable {
        let error: Errno
        let end: off_t
    }

    /// Cuts the output back to where it is over and ends the process with the error.
    func end(_ over: Over) -> Never {
        let keep = max(over.end, sizeAtStart)
        var status = stat()
        if fstat(STDOUT_FILENO, &status) == 0 && status.st_size > keep { _ = ftruncate(STDOUT_FILENO, keep) }
        lseek(STDOUT_FILENO, over.end, SEEK_SET)
        Concatenator.writeFailed(over.error)
    }

    /// Puts the position after everything taken (nothing is under way).
    func moveToEnd() {
        state.withLock { state in _ = lseek(STDOUT_FILENO, start + off_t(state.next), SEEK_SET) }
    }

    /// Prints `message` on standard error at the position after everything taken (nothing is under way),
    /// where it lands when standard error shares standard output's open file, and goes on after it.
    func place(_ message: String) {
        state.withLock { state in
            lseek(STDOUT_FILENO, start + off_t(state.next), SEEK_SET)
            printError(message)
            let position = lseek(STDOUT_FILENO, 0, SEEK_CUR)
            if position >= 0 { state.next = Int64(position - start) }
        }
    }
}

/// Consecutive regular files, read as one sequence of windows: a file's first windows are read while the
/// files before it are still being read or written, and everything is written in order.
///
/// One file at a time cost 12–13 context switches per file (the main thread opening it, the ring thread
/// reading it, the handler queue writing it, the main thread again for its end and its close), so `dcat`
/// of 10,000 files of 4 KiB took 1.4–1.8 s where cat took 0.3. Here the main thread opens files and hands
/// them over, up to ``maxFiles`` open at once, issuing the windows a new file may have at once; windows are
/// issued across files while their bytes in flight stay under ``budget``, each window reserving what the
/// file's size at open says it holds; a window is written once the ones before it (of its file and of the
/// files before) are, and a file's message, when it failed, once every byte before it is written.
///
/// The pump that does this runs where a window's read or write completes, on the engine's thread, with the
/// channels' `onCompletingThread` operations: a window's read completes, its write is submitted from that
/// thread with no wake-up, and the next window's read as its write completes, as a C loop on io_uring does.
/// One thread pumps at a time (on the POSIX engine completions come on several), so writes are submitted in
/// order. A failed file's message, which may block on standard error, is printed from the serial queue.
/// When the pump ran on that queue, each window handed over four times (to a pool worker and back to the
/// ring thread, for its write and again for the next read), at 30–60 µs a wake-up on this host, and a run
/// of small files woke the main thread to run it: on 2026-11-27, `dcat 1 GiB > /dev/null` took 0.90× the
/// time with 880 voluntary context switches instead of 2,220, 10,000 files of 4 KiB 0.83×, an empty file
/// 0.97×, and 1 GiB into a file, where the writer sets the pace, the same.
///
/// A file dcat opened whose size at open is under 64 KiB has no channel: its one window is one
/// `IOChannel.readSmallFile` into a buffer of 64 KiB, which counts ``smallWindowReserve`` against the
/// budget. A channel and its read cost more than the read itself at that size: with a channel each, 10,000
/// files of 4 KiB took 0.19–0.30 s of user time and 1.1–1.5x cat's time; without, 0.06–0.07 s and 0.66x.
/// (With channels, counting such a window at 64 KiB instead of a megabyte gave 1.08x, against 1.18x
/// before; without channels, counting a megabyte, 0.90x.) Such a file that grew past its first window gets
/// a channel then.
final class FileRun: @unchecked Sendable {
    /// Files open at once: their descriptors, and so how far the reading may run ahead of the writing.
    static let maxFiles = 16
    /// Bytes of windows read or being written at once, as before across a single file:
    /// ``Concatenator/windowCount`` windows of ``window`` bytes.
    private let budget: Int
    /// What a window of a file without a channel (one `IOChannel.readSmallFile`) counts against the budget:
    /// a sixteenth of it, so that at most sixteen are in flight, the probe pool's idle limit, and their 64 KiB
    /// buffers are reused rather than made anew. Counted at the 64 KiB each pins, ninety-six were in flight
    /// to a pipe, and beside the pools' idle buffers dcat of 400 files of 65,535 bytes around two larger ones
    /// peaked at 14–18 MiB, over the 16 promised (helper-49); now 8.2, with 10,000 files of 4 KiB as fast
    /// (0.66× cat's time; counted at a megabyte, as any window asking 64 KiB was before, six at once, 0.90×).
    private let smallWindowReserve: Int
    /// The unit a read-ahead window's length is rounded up to.
    static let granule = 64 << 10
    /// The most bytes of small windows joined into one write.
    static let joinedWrite = 1 << 20

    /// The memory a window of `length` bytes may hold until written: the channel reads a regular file in
    /// pooled buffers of 1 MiB, one read each, and a read of less than 64 KiB in a buffer of 64 KiB. A read
    /// in a megabyte holds the megabyte while it is in flight, whatever it brings back, so a window's last
    /// read counts a megabyte unless it asks less than 64 KiB. (It counted only what it asked when that was
    /// 256 KiB or less, which is what it holds once copied out: with sixteen files of 130–256 KB read at
    /// once, their megabytes in flight took dcat of medium files around a large one to 15–16.8 MiB, over
    /// the 16 MiB promised; helper-41.)
    static func reserve(_ length: Int) -> Int {
        let chunk = 1 << 20
        let last = length % chunk
        return length - last + (last < 64 << 10 ? last : chunk)
    }

    private struct File {
        let id: Int
        let path: PathName
        let fd: CInt
        /// The channel that reads it; nil for a file opened by dcat whose size at open is under
        /// ``IOChannel/smallReadLimit`` until a window after its first is asked (a file that grew): its
        /// first window is one ``IOChannel/readSmallFile(_:at:length:sizeAtOpen:engine:then:)``.
        var channel: IOChannel?
        /// Closes the descriptor, if dcat opened it, and gives its place back; the channel's cleanup handler.
        let cleanup: @Sendable (Errno?) -> Void
        /// The size at open: windows inside it may be read ahead; the rest is read only at the file's turn.
        let size: Int64
        /// Windows issued so far, and where the next one starts.
        var nextToRead = 0
        var nextOffset: Int64 = 0
        /// Windows taken at the write cursor, which is at this file's `written`.
        var written = 0
        var reading = 0
        var arrived: [Int: Window] = [:]
        /// A window came back short (end of file) or failed: later windows are dropped, none are issued.
        var ended = false
        var failure: Errno?
        var bytes = 0

        /// The next window, when one may be issued now. Inside the size at open a window is read ahead; the
        /// last one asks for one chunk of ``FileRun/granule`` more than the size says is left (going that
        /// much over `window` if need be), so that it comes back short (the end) unless the file grew, and
        /// no read past the size waits for the file's turn. Past the size, only the file at the write
        /// cursor reads, once every window before came back full, a whole window: a file that grew, a /proc
        /// file whose size says 0, a pipe-like file (`trace_pipe`) whose reads consume what they return,
        /// are read at their turn, as cat reads them.
        func nextWindow(atCursor: Bool, window: Int) -> (offset: Int64, length: Int)? {
            guard !ended else { return nil }
            let left = size - nextOffset
            if left > 0 {
                let asked = (left / Int64(FileRun.granule) + 1) * Int64(FileRun.granule)
                return (nextOffset, asked <= window + FileRun.granule ? Int(asked) : window)
            }
            guard atCursor && written == nextToRead else { return nil }
            return (nextOffset, window)
        }
    }

    /// One window's read: where it started, what it asked, and what came back.
    private struct Window {
        let length: Int
        /// What it counts against the budget (see ``FileRun/reserve(_:)``).
        let reserve: Int
        let data: DispatchDataBuffer
        let error: Errno?
    }

    private struct State {
        /// Files not yet finished, in order: the write cursor is in the first.
        var files: [File] = []
        var nextID = 0
        var reserved = 0
        var writing = 0
        /// A failed file's message, printed once no write is in flight; the cursor waits for it.
        var message: String?
        /// Bytes of the last file finished.
        var lastBytes = 0
        /// ``message`` is being printed, on the queue; the cursor waits for it.
        var printing = false
        /// The main thread waits in ``drain()``: set only there; cleared there as it leaves, or by the pump
        /// that finds the run idle and wakes it.
        var drainWaiting = false
        /// A thread is running the pump; another that wants it meanwhile sets ``pumpAgain`` instead.
        var pumping = false
        /// Something changed while the pump ran, which it may not have seen: it runs once more.
        var pumpAgain = false

        var isIdle: Bool { files.isEmpty && writing == 0 && message == nil }
    }

    private let state = Locked(State())
    private let drained = WorkSemaphore(value: 0)
    private let descriptors = WorkSemaphore(value: FileRun.maxFiles)
    /// Files added whose descriptor the run has not yet closed (or, for standard input, let go of).
    private let held = Atomic<Int>(0)
    /// Places given up by ``giveUpAPlace()``.
    private let withheld = Atomic<Int>(0)
    private let concatenator: Concatenator

    init(concatenator: Concatenator) {
        self.concatenator = concatenator
        budget = concatenator.windowCount * window
        smallWindowReserve = budget / 16
    }

    /// Whether nothing added is still being read or written, and no message waits to be printed: a file
    /// opened now is at its turn, as when cat comes to it.
    var isIdle: Bool { state.withLock { $0.isIdle } }

    /// Waits until one more file may be open. Main thread, before opening it.
    func reserveDescriptor() { descriptors.wait() }

    /// Gives back a reservation for a file that was not added.
    func releaseDescriptor() { descriptors.signal() }

    /// After an open failed with `EMFILE` or `ENFILE`: takes one more reservation for good, waiting for a
    /// file of the run to close its descriptor if none is free, so that the run holds one file fewer at
    /// once from then on; false when no file of the run holds a descriptor (the limit is reached without
    /// them, and the error is the file's). Before, such an open waited for the whole run to be written and
    /// closed, so under a tight `ulimit -n` the reading stopped and started again in batches.
    func giveUpAPlace() -> Bool {
        guard held.load(ordering: .acquiring) > 0 else { return false }
        descriptors.wait()
        withheld.add(1, ordering: .relaxed)
        return true
    }

    deinit {
        // The places given up, given back: a semaphore left below its initial value is a misuse (C30).
        for _ in 0..<withheld.load(ordering: .relaxed) { descriptors.signal() }
    }

    /// Adds a regular file, open on `fd`, whose descriptor was reserved. Its reading starts at once if the
    /// budget allows. `openedWithStatus`: the `fstat` of a descriptor dcat has just opened for reading,
    /// which the run closes; nil for standard input.
    func add(path: PathName, fd: CInt, size: Int64, openedWithStatus status: stat?) {
        let descriptors = self.descriptors
        held.add(1, ordering: .releasing)
        let cleanup: @Sendable (Errno?) -> Void = { [self] _ in
            if status != nil { Glibc.close(fd) }
            held.subtract(1, ordering: .releasing)
            descriptors.signal()
        }
        // A small file's one window is one read, with no channel (see `read`).
        let channel = status != nil && size < IOChannel.smallReadLimit ? nil : makeChannel(fd, status, cleanup)
        var reads: [Read] = []
        state.withLock { state in
            let file = File(
                id: state.nextID,
                path: path,
                fd: fd,
                channel: channel,
                cleanup: cleanup,
                size: max(size, 0)
            )
            state.files.append(file)
            state.nextID += 1
            issue(&state, reads: &reads)
        }
        for read in reads { self.read(read) }
    }

    /// A channel on `fd` that delivers each read once, whole, as its final call. `status`: as for ``add``;
    /// nil for standard input, or for a file whose status is out of date (the channel takes it again).
    private func makeChannel(
        _ fd: CInt,
        _ status: stat?,
        _ cleanup: @escaping @Sendable (Errno?) -> Void
    ) -> IOChannel {
        let channel =
            if let status {
                IOChannel(
                    type: .random,
                    justOpened: FileDescriptor(rawValue: fd),
                    flags: O_RDONLY,
                    status: status,
                    queue: concatenator.queue,
                    cleanupHandler: cleanup
                )
            } else {
                IOChannel(
                    type: .random,
                    fileDescriptor: FileDescriptor(rawValue: fd),
                    queue: concatenator.queue,
                    cleanupHandler: cleanup
                )
            }
        // One delivery per window: the whole window, as the read's final call.
        channel.setLimit(lowWater: Int.max)
        return channel
    }

    /// Waits until every file added is written, its message printed and its channel's close issued (the
    /// cleanup handler closes the descriptor, maybe later); returns how many bytes the last one had.
    @discardableResult
    func drain() -> Int {
        // Woken by the pump that leaves the run idle while this waits (it clears `drainWaiting`), which the
        // next look confirms.
        while state.withLock({ state in
            state.drainWaiting = !state.isIdle
            return state.drainWaiting
        }) {
            drained.wait()
        }
        return state.withLock { $0.lastBytes }
    }

    /// Moves the write cursor and issues windows, and wakes ``drain()`` when that leaves the run idle.
    ///
    /// It runs on the thread that calls it: an engine thread as a read or write completes, or the main
    /// thread. One thread runs it at a time, so that writes leave in order; one that finds it running asks
    /// for one more turn and returns at once (a write that fails at once calls back inside the pump).
    /// Before, the pump ran on the concatenator's queue: each window's read and write handed over to a pool
    /// worker and back to the ring thread, four hand-offs per window where this has none.
    private func pump() {
        let claimed = state.withLock { state -> Bool in
            if state.pumping {
                state.pumpAgain = true
                return false
            }
            state.pumping = true
            return true
        }
        guard claimed else { return }
        while true {
            if pumpOnce() { drained.signal() }
            let again = state.withLock { state -> Bool in
                if state.pumpAgain {
                    state.pumpAgain = false
                    return true
                }
                state.pumping = false
                return false
            }
            if !again { return }
        }
    }

    /// One turn of ``pump()``; true when it left the run idle with the main thread waiting for that.
    private func pumpOnce() -> Bool {
        var writes: [(data: DispatchDataBuffer, reserve: Int)] = []
        var reads: [Read] = []
        var closes: [File] = []
        var message: String?
        let idle = state.withLock { state -> Bool in
            state.pumpAgain = false
            advance(&state, writes: &writes, closes: &closes, message: &message)
            if writes.count > 1 && concatenator.joinsWrites {
                // Small windows that reached the cursor together go out in one write, up to 1 MiB (the
                // regions of one `writev`, not copied): many small files are otherwise a write each. Larger
                // ones go as they are, so that each window's memory comes back as soon as it is written.
                var joined: [(data: DispatchDataBuffer, reserve: Int)] = []
                for write in writes {
                    if let last = joined.last, last.data.count + write.data.count <= Self.joinedWrite {
                        joined[joined.count - 1].data.append(write.data)
                        joined[joined.count - 1].reserve += write.reserve
                        state.writing -= 1
                    } else {
                        joined.append(write)
                    }
                }
                writes = joined
            }
            issue(&state, reads: &reads)
            guard state.drainWaiting && state.isIdle else { return false }
            state.drainWaiting = false
            return true
        }
        // Each window's bytes are let go of here as soon as its write is submitted, not when the turn ends:
        // the write may complete on another thread meanwhile and give the window's place back, and the
        // closes and reads below took up to 200 µs on the POSIX engine, during which the next reads took
        // fresh pooled megabytes beside buffers only this list still held. Traced there on 3,000 files: 9–10
        // made for 5 windows (9–12 for 8), now 5–6; peak RSS 10.9–11.9 MiB instead of 13.9–15.1.
        writes.reverse()
        while let write = writes.popLast() {
            // (Never empty, which would call back at once. After a failed write `writeWindow` does call back
            // inside this loop, and that pump only asks for another turn, which drops windows: the write that
            // ends the output never calls back, so the run cannot drain, and the queue ends the process.)
            assert(!write.data.isEmpty)
            // The handler lives as long as the write operation: it holds the count, not the bytes.
            let reserve = write.reserve
            concatenator.writeWindow(write.data) { [self] in
                state.withLock { state in
                    state.writing -= 1
                    state.reserved -= reserve
                }
                pump()
            }
        }
        for file in closes {
            if let channel = file.channel { channel.close() } else { file.cleanup(nil) }
        }
        for read in reads { self.read(read) }
        if let message {
            // On the queue: standard error may be a pipe that blocks, which must not hold up the engine.
            concatenator.queue.async { [self] in
                concatenator.placeMessage(message)
                state.withLock { state in
                    state.message = nil
                    state.printing = false
                }
                pump()
            }
        }
        return idle
    }

    /// Takes the windows that arrived at the write cursor, in order; ends files; gives the message to print
    /// once no write is in flight, and waits for it to be printed. Lock held.
    private func advance(
        _ state: inout State,
        writes: inout [(data: DispatchDataBuffer, reserve: Int)],
        closes: inout [File],
        message: inout String?
    ) {
        while true {
            if let waiting = state.message {
                guard !state.printing && state.writing == 0 && writes.isEmpty else { return }
                state.printing = true
                message = waiting
                return
            }
            guard !state.files.isEmpty else { return }
            if let arrived = state.files[0].arrived.removeValue(forKey: state.files[0].written) {
                state.files[0].written += 1
                if state.files[0].ended {
                    // Read past an end seen earlier (the file grew meanwhile): cat would not have read it.
                    state.reserved -= arrived.reserve
                    continue
                }
                // What a failed window read before its error is written, as cat writes what it read.
                if let error = arrived.error {
                    state.files[0].ended = true
                    state.files[0].failure = error
                } else if arrived.data.count < arrived.length {
                    state.files[0].ended = true
                }
                state.files[0].bytes += arrived.data.count
                if arrived.data.isEmpty {
                    state.reserved -= arrived.reserve
                } else {
                    state.writing += 1
                    writes.append((arrived.data, arrived.reserve))
                }
                continue
            }
            guard state.files[0].ended && state.files[0].reading == 0 else { return }
            let file = state.files.removeFirst()
            closes.append(file)
            state.lastBytes = file.bytes
            if let failure = file.failure {
                state.message = Concatenator.message(file.path, failure)
                concatenator.markFailed()
            }
        }
    }

    /// Issues windows, the earliest files first, while the budget allows. Lock held; from the pump, or from
    /// ``add(path:fd:size:openedWithStatus:)`` on the main thread (reads may be issued in any order: each
    /// window is filed by its index, and only the pump writes).
    private func issue(
        _ state: inout State,
        reads: inout [Read]
    ) {
        for position in state.files.indices {
            while let (offset, asked) = state.files[position].nextWindow(atCursor: position == 0, window: window) {
                let file = state.files[position]
                // A file without a channel reads its first window, all of it at open, in one read into a
                // buffer of 64 KiB. (An empty one's first window is past its size, a whole window by
                // `nextWindow`: it asks 64 KiB too, and a file that grew meanwhile goes on through a channel.)
                let small = file.channel == nil && offset == 0
                let length = small ? min(asked, IOChannel.smallReadLimit) : asked
                let reserve = small ? smallWindowReserve : Self.reserve(length)
                // The file at the write cursor with nothing in flight (no read, no write) always gets a
                // window, whatever the files read ahead of their turn hold (they wait for it to end): a /proc
                // file, whose size says 0, is read only at its turn, and would otherwise wait for ever behind
                // them. At most one window over the budget, then.
                let idleHead =
                    position == 0 && file.reading == 0 && file.written == file.nextToRead && state.writing == 0
                guard idleHead || state.reserved + reserve <= budget else { return }
                // A small file that grew gets its channel for the windows after the first (rare: the channel
                // takes the file's status again, three system calls, here under the lock).
                if file.channel == nil && !small {
                    state.files[position].channel = makeChannel(file.fd, nil, file.cleanup)
                }
                reads.append(
                    Read(
                        channel: small ? nil : state.files[position].channel,
                        fd: file.fd,
                        sizeAtOpen: file.size,
                        id: file.id,
                        index: file.nextToRead,
                        offset: offset,
                        length: length,
                        reserve: reserve
                    )
                )
                state.files[position].nextToRead += 1
                state.files[position].nextOffset = offset + Int64(length)
                state.files[position].reading += 1
                state.reserved += reserve
            }
        }
    }

    /// One window to read: through the file's channel, or with one ``IOChannel/readSmallFile`` when it has
    /// none.
    private struct Read {
        let channel: IOChannel?
        let fd: CInt
        let sizeAtOpen: Int64
        let id: Int
        let index: Int
        let offset: Int64
        let length: Int
        /// What it counts against the budget until written.
        let reserve: Int
    }

    private func read(_ read: Read) {
        guard let channel = read.channel else {
            IOChannel.readSmallFile(
                FileDescriptor(rawValue: read.fd),
                at: read.offset,
                length: read.length,
                sizeAtOpen: read.sizeAtOpen
            ) { [self] data, error in
                // On an engine thread, which files the window and runs the pump.
                state.withLock { state in arrive(&state, read, data: data, error: error) }
                pump()
            }
            return
        }
        let collected = Locked(DispatchDataBuffer())
        channel.read(offset: read.offset, length: read.length) { [self] done, data, error in
            // The bytes are moved on, and the pump runs with no reference to them left here: a window's
            // place comes back when its write completes, and a buffer still held then (by this handler,
            // on another thread than the write's) would be one more pooled megabyte for the next read.
            file(consume data, done: done, error: error, read: read, collected: collected)
            if done { pump() }
        }
    }

    /// Adds a piece of a window's read to what it collected; files the window once the read is done.
    private func file(
        _ data: consuming DispatchDataBuffer?,
        done: Bool,
        error: Errno?,
        read: Read,
        collected: Locked<DispatchDataBuffer>
    ) {
        if let data, !data.isEmpty { collected.withLock { $0.append(data) } }
        guard done else { return }
        state.withLock { state in
            // Taken out: the handler, and `collected` with it, lives as long as the read operation.
            let window = collected.withLock { collected in
                defer { collected = DispatchDataBuffer() }
                return collected
            }
            arrive(&state, read, data: window, error: error)
        }
    }

    /// Files a window's bytes for the pump. Lock held.
    private func arrive(_ state: inout State, _ read: Read, data: DispatchDataBuffer, error: Errno?) {
        guard let position = state.files.firstIndex(where: { $0.id == read.id }) else { return }
        state.files[position].arrived[read.index] = Window(
            length: read.length,
            reserve: read.reserve,
            data: data,
            error: error
        )
        state.files[position].reading -= 1
    }
}

/// The text `strerror` gives, as cat prints it after the path.
func describe(_ error: Errno) -> String {
    String(cString: strerror(error.rawValue))
}

/// Writes a message to standard error in one system call (messages are not file data).
func printError(_ message: String) {
    var message = message
    message.withUTF8 { bytes in
        _ = Glibc.write(STDERR_FILENO, bytes.baseAddress, bytes.count)
    }
}
