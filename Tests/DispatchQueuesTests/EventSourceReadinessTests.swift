import DispatchQueues
import Synchronization
import SystemPackage
import Testing
import URing

#if canImport(Glibc)
import Glibc
#endif

@Suite("EventSource readiness", .timeLimit(.minutes(1)))
struct EventSourceReadinessTests {
    // D13, D29, D30: 7 bytes read 3 at a time give data 7, 4, 1; the writer's close gives one 0, then
    // nothing.
    @Test("pipe: level-triggered estimates, then one 0 at hang-up", arguments: EngineKind.allCases)
    func pipeRead(kind: EngineKind) throws {
        try withSourceEngine(kind) { engine in
            let pipe = SourcePipe()
            defer { try? pipe.read.close() }
            _ = try pipe.write.writeAll(Array("1234567".utf8))
            let source = EventSource.makeReadSource(fileDescriptor: pipe.read, queue: nil, engine: engine)
            let seen = Seen()
            source.setEventHandler {
                let estimate = source.data
                seen.add(estimate)
                var buffer = [UInt8](repeating: 0, count: 3)
                _ = buffer.withUnsafeMutableBytes { Glibc.read(pipe.read.rawValue, $0.baseAddress, 3) }
            }
            source.activate()
            for _ in 0..<3 { seen.next() }
            #expect(seen.all == [7, 4, 1])
            try pipe.write.close()
            seen.next()
            #expect(seen.all == [7, 4, 1, 0])
            #expect(seen.nothing(within: .milliseconds(100)))
            #expect(!source.isCancelled)
            #expect(source.handle == UInt(pipe.read.rawValue))
            cancelAndWait(source)
        }
    }

    // D13, D31: a regular file is always ready; data is the bytes left, and it keeps firing at the end.
    @Test("regular file: always ready, data is what is left", arguments: EngineKind.allCases)
    func regularFile(kind: EngineKind) throws {
        try withSourceEngine(kind) { engine in
            let directory = SourceTemporaryDirectory()
            defer { directory.remove() }
            let file = try FileDescriptor.open(
                FilePath(directory.path + "/f"),
                .readWrite,
                options: [.create],
                permissions: .ownerReadWrite
            )
            defer { try? file.close() }
            _ = try file.writeAll([UInt8](repeating: 7, count: 1000))
            _ = try file.seek(offset: 0, from: .start)
            let source = EventSource.makeReadSource(fileDescriptor: file, queue: nil, engine: engine)
            let seen = Seen()
            source.setEventHandler {
                seen.add(source.data)
                var buffer = [UInt8](repeating: 0, count: 400)
                _ = buffer.withUnsafeMutableBytes { Glibc.read(file.rawValue, $0.baseAddress, 400) }
            }
            source.activate()
            for _ in 0..<5 { seen.next() }
            cancelAndWait(source)
            #expect(Array(seen.all.prefix(5)) == [1000, 600, 200, 0, 0])
        }
    }

    // D29 [BUG] → ours: /dev/zero cannot be polled by epoll, yet it is always ready, as poll(2) says.
    @Test("/dev/zero is always ready", arguments: EngineKind.allCases)
    func devZero(kind: EngineKind) throws {
        try withSourceEngine(kind) { engine in
            let zero = try FileDescriptor.open("/dev/zero", .readOnly)
            defer { try? zero.close() }
            let source = EventSource.makeReadSource(fileDescriptor: zero, queue: nil, engine: engine)
            let seen = Seen()
            source.setEventHandler { seen.add(source.data) }
            source.activate()
            seen.next()
            seen.next()
            cancelAndWait(source)
            #expect(seen.all.allSatisfy { $0 >= 1 })
        }
    }

