import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// How a tool ends when the reader of its standard output goes away: as cat and cp end, by `SIGPIPE`,
/// where its action is the default and the main thread does not block it.
///
/// The engine's threads block `SIGPIPE`, so a write to a pipe without a reader comes back as `EPIPE`
/// instead of ending the process; a tool that gets it calls ``end()`` when ``endsTheProcess``, and a
/// shell sees status 141 as it does for cat and cp. Where `SIGPIPE` is ignored or blocked, cat and cp
/// report `write error: Broken pipe` and exit with status 1, and so do the tools.
package enum BrokenPipe {
    private static let ends = Atomic<Bool>(true)

    /// Reads how `SIGPIPE` ends the process. Call it on the main thread, at start: the engine's threads
    /// block it, and a pool thread one of them started would inherit that mask.
    package static func noteDisposition() {
        var action = sigaction()
        var blocked = sigset_t()
        let ends =
            sigaction(SIGPIPE, nil, &action) == 0 && action.__sigaction_handler.sa_handler == nil
            && pthread_sigmask(SIG_BLOCK, nil, &blocked) == 0 && sigismember(&blocked, SIGPIPE) == 0
        Self.ends.store(ends, ordering: .relaxed)
    }

    /// Whether `EPIPE` from standard output ends the process by `SIGPIPE`, as it would end cat and cp.
    package static var endsTheProcess: Bool { ends.load(ordering: .relaxed) }

    /// Ends the process by `SIGPIPE`, from any thread.
    package static func end() -> Never {
        signal(SIGPIPE, SIG_DFL)
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGPIPE)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
        raise(SIGPIPE)
        _exit(128 + SIGPIPE)
    }
}
