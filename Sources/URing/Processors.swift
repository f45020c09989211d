import CURing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The number of CPUs this process may run on, at least 1: its affinity mask, as libdispatch counts them, so
/// that a process pinned with `taskset` sizes its thread pools to the CPUs it has.
///
/// One system call, where `sysconf(_SC_NPROCESSORS_ONLN)` opens, reads and closes a sysfs file: 0.4 against
/// 16 µs here, paid by every start of the tools. `sysconf` answers when the mask cannot be read (a machine
/// with more than 1,024 CPUs).
package func usableProcessorCount() -> Int {
    let counted = Int(curing_affinity_cpu_count())
    return max(1, counted > 0 ? counted : sysconf(Int32(_SC_NPROCESSORS_ONLN)))
}

/// Whether the calling thread is the process's initial thread: its thread id is the process id. One system
/// call; reading `/proc/thread-self` instead took a path walk in procfs and a string to parse.
package func isProcessInitialThread() -> Bool {
    curing_gettid() == getpid()
}
