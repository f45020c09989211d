import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

extension EventSource {
    /// Changes a file-system source can watch (the values of the C API's `DISPATCH_VNODE_*`).
    ///
    /// On Linux they come from inotify, mapped as SEMANTICS D36 says: `IN_DELETE_SELF`, or an attribute
    /// change that leaves no link, is ``delete``; `IN_MODIFY` is ``write``, and also ``extend`` when the file
    /// grew; `IN_ATTRIB` is ``attrib``, and also ``link`` when the link count changed; `IN_MOVE_SELF` is
    /// ``rename``; on a directory, an entry created, deleted or moved in or out (`IN_CREATE`, `IN_DELETE`,
    /// `IN_MOVED_FROM`, `IN_MOVED_TO`) is ``write``, as kqueue reports it. Darwin's `REVOKE` and `FUNLOCK`
    /// have no inotify counterpart and are not offered.
    public struct FileSystemEvent: OptionSet, Sendable {
        /// The raw bits, as ``EventSource/mask`` and ``EventSource/data`` report them.
        public let rawValue: UInt

        /// Creates events from raw bits.
        public init(rawValue: UInt) {
            self.rawValue = rawValue
        }

        /// The file was deleted (its last link removed) (`DISPATCH_VNODE_DELETE`).
        public static let delete = FileSystemEvent(rawValue: 0x1)  // NOTE_DELETE
        /// The file's contents were written (`DISPATCH_VNODE_WRITE`).
        public static let write = FileSystemEvent(rawValue: 0x2)  // NOTE_WRITE
        /// The file grew (`DISPATCH_VNODE_EXTEND`).
        public static let extend = FileSystemEvent(rawValue: 0x4)  // NOTE_EXTEND
        /// The file's metadata changed (`DISPATCH_VNODE_ATTRIB`).
        public static let attrib = FileSystemEvent(rawValue: 0x8)  // NOTE_ATTRIB
        /// The file's link count changed (`DISPATCH_VNODE_LINK`).
        public static let link = FileSystemEvent(rawValue: 0x10)  // NOTE_LINK
        /// The file was renamed or moved (`DISPATCH_VNODE_RENAME`).
        public static let rename = FileSystemEvent(rawValue: 0x20)  // NOTE_RENAME

        /// Every event Linux can report.
        public static let all: FileSystemEvent = [.delete, .write, .extend, .attrib, .link, .rename]
    }

    /// Makes a source that fires when the file open as `fileDescriptor` changes.
    ///
    /// The file is watched with inotify from creation (changes before activation are kept, D1), through
    /// `/proc/self/fd`, so it is the open file that is watched, whatever its name becomes. The event handler
    /// runs on `queue`; inside it, ``data`` is the OR of the events in `eventMask` seen since the previous
    /// call (D15, D36). After ``FileSystemEvent/delete`` of the last link, once the kernel drops the watch,
    /// no event follows. A descriptor inotify cannot watch gives a source that never fires. ``handle`` is
    /// the descriptor, which must stay open until the cancel handler has run; ``mask`` is `eventMask`.
    ///
    /// - Parameters:
    ///   - fileDescriptor: An open descriptor of the file or directory to watch; the source does not close it.
    ///   - eventMask: The events to report: non-empty, within ``FileSystemEvent/all``, else the process stops
    ///     with a message naming the misuse (D3).
    ///   - queue: The queue the handlers run on; `nil` means the default global queue.
    public static func makeFileSystemObjectSource(
        fileDescriptor: FileDescriptor,
        eventMask: FileSystemEvent,
        queue: WorkQueue? = nil
    ) -> EventSource {
        makeFileSystemObjectSource(fileDescriptor: fileDescriptor, eventMask: eventMask, queue: queue, engine: .shared)
    }

    package static func makeFileSystemObjectSource(
        fileDescriptor: FileDescriptor,
        eventMask: FileSystemEvent,
        queue: WorkQueue?,
        engine: IOEngine
    ) -> EventSource {
        sourceRequire(
            !eventMask.isEmpty && FileSystemEvent.all.isSuperset(of: eventMask),
            "EventSource.makeFileSystemObjectSource: the event mask must be a non-empty subset of FileSystemEvent.all"
        )
        let fd = fileDescriptor.rawValue
        sourceRequire(fd >= 0, "EventSource.makeFileSystemObjectSource: negative descriptor \(fd)")
        let core = SourceCore(
            kind: .fileSystem,
            handle: UInt(fd),
            mask: eventMask.rawValue,
            target: queue,
            engine: engine
        )
        core.monitor = FileSystemMonitor(core: core, fd: fd, mask: eventMask.rawValue)
        return EventSource(core: core)
    }
}

