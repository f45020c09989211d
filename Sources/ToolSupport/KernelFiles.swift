import CGlibcExtras

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What a regular file's size says about the bytes a read would find, told by the file system the file
/// lies on (one `fstatfs`).
package enum FileSizeMeaning: Sendable, Equatable {
    /// procfs, sysfs, tracefs or debugfs: the kernel makes the file as it is read. Its size says 0, a read
    /// gives about a page, and some wait for more (`trace_pipe`, `/proc/kmsg`), so a reader must take what
    /// each read gives rather than trust the size.
    case madeAsRead
    /// A local file system that keeps each file's length as its size: tmpfs, ramfs, ext2–4, xfs, btrfs or
    /// f2fs. A read at the size finds nothing, so a file whose size is 0 has nothing to read at that
    /// moment (a read through a descriptor open for reading still finds its end, and marks the file
    /// accessed: see ``FileSystemFacts/readKeepsAccessTime(_:now:)``).
    case length
    /// Any other file system (FUSE, NFS, overlayfs, cgroupfs, securityfs, ...), or one that cannot be
    /// told: the size may be stale or say 0 for a file that has bytes, and only reading to the end tells.
    case unknown
}

/// What the file system of an open file says about reading it, from one `fstatfs`.
package struct FileSystemFacts: Sendable {
    /// What the file's size means.
    package let sizeMeaning: FileSizeMeaning
    /// The mount's `ST_*` flags (`statfs.f_flags`), or nil when the kernel gave none.
    package let mountFlags: Int?

    /// The facts for the file open on `fd`: ``FileSizeMeaning/unknown`` and no flags when `fstatfs` fails.
    package init(_ fd: CInt) {
        var system = statfs()
        guard fstatfs(fd, &system) == 0 else {
            self.init(sizeMeaning: .unknown, mountFlags: nil)
            return
        }
        // ST_VALID: the kernel filled f_flags (Linux 2.6.36 on).
        let valid = 0x20
        self.init(sizeMeaning: meaning(of: system), mountFlags: system.f_flags & valid != 0 ? system.f_flags : nil)
    }

    /// Facts as given, for tests.
    package init(sizeMeaning: FileSizeMeaning, mountFlags: Int?) {
        self.sizeMeaning = sizeMeaning
        self.mountFlags = mountFlags
    }

    /// Whether a read of the file now would leave its access time as it is. A read that finds nothing still marks
    /// the file accessed (`file_accessed`, even at the end of the file), as the mount's rule has it: never on a
    /// read-only or `noatime` mount; on a `relatime` one (the default) only when the access time is not after the
    /// modification or change time, or is a day old; always otherwise (`strictatime`). `info` is the file's
    /// status, `now` the wall clock (read when not given). Within a second of the day's end, and for a mount
    /// whose flags are unknown, it says the read would change it, so that a caller that leaves out a read only
    /// when this is true never leaves the time behind where the read would have moved it. (A file marked `chattr
    /// +A`, which never changes its access time, is not told.)
    package func readKeepsAccessTime(_ info: stat, now: timespec? = nil) -> Bool {
        guard let flags = mountFlags else { return false }
        let (readOnly, noAccessTime, relative) = (0x1, 0x400, 0x1000)
        if flags & (readOnly | noAccessTime) != 0 { return true }
        guard flags & relative != 0 else { return false }
        func after(_ a: timespec, _ b: timespec) -> Bool { (a.tv_sec, a.tv_nsec) > (b.tv_sec, b.tv_nsec) }
        let day = 24 * 60 * 60
        let now = now ?? wallClock()
        return after(info.st_atim, info.st_mtim) && after(info.st_atim, info.st_ctim)
            && now.tv_sec - info.st_atim.tv_sec < day - 1
    }
}

/// Whether the file at `path` lies on a file system whose files the kernel makes as they are read
/// (``FileSizeMeaning/madeAsRead``). False when the file system cannot be told.
package func isKernelMadeFile(atPath path: UnsafePointer<CChar>) -> Bool {
    var system = statfs()
    return statfs(path, &system) == 0 && meaning(of: system) == .madeAsRead
}

private func meaning(of system: statfs) -> FileSizeMeaning {
    // Magic numbers from linux/magic.h. overlayfs is left unknown: it takes sizes from the layers below,
    // which may be any file system.
    switch UInt32(truncatingIfNeeded: system.f_type) {
    case 0x9fa0,  // procfs
        0x6265_6572,  // sysfs
        0x7472_6163,  // tracefs
        0x6462_6720:  // debugfs
        return .madeAsRead
    case 0x0102_1994,  // tmpfs
        0x8584_58f6,  // ramfs
        0xef53,  // ext2, ext3, ext4
        0x5846_5342,  // xfs
        0x9123_683e,  // btrfs
        0xf2f5_2010:  // f2fs
        return .length
    default:
        return .unknown
    }
}

/// The wall clock's time now.
private func wallClock() -> timespec {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return now
}
