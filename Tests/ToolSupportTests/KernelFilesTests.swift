import CGlibcExtras
import Testing
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// dcat reads the kernel's own files as streams, as they are made (see `FileSizeMeaning.madeAsRead`).
struct KernelFilesTests {
    @Test(arguments: ["/proc/version", "/sys/devices/system/cpu/online"])
    func theKernelsOwnFilesAreTold(path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0, "\(path) cannot be opened here")
        defer { close(fd) }
        #expect(FileSystemFacts(fd).sizeMeaning == .madeAsRead)
    }

    @Test func anOrdinaryFileIsNot() throws {
        var template = Array("/tmp/kernelfiles.XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        try #require(fd >= 0)
        defer {
            close(fd)
            template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        }
        #expect(FileSystemFacts(fd).sizeMeaning != .madeAsRead)
        #expect(FileSystemFacts(-1).sizeMeaning == .unknown)
    }

    /// dcat does without the read of an empty file at its turn only where the size is the length.
    @Test func sizesAreLengthsOnTmpfsAndNotOnPipesOrTheKernelsFiles() throws {
        let shm = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        var system = statfs()
        if shm >= 0 && fstatfs(shm, &system) == 0 && system.f_type == 0x0102_1994 {
            var template = Array("/dev/shm/kernelfiles.XXXXXX".utf8CString)
            let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
            try #require(fd >= 0)
            template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
            #expect(FileSystemFacts(fd).sizeMeaning == .length)
            close(fd)
        }
        if shm >= 0 { close(shm) }
        var ends: [CInt] = [-1, -1]
        try #require(pipe(&ends) == 0)
        defer { for end in ends { close(end) } }
        #expect(FileSystemFacts(ends[0]).sizeMeaning == .unknown)
        let version = open("/proc/version", O_RDONLY | O_CLOEXEC)
        try #require(version >= 0)
        defer { close(version) }
        #expect(FileSystemFacts(version).sizeMeaning == .madeAsRead)
    }

    /// A read that finds nothing still marks the file accessed, by the mount's rule; dcat leaves out the
    /// read of an empty file only where it would not.
    @Test func aReadKeepsTheAccessTimeByTheMountsRule() {
        func status(access: Int, modification: Int, change: Int) -> stat {
            var info = stat()
            info.st_atim = timespec(tv_sec: access, tv_nsec: 500)
            info.st_mtim = timespec(tv_sec: modification, tv_nsec: 500)
            info.st_ctim = timespec(tv_sec: change, tv_nsec: 500)
            return info
        }
        let now = timespec(tv_sec: 1_000_000, tv_nsec: 0)
        let day = 86_400
        let (valid, readOnly, noAccessTime, relative) = (0x20, 0x1, 0x400, 0x1000)
        func keeps(_ flags: Int?, _ info: stat) -> Bool {
            FileSystemFacts(sizeMeaning: .length, mountFlags: flags).readKeepsAccessTime(info, now: now)
        }
        let readSince = status(access: now.tv_sec - 10, modification: now.tv_sec - 20, change: now.tv_sec - 20)
        // relatime: kept once read after the last change, within the day.
        #expect(keeps(valid | relative, readSince))
        #expect(!keeps(valid | relative, status(access: 100, modification: 100, change: 50)))
        #expect(!keeps(valid | relative, status(access: 100, modification: 50, change: 100)))
        #expect(!keeps(valid | relative, status(access: 100, modification: 200, change: 50)))
        #expect(!keeps(valid | relative, status(access: now.tv_sec - day, modification: 0, change: 0)))
        // A second before the day's end is too close to tell from the kernel's coarser clock.
        #expect(!keeps(valid | relative, status(access: now.tv_sec - day + 1, modification: 0, change: 0)))
        #expect(keeps(valid | relative, status(access: now.tv_sec - day + 2, modification: 0, change: 0)))
        // strictatime: always marked; noatime and read-only mounts: never; flags not known: marked.
        #expect(!keeps(valid, readSince))
        #expect(keeps(valid | noAccessTime, status(access: 0, modification: 100, change: 100)))
        #expect(keeps(valid | readOnly, status(access: 0, modification: 100, change: 100)))
        #expect(!keeps(nil, readSince))
    }
}
