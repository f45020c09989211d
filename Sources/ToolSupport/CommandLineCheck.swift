#if canImport(Glibc)
import Glibc
#endif

/// Why the program was given no command line, or nil when it was.
///
/// A statically linked Swift program has no loader to hand it `argv`: the runtime reads
/// `/proc/self/cmdline` instead, and without a descriptor free for that (`ulimit -n 3`) it gets an empty
/// command line, `argc` 0, which the kernel never passes (Linux gives at least an empty `argv[0]`). A tool
/// must stop then: run without operands, dcat would copy standard input instead of the files it was given.
/// The reason is the error a fresh open of that file gets (`/proc/self/cmdline: Too many open files`).
package func unreadableCommandLine() -> String? {
    guard CommandLine.argc == 0 else { return nil }
    let fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC)
    guard fd < 0 else {
        close(fd)
        return "the command line could not be read"
    }
    return "/proc/self/cmdline: \(String(cString: strerror(errno)))"
}
