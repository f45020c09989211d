import CGlibcExtras
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What one shell command produced.
struct Outcome: Equatable, CustomStringConvertible {
    var status: Int32
    var stdout: Data
    var stderr: String

    var text: String { String(decoding: stdout, as: UTF8.self) }
    var description: String { "status \(status), stdout \(stdout.count) bytes, stderr \(stderr.debugDescription)" }
}

/// Where the built tools are, and a scratch directory per test.
enum Tools {
    /// The directory holding `dcat` and `dcopy`: `$DISPATCH_TOOLS_BIN` when set (the test script points it
    /// at the release build, which is linked differently), else the test bundle's own build directory,
    /// where `swift build --build-tests` puts every product.
    static let binDirectory: String = {
        if let bin = ProcessInfo.processInfo.environment["DISPATCH_TOOLS_BIN"], !bin.isEmpty { return bin }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
        var candidates = [URL(fileURLWithPath: exe).deletingLastPathComponent().path]
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        candidates += ["debug", "release"].map { root.appendingPathComponent(".build/\($0)").path }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0 + "/dcopy") } ?? candidates[0]
    }()

    static var dcat: String { binDirectory + "/dcat" }
    static var dcopy: String { binDirectory + "/dcopy" }

    /// Whether the tools are static executables (the release build): without a dynamic loader, a tool
    /// starts even with no descriptor free, where a dynamically linked one (the debug build, cat) fails in
    /// its loader before `main`. Decided by the ELF program headers of `dcat`: a loader is a `PT_INTERP`.
    static let areStatic: Bool = {
        guard let elf = FileManager.default.contents(atPath: dcat), elf.count >= 64 else { return false }
        func integer(_ offset: Int, _ size: Int) -> Int {
            (0..<size).reduce(0) { $0 | Int(elf[offset + $1]) << (8 * $1) }
        }
        let (headers, size, count) = (integer(32, 8), integer(54, 2), integer(56, 2))
        let interpreter = 3  // PT_INTERP
        return !(0..<count).contains {
            headers + $0 * size + 4 <= elf.count && integer(headers + $0 * size, 4) == interpreter
        }
    }()

    /// The checked-in fixtures, with the empty directory git cannot store.
    static let fixtures: String = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let path = root.appendingPathComponent("Fixtures").path
        try? FileManager.default.createDirectory(atPath: path + "/tree/empty", withIntermediateDirectories: true)
        return path
    }()
}

/// A temporary directory, removed by `remove()`.
struct Scratch {
    let path: String