/// An inotify descriptor with one watch on the source's file.
final class FileSystemMonitor: SourceMonitor, @unchecked Sendable {
    private let watch: PollWatch?

    init(core: SourceCore, fd: CInt, mask: UInt) {
        let inotify = inotify_init1(nonBlockingCloseOnExec)
        guard inotify >= 0 else {
            watch = nil
            return
        }
        let wanted = UInt32(IN_MODIFY | IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF | FileSystemMonitor.entryChanges)
        guard inotify_add_watch(inotify, "/proc/self/fd/\(fd)", wanted) >= 0 else {
            _ = Glibc.close(inotify)
            watch = nil
            return
        }
        // Only the engine thread running this watch's one poll touches these.
        let baseline = Unsynchronized(FileSystemMonitor.sizeAndLinks(fd))
        watch = PollWatch(engine: core.engine, fd: inotify, events: .readable, ownsDescriptor: true) { [weak core] _ in
            var events: UInt = 0
            let alive = FileSystemMonitor.drain(inotify) { inotifyMask in
                events |= FileSystemMonitor.map(inotifyMask, fd: fd, baseline: baseline)
            }
            core?.record(or: events & mask)
            return alive
        }
    }

    func start() { watch?.arm() }

    func stop(then done: @escaping @Sendable () -> Void) {
        if let watch { watch.stop(then: done) } else { done() }
    }

    /// A directory's entries changing (created, deleted, moved in or out): a write to the directory, as
    /// kqueue reports it.
    static let entryChanges = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO

    static func sizeAndLinks(_ fd: CInt) -> (size: Int64, links: UInt64) {
        var status = stat()
        guard fstat(fd, &status) == 0 else { return (0, 0) }
        return (Int64(status.st_size), UInt64(status.st_nlink))
    }

    /// One inotify event to `FileSystemEvent` bits.
    static func map(_ inotifyMask: UInt32, fd: CInt, baseline: Unsynchronized<(size: Int64, links: UInt64)>) -> UInt {
        var bits: UInt = 0
        let now = sizeAndLinks(fd)
        if inotifyMask & UInt32(IN_MODIFY) != 0 {
            bits |= EventSource.FileSystemEvent.write.rawValue
            if now.size > baseline.value.size { bits |= EventSource.FileSystemEvent.extend.rawValue }
        }
        if inotifyMask & UInt32(IN_ATTRIB) != 0 {
            bits |= EventSource.FileSystemEvent.attrib.rawValue
            if now.links != baseline.value.links { bits |= EventSource.FileSystemEvent.link.rawValue }
            if now.links == 0 { bits |= EventSource.FileSystemEvent.delete.rawValue }
        }
        if inotifyMask & UInt32(entryChanges) != 0 { bits |= EventSource.FileSystemEvent.write.rawValue }
        if inotifyMask & UInt32(IN_MOVE_SELF) != 0 { bits |= EventSource.FileSystemEvent.rename.rawValue }
        if inotifyMask & UInt32(IN_DELETE_SELF) != 0 { bits |= EventSource.FileSystemEvent.delete.rawValue }
        baseline.value = now
        return bits
    }

    /// Reads every queued inotify event, passing each mask to `body`; returns `false` once the kernel
    /// dropped the watch (`IN_IGNORED`).
    static func drain(_ inotify: CInt, _ body: (UInt32) -> Void) -> Bool {
        var alive = true
        withUnsafeTemporaryAllocation(byteCount: 4096, alignment: 8) { buffer in
            while true {
                let n = Glibc.read(inotify, buffer.baseAddress, buffer.count)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                var offset = 0
                while offset + 16 <= n {
                    let eventMask = buffer.load(fromByteOffset: offset + 4, as: UInt32.self)
                    let nameLength = Int(buffer.load(fromByteOffset: offset + 12, as: UInt32.self))
                    if eventMask & UInt32(IN_IGNORED) != 0 { alive = false } else { body(eventMask) }
                    offset += 16 + nameLength
                }
            }
        }
        return alive
    }
}

/// State touched by one thread at a time, by construction (here: one engine poll at a time).
final class Unsynchronized<Value>: @unchecked Sendable {
    var value: Value

    init(_ value: Value) {
        self.value = value
    }
}
