import CURing
import Synchronization
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// The engine where io_uring cannot be used: the same operations and the same observable behaviour,
/// from blocking system calls on a small thread pool, with one reactor thread that waits in `epoll_wait`
/// for readiness and on a `timerfd` for timeouts.
///
/// Reads and writes on descriptors that can block (pipes, sockets, terminals) are tried without
/// blocking first (`RWF_NOWAIT`, or `poll` with no wait where the file does not support it) and park in
/// the reactor until ready, so a pool thread never sleeps in a read nobody will satisfy and a pending
/// read can be cancelled, as on io_uring. Regular files and block devices are read and written with
/// plain blocking calls: they never wait for a peer. A regular file's writes run one at a time, in the
/// order they were submitted (`writeLanes`), as on io_uring.
///
/// The reactor (an epoll, an eventfd and a timerfd) is made at the first wait, so a process that never
/// waits (regular files only) leaves its three descriptors free, and under a descriptor limit below 64 it
/// is not made at all. Where there is none, a pool thread waits itself, in `poll`, a slice at a time
/// (`waitWithoutReactor`), and timeouts are kept by a thread that waits on a condition variable, which
/// needs no descriptor; a wait where it could not be made (descriptors ran out) tries again.
final class POSIXBackend: EngineBackend, @unchecked Sendable {
    static let poolSize = 4
    private static let wakeKey: UInt64 = 1 << 63
    private static let timerKey: UInt64 = (1 << 63) | 1

    private let nextID = Atomic<UInt64>(1)
    private let descriptorsOpen = Atomic<Int>(0)

    private let lock = Lock()
    private let workAvailable: UnsafeMutablePointer<pthread_cond_t>
    // Guarded by `lock`.
    private var runQueue = FIFO()
    private var running: [UInt64: Request] = [:]
    /// The pool thread of each open in its system call. An open can wait for a peer forever (a FIFO's
    /// reader for a writer) and no signal is sent to interrupt it, so a cancel, or shutdown, completes it
    /// at once and leaves its thread behind, detached, to close the descriptor if the open ever returns.
    private var openingThreads: [UInt64: pthread_t] = [:]
    private var parked: [UInt64: Request] = [:]
    private var fdWaiters: [CInt: [UInt64]] = [:]
    private var registered: Set<CInt> = []
    /// The writes of each regular file with one running: the one running, and those submitted after it,
    /// in order. A file's writes run one at a time in the order they were submitted, as io_uring's
    /// workers run them (io-wq hashes a regular file's writes by inode): the file never holds a later
    /// write's bytes past an earlier one's unwritten range, so a process killed while writing leaves a
    /// prefix of its output, as `cat` does, not a later piece past zeros. The kernel runs buffered writes
    /// to one inode one at a time anyway (the inode's lock), so this costs no parallelism.
    private var writeLanes: [FileIdentity: WriteLane] = [:]
    private var timers = DeadlineHeap()
    private var timerRequests: [UInt64: Request] = [:]
    private var armedDeadline: Int64 = .max
    private var stopping = false
    private var threads: [pthread_t] = []
    /// Pool threads started (at most ``poolSize``), and those waiting for work. The pool starts with one
    /// and grows when work is queued with none waiting for it (``enqueue(_:)``): a process that never has
    /// two calls under way at once starts no more, and one at its limit of threads (`ulimit -u`) keeps the
    /// slots for the reactor's thread.
    private var poolThreads = 1
    private var idlePoolThreads = 0
    /// A pool thread could not be started: the pool stays as it is.
    private var poolCannotGrow = false
    /// The reactor's thread could not be started: waits are the pool threads' own (see ``ensureReactor()``).
    private var reactorThreadFailed = false
    // The reactor's descriptors, -1 until it is made; guarded by `lock`, and read by the reactor thread.
    private var epollFD: CInt = -1
    private var wakeFD: CInt = -1
    private var timerFD: CInt = -1
    /// Signalled when the earliest deadline changes, for the timer thread that runs without a reactor.
    private let timersChanged: UnsafeMutablePointer<pthread_cond_t>
    private var timerThreadStarted = false

    /// False only in tests: the reactor is then never made, as in a process without descriptors to spare.
    private let reactorAllowed: Bool

    init(reactorAllowed: Bool = true) {
        // Under a descriptor limit below 64 the reactor is not made at all: once made it keeps its three for
        // good, and a process that low needs every one for its files (at `ulimit -n 6`, dcat read standard
        // input, which made the reactor, and could then open no file). The waits are the pool threads'
        // own there. (The io_uring engine draws the same line for waiting on its thread's start.)
        var limit = rlimit()
        let scarce = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 && limit.rlim_cur < 64
        self.reactorAllowed = reactorAllowed && !scarce
        workAvailable = .allocate(capacity: 1)
        workAvailable.initialize(to: pthread_cond_t())
        pthread_cond_init(workAvailable, nil)
        timersChanged = .allocate(capacity: 1)
        timersChanged.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(timersChanged, &attributes)
        pthread_condattr_destroy(&attributes)
        // The others start as work needs them (see `enqueue`). The reactor comes with the first wait: made
        // here, it took three of the descriptors a process near its limit needs for its files (at `ulimit -n
        // 6`, dcat could open none).
        let first = spawn { $0.poolLoop() }
        lock.withLock { threads.append(first) }
    }

    /// Queues `request` for the pool, and starts another pool thread if it needs one (``growPoolIfBusy()``).
    /// Lock held.
    private func enqueue(_ request: Request) {
        runQueue.push(request)
        pthread_cond_signal(workAvailable)
        growPoolIfBusy()
    }

