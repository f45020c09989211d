#if canImport(Glibc)
import Glibc
#endif

/// Which engine the process uses, and why.
///
/// The choice is made once, on first use of ``IOEngine/shared``. `DISPATCH_ENGINE=uring` or
/// `DISPATCH_ENGINE=posix` in the environment forces a kind; otherwise io_uring is used when the probe
/// (ring set-up, `kernel.io_uring_disabled`, the opcodes the engine needs) succeeds. The reason is kept
/// here for `--engine`-style diagnostics; nothing is printed to standard output. A forced io_uring that
/// cannot be had falls back to the POSIX engine with one line on standard error, since the user asked for
/// something they are not getting.
package struct EngineSelection: Sendable {
    /// The engine in use.
    package let engine: IOEngine
    /// Why this engine was chosen, in words a user can act on.
    package let reason: String

    /// Its kind.
    package var kind: EngineKind { engine.kind }

    static let shared: EngineSelection = choose(environment: getenv("DISPATCH_ENGINE").map { String(cString: $0) })

    static func choose(environment value: String?) -> EngineSelection {
        switch value?.lowercased() {
        case "posix":
            return EngineSelection(engine: try! IOEngine(kind: .posix), reason: "forced by DISPATCH_ENGINE=posix")
        case "uring", "io_uring":
            do {
                return EngineSelection(engine: try IOEngine(kind: .uring), reason: "forced by DISPATCH_ENGINE=uring")
            } catch {
                let reason =
                    "DISPATCH_ENGINE=uring, but io_uring is unusable: \(error.description); using the POSIX engine"
                let line = "dispatch: \(reason)\n"
                _ = line.withCString { Glibc.write(STDERR_FILENO, $0, strlen($0)) }
                return EngineSelection(engine: try! IOEngine(kind: .posix), reason: reason)
            }
        default:
            do {
                return EngineSelection(engine: try IOEngine(kind: .uring), reason: "io_uring probe succeeded")
            } catch {
                return EngineSelection(
                    engine: try! IOEngine(kind: .posix),
                    reason: "io_uring unusable (\(error.description)); using the POSIX engine"
                )
            }
        }
    }
}

/// Whether the running kernel's release (`uname -r`) is at least `major.minor`; false if it cannot be read.
package func kernelAtLeast(_ major: Int, _ minor: Int) -> Bool {
    var name = utsname()
    guard uname(&name) == 0 else { return false }
    let release = withUnsafeBytes(of: &name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    let parts = release.split(whereSeparator: { !$0.isNumber }).prefix(2).compactMap { Int($0) }
    guard parts.count == 2 else { return false }
    return (parts[0], parts[1]) >= (major, minor)
}
