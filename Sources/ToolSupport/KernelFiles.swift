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
    /// moment.
    case length
    /// Any other file system (FUSE, NFS, overlayfs, cgroupfs, securityfs, ...), or one that cannot be
    /// told: the size may be stale or say 0 for a file that has bytes, and only reading to the end tells.
    case unknown
}

/// What the size of the file open on `fd` means (see ``FileSizeMeaning``).
package func fileSizeMeaning(_ fd: CInt) -> FileSizeMeaning {
    var system = statfs()
    return fstatfs(fd, &system) == 0 ? meaning(of: system) : .unknown
}

/// Whether `fd` lies on a file system whose files the kernel makes as they are read
/// (``FileSizeMeaning/madeAsRead``). False when the file system cannot be told.
package func isKernelMadeFile(_ fd: CInt) -> Bool {
    fileSizeMeaning(fd) == .madeAsRead
}

/// As ``isKernelMadeFile(_:)``, for the file at `path`.
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
