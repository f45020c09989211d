import CGlibcExtras
import Testing
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// dcat reads the kernel's own files as streams, as they are made (see `isKernelMadeFile`).
struct KernelFilesTests {
    @Test(arguments: ["/proc/version", "/sys/devices/system/cpu/online"])
    func theKernelsOwnFilesAreTold(path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0, "\(path) cannot be opened here")
        defer { close(fd) }
        #expect(isKernelMadeFile(fd))
    }

    @Test func anOrdinaryFileIsNot() throws {
        var template = Array("/tmp/kernelfiles.XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        try #require(fd >= 0)
        defer {
            close(fd)
            template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        }
        #expect(!isKernelMadeFile(fd))
        #expect(!isKernelMadeFile(-1))
        #expect(fileSizeMeaning(-1) == .unknown)
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
            #expect(fileSizeMeaning(fd) == .length)
            close(fd)
        }
        if shm >= 0 { close(shm) }
        var ends: [CInt] = [-1, -1]
        try #require(pipe(&ends) == 0)
        defer { for end in ends { close(end) } }
        #expect(fileSizeMeaning(ends[0]) == .unknown)
        let version = open("/proc/version", O_RDONLY | O_CLOEXEC)
        try #require(version >= 0)
        defer { close(version) }
        #expect(fileSizeMeaning(version) == .madeAsRead)
    }
}