    init() throws {
        var template = Array("/tmp/tooltests.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw POSIXError(.EIO) }
        path = String(cString: made)
        // Readable by the unprivileged user of the permission tests.
        chmod(path, 0o755)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }

    /// Runs `script` for dcat and then for cat: `%@` stands for the command, `%N` for its name (what its
    /// messages start with).
    func runDcatAndCat(_ script: String) throws -> (ours: Outcome, theirs: Outcome) {
        let ours = try run(
            script.replacingOccurrences(of: "%@", with: "\"$DCAT\"").replacingOccurrences(of: "%N", with: "dcat")
        )
        let theirs = try run(
            script.replacingOccurrences(of: "%@", with: "cat").replacingOccurrences(of: "%N", with: "cat")
        )
        return (ours, theirs)
    }

    /// Runs `script` with bash in this directory, with `$DCAT`, `$DCOPY` and `$FIX` set; standard output
    /// and error go to files, so large outputs cannot fill a pipe and block.
    func run(_ script: String) throws -> Outcome {
        let out = path + "/.stdout"
        let err = path + "/.stderr"
        let process = Process()
        // Under `timeout`, below the suites' one-minute limit: a tool that hangs then fails its test (status
        // 124) instead of hanging the whole run, since nothing else can end a wait on a child process.
        process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        process.arguments = [
            "-k", "5", "50", "/bin/bash", "-c", "exec >\(out) 2>\(err); umask 022; \(script)",
        ]
        process.currentDirectoryURL = URL(fileURLWithPath: path)
        var environment = ProcessInfo.processInfo.environment
        environment["DCAT"] = Tools.dcat
        environment["DCOPY"] = Tools.dcopy
        environment["FIX"] = Tools.fixtures
        environment["LC_ALL"] = "C"
        process.environment = environment
        try process.run()
        process.waitUntilExit()
        let status =
            process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
        let stdout = (try? Data(contentsOf: URL(fileURLWithPath: out))) ?? Data()
        let stderr = (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
        return Outcome(status: status, stdout: stdout, stderr: stderr)
    }
}

/// Runs a test body in a fresh scratch directory.
func inScratch(_ body: (Scratch) throws -> Void) throws {
    let scratch = try Scratch()
    defer { scratch.remove() }
    try body(scratch)
}

/// The peer's message with its name replaced by ours, for comparing stderr.
func renamed(_ message: String, from peer: String, to tool: String) -> String {
    message.replacingOccurrences(of: "\(peer): ", with: "\(tool): ")
        .replacingOccurrences(of: "Try '\(peer) --help'", with: "Try '\(tool) --help'")
}

/// Whether this process runs as root (permission tests then drop to uid 65534 in the child).
var isRoot: Bool { geteuid() == 0 }

/// Names that exercise GNU's quoting in messages and `-v` lines, as shell words: a space, single and
/// double quotes, shell metacharacters, `#` and `~` where a word starts, a lone brace, controls, a
/// character past ASCII, one the UTF-8 locale cannot print (U+2028), and bytes that are not UTF-8.
let awkwardNames = [
    "'a b'", "\"it's\"", "\"it's \\$x\"", "'a\"b'", "'x=y'", "'#a'", "'a#'", "'~a'", "'{'", "'a:b'",
    "'back\\slash'", "\"$(printf 't\\tb')\"", "\"$(printf 'n\\nl')\"", "\"$(printf 'del\\177')\"",
    "\"$(printf 'caf\\303\\251')\"", "\"$(printf 'ls\\342\\200\\250')\"", "\"$(printf 'b\\377\\376')\"",
    "\"$(printf \"q'\\377x\")\"",
]

/// A name GNU's quoting spells with a quirk: it has a single quote and ends in an escape, so the second
/// pass starts inside `$'...'` and writes `''` first (`'''q'\'''$'\377'`). As the second name of a message
/// (a `-v` line's destination) cp prints it cut short, reading past its buffer; only first names are
/// compared.
let quirkyName = "\"$(printf \"q'\\377\")\""

/// The locales messages are compared in: C, where every byte past ASCII is escaped, and C.UTF-8 where
/// it is installed, where printable characters are written as they are.
let messageLocales = ["C"] + (FileManager.default.fileExists(atPath: "/usr/lib/locale/C.utf8") ? ["C.UTF-8"] : [])

/// Opens a pseudo-terminal; returns its master and its slave (neither is the test's controlling terminal).
/// Glibc declares `posix_openpt`, `grantpt`, `unlockpt` and `ptsname` only for `_XOPEN_SOURCE`, which the
/// Swift Glibc module is not built with, so they are looked up in the C library by name.
func openPseudoTerminal() throws -> (master: CInt, slave: CInt) {
    let library = dlopen(nil, RTLD_NOW)
    func function<F>(_ name: String, _ type: F.Type) throws -> F {
        unsafeBitCast(try #require(dlsym(library, name)), to: type)
    }
    let openMaster = try function("posix_openpt", (@convention(c) (CInt) -> CInt).self)
    let grant = try function("grantpt", (@convention(c) (CInt) -> CInt).self)
    let unlock = try function("unlockpt", (@convention(c) (CInt) -> CInt).self)
    let slaveName = try function("ptsname", (@convention(c) (CInt) -> UnsafeMutablePointer<CChar>?).self)
    let master = openMaster(O_RDWR | O_NOCTTY | O_CLOEXEC)
    try #require(master >= 0)
    guard grant(master) == 0, unlock(master) == 0, let name = slaveName(master) else {
        close(master)
        throw POSIXError(.EIO)
    }
    let slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)
    guard slave >= 0 else {
        close(master)
        throw POSIXError(.EIO)
    }
    return (master, slave)
}

/// Appends what arrives on `fd` to `output` until `done` holds for it, or with `done` nil until end of file;
/// false if that has not happened within 10 seconds.
func readOutput(_ fd: CInt, into output: inout Data, until done: ((Data) -> Bool)?) -> Bool {
    let deadline = ContinuousClock.now + .seconds(10)
    var buffer = [UInt8](repeating: 0, count: 4096)
    while done?(output) != true {
        let left = deadline - ContinuousClock.now
        guard left > .zero else { return false }
        var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let milliseconds = left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000
        guard poll(&ready, 1, CInt(milliseconds) + 1) > 0 else { continue }
        let count = read(fd, &buffer, buffer.count)
        if count == 0 { return done == nil }
        if count > 0 { output.append(contentsOf: buffer[..<count]) }
    }
    return true
}

/// Runs `executable` with a pseudo-terminal as standard input and a pipe as standard output, enters two
/// lines, each once the one before has come out (a copy that held them back fails here), then VEOF at a
/// line's start, which must end it with status 0 and both lines out: as cat and cp copy a terminal.
func expectTerminalCopiedLineByLine(_ executable: String, arguments: [String]) throws {
    let (master, slave) = try openPseudoTerminal()
    defer { close(master) }
    var settings = termios()
    try #require(tcgetattr(slave, &settings) == 0)
    let endOfFile = withUnsafeBytes(of: settings.c_cc) { $0[Int(VEOF)] }
    var ends: [CInt] = [-1, -1]
    try #require(pipe(&ends) == 0)
    defer { close(ends[0]) }
    // No other child (tests run in parallel) may inherit the write end and hold the pipe open.
    for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    process.standardInput = FileHandle(fileDescriptor: slave, closeOnDealloc: false)
    process.standardOutput = FileHandle(fileDescriptor: ends[1], closeOnDealloc: false)
    try process.run()
    // Only the tool holds the write end now: the pipe's end of file means it is gone.
    close(slave)
    close(ends[1])
    defer {
        // SIGKILL: a blocked SIGTERM (the signal mask is inherited) would leave a hung tool running.
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    var output = Data()
    func enter(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) } }
    enter(Array("one\n".utf8))
    #expect(readOutput(ends[0], into: &output, until: { $0 == Data("one\n".utf8) }))
    enter(Array("two\n".utf8))
    #expect(readOutput(ends[0], into: &output, until: { $0 == Data("one\ntwo\n".utf8) }))
    enter([endOfFile])
    let ended = readOutput(ends[0], into: &output, until: nil)
    #expect(ended)
    guard ended else { return }
    process.waitUntilExit()
    #expect(output == Data("one\ntwo\n".utf8))
    #expect(process.terminationReason == .exit)
    #expect(process.terminationStatus == 0)
}

/// Runs `executable` between two pipes, sends a line through, and expects the input pipe, and the output
/// pipe when `output`, to have been grown to 1 MiB by then (a line through means the tool has looked at
/// them: it grows them before its first read); then the end of input must end it with status 0.
func expectPipesGrown(_ executable: String, arguments: [String], output checksOutput: Bool) throws {
    var input: [CInt] = [-1, -1]
    var output: [CInt] = [-1, -1]
    try #require(pipe(&input) == 0 && pipe(&output) == 0)
    defer { for fd in [input[1], output[0]] where fd >= 0 { close(fd) } }
    // No other child (tests run in parallel) may inherit an end and hold the pipe open.
    for fd in input + output { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    process.standardInput = FileHandle(fileDescriptor: input[0], closeOnDealloc: false)
    process.standardOutput = FileHandle(fileDescriptor: output[1], closeOnDealloc: false)
    try process.run()
    close(input[0])
    close(output[1])
    defer {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
    _ = "through\n".withCString { write(input[1], $0, 8) }
    var copied = Data()
    #expect(readOutput(output[0], into: &copied, until: { $0 == Data("through\n".utf8) }))
    let getPipeSize: CInt = 1032  // F_GETPIPE_SZ
    #expect(fcntl(input[1], getPipeSize) == 1 << 20)
    if checksOutput { #expect(fcntl(output[0], getPipeSize) == 1 << 20) }
    close(input[1])
    input[1] = -1
    #expect(readOutput(output[0], into: &copied, until: nil))
    process.waitUntilExit()
    #expect(process.terminationStatus == 0)
}

/// Runs `program` with `arguments` (on `engine`, when it is one of the tools) with `input` as its standard
/// input and its standard output in a file of `scratch`, while `feed` writes the input's other end and
/// closes it; returns the exit status and the output. `input` is closed here once the program has it.
func runFeeding(
    _ program: String,
    arguments: [String] = [],
    engine: String,
    input: CInt,
    in scratch: Scratch,
    feed: () -> Void
) throws -> (status: Int32, output: Data) {
    let path = scratch.path + "/fed"
    try #require(FileManager.default.createFile(atPath: path, contents: nil))
    let output = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    defer { try? output.close() }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: program)
    process.arguments = arguments
    process.environment = ["DISPATCH_ENGINE": engine]
    process.standardInput = FileHandle(fileDescriptor: input, closeOnDealloc: false)
    process.standardOutput = output
    try process.run()
    close(input)
    feed()
    process.waitUntilExit()
    let status = process.terminationReason == .exit ? process.terminationStatus : 128 + process.terminationStatus
    return (status, try Data(contentsOf: URL(fileURLWithPath: path)))
}

/// Runs `executable` with `arguments` under strace, on the POSIX engine (io_uring's reads do not show in
/// strace), with a pseudo-terminal, a character device, as standard input and standard output in a file of
/// `scratch`; enters 300 lines of 4,000 bytes (more than a megabyte) and VEOF. Every byte must come out, and
/// no read of the terminal may have asked for less than cat's and cp's 128 KiB: a device may give one record
/// per read and drop what a shorter read did not ask for, or refuse that read (`/dev/kmsg`: EINVAL).
func expectNoDeviceReadAsksForLessThan128KiB(_ executable: String, arguments: [String], in scratch: Scratch) throws {
    let (master, slave) = try openPseudoTerminal()
    defer { close(master) }
    var settings = termios()
    try #require(tcgetattr(slave, &settings) == 0)
    let endOfFile = withUnsafeBytes(of: settings.c_cc) { $0[Int(VEOF)] }
    // No echo: nobody reads the master's side, where it would pile up.
    settings.c_lflag &= ~tcflag_t(ECHO)
    try #require(tcsetattr(slave, TCSANOW, &settings) == 0)
    _ = fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK)
    let trace = scratch.path + "/trace"
    let copied = scratch.path + "/copied"
    try #require(FileManager.default.createFile(atPath: copied, contents: nil))
    let output = try FileHandle(forWritingTo: URL(fileURLWithPath: copied))
    defer { try? output.close() }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/strace")
    process.arguments = ["-f", "-e", "trace=preadv2", "-o", trace, executable] + arguments
    process.environment = ["DISPATCH_ENGINE": "posix"]
    process.standardInput = FileHandle(fileDescriptor: slave, closeOnDealloc: false)
    process.standardOutput = output
    try process.run()
    close(slave)
    defer {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
    let line = [UInt8](repeating: UInt8(ascii: "x"), count: 3_999) + [10]
    let deadline = ContinuousClock.now + .seconds(20)
    func enter(_ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count && ContinuousClock.now < deadline {
            var ready = pollfd(fd: master, events: Int16(POLLOUT), revents: 0)
            guard poll(&ready, 1, 100) == 1 else { continue }
            let count = bytes[sent...].withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
            if count > 0 { sent += count }
        }
        return sent == bytes.count
    }
    for _ in 0..<300 { try #require(enter(line)) }
    try #require(enter([endOfFile]))
    while process.isRunning && ContinuousClock.now < deadline { usleep(10_000) }
    try #require(!process.isRunning, "still running")
    #expect(process.terminationStatus == 0)
    let bytes = try Data(contentsOf: URL(fileURLWithPath: copied))
    #expect(bytes.count == 300 * line.count)
    let calls = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n").filter {
        $0.contains("preadv2(")
    }
    let asked = calls.compactMap { $0.firstMatch(of: /iov_len=(\d+)/).flatMap { Int($0.1) } }
    #expect(!asked.isEmpty)
    #expect(asked.allSatisfy { $0 >= 128 << 10 }, "\(Set(asked).sorted())")
}

/// Feeds 2,000 packets of 3,000 bytes through a packet-mode pipe (`pipe2` with `O_DIRECT`) into `peer` and
/// into `tool` on each engine, all run with `arguments`, and expects status 0 and every byte on standard
/// output from each. A read that asks for less than the next packet gets its first bytes, and the kernel
/// drops the rest.
func expectEveryPacketCopied(by tool: String, as peer: String, arguments: [String]) throws {
    let packets = (0..<2_000).map { index in (0..<3_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index) } }
    let expected = Data(packets.joined())
    try inScratch { scratch in
        for (program, engine) in [(peer, ""), (tool, "uring"), (tool, "posix")] {
            var ends: [CInt] = [-1, -1]
            try #require(glibc_extras_pipe2(&ends, __O_DIRECT | O_CLOEXEC) == 0)
            let (status, output) = try runFeeding(
                program,
                arguments: arguments,
                engine: engine,
                input: ends[0],
                in: scratch
            ) {
                defer { close(ends[1]) }
                for packet in packets {
                    var ready = pollfd(fd: ends[1], events: Int16(POLLOUT), revents: 0)
                    guard poll(&ready, 1, 10_000) == 1, ready.revents & Int16(POLLOUT) != 0,
                        write(ends[1], packet, packet.count) == packet.count
                    else { return }
                }
            }
            #expect(status == 0, "\(program) \(engine)")
            #expect(output.count == expected.count, "\(program) \(engine)")
            #expect(output == expected ? true : false, "\(program) \(engine)")
        }
    }
}
