import CGlibcExtras

#if canImport(Glibc)
import Glibc
#endif

/// Names that reach an open descriptor through procfs (`/dev/stdin`, `/dev/fd/3`, `/proc/self/fd/3`), and
/// the rule that keeps the tools from reading or writing their own descriptors through them.
///
/// cat opens one file at a time and closes it before the next, so `/dev/fd/N` names for it only what it was
/// started with. The tools keep several files open at once (dcat reads ahead, dcopy copies several files
/// and holds directories), and such a name could reach one of their own: `dcat f /dev/fd/3` printed `f`
/// twice, and `dcopy -r tree /dev/fd/3 d` made `d/3` a link to `anon_inode:[io_uring]` (helper-45 found the
/// first). So a name for a descriptor the process opened itself dangles here, as it would for cat: the
/// check is the close-on-exec flag, which every descriptor the tools and the library open carries (as do
/// the `/dev/null` fillers of ``StandardDescriptors``), and which no descriptor inherited through `execve`
/// can carry. cp 9.1 differs in its own way: its target directory is its descriptor 3, so `cp -r s
/// /dev/fd/3 d` copies a link to `d` into `d`.
///
/// Operands are opened with `openat2(RESOLVE_NO_MAGICLINKS)`, which costs what `open` does; only a name
/// that meets a magic link (`ELOOP`) is then resolved a component at a time.
package enum DescriptorNames {
    /// How a path reaches one of the process's own descriptors.
    package enum Reach: Sendable, Equatable {
        /// Through its entry in `/proc/PID/fd` (`/dev/fd/3`, `/proc/self/fd/3`), which `lstat` finds
        /// missing for cat and cp.
        case entry
        /// Through a symbolic link to that entry (`/dev/stdin` with descriptor 0 filled), which dangles
        /// for cat and cp.
        case link
    }

    /// Opens `path` as `open(2)` would, except that a name reaching one of the process's own descriptors
    /// fails with `ENOENT`, as it would for cat. Returns the descriptor, or -1 with `errno` set.
    package static func open(_ path: PathName, flags: CInt) -> CInt {
        let fd = path.withCString { glibc_extras_open_without_magic_links(AT_FDCWD, $0, flags) }
        if fd >= 0 { return fd }
        // ELOOP: a magic link on the way (or a loop of links); ENOSYS, EPERM: no openat2 here (before Linux
        // 5.6, or under a seccomp filter that does not know it). A real EPERM comes back from the open.
        guard errno == ELOOP || errno == ENOSYS || errno == EPERM else { return -1 }
        if reach(path) != nil {
            errno = ENOENT
            return -1
        }
        return path.withCString { Glibc.open($0, flags) }
    }

    /// Opens `path` with `openat2(RESOLVE_NO_MAGICLINKS)` alone: -1 with `errno` set when the path meets a
    /// magic link (`ELOOP`) or the call is missing, where ``open(_:flags:)`` would look further.
    package static func openWithoutMagicLinks(_ path: PathName, flags: CInt) -> CInt {
        path.withCString { glibc_extras_open_without_magic_links(AT_FDCWD, $0, flags) }
    }

    /// `stat(2)`, or `lstat(2)` when `followingLinks` is false, of `path`, except that a name reaching one
    /// of the process's own descriptors fails with `ENOENT`. A symbolic link to such a name (`/dev/stdin`)
    /// is a link like any other to `lstat`, as it is for cp -r. Returns 0, or -1 with `errno` set.
    package static func status(_ path: PathName, followingLinks: Bool, _ info: inout stat) -> CInt {
        let flags = openPath | O_CLOEXEC | (followingLinks ? 0 : O_NOFOLLOW)
        let fd = path.withCString { glibc_extras_open_without_magic_links(AT_FDCWD, $0, flags) }
        if fd >= 0 {
            defer { close(fd) }
            guard fstat(fd, &info) == 0 else { return -1 }
            // O_PATH | O_NOFOLLOW opens a magic link that ends the path as itself; only procfs has them.
            guard !followingLinks && info.st_mode & S_IFMT == S_IFLNK && isOnProcfs(fd) && reach(path) == .entry
            else { return 0 }
            errno = ENOENT
            return -1
        }
        guard errno == ELOOP || errno == ENOSYS || errno == EPERM else { return -1 }
        if let reach = reach(path), followingLinks || reach == .entry {
            errno = ENOENT
            return -1
        }
        return path.withCString { followingLinks ? stat($0, &info) : lstat($0, &info) }
    }

    /// ``reach(_:)`` of a name to write to, which may not be there yet: it is walked only when it meets a
    /// magic link, is a link to nothing (`/dev/fd/3` with 3 closed), or would be made in a procfs directory
    /// (`dcopy 3 /dev/fd`). Two to five calls where the walk took three per component.
    package static func reach(creating path: PathName) -> Reach? {
        let found = openWithoutMagicLinks(path, flags: openPath | O_CLOEXEC)
        if found >= 0 {
            close(found)
            return nil
        }
        // ENOENT: nothing there, or a link to nothing, which may be a descriptor's entry.
        var byte: CChar = 0
        guard errno == ENOENT, readlink(path.cString, &byte, 1) < 0 else { return reach(path) }
        let parent = openWithoutMagicLinks(path.parent, flags: openPath | O_DIRECTORY | O_CLOEXEC)
        guard parent >= 0 else { return reach(path) }
        defer { close(parent) }
        return isOnProcfs(parent) ? reach(path) : nil
    }

    /// Whether `fd` lies on a procfs, the only file system with magic links.
    package static func isOnProcfs(_ fd: CInt) -> Bool {
        var system = statfs()
        return fstatfs(fd, &system) == 0 && Int(system.f_type) == procSuperMagic
    }

    /// Whether descriptor `number` is closed or was opened by this process: close-on-exec, which a
    /// descriptor the process was started with cannot be.
    private static func isOwnOrClosed(_ number: CInt) -> Bool {
        let flags = fcntl(number, F_GETFD)
        return flags == -1 || flags & FD_CLOEXEC != 0
    }

    /// Whether, and how, `path` reaches a descriptor that is closed or the process's own: `/dev/stdin`,
    /// `/dev/fd/3`, `/proc/self/fd/3`, a link to one, or a path through one (`/dev/fd/5/x` where `x` is a
    /// link to `/dev/fd/3`). The path is walked a component at a time from a descriptor of the directory
    /// reached so far: a link elsewhere is followed by its text, a link on a procfs (magic or not) by the
    /// kernel, so that another process's `/proc/PID/cwd` or `root` leads where it leads for cat, in that
    /// process's namespace, and no path is spelled out whole (a working directory deeper than `PATH_MAX`).
    /// A numbered entry of this process's `fd` directory, on any procfs (`/proc/self/fd`, a thread's, a
    /// procfs mounted elsewhere: helper-45), is a descriptor: one that is closed or the process's own ends
    /// the walk, and one the process was started with is followed to its file (helper-46 found the walk
    /// stopping there, and reading behind it).
    package static func reach(_ path: PathName) -> Reach? {
        let slash = UInt8(ascii: "/")
        var directory = Glibc.open(path.bytes.first == slash ? "/" : ".", openPath | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { return nil }
        defer { close(directory) }
        /// Goes on from `next`, a descriptor the walk opened; false when the open failed.
        func move(to next: CInt) -> Bool {
            guard next >= 0 else { return false }
            close(directory)
            directory = next
            return true
        }
        var pending = components(Array(path.bytes))
        // The path's own components are the last `original` of `pending`: links' targets go in front.
        var original = pending.count
        var lastIsLink = false
        var links = 0
        var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        while !pending.isEmpty {
            let isOriginal = pending.count <= original
            let component = pending.removeFirst()
            if isOriginal { original -= 1 }
            if component == Array(".".utf8) { continue }
            let name = component.map { CChar(bitPattern: $0) } + [0]
            if let number = CInt(String(decoding: component, as: UTF8.self)), isOwnDescriptorDirectory(directory) {
                if isOwnOrClosed(number) { return lastIsLink && pending.isEmpty ? .link : .entry }
                // One the process was started with: on from its file.
                guard move(to: openat(directory, name, openPath | O_CLOEXEC)) else { return nil }
                continue
            }
            let length = readlinkat(directory, name, &target, target.count - 1)
            if length <= 0 {
                // Not a link: a directory to go into, unless the path ends here.
                guard !pending.isEmpty, move(to: openat(directory, name, openPath | O_NOFOLLOW | O_CLOEXEC))
                else { return nil }
                continue
            }
            links += 1
            if links > 40 { return nil }
            if isOriginal && original == 0 { lastIsLink = true }
            if isOnProcfs(directory) {
                // `self`, `cwd`, `root`, another process's descriptor: where the kernel takes it.
                guard move(to: openat(directory, name, openPath | O_CLOEXEC)) else { return nil }
                continue
            }
            let bytes = target[0..<length].map { UInt8(bitPattern: $0) }
            if bytes.first == slash {
                guard move(to: Glibc.open("/", openPath | O_DIRECTORY | O_CLOEXEC)) else { return nil }
            }
            pending = components(bytes) + pending
        }
        return nil
    }

    /// Whether `directory` is a `fd` directory of this process on a procfs, wherever it is mounted, and
    /// whichever of its threads it belongs to: there the entry of `directory`'s own number is a link to
    /// `directory` itself, which no other process has open (and a PID namespace changes nothing).
    private static func isOwnDescriptorDirectory(_ directory: CInt) -> Bool {
        guard isOnProcfs(directory) else { return false }
        var own = stat()
        var entry = stat()
        return fstat(directory, &own) == 0 && fstatat(directory, String(directory), &entry, 0) == 0
            && own.st_dev == entry.st_dev && own.st_ino == entry.st_ino
    }

    /// The components of a path, without empty ones (a doubled or trailing slash).
    private static func components(_ bytes: [UInt8]) -> [[UInt8]] {
        bytes.split(separator: UInt8(ascii: "/")).map { Array($0) }
    }
}

/// procfs's magic number (linux/magic.h).
private let procSuperMagic = 0x9FA0

/// `O_PATH`, which Glibc hides behind `_GNU_SOURCE` (asm-generic/fcntl.h).
package let openPath: CInt = 0o10_000_000
