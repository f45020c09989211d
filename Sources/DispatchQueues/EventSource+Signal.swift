import URing

#if canImport(Glibc)
import Glibc
#endif

extension EventSource {
    /// Makes a source that fires when the process receives `signal`.
    ///
    /// The event handler runs on `queue`; inside it, ``data`` is the number of deliveries of the signal
    /// since the previous call, counted as the kernel queued them (standard signals sent while one is
    /// already pending merge into one in the kernel) — libdispatch on Linux always reports 1 (SEMANTICS
    /// D12). Several sources for one signal all fire for each delivery (D33). ``handle`` is the signal
    /// number. Signals that arrive after creation and before activation are kept (D1).
    ///
    /// ## How the signal is observed
    /// The signal is read through a `signalfd(2)` polled by the engine. For that, the signal must stay
    /// pending rather than be delivered to a thread, so the process must block it, and signal masks are
    /// per thread: no thread can block a signal in another. While at least one source for the signal
    /// exists, the source therefore installs a small forwarding handler (the previous action is saved): a
    /// thread that still has the signal unblocked and receives it adds the signal to its own mask (through
    /// the saved context, so it stays blocked after the handler returns) and sends the signal again to the
    /// process, where it stays pending for the signalfd. Each thread pays that detour at most once. Unlike
    /// libdispatch (D32), the previous action — a user handler, `SIG_IGN` or the default — is put back
    /// when the last source for the signal is cancelled or released.
    ///
    /// Limits, which follow from per-thread masks:
    /// - Threads that received the signal while a source existed keep it blocked afterwards (only a thread
    ///   can unblock its own mask). A signal sent after the last source is gone then waits, pending, for a
    ///   thread that has it unblocked, instead of running its action at once.
    /// - Signal a process-wide target (`kill(getpid(), signal)`, `kill(1)` from outside). A signal sent to
    ///   one thread (`raise`, `pthread_kill`) that already has it blocked stays pending for that thread
    ///   only, where the signalfd, read on the engine's thread, cannot see it.
    /// - While a source exists, a handler of your own for the signal does not run.
    /// - A process started (`posix_spawn`, `fork` + `exec`) from a thread that has the signal blocked
    ///   starts with it blocked too, as POSIX keeps the mask across `exec`; libdispatch's worker threads,
    ///   which block every asynchronous signal, pass on the same.
    ///
    /// `signal` must be in `1..<NSIG` and must not be `SIGKILL`, `SIGSTOP` (which cannot be caught) or
    /// one of the synchronous fault signals `SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`; anything else is a
    /// programming error that stops the process (D3: libdispatch returns NULL, which the Swift overlay then
    /// crashes on).
    ///
    /// - Parameters:
    ///   - signal: The signal number, e.g. `SIGUSR1`, `SIGHUP`, `SIGTERM`.
    ///   - queue: The queue the handlers run on; `nil` means the default global queue.
    public static func makeSignalSource(signal: Int32, queue: WorkQueue? = nil) -> EventSource {
        makeSignalSource(signal: signal, queue: queue, engine: .shared)
    }

    package static func makeSignalSource(signal: Int32, queue: WorkQueue?, engine: IOEngine) -> EventSource {
        sourceRequire(signal >= 1 && signal < 65, "EventSource.makeSignalSource: \(signal) is not a signal number")
        sourceRequire(
            ![SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGILL, SIGFPE].contains(signal),
            "EventSource.makeSignalSource: signal \(signal) cannot be watched (it cannot be caught, or is a synchronous fault)"
        )
        let core = SourceCore(kind: .signal, handle: UInt(signal), mask: 0, target: queue, engine: engine)
        core.monitor = SignalMonitor(core: core, signal: signal)
        return EventSource(core: core)
    }
}

/// A signal source's link to the shared per-signal reader; attached at creation, so deliveries before
/// activation are counted.
final class SignalMonitor: SourceMonitor, @unchecked Sendable {
    let signal: CInt
    let entry: SignalEntry
    private let core: Unmanaged<SourceCore>

    init(core: SourceCore, signal: CInt) {
        self.signal = signal
        self.core = .passUnretained(core)
        entry = SignalRegistry.shared.attach(core, signal: signal)
    }

    func start() {}

    func stop(then done: @escaping @Sendable () -> Void) {
        SignalRegistry.shared.detach(core.takeUnretainedValue(), from: entry, then: done)
    }
}

