import DispatchData
import DispatchIO
import DispatchQueues
import SystemPackage
import Testing
import URing

#if canImport(Glibc)
import Glibc
#endif

/// `IOChannel.readSmallFile`, the channel-less read of a small file that dcat uses: it must end where a
/// random channel's read of the same length ends, and call its handler once.
@Suite(.serialized, .timeLimit(.minutes(1)))
final class SmallFileReadTests {
    let dir = TemporaryDirectory()

    deinit { dir.cleanup() }

    /// One read's outcome; a second handler call stops the run (the promise is fulfilled once).
    func read(
        _ fd: FileDescriptor,
        at offset: Int64,
        length: Int,
        sizeAtOpen: Int64,
        _ kind: EngineKind
    ) async -> (bytes: [UInt8], error: Errno?) {
        let outcome = Promise<([UInt8], Errno?)>()
        IOChannel.readSmallFile(fd, at: offset, length: length, sizeAtOpen: sizeAtOpen, engine: Engines.get(kind)) {
            data,
            error in
            outcome.fulfil((Array(data), error))
        }
        return await outcome.get()
    }

    @Test(arguments: EngineKind.allCases)
    func readsToTheLengthOrTheEndOfFile(kind: EngineKind) async throws {
        let bytes = pattern(5_000)
        let fd = openRead(dir.make("f", bytes))
        defer { try? fd.close() }
        // The whole file, asked with room to spare: one short read that ends at the size at open.
        let whole = await read(fd, at: 0, length: 64 << 10, sizeAtOpen: 5_000, kind)
        #expect(whole.error == nil)
        expectSameBytes(whole.bytes, bytes)
        // A part: the length ends it.
        let part = await read(fd, at: 100, length: 200, sizeAtOpen: 5_000, kind)
        #expect(part.error == nil)
        expectSameBytes(part.bytes, Array(bytes[100..<300]))
        // The tail from an offset, and nothing past the end.
        let tail = await read(fd, at: 4_990, length: 100, sizeAtOpen: 5_000, kind)
        expectSameBytes(tail.bytes, Array(bytes[4_990...]))
        let past = await read(fd, at: 9_000, length: 100, sizeAtOpen: 5_000, kind)
        #expect(past.bytes.isEmpty && past.error == nil)
        // A size at open that is out of date either way still gives the file as it is: a short read that
        // does not end at it is followed by another, which finds the end.
        let grown = await read(fd, at: 0, length: 64 << 10, sizeAtOpen: 1_000, kind)
        expectSameBytes(grown.bytes, bytes)
        let shrunk = await read(fd, at: 0, length: 64 << 10, sizeAtOpen: 9_000, kind)
        expectSameBytes(shrunk.bytes, bytes)
        // A file that fills the buffer whole (the bytes are handed over in it, not copied).
        let full = pattern(64 << 10, seed: 3)
        let fullFD = openRead(dir.make("full", full))
        defer { try? fullFD.close() }
        let all = await read(fullFD, at: 0, length: 64 << 10, sizeAtOpen: 64 << 10, kind)
        expectSameBytes(all.bytes, full)
    }

    /// A procfs file gives a page or so per read however much is asked: the read goes on from where each
    /// one stopped until it has the length (a channel's read does the same), where stopping at the first
    /// short read would cut every such file after its first page.
    @Test(
        .enabled(if: access("/proc/kallsyms", R_OK) == 0),
        arguments: EngineKind.allCases
    )
    func shortReadsInMidFileAreFollowedByMore(kind: EngineKind) async throws {
        let fd = openRead("/proc/kallsyms")
        defer { try? fd.close() }
        let got = await read(fd, at: 0, length: 64 << 10, sizeAtOpen: 0, kind)
        #expect(got.error == nil)
        #expect(got.bytes.count == 64 << 10)
        #expect(got.bytes.contains(UInt8(ascii: "\n")))
    }

    @Test(arguments: EngineKind.allCases)
    func aFailedReadGivesItsError(kind: EngineKind) async throws {
        // A directory: EISDIR, and no bytes.
        let directory = try FileDescriptor.open(FilePath(dir.path), .readOnly)
        defer { try? directory.close() }
        let fromDirectory = await read(directory, at: 0, length: 100, sizeAtOpen: 0, kind)
        #expect(fromDirectory.bytes.isEmpty && fromDirectory.error == .isDirectory)
        // A descriptor that is not open (-1: a closed number could be reused by another suite meanwhile).
        let fromClosed = await read(FileDescriptor(rawValue: -1), at: 0, length: 100, sizeAtOpen: 10, kind)
        #expect(fromClosed.bytes.isEmpty && fromClosed.error == .badFileDescriptor)
    }
}
