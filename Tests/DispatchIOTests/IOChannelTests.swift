import DispatchData
import DispatchIO
import DispatchQueues
import SystemPackage
import Testing
import URing

#if canImport(Glibc)
import Glibc
#endif

// A class, for its deinit: Swift Testing makes an instance per test, and each makes a directory, which a
// test that does not use it left behind.
@Suite(.serialized, .timeLimit(.minutes(1)))
final class IOChannelTests {
    let dir = TemporaryDirectory()

    deinit { dir.cleanup() }

    // MARK: Read sequences (B15–B18, B24)

    @Test(arguments: EngineKind.allCases)
    func exactLengthReadOfAFileIsOneCall(kind: EngineKind) async throws {
        let bytes = pattern(100_000)
        let path = dir.make("f", bytes)
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let cleaned = Promise<Errno?>()
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind),
            cleanupHandler: cleanup(cleaned)
        )
        let recorder = Recorder()
        channel.read(offset: 0, length: 100_000, queue: recorder.queue, handler: recorder.handler)
        // B16: exactly one call, carrying every byte.
        let recorderCalls = await recorder.wait()
        #expect(recorderCalls == [Call(done: true, count: 100_000, error: nil)])
        expectSameBytes(recorder.bytes, bytes)
        channel.close()
        let cleanedValue = await cleaned.get()
        #expect(cleanedValue == nil)  // B4
    }

    @Test(arguments: EngineKind.allCases)
    func readToEndOfFileDeliversThenEndsEmpty(kind: EngineKind) async throws {
        let bytes = pattern(100_000)
        let path = dir.make("f", bytes)
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let recorder = Recorder()
        channel.read(offset: 0, length: .max, queue: recorder.queue, handler: recorder.handler)
        // B17: what was pending, then (true, empty, nil).
        let recorderCalls = await recorder.wait()
        #expect(
            recorderCalls == [Call(done: false, count: 100_000, error: nil), Call(done: true, count: 0, error: nil)]
        )
        expectSameBytes(recorder.bytes, bytes)
        #expect(lseek(fd.rawValue, 0, SEEK_CUR) == 100_000)  // B8: the position advanced
        channel.close()
    }

    @Test(arguments: EngineKind.allCases)
    func waterMarksShapeDeliveries(kind: EngineKind) async throws {
        let bytes = pattern(100_000)
        let path = dir.make("f", bytes)
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let channel = IOChannel(
            type: .random,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        channel.setLimit(lowWater: 0)
        channel.setLimit(highWater: 40_000)
        let recorder = Recorder()
        channel.read(offset: 0, length: 100_000, queue: recorder.queue, handler: recorder.handler)
        // B24: low 0, high 40000 → 40000, 40000, then the final 20000.
        #expect(
            await recorder.wait() == [
                Call(done: false, count: 40_000, error: nil), Call(done: false, count: 40_000, error: nil),
                Call(done: true, count: 20_000, error: nil),
            ]
        )
        expectSameBytes(recorder.bytes, bytes)
        // B22: high water alone lowers the default low water mark too.
        channel.setLimit(highWater: 16384)
        let second = Recorder()
        channel.read(offset: 0, length: .max, queue: second.queue, handler: second.handler)
        let calls = await second.wait()
        #expect(calls.dropLast().allSatisfy { !$0.done && $0.count! <= 16384 && $0.count! > 0 })
        expectSameBytes(second.bytes, bytes)
        channel.close()
    }

    @Test(arguments: EngineKind.allCases)
    func lowWaterAboveTheReadAheadStillDeliversEverything(kind: EngineKind) async throws {
        // 5 MiB is more than the read-ahead holds (4 × 512 KiB): the read must keep asking until the low
        // water mark or the length is reached, or nothing is ever delivered (it hung once).
        let bytes = pattern(5 << 20)
        let path = dir.make("f", bytes)
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let channel = IOChannel(
            type: .random,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        channel.setLimit(lowWater: .max)
        let exact = Recorder()
        channel.read(offset: 0, length: 5 << 20, queue: exact.queue, handler: exact.handler)
        // B24, B16: below the low water mark nothing goes out until the length is read: one call.
        let exactCalls = await exact.wait()
        #expect(exactCalls == [Call(done: true, count: 5 << 20, error: nil)])
        expectSameBytes(exact.bytes, bytes)
        let toEnd = Recorder()
        channel.read(offset: 0, length: .max, queue: toEnd.queue, handler: toEnd.handler)
        // B17: to end of file, everything, then the empty final call.
        let toEndCalls = await toEnd.wait()
        #expect(toEndCalls == [Call(done: false, count: 5 << 20, error: nil), Call(done: true, count: 0, error: nil)])
        expectSameBytes(toEnd.bytes, bytes)
        channel.close()
    }

    @Test(arguments: EngineKind.allCases)
    func zeroLengthOperationsCompleteAtOnce(kind: EngineKind) async throws {
        let path = dir.make("f", pattern(10))
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let read = Recorder()
        channel.read(offset: 0, length: 0, queue: read.queue, handler: read.handler)
        let readCalls = await read.wait()
        #expect(readCalls == [Call(done: true, count: 0, error: nil)])  // B12
        let write = Recorder()
        channel.write(offset: 0, data: DispatchDataBuffer(), queue: write.queue, handler: write.handler)
        let writeCalls = await write.wait()
        #expect(writeCalls == [Call(done: true, count: nil, error: nil)])  // B12
        channel.close()
        // B28 before B12: on a closed channel they are refused like any other, as libdispatch checks the
        // channel before the length.
        let closedRead = Recorder()
        channel.read(offset: 0, length: 0, queue: closedRead.queue, handler: closedRead.handler)
        #expect(await closedRead.wait() == [Call(done: true, count: nil, error: .canceled)])
        let closedWrite = Recorder()
        channel.write(offset: 0, data: DispatchDataBuffer(), queue: closedWrite.queue, handler: closedWrite.handler)
        #expect(await closedWrite.wait() == [Call(done: true, count: 0, error: .canceled)])
        // B2 before B12: a channel on a descriptor that is not open refuses them with EBADF.
        let pipe = makePipe()
        try pipe.read.close()
        try pipe.write.close()
        let bad = IOChannel(
            type: .stream,
            fileDescriptor: pipe.read,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let badRead = Recorder()
        bad.read(offset: 0, length: 0, queue: badRead.queue, handler: badRead.handler)
        #expect(await badRead.wait() == [Call(done: true, count: nil, error: .badFileDescriptor)])
        let badWrite = Recorder()
        bad.write(offset: 0, data: DispatchDataBuffer(), queue: badWrite.queue, handler: badWrite.handler)
        #expect(await badWrite.wait() == [Call(done: true, count: 0, error: .badFileDescriptor)])
        bad.close()
    }

    // MARK: Offsets (B8, B10)

    @Test(arguments: EngineKind.allCases)
    func randomOffsetsAreRelativeToThePositionAtCreation(kind: EngineKind) async throws {
        let bytes = pattern(1000)
        let path = dir.make("f", bytes)
        defer { dir.cleanup() }
        let fd = FileDescriptor(rawValue: open(path, O_RDWR | O_CLOEXEC))
        defer { try? fd.close() }
        lseek(fd.rawValue, 100, SEEK_SET)
        let cleaned = Promise<Errno?>()
        let channel = IOChannel(
            type: .random,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind),
            cleanupHandler: cleanup(cleaned)
        )
        let first = Recorder()
        channel.read(offset: 0, length: 1, queue: first.queue, handler: first.handler)
        _ = await first.wait()
        #expect(first.bytes == [bytes[100]])  // B10
        let past = Recorder()
        channel.read(offset: 950, length: 10, queue: past.queue, handler: past.handler)
        let pastCalls = await past.wait()
        #expect(pastCalls == [Call(done: true, count: 0, error: nil)])  // B10: at or past EOF
        let write = Recorder()
        channel.write(offset: 2000, data: DispatchDataBuffer([1]), queue: write.queue, handler: write.handler)
        let writeCalls = await write.wait()
        #expect(writeCalls == [Call(done: true, count: nil, error: nil)])
        var st = stat()
        fstat(fd.rawValue, &st)
        #expect(st.st_size == 2101)  // B10: writing past EOF extends the file
        channel.close()
        let cleanedValue = await cleaned.get()
        #expect(cleanedValue == nil)
        #expect(lseek(fd.rawValue, 0, SEEK_CUR) == 100)  // B10: never moved
    }

    @Test(arguments: EngineKind.allCases)
    func streamReadsFollowThePosition(kind: EngineKind) async throws {
        let bytes = pattern(100)
        let path = dir.make("f", bytes)
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let a = Recorder()
        let b = Recorder()
        channel.read(offset: 50, length: 10, queue: a.queue, handler: a.handler)
        channel.read(offset: 0, length: 10, queue: b.queue, handler: b.handler)
        _ = await a.wait()
        _ = await b.wait()
        // B8: offsets ignored; bytes 0–9 then 10–19; the position is 20 afterwards.
        #expect(a.bytes == Array(bytes[0..<10]))
        #expect(b.bytes == Array(bytes[10..<20]))
        #expect(lseek(fd.rawValue, 0, SEEK_CUR) == 20)
        channel.close()
    }

    @Test(arguments: EngineKind.allCases)
    func negativeOffsetsAndLengthsAreEINVAL(kind: EngineKind) async throws {
        let path = dir.make("f", pattern(10))
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let channel = IOChannel(
            type: .random,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let read = Recorder()
        channel.read(offset: -1, length: 5, queue: read.queue, handler: read.handler)
        let readCalls = await read.wait()
        #expect(readCalls == [Call(done: true, count: nil, error: .invalidArgument)])
        let negative = Recorder()
        channel.read(offset: 0, length: -5, queue: negative.queue, handler: negative.handler)
        let negativeCalls = await negative.wait()
        #expect(negativeCalls == [Call(done: true, count: nil, error: .invalidArgument)])
        let write = Recorder()
        channel.write(offset: -10, data: DispatchDataBuffer([1, 2]), queue: write.queue, handler: write.handler)
        let writeCalls = await write.wait()
        #expect(writeCalls == [Call(done: true, count: 2, error: .invalidArgument)])
        channel.close()
    }

    // MARK: Writes (B19, B26)

    @Test(arguments: EngineKind.allCases)
    func writeProgressFollowsTheLowWaterMark(kind: EngineKind) async throws {
        defer { dir.cleanup() }
        let path = dir.file("out")
        let fd = FileDescriptor(rawValue: open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644))
        defer { try? fd.close() }
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        channel.setLimit(highWater: 4096)
        // Data in three regions, to go out as an iovec.
        let bytes = pattern(10_000)
        let data =
            DispatchDataBuffer(bytes[0..<3000]) + DispatchDataBuffer(bytes[3000..<7000])
            + DispatchDataBuffer(bytes[7000...])
        let recorder = Recorder()
        channel.write(offset: 0, data: data, queue: recorder.queue, handler: recorder.handler)
        // B19: 10 000 bytes with high=4096 → 5904 remaining, then 1808, then (true, nil, nil).
        #expect(
            await recorder.wait() == [
                Call(done: false, count: 5904, error: nil), Call(done: false, count: 1808, error: nil),
                Call(done: true, count: nil, error: nil),
            ]
        )
        let readBack = Recorder()
        lseek(fd.rawValue, 0, SEEK_SET)
        channel.read(offset: 0, length: .max, queue: readBack.queue, handler: readBack.handler)
        _ = await readBack.wait()
        expectSameBytes(readBack.bytes, bytes)
        channel.close()
    }

    /// A write lets go of its bytes before its final call (B19), so that a handler that reads the next
    /// piece does not find them still held: dcat, whose write handlers start the next reads, held 8 pooled
    /// megabytes on io_uring and 12 on the POSIX engine where its windows account for 6. The final call is
    /// held back until the caller has let go of its own reference; by then every region must be gone.
    @Test(arguments: EngineKind.allCases)
    func aWriteLetsGoOfItsBytesBeforeItsFinalCall(kind: EngineKind) async throws {
        defer { dir.cleanup() }
        let fd = FileDescriptor(rawValue: open(dir.file("out"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644))
        defer { try? fd.close() }
        let devNull = FileDescriptor(rawValue: open("/dev/null", O_WRONLY | O_CLOEXEC))
        defer { try? devNull.close() }
        for (type, output) in [(IOChannel.StreamType.random, fd), (.stream, devNull)] {
            let channel = IOChannel(
                type: type,
                fileDescriptor: output,
                queue: WorkQueue(label: "c"),
                engine: Engines.get(kind)
            ) { _ in }
            channel.setLimit(lowWater: .max)
            let released = Locked(0)
            let queue = WorkQueue(label: "final call")
            queue.suspend()
            let recorder = Recorder(queue: queue)
            let regions = 3
            let seenAtFinalCall = Locked(-1)
            func watchedRegions() -> DispatchDataBuffer {
                var data = DispatchDataBuffer()
                for _ in 0..<regions {
                    let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
                    memory.initializeMemory(as: UInt8.self, repeating: 7)
                    data.append(
                        DispatchDataBuffer(
                            bytesNoCopy: UnsafeRawBufferPointer(memory),
                            deallocator: .custom(nil) { [address = UInt(bitPattern: memory.baseAddress)] in
                                UnsafeMutableRawPointer(bitPattern: address)?.deallocate()
                                released.withLock { $0 += 1 }
                            }
                        )
                    )
                }
                return data
            }
            channel.write(offset: 0, data: watchedRegions(), queue: queue) { done, data, error in
                if done { seenAtFinalCall.withLock { $0 = released.withLock { $0 } } }
                recorder.record(done, data, error)
            }
            queue.resume()
            #expect(await recorder.wait() == [Call(done: true, count: nil, error: nil)])
            #expect(seenAtFinalCall.withLock { $0 } == regions, "\(type)")
            channel.close()
        }
    }

    /// B26: a pipe write reports progress per system call, as the pipe drains: libdispatch's 200,000-byte
    /// write with low water 1 reported 134,464, 68,928 and 3,392 bytes left, then `(true, nil, nil)`. Each
    /// piece was written whole before any report (helper-39: only the final call came). Here the reader
    /// takes a pipe's worth only after each report, so the reports come a pipe's worth apart (the 64 KiB
    /// of a default pipe gives libdispatch's). Only where a pipe takes a write that may come back short
    /// (`RWF_NOWAIT`, Linux 6.4): before, both engines' writes to a pipe wait until all of it is written.
    @Test(.enabled(if: pipesTakeShortWrites()), arguments: EngineKind.allCases)
    func pipeWriteProgressComesAsThePipeDrains(kind: EngineKind) async throws {
        let (readEnd, writeEnd) = makePipe()
        defer { try? readEnd.close() }
        let getPipeSize: CInt = 1032  // F_GETPIPE_SZ
        let pipeSize = Int(fcntl(writeEnd.rawValue, getPipeSize))
        try #require(pipeSize > 0)
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: writeEnd,
            queue: WorkQueue(label: "w"),
            engine: Engines.get(kind)
        ) {
            _ in try? writeEnd.close()
        }
        channel.setLimit(lowWater: 1)
        let reported = WorkSemaphore(value: 0)
        let recorder = Recorder()
        channel.write(offset: 0, data: DispatchDataBuffer(pattern(200_000)), queue: recorder.queue) {
            done,
            data,
            error in
            recorder.record(done, data, error)
            _ = reported.signal()
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: pipeSize)
        while received.count < 200_000 {
            guard reported.wait(timeout: .seconds(10)) == .success else { break }
            var got = 0
            while got < min(pipeSize, 200_000 - received.count) {
                let count = read(readEnd.rawValue, &buffer[got], pipeSize - got)
                guard count > 0 else { break }
                got += count
            }
            received += buffer[0..<got]
        }
        let left = stride(from: 200_000 - pipeSize, to: 0, by: -pipeSize).map {
            Call(done: false, count: $0, error: nil)
        }
        #expect(await recorder.wait() == left + [Call(done: true, count: nil, error: nil)])
        expectSameBytes(received, pattern(200_000))
        channel.close()
    }

    /// B26: data of more regions than one `writev` takes (1,024) goes out in pieces cut at region counts
    /// and at the high water mark, every byte once and in order, the remainder reported after each piece.
    @Test(arguments: EngineKind.allCases)
    func writesOfManySmallRegions(kind: EngineKind) async throws {
        let bytes = pattern(27_000)
        var data = DispatchDataBuffer()
        var start = 0
        while start < bytes.count {
            let end = min(bytes.count, start + 1 + start % 17)
            data.append(DispatchDataBuffer(bytes[start..<end]))
            start = end
        }
        #expect(data.regions.count > 2 * 1024)
        for highWater in [Int.max, 1000] {
            let path = dir.file("regions")
            let fd = FileDescriptor(rawValue: open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644))
            defer { try? fd.close() }
            let channel = IOChannel(
                type: .random,
                fileDescriptor: fd,
                queue: WorkQueue(label: "c"),
                engine: Engines.get(kind)
            ) { _ in }
            channel.setLimit(highWater: highWater)
            channel.setLimit(lowWater: 1)
            let recorder = Recorder()
            channel.write(offset: 0, data: data, queue: recorder.queue, handler: recorder.handler)
            let calls = await recorder.wait()
            #expect(calls.last == Call(done: true, count: nil, error: nil))
            let left = calls.dropLast().compactMap(\.count)
            #expect(left.count >= (highWater == 1000 ? 26 : 2))
            #expect(left == left.sorted(by: >) && left.allSatisfy { $0 > 0 && $0 < bytes.count })
            channel.close()
            var back = [UInt8](repeating: 0, count: bytes.count + 1)
            let got = back.withUnsafeMutableBytes { pread(fd.rawValue, $0.baseAddress, $0.count, 0) }
            #expect(got == bytes.count)
            expectSameBytes(Array(back[0..<max(got, 0)]), bytes)
        }
        dir.cleanup()
    }

    @Test(arguments: EngineKind.allCases)
    func writeErrorsReportTheUnwrittenData(kind: EngineKind) async throws {
        // ENOSPC from /dev/full: nothing written, all of it reported back (B19).
        let full = FileDescriptor(rawValue: open("/dev/full", O_WRONLY | O_CLOEXEC))
        defer { try? full.close() }
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: full,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let recorder = Recorder()
        channel.write(
            offset: 0,
            data: DispatchDataBuffer(pattern(5000)),
            queue: recorder.queue,
            handler: recorder.handler
        )
        let recorderCalls = await recorder.wait()
        #expect(recorderCalls == [Call(done: true, count: 5000, error: .noSpace)])
        channel.close()
        // EPIPE, with SIGPIPE at its default action: the process survives (B38).
        signal(SIGPIPE, SIG_DFL)
        let pipe = makePipe()
        try pipe.read.close()
        defer { try? pipe.write.close() }
        let piped = IOChannel(
            type: .stream,
            fileDescriptor: pipe.write,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let broken = Recorder()
        piped.write(offset: 0, data: DispatchDataBuffer(pattern(6)), queue: broken.queue, handler: broken.handler)
        let brokenCalls = await broken.wait()
        #expect(brokenCalls == [Call(done: true, count: 6, error: .brokenPipe)])
        piped.close()
    }

    // MARK: Validation (B2, B39–B42)

    @Test(arguments: EngineKind.allCases)
    func badDescriptorsFailThroughCleanupAndOperations(kind: EngineKind) async throws {
        let engine = Engines.get(kind)
        let pipe = makePipe()
        try pipe.read.close()
        try pipe.write.close()
        let badCleanup = Promise<Errno?>()
        let bad = IOChannel(
            type: .stream,
            fileDescriptor: pipe.read,
            queue: WorkQueue(label: "c"),
            engine: engine,
            cleanupHandler: cleanup(badCleanup)
        )
        let read = Recorder()
        bad.read(offset: 0, length: 10, queue: read.queue, handler: read.handler)
        let readCalls = await read.wait()
        #expect(readCalls == [Call(done: true, count: nil, error: .badFileDescriptor)])
        let badCleanupValue = await badCleanup.get()
        #expect(badCleanupValue == .badFileDescriptor)  // B2: promptly, without close
        #expect(bad.fileDescriptor == nil)  // B50 → ours: nil, not the bad number

        let directory = FileDescriptor(rawValue: open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC))
        defer { try? directory.close() }
        let dirCleanup = Promise<Errno?>()
        let dirChannel = IOChannel(
            type: .random,
            fileDescriptor: directory,
            queue: WorkQueue(label: "c"),
            engine: engine,
            cleanupHandler: cleanup(dirCleanup)
        )
        let dirCleanupValue = await dirCleanup.get()
        #expect(dirCleanupValue == .isDirectory)
        dirChannel.close()

        let live = makePipe()
        defer {
            try? live.read.close()
            try? live.write.close()
        }
        let seekCleanup = Promise<Errno?>()
        let randomPipe = IOChannel(
            type: .random,
            fileDescriptor: live.read,
            queue: WorkQueue(label: "c"),
            engine: engine,
            cleanupHandler: cleanup(seekCleanup)
        )
        let seekRead = Recorder()
        randomPipe.read(offset: 0, length: 1, queue: seekRead.queue, handler: seekRead.handler)
        let seekReadCalls = await seekRead.wait()
        #expect(seekReadCalls == [Call(done: true, count: nil, error: .illegalSeek)])
        let seekCleanupValue = await seekCleanup.get()
        #expect(seekCleanupValue == .illegalSeek)
        randomPipe.close()
    }

    @Test(arguments: EngineKind.allCases)
    func pathChannels(kind: EngineKind) async throws {
        let engine = Engines.get(kind)
        let bytes = pattern(3000)
        let path = dir.make("f", bytes)
        defer { dir.cleanup() }
        // B39: relative paths are refused.
        #expect(
            IOChannel(
                type: .stream,
                path: "relative/file",
                mode: .readOnly,
                queue: WorkQueue(label: "c"),
                engine: engine
            ) { _ in } == nil
        )
        // A readable file, opened lazily (B41), closed before cleanup (B43).
        let cleaned = Promise<Errno?>()
        let channel = try #require(
            IOChannel(
                type: .random,
                path: FilePath(path),
                mode: .readOnly,
                queue: WorkQueue(label: "c"),
                engine: engine,
                cleanupHandler: cleanup(cleaned)
            )
        )
        #expect(channel.fileDescriptor == nil)
        let read = Recorder()
        channel.read(offset: 1000, length: .max, queue: read.queue, handler: read.handler)
        _ = await read.wait()
        expectSameBytes(read.bytes, Array(bytes[1000...]))
        let fd = try #require(channel.fileDescriptor)
        channel.close()
        let cleanedValue = await cleaned.get()
        #expect(cleanedValue == nil)
        #expect(fcntl(fd.rawValue, F_GETFD) == -1)  // B43: closed before the cleanup handler ran

        // B40: a missing file: cleanup(ENOENT) promptly and every operation fails with it.
        let missingCleanup = Promise<Errno?>()
        let missing = try #require(
            IOChannel(
                type: .stream,
                path: FilePath(dir.file("nope")),
                mode: .readOnly,
                queue: WorkQueue(label: "c"),
                engine: engine,
                cleanupHandler: cleanup(missingCleanup)
            )
        )
        let missingCleanupValue = await missingCleanup.get()
        #expect(missingCleanupValue == .noSuchFileOrDirectory)
        let missingRead = Recorder()
        missing.read(offset: 0, length: 10, queue: missingRead.queue, handler: missingRead.handler)
        let missingReadCalls = await missingRead.wait()
        #expect(missingReadCalls == [Call(done: true, count: nil, error: .noSuchFileOrDirectory)])
        missing.close()

        // B40: O_CREAT with an existing parent is fine; the file appears at the first operation.
        let created = try #require(
            IOChannel(
                type: .stream,
                path: FilePath(dir.file("new")),
                mode: .writeOnly,
                options: [.create, .truncate],
                queue: WorkQueue(label: "c"),
                engine: engine
            ) { _ in }
        )
        #expect(access(dir.file("new"), F_OK) != 0)
        let write = Recorder()
        created.write(
            offset: 0,
            data: DispatchDataBuffer(Array("made".utf8)),
            queue: write.queue,
            handler: write.handler
        )
        let writeCalls = await write.wait()
        #expect(writeCalls == [Call(done: true, count: nil, error: nil)])
        created.close()

        // B40: O_CREAT under a directory that is not there: cleanup(ENOENT) promptly, without closing, and
        // every operation fails with it.
        let orphanCleanup = Promise<Errno?>()
        let orphan = try #require(
            IOChannel(
                type: .stream,
                path: FilePath(dir.file("no-such-directory/new")),
                mode: .writeOnly,
                options: [.create],
                queue: WorkQueue(label: "c"),
                engine: engine,
                cleanupHandler: cleanup(orphanCleanup)
            )
        )
        #expect(await orphanCleanup.get() == .noSuchFileOrDirectory)
        let orphanWrite = Recorder()
        orphan.write(offset: 0, data: DispatchDataBuffer([1]), queue: orphanWrite.queue, handler: orphanWrite.handler)
        #expect(await orphanWrite.wait() == [Call(done: true, count: 1, error: .noSuchFileOrDirectory)])
        orphan.close()

        // B42: an open that fails is sticky, and cleanup still gets nil. EACCES needs a user that
        // permissions stop; root is not stopped, so it gets EEXIST from an exclusive create instead.
        let isRoot = getuid() == 0
        let lockedPath = dir.make("locked", [1])
        chmod(lockedPath, 0)
        let expected: Errno = isRoot ? .fileExists : .permissionDenied
        let deniedCleanup = Promise<Errno?>()
        let denied = try #require(
            IOChannel(
                type: .stream,
                path: FilePath(lockedPath),
                mode: .writeOnly,
                options: isRoot ? [.create, .exclusiveCreate] : [],
                queue: WorkQueue(label: "c"),
                engine: engine,
                cleanupHandler: cleanup(deniedCleanup)
            )
        )
        let deniedWrite = Recorder()
        denied.write(
            offset: 0,
            data: DispatchDataBuffer([1, 2, 3, 4, 5]),
            queue: deniedWrite.queue,
            handler: deniedWrite.handler
        )
        let deniedWriteCalls = await deniedWrite.wait()
        #expect(deniedWriteCalls == [Call(done: true, count: 5, error: expected)])
        let deniedRead = Recorder()
        denied.read(offset: 0, length: 1, queue: deniedRead.queue, handler: deniedRead.handler)
        let deniedReadCalls = await deniedRead.wait()
        #expect(deniedReadCalls == [Call(done: true, count: nil, error: expected)])
        #expect(denied.fileDescriptor == nil)
        denied.close()
        let deniedCleanupValue = await deniedCleanup.get()
        #expect(deniedCleanupValue == nil)

        // A directory path: EISDIR.
        let dirCleanup = Promise<Errno?>()
        let directory = try #require(
            IOChannel(
                type: .stream,
                path: FilePath(dir.path),
                mode: .readOnly,
                queue: WorkQueue(label: "c"),
                engine: engine,
                cleanupHandler: cleanup(dirCleanup)
            )
        )
        let dirCleanupValue = await dirCleanup.get()
        #expect(dirCleanupValue == .isDirectory)
        directory.close()
    }

    // MARK: Pipes (B25, B27, B51)

    @Test(arguments: EngineKind.allCases)
    func pipeReadsDeliverPartialDataWithALowWaterMark(kind: EngineKind) async throws {
        let pipe = makePipe()
        defer { try? pipe.read.close() }
        let cleaned = Promise<Errno?>()
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: pipe.read,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind),
            cleanupHandler: cleanup(cleaned)
        )
        channel.setLimit(lowWater: 1)
        let recorder = Recorder()
        channel.read(offset: 0, length: .max, queue: recorder.queue, handler: recorder.handler)
        _ = try pipe.write.writeAll(Array("hello".utf8))
        // The first five bytes arrive on their own, before any more are written (B25 with low = 1).
        while recorder.soFar.isEmpty { await settle(Engines.get(kind)) }
        #expect(recorder.soFar == [Call(done: false, count: 5, error: nil)])
        _ = try pipe.write.writeAll(Array("world".utf8))
        try pipe.write.close()
        let calls = await recorder.wait()
        #expect(
            calls == [
                Call(done: false, count: 5, error: nil), Call(done: false, count: 5, error: nil),
                Call(done: true, count: 0, error: nil),
            ]
        )
        #expect(recorder.bytes == Array("helloworld".utf8))
        channel.close()
        let cleanedValue = await cleaned.get()
        #expect(cleanedValue == nil)
    }

    /// A stream channel on the read end of a new pipe, whose two ends the caller closes.
    private func streamChannelOnAPipe(
        _ kind: EngineKind
    ) -> (channel: IOChannel, pipe: (read: FileDescriptor, write: FileDescriptor)) {
        let pipe = makePipe()
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: pipe.read,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        return (channel, pipe)
    }

    /// B51: on a pipe a short read is not the end; a read of a finite length goes on until it has all.
    @Test(arguments: EngineKind.allCases)
    func finitePipeReadCollectsShortReads(kind: EngineKind) async throws {
        let (channel, pipe) = streamChannelOnAPipe(kind)
        defer {
            try? pipe.read.close()
            try? pipe.write.close()
        }
        let recorder = Recorder()
        channel.read(offset: 0, length: 6, queue: recorder.queue, handler: recorder.handler)
        _ = try pipe.write.writeAll(Array("abc".utf8))
        await settle(Engines.get(kind))
        await settle(Engines.get(kind))
        _ = try pipe.write.writeAll(Array("def".utf8))
        let calls = await recorder.wait()
        #expect(calls == [Call(done: true, count: 6, error: nil)])  // B16
        #expect(recorder.bytes == Array("abcdef".utf8))
        channel.close()
    }

    @Test(arguments: EngineKind.allCases)
    func strictIntervalDeliversEvenNothing(kind: EngineKind) async throws {
        let (channel, pipe) = streamChannelOnAPipe(kind)
        defer {
            try? pipe.read.close()
            try? pipe.write.close()
        }
        channel.setInterval(interval: .milliseconds(20), flags: .strictInterval)
        let recorder = Recorder()
        channel.read(offset: 0, length: .max, queue: recorder.queue, handler: recorder.handler)
        // B27: ticks on an idle pipe deliver (false, empty, nil).
        while recorder.soFar.count < 3 { await settle(Engines.get(kind)) }
        #expect(recorder.soFar.prefix(3).allSatisfy { $0 == Call(done: false, count: 0, error: nil) })
        channel.close(flags: .stop)
        let calls = await recorder.wait()
        #expect(calls.last == Call(done: true, count: nil, error: .canceled))
    }

    /// B27: the interval runs from when the operation is queued, not when it starts: a read waiting behind
    /// a stalled one on the same stream still ticks, which is how a caller sees that nothing moves.
    @Test(arguments: EngineKind.allCases)
    func strictIntervalTicksWhileQueued(kind: EngineKind) async throws {
        let (channel, pipe) = streamChannelOnAPipe(kind)
        defer {
            try? pipe.read.close()
            try? pipe.write.close()
        }
        let first = Recorder()
        channel.read(offset: 0, length: 10, queue: first.queue, handler: first.handler)
        channel.setInterval(interval: .milliseconds(20), flags: .strictInterval)
        let queued = Recorder()
        channel.read(offset: 0, length: 10, queue: queued.queue, handler: queued.handler)
        while queued.soFar.count < 2 { await settle(Engines.get(kind)) }
        #expect(queued.soFar.prefix(2).allSatisfy { $0 == Call(done: false, count: 0, error: nil) })
        #expect(first.soFar.isEmpty)
        channel.close(flags: .stop)
        #expect(await first.wait() == [Call(done: true, count: nil, error: .canceled)])
        #expect(await queued.wait().last == Call(done: true, count: nil, error: .canceled))
    }

    /// B27 for a write: each strict tick reports what is still to be written, the same bytes again when
    /// nothing moved (a pipe nobody reads), and the final call after a stop hands back exactly those bytes.
    @Test(arguments: EngineKind.allCases)
    func strictIntervalTicksReportAStalledWrite(kind: EngineKind) async throws {
        let pipe = makePipe()
        defer {
            try? pipe.read.close()
            try? pipe.write.close()
        }
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: pipe.write,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        // Writes of one page (B26) fill the pipe, whatever its size, and complete; the one after them waits
        // in the kernel. (The low water mark follows the high one down (B22), so each write reports too.)
        channel.setLimit(highWater: 4096)
        channel.setInterval(interval: .milliseconds(20), flags: .strictInterval)
        let bytes = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let recorder = Recorder()
        channel.write(offset: 0, data: DispatchDataBuffer(bytes), queue: recorder.queue, handler: recorder.handler)
        // Once the pipe is full nothing moves: the calls from then on are ticks, each with what the pipe did
        // not take. (A tick may still come before the last write's completion has been counted.)
        let capacity = Int(fcntl(pipe.read.rawValue, 1032))  // F_GETPIPE_SZ, which Glibc does not export
        let unwritten = bytes.count - capacity
        let tick = Call(done: false, count: unwritten, error: nil)
        // A write's own reports shrink each time: three equal calls in a row are ticks.
        func ticking() -> Bool {
            let last = recorder.soFar.suffix(3)
            return last.count == 3 && last.allSatisfy { $0 == tick }
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while !ticking() && ContinuousClock.now < deadline { await settle(Engines.get(kind)) }
        #expect(ticking())
        channel.close(flags: .stop)
        #expect(await recorder.wait().last == Call(done: true, count: unwritten, error: .canceled))
        // What the ticks called unwritten is exactly what the pipe did not take.
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        // Non-blocking, so that a pipe holding less than expected ends the loop instead of hanging it.
        _ = fcntl(pipe.read.rawValue, F_SETFL, O_NONBLOCK)
        while let n = try? chunk.withUnsafeMutableBytes({ try pipe.read.read(into: $0) }), n > 0 {
            received += chunk[..<n]
        }
        expectSameBytes(received, Array(bytes[..<(bytes.count - unwritten)]))
    }

    @Test(arguments: EngineKind.allCases)
    func pingPongOverPipes(kind: EngineKind) async throws {
        let engine = Engines.get(kind)
        let ab = makePipe()
        let ba = makePipe()
        defer {
            for fd in [ab.read, ab.write, ba.read, ba.write] { try? fd.close() }
        }
        let aOut = IOChannel(type: .stream, fileDescriptor: ab.write, queue: WorkQueue(label: "c"), engine: engine) {
            _ in
        }
        let bIn = IOChannel(type: .stream, fileDescriptor: ab.read, queue: WorkQueue(label: "c"), engine: engine) { _ in
        }
        let bOut = IOChannel(type: .stream, fileDescriptor: ba.write, queue: WorkQueue(label: "c"), engine: engine) {
            _ in
        }
        let aIn = IOChannel(type: .stream, fileDescriptor: ba.read, queue: WorkQueue(label: "c"), engine: engine) { _ in
        }
        for channel in [bIn, aIn] { channel.setLimit(lowWater: 1) }
        for round in 0..<50 {
            let ping = DispatchDataBuffer([UInt8(round), 0xA])
            let sent = Recorder()
            aOut.write(offset: 0, data: ping, queue: sent.queue, handler: sent.handler)
            let got = Recorder()
            bIn.read(offset: 0, length: 2, queue: got.queue, handler: got.handler)
            _ = await got.wait()
            #expect(got.bytes == [UInt8(round), 0xA])
            let back = Recorder()
            bOut.write(
                offset: 0,
                data: DispatchDataBuffer([UInt8(round), 0xB]),
                queue: back.queue,
                handler: back.handler
            )
            let pong = Recorder()
            aIn.read(offset: 0, length: 2, queue: pong.queue, handler: pong.handler)
            _ = await pong.wait()
            #expect(pong.bytes == [UInt8(round), 0xB])
            _ = await sent.wait()
            _ = await back.wait()
        }
        for channel in [aOut, bIn, bOut, aIn] { channel.close() }
    }

    // MARK: Close and stop (B28–B32)

    @Test(arguments: EngineKind.allCases)
    func closeLetsPendingWorkFinishAndRefusesNewWork(kind: EngineKind) async throws {
        let pipe = makePipe()
        defer { try? pipe.read.close() }
        let cleaned = Promise<Errno?>()
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: pipe.read,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind),
            cleanupHandler: cleanup(cleaned)
        )
        let pending = Recorder()
        channel.read(offset: 0, length: 6, queue: pending.queue, handler: pending.handler)
        channel.close()
        let after = Recorder()
        channel.read(offset: 0, length: 6, queue: after.queue, handler: after.handler)
        // B28: later operations fail at once, without waiting for the pending one.
        let afterCalls = await after.wait()
        #expect(afterCalls == [Call(done: true, count: nil, error: .canceled)])
        #expect(!cleaned.isFulfilled)
        _ = try pipe.write.writeAll(Array("abcdef".utf8))
        try pipe.write.close()
        let pendingCalls = await pending.wait()
        #expect(pendingCalls == [Call(done: true, count: 6, error: nil)])
        let cleanedValue = await cleaned.get()
        #expect(cleanedValue == nil)
        channel.close()  // B32: ignored
    }

    @Test(arguments: EngineKind.allCases)
    func stopCancelsUnfinishedOperations(kind: EngineKind) async throws {
        let pipe = makePipe()
        defer {
            try? pipe.read.close()
            try? pipe.write.close()
        }
        let cleaned = Promise<Errno?>()
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: pipe.read,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind),
            cleanupHandler: cleanup(cleaned)
        )
        let running = Recorder()
        let queued = Recorder()
        channel.read(offset: 0, length: 100, queue: running.queue, handler: running.handler)
        channel.read(offset: 0, length: 100, queue: queued.queue, handler: queued.handler)
        _ = try pipe.write.writeAll(Array("abc".utf8))
        await settle(Engines.get(kind))
        channel.close(flags: .stop)
        #expect(channel.fileDescriptor == nil)  // B30: at once
        // B30/B18: what was buffered, then (true, nil, ECANCELED).
        let calls = await running.wait()
        #expect(calls.last == Call(done: true, count: nil, error: .canceled))
        #expect(running.bytes.count <= 3)
        let queuedCalls = await queued.wait()
        #expect(queuedCalls == [Call(done: true, count: nil, error: .canceled)])
        let cleanedValue = await cleaned.get()
        #expect(cleanedValue == nil)
        let after = Recorder()
        channel.write(offset: 0, data: DispatchDataBuffer([1, 2, 3]), queue: after.queue, handler: after.handler)
        let afterCalls = await after.wait()
        #expect(afterCalls == [Call(done: true, count: 3, error: .canceled)])  // B31
    }

    // MARK: Sharing, cleanup, barriers (B4, B6, B45–B48)

    @Test(arguments: EngineKind.allCases)
    func cleanupWaitsForEveryChannelOnTheDescriptor(kind: EngineKind) async throws {
        let path = dir.make("f", pattern(100))
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let aCleaned = Promise<Errno?>()
        let cCleaned = Promise<Errno?>()
        let a = IOChannel(
            type: .stream,
            fileDescriptor: fd,
            queue: WorkQueue(label: "a"),
            engine: Engines.get(kind),
            cleanupHandler: cleanup(aCleaned)
        )
        let c = IOChannel(type: .random, io: a, queue: WorkQueue(label: "c"), cleanupHandler: cleanup(cCleaned))
        a.close()
        let read = Recorder()
        c.read(offset: 10, length: 5, queue: read.queue, handler: read.handler)
        _ = await read.wait()
        #expect(read.bytes == Array(pattern(100)[10..<15]))
        #expect(!aCleaned.isFulfilled)  // B4: C still uses the descriptor
        c.close()
        let aCleanedValue = await aCleaned.get()
        #expect(aCleanedValue == nil)
        let cCleanedValue = await cCleaned.get()
        #expect(cCleanedValue == nil)
    }

    @Test(arguments: EngineKind.allCases)
    func releasingAChannelClosesIt(kind: EngineKind) async throws {
        let path = dir.make("f", pattern(100))
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let cleaned = Promise<Errno?>()
        let read = Recorder()
        do {
            let channel = IOChannel(
                type: .stream,
                fileDescriptor: fd,
                queue: WorkQueue(label: "c"),
                engine: Engines.get(kind),
                cleanupHandler: cleanup(cleaned)
            )
            channel.read(offset: 0, length: 100, queue: read.queue, handler: read.handler)
        }
        // B6: the pending read completes normally, then cleanup runs.
        let readCalls = await read.wait()
        #expect(readCalls == [Call(done: true, count: 100, error: nil)])
        let cleanedValue = await cleaned.get()
        #expect(cleanedValue == nil)
    }

    @Test(arguments: EngineKind.allCases)
    func barrierWaitsForEarlierOperationsAndHoldsLaterOnes(kind: EngineKind) async throws {
        let pipe = makePipe()
        defer { try? pipe.read.close() }
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: pipe.read,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let first = Recorder()
        channel.read(offset: 0, length: 3, queue: first.queue, handler: first.handler)
        let barrierRan = Promise<Bool>()
        let log = Locked<[String]>([])
        channel.barrier {
            log.withLock { $0.append("barrier: first done=\(first.soFar.last?.done ?? false)") }
            barrierRan.fulfil(true)
        }
        let second = Recorder()
        channel.read(offset: 0, length: 3, queue: second.queue, handler: second.handler)
        await settle(Engines.get(kind))
        #expect(!barrierRan.isFulfilled)  // B48: waits for the pending read
        _ = try pipe.write.writeAll(Array("abcdef".utf8))
        try pipe.write.close()
        _ = await barrierRan.get()
        _ = await first.wait()
        _ = await second.wait()
        #expect(first.bytes == Array("abc".utf8))
        #expect(second.bytes == Array("def".utf8))
        channel.close()
    }

    /// B49, B59: barriers run on the channel's target queue; B41/B44: on a path channel the file is open
    /// inside the barrier.
    @Test(arguments: EngineKind.allCases)
    func barriersRunOnTheTargetQueueWithTheFileOpen(kind: EngineKind) async throws {
        let path = dir.make("f", pattern(10))
        defer { dir.cleanup() }
        let channel = try #require(
            IOChannel(
                type: .random,
                path: FilePath(path),
                mode: .readOnly,
                queue: WorkQueue(label: "c"),
                engine: Engines.get(kind)
            ) { _ in }
        )
        let target = WorkQueue(label: "barrier-target")
        let key = WorkQueue.SpecificKey<String>()
        target.setSpecific(key: key, value: "target")
        channel.setTarget(queue: target)
        let seen = Promise<(String?, Bool)>()
        channel.barrier {
            seen.fulfil((WorkQueue.getSpecific(key: key), channel.fileDescriptor != nil))
        }
        let (label, open) = await seen.get()
        #expect(label == "target")
        #expect(open)
        channel.close()
    }

    @Test(arguments: EngineKind.allCases)
    func handlerCallsOfOneOperationNeverOverlap(kind: EngineKind) async throws {
        let bytes = pattern(600_000)
        let path = dir.make("f", bytes)
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let channel = IOChannel(
            type: .random,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        channel.setLimit(highWater: 10_000)
        let concurrent = WorkQueue(label: "concurrent", attributes: .concurrent)
        let recorder = Recorder(queue: concurrent)
        let active = Locked(0)
        let maxActive = Locked(0)
        channel.read(offset: 0, length: .max, queue: concurrent) { done, data, error in
            let now = active.withLock { value -> Int in
                value += 1
                return value
            }
            maxActive.withLock { $0 = max($0, now) }
            recorder.record(done, data, error)
            active.withLock { $0 -= 1 }
        }
        _ = await recorder.wait()
        #expect(maxActive.withLock { $0 } == 1)  // B13
        expectSameBytes(recorder.bytes, bytes)
        channel.close()
    }

    /// B10: offsets near the largest file position neither overflow nor crash. A read from there finds
    /// nothing, as at end of file; an offset that with the channel's starting position cannot be a file
    /// position at all, or a write that would end past it, fails with EINVAL like a negative one.
    @Test(arguments: EngineKind.allCases)
    func offsetsAtTheLargestFilePosition(kind: EngineKind) async throws {
        let path = dir.make("f", pattern(100))
        defer { dir.cleanup() }
        let fd = FileDescriptor(rawValue: open(path, O_RDWR | O_CLOEXEC))
        defer { try? fd.close() }
        let fromStart = IOChannel(
            type: .random,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let past = Recorder()
        fromStart.read(offset: .max, length: .max, queue: past.queue, handler: past.handler)
        #expect(await past.wait() == [Call(done: true, count: 0, error: nil)])
        let nearEnd = Recorder()
        fromStart.read(offset: .max - 10, length: .max, queue: nearEnd.queue, handler: nearEnd.handler)
        #expect(await nearEnd.wait() == [Call(done: true, count: 0, error: nil)])
        let tooFar = Recorder()
        fromStart.write(offset: .max, data: DispatchDataBuffer([1]), queue: tooFar.queue, handler: tooFar.handler)
        #expect(await tooFar.wait() == [Call(done: true, count: 1, error: .invalidArgument)])
        fromStart.close()

        lseek(fd.rawValue, 5, SEEK_SET)
        let fromFive = IOChannel(
            type: .random,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let overflowing = Recorder()
        fromFive.read(offset: .max - 2, length: 1, queue: overflowing.queue, handler: overflowing.handler)
        #expect(await overflowing.wait() == [Call(done: true, count: nil, error: .invalidArgument)])
        fromFive.close()
    }

    /// Reads of regular files wait while more than 16 MiB of writes to regular files are pending (the
    /// process-wide write backlog). A write that has finished gives its bytes back at once, whatever its
    /// handler queue is doing: held on a suspended one, they kept an unrelated read from ever starting.
    @Test(arguments: EngineKind.allCases)
    func aFinishedWriteDoesNotHoldBackReadsWhileItsHandlerWaits(kind: EngineKind) async throws {
        let engine = Engines.get(kind)
        let input = dir.make("in", pattern(100_000))
        defer { dir.cleanup() }
        let out = FileDescriptor(rawValue: open(dir.file("out"), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644))
        defer { try? out.close() }
        let writer = IOChannel(type: .random, fileDescriptor: out, queue: WorkQueue(label: "c"), engine: engine) { _ in
        }
        let held = WorkQueue(label: "held")
        held.suspend()
        let written = Promise<Errno?>()
        writer.write(offset: 0, data: DispatchDataBuffer(pattern(20 << 20)), queue: held) { done, _, error in
            if done { written.fulfil(error) }
        }
        let fd = openRead(input)
        defer { try? fd.close() }
        let reader = IOChannel(type: .random, fileDescriptor: fd, queue: WorkQueue(label: "c"), engine: engine) { _ in }
        let recorder = Recorder()
        reader.read(offset: 0, length: 100_000, queue: recorder.queue, handler: recorder.handler)
        #expect(await recorder.wait() == [Call(done: true, count: 100_000, error: nil)])
        held.resume()
        #expect(await written.get() == nil)
        writer.close()
        reader.close()
    }

    /// B4: a channel made on a descriptor while the last channel there is being given up (its read's final
    /// call returning on another thread) still gets its cleanup call. It used to find the old entry, join
    /// it after the teardown, and never hear from it again.
    @Test(arguments: EngineKind.allCases)
    func aChannelMadeDuringATeardownStillCleansUp(kind: EngineKind) async throws {
        let path = dir.make("f", pattern(10))
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let engine = Engines.get(kind)
        for _ in 0..<2000 {
            let first = IOChannel(type: .random, fileDescriptor: fd, queue: .global(), engine: engine) { _ in }
            first.read(offset: 0, length: 10, queue: .global()) { _, _, _ in }
            first.close()
            let cleaned = Promise<Errno?>()
            let second = IOChannel(
                type: .random,
                fileDescriptor: fd,
                queue: .global(),
                engine: engine,
                cleanupHandler: cleanup(cleaned)
            )
            second.close()
            #expect(await cleaned.get(limit: .seconds(5)) == nil)
        }
    }

    /// B4: the cleanup handler runs only after every final handler has run. Here the read's handler queue
    /// is held suspended after the channel is closed: the read is over, but its final call has not run.
    @Test(arguments: EngineKind.allCases)
    func cleanupWaitsForTheFinalHandlerToRun(kind: EngineKind) async throws {
        let path = dir.make("f", pattern(1000))
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let order = Locked<[String]>([])
        let cleaned = Promise<Errno?>()
        let channel = IOChannel(
            type: .random,
            fileDescriptor: fd,
            queue: WorkQueue(label: "cleanup"),
            engine: Engines.get(kind)
        ) { error in
            order.withLock { $0.append("cleanup") }
            cleaned.fulfil(error)
        }
        let handlers = WorkQueue(label: "handlers")
        handlers.suspend()
        channel.read(offset: 0, length: 1000, queue: handlers) { done, _, _ in
            if done { order.withLock { $0.append("final") } }
        }
        channel.close()
        for _ in 0..<5 { await settle(Engines.get(kind)) }
        #expect(!cleaned.isFulfilled)
        handlers.resume()
        _ = await cleaned.get()
        #expect(order.withLock { $0 } == ["final", "cleanup"])
    }

    // MARK: Convenience (B54–B57)

    @Test(arguments: EngineKind.allCases)
    func convenienceReadAndWrite(kind: EngineKind) async throws {
        let engine = Engines.get(kind)
        let bytes = pattern(300_000)
        let path = dir.make("f", bytes)
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let whole = Promise<(DispatchDataBuffer, Errno?)>()
        IOChannel.read(from: fd, maxLength: .max, queue: WorkQueue(label: "c"), engine: engine) {
            whole.fulfil(($0, $1))
        }
        let (data, error) = await whole.get()
        #expect(error == nil)
        expectSameBytes(Array(data), bytes)
        #expect(lseek(fd.rawValue, 0, SEEK_CUR) == 300_000)  // B56
        let eof = Promise<(DispatchDataBuffer, Errno?)>()
        IOChannel.read(from: fd, maxLength: 10, queue: WorkQueue(label: "c"), engine: engine) { eof.fulfil(($0, $1)) }
        let (empty, eofError) = await eof.get()
        #expect(empty.isEmpty && eofError == nil)  // B54

        let pipe = makePipe()
        try pipe.read.close()
        try pipe.write.close()
        let bad = Promise<(DispatchDataBuffer, Errno?)>()
        IOChannel.read(from: pipe.read, maxLength: 10, queue: WorkQueue(label: "c"), engine: engine) {
            bad.fulfil(($0, $1))
        }
        let (badData, badError) = await bad.get()
        #expect(badData.isEmpty && badError == .badFileDescriptor)  // B54

        let out = FileDescriptor(rawValue: open(dir.file("out"), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644))
        defer { try? out.close() }
        let written = Promise<(DispatchDataBuffer?, Errno?)>()
        IOChannel.write(to: out, data: DispatchDataBuffer(bytes), queue: WorkQueue(label: "c"), engine: engine) {
            written.fulfil(($0, $1))
        }
        let (rest, writeError) = await written.get()
        #expect(rest == nil && writeError == nil)
        let badWrite = Promise<(DispatchDataBuffer?, Errno?)>()
        IOChannel.write(to: pipe.write, data: DispatchDataBuffer(bytes), queue: WorkQueue(label: "c"), engine: engine) {
            badWrite.fulfil(($0, $1))
        }
        let (badRest, badWriteError) = await badWrite.get()
        #expect(badRest == nil && badWriteError == .badFileDescriptor)  // B54: nil, not the data
    }

    /// On a concurrent queue the convenience handler (the channel's cleanup) must still see what the
    /// read delivered: the cleanup waits for the final handler to have run, not merely to be queued (B4).
    @Test(arguments: EngineKind.allCases)
    func convenienceReadOnAConcurrentQueueDeliversEverything(kind: EngineKind) async throws {
        let bytes = pattern(4096)
        let path = dir.make("f", bytes)
        defer { dir.cleanup() }
        for _ in 0..<200 {
            let fd = openRead(path)
            defer { try? fd.close() }
            let whole = Promise<(DispatchDataBuffer, Errno?)>()
            IOChannel.read(from: fd, maxLength: .max, queue: .global(), engine: Engines.get(kind)) {
                whole.fulfil(($0, $1))
            }
            let (data, error) = await whole.get()
            #expect(error == nil)
            #expect(data.count == 4096)  // B57, B4
            if data.count != 4096 { break }
        }
    }

    @Test(arguments: EngineKind.allCases)
    func convenienceReadOnAPipeReturnsWithSomeData(kind: EngineKind) async throws {
        let pipe = makePipe()
        defer {
            try? pipe.read.close()
            try? pipe.write.close()
        }
        _ = try pipe.write.writeAll([1, 2, 3])
        let got = Promise<(DispatchDataBuffer, Errno?)>()
        IOChannel.read(from: pipe.read, maxLength: 100, queue: WorkQueue(label: "c"), engine: Engines.get(kind)) {
            got.fulfil(($0, $1))
        }
        let (data, error) = await got.get()
        #expect(Array(data) == [1, 2, 3] && error == nil)  // B55: 3 of 100 bytes
    }

    @Test(arguments: EngineKind.allCases)
    func convenienceHandlerWaitsForOtherChannelsOnTheDescriptor(kind: EngineKind) async throws {
        let path = dir.make("f", pattern(10))
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let channel = IOChannel(
            type: .random,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let got = Promise<(DispatchDataBuffer, Errno?)>()
        IOChannel.read(from: fd, maxLength: 10, queue: WorkQueue(label: "c"), engine: Engines.get(kind)) {
            got.fulfil(($0, $1))
        }
        for _ in 0..<5 { await settle(Engines.get(kind)) }
        #expect(!got.isFulfilled)  // B57: the channel on the same descriptor is still open
        channel.close()
        let (data, _) = await got.get()
        #expect(data.count == 10)
    }

    /// B34–B36 → ours: the engine never blocks a thread on a descriptor, so a channel leaves the
    /// descriptor's flags exactly as it found them, during I/O and after cleanup: a pipe set non-blocking
    /// stays so, and a blocking one is not made non-blocking (libdispatch sets `O_NONBLOCK`, B35).
    @Test(arguments: EngineKind.allCases)
    func descriptorFlagsAreLeftAlone(kind: EngineKind) async throws {
        for flags in [O_NONBLOCK, 0] {
            let pipe = makePipe()
            defer {
                try? pipe.read.close()
                try? pipe.write.close()
            }
            _ = fcntl(pipe.read.rawValue, F_SETFL, flags)
            let before = fcntl(pipe.read.rawValue, F_GETFL)
            let cleaned = Promise<Errno?>()
            let channel = makeChannel(.stream, pipe.read, kind, cleaned: cleaned)
            channel.setLimit(lowWater: 1)
            let recorder = Recorder()
            channel.read(offset: 0, length: 4, queue: recorder.queue, handler: recorder.handler)
            await settle(Engines.get(kind))
            #expect(fcntl(pipe.read.rawValue, F_GETFL) == before, "flags \(flags)")
            _ = try pipe.write.writeAll(Array("data".utf8))
            _ = await recorder.wait()
            #expect(recorder.bytes == Array("data".utf8))
            channel.close()
            _ = await cleaned.get()
            #expect(fcntl(pipe.read.rawValue, F_GETFL) == before, "flags \(flags)")
        }
    }

    // MARK: Bad inputs

    @Test(arguments: EngineKind.allCases)
    func devNullReadsAsEmpty(kind: EngineKind) async throws {
        let null = FileDescriptor(rawValue: open("/dev/null", O_RDONLY | O_CLOEXEC))
        defer { try? null.close() }
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: null,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        let recorder = Recorder()
        channel.read(offset: 0, length: .max, queue: recorder.queue, handler: recorder.handler)
        let recorderCalls = await recorder.wait()
        #expect(recorderCalls == [Call(done: true, count: 0, error: nil)])
        channel.close()
    }

    @Test(arguments: EngineKind.allCases)
    func fileTruncatedWhileReadEndsAtTheNewEnd(kind: EngineKind) async throws {
        let path = dir.make("f", pattern(4 << 20))
        defer { dir.cleanup() }
        let fd = openRead(path)
        defer { try? fd.close() }
        let channel = IOChannel(
            type: .stream,
            fileDescriptor: fd,
            queue: WorkQueue(label: "c"),
            engine: Engines.get(kind)
        ) { _ in }
        channel.setLimit(lowWater: 1)
        let recorder = Recorder()
        let truncated = Locked(false)
        channel.read(offset: 0, length: .max, queue: recorder.queue) { done, data, error in
            if !truncated.withLock({ $0 }) {
                truncated.withLock { $0 = true }
                truncate(path, 1 << 20)
            }
            recorder.record(done, data, error)
        }
        let calls = await recorder.wait()
        #expect(calls.last == Call(done: true, count: 0, error: nil))
        // No error and no more than the file ever had. The first MiB is never cut, so it reads as written;
        // bytes past it read while the truncation ran are what the kernel gave (it makes no promise there).
        #expect(recorder.bytes.count <= 4 << 20)
        #expect(recorder.bytes.count >= 1 << 20)
        expectSameBytes(Array(recorder.bytes.prefix(1 << 20)), Array(pattern(4 << 20).prefix(1 << 20)))
        channel.close()
    }
}
