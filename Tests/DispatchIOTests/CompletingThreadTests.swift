import DispatchData
import DispatchQueues
import SystemPackage
import Testing
import URing

@testable import DispatchIO

#if canImport(Glibc)
import Glibc
#endif

/// `read(offset:length:onCompletingThread:)` and `write(offset:data:onCompletingThread:)`, the package's
/// channel operations whose handler runs with no queue between, as `dcat` uses them: the same calls as
/// the queue's (B13, B15–B19), one at a time and in order, on the thread that makes them due.
@Suite(.serialized, .timeLimit(.minutes(1)))
final class CompletingThreadTests {
    let dir = TemporaryDirectory()

    deinit { dir.cleanup() }

    /// Records calls from any thread, and whether two ever overlapped.
    final class Calls: @unchecked Sendable {
        private let lock = Lock()
        private var calls: [Call] = []
        private var bytes: [UInt8] = []
        private var threads: Set<UInt> = []
        private var running = 0
        private(set) var overlapped = false
        let final = Promise<Void>()

        func record(_ done: Bool, _ data: DispatchDataBuffer?, _ error: Errno?) {
            lock.withLock {
                running += 1
                if running > 1 { overlapped = true }
            }
            // Long enough for a second call, were it run beside this one, to be caught in the act.
            for _ in 0..<1_000 { sched_yield() }
            let isFinal = lock.withLock { () -> Bool in
                calls.append(Call(done: done, count: data?.count, error: error))
                if let data { bytes += Array(data) }
                threads.insert(UInt(bitPattern: Int(pthread_self())))
                running -= 1
                return done
            }
            if isFinal { final.fulfil(()) }
        }

        var recorded: [Call] { lock.withLock { calls } }
        var received: [UInt8] { lock.withLock { bytes } }
        var threadsSeen: Set<UInt> { lock.withLock { threads } }
    }

    /// The thread the io_uring engine runs its completion handlers on.
    func ringThread(_ engine: IOEngine) async -> UInt {
        await withCheckedContinuation { (done: CheckedContinuation<UInt, Never>) in
            engine.nop { _ in done.resume(returning: UInt(bitPattern: Int(pthread_self()))) }
        }
    }

    @Test(arguments: EngineKind.allCases)
    func readCallsComeInOrderOneAtATime(kind: EngineKind) async throws {
        let bytes = pattern(300_000)
        let fd = openRead(dir.make("f", bytes))
        defer { try? fd.close() }
        let channel = makeChannel(.stream, fd, kind)
        // Pieces of at most 4 KiB, each delivered as it is read: about 75 calls, then the final one.
        channel.setLimit(lowWater: 1)
        channel.setLimit(highWater: 4096)
        let calls = Calls()
        channel.read(offset: 0, length: .max) { done, data, error in calls.record(done, data, error) }
        await calls.final.get()
        let recorded = calls.recorded
        // B17: pieces, then (true, empty, nil), and nothing after it.
        #expect(recorded.count > 2)
        #expect(recorded.dropLast().allSatisfy { !$0.done && $0.error == nil && ($0.count ?? 0) <= 4096 })
        #expect(recorded.last == Call(done: true, count: 0, error: nil))
        expectSameBytes(calls.received, bytes)
        #expect(!calls.overlapped)
        // The handler ran on the ring thread itself, where the reads completed: no queue between.
        if kind == .uring {
            let ring = await ringThread(Engines.get(kind))
            #expect(calls.threadsSeen == [ring])
        }
        channel.close()
    }

