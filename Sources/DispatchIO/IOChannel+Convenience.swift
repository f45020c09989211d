import DispatchData
import DispatchQueues
import SystemPackage
import URing

extension IOChannel {
    /// Reads from a descriptor at its current position, with one handler call.
    ///
    /// On a regular file it reads `maxLength` bytes or to end of file (`Int.max` reads the whole file); on
    /// a pipe, socket or terminal it returns once it has read some data, waiting for the first bytes if
    /// none are there (B55). The position advances by what was read (B56).
    ///
    /// The handler runs exactly once, on `queue`, with everything read and `nil`, or with what was read
    /// before an error and the error; an invalid descriptor gives empty data and `EBADF` (B54). Like
    /// libdispatch, it runs only when nothing else uses the descriptor: every channel on it closed and
    /// idle (B57). It cannot be cancelled (B58).
    ///
    /// - Parameters:
    ///   - fileDescriptor: The descriptor; it is not closed.
    ///   - maxLength: The most bytes to read.
    ///   - queue: Where the handler runs.
    ///   - handler: Receives the data and the error.
    public static func read(
        from fileDescriptor: FileDescriptor,
        maxLength: Int,
        queue: WorkQueue,
        handler: @escaping @Sendable (_ data: DispatchDataBuffer, _ error: Errno?) -> Void
    ) {
        read(from: fileDescriptor, maxLength: maxLength, queue: queue, engine: .shared, handler: handler)
    }

    package static func read(
        from fileDescriptor: FileDescriptor,
        maxLength: Int,
        queue: WorkQueue,
        engine: IOEngine,
        handler: @escaping @Sendable (_ data: DispatchDataBuffer, _ error: Errno?) -> Void
    ) {
        let result = Locked<(data: DispatchDataBuffer, error: Errno?)>((DispatchDataBuffer(), nil))
        let channel = IOChannel(type: .stream, fileDescriptor: fileDescriptor, queue: queue, engine: engine) { error in
            let (data, readError) = result.withLock { $0 }
            handler(data, error ?? readError)
        }
        channel.setLimit(lowWater: Int.max)
        guard maxLength > 0 else {
            channel.close()
            return
        }
        let operation = ReadOperation(
            channel: channel.core,
            offset: 0,
            length: maxLength,
            settings: channel.core.currentSettings,
            queue: queue,
            minimumRead: maxLength
        ) { _, data, error in
            result.withLock { state in
                if let data { state.data.append(data) }
                if let error { state.error = error }
            }
        }
        channel.core.entry.enqueue(.operation(operation))
        channel.close()
    }

    /// Writes all of `data` to a descriptor at its current position, with one handler call.
    ///
    /// The handler runs exactly once, on `queue`: `(nil, nil)` when everything was written, `(remaining,
    /// error)` when a write failed, and `(nil, error)` when the descriptor cannot be written at all: `EBADF`
    /// for an invalid one (B54), `EISDIR` for a directory. It runs once every channel on the descriptor is
    /// closed and idle (B57).
    ///
    /// - Parameters:
    ///   - fileDescriptor: The descriptor; it is not closed.
    ///   - data: The bytes to write.
    ///   - queue: Where the handler runs.
    ///   - handler: Receives the data not written and the error.
    public static func write(
        to fileDescriptor: FileDescriptor,
        data: DispatchDataBuffer,
        queue: WorkQueue,
        handler: @escaping @Sendable (_ data: DispatchDataBuffer?, _ error: Errno?) -> Void
    ) {
        write(to: fileDescriptor, data: data, queue: queue, engine: .shared, handler: handler)
    }

    package static func write(
        to fileDescriptor: FileDescriptor,
        data: DispatchDataBuffer,
        queue: WorkQueue,
        engine: IOEngine,
        handler: @escaping @Sendable (_ data: DispatchDataBuffer?, _ error: Errno?) -> Void
    ) {
        let result = Locked<(data: DispatchDataBuffer?, error: Errno?)>((nil, nil))
        let channel = IOChannel(type: .stream, fileDescriptor: fileDescriptor, queue: queue, engine: engine) { error in
            if let error {
                handler(nil, error)
            } else {
                let (remaining, writeError) = result.withLock { $0 }
                handler(remaining, writeError)
            }
        }
        channel.setLimit(lowWater: Int.max)
        channel.write(offset: 0, data: data, queue: queue) { done, remaining, error in
            guard done else { return }
            result.withLock { $0 = (error == nil ? nil : remaining, error) }
        }
        channel.close()
    }
}