    /// Starts another pool thread when more work is queued than threads wait for it. Past the first, a thread
    /// the process cannot start (at its limit of threads or of address space) leaves the pool as it is
    /// instead of stopping the process: fewer calls run at once. A thread in an open does not count towards
    /// ``poolSize``: an open may wait for a peer forever (a FIFO's for a writer), and with every thread in
    /// one, the read of a FIFO that had opened stayed queued while its writer waited for it (`dcopy p1 ...
    /// p6 d`, six FIFOs filled in turn, hung; helper-69). So this also runs when a thread starts an open.
    /// Lock held.
    private func growPoolIfBusy() {
        let working = poolThreads - openingThreads.count
        guard runQueue.count > idlePoolThreads, working < Self.poolSize, !poolCannotGrow, !stopping else { return }
        switch startThread({ $0.poolLoop() }) {
        case .success(let thread):
            threads.append(thread)
            poolThreads += 1
        case .failure:
            poolCannotGrow = true
        }
    }

    deinit {
        pthread_cond_destroy(workAvailable)
        workAvailable.deallocate()
        pthread_cond_destroy(timersChanged)
        timersChanged.deallocate()
    }

    var ownDescriptorCount: Int { descriptorsOpen.load(ordering: .acquiring) }

    /// Makes the reactor if there is none yet; returns why it cannot be had. Lock held.
    private func ensureReactor() -> Errno? {
        if epollFD >= 0 { return nil }
        if stopping { return .canceled }
        if !reactorAllowed { return .tooManyOpenFiles }
        if reactorThreadFailed { return .resourceTemporarilyUnavailable }
        let epoll = epoll_create1(CInt(EPOLL_CLOEXEC))
        let wake = epoll >= 0 ? eventfd(0, CInt(EFD_CLOEXEC | EFD_NONBLOCK)) : -1
        let timer = wake >= 0 ? timerfd_create(CLOCK_BOOTTIME, CInt(TFD_CLOEXEC | TFD_NONBLOCK)) : -1
        guard timer >= 0 else {
            let failure = Errno(rawValue: errno)
            for fd in [epoll, wake] where fd >= 0 { Glibc.close(fd) }
            return failure
        }
        var wakeEvent = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: Self.wakeKey))
        epoll_ctl(epoll, EPOLL_CTL_ADD, wake, &wakeEvent)
        var timerEvent = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: Self.timerKey))
        epoll_ctl(epoll, EPOLL_CTL_ADD, timer, &timerEvent)
        // A process at its limit of threads waits without the reactor, on pool threads, as one without
        // descriptors to spare does; it does not try again, since the pool keeps the threads it has.
        guard case .success(let thread) = startThread({ $0.reactorLoop(epoll: epoll, wake: wake, timer: timer) })
        else {
            for fd in [epoll, wake, timer] { Glibc.close(fd) }
            reactorThreadFailed = true
            return .resourceTemporarilyUnavailable
        }
        (epollFD, wakeFD, timerFD) = (epoll, wake, timer)
        descriptorsOpen.store(3, ordering: .releasing)
        threads.append(thread)
        return nil
    }

    private final class ThreadStart {
        let backend: POSIXBackend
        let body: (POSIXBackend) -> Void
        init(_ backend: POSIXBackend, _ body: @escaping (POSIXBackend) -> Void) {
            self.backend = backend
            self.body = body
        }
    }

    /// Starts a thread running `body`; stops the process when it cannot.
    private func spawn(_ body: @escaping (POSIXBackend) -> Void) -> pthread_t {
        switch startThread(body) {
        case .success(let thread): return thread
        case .failure(let error): cannotStartThread("a thread of the POSIX engine", error: error.rawValue)
        }
    }

    private func startThread(_ body: @escaping (POSIXBackend) -> Void) -> Result<pthread_t, Errno> {
        let start = Unmanaged.passRetained(ThreadStart(self, body))
        var thread = pthread_t()
        let rc = startEngineThread(
            &thread,
            { context in
                let start = Unmanaged<ThreadStart>.fromOpaque(context!).takeRetainedValue()
                blockWriteSignalsInThisThread()
                start.body(start.backend)
                return nil
            },
            start.toOpaque()
        )
        guard rc == 0 else {
            start.release()
            return .failure(Errno(rawValue: rc))
        }
        return .success(thread)
    }

    // MARK: Submission

    var linkedCopies: Bool { false }
    var linkedCopiesKeepOpen: Bool { false }
    var copiesWholeOnOneThread: Bool { true }

    func submit(
        _ op: Op,
        offload: Bool,
        keepAlive: consuming AnyObject?,
        handler: @escaping CompletionHandler
    ) -> OperationID {
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        let (mode, file) = Self.classifyWrite(op)
        let request: Request
        if let file {
            request = Request(id: id, op: op, keepAlive: consume keepAlive) { [self] completion in
                leaveWriteLane(file, id: id)
                handler(completion)
            }
        } else {
            request = Request(id: id, op: op, keepAlive: consume keepAlive, handler: handler)
        }
        request.transferMode = mode.rawValue
        let accepted = lock.withLock { () -> Bool in
            if stopping { return false }
            if let file {
                if writeLanes[file] != nil {
                    writeLanes[file]!.waiting.append(request)
                    return true
                }
                writeLanes[file] = WriteLane(holder: id)
            }
            enqueue(request)
            return true
        }
        if !accepted { handler(IOCompletion(result: 0, error: .socketShutdown)) }
        return OperationID(rawValue: id)
    }

    /// How a write's descriptor is transferred, and the regular file it writes, if it writes one: decided
    /// at submission, so that its place among the file's writes is the order of submission. Reads and
    /// writes whose descriptor cannot be looked at decide on their pool thread (`undecided`).
    private static func classifyWrite(_ op: Op) -> (TransferMode, FileIdentity?) {
        let fd: CInt
        switch op {
        case .write(let descriptor, _, _, _), .vector(_, let descriptor, _, true): fd = descriptor
        default: return (.undecided, nil)
        }
        var info = statx()
        // Type and inode only, from what the kernel has: a network file system is not asked, so the
        // submitting thread does not wait for one.
        let flags = IOEngine.emptyPathFlag | dontSyncFlag
        guard callStatx(fd, "", flags, UInt32(STATX_TYPE | STATX_INO), &info) == 0 else { return (.undecided, nil) }
        let type = mode_t(info.stx_mode) & S_IFMT
        guard type == S_IFREG else { return (TransferMode(type: type), nil) }
        return (.blocking, FileIdentity(major: info.stx_dev_major, minor: info.stx_dev_minor, inode: info.stx_ino))
    }

    /// `AT_STATX_DONT_SYNC`.
    private static let dontSyncFlag: CInt = 0x4000

    /// A write of `file` has completed, or was cancelled: the next of the file's writes goes to the run
    /// queue. A write cancelled while it waited has already left the lane (`removeWaitingWrite`), and
    /// after shutdown there are no lanes.
    private func leaveWriteLane(_ file: FileIdentity, id: UInt64) {
        lock.withLock {
            guard var lane = writeLanes[file], lane.holder == id else { return }
            guard !lane.waiting.isEmpty else {
                writeLanes[file] = nil
                return
            }
            let next = lane.waiting.removeFirst()
            lane.holder = next.id
            writeLanes[file] = lane
            enqueue(next)
        }
    }

    /// Takes a write that waits for its file's earlier writes out of its lane. Lock held.
    private func removeWaitingWrite(_ id: UInt64) -> Request? {
        for (file, var lane) in writeLanes {
            guard let index = lane.waiting.firstIndex(where: { $0.id == id }) else { continue }
            let request = lane.waiting.remove(at: index)
            writeLanes[file] = lane
            return request
        }
        return nil
    }

    func shutdown() {
        var cancelled: [Request] = []
        let joinable = lock.withLock { () -> [pthread_t] in
            if stopping { return [] }
            stopping = true
            while let request = runQueue.pop() { cancelled.append(request) }
            for lane in writeLanes.values { cancelled.append(contentsOf: lane.waiting) }
            writeLanes.removeAll()
            cancelled.append(contentsOf: parked.values)
            cancelled.append(contentsOf: timerRequests.values)
            // Opens waiting for a peer would keep their threads, and this call, waiting with them.
            for (id, thread) in openingThreads {
                guard let request = running[id] else { continue }
                abandonOpen(request, thread: thread)
                cancelled.append(request)
            }
            openingThreads.removeAll()
            parked.removeAll()
            timerRequests.removeAll()
            fdWaiters.removeAll()
            pthread_cond_broadcast(workAvailable)
            pthread_cond_broadcast(timersChanged)
            defer { threads.removeAll() }
            return threads
        }
        guard !joinable.isEmpty else { return }
        let (epollFD, wakeFD, timerFD) = lock.withLock { (self.epollFD, self.wakeFD, self.timerFD) }
        for request in cancelled { request.complete(IOCompletion(result: request.progress, error: .canceled)) }
        if wakeFD >= 0 {
            var one: UInt64 = 1
            _ = Glibc.write(wakeFD, &one, 8)
        }
        for thread in joinable { pthread_join(thread, nil) }
        for fd in [epollFD, wakeFD, timerFD] where fd >= 0 { Glibc.close(fd) }
        lock.withLock { (self.epollFD, self.wakeFD, self.timerFD) = (-1, -1, -1) }
        descriptorsOpen.store(0, ordering: .releasing)
    }

    // MARK: Pool threads

    private func poolLoop() {
        let scratch = CopyScratch()
        while true {
            lock.lock()
            // A request cancelled while queued leaves a gap that `pop` skips: the queue may look non-empty
            // and still give nothing. The thread waits again then; it used to end, unjoined, and each such
            // cancel cost the pool a thread for good (ThreadSanitizer reported the leaks after 2,000 reads
            // racing a stop; four would have left no thread to run anything).
            var next: Request?
            while !stopping {
                next = runQueue.pop()
                if next != nil { break }
                idlePoolThreads += 1
                lock.wait(on: workAvailable)
                idlePoolThreads -= 1
            }
            guard !stopping, let request = next else {
                lock.unlock()
                return
            }
            running[request.id] = request
            if case .openat = request.op {
                openingThreads[request.id] = pthread_self()
                growPoolIfBusy()
            }
            lock.unlock()
            guard execute(request, scratch: scratch) else { return }
        }
    }

    /// Gives up the thread of an open that waits in its system call: detached, out of the pool (shutdown
    /// does not join it), and replaced, so the pool keeps its size. Lock held.
    private func abandonOpen(_ request: Request, thread: pthread_t) {
        request.abandoned = true
        running[request.id] = nil
        pthread_detach(thread)
        threads.removeAll { pthread_equal($0, thread) != 0 }
        if !stopping { threads.append(spawn { $0.poolLoop() }) }
    }

    /// Runs `request` on this pool thread until it completes or parks in the reactor. False when the request
    /// was an open given up while it waited: the thread has been replaced in the pool, and ends.
    private func execute(_ request: Request, scratch: CopyScratch) -> Bool {
        while true {
            let res: Int
            switch request.op {
            case .nop:
                res = 0
            case .fail:
                res = 0
            case .read, .write, .vector:
                res = transfer(request)
            case .openat(let dirfd, let path, let flags, let mode, let how):
                let fd =
                    how.map { curing_openat2(dirfd, path.pointer, $0.pointer) }
                    ?? Glibc.openat(dirfd, path.pointer, flags, mode)
                res = syscallResult(Int(fd))
            case .close(let fd):
                res = syscallResult(Int(Glibc.close(fd)))
            case .statx(let dirfd, let path, let flags, let box):
                res = syscallResult(Int(callStatx(dirfd, path.pointer, flags, StatxBox.mask, box.pointer)))
            case .fsync(let fd, let dataOnly):
                res = syscallResult(Int(dataOnly ? Glibc.fdatasync(fd) : Glibc.fsync(fd)))
            case .pollAdd(let fd, let events):
                park(request, fd: fd, events: events)
                return true
            case .timeout(let deadline):
                addTimer(request, deadline: deadline.nanoseconds)
                return true
            case .pollRemove(let target):
                res = withdraw(target) { if case .pollAdd = $0 { return true } else { return false } }
            case .timeoutRemove(let target):
                res = withdraw(target) { if case .timeout = $0 { return true } else { return false } }
            case .cancel(let target):
                res = cancel(target)
            case .linkedCopy(let copy):
                copy.outcome = Self.copyWhole(copy, through: scratch.buffer)
                res = 0
            }
            switch request.step(after: res) {
            case .complete(let completion):
                let abandoned = lock.withLock { () -> Bool in
                    if case .openat = request.op {
                        if request.abandoned { return true }
                        openingThreads[request.id] = nil
                    }
                    running[request.id] = nil
                    return false
                }
                if abandoned {
                    if res >= 0 { Glibc.close(CInt(res)) }
                    return false
                }
                request.complete(completion)
                return true
            case .again:
                // A cancel that came during the last piece ends the request here, as on io_uring; an open
                // given up while it waited (and interrupted, EINTR) is not tried again.
                enum Next { case retry, cancelled, abandoned }
                let next = lock.withLock { () -> Next in
                    if request.abandoned { return .abandoned }
                    guard request.cancelRequested else { return .retry }
                    running[request.id] = nil
                    return .cancelled
                }
                switch next {
                case .retry: continue
                case .abandoned: return false
                case .cancelled:
                    request.complete(IOCompletion(result: request.progress, error: .canceled))
                    return true
                }
            case .awaitReadiness(let events):
                park(request, fd: request.op.transferDescriptor!, events: events)
                return true
            }
        }
    }

    private func syscallResult(_ rc: Int) -> Int { rc >= 0 ? rc : -Int(errno) }

    // MARK: Whole small files

    /// Copies a small file to a new one on this pool thread, one system call after another as cp makes
    /// them, with the outcomes of ``IOEngine/copyFile(from:in:to:in:flags:permissions:length:keepOpen:then:)``.
    /// Run as separate operations, each step was a trip through the pool, and each copy held a buffer of the
    /// file's size until it ended: `dcopy -r` of 10,000 files of 4 KiB took 1.99× cp's time, and of 1,000
    /// of 1 MiB 1.48× at 71 MiB of RSS (64 copies in flight). Here the bytes go through `buffer`, this
    /// thread's own.
    ///
    /// The source is opened without blocking and must be a regular file: a FIFO put in its place since the
    /// caller's `statx` would otherwise hold this thread until a writer came, and shutdown with it. Any
    /// other kind is left to the caller (`.notStarted`), and so is a source whose open would wait: one
    /// under another process's write lease (`F_SETLEASE`; Samba's oplocks, NFS delegations) answers
    /// `EWOULDBLOCK` where a plain open waits for the lease to be given up, as cp's does (helper-54). The
    /// destination is one to create (`O_EXCL`: see `IOEngine.copyFile`), so its open cannot wait for a
    /// peer either. A copy that has started runs to its end: shutdown waits for it, as for any request
    /// in its system call (a hung network file system holds it).
    private static func copyWhole(_ copy: LinkedCopy, through buffer: UnsafeMutableRawBufferPointer) -> FileCopyOutcome
    {
        let source = retryingOnInterrupt {
            openat(copy.sourceDirectory, copy.source.pointer, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        }
        guard source >= 0 else {
            return errno == EWOULDBLOCK ? .notStarted : .failed(.openSource, Errno(rawValue: errno))
        }
        var status = stat()
        // Clearing O_NONBLOCK again (F_SETFL 0) leaves the descriptor as an ordinary open's, for the reads
        // and for a caller that keeps it.
        guard fstat(source, &status) == 0, status.st_mode & S_IFMT == S_IFREG, fcntl(source, F_SETFL, 0) == 0 else {
            Glibc.close(source)
            return .notStarted
        }
        let destination = retryingOnInterrupt {
            openat(copy.destinationDirectory, copy.destination.pointer, copy.flags | O_CLOEXEC, copy.mode)
        }
        guard destination >= 0 else {
            let failure = Errno(rawValue: errno)
            Glibc.close(source)
            return .failed(.openDestination, failure)
        }
        var outcome = move(copy, from: source, to: destination, through: buffer)
        if outcome == .copied {
            // The last byte expected and the one after it: the source must end where its size said.
            let found = retryingOnInterrupt {
                pread(source, copy.probe, Int(copy.probeLength), off_t(copy.probeOffset))
            }
            if found < 0 {
                outcome = .failed(.read, Errno(rawValue: errno))
            } else if found != Int(copy.probeExpects) {
                outcome = .incomplete
            }
        }
        if copy.keepsOpen && outcome == .copied { return .copiedOpen(source: source, destination: destination) }
        Glibc.close(source)
        // Linux closes the descriptor even when close reports EINTR; only a real error is the copy's.
        if Glibc.close(destination) != 0 && errno != EINTR && outcome == .copied {
            outcome = .failed(.closeDestination, Errno(rawValue: errno))
        }
        return outcome
    }

    /// Moves the copy's `length` bytes, a buffer at a time; `.incomplete` when the source ends early or
    /// the destination takes nothing.
    private static func move(
        _ copy: LinkedCopy,
        from source: CInt,
        to destination: CInt,
        through buffer: UnsafeMutableRawBufferPointer
    ) -> FileCopyOutcome {
        var offset = 0
        while offset < copy.length {
            let got = retryingOnInterrupt {
                pread(source, buffer.baseAddress, min(buffer.count, copy.length - offset), off_t(offset))
            }
            if got < 0 { return .failed(.read, Errno(rawValue: errno)) }
            if got == 0 { return .incomplete }
            var written = 0
            while written < got {
                let put = retryingOnInterrupt {
                    pwrite(destination, buffer.baseAddress! + written, got - written, off_t(offset + written))
                }
                if put < 0 { return .failed(.write, Errno(rawValue: errno)) }
                if put == 0 { return .incomplete }
                written += put
            }
            offset += got
        }
        return .copied
    }

    private static func retryingOnInterrupt<Result: BinaryInteger>(_ call: () -> Result) -> Result {
        while true {
            let result = call()
            if result >= 0 || errno != EINTR { return result }
        }
    }

    /// How a request's descriptor is read and written, decided once per request.
    private enum TransferMode: UInt8 {
        case undecided = 0
        case blocking  // regular files and block devices
        case noWait  // RWF_NOWAIT, then readiness
        case pollFirst  // no RWF_NOWAIT support: poll without waiting, then a blocking call
        case nonBlocking  // no RWF_NOWAIT support, but the descriptor is O_NONBLOCK: its own call, then readiness

        /// How a file of `type` (`S_IFMT` bits) is first tried.
        init(type: mode_t) { self = type == S_IFREG || type == S_IFBLK ? .blocking : .noWait }
    }

    /// One read or write system call for the current piece of `request`, as a count or a negated errno;
    /// -EAGAIN means "park until ready".
    private func transfer(_ request: Request) -> Int {
        guard let fd = request.op.transferDescriptor else { return -Int(EINVAL) }
        var mode = TransferMode(rawValue: request.transferMode) ?? .undecided
        if mode == .undecided {
            var st = stat()
            guard fstat(fd, &st) == 0 else { return -Int(errno) }
            mode = TransferMode(type: st.st_mode & S_IFMT)
        }
        defer { request.transferMode = mode.rawValue }
        let isWrite: Bool
        switch request.op {
        case .write, .vector(_, _, _, true): isWrite = true
        default: isWrite = false
        }
        if mode == .pollFirst && !request.readyHint {
            var pfd = pollfd(fd: fd, events: Int16(isWrite ? POLLOUT : POLLIN), revents: 0)
            if Glibc.poll(&pfd, 1, 0) == 0 { return -Int(EAGAIN) }
        }
        request.readyHint = false
        let flags = mode == .noWait ? CInt(CURING_RWF_NOWAIT) : 0
        let res = withTransferVector(request) { iov, count, offset in
            let call = { (offset: Int64) in
                self.syscallResult(
                    isWrite
                        ? pwritev2(fd, iov, count, off_t(offset), flags) : preadv2(fd, iov, count, off_t(offset), flags)
                )
            }
            let res = call(offset)
            // A descriptor that cannot seek (a pipe, or a regular file opened as a stream such as tracefs's
            // trace_pipe) refuses an offset; io_uring passes it to the file, which ignores it and transfers
            // at its position. So does this engine: the same call again at the current position (-1).
            return res == -Int(ESPIPE) && offset >= 0 ? call(-1) : res
        }
        if res == -Int(EOPNOTSUPP) && mode == .noWait {
            // A FIFO has no RWF_NOWAIT. Opened with O_NONBLOCK (a path channel's is) it needs no poll first,
            // and must not have one: with no writer yet its read finds the end of the file, as io_uring's
            // does, where a poll would wait for a writer.
            mode = fcntl(fd, F_GETFL) & O_NONBLOCK != 0 ? .nonBlocking : .pollFirst
            return -Int(EINTR)  // try again at once in the new mode
        }
        return res
    }

    private func withTransferVector(
        _ request: Request,
        _ body: (UnsafePointer<iovec>, CInt, Int64) -> Int
    ) -> Int {
        if case .vector(let vector, _, _, _) = request.op {
            let rest = vector.remaining
            return body(rest.pointer, CInt(rest.count), request.currentTransfer().offset)
        }
        let piece = request.currentTransfer()
        var iov = iovec(iov_base: piece.buffer, iov_len: piece.length)
        return body(&iov, 1, piece.offset)
    }

    // MARK: The reactor

    /// Parks `request` until `fd` is ready for `events`.
    private func park(_ request: Request, fd: CInt, events: UInt32) {
        var failure: Int32 = 0
        var readyNow = false
        var noReactor = false
        lock.withLock {
            // A request caught inside a system call by cancel or shutdown stops here instead of waiting.
            if request.cancelRequested || stopping {
                running[request.id] = nil
                failure = ECANCELED
                return
            }
            // Without a reactor this thread waits itself, and the request stays `running` meanwhile, so that
            // a cancel finds it.
            if ensureReactor() != nil {
                noReactor = true
                return
            }
            running[request.id] = nil
            request.readinessEvents = events
            var waiters = fdWaiters[fd] ?? []
            waiters.append(request.id)
            let mask = waiters.reduce(UInt32(0)) { $0 | (parked[$1]?.readinessEvents ?? events) }
            var event = epoll_event(
                events: mask | EPOLLONESHOT.rawValue,
                data: epoll_data_t(u64: UInt64(UInt32(bitPattern: fd)))
            )
            var rc = epoll_ctl(epollFD, registered.contains(fd) ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &event)
            if rc != 0 && errno == ENOENT {
                rc = epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event)
            } else if rc != 0 && errno == EEXIST {
                rc = epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
            }
            if rc != 0 {
                // EPERM: files epoll cannot watch (regular files, /dev/zero) are always ready, as poll(2) says.
                // A transfer goes straight back to the run queue in this hold of the lock, so that a cancel
                // always finds it somewhere.
                if errno != EPERM {
                    failure = errno
                } else if case .pollAdd = request.op {
                    readyNow = true
                } else if stopping {
                    failure = ECANCELED
                } else {
                    requeueReady(request)
                }
                return
            }
            registered.insert(fd)
            fdWaiters[fd] = waiters
            parked[request.id] = request
        }
        if noReactor {
            waitWithoutReactor(request, fd: fd, events: events)
        } else if failure != 0 {
            request.complete(IOCompletion(result: request.progress, error: Errno(rawValue: failure)))
        } else if readyNow {
            let ready = events & UInt32(POLLIN | POLLOUT)
            becameReady(request, revents: ready == 0 ? events : ready)
        }
    }

    /// Without a reactor the pool thread waits itself, in `poll`, for at most ``waitSlice`` milliseconds; a
    /// descriptor still not ready by then sends the request to the back of the run queue, to wait again when
    /// a thread takes it, so that a few such waits cannot hold every pool thread while the work that would
    /// make them ready is queued. A cancel (or shutdown) during the wait ends the request at the end of the
    /// slice. Costs a wake-up per waiting request per slice, where the reactor costs none; it is the way
    /// of a process without three descriptors to spare (`ulimit -n 4` with a pipe to read), whose waits
    /// used to fail with `EMFILE`.
    private func waitWithoutReactor(_ request: Request, fd: CInt, events: UInt32) {
        var pfd = pollfd(fd: fd, events: Int16(truncatingIfNeeded: events), revents: 0)
        let ready = Glibc.poll(&pfd, 1, Self.waitSlice) > 0
        let isPoll: Bool
        if case .pollAdd = request.op { isPoll = true } else { isPoll = false }
        enum Next { case cancelled, completePoll, queued }
        // A transfer goes back to the run queue in the same hold of the lock that takes it out of `running`:
        // between two, a cancel would find it nowhere (ENOENT) and be lost.
        let next = lock.withLock { () -> Next in
            running[request.id] = nil
            if request.cancelRequested || stopping { return .cancelled }
            if ready && isPoll { return .completePoll }
            if ready {
                requeueReady(request)
            } else {
                enqueue(request)
            }
            return .queued
        }
        switch next {
        case .cancelled: request.complete(IOCompletion(result: request.progress, error: .canceled))
        case .completePoll: request.complete(IOCompletion(result: Int(UInt16(bitPattern: pfd.revents))))
        case .queued: break
        }
    }

    /// How long a pool thread waits in `poll` at a time where there is no reactor, in milliseconds.
    private static let waitSlice: CInt = 10

    /// Completes a parked poll, or sends a parked transfer back to the pool.
    private func becameReady(_ request: Request, revents: UInt32) {
        if case .pollAdd = request.op {
            request.complete(IOCompletion(result: Int(revents)))
            return
        }
        let accepted = lock.withLock { () -> Bool in
            if stopping { return false }
            requeueReady(request)
            return true
        }
        if !accepted { request.complete(IOCompletion(result: request.progress, error: .canceled)) }
    }

    /// Sends a transfer whose descriptor is ready back to the run queue, to try its system call at once
    /// (no poll first). Lock held.
    private func requeueReady(_ request: Request) {
        request.readinessEvents = 0
        request.readyHint = true
        enqueue(request)
    }

    private func reactorLoop(epoll epollFD: CInt, wake wakeFD: CInt, timer timerFD: CInt) {
        let capacity = 64
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        while true {
            let count = epoll_wait(epollFD, events, CInt(capacity), -1)
            if count < 0 {
                if errno == EINTR { continue }
                fatalError("epoll_wait failed: \(Errno(rawValue: errno))")
            }
            for index in 0..<Int(count) {
                let key = events[index].data.u64
                let revents = events[index].events
                switch key {
                case Self.wakeKey:
                    var value: UInt64 = 0
                    _ = Glibc.read(wakeFD, &value, 8)
                    if lock.withLock({ stopping }) { return }
                case Self.timerKey:
                    var value: UInt64 = 0
                    _ = Glibc.read(timerFD, &value, 8)
                    fireTimers()
                default:
                    descriptorReady(CInt(bitPattern: UInt32(truncatingIfNeeded: key)), revents: revents)
                }
            }
        }
    }

    private func descriptorReady(_ fd: CInt, revents: UInt32) {
        let always = UInt32(POLLERR | POLLHUP | POLLNVAL)
        var ready: [(Request, UInt32)] = []
        lock.withLock {
            guard let waiters = fdWaiters[fd] else { return }
            var rest: [UInt64] = []
            for id in waiters {
                guard let request = parked[id] else { continue }
                let wanted = request.readinessEvents
                if revents & (wanted | always) != 0 {
                    parked[id] = nil
                    // A transfer goes back to the run queue in this same hold of the lock: between two, a
                    // cancel found it nowhere (ENOENT), and it went on and parked again uncancelled.
                    if case .pollAdd = request.op {
                        ready.append((request, revents & (wanted | always)))
                    } else if stopping {
                        ready.append((request, 0))
                    } else {
                        requeueReady(request)
                    }
                } else {
                    rest.append(id)
                }
            }
            reregister(fd, waiters: rest)
        }
        for (request, events) in ready {
            if case .pollAdd = request.op {
                request.complete(IOCompletion(result: Int(events)))
            } else {
                request.complete(IOCompletion(result: request.progress, error: .canceled))
            }
        }
    }

    /// Points the epoll registration of `fd` at what `waiters` still wait for, or removes it. Lock held.
    private func reregister(_ fd: CInt, waiters: [UInt64]) {
        let mask = waiters.reduce(UInt32(0)) { $0 | (parked[$1]?.readinessEvents ?? 0) }
        if waiters.isEmpty || mask == 0 {
            fdWaiters[fd] = nil
            registered.remove(fd)
            epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
        } else {
            fdWaiters[fd] = waiters
            var event = epoll_event(
                events: mask | EPOLLONESHOT.rawValue,
                data: epoll_data_t(u64: UInt64(UInt32(bitPattern: fd)))
            )
            epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
        }
    }

    /// Takes a parked request out of the reactor and completes it with ECANCELED; the result is this
    /// operation's own (0, or -ENOENT when there was nothing to remove).
    private func remove(_ target: UInt64, onlyIf matches: (Op) -> Bool) -> Int {
        let found = lock.withLock { () -> Request? in
            guard let request = parked[target], matches(request.op) else { return nil }
            parked[target] = nil
            if let fd = request.op.transferDescriptor ?? Self.pollDescriptor(request.op), let waiters = fdWaiters[fd] {
                reregister(fd, waiters: waiters.filter { $0 != target })
            }
            return request
        }
        guard let found else { return -Int(ENOENT) }
        found.complete(IOCompletion(result: found.progress, error: .canceled))
        return 0
    }

    private static func pollDescriptor(_ op: Op) -> CInt? {
        if case .pollAdd(let fd, _) = op { return fd }
        return nil
    }

    /// Removes a poll or timeout wherever it is: not started yet, being started by a pool thread (it then
    /// stops instead of waiting), or waiting. 0 when found, -ENOENT when it had already completed.
    private func withdraw(_ target: UInt64, matching: (Op) -> Bool) -> Int {
        enum Where {
            case queued(Request)
            case starting
            case elsewhere
        }
        let place = lock.withLock { () -> Where in
            if let request = runQueue.remove(id: target, matching: matching) { return .queued(request) }
            if let request = running[target], matching(request.op) {
                request.cancelRequested = true
                return .starting
            }
            return .elsewhere
        }
        switch place {
        case .queued(let request):
            request.complete(IOCompletion(result: 0, error: .canceled))
            return 0
        case .starting:
            return 0
        case .elsewhere:
            if remove(target, onlyIf: matching) == 0 { return 0 }
            return removeTimer(target, matching: matching)
        }
    }

    private func cancel(_ target: UInt64) -> Int {
        enum Where {
            case queued(Request)
            case running
            case elsewhere
        }
        let place = lock.withLock { () -> Where in
            if let request = runQueue.remove(id: target) ?? removeWaitingWrite(target) { return .queued(request) }
            if let request = running[target] {
                if let thread = openingThreads.removeValue(forKey: target) {
                    abandonOpen(request, thread: thread)
                    return .queued(request)
                }
                // It cannot be interrupted in its system call; it stops instead of parking.
                request.cancelRequested = true
                return .running
            }
            return .elsewhere
        }
        switch place {
        case .queued(let request):
            request.complete(IOCompletion(result: request.progress, error: .canceled))
            return 0
        case .running:
            return -Int(EALREADY)
        case .elsewhere:
            if remove(target, onlyIf: { _ in true }) == 0 { return 0 }
            return removeTimer(target)
        }
    }

    // MARK: Timers

    private func addTimer(_ request: Request, deadline: Int64) {
        let accepted = lock.withLock { () -> Bool in
            running[request.id] = nil
            if stopping || request.cancelRequested { return false }
            if ensureReactor() != nil && !timerThreadStarted {
                timerThreadStarted = true
                threads.append(spawn { $0.timerLoop() })
            }
            timerRequests[request.id] = request
            timers.insert(deadline: deadline, id: request.id)
            armTimer()
            return true
        }
        if !accepted { request.complete(IOCompletion(result: 0, error: .canceled)) }
    }

    private func removeTimer(_ target: UInt64, matching: (Op) -> Bool = { _ in true }) -> Int {
        let found = lock.withLock { () -> Request? in
            guard let request = timerRequests[target], matching(request.op) else { return nil }
            return timerRequests.removeValue(forKey: target)
        }
        guard let request = found else { return -Int(ENOENT) }
        request.complete(IOCompletion(result: 0, error: .canceled))
        return 0
    }

    /// Points the timerfd at the earliest live deadline. Lock held.
    private func armTimer() {
        while let first = timers.first, timerRequests[first.id] == nil { _ = timers.popFirst() }
        let next = timers.first?.deadline ?? .max
        guard next != armedDeadline else { return }
        armedDeadline = next
        var spec = itimerspec()
        if next != .max {
            // Zero would disarm the timer; a deadline in the past fires at once as 1 ns.
            let at = max(next, 1)
            spec.it_value = timespec(tv_sec: Int(at / 1_000_000_000), tv_nsec: Int(at % 1_000_000_000))
        }
        if timerFD >= 0 { timerfd_settime(timerFD, CInt(TFD_TIMER_ABSTIME), &spec, nil) }
        if timerThreadStarted { pthread_cond_signal(timersChanged) }
    }

    /// Keeps the timeouts where there is no reactor (and so no timerfd): waits for the earliest deadline
    /// on a condition variable, on the monotonic clock (deadlines are on the boot-time clock, which also
    /// counts suspended time; a wait that spans a suspend ends late, not early), and fires what is due.
    private func timerLoop() {
        lock.lock()
        while !stopping {
            while let first = timers.first, timerRequests[first.id] == nil { _ = timers.popFirst() }
            guard let deadline = timers.first?.deadline else {
                lock.wait(on: timersChanged)
                continue
            }
            let left = deadline - BootTime.now()
            if left <= 0 {
                lock.unlock()
                fireTimers()
                lock.lock()
                continue
            }
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            // (A deadline that never comes, `BootTime.latestSecond`, stays in range: the monotonic clock is
            // never ahead of the boot-time one.)
            let (sum, overflow) = (Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)).addingReportingOverflow(left)
            let until = overflow ? Int64.max : sum
            lock.wait(
                on: timersChanged,
                until: timespec(tv_sec: Int(until / 1_000_000_000), tv_nsec: Int(until % 1_000_000_000))
            )
        }
        lock.unlock()
    }

    private func fireTimers() {
        var due: [Request] = []
        lock.withLock {
            let now = BootTime.now()
            while let first = timers.first, first.deadline <= now {
                _ = timers.popFirst()
                if let request = timerRequests.removeValue(forKey: first.id) { due.append(request) }
            }
            armedDeadline = .min
            armTimer()
        }
        for request in due { request.complete(IOCompletion(result: 0)) }
    }
}

