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
    }
}
