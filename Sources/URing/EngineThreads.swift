import SystemPackage

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The stack of each of the engine's own threads (the io_uring engine's ring thread, the POSIX engine's
/// pool, reactor and timer threads): 1 MiB, where a thread gets `RLIMIT_STACK`'s 8 MiB by default. They run
/// the engine's code and the short handlers that run on the thread completing an operation, never queued
/// work, which the worker pool's threads run with the default stack. Under an address-space limit
/// (`ulimit -v`) the default stacks were most of a tool's size: six of them, 48 of dcat's 70 MB on the POSIX
/// engine, which could not start at 60 MB where cat runs in 5 (helper-62, helper-63).
package let engineThreadStackSize = 1 << 20

/// Starts a thread of the engine's own with a stack of ``engineThreadStackSize`` bytes, as `pthread_create`
/// does; returns its result.
package func startEngineThread(
    _ thread: inout pthread_t,
    _ body: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer?,
    _ context: UnsafeMutableRawPointer?
) -> CInt {
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    pthread_attr_setstacksize(&attributes, engineThreadStackSize)
    return pthread_create(&thread, &attributes, body, context)
}

/// Stops the process because a thread it cannot do without could not be started, naming the thread, the
/// error and, for `EAGAIN`, the likely limits.
///
/// `fatalError`, not `precondition`: optimised builds drop a precondition's message, and the tools, built
/// optimised, then died of a bare `SIGILL` at `ulimit -u 3`. `pthread_create` fails with `EAGAIN` in a
/// process at its limit of processes and threads (`ulimit -u`, a cgroup's `pids.max`), and in one whose
/// address space has no room left for the thread's stack (`ulimit -v`); it cannot run its I/O or its queued
/// work without the thread, and waiting would be a hang.
package func cannotStartThread(_ role: String, error rc: CInt) -> Never {
    let hint =
        rc == EAGAIN
        ? "; the process is most likely at its limit of processes and threads (ulimit -u, a cgroup's pids.max)"
            + " or of address space (ulimit -v)" : ""
    fatalError("cannot start \(role) (pthread_create: \(Errno(rawValue: rc)))\(hint)")
}
