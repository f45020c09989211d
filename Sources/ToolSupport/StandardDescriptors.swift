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

    /// Opens `/dev/null` on each closed standard descriptor, lowest first, and says which were closed.
    /// Call it first, before anything opens a descriptor (the engine opens its ring when first used).
    ///
    /// The fillers are close-on-exec, as every descriptor the tools open is: that is how
    /// ``DescriptorNames`` tells them from the descriptors the process was started with, and a name for
    /// one (`/dev/stdin` with 0 closed) dangles, as it does for cat and cp.
    package static func reserve() -> StandardDescriptors {
        var closed = [false, false, false]
        for fd in CInt(0)...2 where fcntl(fd, F_GETFD) == -1 && errno == EBADF {
            closed[Int(fd)] = true
            // The lowest free number is this one, since those below it are open (or just filled).
            let filler = open("/dev/null", (fd == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC)
            if filler >= 0 && filler != fd {
                dup2(filler, fd)
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                close(filler)
            }
        }
        var descriptors = StandardDescriptors(inputWasClosed: closed[0], outputWasClosed: closed[1])
        descriptors.errorWasClosed = closed[2]
        return descriptors
    }
}
