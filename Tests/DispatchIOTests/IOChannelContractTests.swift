import DispatchData
import DispatchIO
import DispatchQueues
import SystemPackage
import Testing
import URing

#if canImport(Glibc)
import Glibc
#endif

/// Items of SEMANTICS.md that no test checked before (helper-42's audit of 2026-11-27).
@Suite(.serialized, .timeLimit(.minutes(1)))
final class IOChannelContractTests {
    let dir = TemporaryDirectory()

    deinit { dir.cleanup() }

    /// B7: an operation keeps the settings of when it was submitted; a later change is for later ones.
    @Test(arguments: EngineKind.allCases)
    func settingsAreTakenWhenAnOperationIsSubmitted(kind: EngineKind) async throws {
        let bytes = pattern(300_000)
        let fd = openRead(dir.make("f", bytes))
        defer { try? fd.close() }
        let channel = makeChannel(.random, fd, kind)
        // Held back until both are submitted, so that the change comes while the first is still under way.
        let queue = WorkQueue(label: "handlers")
        queue.suspend()
        channel.setLimit(highWater: 10_000)
        let first = Recorder(queue: queue)
        channel.read(offset: 0, length: 100_000, queue: queue, handler: first.handler)
        channel.setLimit(highWater: 50_000)
        let second = Recorder(queue: queue)
        channel.read(offset: 0, length: 100_000, queue: queue, handler: second.handler)
        queue.resume()
        let firstCalls = await first.wait()
        let secondCalls = await second.wait()
        #expect(firstCalls.allSatisfy { $0.count! <= 10_000 }, "\(firstCalls)")
        #expect(secondCalls.allSatisfy { $0.count! <= 50_000 }, "\(secondCalls)")
        #expect(secondCalls.contains { $0.count == 50_000 }, "\(secondCalls)")
        expectSameBytes(first.bytes, Array(bytes[..<100_000]))
        expectSameBytes(second.bytes, Array(bytes[..<100_000]))
        channel.close()
    }