    // D14 [DIV] → ours: write data is a positive space estimate, for pipes and sockets.
    @Test("write sources report space of at least 1", arguments: EngineKind.allCases)
    func writeSpace(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            let pipe = SourcePipe()
            defer {
                try? pipe.read.close()
                try? pipe.write.close()
            }
            var fds: [CInt] = [0, 0]
            #expect(socketpair(AF_UNIX, CInt(SOCK_STREAM.rawValue), 0, &fds) == 0)
            defer {
                close(fds[0])
                close(fds[1])
            }
            let pipeSource = EventSource.makeWriteSource(fileDescriptor: pipe.write, queue: nil, engine: engine)
            let socketSource = EventSource.makeWriteSource(
                fileDescriptor: FileDescriptor(rawValue: fds[0]),
                queue: nil,
                engine: engine
            )
            let pipeSeen = Seen()
            let socketSeen = Seen()
            pipeSource.setEventHandler { pipeSeen.add(pipeSource.data) }
            socketSource.setEventHandler { socketSeen.add(socketSource.data) }
            pipeSource.activate()
            socketSource.activate()
            pipeSeen.next()
            socketSeen.next()
            cancelAndWait(pipeSource)
            cancelAndWait(socketSource)
            #expect(pipeSeen.all[0] > 1000)  // an empty 64 KiB pipe
            #expect(socketSeen.all[0] >= 1)
        }
    }

    // D29: a read and a write source may watch the same socket.
    @Test("read and write sources on one socket", arguments: EngineKind.allCases)
    func muxed(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            var fds: [CInt] = [0, 0]
            #expect(socketpair(AF_UNIX, CInt(SOCK_STREAM.rawValue), 0, &fds) == 0)
            defer {
                close(fds[0])
                close(fds[1])
            }
            let fd = FileDescriptor(rawValue: fds[0])
            let raw = fds[0]
            let reader = EventSource.makeReadSource(fileDescriptor: fd, queue: nil, engine: engine)
            let writer = EventSource.makeWriteSource(fileDescriptor: fd, queue: nil, engine: engine)
            let read = Seen()
            let wrote = Seen()
            reader.setEventHandler {
                read.add(reader.data)
                var buffer = [UInt8](repeating: 0, count: 64)
                _ = buffer.withUnsafeMutableBytes { Glibc.read(raw, $0.baseAddress, 64) }
            }
            writer.setEventHandler {
                if wrote.count == 0 { wrote.add(writer.data) }
            }
            reader.activate()
            writer.activate()
            wrote.next()
            _ = "hello".withCString { write(fds[1], $0, 5) }
            read.next()
            #expect(read.all[0] == 5)
            cancelAndWait(reader)
            cancelAndWait(writer)
        }
    }

    // D17: the cancel handler runs after the source left the engine, so the fd can then be closed; D21:
    // while suspended, readiness waits and is delivered on resume.
    @Test("suspend holds readiness; cancel handler can close the fd", arguments: EngineKind.allCases)
    func suspendAndClose(kind: EngineKind) throws {
        try withSourceEngine(kind) { engine in
            let pipe = SourcePipe()
            let source = EventSource.makeReadSource(fileDescriptor: pipe.read, queue: nil, engine: engine)
            let seen = Seen()
            source.setEventHandler {
                seen.add(source.data)
                var buffer = [UInt8](repeating: 0, count: 16)
                _ = buffer.withUnsafeMutableBytes { Glibc.read(pipe.read.rawValue, $0.baseAddress, 16) }
            }
            source.activate()
            source.suspend()
            _ = try pipe.write.writeAll(Array("abc".utf8))
            #expect(seen.nothing(within: .milliseconds(50)))
            source.resume()
            seen.next()
            #expect(seen.all == [3])
            let closed = WorkSemaphore(value: 0)
            source.setCancelHandler {
                try? pipe.read.close()
                closed.signal()
            }
            source.cancel()
            expectSignalled(closed)
            try pipe.write.close()
        }
    }

    // D13: a listening socket reports 1 (FIONREAD does not apply to it).
    @Test("listening socket: data 1", arguments: EngineKind.allCases)
    func listening(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            let directory = SourceTemporaryDirectory()
            defer { directory.remove() }
            let path = directory.path + "/socket"
            let server = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue), 0)
            let client = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue), 0)
            defer {
                close(server)
                close(client)
            }
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                path.utf8CString.withUnsafeBytes { raw.copyMemory(from: $0) }
            }
            let length = socklen_t(MemoryLayout<sockaddr_un>.size)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(server, $0, length) }
            }
            #expect(bound == 0)
            #expect(listen(server, 4) == 0)
            let source = EventSource.makeReadSource(
                fileDescriptor: FileDescriptor(rawValue: server),
                queue: nil,
                engine: engine
            )
            let seen = Seen()
            source.setEventHandler {
                seen.add(source.data)
                let accepted = accept(server, nil, nil)
                if accepted >= 0 { close(accepted) }
            }
            source.activate()
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, length) }
            }
            #expect(connected == 0)
            seen.next()
            #expect(seen.all == [1])
            cancelAndWait(source)
        }
    }

    // D30 for writes: once the reader is gone the write source fires once more (data 1) and goes quiet.
    @Test("write source: reader gone, one last event", arguments: EngineKind.allCases)
    func writeHangup(kind: EngineKind) throws {
        try withSourceEngine(kind) { engine in
            let pipe = SourcePipe()
            defer { try? pipe.write.close() }
            try pipe.read.close()
            let source = EventSource.makeWriteSource(fileDescriptor: pipe.write, queue: nil, engine: engine)
            let seen = Seen()
            source.setEventHandler { seen.add(source.data) }
            source.activate()
            seen.next()
            #expect(seen.nothing(within: .milliseconds(100)))
            #expect(seen.all == [1])
            cancelAndWait(source)
        }
    }
}
