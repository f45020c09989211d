import DispatchData
import DispatchQueues
import SystemPackage
import Testing
import URing

@testable import DispatchIO

#if canImport(Glibc)
import Glibc
#endif

/// `read(length:askingAtLeast:queue:handler:)`, the package's read whose system calls on a pipe or socket
/// never ask for fewer than a least number of bytes: it ends where the next one would, its last bytes in the
/// final call, so that a final call without bytes is the end of file. dcat and dcopy read pipes, devices and
/// sockets with it, so that no read asks for less than a message and cuts it.
@Suite(.serialized, .timeLimit(.minutes(1)))
final class LeastReadTests {
    let dir = TemporaryDirectory()

    deinit { dir.cleanup() }

    /// The reading end of a sequenced-packet socket pair holding `messages`, its other end closed.
    func socketHolding(_ messages: [[UInt8]]) throws -> FileDescriptor {
        var ends: [CInt] = [-1, -1]
        try #require(socketpair(AF_UNIX, CInt(SOCK_SEQPACKET.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0, &ends) == 0)
        defer { close(ends[0]) }
        for message in messages {
            try #require(send(ends[0], message, message.count, 0) == message.count)
        }
        return FileDescriptor(rawValue: ends[1])
    }

    /// Reads `length` bytes asking for at least `least` at a time, and waits for the final call.
    func read(_ channel: IOChannel, _ length: Int, least: Int) async -> Recorder {
        let recorder = Recorder()
        channel.read(length: length, askingAtLeast: least, queue: recorder.queue, handler: recorder.handler)
        _ = await recorder.wait()
        return recorder
    }

    // Messages of 3,000, 4,000, 4,096 and 100 bytes, read 8,192 bytes at a time, asking for at least 4,096:
    // the first read takes two messages and ends where it would have asked for 1,192, and the 4,096 come
    // whole in the next. A plain read of 8,192 bytes asks for those 1,192 and cuts the third message there.
    @Test(arguments: EngineKind.allCases)
    func noMessageUpToTheLeastIsCut(kind: EngineKind) async throws {
        let messages = [
            pattern(3_000, seed: 1), pattern(4_000, seed: 2), pattern(4_096, seed: 3), pattern(100, seed: 4),
        ]
        let fd = try socketHolding(messages)
        defer { try? fd.close() }
        let channel = makeChannel(.stream, fd, kind)
        channel.setLimit(lowWater: 1)
        // The last bytes come in the final call, which is then not the end of file.
        let first = await read(channel, 8_192, least: 4_096)
        #expect(
            first.soFar == [Call(done: false, count: 3_000, error: nil), Call(done: true, count: 4_000, error: nil)]
        )
        expectSameBytes(first.bytes, messages[0] + messages[1])
        let second = await read(channel, 8_192, least: 4_096)
        #expect(
            second.soFar == [Call(done: false, count: 4_096, error: nil), Call(done: true, count: 100, error: nil)]
        )
        expectSameBytes(second.bytes, messages[2] + messages[3])
        // The end: a final call with nothing in it (B17).
        let last = await read(channel, 8_192, least: 4_096)
        #expect(last.soFar == [Call(done: true, count: 0, error: nil)])
        channel.close()
    }

    // Bytes held below the low water mark leave less room under the high water mark for the next call: with
    // only the high water mark set to 4,096 (which lowers the low water mark to it, B22), a message of 100
    // bytes is held, and the next call would have asked for 3,996 and cut the 4,096-byte message behind it
    // (helper-68). The read ends there instead, with the 100 bytes in its final call.
    @Test(arguments: EngineKind.allCases)
    func bytesHeldBelowTheLowWaterMarkEndTheRead(kind: EngineKind) async throws {
        let messages = [pattern(100, seed: 7), pattern(4_096, seed: 8)]
        let fd = try socketHolding(messages)
        defer { try? fd.close() }
        let channel = makeChannel(.stream, fd, kind)
        channel.setLimit(highWater: 4_096)
        let first = await read(channel, 8_192, least: 4_096)
        #expect(first.soFar == [Call(done: true, count: 100, error: nil)])
        let second = await read(channel, 8_192, least: 4_096)
        expectSameBytes(second.bytes, messages[1])
        #expect(second.soFar.last?.done == true)
        channel.close()
    }

    // Asking for at least the whole length ends the read with the first system call that brings bytes, as
    // the convenience read does (B55): a pipe's read takes what the pipe holds and waits for nothing more.
    @Test(arguments: EngineKind.allCases)
    func theWholeLengthEndsWithTheFirstBytes(kind: EngineKind) async throws {
        let (reader, writer) = makePipe()
        defer { try? reader.close() }
        let bytes = pattern(1_000, seed: 5)
        try #require(try writer.writeAll(bytes) == bytes.count)
        let channel = makeChannel(.stream, reader, kind)
        let first = await read(channel, 1 << 20, least: 1 << 20)
        #expect(first.soFar == [Call(done: true, count: 1_000, error: nil)])
        expectSameBytes(first.bytes, bytes)
        try writer.close()
        let last = await read(channel, 1 << 20, least: 1 << 20)
        #expect(last.soFar == [Call(done: true, count: 0, error: nil)])
        channel.close()
    }

    // A regular file is read to the length or its end, as by any read (B14).
    @Test(arguments: EngineKind.allCases)
    func aRegularFileIsReadToTheLength(kind: EngineKind) async throws {
        let bytes = pattern(300_000, seed: 6)
        let fd = openRead(dir.make("f", bytes))
        defer { try? fd.close() }
        let channel = makeChannel(.stream, fd, kind)
        let first = await read(channel, 200_000, least: 200_000)
        expectSameBytes(first.bytes, Array(bytes.prefix(200_000)))
        let rest = await read(channel, 200_000, least: 200_000)
        expectSameBytes(rest.bytes, Array(bytes.dropFirst(200_000)))
        #expect(rest.soFar.last == Call(done: true, count: 0, error: nil))
        channel.close()
    }
}
