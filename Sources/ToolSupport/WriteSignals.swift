import Synchronization
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// How a tool ends when a write fails in a way the kernel answers with a signal: `SIGPIPE` for a pipe
/// without reader (`EPIPE`), `SIGXFSZ` for a file past `ulimit -f` (`EFBIG`). cat and cp die of them where
/// their action is the default, and a shell sees status 141 or 153.
///
/// The tools' writes do not get those signals: the engine's threads block both, and io_uring's workers
/// take neither, so the write comes back with the error instead. A tool that gets one calls
/// ``endAsTheKernelWould(after:)``, which raises the signal where it would have ended cat or cp. Where the
/// signal is ignored or blocked, cat and cp report the error (`write error: Broken pipe`, `error writing
/// 'f': File too large`) and go on or exit with status 1, and so do the tools.
package enum WriteSignals {
    private static let pipeEnds = Atomic<Bool>(true)
    private static let sizeLimitEnds = Atomic<Bool>(true)

    /// Reads how `SIGPIPE` and `SIGXFSZ` end the process. Call it on the main thread, at start: the
    /// engine's threads block both, and a pool thread one of them started would inherit that mask.
    package static func noteDispositions() {
        var blocked = sigset_t()
        guard pthread_sigmask(SIG_BLOCK, nil, &blocked) == 0 else { return }
        func ends(_ signal: CInt) -> Bool {
            var action = sigaction()
            return sigaction(signal, nil, &action) == 0 && action.__sigaction_handler.sa_handler == nil
                && sigismember(&blocked, signal) == 0
        }
        pipeEnds.store(ends(SIGPIPE), ordering: .relaxed)
        sizeLimitEnds.store(ends(SIGXFSZ), ordering: .relaxed)
    }

    /// Blocks `SIGPIPE` in the calling thread, and so in every thread it starts from then on: a write to a
    /// pipe without reader then fails with `EPIPE` on whichever thread makes it, and the tool ends by the
    /// signal when it chooses (``endAsTheKernelWould(after:)``), not in the middle of its work on whichever
    /// thread wrote. Call it on the main thread after ``noteDispositions()``, before any thread starts.
    package static func holdBrokenPipe() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// The signal the kernel sends for a write that failed with `error`, when that signal would end the
    /// process; nil otherwise (any other error included).
    package static func signalEnding(after error: Errno) -> CInt? {
        switch error {
        case .brokenPipe where pipeEnds.load(ordering: .relaxed): SIGPIPE
        case .fileTooLarge where sizeLimitEnds.load(ordering: .relaxed): SIGXFSZ
        default: nil
        }
    }

    /// Ends the process by the signal the kernel sends for a write that failed with `error`, when that
    /// signal would end it; returns otherwise (any other error included). From any thread.
    package static func endAsTheKernelWould(after error: Errno) {
        guard let signal = signalEnding(after: error) else { return }
        Glibc.signal(signal, SIG_DFL)
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, signal)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
        raise(signal)
        _exit(128 + signal)
    }
}
