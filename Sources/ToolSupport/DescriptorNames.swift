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
            // O_PATH | O_NOFOLLOW opens a magic link that ends the path as itself.
            guard !followingLinks && info.st_mode & S_IFMT == S_IFLNK && reach(path) == .entry else { return 0 }
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

    /// Whether descriptor `number` is closed or was opened by this process: close-on-exec, which a
    /// descriptor the process was started with cannot be.
    private static func isOwnOrClosed(_ number: CInt) -> Bool {
        let flags = fcntl(number, F_GETFD)
        return flags == -1 || flags & FD_CLOEXEC != 0
    }

    /// Whether, and how, `path` reaches a descriptor that is closed or the process's own: `/dev/stdin`,
    /// `/dev/fd/3`, `/proc/self/fd/3` or a link to one. The path is resolved a component at a time up to a
    /// link in a `fd` directory of this process on any procfs (`/proc/self/fd`, a thread's `/proc/TID/fd`
    /// or `task/TID/fd`, a procfs mounted elsewhere: helper-45).
    package static func reach(_ path: PathName) -> Reach? {
        let slash = UInt8(ascii: "/")
        var resolved: [[UInt8]] = []
        var pending = components(Array(path.bytes))
        // The path's own components are the last `original` of `pending`: links' targets go in front.
        var original = pending.count
        if path.bytes.first != slash {
            guard let working = getcwd(nil, 0) else { return nil }
            defer { free(working) }
            pending = components(Array(UnsafeRawBufferPointer(start: working, count: strlen(working)))) + pending
        }
        var lastIsLink = false
        var links = 0
        while !pending.isEmpty {
            let isOriginal = pending.count <= original
            let component = pending.removeFirst()
            if isOriginal { original -= 1 }
            if component == Array(".".utf8) { continue }
            if component == Array("..".utf8) {
                _ = resolved.popLast()
                continue
            }
            if let number = CInt(String(decoding: component, as: UTF8.self)), isOwnDescriptorDirectory(resolved) {
                // A link to an open descriptor, whose target is not a path to follow.
                guard isOwnOrClosed(number) else { return nil }
                return lastIsLink && pending.isEmpty ? .link : .entry
            }
            let candidate = resolved + [component]
            var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let length = readlink(spelled(candidate), &target, target.count - 1)
            guard length > 0 else {
                resolved = candidate
                continue
            }
            links += 1
            if links > 40 { return nil }
            if isOriginal && original == 0 { lastIsLink = true }
            let bytes = target[0..<length].map { UInt8(bitPattern: $0) }
            if bytes.first == slash { resolved = [] }
            pending = components(bytes) + pending
        }
        return nil
    }

    /// Whether `directory` is a `fd` directory of this process on a procfs, wherever it is mounted:
    /// `ROOT/X/fd` where `X` is the process or one of its threads, or `ROOT/P/task/T/fd` where `P` is the
    /// process, as the procfs at `ROOT` numbers them (its `self`, which is not getpid() in a PID namespace
    /// whose /proc was not mounted again).
    private static func isOwnDescriptorDirectory(_ directory: [[UInt8]]) -> Bool {
        let procSuperMagic = 0x9FA0
        var info = statfs()
        guard directory.last == Array("fd".utf8), directory.count >= 2,
            statfs(spelled(directory), &info) == 0, Int(info.f_type) == procSuperMagic
        else { return false }
        let inTask = directory.count >= 4 && directory[directory.count - 3] == Array("task".utf8)
        let process = directory[directory.count - (inTask ? 4 : 2)]
        let root = Array(directory.dropLast(inTask ? 4 : 2))
        var own = [CChar](repeating: 0, count: 32)
        let ownLength = readlink(spelled(root + [Array("self".utf8)]), &own, own.count - 1)
        guard ownLength > 0 else { return false }
        if own[0..<ownLength].map({ UInt8(bitPattern: $0) }) == process { return true }
        // A thread's own directory (`/proc/TID`) is one of the process's tasks.
        return !inTask && access(spelled(root + [Array("self".utf8), Array("task".utf8), process]), F_OK) == 0
    }

    /// Components as an absolute path for a system call.
    private static func spelled(_ components: [[UInt8]]) -> [CChar] {
        components.flatMap { [UInt8(ascii: "/")] + $0 }.map { CChar(bitPattern: $0) } + [0]
    }

    /// The components of a path, without empty ones (a doubled or trailing slash).
    private static func components(_ bytes: [UInt8]) -> [[UInt8]] {
        bytes.split(separator: UInt8(ascii: "/")).map { Array($0) }
    }
}

/// `O_PATH`, which Glibc hides behind `_GNU_SOURCE` (asm-generic/fcntl.h).
package let openPath: CInt = 0o10_000_000
