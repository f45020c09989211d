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
