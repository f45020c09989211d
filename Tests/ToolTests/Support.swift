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