/// A pool thread's buffer for whole-file copies, made at its first one: 128 KiB for each of the pool's four
/// threads (and for a thread that replaced one given up in an open, beside the old one's, until it ends).
private final class CopyScratch {
    private var storage: UnsafeMutableRawBufferPointer?

    var buffer: UnsafeMutableRawBufferPointer {
        if let storage { return storage }
        let made = UnsafeMutableRawBufferPointer.allocate(byteCount: LinkedCopy.pieceSize, alignment: 4096)
        storage = made
        return made
    }

    deinit { storage?.deallocate() }
}

/// A regular file, as its writes are ordered: by inode, as io_uring's workers order them.
private struct FileIdentity: Hashable {
    let major: UInt32
    let minor: UInt32
    let inode: UInt64
}

/// The write of a regular file that is running or queued to run, and the file's writes submitted after it.
private struct WriteLane {
    var holder: UInt64
    var waiting: [Request] = []
}

/// A first-in first-out queue of requests that can also drop one by identifier (cancel).
private struct FIFO {
    private var items: [Request?] = []
    private var head = 0

    mutating func push(_ request: Request) { items.append(request) }

    /// Requests queued, counting the places of those cancelled since (which `pop` skips).
    var count: Int { items.count - head }

    mutating func pop() -> Request? {
        while head < items.count {
            let item = items[head]
            items[head] = nil
            head += 1
            if head == items.count || head > 1024 && head * 2 > items.count {
                items.removeFirst(head)
                head = 0
            }
            if let item { return item }
        }
        return nil
    }

    mutating func remove(id: UInt64, matching: (Op) -> Bool = { _ in true }) -> Request? {
        for index in head..<items.count where items[index]?.id == id && matching(items[index]!.op) {
            let item = items[index]
            items[index] = nil
            return item
        }
        return nil
    }
}

/// A binary min-heap of (deadline, id).
private struct DeadlineHeap {
    private var storage: [(deadline: Int64, id: UInt64)] = []

    var first: (deadline: Int64, id: UInt64)? { storage.first }

    mutating func insert(deadline: Int64, id: UInt64) {
        storage.append((deadline, id))
        var child = storage.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            if storage[parent].deadline <= storage[child].deadline { break }
            storage.swapAt(parent, child)
            child = parent
        }
    }

    mutating func popFirst() -> (deadline: Int64, id: UInt64)? {
        guard !storage.isEmpty else { return nil }
        storage.swapAt(0, storage.count - 1)
        let top = storage.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < storage.count && storage[left].deadline < storage[smallest].deadline { smallest = left }
            if right < storage.count && storage[right].deadline < storage[smallest].deadline { smallest = right }
            if smallest == parent { break }
            storage.swapAt(parent, smallest)
            parent = smallest
        }
        return top
    }
}
