import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

extension EventSource {
    /// Makes a source that fires while `fileDescriptor` has data to read (level-triggered, SEMANTICS D29).
    ///
    /// The event handler runs on `queue` when the descriptor is readable, and again after it returns for
    /// as long as it stays readable: the source is watched again only once the handler has returned. Inside
    /// it, ``data`` is an estimate of the bytes readable (D13): `FIONREAD` for pipes, sockets and terminals
    /// (1 when the descriptor cannot say, as for a listening socket or `/dev/zero`), the bytes left to the
    /// end for a regular file. Regular files and devices that cannot be polled are always ready (D29, D31);
    /// a regular file keeps firing at its end with 0. When the other end hangs up and nothing is left to
    /// read, the handler runs once more with 0 and the source then stays quiet, without being cancelled
    /// (D30). ``handle`` is the descriptor. The descriptor must stay open until the cancel handler has run.
    ///
    /// - Parameters:
    ///   - fileDescriptor: The descriptor to watch; the source does not close it.
    ///   - queue: The queue the handlers run on; `nil` means the default global queue.
    public static func makeReadSource(fileDescriptor: FileDescriptor, queue: WorkQueue? = nil) -> EventSource {
        makeReadSource(fileDescriptor: fileDescriptor, queue: queue, engine: .shared)
    }

    /// Makes a source that fires while `fileDescriptor` can be written to (level-triggered, SEMANTICS D29).
    ///
    /// The event handler runs on `queue` when the descriptor is writable, and again after it returns while
    /// it stays writable. Inside it, ``data`` is an estimate of the space available, always at least 1
    /// (D14): the free room in a pipe's buffer, the socket send buffer less what is queued, 1 for regular
    /// files and devices (always ready, D31). When the reading end is gone (an error or hang-up), the
    /// handler runs once more with 1 — the next write reports the error — and the source then stays quiet.
    /// ``handle`` is the descriptor, which must stay open until the cancel handler has run.
    ///
    /// - Parameters:
    ///   - fileDescriptor: The descriptor to watch; the source does not close it.
    ///   - queue: The queue the handlers run on; `nil` means the default global queue.
    public static func makeWriteSource(fileDescriptor: FileDescriptor, queue: WorkQueue? = nil) -> EventSource {
        makeWriteSource(fileDescriptor: fileDescriptor, queue: queue, engine: .shared)
    }

    package static func makeReadSource(
        fileDescriptor: FileDescriptor,
        queue: WorkQueue?,
        engine: IOEngine
    ) -> EventSource {
        makeReadinessSource(.read, fileDescriptor, queue, engine)
    }

    package static func makeWriteSource(
        fileDescriptor: FileDescriptor,
        queue: WorkQueue?,
        engine: IOEngine
    ) -> EventSource {
        makeReadinessSource(.write, fileDescriptor, queue, engine)
    }

    private static func makeReadinessSource(
        _ kind: SourceKind,
        _ descriptor: FileDescriptor,
        _ queue: WorkQueue?,
        _ engine: IOEngine
    ) -> EventSource {
        let fd = descriptor.rawValue
        sourceRequire(fd >= 0, "EventSource.make\(kind == .read ? "Read" : "Write")Source: negative descriptor \(fd)")
        var status = stat()
        let regular = fstat(fd, &status) == 0 && (status.st_mode & S_IFMT) == S_IFREG
        let core = SourceCore(
            kind: kind,
            handle: UInt(fd),
            mask: 0,
            target: queue,
            engine: engine,
            isRegularFile: regular
        )
        let events: PollEvents = kind == .read ? [.readable, .readHangup] : .writable
        core.monitor = ReadinessMonitor(core: core, fd: fd, events: events)
        return EventSource(core: core)
    }
}

/// Watches a descriptor for readiness, one poll at a time, re-armed after each handler call.
final class ReadinessMonitor: SourceMonitor, @unchecked Sendable {
    let watch: PollWatch

    init(core: SourceCore, fd: CInt, events: PollEvents) {
        watch = PollWatch(engine: core.engine, fd: fd, events: events, ownsDescriptor: false) { [weak core] revents in
            core?.record(or: UInt(revents))
            return false
        }
    }

    func start() { watch.arm() }
    func rearm() { watch.arm() }
    func stop(then done: @escaping @Sendable () -> Void) { watch.stop(then: done) }
}

extension SourceCore {
    /// Turns a poll result into the `data` of a read or write source; `last` means the source fired for
    /// the last time (D30).
    func readinessData(revents: UInt) -> (data: UInt, last: Bool) {
        let fd = CInt(truncatingIfNeeded: handle)
        let hangup = revents & UInt(POLLHUP | POLLERR | CInt(PollEvents.readHangup.rawValue)) != 0
        if revents & UInt(POLLNVAL) != 0 { return (0, true) }
        if kind == .read {
            if isRegularFile {
                var status = stat()
                guard fstat(fd, &status) == 0 else { return (0, false) }
                let position = lseek(fd, 0, SEEK_CUR)
                return (UInt(max(0, Int64(status.st_size) - Int64(max(position, 0)))), false)
            }
            var available: CInt = 0
            if ioctl(fd, UInt(FIONREAD), &available) == 0 {
                if available > 0 { return (UInt(available), false) }
                // Nothing buffered: end of file once the peer hung up, else an empty readiness.
                return hangup ? (0, true) : (1, false)
            }
            return hangup ? (0, true) : (1, false)
        }
        if hangup { return (1, true) }
        var status = stat()
        guard fstat(fd, &status) == 0 else { return (1, false) }
        switch status.st_mode & S_IFMT {
        case S_IFIFO:
            let capacity = fcntl(fd, fcntlGetPipeSize)
            var queued: CInt = 0
            guard capacity > 0, ioctl(fd, UInt(FIONREAD), &queued) == 0 else { return (1, false) }
            return (UInt(max(1, Int(capacity) - Int(queued))), false)
        case S_IFSOCK:
            var buffer: CInt = 0
            var length = socklen_t(MemoryLayout<CInt>.size)
            var queued: CInt = 0
            guard getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, &length) == 0,
                ioctl(fd, socketOutputQueue, &queued) == 0
            else { return (1, false) }
            return (UInt(max(1, Int(buffer) - Int(queued))), false)
        default:
            return (1, false)
        }
    }
}
