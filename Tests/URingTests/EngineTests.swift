import Synchronization
import SystemPackage
import Testing
import URing

#if canImport(Glibc)
import Glibc
#endif

/// Every test runs on both engines; the suite checks that it leaks no descriptor.
@Suite(.serialized, .noDescriptorLeaks, .timeLimit(.minutes(1)))
struct EngineTests {
    // MARK: Round trips

    @Test(arguments: EngineKind.allCases)
    func nopCompletesWithZero(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let completion = await complete { engine.nop(then: $0) }
            #expect(completion == IOCompletion(result: 0))
        }
    }

    /// The engine's threads take 1 MiB of address space for their stacks, not the default 8 (`RLIMIT_STACK`):
    /// under `ulimit -v` the POSIX engine's six default stacks were 48 of dcat's 70 MB (helper-62, helper-63).
    @Test(arguments: EngineKind.allCases)
    func completionsRunOnThreadsWithTheEnginesStackSize(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            // An address on the stack of the thread the completion runs on, which the engine keeps.
            let address = await awaitCallback(orElse: UInt(0)) { deliver in
                _ = engine.nop { _ in
                    var local = 0
                    withUnsafeMutablePointer(to: &local) { deliver(UInt(bitPattern: $0)) }
                }
            }
            // The stack's mapping, below its guard page.
            let size = try #require(mapping(containing: address))
            #expect(size > 0 && size <= engineThreadStackSize, "\(size) bytes")
        }
    }

    @Test(arguments: EngineKind.allCases)
    func fileWriteAndReadAtOffsets(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        try await withEngine(kind) { engine in
            let fd = openFile(dir.file("f"))
            defer { close(fd) }
            let data = Buffer(Array("hello, ring".utf8))
            let written = await complete {
                engine.write(fd, from: UnsafeRawBufferPointer(data.slice(11)), at: 100, keepAlive: data, then: $0)
            }
            #expect(written == IOCompletion(result: 11))
            let into = Buffer(count: 64)
            let read = await complete { engine.read(fd, into: into.slice(5), at: 107, keepAlive: into, then: $0) }
            #expect(read == IOCompletion(result: 4))  // only 4 bytes before end of file
            #expect(into.array(4) == Array("ring".utf8))
            let hole = await complete { engine.read(fd, into: into.slice(3), at: 0, keepAlive: into, then: $0) }
            #expect(hole.result == 3)
            #expect(into.array(3) == [0, 0, 0])
            let eof = await complete { engine.read(fd, into: into.slice(8), at: 111, keepAlive: into, then: $0) }
            #expect(eof == IOCompletion(result: 0))
        }
    }

    @Test(arguments: EngineKind.allCases)
    func currentPositionAdvances(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        try await withEngine(kind) { engine in
            let fd = openFile(dir.file("f"))
            defer { close(fd) }
            let a = Buffer(Array("abc".utf8))
            let b = Buffer(Array("def".utf8))
            _ = await complete {
                engine.write(fd, from: UnsafeRawBufferPointer(a.slice(3)), at: nil, keepAlive: a, then: $0)
            }
            _ = await complete {
                engine.write(fd, from: UnsafeRawBufferPointer(b.slice(3)), at: nil, keepAlive: b, then: $0)
            }
            #expect(lseek(fd, 0, SEEK_CUR) == 6)
            lseek(fd, 2, SEEK_SET)
            let into = Buffer(count: 8)
            let read = await complete { engine.read(fd, into: into.slice(8), at: nil, keepAlive: into, then: $0) }
            #expect(read.result == 4)
            #expect(into.array(4) == Array("cdef".utf8))
            #expect(lseek(fd, 0, SEEK_CUR) == 6)
        }
    }

    @Test(arguments: EngineKind.allCases)
    func vectoredWriteAndRead(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        try await withEngine(kind) { engine in
            let fd = openFile(dir.file("f"))
            defer { close(fd) }
            let one = Buffer(Array("one-".utf8))
            let two = Buffer(Array("two-".utf8))
            let three = Buffer(Array("three".utf8))
            let pieces = [one.slice(4), two.slice(4), three.slice(5)].map { UnsafeRawBufferPointer($0) }
            let written = await complete { engine.writev(fd, from: pieces, at: 0, keepAlive: nil, then: $0) }
            #expect(written == IOCompletion(result: 13))
            let x = Buffer(count: 6)
            let y = Buffer(count: 16)
            let read = await complete {
                engine.readv(fd, into: [x.slice(6), y.slice(16)], at: 0, keepAlive: y, then: $0)
            }
            #expect(read == IOCompletion(result: 13))
            #expect(x.array(6) + y.array(7) == Array("one-two-three".utf8))
            withExtendedLifetime((one, two, three, x)) {}
        }
    }

    @Test(arguments: EngineKind.allCases)
    func pipeRoundTripWithPendingRead(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let pipe = Pipe()
            defer { pipe.close() }
            let into = Buffer(count: 16)
            // The read is submitted before anything is written: it must wait, not fail or block a thread.
            let read = Pending { engine.read(pipe.read, into: into.slice(16), at: nil, keepAlive: into, then: $0) }
            _ = await complete { engine.nop(then: $0) }
            #expect(!read.isDone)
            let data = Buffer(Array("ping".utf8))
            let written = await complete {
                engine.write(
                    pipe.write,
                    from: UnsafeRawBufferPointer(data.slice(4)),
                    at: nil,
                    keepAlive: data,
                    then: $0
                )
            }
            #expect(written.result == 4)
            #expect(await read.value == IOCompletion(result: 4))
            #expect(into.array(4) == Array("ping".utf8))
        }
    }

    @Test(arguments: EngineKind.allCases)
    func socketPairRoundTrip(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let (a, b) = socketPair()
            defer {
                close(a)
                close(b)
            }
            let data = Buffer(Array("over a socket".utf8))
            let written = await complete {
                engine.write(a, from: UnsafeRawBufferPointer(data.slice(13)), at: nil, keepAlive: data, then: $0)
            }
            #expect(written.result == 13)
            let into = Buffer(count: 64)
            let read = await complete { engine.read(b, into: into.slice(64), at: nil, keepAlive: into, then: $0) }
            #expect(read.result == 13)
            #expect(into.array(13) == Array("over a socket".utf8))
        }
    }

    @Test(arguments: EngineKind.allCases)
    func nonBlockingPipeWaitsForReadinessInsteadOfEAGAIN(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let pipe = Pipe(nonBlocking: true)
            defer { pipe.close() }
            let into = Buffer(count: 8)
            let read = Pending { engine.read(pipe.read, into: into.slice(8), at: nil, keepAlive: into, then: $0) }
            // Let the read reach the kernel and see EAGAIN before the data arrives.
            _ = await complete { engine.nop(then: $0) }
            #expect(!read.isDone)
            #expect(write(pipe.write, "late", 4) == 4)
            #expect(await read.value == IOCompletion(result: 4))
        }
    }

    @Test(arguments: EngineKind.allCases)
    func writeLargerThanPipeCompletesWhileReaderDrains(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let pipe = Pipe(nonBlocking: true)
            defer { pipe.close() }
            let size = 1 << 20  // 16 times the pipe's capacity: short writes and EAGAIN both happen
            let data = Buffer(count: size)
            for index in 0..<size { data.bytes[index] = UInt8(truncatingIfNeeded: index &* 7) }
            let written = Pending {
                engine.write(pipe.write, from: UnsafeRawBufferPointer(data.bytes), at: nil, keepAlive: data, then: $0)
            }
            var received: [UInt8] = []
            let chunk = Buffer(count: 65536)
            while received.count < size {
                let read = await complete {
                    engine.read(pipe.read, into: chunk.slice(65536), at: nil, keepAlive: chunk, then: $0)
                }
                #expect(read.error == nil)
                if read.result == 0 { break }
                received += chunk.array(read.result)
            }
            #expect(await written.value == IOCompletion(result: size))
            #expect(received == Array(data.bytes))
        }
    }

    /// The engine lets go of what keeps a request's memory alive before it calls the handler, and holds
    /// the only reference: a handler that starts more work on another thread found the written buffer still
    /// alive beside the next read's (dcat on the POSIX engine held 12 pooled megabytes where its windows
    /// account for 6).
    @Test(arguments: EngineKind.allCases)
    func memoryKeptAliveIsLetGoOfBeforeTheHandler(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        try await withEngine(kind) { engine in
            let fd = openFile(dir.file("f"))
            defer { close(fd) }
            let bytes = Buffer(Array("kept alive".utf8))
            let released = Locked(0)
            let seen = await awaitCallback(orElse: -1) { report in
                engine.write(
                    fd,
                    from: UnsafeRawBufferPointer(bytes.slice(10)),
                    at: 0,
                    keepAlive: ReleaseWatch { released.withLock { $0 += 1 } },
                    then: { _ in report(released.withLock { $0 }) }
                )
            }
            let vector = await awaitCallback(orElse: -1) { report in
                engine.writev(
                    fd,
                    from: [UnsafeRawBufferPointer(bytes.slice(4)), UnsafeRawBufferPointer(bytes.slice(6))],
                    at: 10,
                    keepAlive: ReleaseWatch { released.withLock { $0 += 1 } },
                    then: { _ in report(released.withLock { $0 }) }
                )
            }
            #expect(seen == 1)
            #expect(vector == 2)
        }
    }

    // MARK: Files: open, stat, fsync, close

    @Test(arguments: EngineKind.allCases)
    func openStatFsyncClose(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        try await withEngine(kind) { engine in
            let opened = await complete {
                engine.openat(
                    path: FilePath(dir.file("new")),
                    flags: O_RDWR | O_CREAT | O_EXCL,
                    permissions: [.ownerReadWrite],
                    then: $0
                )
            }
            #expect(opened.error == nil)
            let fd = CInt(opened.result)
            #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0)
            let data = Buffer(count: 1000, fill: 0x5A)
            _ = await complete {
                engine.write(fd, from: UnsafeRawBufferPointer(data.bytes), at: 0, keepAlive: data, then: $0)
            }
            #expect(await complete { engine.fsync(fd, then: $0) } == IOCompletion(result: 0))
            #expect(await complete { engine.fsync(fd, dataOnly: true, then: $0) } == IOCompletion(result: 0))
            let status = await awaitCallback(orElse: .failure(.timedOut)) { c in
                engine.stat(path: FilePath(dir.file("new"))) { c($0) }
            }
            let st = try status.get()
            #expect(st.size == 1000)
            #expect(st.isRegularFile)
            #expect(st.mode & 0o777 == 0o600)
            let viaFD = await awaitCallback(orElse: .failure(.timedOut)) { c in
                engine.stat(fd, path: "", flags: IOEngine.emptyPathFlag) { c($0) }
            }
            #expect(try viaFD.get().inode == st.inode)
            #expect(await complete { engine.close(fd, then: $0) } == IOCompletion(result: 0))
            #expect(fcntl(fd, F_GETFD) == -1 && errno == EBADF)
        }
    }

    /// An open that refuses magic links (`openat2`'s `RESOLVE_NO_MAGICLINKS`) opens an ordinary path, with
    /// its flags and mode, and fails with `ELOOP` through `/proc/self/fd/N` or a link to it: dcopy opens
    /// existing destinations so, since such a name may reach a file of its own.
    @Test(arguments: EngineKind.allCases)
    func anOpenRefusingMagicLinks(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        try await withEngine(kind) { engine in
            let opened = await complete {
                engine.openat(
                    path: FilePath(dir.file("new")),
                    flags: O_WRONLY | O_CREAT | O_EXCL,
                    permissions: [.ownerReadWrite],
                    refusingMagicLinks: true,
                    then: $0
                )
            }
            #expect(opened.error == nil)
            let fd = CInt(opened.result)
            #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0)
            #expect(fcntl(fd, F_GETFL) & O_ACCMODE == O_WRONLY)
            var info = stat()
            #expect(fstat(fd, &info) == 0 && info.st_mode & 0o777 == 0o600)
            #expect(symlink("/proc/self/fd/\(fd)", dir.file("link")) == 0)
            for path in ["/proc/self/fd/\(fd)", dir.file("link")] {
                let refused = await complete {
                    engine.openat(path: FilePath(path), flags: O_WRONLY | O_TRUNC, refusingMagicLinks: true, then: $0)
                }
                #expect(refused.error == .tooManySymbolicLinkLevels)
            }
            let plain = await complete { engine.openat(path: FilePath(dir.file("link")), flags: O_RDONLY, then: $0) }
            #expect(plain.error == nil)
            if plain.error == nil { close(CInt(plain.result)) }
            close(fd)
        }
    }

    /// An open without `O_NONBLOCK` waits as `openat(2)` does: a FIFO's reader until a writer comes.
    /// io_uring's inline attempt adds `O_NONBLOCK`, which opened it at once (and for writing failed with
    /// `ENXIO`): `dcopy fifo out` made `out` before anything was written to the FIFO, where cp waits.
    @Test(arguments: EngineKind.allCases)
    func openingAFIFOWaitsForAWriter(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let fifo = dir.file("fifo")
        try #require(mkfifo(fifo, 0o600) == 0)
        try await withEngine(kind) { engine in
            let open = Pending { engine.openat(path: FilePath(fifo), flags: O_RDONLY, then: $0) }
            // No writer yet: the open must still be waiting. A wrong one completes at once; half a second
            // is its chance to show it (a right one cannot complete here, however slow the machine).
            try await Task.sleep(for: .milliseconds(500))
            #expect(!open.isDone)
            // Blocks until a reader has the FIFO open: the engine's waiting open.
            let writer = Glibc.open(fifo, O_WRONLY | O_CLOEXEC)
            try #require(writer >= 0)
            defer { close(writer) }
            let result = await open.value
            #expect(result.error == nil)
            let reader = CInt(result.result)
            defer { close(reader) }
            var byte: UInt8 = 0x7A
            #expect(write(writer, &byte, 1) == 1)
            byte = 0
            #expect(read(reader, &byte, 1) == 1 && byte == 0x7A)
        }
    }

    /// An open waiting for a FIFO's writer can be cancelled, and an engine shuts down while one waits: the
    /// POSIX engine cannot interrupt the system call, so it completes the open with ECANCELED and leaves the
    /// thread behind (the engine's shutdown used to wait for a writer that never came).
    @Test(arguments: EngineKind.allCases)
    func aWaitingOpenIsCancelledAndDoesNotHoldUpShutdown(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let fifo = dir.file("fifo")
        try #require(mkfifo(fifo, 0o600) == 0)
        let engine = try IOEngine(kind: kind)
        defer { engine.shutdown() }  // (idempotent: for a failed requirement)
        let before = threadsWaitingForAFIFOPeer()
        let cancelled = Pending { engine.openat(path: FilePath(fifo), flags: O_RDONLY, then: $0) }
        await waitForThreadsWaitingForAFIFOPeer(before + 1)
        engine.cancel(try #require(cancelled.id)) { _ in }
        #expect(await cancelled.value.error == .canceled)

        // The POSIX engine's first open still waits, given up; io_uring's was interrupted.
        let stillWaiting = threadsWaitingForAFIFOPeer()
        let waiting = Pending { engine.openat(path: FilePath(fifo), flags: O_RDONLY, then: $0) }
        await waitForThreadsWaitingForAFIFOPeer(stillWaiting + 1)
        let finished = await awaitCallback(.seconds(10), orElse: false) { done in
            Thread.detach {
                engine.shutdown()
                done(true)
            }
        }
        #expect(finished)
        #expect(await waiting.value.error == .canceled)
        // A writer lets the opens left waiting return; their descriptors are closed unseen.
        let writer = Glibc.open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
        if writer >= 0 { close(writer) }
    }

    /// A cancel (or a poll's or timeout's removal) made in a completion handler, on the ring thread, for a
    /// request another thread submitted just before: the request was still waiting to be handed to the
    /// kernel when the cancel was, the cancel found nothing, and the read then waited on its pipe for ever.
    @Test(arguments: EngineKind.allCases, Withdrawal.allCases)
    func aWithdrawalOvertakingItsTargetStillWithdrawsIt(kind: EngineKind, withdrawal: Withdrawal) async throws {
        try await withEngine(kind) { engine in
            let pipe = Pipe()
            defer { pipe.close() }
            let buffer = Buffer(count: 8)
            let target = Locked<Pending?>(nil)
            let withdrawing = Locked<Pending?>(nil)
            _ = await complete { done in
                engine.nop { completion in
                    // On the engine's thread: another thread submits the target, and this one withdraws it
                    // before returning to the loop that hands either to the kernel.
                    Thread.detach {
                        let submitted = Pending { handler in
                            switch withdrawal {
                            case .cancel:
                                engine.read(pipe.read, into: buffer.slice(8), at: nil, keepAlive: buffer, then: handler)
                            case .removePoll: engine.poll(pipe.read, events: .readable, then: handler)
                            case .removeTimeout: engine.timeout(deadline: .now + .seconds(60), then: handler)
                            }
                        }
                        target.withLock { $0 = submitted }
                    }
                    // The submission is an append under a lock; nothing here waits for this thread.
                    while target.withLock({ $0 == nil }) { sched_yield() }
                    if let id = target.withLock({ $0?.id }) {
                        let withdrawal = Pending { handler in
                            switch withdrawal {
                            case .cancel: engine.cancel(id, then: handler)
                            case .removePoll: engine.removePoll(id, then: handler)
                            case .removeTimeout: engine.removeTimeout(id, then: handler)
                            }
                        }
                        withdrawing.withLock { $0 = withdrawal }
                    }
                    done(completion)
                }
            }
            let submitted = try #require(target.withLock { $0 })
            #expect(await submitted.value.error == .canceled)
            // io_uring: the withdrawal found its target before the kernel had it, and says so as for any
            // request not yet started. (The POSIX engine's pool may already be running a read: EALREADY.)
            let withdrawn = try #require(withdrawing.withLock { $0 })
            let result = await withdrawn.value
            if kind == .uring { #expect(result == IOCompletion(result: 0)) }
        }
    }

    enum Withdrawal: CaseIterable, Sendable { case cancel, removePoll, removeTimeout }

    /// Threads of this process in `open` of a FIFO that waits for its other end (`wait_for_partner`).
    private func threadsWaitingForAFIFOPeer() -> Int {
        threadFiles("wchan").values.filter { $0 == "wait_for_partner" }.count
    }

    /// Waits, for at most 10 s, until `count` threads wait in a FIFO's open: the open is then in its system
    /// call, not queued. (Where `wchan` tells nothing, the test goes on after the 10 s.)
    private func waitForThreadsWaitingForAFIFOPeer(_ count: Int) async {
        await poll { threadsWaitingForAFIFOPeer() >= count }
    }

    /// Checks `condition` every millisecond until it holds or 10 s have passed: for the kernel's state of
    /// this process's threads, which sends no event to wait for.
    private func poll(until condition: () -> Bool) async {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(1))
        }
    }

    /// The io_uring engine has the kernel start its ring's first worker at once, beside the caller's own
    /// start-up: the first request the kernel cannot run inline (a read of a tmpfs file) then does not wait
    /// for a thread to be made. io_uring names a thread's workers `iou-wrk-<its thread ID>`. (A worker of
    /// another engine made meanwhile would pass this too: the package's tests run one at a time,
    /// `--no-parallel`.)
    @Test func theRingsFirstWorkerStartsWithTheEngine() async throws {
        let before = Set(threadFiles("comm").keys)
        let engine = try IOEngine(kind: .uring)
        defer { engine.shutdown() }
        func workerOfANewThread() -> Bool {
            let threads = threadFiles("comm")
            let workers = Set(threads.keys.filter { !before.contains($0) }.map { "iou-wrk-\($0)" })
            return threads.values.contains { workers.contains($0) }
        }
        // Nothing is submitted, so only the engine's own start can make the worker.
        await poll(until: workerOfANewThread)
        #expect(workerOfANewThread(), "no io_uring worker named after the engine's ring thread")
    }

    /// An engine made with one descriptor left under the process's limit has that one free again when
    /// `init` returns, although the ring took it: `init` waits there for the ring thread, which closes the
    /// ring's descriptor (dcat opens its file right after making the engine, at `ulimit -n 4`). With
    /// descriptors to spare it does not wait. The limit here is over 64, so that the probe for a spare
    /// descriptor, not the rule for low limits, has to see the scarcity.
    @Test(.enabled(if: kernelAtLeast(6, 8), "before 6.8 the engine also needs an eventfd"))
    func anEngineMadeAtTheDescriptorLimitLeavesTheLastOneFree() throws {
        let resource = Int32(RLIMIT_NOFILE.rawValue)
        var saved = rlimit()
        try #require(getrlimit(resource, &saved) == 0)
        var low = saved
        low.rlim_cur = rlim_t(max(128, openDescriptorCount() + 64))
        try #require(low.rlim_cur <= saved.rlim_max && setrlimit(resource, &low) == 0)
        defer { _ = setrlimit(resource, &saved) }
        // Every number under the limit taken, then one given back.
        var fillers: [CInt] = []
        defer { for fd in fillers { close(fd) } }
        while true {
            let fd = Glibc.open("/dev/null", O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { break }
            fillers.append(fd)
        }
        try #require(errno == EMFILE && !fillers.isEmpty)
        close(fillers.removeLast())
        let engine = try IOEngine(kind: .uring)
        defer { engine.shutdown() }
        let opened = Glibc.open("/dev/null", O_RDONLY | O_CLOEXEC)
        #expect(opened >= 0, "the ring's descriptor was still open: \(Errno(rawValue: errno))")
        if opened >= 0 { close(opened) }
    }

    /// The processor count the pools size themselves by is the process's affinity, as the kernel shows it
    /// in `/proc/self/status`. (Under `taskset -c 0` this tells it from the count of online CPUs.)
    @Test func theProcessorCountIsTheAffinityMasks() throws {
        let fd = Glibc.open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 8192)
        let n = read(fd, &buffer, buffer.count)
        try #require(n > 0)
        let status = String(decoding: buffer[..<n], as: UTF8.self)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed:") })
        let mask = line.dropFirst("Cpus_allowed:".count).filter(\.isHexDigit)
        let allowed = mask.reduce(0) { $0 + Int(String($1), radix: 16)!.nonzeroBitCount }
        #expect(usableProcessorCount() == allowed)
    }

    /// The initial thread is told by its thread id: a thread the test starts is never it, the only thread of
    /// a forked child always is, and the test's own thread is it exactly when the id `/proc/thread-self`
    /// names is the process id. (The main-queue `sync` check of DispatchQueues stands on this.)
    @Test func theInitialThreadIsToldByItsThreadID() throws {
        var buffer = [CChar](repeating: 0, count: 64)
        let count = readlink("/proc/thread-self", &buffer, buffer.count - 1)
        try #require(count > 0)
        let link = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let here = try #require(link.split(separator: "/").last.flatMap { Int32($0) })
        #expect(isProcessInitialThread() == (here == getpid()))

        let seen = Atomic<Int>(0)
        let started = withUnsafePointer(to: seen) { pointer -> Int32 in
            var thread = pthread_t()
            let rc = pthread_create(
                &thread,
                nil,
                { context in
                    let seen = context!.assumingMemoryBound(to: Atomic<Int>.self)
                    seen.pointee.store(isProcessInitialThread() ? 1 : 2, ordering: .releasing)
                    return nil
                },
                UnsafeMutableRawPointer(mutating: pointer)
            )
            if rc == 0 { pthread_join(thread, nil) }
            return rc
        }
        try #require(started == 0)
        #expect(seen.load(ordering: .acquiring) == 2, "a started thread was taken for the initial one")

        // The child makes two system calls and exits: nothing that fork leaves unsafe in a threaded process.
        let child = fork()
        if child == 0 { _exit(isProcessInitialThread() ? 0 : 1) }
        try #require(child > 0)
        var status: Int32 = 0
        try #require(waitpid(child, &status, 0) == child)
        #expect(status == 0, "a forked child's only thread was not taken for its initial one")
    }

    /// One file of each of this process's threads in `/proc/self/task`, by thread ID, without its final
    /// newline: `comm` is the thread's name, `wchan` where it waits.
    private func threadFiles(_ file: String) -> [String: String] {
        guard let tasks = opendir("/proc/self/task") else { return [:] }
        defer { closedir(tasks) }
        var contents: [String: String] = [:]
        while let entry = readdir(tasks) {
            let id = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard id.first?.isNumber == true else { continue }
            let fd = Glibc.open("/proc/self/task/\(id)/\(file)", O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = read(fd, &buffer, buffer.count)
            close(fd)
            if n > 0 {
                contents[id] = String(decoding: buffer[..<n].prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
            }
        }
        return contents
    }

    @Test(arguments: EngineKind.allCases)
    func missingPathsReportENOENT(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let opened = await complete { engine.openat(path: "/nonexistent/dir/file", flags: O_RDONLY, then: $0) }
            #expect(opened.error == .noSuchFileOrDirectory)
            let status = await awaitCallback(orElse: .failure(.timedOut)) { c in
                engine.stat(path: "/nonexistent/file") { c($0) }
            }
            #expect(throws: Errno.noSuchFileOrDirectory) { try status.get() }
            let dir = await awaitCallback(orElse: .failure(.timedOut)) { c in engine.stat(path: "/tmp") { c($0) } }
            let isDirectory = try dir.get().isDirectory
            #expect(isDirectory)
        }
    }

    // MARK: Concurrency

    @Test(arguments: EngineKind.allCases)
    func tenThousandOperationsFromSeveralThreadsCompleteExactlyOnce(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let total = 10_000
            let threads = 4
            let counts = Locked([Int](repeating: 0, count: total))
            let finished = Atomic<Int>(0)
            let dir = TemporaryDirectory()
            defer { dir.cleanup() }
            let fd = openFile(dir.file("f"))
            defer { close(fd) }
            let data = Buffer(count: 16, fill: 1)
            await awaitCallback(orElse: ()) { (done: @escaping @Sendable (()) -> Void) in
                for thread in 0..<threads {
                    let start = thread * (total / threads)
                    Thread.detach {
                        for index in start..<(start + total / threads) {
                            let handler: CompletionHandler = { completion in
                                #expect(completion.error == nil)
                                counts.withLock { $0[index] += 1 }
                                if finished.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue == total {
                                    done(())
                                }
                            }
                            // A mix of nops and small positioned writes.
                            if index % 2 == 0 {
                                engine.nop(then: handler)
                            } else {
                                engine.write(
                                    fd,
                                    from: UnsafeRawBufferPointer(data.slice(16)),
                                    at: Int64(index * 16),
                                    keepAlive: data,
                                    then: handler
                                )
                            }
                        }
                    }
                }
            }
            #expect(counts.withLock { $0.allSatisfy { $0 == 1 } })
            var st = stat()
            fstat(fd, &st)
            #expect(st.st_size == (total - 1) * 16 + 16)
        }
    }

    // MARK: Cancellation, readiness, timeouts

    @Test(arguments: EngineKind.allCases)
    func cancellingAPendingPipeReadCompletesItWithECANCELED(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let pipe = Pipe()
            defer { pipe.close() }
            let into = Buffer(count: 8)
            let read = Pending { engine.read(pipe.read, into: into.slice(8), at: nil, keepAlive: into, then: $0) }
            _ = await complete { engine.nop(then: $0) }
            let cancel = await complete { engine.cancel(read.id!, then: $0) }
            // EALREADY: the POSIX engine caught the read inside its non-blocking attempt; it stops it before
            // it would wait, so the read is cancelled all the same.
            #expect(cancel.error == nil || cancel.error == .alreadyInProcess)
            #expect(await read.value.error == .canceled)
            // Nothing was consumed: a later write is there for a later read.
            #expect(write(pipe.write, "x", 1) == 1)
            let again = await complete {
                engine.read(pipe.read, into: into.slice(8), at: nil, keepAlive: into, then: $0)
            }
            #expect(again.result == 1)
        }
    }

    @Test(arguments: EngineKind.allCases)
    func cancellingSomethingFinishedReportsENOENT(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let finished = await awaitCallback(orElse: OperationID?.none) { c in
                let box = Locked<OperationID?>(nil)
                box.withLock { $0 = engine.nop { _ in c(box.withLock { $0 }) } }
            }
            guard let id = finished else { return }
            let cancel = await complete { engine.cancel(id, then: $0) }
            #expect(cancel.error == .noSuchFileOrDirectory)
        }
    }

    @Test(arguments: EngineKind.allCases)
    func invalidDescriptorGivesEBADF(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let bad = closedDescriptor()
            let into = Buffer(count: 8)
            let read = await complete { engine.read(bad, into: into.slice(8), at: nil, keepAlive: into, then: $0) }
            #expect(read.error == .badFileDescriptor)
            let write = await complete {
                engine.write(bad, from: UnsafeRawBufferPointer(into.slice(8)), at: 0, keepAlive: into, then: $0)
            }
            #expect(write.error == .badFileDescriptor)
            #expect(write.result == 0)
            #expect(await complete { engine.fsync(bad, then: $0) }.error == .badFileDescriptor)
            #expect(await complete { engine.close(bad, then: $0) }.error == .badFileDescriptor)
        }
    }

    @Test(arguments: EngineKind.allCases)
    func readinessOnAPipeFiresAfterAWrite(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let pipe = Pipe()
            defer { pipe.close() }
            let poll = Pending { engine.poll(pipe.read, events: .readable, then: $0) }
            _ = await complete { engine.nop(then: $0) }
            #expect(!poll.isDone, "readiness reported before any write")
            #expect(write(pipe.write, "r", 1) == 1)
            let completion = await poll.value
            #expect(completion.error == nil)
            #expect(PollEvents(rawValue: UInt32(completion.result)).contains(.readable))
            // A writable pipe is ready for writing at once.
            let writable = await complete { engine.poll(pipe.write, events: .writable, then: $0) }
            #expect(PollEvents(rawValue: UInt32(writable.result)).contains(.writable))
        }
    }

    @Test(arguments: EngineKind.allCases)
    func removingAPollCompletesItWithECANCELED(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let pipe = Pipe()
            defer { pipe.close() }
            let poll = Pending { engine.poll(pipe.read, events: .readable, then: $0) }
            _ = await complete { engine.nop(then: $0) }
            let removal = await complete { engine.removePoll(poll.id!, then: $0) }
            #expect(removal.error == nil)
            #expect(await poll.value.error == .canceled)
        }
    }

    /// A removal submitted right behind its poll or timeout, before the engine has started either, still
    /// finds it (the POSIX engine used to miss a poll not yet parked, which then waited forever).
    @Test(arguments: EngineKind.allCases)
    func removalsRightAfterSubmissionFindTheirTarget(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let pipe = Pipe()
            defer { pipe.close() }
            for _ in 0..<200 {
                let poll = Pending { engine.poll(pipe.read, events: .readable, then: $0) }
                let removal = Pending { engine.removePoll(poll.id!, then: $0) }
                #expect(await poll.value.error == .canceled)
                #expect(await removal.value.error == nil)
                let timer = Pending { engine.timeout(deadline: .now + .seconds(30), then: $0) }
                let timerRemoval = Pending { engine.removeTimeout(timer.id!, then: $0) }
                #expect(await timer.value.error == .canceled)
                #expect(await timerRemoval.value.error == nil)
            }
        }
    }

    @Test(arguments: EngineKind.allCases)
    func timeoutsNeverFireEarly(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let clock = ContinuousClock()
            for delay in [Duration.zero, .microseconds(50), .milliseconds(1), .milliseconds(7), .milliseconds(20)] {
                let deadline = clock.now + delay
                let completion = await complete { engine.timeout(deadline: deadline, then: $0) }
                let firedAt = clock.now
                #expect(completion == IOCompletion(result: 0))
                #expect(firedAt >= deadline, "timeout for +\(delay) fired \(deadline - firedAt) early")
            }
            // Many at once, in reverse order: each still not early.
            let deadlines = (1...50).map { clock.now + .microseconds(200 * (51 - $0)) }
            let early = Atomic<Int>(0)
            await awaitCallback(orElse: ()) { (done: @escaping @Sendable (()) -> Void) in
                let left = Atomic<Int>(deadlines.count)
                for deadline in deadlines {
                    engine.timeout(deadline: deadline) { _ in
                        if clock.now < deadline { early.add(1, ordering: .relaxed) }
                        if left.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { done(()) }
                    }
                }
            }
            let earlyCount = early.load(ordering: .relaxed)
            #expect(earlyCount == 0)
        }
    }

    /// C23: a deadline too far to represent waits for ever. `.now + .seconds(Int64.max)` trapped in the
    /// conversion to the boot-time clock, and one past 292 years after boot wrapped negative and fired at
    /// once on the POSIX engine. Each must still be pending after a near timeout has fired, and removable.
    @Test(arguments: EngineKind.allCases)
    func aDeadlineTooFarToRepresentNeverComes(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            for far in [Duration.seconds(Int64.max), .seconds(10_000_000_000), .seconds(Int64.max / 1_000_000_000)] {
                let timeout = Pending { engine.timeout(deadline: .now + far, then: $0) }
                _ = await complete { engine.timeout(deadline: .now + .milliseconds(20), then: $0) }
                #expect(!timeout.isDone, "+\(far) fired")
                _ = await complete { engine.removeTimeout(timeout.id!, then: $0) }
                #expect(await timeout.value.error == .canceled)
            }
            // And one too far past is due now (it trapped too, in the conversion; helper-44).
            let past = await complete { engine.timeout(deadline: .now - .seconds(Int64.max) - .seconds(5), then: $0) }
            #expect(past == IOCompletion(result: 0))
        }
    }

    @Test(arguments: EngineKind.allCases)
    func removingATimeoutCompletesItWithECANCELED(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let timeout = Pending { engine.timeout(deadline: .now + .seconds(30), then: $0) }
            _ = await complete { engine.nop(then: $0) }
            let removal = await complete { engine.removeTimeout(timeout.id!, then: $0) }
            #expect(removal.error == nil)
            #expect(await timeout.value.error == .canceled)
            let again = await complete { engine.removeTimeout(timeout.id!, then: $0) }
            #expect(again.error == .noSuchFileOrDirectory)
        }
    }

    // A POSIX engine that could not make its reactor (no descriptor to spare) still keeps timeouts, on a
    // thread that waits on a condition variable: not early, in deadline order, removable, and cancelled by
    // shutdown. (They completed with EMFILE, which the timer scheduler took for a removal: every later
    // `asyncAfter` waited forever.) A read that is not ready waits in a pool thread's `poll` (it failed with
    // EMFILE, and dcat at `ulimit -n 4` lost what its standard input, a pipe, had still to give), and a
    // cancel ends that wait.
    @Test func timeoutsAndWaitsWithoutAReactor() async throws {
        let engine = IOEngine(posixWithoutReactor: ())
        #expect(engine.ownDescriptorCount == 0)
        let clock = ContinuousClock()
        let fired = Locked<[Int]>([])
        let start = clock.now
        func timer(_ milliseconds: Int) -> Pending {
            Pending { done in
                engine.timeout(deadline: start + .milliseconds(milliseconds)) { completion in
                    fired.withLock { $0.append(milliseconds) }
                    done(completion)
                }
            }
        }
        let late = timer(40)
        let early = timer(10)
        let removed = timer(20)
        let pending = timer(60_000)
        let removal = await complete { engine.removeTimeout(removed.id!, then: $0) }
        #expect(removal.error == nil)
        #expect(await removed.value.error == .canceled)
        #expect(await early.value == IOCompletion(result: 0))
        #expect(await late.value == IOCompletion(result: 0))
        #expect(clock.now >= start + .milliseconds(40))
        #expect(fired.withLock { $0 } == [20, 10, 40])
        let pipe = Pipe()
        defer { pipe.close() }
        let buffer = Buffer(count: 8)
        let read = Pending { engine.read(pipe.read, into: buffer.slice(8), at: nil, keepAlive: buffer, then: $0) }
        // The bytes come once the read is surely waiting (it failed at once before), whenever that is.
        _ = await complete { engine.timeout(deadline: .now + .milliseconds(30), then: $0) }
        #expect(write(pipe.write, "abc", 3) == 3)
        #expect(await read.value == IOCompletion(result: 3))
        #expect(buffer.array(3) == Array("abc".utf8))
        let waiting = Pending {
            engine.read(pipe.read, into: buffer.slice(8), at: nil, keepAlive: buffer, then: $0)
        }
        _ = await complete { engine.timeout(deadline: .now + .milliseconds(30), then: $0) }
        let cancel = await complete { engine.cancel(waiting.id!, then: $0) }
        // EALREADY: found in its wait, which ends at the end of its slice; or found queued between two.
        #expect(cancel.error == nil || cancel.error == .alreadyInProcess)
        #expect(await waiting.value.error == .canceled)
        #expect(engine.ownDescriptorCount == 0)
        engine.shutdown()
        #expect(await pending.value.error == .canceled)
    }

    // MARK: Edge cases with defined results

    @Test(arguments: EngineKind.allCases)
    func zeroLengthTransfersCompleteWithZero(kind: EngineKind) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        try await withEngine(kind) { engine in
            let fd = openFile(dir.file("f"))
            defer { close(fd) }
            let buffer = Buffer(count: 1)
            let empty = UnsafeMutableRawBufferPointer(rebasing: buffer.bytes[0..<0])
            #expect(await complete { engine.read(fd, into: empty, at: 0, then: $0) } == IOCompletion(result: 0))
            #expect(
                await complete { engine.write(fd, from: UnsafeRawBufferPointer(empty), at: 0, then: $0) }
                    == IOCompletion(result: 0)
            )
            #expect(await complete { engine.writev(fd, from: [], at: 0, then: $0) } == IOCompletion(result: 0))
            let pipe = Pipe()
            defer { pipe.close() }
            #expect(
                await complete { engine.write(pipe.write, from: UnsafeRawBufferPointer(empty), at: nil, then: $0) }
                    == IOCompletion(result: 0)
            )
        }
    }

    @Test(arguments: EngineKind.allCases)
    func negativeOffsetsAreEINVAL(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let buffer = Buffer(count: 8)
            let pipe = Pipe()
            defer { pipe.close() }
            #expect(
                await complete { engine.read(pipe.read, into: buffer.slice(8), at: -1, then: $0) }.error
                    == .invalidArgument
            )
            #expect(
                await complete {
                    engine.write(pipe.write, from: UnsafeRawBufferPointer(buffer.slice(8)), at: -4096, then: $0)
                }.error == .invalidArgument
            )
            #expect(
                await complete { engine.readv(pipe.read, into: [buffer.slice(8)], at: .min, then: $0) }.error
                    == .invalidArgument
            )
            #expect(
                await complete {
                    engine.writev(pipe.write, from: [UnsafeRawBufferPointer(buffer.slice(8))], at: -1, then: $0)
                }.error == .invalidArgument
            )
        }
    }

    /// A descriptor that cannot seek (a pipe here; also a regular file opened as a stream, such as tracefs's
    /// `trace_pipe`) is read and written at its position whatever offset is given, on both engines: io_uring
    /// hands the offset to a file that ignores it, and the POSIX engine, whose `preadv2` and `pwritev2`
    /// refuse it with `ESPIPE`, makes the call again at the current position.
    @Test(arguments: EngineKind.allCases)
    func offsetsOnDescriptorsThatCannotSeekAreIgnored(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let pipe = Pipe()
            defer { pipe.close() }
            let bytes: [UInt8] = Array("positioned".utf8)
            let source = Buffer(bytes)
            let data = UnsafeRawBufferPointer(source.slice(bytes.count))
            #expect(await complete { engine.write(pipe.write, from: data, at: 4096, then: $0) } == .init(result: 10))
            #expect(await complete { engine.writev(pipe.write, from: [data], at: 0, then: $0) } == .init(result: 10))
            for vector in [false, true] {
                let buffer = Buffer(count: bytes.count)
                let target = buffer.slice(bytes.count)
                let read = await complete { handler in
                    if vector {
                        engine.readv(pipe.read, into: [target], at: 8, then: handler)
                    } else {
                        engine.read(pipe.read, into: target, at: 0, then: handler)
                    }
                }
                #expect(read == IOCompletion(result: bytes.count))
                #expect(Array(buffer.bytes) == bytes)
            }
        }
    }

    /// Transfers over 2 GiB are split into pieces the kernel accepts, and come back whole.
    @Test(arguments: EngineKind.allCases)
    func transfersOverTwoGiBAreSplit(kind: EngineKind) async throws {
        let size = (1 << 31) + 8192
        let base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"
        let path = "\(base)/uring-tests-big-\(getpid())-\(kind)"
        defer { unlink(path) }
        try await withEngine(kind) { engine in
            let fd = openFile(path)
            defer { close(fd) }
            let buffer = Buffer(count: size)
            memset(buffer.bytes.baseAddress!, 0x11, size)
            buffer.bytes[size - 1] = 0xEE
            let written = await complete {
                engine.write(fd, from: UnsafeRawBufferPointer(buffer.bytes), at: 0, keepAlive: buffer, then: $0)
            }
            #expect(written == IOCompletion(result: size))
            var st = stat()
            fstat(fd, &st)
            #expect(st.st_size == size)
            memset(buffer.bytes.baseAddress!, 0, size)
            let read = await complete { engine.read(fd, into: buffer.bytes, at: 0, keepAlive: buffer, then: $0) }
            #expect(read == IOCompletion(result: size))
            #expect(buffer.bytes[0] == 0x11 && buffer.bytes[size / 2] == 0x11 && buffer.bytes[size - 1] == 0xEE)
        }
    }

    @Test(arguments: EngineKind.allCases)
    func writeErrorsReportWhatWasWritten(kind: EngineKind) async throws {
        try await withEngine(kind) { engine in
            let full = open("/dev/full", O_WRONLY | O_CLOEXEC)
            try #require(full >= 0)
            defer { close(full) }
            let buffer = Buffer(count: 4096, fill: 1)
            let completion = await complete {
                engine.write(full, from: UnsafeRawBufferPointer(buffer.bytes), at: nil, keepAlive: buffer, then: $0)
            }
            #expect(completion == IOCompletion(result: 0, error: .noSpace))
            // A pipe with no reader: EPIPE, and the process is still here, with SIGPIPE at its default
            // action (which would end it) — the engine's threads block it.
            signal(SIGPIPE, SIG_DFL)
            let pipe = Pipe()
            close(pipe.read)
            defer { close(pipe.write) }
            let broken = await complete {
                engine.write(
                    pipe.write,
                    from: UnsafeRawBufferPointer(buffer.bytes),
                    at: nil,
                    keepAlive: buffer,
                    then: $0
                )
            }
            #expect(broken.error == .brokenPipe)
        }
    }

    // MARK: A regular file's writes on the POSIX engine

    /// Writes of `count` pieces of `length` bytes to `fd`, piece `i` filled with `fill(i)` at `offset(i)`,
    /// all submitted before any is awaited; returns their ids and a wait for every completion, by index.
    private func submitWrites(
        _ engine: IOEngine,
        fd: CInt,
        count: Int,
        length: Int,
        offset: (Int) -> Int64,
        fill: (Int) -> UInt8
    ) -> (ids: [OperationID], completions: () async -> [IOCompletion?]) {
        let buffers = (0..<count).map { Buffer(count: length, fill: fill($0)) }
        let results = Locked([IOCompletion?](repeating: nil, count: count))
        let calls = Atomic<Int>(0)
        // Whether every write has completed, and what to call when they have.
        let end = Locked<(reached: Bool, waiter: (@Sendable (()) -> Void)?)>((false, nil))
        var ids: [OperationID] = []
        for index in 0..<count {
            ids.append(
                engine.write(
                    fd,
                    from: UnsafeRawBufferPointer(buffers[index].bytes),
                    at: offset(index),
                    keepAlive: buffers[index]
                ) {
                    completion in
                    results.withLock {
                        #expect($0[index] == nil, "write \(index) completed twice")
                        $0[index] = completion
                    }
                    if calls.wrappingAdd(1, ordering: .relaxed).newValue == count {
                        end.withLock {
                            $0.reached = true
                            return $0.waiter
                        }?(())
                    }
                }
            )
        }
        return (
            ids,
            {
                await awaitCallback(orElse: ()) { done in
                    let reached = end.withLock {
                        $0.waiter = done
                        return $0.reached
                    }
                    if reached { done(()) }
                }
                return results.withLock { $0 }
            }
        )
    }

    /// A POSIX engine and a new file open for reading and writing, for `body`.
    private func withFileOnThePOSIXEngine(_ body: (IOEngine, CInt) async throws -> Void) async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        try await withEngine(.posix) { engine in
            let fd = openFile(dir.file("f"))
            defer { close(fd) }
            try await body(engine, fd)
        }
    }

    /// The byte that fills `length` bytes of `fd` at `offset`, or nil when they are not all one byte.
    private func holds(_ fd: CInt, at offset: Int, length: Int) -> UInt8? {
        let into = Buffer(count: length)
        guard pread(fd, into.bytes.baseAddress, length, off_t(offset)) == length else { return nil }
        let uniform = Buffer(count: length, fill: into.bytes[0])
        return memcmp(into.bytes.baseAddress!, uniform.bytes.baseAddress!, length) == 0 ? into.bytes[0] : nil
    }

    /// A regular file's writes run one at a time, in the order they were submitted, as io_uring's workers run
    /// them, so a process killed while writing leaves a prefix of its output. Each round writes one place 16
    /// times: the last write submitted must be the one that stays. The pool's four threads ran them at once
    /// before, and the round's last write to run was any of the last few.
    @Test func aRegularFilesWritesRunInTheOrderTheyWereSubmitted() async throws {
        try await withFileOnThePOSIXEngine { engine, fd in
            let length = 256 << 10
            for round in 0..<20 {
                let writes = submitWrites(engine, fd: fd, count: 16, length: length, offset: { _ in 0 }) {
                    UInt8(truncatingIfNeeded: round * 16 + $0 + 1)
                }
                let completions = await writes.completions()
                #expect(completions.allSatisfy { $0 == IOCompletion(result: length) })
                let last = UInt8(truncatingIfNeeded: round * 16 + 16)
                let kept = holds(fd, at: 0, length: length)
                #expect(kept == last, "round \(round): the place holds \(kept.map(String.init) ?? "mixed bytes")")
            }
        }
    }

    /// A write cancelled while it waits for its file's earlier writes leaves the queue and completes with
    /// ECANCELED, once; the writes after it, and a write submitted afterwards, still run.
    @Test func aWriteCancelledWhileItWaitsForItsFilesEarlierWrites() async throws {
        try await withFileOnThePOSIXEngine { engine, fd in
            let length = 4 << 20
            let count = 16
            let writes = submitWrites(engine, fd: fd, count: count, length: length, offset: { Int64($0 * length) }) {
                UInt8($0 + 1)
            }
            // Every other write from the fourth on, the last first: most still wait behind the first.
            var cancels: [Int: IOCompletion] = [:]
            for index in stride(from: 3, to: count, by: 2).reversed() {
                cancels[index] = await complete { engine.cancel(writes.ids[index], then: $0) }
            }
            let completions = await writes.completions()
            for index in 0..<count {
                let completion = try #require(completions[index])
                let cancel = cancels[index]
                if cancel == nil || completion.error == nil {
                    // Not cancelled, or cancelled too late (EALREADY while it ran, ENOENT once done).
                    #expect(completion == IOCompletion(result: length), "write \(index)")
                    #expect(cancel == nil || cancel!.error != nil, "write \(index)")
                    #expect(holds(fd, at: index * length, length: length) == UInt8(index + 1), "write \(index)'s bytes")
                } else {
                    #expect(completion.error == .canceled, "write \(index)")
                    #expect(cancel!.error == nil || cancel!.error == .alreadyInProcess, "write \(index)")
                }
            }
            // The last ones wait behind 40 MiB or more of writes: some cancel finds its write waiting.
            #expect(cancels.values.contains { $0.error == nil }, "\(cancels)")
            let after = Buffer(count: 8, fill: 9)
            let last = await complete {
                engine.write(fd, from: UnsafeRawBufferPointer(after.bytes), at: 0, keepAlive: after, then: $0)
            }
            #expect(last == IOCompletion(result: 8))
        }
    }

    /// Shutdown cancels the writes that wait for their file's earlier ones, each once: the writes that ran
    /// are the first ones submitted.
    @Test func shutdownCancelsWritesWaitingForTheirFile() async throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanup() }
        let engine = try IOEngine(kind: .posix)
        let fd = openFile(dir.file("f"))
        defer { close(fd) }
        let length = 4 << 20
        let count = 16
        let writes = submitWrites(engine, fd: fd, count: count, length: length, offset: { Int64($0 * length) }) {
            UInt8($0 + 1)
        }
        engine.shutdown()
        let completions = await writes.completions()
        let ran = completions.prefix { $0?.error == nil }.count
        #expect(completions.prefix(ran).allSatisfy { $0 == IOCompletion(result: length) })
        #expect(completions.dropFirst(ran).allSatisfy { $0?.error == .canceled }, "\(completions)")
    }

    // MARK: Shutdown

    @Test(arguments: EngineKind.allCases)
    func shutdownCancelsPendingAndRefusesNewWork(kind: EngineKind) async throws {
        let engine = try IOEngine(kind: kind)
        // A process near its descriptor limit needs every one for its files. The ring's, closed once the ring
        // thread has registered it where the kernel takes register calls through that (6.3), and an eventfd
        // to wake the thread only where the kernel's futex wait is sound (6.8); the POSIX engine's reactor
        // (epoll, eventfd, timerfd), made at the first wait.
        let uringDescriptors = kernelAtLeast(6, 8) ? 0 : kernelAtLeast(6, 3) ? 1 : 2
        #expect(engine.ownDescriptorCount == (kind == .posix ? 0 : uringDescriptors))
        let pipe = Pipe()
        defer { pipe.close() }
        let buffer = Buffer(count: 8)
        let pending = Pending { engine.read(pipe.read, into: buffer.slice(8), at: nil, keepAlive: buffer, then: $0) }
        let timer = Pending { engine.timeout(deadline: .now + .seconds(60), then: $0) }
        _ = await complete { engine.nop(then: $0) }
        engine.shutdown()
        #expect(await pending.value.error == .canceled)
        #expect(await timer.value.error == .canceled)
        #expect(engine.ownDescriptorCount == 0)
        // After shutdown: ESHUTDOWN, delivered before submit returns.
        let after = Locked<IOCompletion?>(nil)
        engine.nop { completion in after.withLock { $0 = completion } }
        #expect(after.withLock { $0 } == IOCompletion(result: 0, error: .socketShutdown))
        engine.shutdown()  // idempotent
    }

    // MARK: Selection

    /// The kernel's release is read as `major.minor` from its first two numbers, whatever follows them.
    @Test func kernelReleasesParse() {
        let cases: [(String, (Int, Int)?)] = [
            ("6.18.44-fc-v782", (6, 18)), ("5.4.0-150-generic", (5, 4)), ("6.8", (6, 8)), ("10.2rc1", (10, 2)),
            ("6", nil), ("", nil), ("linux", nil), ("6.x", nil),
        ]
        for (release, expected) in cases {
            let parsed = kernelVersion(release: Array(release.utf8) + [0, 55, 46, 57])
            #expect(parsed.map { [$0.0, $0.1] } == expected.map { [$0.0, $0.1] }, "\(release)")
        }
    }

    @Test func selectionHonoursTheEnvironmentAndExplainsItself() {
        #expect(!IOEngine.selection.reason.isEmpty)
        if let forced = getenv("DISPATCH_ENGINE").map({ String(cString: $0) }), let kind = EngineKind(rawValue: forced)
        {
            #expect(IOEngine.shared.kind == kind)
        } else {
            // This machine has io_uring; the default picks it.
            #expect(IOEngine.shared.kind == .uring, "fell back: \(IOEngine.selection.reason)")
        }
    }
}

/// A detached pthread, for tests that need several submitting threads at once.
enum Thread {
    static func detach(_ body: @escaping @Sendable () -> Void) {
        final class Box {
            let body: @Sendable () -> Void
            init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        }
        var thread = pthread_t()
        let context = Unmanaged.passRetained(Box(body)).toOpaque()
        pthread_create(
            &thread,
            nil,
            { context in
                Unmanaged<Box>.fromOpaque(context!).takeRetainedValue().body()
                return nil
            },
            context
        )
        pthread_detach(thread)
    }
}

/// The size of the mapping of this process that holds `address`, from `/proc/self/maps`; nil if none does.
private func mapping(containing address: UInt) -> Int? {
    let fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 1 << 16)
    while true {
        let count = read(fd, &chunk, chunk.count)
        guard count > 0 else { break }
        bytes += chunk[..<count]
    }
    for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
        let range = line.prefix { $0 != " " }.split(separator: "-").compactMap { UInt($0, radix: 16) }
        if range.count == 2 && range[0] <= address && address < range[1] { return Int(range[1] - range[0]) }
    }
    return nil
}
