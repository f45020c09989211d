#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `fcntl` commands Glibc hides behind `_GNU_SOURCE` (linux/fcntl.h values).
private let setPipeSize: CInt = 1031  // F_SETPIPE_SZ
private let getPipeSize: CInt = 1032  // F_GETPIPE_SZ

/// Grows a pipe to 1 MiB (the most an unprivileged process may ask for by default), never shrinks it.
///
/// A default pipe holds 64 KiB, so every read returns at most that and the writer at the other end
/// sleeps each time it is full: 1 GiB through a pipe is 16,000 reads and as many wake-ups on each side.
/// At 1 MiB a read takes up to a whole pooled buffer. Measured on `cat big | dcat > /dev/null`: 502 ms
/// at 64 KiB, 390–410 ms at 256 KiB–1 MiB (the toolchain's DispatchIO: 834 ms). The size is the pipe's,
/// shared with the other end, which only lets the writer run further ahead; a failure (a pipe at the
/// per-user limit) leaves it as it was. dcopy grows a FIFO or pipe it copies from, for the same reason
/// (`cat big | dcopy /dev/stdin out`).
package func growPipe(_ fd: CInt) {
    let wanted: CInt = 1 << 20
    let current = fcntl(fd, getPipeSize)
    if current >= 0 && current < wanted { _ = fcntl(fd, setPipeSize, wanted) }
}

/// Whether `fd`, of type and permissions `mode` (`st_mode`), keeps message boundaries: a datagram or
/// sequenced-packet socket (any socket that is not `SOCK_STREAM`), or the write end of a packet-mode pipe
/// (`pipe2` with `O_DIRECT`). Each write to one is a message (a packet-mode pipe cuts writes into packets
/// of `PIPE_BUF` bytes), and a read that asks for less than the next message gets its first bytes: the
/// kernel drops the rest. A packet-mode pipe's read end cannot be told from any other pipe's (`O_DIRECT`
/// is only in the write end's flags), so this is false for it.
package func keepsMessages(_ fd: CInt, mode: mode_t) -> Bool {
    switch mode & S_IFMT {
    case S_IFSOCK: return !isStreamSocket(fd)
    // Glibc's `O_DIRECT` needs `_GNU_SOURCE`; `__O_DIRECT` is its value on every architecture.
    case S_IFIFO: return fcntl(fd, F_GETFL) & __O_DIRECT != 0
    default: return false
    }
}

/// Whether `fd` is a socket of type `SOCK_STREAM` (or its type cannot be read).
private func isStreamSocket(_ fd: CInt) -> Bool {
    var type: CInt = 0
    var length = socklen_t(MemoryLayout<CInt>.size)
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0 || type == CInt(SOCK_STREAM.rawValue)
}
