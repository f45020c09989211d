import SystemPackage

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Stops the process because a thread it cannot do without could not be started, naming the thread, the
/// error and, for `EAGAIN`, the likely limit.
///
/// `fatalError`, not `precondition`: optimised builds drop a precondition's message, and the tools, built
/// optimised, then died of a bare `SIGILL` at `ulimit -u 3`. A process at its limit of processes and
/// threads (`ulimit -u`, a cgroup's `pids.max`) gets `EAGAIN` from `pthread_create`; it cannot run its I/O
/// or its queued work without the thread, and waiting would be a hang.
package func cannotStartThread(_ role: String, error rc: CInt) -> Never {
    let hint =
        rc == EAGAIN
        ? "; the process is most likely at its limit of processes and threads (ulimit -u, a cgroup's pids.max)" : ""
    fatalError("cannot start \(role) (pthread_create: \(Errno(rawValue: rc)))\(hint)")
}
