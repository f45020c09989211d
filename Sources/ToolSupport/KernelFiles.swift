import CGlibcExtras

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Whether `fd` lies on a file system whose files the kernel makes as they are read: procfs, sysfs, tracefs
/// or debugfs. Their regular files say they are empty, give about a page per read, and some wait for more
/// (`trace_pipe`, `/proc/kmsg`), so a reader must take what each read gives rather than trust the size.
/// False when the file system cannot be told.
package func isKernelMadeFile(_ fd: CInt) -> Bool {
    var system = statfs()
    return fstatfs(fd, &system) == 0 && isKernelMadeFileSystem(system)
}

/// As ``isKernelMadeFile(_:)``, for the file at `path`.
package func isKernelMadeFile(atPath path: UnsafePointer<CChar>) -> Bool {
    var system = statfs()
    return statfs(path, &system) == 0 && isKernelMadeFileSystem(system)
}

private func isKernelMadeFileSystem(_ system: statfs) -> Bool {
    // Magic numbers from linux/magic.h.
    let procfs = 0x9fa0
    let sysfs = 0x6265_6572
    let tracefs = 0x7472_6163
    let debugfs = 0x6462_6720
    return [procfs, sysfs, tracefs, debugfs].contains(Int(system.f_type))
}
