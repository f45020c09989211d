import CXattr

#if canImport(Glibc)
import Glibc
#endif

/// Which of the standard descriptors (0, 1, 2) the process started without. A closed descriptor 2 needs
/// no report: messages then go nowhere, as they would for cat and cp.
///
/// A tool started with one of them closed (`dcat <&-`, `dcopy -v a b >&-`) would otherwise hand that
/// number to the next descriptor it opens: the ring, an `eventfd`, a destination file. It would then read
/// "standard input" from its own `eventfd` (and wait forever), or write `-v` lines into a copied file.
/// ``reserve()`` fills each closed one with `/dev/null`, and the tools report the closed stream as cat and
/// cp do: `standard output: Bad file descriptor`, `-: Bad file descriptor`, `write error: …`.
package struct StandardDescriptors: Sendable {
    /// Descriptor 0 was closed.
    package let inputWasClosed: Bool
    /// Descriptor 1 was closed.
    package let outputWasClosed: Bool
    /// Descriptor 2 was closed.
    package var errorWasClosed = false

    /// The descriptors filled with `/dev/null`.
    private var filled: [CInt] {
        [inputWasClosed, outputWasClosed, errorWasClosed].indices.filter {
            [inputWasClosed, outputWasClosed, errorWasClosed][$0]
        }.map { CInt($0) }
    }

    /// Opens `/dev/null` on each closed standard descriptor, lowest first, and says which were closed.
    /// Call it first, before anything opens a descriptor (the engine opens its ring when first used).
    package static func reserve() -> StandardDescriptors {
        var closed = [false, false, false]
        for fd in CInt(0)...2 where fcntl(fd, F_GETFD) == -1 && errno == EBADF {
            closed[Int(fd)] = true
            // The lowest free number is this one, since those below it are open (or just filled).
            let filler = open("/dev/null", (fd == 0 ? O_RDONLY : O_WRONLY))
            if filler >= 0 && filler != fd {
                dup2(filler, fd)
                close(filler)
            }
        }
        var descriptors = StandardDescriptors(inputWasClosed: closed[0], outputWasClosed: closed[1])
        descriptors.errorWasClosed = closed[2]
        return descriptors
    }

    /// How a path reaches a descriptor the process started without.
    package enum FilledDescriptorName: Sendable {
        /// Its entry in `/proc/PID/fd` (`/dev/fd/1`, `/proc/self/fd/1`), absent for cat and cp: `lstat`
        /// finds nothing there.
        case entry
        /// A symbolic link to that entry (`/dev/stdout`), dangling for cat and cp.
        case link
    }

    /// Whether, and how, `path` names one of the descriptors the process started without: `/dev/stdin`,
    /// `/dev/fd/1`, `/proc/self/fd/2` or a link to one. Such a name dangles for cat and cp; here it would
    /// open the `/dev/null` that fills the descriptor, so that `dcopy /dev/stdin a <&-` emptied `a` without
    /// a word, where cp says `cannot stat '/dev/stdin'` and leaves it (helper-43). The path is resolved a
    /// component at a time up to a link in a `fd` directory of this process on any procfs (`/proc/self/fd`,
    /// a thread's `/proc/TID/fd` or `task/TID/fd`, a procfs mounted elsewhere: helper-45); nothing is read
    /// when no descriptor was filled.
    package func namesAFilledDescriptor(_ path: PathName) -> FilledDescriptorName? {
        let filled = self.filled
        guard !filled.isEmpty else { return nil }
        let slash = UInt8(ascii: "/")
        var resolved: [[UInt8]] = []
        var pending = Self.components(Array(path.bytes))
        // The path's own components are the last `original` of `pending`: links' targets go in front.
        var original = pending.count
        if path.bytes.first != slash {
            guard let working = getcwd(nil, 0) else { return nil }
            defer { free(working) }
            pending = Self.components(Array(UnsafeRawBufferPointer(start: working, count: strlen(working)))) + pending
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
            if let number = CInt(String(decoding: component, as: UTF8.self)), Self.isOwnDescriptorDirectory(resolved) {
                // A link to an open descriptor, whose target is not a path to follow.
                guard filled.contains(number) else { return nil }
                return lastIsLink && pending.isEmpty ? .link : .entry
            }
            let candidate = resolved + [component]
            var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let length = readlink(Self.spelled(candidate), &target, target.count - 1)
            guard length > 0 else {
                resolved = candidate
                continue
            }
            links += 1
            if links > 40 { return nil }
            if isOriginal && original == 0 { lastIsLink = true }
            let bytes = target[0..<length].map { UInt8(bitPattern: $0) }
            if bytes.first == slash { resolved = [] }
            pending = Self.components(bytes) + pending
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