    @Test(arguments: EngineKind.allCases)
    func writeEndsOnceWithEverythingWritten(kind: EngineKind) async throws {
        let bytes = pattern(3 << 20, seed: 5)
        let path = dir.file("out")
        let fd = FileDescriptor(rawValue: open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644))
        defer { try? fd.close() }
        let channel = makeChannel(.random, fd, kind)
        let calls = Calls()
        let data = bytes.withUnsafeBytes { DispatchDataBuffer(bytes: $0) }
        channel.write(offset: 0, data: data) { done, rest, error in calls.record(done, rest, error) }
        await calls.final.get()
        // B19, B26: a call after each chunk with what is left to write, fewer bytes each time, then (true, nil, nil).
        let recorded = calls.recorded
        #expect(recorded.last == Call(done: true, count: nil, error: nil))
        let left = recorded.dropLast().map { $0.done || $0.error != nil ? -1 : $0.count ?? -1 }
        #expect(left.allSatisfy { $0 > 0 && $0 < bytes.count } && left == left.sorted(by: >))
        #expect(!calls.overlapped)
        if kind == .uring {
            let ring = await ringThread(Engines.get(kind))
            #expect(calls.threadsSeen == [ring])
        }
        channel.close()
        let written = try [UInt8](unsafeUninitializedCapacity: bytes.count) { buffer, count in
            let reader = openRead(path)
            defer { try? reader.close() }
            count = 0
            while count < buffer.count {
                let got = try reader.read(
                    fromAbsoluteOffset: Int64(count),
                    into: UnsafeMutableRawBufferPointer(UnsafeMutableBufferPointer(rebasing: buffer[count...]))
                )
                if got == 0 { break }
                count += got
            }
        }
        expectSameBytes(written, bytes)
    }

    /// A write that fails gives back exactly what was not written (B19), here every byte: /dev/full takes none.
    @Test(.enabled(if: access("/dev/full", W_OK) == 0), arguments: EngineKind.allCases)
    func failedWriteGivesBackTheBytes(kind: EngineKind) async throws {
        let fd = FileDescriptor(rawValue: open("/dev/full", O_WRONLY | O_CLOEXEC))
        defer { try? fd.close() }
        let channel = makeChannel(.stream, fd, kind)
        let calls = Calls()
        let data = [UInt8](repeating: 7, count: 10_000).withUnsafeBytes { DispatchDataBuffer(bytes: $0) }
        channel.write(offset: 0, data: data) { done, rest, error in calls.record(done, rest, error) }
        await calls.final.get()
        #expect(calls.recorded == [Call(done: true, count: 10_000, error: .noSpace)])
        channel.close()
    }

    /// Calls made due at once run on the calling thread before the operation returns: a closed channel's
    /// refusal (B28), and zero-length operations (B12).
    @Test(arguments: EngineKind.allCases)
    func callsDueAtOnceRunBeforeReturning(kind: EngineKind) async throws {
        let fd = openRead(dir.make("f", pattern(10)))
        defer { try? fd.close() }
        let channel = makeChannel(.random, fd, kind)
        let empty = Calls()
        channel.read(offset: 0, length: 0) { done, data, error in empty.record(done, data, error) }
        #expect(empty.recorded == [Call(done: true, count: 0, error: nil)])
        let nothing = Calls()
        channel.write(offset: 0, data: DispatchDataBuffer()) { done, data, error in nothing.record(done, data, error) }
        #expect(nothing.recorded == [Call(done: true, count: nil, error: nil)])
        channel.close()
        let refused = Calls()
        channel.read(offset: 0, length: 5) { done, data, error in refused.record(done, data, error) }
        #expect(refused.recorded == [Call(done: true, count: nil, error: .canceled)])
        let refusedWrite = Calls()
        let data = [UInt8](repeating: 1, count: 3).withUnsafeBytes { DispatchDataBuffer(bytes: $0) }
        channel.write(offset: 0, data: data) { done, rest, error in refusedWrite.record(done, rest, error) }
        #expect(refusedWrite.recorded == [Call(done: true, count: 3, error: .canceled)])
    }

    /// Handlers that submit the next read from inside themselves, as dcat's pump does: every piece arrives
    /// once and in order, and the chain ends, including its last read, which finds the end of the file.
    @Test(arguments: EngineKind.allCases)
    func handlersMaySubmitTheNextRead(kind: EngineKind) async throws {
        let bytes = pattern(1 << 20, seed: 9)
        let fd = openRead(dir.make("f", bytes))
        defer { try? fd.close() }
        let channel = makeChannel(.random, fd, kind)
        let received = Locked<[UInt8]>([])
        let ended = Promise<Errno?>()
        @Sendable func readPiece(at offset: Int64) {
            // What this read delivered so far: at the end of the file, a short piece and then the final call.
            let count = Locked(0)
            channel.read(offset: offset, length: 100_000) { done, data, error in
                if let data {
                    count.withLock { $0 += data.count }
                    received.withLock { $0 += Array(data) }
                }
                guard done else { return }
                let total = count.withLock { $0 }
                if error != nil || total == 0 { return ended.fulfil(error) }
                readPiece(at: offset + Int64(total))
            }
        }
        readPiece(at: 0)
        let error = await ended.get()
        #expect(error == nil)
        expectSameBytes(received.withLock { $0 }, bytes)
        channel.close()
    }

    /// The handler takes the bytes over: once it lets go of them, nothing else holds the read's buffer, which
    /// is back in the pool at once. (dcat's pump runs inside the handler and issues more reads: a buffer the
    /// delivery kept alive under it made the next read take a fresh megabyte.)
    @Test(arguments: EngineKind.allCases)
    func theHandlerHoldsTheOnlyReference(kind: EngineKind) async throws {
        let pool = BufferPool.shared
        // Room in the pool to take the buffer back (a full one frees it instead): its idle ones, held meanwhile.
        var held: [UnsafeMutableRawPointer] = []
        while !pool.idleBuffers.isEmpty { held.append(pool.take()) }
        defer { for buffer in held { pool.give(buffer) } }
        let fd = openRead(dir.make("f", pattern(1 << 20, seed: 2)))
        defer { try? fd.close() }
        let channel = makeChannel(.random, fd, kind)
        channel.setLimit(lowWater: .max)
        let outcome = Promise<(count: Int, backInPool: Bool)>()
        channel.read(offset: 0, length: 1 << 20) { done, data, _ in
            guard done else { return }
            let count = data?.count ?? 0
            // A whole megabyte is handed over in its pooled buffer, not copied.
            let address = data?.regions.first.map { UInt(bitPattern: $0.bytes.baseAddress) }
            letGo(consume data)
            outcome.fulfil((count, pool.idleBuffers.contains { UInt(bitPattern: $0) == address }))
        }
        let result = await outcome.get()
        #expect(result.count == 1 << 20)
        #expect(result.backInPool)
        channel.close()
    }
}

/// Ends the life of `value` here.
private func letGo(_ value: consuming DispatchDataBuffer?) {}