/// The one signalfd per watched signal, shared by every source for that signal (D33).
final class SignalRegistry: @unchecked Sendable {
    static let shared = SignalRegistry()

    private let lock = Lock()
    // Guarded by `lock`.
    private var entries: [CInt: SignalEntry] = [:]

    func attach(_ core: SourceCore, signal: CInt) -> SignalEntry {
        lock.lock()
        defer { lock.unlock() }
        if let entry = entries[signal] {
            entry.readers.withLock { $0[ObjectIdentifier(core)] = core }
            return entry
        }
        let entry = SignalEntry(signal: signal, engine: core.engine)
        entry.readers.withLock { $0[ObjectIdentifier(core)] = core }
        entries[signal] = entry
        entry.watch.arm()
        return entry
    }

    /// Removes `core` from the readers; `done` runs at once, or, when it was the last reader, once the
    /// signalfd is closed and the previous action is back.
    func detach(_ core: SourceCore, from entry: SignalEntry, then done: @escaping @Sendable () -> Void) {
        lock.lock()
        let empty = entry.readers.withLock { readers in
            readers[ObjectIdentifier(core)] = nil
            return readers.isEmpty
        }
        guard empty, entries[entry.signal] === entry else {
            lock.unlock()
            done()
            return
        }
        entries[entry.signal] = nil
        entry.restoreAction()
        lock.unlock()
        entry.watch.stop(then: done)
    }
}

/// The signalfd of one signal, the action it replaced, and the sources reading it.
final class SignalEntry: @unchecked Sendable {
    let signal: CInt
    let watch: PollWatch
    let readers = Locked<[ObjectIdentifier: SourceCore]>([:])
    private var previousAction = sigaction()

    init(signal: CInt, engine: IOEngine) {
        self.signal = signal
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, signal)
        let fd = systemSignalFD(-1, &set, nonBlockingCloseOnExec)
        sourceRequire(fd >= 0, "EventSource: signalfd for signal \(signal) failed: errno \(errno)")
        let readers = self.readers
        watch = PollWatch(engine: engine, fd: fd, events: .readable, ownsDescriptor: true) { _ in
            let count = SignalEntry.drain(fd)
            guard count > 0 else { return true }
            for core in readers.withLock({ Array($0.values) }) { core.record(add: UInt(count)) }
            return true
        }
        var action = sigaction()
        action.__sigaction_handler.sa_sigaction = forwardSignal
        action.sa_flags = SA_SIGINFO | SA_RESTART
        sigemptyset(&action.sa_mask)
        sigaction(signal, &action, &previousAction)
    }

    /// Reads every queued delivery from the non-blocking signalfd; returns how many there were.
    static func drain(_ fd: CInt) -> Int {
        withUnsafeTemporaryAllocation(byteCount: signalFDInfoSize * 16, alignment: 8) { buffer in
            var count = 0
            while true {
                let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
                if n > 0 {
                    count += n / signalFDInfoSize
                    if n < buffer.count { break }
                    continue
                }
                if n < 0 && errno == EINTR { continue }
                break
            }
            return count
        }
    }

    /// Puts the previous action back. Registry lock held, so that a new first source cannot save our
    /// forwarding action as "previous".
    func restoreAction() {
        sigaction(signal, &previousAction, nil)
    }
}

/// The forwarding action (see ``EventSource/makeSignalSource(signal:queue:)``): blocks the signal in the
/// interrupted thread's saved mask, which the kernel restores when the handler returns, and sends the
/// signal again to the whole process, where it stays pending for the signalfd. Async-signal-safe: it calls
/// only `sigaddset`, `getpid` and `kill`.
private func forwardSignal(
    _ signal: CInt,
    _ info: UnsafeMutablePointer<siginfo_t>?,
    _ context: UnsafeMutableRawPointer?
) {
    let savedErrno = errno
    if let context {
        let mask = (context + savedMaskOffset).assumingMemoryBound(to: sigset_t.self)
        sigaddset(mask, signal)
    }
    kill(getpid(), signal)
    errno = savedErrno
}

/// Where `uc_sigmask` lies in glibc's `ucontext_t` (the importer attributes the struct's fields to another
/// module, so the offset is spelled out: after `uc_flags`, `uc_link`, `uc_stack` and, on x86-64, the
/// 256-byte `mcontext_t`).
#if arch(x86_64)
private let savedMaskOffset = 296
#elseif arch(arm64)
private let savedMaskOffset = 40
#else
#error("EventSource: the offset of uc_sigmask in ucontext_t is not known for this architecture")
#endif
