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
    /// component at a time up to a link in this process's `/proc/PID/fd` (or a thread's `task/TID/fd`);
    /// nothing is read when no descriptor was filled.
    package func namesAFilledDescriptor(_ path: PathName) -> FilledDescriptorName? {
        let filled = self.filled
        guard !filled.isEmpty else { return nil }
        // The process as /proc names it, which is not getpid() in a PID namespace whose /proc was not
        // mounted again.
        var own = [CChar](repeating: 0, count: 32)
        let ownLength = readlink("/proc/self", &own, own.count - 1)
        guard ownLength > 0 else { return nil }
        let ownFDDirectory = [Array("proc".utf8), own[0..<ownLength].map { UInt8(bitPattern: $0) }, Array("fd".utf8)]
        let task = Array("task".utf8)
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
            // `/proc/PID/fd` and `/proc/PID/task/TID/fd` (where `/proc/self` and `/proc/thread-self` lead).
            let inOwnFDDirectory =
                resolved == ownFDDirectory
                || (resolved.count == 5 && Array(resolved[0...1]) == Array(ownFDDirectory[0...1])
                    && resolved[2] == task && resolved[4] == ownFDDirectory[2])
            if inOwnFDDirectory {
                // A link to an open descriptor, whose target is not a path to follow.
                guard let number = CInt(String(decoding: component, as: UTF8.self)), filled.contains(number) else {
                    return nil
                }
                return lastIsLink && pending.isEmpty ? .link : .entry
            }
            let candidate = resolved + [component]
            var spelled = candidate.flatMap { [slash] + $0 }.map { CChar(bitPattern: $0) }
            spelled.append(0)
            var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let length = readlink(spelled, &target, target.count - 1)
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

    /// The components of a path, without empty ones (a doubled or trailing slash).
    private static func components(_ bytes: [UInt8]) -> [[UInt8]] {
        bytes.split(separator: UInt8(ascii: "/")).map { Array($0) }
    }
}
