import SystemPackage
import Testing
import URing

#if canImport(Glibc)
import Glibc
#endif

/// `IOEngine.copyFile`: one linked submission on io_uring, separate operations on the POSIX engine; the
/// outcomes must be the same on both.
@Suite(.serialized, .noDescriptorLeaks, .timeLimit(.minutes(1)))
struct CopyFileTests {
    @Test(arguments: EngineKind.allCases)
    func copiesTheBytesWithTheGivenPermissions(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let bytes = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        writeFile(dir.file("src"), bytes)
        try await withEngine(kind) { engine in
            // Linked copies need a 5.19 kernel; on one, io_uring must not quietly fall back to separate steps.
            #expect(engine.copiesFilesInOneSubmission == (kind == .uring && kernelIsAtLeast(5, 19)))
            let outcome = await copy(engine, dir.file("src"), dir.file("dst"), length: bytes.count, mode: 0o640)
            #expect(outcome == .copied)
            expectContent(dir.file("dst"), bytes)
            var status = stat()
            stat(dir.file("dst"), &status)
            #expect(status.st_mode & 0o777 == 0o640 & ~currentUmask())
            #expect(engine.copyLanesInUse == 0)
        }
    }

    @Test(arguments: EngineKind.allCases)
    func copiesEverySizeUpToTheLimit(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        // On the POSIX engine the bytes go through a pool thread's 128 KiB buffer: one more than it holds
        // ends in a second, short, round.
        let sizes = [1, 4095, 4096, 65537, (128 << 10) + 1, 1 << 20]
        let all = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) }
        try await withEngine(kind) { engine in
            for size in sizes {
                writeFile(dir.file("s\(size)"), Array(all[0..<size]))
                let outcome = await copy(engine, dir.file("s\(size)"), dir.file("d\(size)"), length: size)
                #expect(outcome == .copied, "size \(size)")
                expectContent(dir.file("d\(size)"), Array(all[0..<size]))
            }
        }
    }

    /// Into a file that may exist (no `O_EXCL`), the POSIX engine runs the steps as separate operations,
    /// through a buffer of 128 KiB a piece at a time: one more byte than a piece, and several pieces.
    @Test(arguments: EngineKind.allCases)
    func copiesEverySizeIntoAnExistingFile(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let sizes = [1, 128 << 10, (128 << 10) + 1, 1 << 20]
        let all = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ $0 >> 9) }
        try await withEngine(kind) { engine in
            for size in sizes {
                writeFile(dir.file("s\(size)"), Array(all[0..<size]))
                writeFile(dir.file("d\(size)"), [UInt8](repeating: 1, count: 3 << 20))
                let flags = O_WRONLY | O_CREAT | O_TRUNC
                let outcome = await copy(engine, dir.file("s\(size)"), dir.file("d\(size)"), length: size, flags: flags)
                #expect(outcome == .copied, "size \(size)")
                expectContent(dir.file("d\(size)"), Array(all[0..<size]))
            }
            // Shorter than its size said, in the second piece: not copied in part.
            let source = dir.file("s\((128 << 10) + 1)")
            let shrank = await copy(engine, source, dir.file("e"), length: (128 << 10) + 100, flags: O_WRONLY | O_CREAT)
            #expect(shrank == .incomplete)
            try await waitForSlots(engine)
        }
    }

    /// An empty file moves no bytes: the destination is made and the probe reads at offset 0, so a file
    /// whose size says 0 but that holds bytes (a /proc file) is not copied as empty.
    @Test(arguments: EngineKind.allCases)
    func anEmptyFileIsMadeAndOneThatHoldsBytesIsIncomplete(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        writeFile(dir.file("empty"), [])
        try await withEngine(kind) { engine in
            let outcome = await copy(engine, dir.file("empty"), dir.file("copy"), length: 0, mode: 0o604)
            #expect(outcome == .copied)
            expectContent(dir.file("copy"), [])
            var status = stat()
            stat(dir.file("copy"), &status)
            #expect(status.st_mode & 0o777 == 0o604 & ~currentUmask())
            let generated = await copy(engine, "/proc/self/stat", dir.file("proc"), length: 0)
            #expect(generated == .incomplete)
            let kept = await copy(engine, dir.file("empty"), dir.file("kept"), length: 0, keepOpen: true)
            if case .copiedOpen(let source, let destination) = kept {
                close(source)
                close(destination)
            } else {
                // Linked copies (5.19) that cannot install descriptors (before 6.8) leave it to the channels.
                #expect(kind == .uring && !kernelIsAtLeast(6, 8) && kept == .notStarted, "outcome \(kept)")
            }
            try await waitForSlots(engine)
        }
    }

    @Test(arguments: EngineKind.allCases)
    func namesAreResolvedInTheGivenDirectories(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        mkdir(dir.file("a"), 0o755)
        mkdir(dir.file("b"), 0o755)
        let bytes = Array("in a directory".utf8)
        let name = "copy-file-tests-\(getpid())"
        writeFile(dir.file("a/\(name)"), bytes)
        let sourceDirectory = open(dir.file("a"), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        let destinationDirectory = open(dir.file("b"), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer {
            close(sourceDirectory)
            close(destinationDirectory)
        }
        try await withEngine(kind) { engine in
            let outcome = await awaitCallback(orElse: FileCopyOutcome.failed(.openSource, .timedOut)) { deliver in
                engine.copyFile(
                    from: CPath(FilePath(name)),
                    in: sourceDirectory,
                    to: CPath(FilePath(name)),
                    in: destinationDirectory,
                    flags: O_WRONLY | O_CREAT | O_EXCL,
                    permissions: .ownerReadWrite,
                    length: bytes.count
                ) { deliver($0) }
            }
            #expect(outcome == .copied)
            expectContent(dir.file("b/\(name)"), bytes)
            // Not in the working directory, where a path without its directory would have put it.
            #expect(access(name, F_OK) != 0)
            // The same exclusive create again, in the same directory: it must find the file just made.
            let again = await awaitCallback(orElse: FileCopyOutcome.failed(.openSource, .timedOut)) { deliver in
                engine.copyFile(
                    from: CPath(FilePath(name)),
                    in: sourceDirectory,
                    to: CPath(FilePath(name)),
                    in: destinationDirectory,
                    flags: O_WRONLY | O_CREAT | O_EXCL,
                    permissions: .ownerReadWrite,
                    length: bytes.count
                ) { deliver($0) }
            }
            #expect(again == .failed(.openDestination, .fileExists))
            try await waitForSlots(engine)
        }
    }

    /// Kept open (dcopy -p: `fchown`, `fchmod` and `futimens` need the files), a copy ends with both files
    /// on ordinary descriptors: the chain installs its registered ones (Linux 6.8), the separate steps do
    /// not close theirs. A copy that did not end so leaves no descriptor behind (the suite checks).
    @Test(arguments: EngineKind.allCases)
    func aCopyKeptOpenEndsWithBothDescriptors(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let bytes = (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        writeFile(dir.file("src"), bytes)
        try await withEngine(kind) { engine in
            let outcome = await copy(engine, dir.file("src"), dir.file("dst"), length: bytes.count, keepOpen: true)
            // Linked copies (5.19) that cannot install descriptors (before 6.8) leave it to the channels.
            if kind == .uring && kernelIsAtLeast(5, 19) && !kernelIsAtLeast(6, 8) {
                #expect(outcome == .notStarted)
                return
            }
            guard case .copiedOpen(let source, let destination) = outcome else {
                Issue.record("outcome \(outcome)")
                return
            }
            defer {
                close(source)
                close(destination)
            }
            expectContent(dir.file("dst"), bytes)
            for fd in [source, destination] { #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0) }
            // The POSIX engine opens the source without blocking (see the FIFO test) and must clear that.
            #expect(fcntl(source, F_GETFL) & O_NONBLOCK == 0)
            // The very files: the source's descriptor reads it, the destination's sets its mode.
            var first: UInt8 = 0xFF
            #expect(pread(source, &first, 1, 1) == 1 && first == bytes[1])
            #expect(fchmod(destination, 0o600) == 0)
            var status = stat()
            stat(dir.file("dst"), &status)
            #expect(status.st_mode & 0o777 == 0o600)
            #expect(engine.copyLanesInUse == 0)
            // A source that is longer than asked: not copied whole, and nothing left open.
            let grown = await copy(engine, dir.file("src"), dir.file("dst2"), length: 100, keepOpen: true)
            #expect(grown == .incomplete)
            try await waitForSlots(engine)
        }
    }

    /// A FIFO put in the source's place since its size was taken: the POSIX engine's pool thread opens it
    /// without waiting for a writer, makes nothing, and leaves it to the caller. Opened as a plain read, it
    /// would hold the thread until a writer came, and shutdown with it. (The ring's chain waits too, in
    /// io_uring's worker: not run there.)
    @Test func aFIFOInTheSourcesPlaceIsLeftToTheCallerOnThePOSIXEngine() async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let fifo = dir.file("fifo")
        #expect(mkfifo(fifo, 0o644) == 0)
        try await withEngine(.posix) { engine in
            let outcome = await awaitCallback(.seconds(5), orElse: FileCopyOutcome.failed(.openSource, .timedOut)) {
                deliver in
                engine.copyFile(
                    from: CPath(FilePath(fifo)),
                    to: CPath(FilePath(dir.file("dst"))),
                    flags: O_WRONLY | O_CREAT | O_EXCL,
                    permissions: .ownerReadWrite,
                    length: 10
                ) { deliver($0) }
            }
            // A copy still waiting in its open gets a writer, so that the engine can shut down and the
            // test fail rather than hang.
            let writer = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            if writer >= 0 { close(writer) }
            #expect(outcome == .notStarted)
            #expect(access(dir.file("dst"), F_OK) != 0)
        }
    }

    /// A source under another process's write lease (Samba's oplocks, NFS delegations): a plain open waits
    /// until the holder gives the lease up, as cp's does. The POSIX engine's pool thread, which opens
    /// without blocking, took the `EWOULDBLOCK` for the copy's failure (helper-54); it leaves such a file
    /// to the caller now, whose ordinary open waits.
    @Test func aSourceUnderALeaseIsLeftToTheCallerOnThePOSIXEngine() async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let bytes = Array("leased".utf8)
        writeFile(dir.file("src"), bytes)
        let holder = open(dir.file("src"), O_RDONLY | O_CLOEXEC)
        defer { close(holder) }
        // The lease's break is signalled to its holder, this process: SIGURG, which is ignored by default,
        // instead of SIGIO, which would end it.
        #expect(fcntl(holder, setSignal, SIGURG) == 0)
        // A write lease needs the file's owner (this process made it) and no other descriptor open on it.
        try #require(fcntl(holder, setLease, CInt(F_WRLCK)) == 0)
        defer { _ = fcntl(holder, setLease, CInt(F_UNLCK)) }
        try await withEngine(.posix) { engine in
            let outcome = await copy(engine, dir.file("src"), dir.file("dst"), length: bytes.count)
            #expect(outcome == .notStarted)
            #expect(access(dir.file("dst"), F_OK) != 0)
        }
    }

    @Test(arguments: EngineKind.allCases)
    func aMissingSourceCreatesNothing(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        try await withEngine(kind) { engine in
            let outcome = await copy(engine, dir.file("none"), dir.file("dst"), length: 10)
            #expect(outcome == .failed(.openSource, .noSuchFileOrDirectory))
            #expect(access(dir.file("dst"), F_OK) != 0)
            // Nothing was opened, so the lane is back by the time the handler runs (no closes to wait for).
            #expect(engine.copyLanesInUse == 0)
        }
    }

    @Test(arguments: EngineKind.allCases)
    func anExclusiveCreateLeavesAnExistingDestinationAlone(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        writeFile(dir.file("src"), Array("new".utf8))
        writeFile(dir.file("dst"), Array("old".utf8))
        try await withEngine(kind) { engine in
            let outcome = await copy(engine, dir.file("src"), dir.file("dst"), length: 3)
            #expect(outcome == .failed(.openDestination, .fileExists))
            expectContent(dir.file("dst"), Array("old".utf8))
            // The source was open in its slot when the chain stopped: the lane must come back.
            try await waitForSlots(engine)
        }
    }

    @Test(arguments: EngineKind.allCases)
    func aSourceOfAnotherSizeIsReportedNotCopiedInPart(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        writeFile(dir.file("src"), [UInt8](repeating: 9, count: 5000))
        writeFile(dir.file("other"), [UInt8](repeating: 7, count: 3000))
        try await withEngine(kind) { engine in
            // Shrank since its size was taken: the read comes back short.
            let shrank = await copy(engine, dir.file("src"), dir.file("a"), length: 6000)
            #expect(shrank == .incomplete)
            // Grew: the byte past the expected end is there.
            let grew = await copy(engine, dir.file("src"), dir.file("b"), length: 4000)
            #expect(grew == .incomplete)
            // Exactly the size: the end is where it was expected.
            let same = await copy(engine, dir.file("src"), dir.file("c"), length: 5000)
            #expect(same == .copied)
            // On io_uring, a copy that came back short left bytes in its lane's pipe, and the next copy
            // runs in that lane: it must not see them.
            _ = await copy(engine, dir.file("src"), dir.file("d"), length: 6000)
            try await waitForSlots(engine)
            let next = await copy(engine, dir.file("other"), dir.file("e"), length: 3000)
            #expect(next == .copied)
            expectContent(dir.file("e"), [UInt8](repeating: 7, count: 3000))
            try await waitForSlots(engine)
        }
    }

    @Test(arguments: EngineKind.allCases)
    func readAndWriteErrorsNameTheirStepOrAreLeftToTheOrdinaryPath(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        writeFile(dir.file("src"), [UInt8](repeating: 1, count: 100))
        try await withEngine(kind) { engine in
            // A directory opens for reading; reading it fails. The ring splices, which cannot say why
            // (EINVAL), so it leaves the error to the caller's ordinary read; the POSIX engine takes only
            // a regular file whole, and leaves any other to the caller before making the destination.
            let read = await copy(engine, dir.path, dir.file("dst"), length: 100)
            let linked = engine.copiesFilesInOneSubmission
            #expect(read == (kind == .posix ? .notStarted : linked ? .incomplete : .failed(.read, .isDirectory)))
            #expect(kind != .posix || access(dir.file("dst"), F_OK) != 0)
            // /dev/full cannot be spliced into either; a write reports that it is full.
            let written = await copy(engine, dir.file("src"), "/dev/full", length: 100, flags: O_WRONLY)
            #expect(written == (linked ? .incomplete : .failed(.write, .noSpace)))
            try await waitForSlots(engine)
        }
    }

    @Test(arguments: EngineKind.allCases)
    func closeOnExecIsAcceptedInTheFlags(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        writeFile(dir.file("src"), Array("bytes".utf8))
        try await withEngine(kind) { engine in
            // Registered descriptors refuse O_CLOEXEC; the engine must leave it out there, not fail.
            let outcome = await copy(
                engine,
                dir.file("src"),
                dir.file("dst"),
                length: 5,
                flags: O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC
            )
            #expect(outcome == .copied)
            expectContent(dir.file("dst"), Array("bytes".utf8))
        }
    }

    /// The kernel refuses a registered-descriptor table larger than `RLIMIT_NOFILE`. Under a soft limit of
    /// 200 the engine asked for its 256 slots and got `EMFILE`; liburing then raised the process's soft limit
    /// to 256 behind its back, or, under `ulimit -n 200` (the hard limit too), gave up, and every small
    /// file's copy became separate steps. The table must fit the limit and the limit must stay as it was.
    @Test(.enabled(if: kernelIsAtLeast(5, 19)))
    func aLowDescriptorLimitKeepsLinkedCopiesAndTheLimit() async throws {
        var saved = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &saved)
        var lowered = saved
        lowered.rlim_cur = 200
        try #require(setrlimit(Int32(RLIMIT_NOFILE.rawValue), &lowered) == 0)
        let engine: IOEngine
        var after = rlimit()
        do {
            defer { setrlimit(Int32(RLIMIT_NOFILE.rawValue), &saved) }
            engine = try IOEngine(kind: .uring)
            getrlimit(Int32(RLIMIT_NOFILE.rawValue), &after)
        }
        defer { engine.shutdown() }
        #expect(after.rlim_cur == 200)
        #expect(engine.copiesFilesInOneSubmission)
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        writeFile(dir.file("src"), Array("under a low limit".utf8))
        let outcome = await copy(engine, dir.file("src"), dir.file("dst"), length: 17)
        #expect(outcome == .copied)
        expectContent(dir.file("dst"), Array("under a low limit".utf8))
    }

    @Test(arguments: EngineKind.allCases)
    func aCopyAfterShutdownFailsWithoutTouchingAnything(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        writeFile(dir.file("src"), Array("bytes".utf8))
        let engine = try IOEngine(kind: kind)
        engine.shutdown()
        let outcome = await copy(engine, dir.file("src"), dir.file("dst"), length: 5)
        #expect(outcome == .failed(.openSource, .socketShutdown))
        #expect(access(dir.file("dst"), F_OK) != 0)
    }

    /// More copies at once than the engine has slots for: the rest wait for slots, and all complete.
    @Test(arguments: EngineKind.allCases)
    func manyCopiesAtOnceAllComplete(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let count = 100
        for index in 0..<count { writeFile(dir.file("s\(index)"), Array("file \(index)".utf8)) }
        try await withEngine(kind) { engine in
            let outcomes = await withTaskGroup(of: FileCopyOutcome.self) { group in
                for index in 0..<count {
                    let length = "file \(index)".utf8.count
                    group.addTask { await copy(engine, dir.file("s\(index)"), dir.file("d\(index)"), length: length) }
                }
                return await group.reduce(into: [FileCopyOutcome]()) { $0.append($1) }
            }
            #expect(outcomes == [FileCopyOutcome](repeating: .copied, count: count))
            for index in 0..<count { expectContent(dir.file("d\(index)"), Array("file \(index)".utf8)) }
            #expect(engine.copyLanesInUse == 0)
        }
    }

    /// Files that fit a default pipe (64 KiB) and files that need a grown one, more of both at once than
    /// there are lanes of either kind: each waits for a lane it fits in, none is refused (`.notStarted`)
    /// for having been given a lane whose pipe is too small, and all complete.
    @Test(arguments: EngineKind.allCases)
    func smallAndLargeCopiesAtOnceAllComplete(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let sizes = [10, 64 << 10, (64 << 10) + 1, IOEngine.wholeFileCopyLimit]
        // 24 of each size: more than the 32 lanes of either kind, with 48 needing a large one.
        let count = 96
        let pattern = (0..<IOEngine.wholeFileCopyLimit + count).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        func bytes(_ index: Int) -> [UInt8] { Array(pattern[index..<index + sizes[index % sizes.count]]) }
        for index in 0..<count { writeFile(dir.file("s\(index)"), bytes(index)) }
        try await withEngine(kind) { engine in
            let outcomes = await withTaskGroup(of: FileCopyOutcome.self) { group in
                for index in 0..<count {
                    let length = sizes[index % sizes.count]
                    group.addTask { await copy(engine, dir.file("s\(index)"), dir.file("d\(index)"), length: length) }
                }
                return await group.reduce(into: [FileCopyOutcome]()) { $0.append($1) }
            }
            #expect(outcomes == [FileCopyOutcome](repeating: .copied, count: count))
            for index in 0..<count { expectContent(dir.file("d\(index)"), bytes(index)) }
            #expect(engine.copyLanesInUse == 0)
        }
    }
}

