import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// Looks up the sources named on the command line: each one's status, and its directory's identity for
/// cp's warning about a source named twice.
///
/// A source's status must not come through one of dcopy's own descriptors (see ``DescriptorNames``), which
/// costs an `openat2`, an `fstat` and a `close` where a `stat` did. Sources named one after another in one
/// directory (`dcopy src/* dir`) share that look at the directory instead: once it is known to be reached
/// without a magic link, a source in it whose last component is not a link (a magic link is one to `lstat`)
/// takes one `lstat`, and the directory's identity is already known. Ten thousand files named on the
/// command line took 1.26× cp's time before, with about ten system calls each on the walker's thread.
struct SourceLookup {
    /// Whether the last directory looked at is held open for the sources after it, which are then looked up
    /// by their names in it (`fstatat`), not by their paths: a tenth of the walker's time for files named
    /// on the command line. Not where descriptors are scarce.
    private let holdsDirectory: Bool
    /// The last directory looked at: its path as the sources spell it, its identity, whether it is on a
    /// procfs (whose links may be magic ones), and its descriptor (`O_PATH`) where it is held, else -1.
    private var directory: (path: PathName, id: FileID, onProcfs: Bool, fd: CInt)?
    /// Counts the directories looked at, so that what is made from a held one can tell it is still held.
    private var looks = 0

    init(holdsDirectory: Bool) { self.holdsDirectory = holdsDirectory }

    /// The directory held, as last looked at (the parent of the last source looked up, where it was looked
    /// at): its descriptor, and which look opened it.
    var held: (fd: CInt, look: Int)? {
        guard let directory, directory.fd >= 0 else { return nil }
        return (directory.fd, looks)
    }

    /// Lets go of the directory held; the next source is looked up by its path again.
    mutating func close() {
        if let fd = directory?.fd, fd >= 0 { Glibc.close(fd) }
        directory = nil
    }

    /// `stat` of `source`, or `lstat` when `followingLinks` is false, as ``DescriptorNames/status(_:followingLinks:_:)``
    /// gives it. Returns 0, or -1 with `errno` set.
    mutating func status(_ source: PathName, followingLinks: Bool, _ info: inout stat) -> CInt {
        let name = source.lastComponent
        // `d/` and `d/.` name a directory that `lstat` of the last component would not check for.
        if !source.endsWithSlash && !name.isDotOrDotDot, let directory = look(at: source.parent),
            (directory.fd >= 0
                ? fstatat(directory.fd, name.cString, &info, AT_SYMLINK_NOFOLLOW) : lstat(source.cString, &info)) == 0
        {
            // A link is what `lstat` says, with -r, unless it may be a magic one (`/dev/fd/3`).
            let isLink = info.st_mode & S_IFMT == S_IFLNK
            if !isLink || !followingLinks && !directory.onProcfs { return 0 }
        }
        return DescriptorNames.status(source, followingLinks: followingLinks, &info)
    }

    /// The identity of `source`'s directory, as `stat` gives it (zero when it has none).
    mutating func directoryID(of source: PathName) -> FileID {
        if let directory = look(at: source.parent) { return directory.id }
        var info = stat()
        _ = stat(source.parent.cString, &info)
        return FileID(info)
    }

    /// The directory at `path` when it is reached without a magic link; nil otherwise.
    private mutating func look(at path: PathName) -> (path: PathName, id: FileID, onProcfs: Bool, fd: CInt)? {
        if let directory, directory.path == path { return directory }
        close()
        looks += 1
        let fd = DescriptorNames.openWithoutMagicLinks(path, flags: openPath | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            Glibc.close(fd)
            return nil
        }
        let onProcfs = DescriptorNames.isOnProcfs(fd)
        if !holdsDirectory { Glibc.close(fd) }
        directory = (path, FileID(info), onProcfs, holdsDirectory ? fd : -1)
        return directory
    }
}
