import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

extension IOChannel {
    /// The largest file ``copySmallFile(from:to:flags:permissions:size:engine:then:)`` takes: the size of
    /// its pooled buffers.
    package static let smallFileLimit = 64 << 10

    /// Copies a small regular file whole, with no channel: open, create, read, write and close run as one
    /// linked io_uring submission (see `IOEngine.copyFile`), through a pooled buffer.
    ///
    /// A channel per file costs more than the copy itself when files are a few KiB: two channels, their
    /// queues and operations, and a round trip through the ring for each step. This is the path for
    /// trees of small files; anything else goes through channels.
    ///
    /// - Parameters:
    ///   - flags: How to open the destination (`O_WRONLY | O_CREAT | O_EXCL` for a new file).
    ///   - size: The source's size from its `statx`, 1 through ``smallFileLimit``. A source that no longer
    ///     has this size is reported as `.incomplete` and must be copied again through channels.
    ///   - handler: Runs exactly once, on an engine thread, so it must be short and must not block; it
    ///     receives how the copy ended.
    package static func copySmallFile(
        from source: FilePath,
        to destination: FilePath,
        flags: CInt,
        permissions: FilePermissions,
        size: Int,
        engine: IOEngine = .shared,
        then handler: @escaping @Sendable (FileCopyOutcome) -> Void
    ) {
        precondition(size > 0 && size <= smallFileLimit, "copySmallFile: size \(size) is not 1...\(smallFileLimit)")
        let pool = BufferPool.smallFiles
        let buffer = pool.take()
        engine.copyFile(
            from: source,
            to: destination,
            flags: flags,
            permissions: permissions,
            length: size,
            buffer: UnsafeMutableRawBufferPointer(start: buffer, count: size),
            keepAlive: nil
        ) { [address = UInt(bitPattern: buffer)] outcome in
            // The engine is done with the buffer once the handler runs.
            pool.give(UnsafeMutableRawPointer(bitPattern: address)!)
            handler(outcome)
        }
    }
}
