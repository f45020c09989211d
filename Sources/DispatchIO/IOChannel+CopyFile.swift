import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

extension IOChannel {
    /// The largest file ``copySmallFile(from:in:to:in:flags:permissions:size:keepOpen:engine:then:)`` takes (1 MiB).
    package static let smallFileLimit = IOEngine.wholeFileCopyLimit

    /// Copies a small regular file whole, with no channel: open, create, transfer and close run as one
    /// linked io_uring submission (see `IOEngine.copyFile`), and the bytes pass through no buffer of this
    /// process (on the POSIX engine, the same steps run one after another on one pool thread, through its
    /// buffer).
    ///
    /// A channel per file costs more than the copy itself when files are a few KiB: two channels, their
    /// queues and operations, and a round trip through the ring for each step. This is the path for
    /// trees of files up to ``smallFileLimit``; anything larger goes through channels.
    ///
    /// - Parameters:
    ///   - source: The file to copy, resolved against `sourceDirectory` when relative: a path copied for
    ///     the kernel (`CPath(filePath)`), which a caller can share with its other requests (a tree's copy
    ///     names a file by one name in both directories, and takes its `statx` by it too).
    ///   - sourceDirectory: A descriptor of the directory a relative `source` is in (`AT_FDCWD`: the
    ///     working directory), open until the handler has run. A tree's copy names each file in its
    ///     directory, so the kernel looks up one name instead of walking the whole path.
    ///   - destination: The file to create, resolved against `destinationDirectory` when relative.
    ///   - destinationDirectory: As `sourceDirectory`, for `destination`.
    ///   - flags: How to open the destination (`O_WRONLY | O_CREAT | O_EXCL` for a new file).
    ///   - size: The source's size from its `statx`, 0 through ``smallFileLimit``. A source that no longer
    ///     has this size is reported as `.incomplete`, and one the engine could not take as `.notStarted`:
    ///     both must be copied again through channels.
    ///   - keepOpen: Leave both files open when the copy succeeds (`.copiedOpen`), for the caller to set
    ///     their metadata and close; where the engine cannot, the copy is `.notStarted`.
    ///   - handler: Runs exactly once, on an engine thread, so it must be short and must not block; it
    ///     receives how the copy ended.
    package static func copySmallFile(
        from source: CPath,
        in sourceDirectory: CInt = AT_FDCWD,
        to destination: CPath,
        in destinationDirectory: CInt = AT_FDCWD,
        flags: CInt,
        permissions: FilePermissions,
        size: Int,
        keepOpen: Bool = false,
        engine: IOEngine = .shared,
        then handler: @escaping @Sendable (FileCopyOutcome) -> Void
    ) {
        engine.copyFile(
            from: source,
            in: sourceDirectory,
            to: destination,
            in: destinationDirectory,
            flags: flags,
            permissions: permissions,
            length: size,
            keepOpen: keepOpen,
            then: handler
        )
    }
}
