#if canImport(Glibc)
import Glibc
#endif

// The few system calls sources make that the Glibc module does not import (their headers,
// <sys/signalfd.h> and <sys/pidfd.h>, are not in it). glibc 2.36 exports both functions; they take plain
// integers and pointers, which Swift passes in the same registers as C on the platforms this package
// builds for.

/// signalfd(2): a descriptor that reads the signals in `mask`.
@_silgen_name("signalfd")
func systemSignalFD(_ fd: CInt, _ mask: UnsafePointer<sigset_t>, _ flags: CInt) -> CInt

/// pidfd_open(2): a descriptor that refers to process `pid` and polls readable once it has exited.
@_silgen_name("pidfd_open")
func systemPidFDOpen(_ pid: pid_t, _ flags: CUnsignedInt) -> CInt

/// `SFD_NONBLOCK | SFD_CLOEXEC` (and `IN_NONBLOCK | IN_CLOEXEC`, which have the same values).
let nonBlockingCloseOnExec: CInt = O_NONBLOCK | O_CLOEXEC

/// `sizeof(struct signalfd_siginfo)`.
let signalFDInfoSize = 128

/// `P_PIDFD` for waitid(2).
let idTypePidFD = idtype_t(rawValue: 3)

/// `F_GETPIPE_SZ` for fcntl(2) (defined by glibc only under `_GNU_SOURCE`).
let fcntlGetPipeSize: CInt = 1032

/// `SIOCOUTQ`: bytes not yet sent on a socket.
let socketOutputQueue: UInt = 0x5411
