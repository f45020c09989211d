#if canImport(Glibc)
import Glibc
#endif

/// A file's owner and group.
package struct FileOwner: Sendable, Equatable {
    package let user: uid_t
    package let group: gid_t

    package init(user: uid_t, group: gid_t) {
        self.user = user
        self.group = group
    }
}

/// The owner and group of the directory `directory` refers to (a descriptor, `O_PATH` or not), where it is
/// private to this process's effective user: owned by that user, with no permission for its group or for
/// others, so that no one else (root aside) may make, remove or replace a name in it (an ACL's named
/// entries are limited by the group's bits, its mask), and without a default ACL, so that a file made in it
/// gets no ACL. Such a file, made there with `O_EXCL`, stays the one its name gives for as long as the
/// directory stays so. Nil otherwise, or where a look fails.
///
/// Looked at through the descriptor, not a path: a path leads where its parents say, and a parent that
/// others can write lets them put a directory of their own at it.
package func privateDirectoryOwner(_ directory: CInt) -> FileOwner? {
    let fd = openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFDIR, info.st_uid == geteuid(),
        info.st_mode & (S_IRWXG | S_IRWXO) == 0,
        accessControlList(of: .descriptor(fd), isDefault: true) == .absent
    else { return nil }
    return FileOwner(user: info.st_uid, group: info.st_gid)
}
