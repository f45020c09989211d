import URing

#if canImport(Glibc)
import Glibc
#endif

extension EventSource {
    /// Process events a process source can watch (the values of the C API's `DISPATCH_PROC_*`).
    ///
    /// Only the exit is observable on Linux without tracing the process; fork, exec and signal
    /// notifications (Darwin's `NOTE_FORK`, `NOTE_EXEC`, `NOTE_SIGNAL`) have no cheap equivalent and are
    /// not offered (SEMANTICS D35).
    public struct ProcessEvent: OptionSet, Sendable {
        /// The raw bits, as ``EventSource/mask`` and ``EventSource/data`` report them.
        public let rawValue: UInt

        /// Creates events from raw bits.
        public init(rawValue: UInt) {
            self.rawValue = rawValue
        }

        /// The process exited (`DISPATCH_PROC_EXIT`).
        public static let exit = ProcessEvent(rawValue: 0x8000_0000)  // NOTE_EXIT
    }

    /// How a watched process ended, when the source could find out.
    public enum Termination: Sendable, Equatable {
        /// It called `exit` (or returned from `main`) with this status.
        case exited(Int32)
        /// A signal with this number killed it.
        case signaled(Int32)
    }

    /// Makes a source that fires once when process `identifier` exits.
    ///
    /// The process is watched through a pidfd (`pidfd_open(2)`) opened at creation, so a process that exits
    /// before activation is still seen (D1). The event handler runs on `queue` once, with ``data`` =
    /// ``ProcessEvent/exit``; no event follows (D35). A process that does not exist (or that cannot be
    /// opened) gives one synthetic exit event after activation, as libdispatch does for `ESRCH`.
    /// ``handle`` is the process identifier, ``mask`` the event mask.
    ///
    /// The source does **not** reap the process: a child must still be waited for with `waitpid`, as with
    /// libdispatch. For a child of this process, ``terminationStatus`` is read without reaping it
    /// (`waitid(P_PIDFD, …, WNOWAIT)`); for any other process it stays `nil`.
    ///
    /// - Parameters:
    ///   - identifier: The process identifier; it must be positive, else the process stops with a message
    ///     naming the misuse (D3).
    ///   - eventMask: Must be ``ProcessEvent/exit``.
    ///   - queue: The queue the handlers run on; `nil` means the default global queue.
    public static func makeProcessSource(
        identifier: Int32,
        eventMask: ProcessEvent,
        queue: WorkQueue? = nil
    ) -> EventSource {
        makeProcessSource(identifier: identifier, eventMask: eventMask, queue: queue, engine: .shared)
    }

    package static func makeProcessSource(
        identifier: Int32,
        eventMask: ProcessEvent,
        queue: WorkQueue?,
        engine: IOEngine
    ) -> EventSource {
        sourceRequire(identifier > 0, "EventSource.makeProcessSource: \(identifier) is not a process identifier")
        sourceRequire(
            eventMask == .exit,
            "EventSource.makeProcessSource: the event mask must be .exit (the only process event on Linux)"
        )
        let core = SourceCore(
            kind: .process,
            handle: UInt(identifier),
            mask: eventMask.rawValue,
            target: queue,
            engine: engine
        )
        core.monitor = ProcessMonitor(core: core, pid: identifier)
        return EventSource(core: core)
    }

    /// How the watched process ended: set before the exit event is delivered, for a child of this process;
    /// `nil` before that, for other processes, and for a synthetic exit.
    public var terminationStatus: Termination? {
        core.lock.lock()
        defer { core.lock.unlock() }
        return core.termination
    }
}

/// Polls a pidfd; fires once.
final class ProcessMonitor: SourceMonitor, @unchecked Sendable {
    private let watch: PollWatch?
    private weak var core: SourceCore?

    init(core: SourceCore, pid: Int32) {
        self.core = core
        let fd = systemPidFDOpen(pid, 0)
        guard fd >= 0 else {
            watch = nil
            return
        }
        watch = PollWatch(engine: core.engine, fd: fd, events: .readable, ownsDescriptor: true) { [weak core] _ in
            guard let core else { return false }
            var info = siginfo_t()
            if waitid(idTypePidFD, id_t(fd), &info, WEXITED | WNOWAIT | WNOHANG) == 0 && info.si_signo == SIGCHLD {
                let status = info._sifields._sigchld.si_status
                let termination: EventSource.Termination =
                    info.si_code == CLD_EXITED ? .exited(status) : .signaled(status)
                core.lock.lock()
                core.termination = termination
                core.lock.unlock()
            }
            core.record(or: EventSource.ProcessEvent.exit.rawValue)
            return false
        }
    }

    func start() {
        if let watch {
            watch.arm()
        } else {
            // D35: no such process (ESRCH) — one synthetic exit.
            core?.record(or: EventSource.ProcessEvent.exit.rawValue)
        }
    }

    func stop(then done: @escaping @Sendable () -> Void) {
        if let watch { watch.stop(then: done) } else { done() }
    }
}