    /// B21, B25: the default low water mark is 1 MiB, so a pipe read delivers nothing of a few bytes
    /// until end of file, and then all of them in one call before the final one.
    @Test(arguments: EngineKind.allCases)
    func aPipeReadWithTheDefaultLowWaterMarkWaitsForEndOfFile(kind: EngineKind) async throws {
        let pipe = makePipe()
        defer { try? pipe.read.close() }
        let channel = makeChannel(.stream, pipe.read, kind)
        let recorder = Recorder()
        channel.read(offset: 0, length: .max, queue: recorder.queue, handler: recorder.handler)
        _ = try pipe.write.writeAll(Array("hello".utf8))
        await settle(Engines.get(kind))
        _ = try pipe.write.writeAll(Array("world".utf8))
        try pipe.write.close()
        #expect(
            await recorder.wait() == [Call(done: false, count: 10, error: nil), Call(done: true, count: 0, error: nil)]
        )
        #expect(recorder.bytes == Array("helloworld".utf8))
        channel.close()
        // And a stream read of a file: every call but the last two holds at least 1 MiB.
        let bytes = pattern(3 << 20 + 5)
        let fd = openRead(dir.make("f", bytes))
        defer { try? fd.close() }
        let file = makeChannel(.stream, fd, kind)
        let reads = Recorder()
        file.read(offset: 0, length: .max, queue: reads.queue, handler: reads.handler)
        let calls = await reads.wait()
        #expect(calls.dropLast(2).allSatisfy { $0.count! >= 1 << 20 }, "\(calls)")
        #expect(calls.last == Call(done: true, count: 0, error: nil))
        expectSameBytes(reads.bytes, bytes)
        file.close()
    }

    /// B23: raising the low water mark above the high one raises the high one to it.
    @Test(arguments: EngineKind.allCases)
    func raisingTheLowWaterMarkRaisesTheHighOne(kind: EngineKind) async throws {
        let bytes = pattern(100_000)
        let fd = openRead(dir.make("f", bytes))
        defer { try? fd.close() }
        let channel = makeChannel(.random, fd, kind)
        channel.setLimit(highWater: 16_384)
        channel.setLimit(lowWater: 50_000)
        let recorder = Recorder()
        channel.read(offset: 0, length: 100_000, queue: recorder.queue, handler: recorder.handler)
        #expect(
            await recorder.wait() == [
                Call(done: false, count: 50_000, error: nil), Call(done: true, count: 50_000, error: nil),
            ]
        )
        expectSameBytes(recorder.bytes, bytes)
        channel.close()
    }

    /// B53: a random channel may be made on a character device (only pipes and sockets are refused), and
    /// reads it at the offsets asked.
    @Test(arguments: EngineKind.allCases)
    func aRandomChannelReadsACharacterDevice(kind: EngineKind) async throws {
        let zero = FileDescriptor(rawValue: open("/dev/zero", O_RDONLY | O_CLOEXEC))
        defer { try? zero.close() }
        let cleaned = Promise<Errno?>()
        let channel = makeChannel(.random, zero, kind, cleaned: cleaned)
        let recorder = Recorder()
        channel.read(offset: 4096, length: 8192, queue: recorder.queue, handler: recorder.handler)
        #expect(await recorder.wait() == [Call(done: true, count: 8192, error: nil)])
        #expect(recorder.bytes == [UInt8](repeating: 0, count: 8192))
        channel.close()
        #expect(await cleaned.get() == nil)
    }

    /// B29: once closed, a channel has no descriptor to give, at once.
    @Test(arguments: EngineKind.allCases)
    func aClosedChannelHasNoDescriptor(kind: EngineKind) async throws {
        let fd = openRead(dir.make("f", pattern(10)))
        defer { try? fd.close() }
        let channel = makeChannel(.stream, fd, kind)
        await readAndWait(channel)
        #expect(channel.fileDescriptor == fd)
        channel.close()
        #expect(channel.fileDescriptor == nil)
    }

    /// B20: delivered data is the caller's to keep; the pooled buffers it came in are not reused under it.
    /// A 2 MiB read comes in pooled megabytes handed over as they are (not copied); reading 8 MiB of other
    /// bytes afterwards, with the channels closed, takes buffers from the same pool.
    @Test(arguments: EngineKind.allCases)
    func keptDataSurvivesTheReuseOfPooledBuffers(kind: EngineKind) async throws {
        let first = pattern(2 << 20, seed: 1)
        let second = pattern(8 << 20, seed: 2)
        let a = openRead(dir.make("a", first))
        let b = openRead(dir.make("b", second))
        defer {
            try? a.close()
            try? b.close()
        }
        let kept = Locked(DispatchDataBuffer())
        let channel = makeChannel(.random, a, kind)
        let done = Promise<Void>()
        channel.read(offset: 0, length: .max, queue: WorkQueue(label: "keep")) { finished, data, _ in
            if let data { kept.withLock { $0.append(data) } }
            if finished { done.fulfil(()) }
        }
        await done.get()
        channel.close()
        let other = makeChannel(.random, b, kind)
        let recorder = await readAndWait(other)
        expectSameBytes(recorder.bytes, second)
        other.close()
        expectSameBytes(Array(kept.withLock { $0 }), first)
    }

    /// B5: an error in an operation ends that operation, not the channel: the cleanup handler still gets no
    /// error when the channel is closed.
    @Test(arguments: EngineKind.allCases)
    func anOperationsErrorIsNotTheCleanupHandlers(kind: EngineKind) async throws {
        let full = FileDescriptor(rawValue: open("/dev/full", O_WRONLY | O_CLOEXEC))
        defer { try? full.close() }
        let cleaned = Promise<Errno?>()
        let channel = makeChannel(.stream, full, kind, cleaned: cleaned)
        let recorder = Recorder()
        channel.write(
            offset: 0,
            data: DispatchDataBuffer(pattern(100)),
            queue: recorder.queue,
            handler: recorder.handler
        )
        #expect(await recorder.wait() == [Call(done: true, count: 100, error: .noSpace)])
        channel.close()
        #expect(await cleaned.get() == nil)
    }

    /// B46: a random channel made from a descriptor channel counts its offsets from the descriptor's
    /// position when it is made: after a stream read of 20 bytes, its offset 0 is the file's byte 20.
    @Test(arguments: EngineKind.allCases)
    func aRandomChannelFromAStreamStartsAtItsPosition(kind: EngineKind) async throws {
        let bytes = pattern(100)
        let fd = openRead(dir.make("f", bytes))
        defer { try? fd.close() }
        let a = makeChannel(.stream, fd, kind)
        let first = await readAndWait(a, length: 20)
        #expect(first.bytes == Array(bytes[0..<20]))
        let c = IOChannel(type: .random, io: a, queue: WorkQueue(label: "c")) { _ in }
        let read = await readAndWait(c, length: 5)
        #expect(read.bytes == Array(bytes[20..<25]))
        c.close()
        a.close()
    }

    /// B47: a channel made from a path channel opens the path on its own: its own descriptor, its own
    /// position (it reads from the start), and its own cleanup, which does not wait for the other's close.
    @Test(arguments: EngineKind.allCases)
    func aChannelFromAPathChannelOpensThePathAgain(kind: EngineKind) async throws {
        let bytes = pattern(100)
        let path = dir.make("f", bytes)
        let aCleaned = Promise<Errno?>()
        let a = try #require(
            IOChannel(
                type: .stream,
                path: FilePath(path),
                mode: .readOnly,
                queue: WorkQueue(label: "a"),
                engine: Engines.get(kind),
                cleanupHandler: cleanup(aCleaned)
            )
        )
        let first = await readAndWait(a, length: 10)
        let cCleaned = Promise<Errno?>()
        let c = IOChannel(type: .stream, io: a, queue: WorkQueue(label: "c"), cleanupHandler: cleanup(cCleaned))
        let read = await readAndWait(c, length: 10)
        #expect(first.bytes == Array(bytes[0..<10]))
        #expect(read.bytes == Array(bytes[0..<10]))
        let descriptors = Locked<(a: FileDescriptor?, c: FileDescriptor?)>((nil, nil))
        let barriers = Promise<Void>()
        a.barrier {
            descriptors.withLock { $0.a = a.fileDescriptor }
            c.barrier {
                descriptors.withLock { $0.c = c.fileDescriptor }
                barriers.fulfil(())
            }
        }
        await barriers.get()
        let (aDescriptor, cDescriptor) = descriptors.withLock { $0 }
        #expect(aDescriptor != nil && cDescriptor != nil && aDescriptor != cDescriptor)
        a.close()
        #expect(await aCleaned.get() == nil)
        #expect(!cCleaned.isFulfilled)
        c.close()
        #expect(await cCleaned.get() == nil)
    }

    /// B37: a descriptor number closed under its channel and reused for another file gets a channel of its
    /// own (entries go by number, and the old entry would have read the old file's state), whose cleanup
    /// does not wait for the old channel; and neither closes the descriptor.
    @Test(arguments: EngineKind.allCases)
    func aReusedDescriptorNumberGetsItsOwnChannelEntry(kind: EngineKind) async throws {
        let x = pattern(50, seed: 1)
        let y = pattern(70, seed: 2)
        let number = openRead(dir.make("x", x))
        let aCleaned = Promise<Errno?>()
        let a = makeChannel(.random, number, kind, cleaned: aCleaned)
        let first = await readAndWait(a)
        #expect(first.bytes == x)
        // The same number, now on another file.
        let other = openRead(dir.make("y", y))
        try #require(dup2(other.rawValue, number.rawValue) == number.rawValue)
        try other.close()
        let bCleaned = Promise<Errno?>()
        let b = makeChannel(.random, number, kind, cleaned: bCleaned)
        let second = await readAndWait(b)
        #expect(second.bytes == y)
        b.close()
        #expect(await bCleaned.get() == nil)
        #expect(!aCleaned.isFulfilled)
        a.close()
        #expect(await aCleaned.get() == nil)
        #expect(fcntl(number.rawValue, F_GETFD) != -1)
        try number.close()
    }

    /// B3, B4: a random channel on a pipe fails at once (its cleanup gets ESPIPE, once), yet it holds the
    /// descriptor's entry: a stream channel on the same pipe reads normally, and its cleanup waits until
    /// the failed channel is closed too.
    @Test(arguments: EngineKind.allCases)
    func aFailedChannelStillHoldsTheDescriptor(kind: EngineKind) async throws {
        let pipe = makePipe()
        defer {
            try? pipe.read.close()
            try? pipe.write.close()
        }
        let failedCleanups = Locked<[Errno?]>([])
        let failedCleaned = Promise<Void>()
        let failed = IOChannel(
            type: .random,
            fileDescriptor: pipe.read,
            queue: WorkQueue(label: "failed"),
            engine: Engines.get(kind)
        ) { error in
            failedCleanups.withLock { $0.append(error) }
            failedCleaned.fulfil(())
        }
        await failedCleaned.get()
        let streamCleaned = Promise<Errno?>()
        let stream = makeChannel(.stream, pipe.read, kind, cleaned: streamCleaned)
        stream.setLimit(lowWater: 1)
        let recorder = Recorder()
        stream.read(offset: 0, length: 4, queue: recorder.queue, handler: recorder.handler)
        _ = try pipe.write.writeAll(Array("pipe".utf8))
        _ = await recorder.wait()
        #expect(recorder.bytes == Array("pipe".utf8))
        stream.close()
        // Still held by the failed channel: the stream's cleanup waits for it (a round trip lets it run).
        await settle(Engines.get(kind))
        #expect(!streamCleaned.isFulfilled)
        failed.close()
        #expect(await streamCleaned.get() == nil)
        #expect(failedCleanups.withLock { $0 } == [.illegalSeek])
    }
}
