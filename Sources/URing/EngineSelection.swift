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
    guard let release = kernelRelease else { return false }
    return release >= (major, minor)
}

/// The running kernel's `major.minor`, read once.
private let kernelRelease: (Int, Int)? = {
    var name = utsname()
    guard uname(&name) == 0 else { return nil }
    return withUnsafeBytes(of: &name.release) { kernelVersion(release: $0) }
}()

/// The first two numbers of a kernel release (`6.18.44-fc` gives 6 and 18), or nil without two; the
/// release ends at its first NUL byte. Parsed as ASCII bytes: going through `String` and
/// `Character.isNumber` loaded Unicode property tables, about 50 µs of every tool's start.
package func kernelVersion(release: some Collection<UInt8>) -> (Int, Int)? {
    var numbers: [Int] = []
    var current: Int?
    for byte in release.prefix(while: { $0 != 0 }) + [0] {
        if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
            // Wrapping: a release of absurd digits gives a wrong number, not a crash.
            current = (current ?? 0) &* 10 &+ Int(byte - UInt8(ascii: "0"))
            continue
        }
        if let number = current { numbers.append(number) }
        current = nil
        if numbers.count == 2 { break }
    }
    return numbers.count == 2 ? (numbers[0], numbers[1]) : nil
}
