import DispatchData
import DispatchQueues
import SystemPackage
import Testing
import URing

@testable import DispatchIO

#if canImport(Glibc)
import Glibc
#endif

/// `read(firstDataUpTo:queue:handler:)`, the package's read that ends with the first system call that brings
/// bytes, as the convenience read does on a pipe or socket (B55): dcat reads sockets that keep messages, and
/// pipes, with it, so that no read asks for less than its whole length and cuts a message.
@Suite(.serialized, .timeLimit(.minutes(1)))
final class FirstDataReadTests {
    let dir = TemporaryDirectory()

    deinit { dir.cleanup() }

    /// Reads once with `length`, and waits for the final call.
    func readOnce(_ channel: IOChannel, _ length: Int) async -> Recorder {
        let recorder = Recorder()
        channel.read(firstDataUpTo: length, queue: recorder.queue, handler: recorder.handler)
        _ = await recorder.wait()
        return recorder
    }

    // Messages of 3,000, 5,000 and 100 bytes, read 4,096 bytes at a time: each read takes one message, as
    // read(2) of 4,096 bytes would, and cuts only the one longer than that. A read of 4,096 bytes that went
    // on after the first message would have asked for the 1,096 left and cut the second there.
    @Test(arguments: EngineKind.allCases)
    func eachReadTakesOneMessage(kind: EngineKind) async throws {
        var ends: [CInt] = [-1, -1]
        try #require(socketpair(AF_UNIX, CInt(SOCK_SEQPACKET.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0, &ends) == 0)
        let messages = [pattern(3_000, seed: 1), pattern(5_000, seed: 2), pattern(100, seed: 3)]
        for message in messages {
            try #require(send(ends[0], message, message.count, 0) == message.count)
        }
        close(ends[0])
        let fd = FileDescriptor(rawValue: ends[1])
        defer { try? fd.close() }
        let channel = makeChannel(.stream, fd, kind)
        let first = await readOnce(channel, 4_096)
        #expect(first.soFar == [Call(done: false, count: 3_000, error: nil), Call(done: true, count: 0, error: nil)])
        expectSameBytes(first.bytes, messages[0])
        // A read that brings its whole length ends with it, as any read (B16).
        let second = await readOnce(channel, 4_096)
        #expect(second.soFar == [Call(done: true, count: 4_096, error: nil)])
        expectSameBytes(second.bytes, Array(messages[1].prefix(4_096)))
        let third = await readOnce(channel, 4_096)
        expectSameBytes(third.bytes, messages[2])
        // The end: a final call with nothing before it (B17).
        let last = await readOnce(channel, 4_096)
        #expect(last.soFar == [Call(done: true, count: 0, error: nil)])
        channel.close()
    }

    // A pipe's read takes what the pipe holds, and the operation ends there, waiting for nothing more.
    @Test(arguments: EngineKind.allCases)
    func aPipesReadEndsWithWhatItHolds(kind: EngineKind) async throws {
        let (reader, writer) = makePipe()
        defer { try? reader.close() }
        let bytes = pattern(1_000, seed: 4)
        try #require(try writer.writeAll(bytes) == bytes.count)
        let channel = makeChannel(.stream, reader, kind)
        let first = await readOnce(channel, 1 << 20)
        expectSameBytes(first.bytes, bytes)
        #expect(first.soFar.last == Call(done: true, count: 0, error: nil))
        try writer.close()
        let last = await readOnce(channel, 1 << 20)
        #expect(last.soFar == [Call(done: true, count: 0, error: nil)])
        channel.close()
    }

    // A regular file is read to the length or its end, as by any read (B14).
    @Test(arguments: EngineKind.allCases)
    func aRegularFileIsReadToTheLength(kind: EngineKind) async throws {
        let bytes = pattern(300_000, seed: 5)
        let fd = openRead(dir.make("f", bytes))
        defer { try? fd.close() }
        let channel = makeChannel(.stream, fd, kind)
        let first = await readOnce(channel, 200_000)
        expectSameBytes(first.bytes, Array(bytes.prefix(200_000)))
        let rest = await readOnce(channel, 200_000)
        expectSameBytes(rest.bytes, Array(bytes.dropFirst(200_000)))
        #expect(rest.soFar.last == Call(done: true, count: 0, error: nil))
        channel.close()
    }
}