private func copy(
    _ engine: IOEngine,
    _ source: String,
    _ destination: String,
    length: Int,
    mode: CModeT = 0o644,
    flags: CInt = O_WRONLY | O_CREAT | O_EXCL,
    keepOpen: Bool = false
) async -> FileCopyOutcome {
    await awaitCallback(orElse: .failed(.openSource, .timedOut)) { deliver in
        engine.copyFile(
            from: CPath(FilePath(source)),
            to: CPath(FilePath(destination)),
            flags: flags,
            permissions: FilePermissions(rawValue: mode),
            length: length,
            keepOpen: keepOpen
        ) { deliver($0) }
    }
}

/// A failed linked copy gives its lane back once the closes it issues complete, shortly after its
/// handler ran.
private func waitForSlots(_ engine: IOEngine) async throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while engine.copyLanesInUse != 0 && ContinuousClock.now < deadline {
        _ = await complete { engine.nop(then: $0) }
    }
    #expect(engine.copyLanesInUse == 0)
}

private func writeFile(_ path: String, _ bytes: [UInt8]) {
    let fd = openFile(path)
    defer { close(fd) }
    let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    precondition(written == bytes.count)
}

/// Compares a file with the bytes it should hold, and records a short issue (the first differing offset)
/// instead of printing both arrays.
private func expectContent(_ path: String, _ expected: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
    let actual = readFile(path)
    guard actual != expected else { return }
    let first =
        zip(actual, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        ?? min(actual.count, expected.count)
    Issue.record(
        "\(path): \(actual.count) bytes where \(expected.count) were expected, first difference at \(first)",
        sourceLocation: sourceLocation
    )
}

private func readFile(_ path: String) -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return [] }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n <= 0 { return bytes }
        bytes += chunk[0..<n]
    }
}

/// `F_SETLEASE` and `F_SETSIG` (`_GNU_SOURCE`, which the Glibc module leaves out).
private let setLease: CInt = 1024
private let setSignal: CInt = 10

/// Whether the running kernel's release (`uname -r`) is at least `major.minor`.
private func kernelIsAtLeast(_ major: Int, _ minor: Int) -> Bool {
    var name = utsname()
    uname(&name)
    let release = withUnsafeBytes(of: name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    let numbers = release.split(whereSeparator: { !$0.isNumber }).prefix(2).compactMap { Int($0) }
    guard numbers.count == 2 else { return false }
    return (numbers[0], numbers[1]) >= (major, minor)
}

private func currentUmask() -> mode_t {
    let mask = umask(0)
    umask(mask)
    return mask
}
