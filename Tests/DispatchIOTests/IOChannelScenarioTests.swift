import DispatchData
import DispatchIO
import DispatchQueues
import SystemPackage
import Testing
import URing

#if canImport(Glibc)
import Glibc
#endif

/// The shape of libdispatch's own I/O tests, on this API.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct IOChannelScenarioTests {
    /// Every regular file of `Fixtures/` read through its own path channel: each byte counted once, each
    /// cleanup handler run once (`T:dispatch_io.c` reads a whole tree the same way).
    @Test(arguments: EngineKind.allCases)
    func readATreeThroughPathChannels(kind: EngineKind) async throws {
        let root = URL.fixtures
        let files = regularFiles(under: root)
        try #require(files.count >= 8)
        var expected = 0
        var total = 0
        for file in files {
            var st = stat()
            stat(file, &st)
            expected += Int(st.st_size)
            let cleaned = Promise<Errno?>()
            let channel = try #require(
                IOChannel(
                    type: .stream,
                    path: FilePath(file),
                    mode: .readOnly,
                    queue: WorkQueue(label: "tree"),
                    engine: Engines.get(kind),
                    cleanupHandler: cleanup(cleaned)
                )
            )
            let recorder = Recorder()
            channel.read(offset: 0, length: .max, queue: recorder.queue, handler: recorder.handler)
            let calls = await recorder.wait()
            #expect(calls.last == Call(done: true, count: 0, error: nil), "\(file)")
            total += recorder.bytes.count
            channel.close()
            let cleanupError = await cleaned.get()
            #expect(cleanupError == nil)
        }
        #expect(total == expected)
    }

    /// B17: a file is read to a read of 0 bytes, not to the size it had when its channel was made. Reads past
    /// that size take small buffers, one at a time; a file that grew by megabytes since (and an empty one)
    /// still comes out whole, on a random and on a stream channel.
    @Test(arguments: EngineKind.allCases)
    func aFileThatGrewIsReadToItsNewEnd(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        for (before, added) in [(1000, (3 << 20) + 5), (0, 70_000), (0, 0), ((2 << 20), 1)] {
            for type in [IOChannel.StreamType.random, .stream] {
                let bytes = pattern(before + added, seed: before)
                let path = dir.make("grows", Array(bytes[..<before]))
                let fd = openRead(path)
                let channel = IOChannel(
                    type: type,
                    fileDescriptor: fd,
                    queue: WorkQueue(label: "g"),
                    engine: Engines.get(kind)
                ) { _ in try? fd.close() }
                let appender = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
                try #require(appender >= 0)
                let rest = Array(bytes[before...])
                #expect(rest.withUnsafeBytes { write(appender, $0.baseAddress, $0.count) } == added)
                close(appender)
                let recorder = Recorder()
                channel.read(offset: 0, length: .max, queue: recorder.queue, handler: recorder.handler)
                #expect(await recorder.wait().last == Call(done: true, count: 0, error: nil))
                expectSameBytes(recorder.bytes, bytes)
                channel.close()
            }
        }
    }

    /// B17: a short read that ends where the file's size at open says it ends is the end of file, with no
    /// read after it to find nothing (a small file is one read); a file whose size is a whole number of
    /// chunks still needs the read of 0 bytes. The bytes and the final call are as ever.
    @Test(arguments: EngineKind.allCases)
    func aShortReadAtTheSizeIsTheEnd(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let engine = try IOEngine(kind: kind)
        defer { engine.shutdown() }
        let chunk = 1 << 20
        // (size, reads): a short read ends a file unless the size is a multiple of the chunk.
        let cases = [(0, 1), (1, 1), (4096, 1), (chunk, 2), (chunk + 1, 2), (3 * chunk + 5, 4)]
        for (size, reads) in cases {
            for type in [IOChannel.StreamType.random, .stream] {
                let bytes = pattern(size, seed: size)
                let path = dir.make("sized", bytes)
                let fd = openRead(path)
                let channel = IOChannel(type: type, fileDescriptor: fd, queue: WorkQueue(label: "s"), engine: engine) {
                    _ in try? fd.close()
                }
                let before = engine.readsRequested
                let recorder = Recorder()
                // As dcat asks: more than the size, so that the read ends on its own.
                channel.read(offset: 0, length: size + (64 << 10), queue: recorder.queue, handler: recorder.handler)
                #expect(await recorder.wait().last == Call(done: true, count: 0, error: nil))
                expectSameBytes(recorder.bytes, bytes)
                #expect(engine.readsRequested - before == reads, "\(size) bytes, \(type)")
                channel.close()
            }
        }
    }

    /// B17: the end of file is a read of 0 bytes, never a short one. /proc/kallsyms is a regular file whose
    /// reads give about a page each, wherever they start, and megabytes in all: a random channel's read of
    /// it (several chunks in flight at increasing offsets) must return what plain `read` calls return.
    @Test(
        .enabled(if: access("/proc/kallsyms", R_OK) == 0),
        arguments: EngineKind.allCases
    )
    func shortReadsInMidFileAreNotTheEnd(kind: EngineKind) async throws {
        let path = "/proc/kallsyms"
        var expected: [UInt8] = []
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0)
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while case let count = read(fd, &buffer, buffer.count), count > 0 { expected += buffer[..<count] }
        close(fd)
        try #require(expected.count > 1 << 20)
        let cleaned = Promise<Errno?>()
        let channel = try #require(
            IOChannel(
                type: .random,
                path: FilePath(path),
                mode: .readOnly,
                queue: WorkQueue(label: "proc"),
                engine: Engines.get(kind),
                cleanupHandler: cleanup(cleaned)
            )
        )
        let recorder = Recorder()
        channel.read(offset: 0, length: .max, queue: recorder.queue, handler: recorder.handler)
        let calls = await recorder.wait()
        #expect(calls.last == Call(done: true, count: 0, error: nil))
        #expect(recorder.bytes.count == expected.count)
        #expect(recorder.bytes == expected)
        channel.close()
        #expect(await cleaned.get() == nil)
    }

    /// B30: a stop in the middle of a long read of a file: what was delivered is a prefix of the file,
    /// and the read ends with ECANCELED.
    @Test(arguments: EngineKind.allCases)
    func stopInTheMiddleOfALongRead(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let bytes = pattern(4 << 20)
        let path = dir.make("long", bytes)
        let fd = openRead(path)
        defer { try? fd.close() }
        let cleaned = Promise<Errno?>()
        let channel = IOChannel(
            type: .random,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind),
            cleanupHandler: cleanup(cleaned)
        )
        channel.setLimit(highWater: 16 << 10)
        let recorder = Recorder()
        let stopped = Locked(false)
        channel.read(offset: 0, length: .max, queue: recorder.queue) { done, data, error in
            recorder.record(done, data, error)
            // B61: stopping from inside a handler is allowed.
            if !done,
                stopped.withLock({ value in
                    defer { value = true }
                    return !value
                })
            {
                channel.close(flags: .stop)
            }
        }
        let calls = await recorder.wait()
        #expect(calls.last == Call(done: true, count: nil, error: .canceled))
        #expect(recorder.bytes.count < bytes.count)
        expectSameBytes(recorder.bytes, Array(bytes.prefix(recorder.bytes.count)))
        let cleanupError = await cleaned.get()
        #expect(cleanupError == nil)
    }

    /// The copy pattern (each chunk read is written to another channel) reads far faster than the page
    /// cache takes writes; reads wait while more than 16 MiB of writes are pending, and wake up again.
    @Test(arguments: EngineKind.allCases)
    func copyThroughTwoChannelsIsComplete(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let bytes = pattern(24 << 20, seed: 3)
        let source = openRead(dir.make("source", bytes))
        defer { try? source.close() }
        let target = FileDescriptor(rawValue: open(dir.file("target"), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644))
        defer { try? target.close() }
        let engine = Engines.get(kind)
        let reader = IOChannel(type: .stream, fileDescriptor: source, queue: WorkQueue(label: "r"), engine: engine) {
            _ in
        }
        let writer = IOChannel(type: .stream, fileDescriptor: target, queue: WorkQueue(label: "w"), engine: engine) {
            _ in
        }
        let queue = WorkQueue(label: "copy")
        let written = Locked(0)
        let done = Promise<Void>()
        reader.read(offset: 0, length: .max, queue: queue) { _, data, error in
            #expect(error == nil)
            guard let data, !data.isEmpty else { return }
            writer.write(offset: 0, data: data, queue: queue) { finished, _, error in
                #expect(error == nil)
                if finished,
                    written.withLock({ value -> Int in
                        value += data.count
                        return value
                    }) == bytes.count
                {
                    done.fulfil(())
                }
            }
        }
        await done.get()
        reader.close()
        writer.close()
        let copy = try #require(readWholeFile(dir.file("target")))
        expectSameBytes(copy, bytes)
    }

    /// The same pattern on one stream channel of one file: the writes queue behind the read on the file's
    /// single lane, so the read must not wait for them (it would wait forever).
    @Test(arguments: EngineKind.allCases)
    func copyIntoTheSameDescriptorDoesNotDeadlock(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let bytes = pattern(24 << 20, seed: 5)
        let path = dir.make("file", bytes)
        let fd = FileDescriptor(rawValue: open(path, O_RDWR | O_CLOEXEC))
        defer { try? fd.close() }
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let queue = WorkQueue(label: "copy")
        let written = Locked(0)
        let done = Promise<Void>()
        channel.read(offset: 0, length: .max, queue: queue) { _, data, _ in
            guard let data, !data.isEmpty else { return }
            channel.write(offset: 0, data: data, queue: queue) { finished, _, error in
                #expect(error == nil)
                if finished,
                    written.withLock({ value -> Int in
                        value += data.count
                        return value
                    }) == bytes.count
                {
                    done.fulfil(())
                }
            }
        }
        await done.get()
        channel.close()
        let result = try #require(readWholeFile(path))
        #expect(result.count == 2 * bytes.count)
        expectSameBytes(Array(result[bytes.count...]), bytes)
    }

    /// B42 with a real EACCES: as an unprivileged user (a child process that drops root), a path channel
    /// on a file it may not read fails every operation with EACCES.
    @Test func permissionDeniedForAnUnprivilegedUser() async {
        // Named after this process and removed by it: the child, no longer root, cannot unlink a file of
        // root's in /tmp (sticky), and it ends in `exit`, which runs no `defer`.
        defer { unlink("/tmp/dispatchio-eacces-\(getpid())") }
        await #expect(processExitsWith: .success) {
            let path = "/tmp/dispatchio-eacces-\(getppid())"
            let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            precondition(fd >= 0)
            close(fd)
            if getuid() == 0 {
                // nobody: permissions now apply.
                guard setgid(65534) == 0, setuid(65534) == 0 else { exit(1) }
            }
            let done = Promise<Errno?>()
            guard
                let channel = IOChannel(
                    type: .stream,
                    path: FilePath(path),
                    mode: .readOnly,
                    queue: WorkQueue(label: "c"),
                    cleanupHandler: { _ in }
                )
            else { exit(2) }
            channel.read(offset: 0, length: 1, queue: WorkQueue(label: "r")) { finished, _, error in
                if finished { done.fulfil(error) }
            }
            let error = await done.get()
            exit(error == .permissionDenied ? 0 : 3)
        }
    }
}

enum URL {
    /// The repository's Fixtures/ folder, found from this source file.
    static var fixtures: String {
        var path = #filePath
        for _ in 0..<3 { path = String(path[..<path.lastIndex(of: "/")!]) }
        return path + "/Fixtures"
    }
}

func regularFiles(under root: String) -> [String] {
    var result: [String] = []
    guard let dir = opendir(root) else { return [] }
    defer { closedir(dir) }
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) {
            String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        if name == "." || name == ".." { continue }
        let path = root + "/" + name
        var st = stat()
        guard lstat(path, &st) == 0 else { continue }
        if st.st_mode & S_IFMT == S_IFDIR {
            result += regularFiles(under: path)
        } else if st.st_mode & S_IFMT == S_IFREG {
            result.append(path)
        }
    }
    return result.sorted()
}

func readWholeFile(_ path: String) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 1 << 20)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n <= 0 { break }
        result += buffer[0..<n]
    }
    return result
}
