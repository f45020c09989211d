import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

extension EventSource {
    /// Memory-pressure levels a memory-pressure source can watch (the values of the C API's
    /// `DISPATCH_MEMORYPRESSURE_*`).
    ///
    /// On Linux they are pressure-stall (PSI) triggers on `/proc/pressure/memory`: ``warning`` fires when
    /// some tasks were stalled on memory for 150 ms or more within a 2 s window (`some 150000 2000000`),
    /// ``critical`` when all non-idle tasks were (`full 150000 2000000`). Darwin's `NORMAL` (pressure went
    /// back down) has no trigger and is not offered.
    public struct MemoryPressureEvent: OptionSet, Sendable {
        /// The raw bits, as ``EventSource/mask`` and ``EventSource/data`` report them.
        public let rawValue: UInt

        /// Creates levels from raw bits.
        public init(rawValue: UInt) {
            self.rawValue = rawValue
        }

        /// Some tasks are stalling on memory (`DISPATCH_MEMORYPRESSURE_WARN`).
        public static let warning = MemoryPressureEvent(rawValue: 0x2)
        /// Every non-idle task is stalling on memory (`DISPATCH_MEMORYPRESSURE_CRITICAL`).
        public static let critical = MemoryPressureEvent(rawValue: 0x4)
    }

    /// Makes a source that fires when the kernel reports memory pressure at one of the levels in
    /// `eventMask`.
    ///
    /// Each level is one PSI trigger, polled by the engine for `POLLPRI`; the kernel fires a trigger at
    /// most once per 2 s window. The event handler runs on `queue`; inside it, ``data`` is the OR of the
    /// levels reported since the previous call. ``mask`` is `eventMask`, ``handle`` 0.
    ///
    /// - Parameters:
    ///   - eventMask: One or both levels; an empty mask stops the process with a message naming the misuse.
    ///   - queue: The queue the handlers run on; `nil` means the default global queue.
    /// - Throws: The `Errno` of opening `/proc/pressure/memory` or writing the trigger, when the kernel
    ///   offers no PSI (`ENOENT`: built without `CONFIG_PSI`, or booted with `psi=0`; `EOPNOTSUPP`), or
    ///   does not let this process set triggers (`EACCES`, `EPERM`).
    public static func makeMemoryPressureSource(
        eventMask: MemoryPressureEvent,
        queue: WorkQueue? = nil
    ) throws(Errno) -> EventSource {
        try makeMemoryPressureSource(eventMask: eventMask, queue: queue, engine: .shared)
    }

    package static func makeMemoryPressureSource(
        eventMask: MemoryPressureEvent,
        queue: WorkQueue?,
        engine: IOEngine,
        pressureFile: String = "/proc/pressure/memory"
    ) throws(Errno) -> EventSource {
        sourceRequire(
            !eventMask.isEmpty && eventMask.isSubset(of: [.warning, .critical]),
            "EventSource.makeMemoryPressureSource: the event mask must be .warning, .critical or both"
        )
        var triggers: [(fd: CInt, level: UInt)] = []
        let wanted: [(MemoryPressureEvent, String)] = [
            (.warning, "some 150000 2000000"), (.critical, "full 150000 2000000"),
        ]
        for (level, trigger) in wanted where eventMask.contains(level) {
            let fd = open(pressureFile, O_RDWR | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else {
                let error = Errno(rawValue: errno)
                for opened in triggers { _ = close(opened.fd) }
                throw error
            }
            let written = trigger.withCString { write(fd, $0, strlen($0) + 1) }
            guard written >= 0 else {
                let error = Errno(rawValue: errno)
                _ = close(fd)
                for opened in triggers { _ = close(opened.fd) }
                throw error
            }
            triggers.append((fd, level.rawValue))
        }
        // Built here rather than in a convenience to keep the throwing path free of half-made sources.
        let core = SourceCore(kind: .memoryPressure, handle: 0, mask: eventMask.rawValue, target: queue, engine: engine)
        core.monitor = MemoryPressureMonitor(core: core, triggers: triggers)
        return EventSource(core: core)
    }
}

/// One PSI trigger descriptor per level, each polled for `POLLPRI`.
final class MemoryPressureMonitor: SourceMonitor, @unchecked Sendable {
    private let watches: [PollWatch]

    init(core: SourceCore, triggers: [(fd: CInt, level: UInt)]) {
        watches = triggers.map { trigger in
            PollWatch(engine: core.engine, fd: trigger.fd, events: .priority, ownsDescriptor: true) {
                [weak core] revents in
                // POLLERR: the trigger is gone (the cgroup went away); stop watching it.
                guard revents & UInt32(POLLERR) == 0 else { return false }
                if revents & UInt32(POLLPRI) != 0 { core?.record(or: trigger.level) }
                return true
            }
        }
    }

    func start() {
        for watch in watches { watch.arm() }
    }

    func stop(then done: @escaping @Sendable () -> Void) {
        let remaining = Locked(watches.count)
        for watch in watches {
            watch.stop {
                if remaining.withLock({ count in
                    count -= 1
                    return count == 0
                }) {
                    done()
                }
            }
        }
    }
}
