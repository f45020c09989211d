import CURing
import Synchronization
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// The io_uring engine: one ring, owned by one thread.
///
/// Other threads append requests to `incoming` under a lock and wake the ring thread only when it is
/// about to sleep (`sleeping`), so a busy ring takes no wake-up system calls. The wake-up is a futex the
/// ring keeps a wait on (Linux 6.8), or on older kernels an eventfd it keeps a read on: the futex costs
/// no descriptor, which a process near its `RLIMIT_NOFILE` (`ulimit -n 4`) needs for its files; nor does
/// the ring, whose descriptor the ring thread registers with itself and closes (6.3). The ring thread
/// fills as many SQEs as it has requests, submits them with one `io_uring_enter`, reaps every CQE, and
/// calls each request's handler. Handlers that submit from the ring thread go to `local` and join the
/// next batch without locking or waking.
final class URingBackend: EngineBackend, @unchecked Sendable {
    /// Entries in the submission queue; the completion queue gets `completionEntries`.
    static let submissionEntries: UInt32 = 256
    static let completionEntries: UInt32 = 4096
    /// `user_data` of the engine's own requests.
    private static let wakeID: UInt64 = 0
    private static let cancelAllID: UInt64 = .max
    /// The pause before a drain asks again to cancel what is still running.
    private static let cancelAllRetryID: UInt64 = .max - 1
    /// The no-op that has the kernel start the ring's first worker (see `warmWorker`).
    private static let warmID: UInt64 = .max - 2
    /// A linked copy's requests carry its request's ID with the step (1...9) in the top byte; the closes
    /// that free a failed copy's slots carry this tag there and the lane below.
    private static let stepShift: UInt64 = 56
    private static let idMask: UInt64 = (1 << 56) - 1
    private static let laneCleanupTag: UInt64 = 0xFE
    /// Linked copies in flight at once, each in a lane of four registered-descriptor slots: the source,
    /// the destination, and the two ends of the lane's pipe. `dcopy -r` of 10,000 files of 4 KiB took
    /// 0.90× the time with 64 as with 32, 16 took 1.11× and 8 1.26×, 128 no better than 64 (alternating
    /// runs, 2026-11-24): while one chain waits for its directory's lock to create its file, others
    /// open, splice and close.
    ///
    /// The kernel refuses a descriptor table larger than `RLIMIT_NOFILE` (`EMFILE`), and liburing answers
    /// that by raising the process's soft limit behind its back, or gives up when the hard limit is as low.
    /// Under a limit below 256 there are as many lanes as a quarter of it (`ulimit -n 200`: 50), the limit
    /// stays as the user set it, and small files still go in one submission.
    static let copyLanes: UInt32 = 64
    /// Lanes `0..<largeLanes` grow their pipe to ``copyPipeSize`` and take files of any size up to it;
    /// the rest keep the kernel's default pipe (64 KiB) and take only files that fit in it. A pipe's size
    /// counts against its user's `pipe-user-pages-soft` (16,384 pages by default) whether or not it holds
    /// anything, and past that limit an unprivileged user's new pipes get two pages, every process's of
    /// that user: the engine's pipes stay at 32 × 256 + 32 × 16 pages at most.
    static let largeLanes: UInt32 = 32
    /// This ring's lanes: ``copyLanes``, or fewer under a low descriptor limit; the first
    /// `largeLaneCount` of them large.
    private let laneCount: UInt32
    private let largeLaneCount: UInt32
    /// The pipe size asked for in a large lane, which is the largest file a linked copy takes
    /// (`/proc/sys/fs/pipe-max-size` is 1 MiB by default, so an unprivileged process gets it too).
    static let copyPipeSize: CInt = 1 << 20

    private let ring: UnsafeMutablePointer<io_uring>
    /// The eventfd the ring thread waits on, or -1 when it waits on `wakeWord`.
    private let wakeFD: CInt
    private let wakeBuffer: UnsafeMutablePointer<UInt64>
    /// 1 ms: how long a drain waits before asking again to cancel requests running in io_uring's workers.
    private let retryPause: UnsafeMutablePointer<__kernel_timespec>
    private let wakeWord: UnsafeMutablePointer<UInt32>
    private let enableOnRingThread: Bool
    private let nextID = Atomic<UInt64>(1)
    private let sleeping = Atomic<Bool>(false)
    /// Wake-ups decided under `handoff` and not yet made. The ring thread closes its eventfd only once
    /// none is left: it stops after seeing `stopping` under that lock, a wake-up decided before then may
    /// still be on its way, and written after the close it would put 8 bytes into whatever file took the
    /// descriptor's number (kernels before 6.8, which wake the ring through an eventfd).
    private let wakesUnderway = Atomic<Int>(0)
    private let ringThread = Atomic<UInt>(0)
    private let descriptorsOpen: Atomic<Int>
    /// Lanes taken by linked copies and not yet given back (for tests).
    let copyLanesInUse = Atomic<Int>(0)

    private let handoff = Lock()
    // Guarded by `handoff`.
    private var incoming: [Request] = []
    private var stopping = false
    private var joiner: pthread_t?

    // Touched by the ring thread only.
    private var inFlight: [UInt64: Request] = [:]
    private var local: [Request] = []
    private var draining = false
    private var wakeArmed = false
    private var cancelAllPending = false
    /// Free lanes `0..<largeLanes`, and free lanes past them, each a stack.
    private var freeLanes: [UInt32] = []
    private var freeSmallLanes: [UInt32] = []
    /// The size the kernel gave each lane's pipe (a longer file cannot go through it in one splice), or 0
    /// when the lane has no empty pipe: it is made on the lane's first use, and again after a failure.
    private var lanePipeSize: [Int] = []
    /// Closes still to complete before a failed copy's lane is free again.
    private var laneCleanups: [Int] = []
    /// Linked copies waiting for a free lane.
    private var copiesWaiting: [Request] = []

    /// Whether the kernel took the registered-descriptor table that linked copies use.
    let linkedCopies: Bool
    /// Whether a linked copy can end by giving its files ordinary descriptors (`IORING_OP_FIXED_FD_INSTALL`,
    /// Linux 6.8) instead of closing them.
    let linkedCopiesKeepOpen: Bool
    var copiesWholeOnOneThread: Bool { false }

    /// The flag sets tried in order: the newest first (one issuer; the kernel's task work waits for this
    /// thread's next system call instead of interrupting it), then plainer ones for older kernels.
    ///
    /// Not `DEFER_TASKRUN`: with it, a request completed by an io_uring worker is finished as task work
    /// on the ring thread, and the next request of a linked chain is issued from there, so each step of a
    /// linked copy went worker → ring thread → worker. Without it, the worker posts the completion and runs
    /// the next step itself. Measured on 10,000 small files: context switches 10,000–12,000 → 2,900–3,600,
    /// 149 → 142 ms in alternating runs; dcat to /dev/null 186 → 175 ms; a pipe into dcat unchanged.
    private static let setupFlagSets: [UInt32] = [
        UInt32(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_R_DISABLED)
            | UInt32(IORING_SETUP_CQSIZE),
        UInt32(IORING_SETUP_CQSIZE),
        0,
    ]

    /// Opcodes the engine issues; a kernel without one of them gets the POSIX engine.
    private static let requiredOpcodes: [(Int32, String)] = [
        (Int32(IORING_OP_NOP.rawValue), "nop"), (Int32(IORING_OP_READ.rawValue), "read"),
        (Int32(IORING_OP_WRITE.rawValue), "write"), (Int32(IORING_OP_READV.rawValue), "readv"),
        (Int32(IORING_OP_WRITEV.rawValue), "writev"), (Int32(IORING_OP_OPENAT.rawValue), "openat"),
        (Int32(IORING_OP_CLOSE.rawValue), "close"), (Int32(IORING_OP_STATX.rawValue), "statx"),
        (Int32(IORING_OP_FSYNC.rawValue), "fsync"), (Int32(IORING_OP_POLL_ADD.rawValue), "poll_add"),
        (Int32(IORING_OP_POLL_REMOVE.rawValue), "poll_remove"), (Int32(IORING_OP_TIMEOUT.rawValue), "timeout"),
        (Int32(IORING_OP_TIMEOUT_REMOVE.rawValue), "timeout_remove"),
        (Int32(IORING_OP_ASYNC_CANCEL.rawValue), "async_cancel"),
    ]

    init() throws(EngineUnavailable) {
        // kernel.io_uring_disabled is read only when the set-up fails, for the message: with 2 the set-up fails
        // with EPERM, and so it does with 1 outside io_uring_group. Reading it first cost every start an open,
        // a read and a close (about 40 µs of dcat's 2 ms on an empty file).
        ring = .allocate(capacity: 1)
        ring.initialize(to: io_uring())
        var lastError: CInt = 0
        var features: UInt32 = 0
        var enable = false
        var ready = false
        for flags in Self.setupFlagSets {
            var params = io_uring_params()
            params.flags = flags
            params.cq_entries = Self.completionEntries
            let rc = io_uring_queue_init_params(Self.submissionEntries, ring, &params)
            if rc == 0 {
                enable = flags & UInt32(IORING_SETUP_R_DISABLED) != 0
                let needed = UInt32(IORING_FEAT_NODROP | IORING_FEAT_RW_CUR_POS | IORING_FEAT_FAST_POLL)
                if params.features & needed != needed {
                    io_uring_queue_exit(ring)
                    ring.deallocate()
                    throw EngineUnavailable(
                        description: "io_uring lacks NODROP, RW_CUR_POS or FAST_POLL (kernel too old)"
                    )
                }
                // Timeouts use IORING_TIMEOUT_BOOTTIME (5.15) and shutdown's drain IORING_ASYNC_CANCEL_ANY
                // (5.19), neither of which a probe can see: older kernels refuse both with EINVAL, every
                // timeout fails and shutdown waits forever, so they get the POSIX engine.
                if !kernelAtLeast(5, 19) {
                    io_uring_queue_exit(ring)
                    ring.deallocate()
                    throw EngineUnavailable(
                        description: "io_uring on a kernel older than 5.19 (no IORING_ASYNC_CANCEL_ANY)"
                    )
                }
                features = params.features
                ready = true
                break
            }
            lastError = -rc
            // Only an unknown flag is worth another try; EPERM, ENOSYS and ENOMEM are final.
            if rc != -EINVAL { break }
        }
        guard ready else {
            ring.deallocate()
            let sysctl =
                Self.readSysctl("/proc/sys/kernel/io_uring_disabled").map { " (kernel.io_uring_disabled=\($0))" } ?? ""
            throw EngineUnavailable(
                description: "io_uring_setup failed: \(Errno(rawValue: lastError))\(sysctl)"
            )
        }
        var futexWake = false
        var fixedInstall = false
        if let probe = io_uring_get_probe_ring(ring) {
            defer { io_uring_free_probe(probe) }
            // 6.8: a futex wait that ended at once (EAGAIN, which this wake-up meets often) was not cleaned up
            // properly before ("io_uring/futex: ensure io_futex_wait() cleans up properly on failure").
            futexWake = io_uring_opcode_supported(probe, CURING_OP_FUTEX_WAIT) != 0 && kernelAtLeast(6, 8)
            fixedInstall = io_uring_opcode_supported(probe, CURING_OP_FIXED_FD_INSTALL) != 0
            let missing = Self.requiredOpcodes.filter { io_uring_opcode_supported(probe, $0.0) == 0 }.map(\.1)
            if !missing.isEmpty {
                io_uring_queue_exit(ring)
                ring.deallocate()
                throw EngineUnavailable(description: "io_uring lacks opcodes: \(missing.joined(separator: ", "))")
            }
        }
        // Linked copies need requests that skip their completion on success (5.17), descriptors a linked
        // request resolves only when it runs (5.18), and a sparse table to open into (5.19). The table is
        // registered before the ring thread enables the ring, while no task owns it yet.
        let linkable = UInt32(IORING_FEAT_CQE_SKIP) | UInt32(IORING_FEAT_LINKED_FILE)
        var limit = rlimit()
        let descriptorLimit =
            getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 ? limit.rlim_cur : rlim_t(Self.copyLanes * 4)
        laneCount = UInt32(min(rlim_t(Self.copyLanes), descriptorLimit / 4))
        largeLaneCount = min(Self.largeLanes, laneCount)
        linkedCopies =
            features & linkable == linkable && laneCount > 0
            && io_uring_register_files_sparse(ring, laneCount * 4) == 0
        linkedCopiesKeepOpen = linkedCopies && fixedInstall
        if linkedCopies {
            freeLanes = Array((0..<largeLaneCount).reversed())
            freeSmallLanes = Array((largeLaneCount..<laneCount).reversed())
            lanePipeSize = Array(repeating: 0, count: Int(laneCount))
            laneCleanups = Array(repeating: 0, count: Int(laneCount))
        }
        let efd = futexWake ? -1 : eventfd(0, CInt(EFD_CLOEXEC))
        guard futexWake || efd >= 0 else {
            let error = Errno(rawValue: errno)
            io_uring_queue_exit(ring)
            ring.deallocate()
            throw EngineUnavailable(description: "eventfd failed: \(error)")
        }
        wakeFD = efd
        wakeBuffer = .allocate(capacity: 1)
        wakeBuffer.initialize(to: 0)
        retryPause = .allocate(capacity: 1)
        retryPause.initialize(to: __kernel_timespec(tv_sec: 0, tv_nsec: 1_000_000))
        wakeWord = .allocate(capacity: 1)
        wakeWord.initialize(to: 0)
        descriptorsOpen = Atomic(futexWake ? 1 : 2)
        enableOnRingThread = enable
        started = .allocate(capacity: 1)
        sem_init(started, 0, 0)
        // The ring thread closes the ring's descriptor once it has registered the ring. A caller whose next
        // open needs that number (dcat opens its file right away, at `ulimit -n 4`) must find it closed when
        // `init` returns, so `init` waits for the thread where descriptors are scarce: under a limit of 64,
        // which is set to be reached, or when a probe finds no other descriptor free. Elsewhere the thread
        // starts beside the caller: without the wait, dcat of an empty file took 0.95–0.97× the time (1.86
        // against 1.96 ms and 1.73 against 1.79, medians of 800 and 600 runs in turn, 2026-11-26).
        let spare = descriptorLimit < 64 ? -1 : fcntl(ring.pointee.ring_fd, F_DUPFD_CLOEXEC, 0)
        if spare >= 0 { close(spare) }
        startThread()
        if spare < 0 { waitUntilStarted() }
    }

    /// Posted by the ring thread once the ring is enabled and its descriptor dropped or kept.
    private let started: UnsafeMutablePointer<sem_t>

    /// Returns once the ring thread has enabled the ring and dropped or kept its descriptor.
    private func waitUntilStarted() {
        while sem_wait(started) != 0 {}
        // Posted again for the next caller: the thread posts once.
        sem_post(started)
    }

    deinit {
        ring.deallocate()
        wakeBuffer.deallocate()
        retryPause.deallocate()
        wakeWord.deallocate()
        // Not right after the wait: sem_post may still touch the semaphore after it has woken the waiter.
        sem_destroy(started)
        started.deallocate()
    }

    var ownDescriptorCount: Int {
        waitUntilStarted()
        return descriptorsOpen.load(ordering: .acquiring)
    }

    private static func readSysctl(_ path: String) -> Int? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var bytes = [UInt8](repeating: 0, count: 32)
        let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        return Int(String(decoding: bytes[..<n], as: UTF8.self).filter(\.isNumber))
    }

    private func startThread() {
        let context = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let rc = startEngineThread(
            &thread,
            { context in
                let backend = Unmanaged<URingBackend>.fromOpaque(context!).takeRetainedValue()
                backend.run()
                return nil
            },
            context
        )
        if rc != 0 { cannotStartThread("the io_uring engine's thread", error: rc) }
        handoff.withLock { joiner = thread }
    }

    // MARK: Submission (any thread)

    func submit(
        _ op: Op,
        offload: Bool,
        keepAlive: consuming AnyObject?,
        handler: @escaping CompletionHandler
    ) -> OperationID {
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        let request = Request(id: id, op: op, offload: offload, keepAlive: consume keepAlive, handler: handler)
        if ringThread.load(ordering: .acquiring) == UInt(pthread_self()) {
            if draining {
                handler(IOCompletion(result: 0, error: .socketShutdown))
            } else {
                local.append(request)
            }
            return OperationID(rawValue: id)
        }
        let (accepted, mustWake) = handoff.withLock { () -> (Bool, Bool) in
            if stopping { return (false, false) }
            incoming.append(request)
            guard sleeping.exchange(false, ordering: .sequentiallyConsistent) else { return (true, false) }
            // Counted in the lock, before the ring thread can see `stopping`: see `wakesUnderway`.
            wakesUnderway.add(1, ordering: .relaxed)
            return (true, true)
        }
        guard accepted else {
            handler(IOCompletion(result: 0, error: .socketShutdown))
            return OperationID(rawValue: id)
        }
        if mustWake {
            wake()
            wakesUnderway.subtract(1, ordering: .releasing)
        }
        return OperationID(rawValue: id)
    }

    private func wake() {
        guard wakeFD >= 0 else { return curing_futex_bump_and_wake(wakeWord) }
        var one: UInt64 = 1
        // EAGAIN can only mean the counter is saturated, which wakes the ring thread all the same.
        _ = Glibc.write(wakeFD, &one, 8)
    }

    func shutdown() {
        if ringThread.load(ordering: .acquiring) == UInt(pthread_self()) {
            fatalError("IOEngine.shutdown() called from the engine's own thread (inside a completion handler)")
        }
        let thread = handoff.withLock { () -> pthread_t? in
            if stopping { return nil }
            stopping = true
            wakesUnderway.add(1, ordering: .relaxed)
            defer { joiner = nil }
            return joiner
        }
        guard let thread else { return }
        wake()
        wakesUnderway.subtract(1, ordering: .releasing)
        pthread_join(thread, nil)
    }

    // MARK: The ring thread

    private func run() {
        blockWriteSignalsInThisThread()
        ringThread.store(UInt(pthread_self()), ordering: .releasing)
        if enableOnRingThread {
            let rc = curing_enable_rings(ring)
            if rc != 0 { fatalError("io_uring_enable_rings failed: \(Errno(rawValue: -rc))") }
        }
        if curing_drop_ring_fd(ring) == 1 { descriptorsOpen.subtract(1, ordering: .releasing) }
        sem_post(started)
        armWake()
        warmWorker()
        var batch: [Request] = []
        let capacity = 256
        let cqes = UnsafeMutablePointer<UnsafeMutablePointer<io_uring_cqe>?>.allocate(capacity: capacity)
        let results = UnsafeMutablePointer<(UInt64, Int32)>.allocate(capacity: capacity)
        defer {
            cqes.deallocate()
            results.deallocate()
        }

        func reap() {
            while true {
                if !stashed.isEmpty {
                    var taken: [(UInt64, Int32)] = []
                    swap(&taken, &stashed)
                    for (id, res) in taken { handle(id, res) }
                    continue
                }
                let count = Int(io_uring_peek_batch_cqe(ring, cqes, UInt32(capacity)))
                if count == 0 { return }
                // Copy the results out and free the CQ slots before any handler runs.
                for index in 0..<count {
                    let cqe = cqes[index]!.pointee
                    results[index] = (cqe.user_data, cqe.res)
                }
                io_uring_cq_advance(ring, UInt32(count))
                for index in 0..<count { handle(results[index].0, results[index].1) }
            }
        }
        // Takes completions off the ring without handling them, for `nextSQE` in the middle of a handler.
        func stash() {
            while true {
                let count = Int(io_uring_peek_batch_cqe(ring, cqes, UInt32(capacity)))
                if count == 0 { return }
                for index in 0..<count {
                    let cqe = cqes[index]!.pointee
                    stashed.append((cqe.user_data, cqe.res))
                }
                io_uring_cq_advance(ring, UInt32(count))
            }
        }
        self.stashAll = stash

        while true {
            while !local.isEmpty {
                swap(&batch, &local)
                for request in batch { prepare(request) }
                batch.removeAll(keepingCapacity: true)
            }
            let stop = handoff.withLock { () -> Bool in
                swap(&batch, &incoming)
                return stopping
            }
            for request in batch { draining ? cancelUnsubmitted(request) : prepare(request) }
            batch.removeAll(keepingCapacity: true)
            if stop && !draining { beginDrain() }
            if draining && inFlight.isEmpty && !wakeArmed && !cancelAllPending { break }

            // (Completions stashed to make room are handled by the reap below: no waiting for more.)
            var wait: UInt32 = local.isEmpty && stashed.isEmpty ? 1 : 0
            if wait == 1 && !draining {
                sleeping.store(true, ordering: .sequentiallyConsistent)
                if handoff.withLock({ !incoming.isEmpty || stopping }) {
                    sleeping.store(false, ordering: .sequentiallyConsistent)
                    wait = 0
                }
            }
            // With COOP_TASKRUN, task work that posts completions runs when this thread enters the kernel,
            // so the non-blocking path asks for completions too.
            let rc = wait == 1 ? io_uring_submit_and_wait(ring, 1) : io_uring_submit_and_get_events(ring)
            sleeping.store(false, ordering: .relaxed)
            if rc < 0 && rc != -EINTR && rc != -EBUSY && rc != -EAGAIN && rc != -ETIME {
                fatalError("io_uring_enter failed: \(Errno(rawValue: -rc))")
            }
            reap()
        }
        stashAll = nil
        io_uring_queue_exit(ring)
        if wakeFD >= 0 {
            while wakesUnderway.load(ordering: .acquiring) > 0 { sched_yield() }
            Glibc.close(wakeFD)
        }
        descriptorsOpen.store(0, ordering: .releasing)
    }

    /// Moves completions from the ring to `stashed`; set while the ring thread runs, so that `nextSQE` can
    /// make room. It must not handle them: `nextSQE` runs inside handlers (a re-armed wait, a failed copy's
    /// closes), and handling there re-entered the reap, whose batch of results the inner one overwrote.
    private var stashAll: (() -> Void)?
    /// Completions taken off the ring to make room and not yet handled; the next reap handles them first.
    private var stashed: [(UInt64, Int32)] = []

    private func armWake() {
        let sqe = nextSQE()
        if wakeFD >= 0 {
            io_uring_prep_read(sqe, wakeFD, wakeBuffer, 8, 0)
        } else {
            // A wake-up between this load and the kernel's check makes the wait end at once (EAGAIN), and
            // it is armed again with the new value.
            curing_prep_futex_wait(sqe, wakeWord, curing_futex_load(wakeWord))
        }
        io_uring_sqe_set_data64(sqe, Self.wakeID)
        wakeArmed = true
    }

    /// Has the kernel start the ring's first worker thread now, beside the caller's own start-up, with an
    /// offloaded no-op. Requests the kernel cannot run inline go to these workers: a read of a tmpfs or
    /// /proc file (neither has a non-blocking read), a write to tmpfs, an open with `O_CREAT` or `O_TRUNC`
    /// or one that misses the dentry cache, a splice. The first one of each engine otherwise waited while
    /// the kernel made a thread (the worker ran 0.2 ms before the read it was made for). Measured on
    /// 2026-11-26 in batches of 600–800 runs in turn: dcat of an empty file on tmpfs took 0.95–0.99× the
    /// time (the gain was least when the host was busiest); dcopy of one 4 KiB file, and dcat of an empty
    /// file on ext4 (whose reads run inline), the same time either way. The kernel keeps the last idle
    /// worker of the pool this warms (the one for files; offloaded requests on pipes and sockets have
    /// another), so this costs one sleeping thread for the ring's life. The no-op posts no completion
    /// unless it fails (cancelled by a drain), so it does not wake this thread.
    private func warmWorker() {
        let sqe = nextSQE()
        io_uring_prep_nop(sqe)
        sqe.pointee.flags |= UInt8(1 << IOSQE_ASYNC_BIT) | UInt8(1 << IOSQE_CQE_SKIP_SUCCESS_BIT)
        io_uring_sqe_set_data64(sqe, Self.warmID)
    }

    private func beginDrain() {
        draining = true
        for request in local { cancelUnsubmitted(request) }
        local.removeAll()
        for request in copiesWaiting { cancelUnsubmitted(request) }
        copiesWaiting.removeAll()
        let sqe = nextSQE()
        io_uring_prep_cancel64(sqe, 0, CInt(IORING_ASYNC_CANCEL_ANY))
        io_uring_sqe_set_data64(sqe, Self.cancelAllID)
        cancelAllPending = true
    }

    /// A cancel prepared before its target: a request another thread submitted is still in `incoming`
    /// while a cancel made on this thread (in a completion handler) goes through `local` first. Marked, the
    /// target ends with ECANCELED when it is prepared, as one cancelled between two steps. (A linked copy
    /// waiting for a lane is never the target: its caller has no name for it, see `IOEngine.copyFile`.)
    /// The removal of a poll or a timeout does the same for a target of its kind (`matching`). Returns
    /// whether the target was found.
    private func cancelPending(_ target: UInt64, matching: (Op) -> Bool = { _ in true }) -> Bool {
        if let request = local.first(where: { $0.id == target }) {
            guard matching(request.op) else { return false }
            request.cancelRequested = true
            return true
        }
        return handoff.withLock { () -> Bool in
            guard let request = incoming.first(where: { $0.id == target }), matching(request.op) else { return false }
            request.cancelRequested = true
            return true
        }
    }

    private func cancelUnsubmitted(_ request: Request) {
        // A request between two steps is still counted in flight: the drain waits for that to empty.
        inFlight[request.id] = nil
        request.complete(IOCompletion(result: request.progress, error: .canceled))
    }

    /// A free SQE; when the submission queue is full, the queued ones go to the kernel first.
    private func nextSQE() -> UnsafeMutablePointer<io_uring_sqe> {
        while true {
            if let sqe = io_uring_get_sqe(ring) { return sqe }
            let rc = io_uring_submit(ring)
            // EBUSY: the completion queue overflowed and wants reaping before more submissions.
            if rc == -EBUSY || rc == -EAGAIN { stashAll?() }
        }
    }

    private func handle(_ id: UInt64, _ res: Int32) {
        if id == Self.warmID { return }
        if id == Self.wakeID {
            // Woken (0, or the eventfd's 8 bytes), or the word changed before the wait began (EAGAIN), or
            // cancelled by the drain; any other result would come back at once on every re-arm, and the
            // thread would spin.
            if res < 0 && res != -EAGAIN && res != -ECANCELED && res != -EINTR {
                fatalError("the ring thread's wake-up wait failed: \(Errno(rawValue: -res))")
            }
            wakeArmed = false
            if !draining { armWake() }
            return
        }
        if id == Self.cancelAllID {
            cancelAllPending = false
            // Anything the kernel could not cancel yet (EALREADY: running in a worker) is asked again until
            // it is gone, after a pause: asked again at once, the ring thread spun for as long as the
            // request ran (an fsync, a large offloaded read).
            if draining && !inFlight.isEmpty {
                let sqe = nextSQE()
                io_uring_prep_timeout(sqe, retryPause, 0, 0)
                io_uring_sqe_set_data64(sqe, Self.cancelAllRetryID)
                cancelAllPending = true
            }
            return
        }
        if id == Self.cancelAllRetryID {
            cancelAllPending = false
            if draining && !inFlight.isEmpty {
                let sqe = nextSQE()
                io_uring_prep_cancel64(sqe, 0, CInt(IORING_ASYNC_CANCEL_ANY))
                io_uring_sqe_set_data64(sqe, Self.cancelAllID)
                cancelAllPending = true
            }
            return
        }
        let tag = id >> Self.stepShift
        if tag == Self.laneCleanupTag { return cleanedUp(lane: Int(id & Self.idMask)) }
        guard let request = inFlight[id & Self.idMask] else { return }
        let res = Self.userVisible(res, cancelled: request.cancelRequested)
        if case .linkedCopy(let copy) = request.op { return handleCopy(request, copy, step: tag, res: res) }
        if request.readinessEvents != 0 {
            request.readinessEvents = 0
            if res < 0 {
                finish(request, IOCompletion(result: request.progress, error: Errno(rawValue: -res)))
            } else if draining {
                finish(request, IOCompletion(result: request.progress, error: .canceled))
            } else {
                local.append(request)
            }
            return
        }
        switch request.step(after: Int(res)) {
        case .complete(let completion): finish(request, completion)
        case .again:
            draining ? finish(request, IOCompletion(result: request.progress, error: .canceled)) : local.append(request)
        case .awaitReadiness(let events):
            if draining {
                finish(request, IOCompletion(result: request.progress, error: .canceled))
            } else {
                request.readinessEvents = events
                local.append(request)
            }
        }
    }

    /// The kernel's internal restart codes (`ERESTARTSYS` 512 to `ERESTART_RESTARTBLOCK` 516) as a process
    /// would see them: a request interrupted in an io_uring worker can complete with one (an `openat` of a
    /// FIFO waiting for a writer, when cancelled, gave -512, "Unknown error 512"). One that was cancelled
    /// ends with ECANCELED; any other was interrupted, and EINTR lets its step retry it.
    static func userVisible(_ res: Int32, cancelled: Bool) -> Int32 {
        guard (-516 ... -512).contains(res) else { return res }
        return cancelled ? -ECANCELED : -EINTR
    }

    private func finish(_ request: Request, _ completion: IOCompletion) {
        inFlight[request.id] = nil
        request.complete(completion)
    }

    private func prepare(_ request: Request) {
        if case .fail(let error) = request.op {
            request.complete(IOCompletion(result: 0, error: error))
            return
        }
        // Cancelled before it reached the kernel (see `cancelPending`), or between two steps (a short
        // transfer to resubmit, a readiness poll to arm or a transfer back from one): the kernel's cancel
        // found nothing, so it ends here, the one place every next step goes through.
        if request.cancelRequested {
            return finish(request, IOCompletion(result: request.progress, error: .canceled))
        }
        if case .linkedCopy(let copy) = request.op { return prepareCopy(request, copy) }
        let sqe = nextSQE()
        inFlight[request.id] = request
        defer {
            io_uring_sqe_set_data64(sqe, request.id)
            if request.offload { sqe.pointee.flags |= UInt8(1 << IOSQE_ASYNC_BIT) }  // IOSQE_ASYNC
        }
        if request.readinessEvents != 0, let fd = request.op.transferDescriptor {
            io_uring_prep_poll_add(sqe, fd, request.readinessEvents)
            return
        }
        switch request.op {
        case .nop, .fail:
            io_uring_prep_nop(sqe)
        case .read(let fd, _, _, _):
            let piece = request.currentTransfer()
            io_uring_prep_read(sqe, fd, piece.buffer, UInt32(piece.length), UInt64(bitPattern: piece.offset))
        case .write(let fd, _, _, _):
            let piece = request.currentTransfer()
            io_uring_prep_write(sqe, fd, piece.buffer, UInt32(piece.length), UInt64(bitPattern: piece.offset))
        case .vector(let vector, let fd, _, let isWrite):
            let rest = vector.remaining
            let offset = UInt64(bitPattern: request.currentTransfer().offset)
            if isWrite {
                io_uring_prep_writev(sqe, fd, rest.pointer, UInt32(rest.count), offset)
            } else {
                io_uring_prep_readv(sqe, fd, rest.pointer, UInt32(rest.count), offset)
            }
        case .openat(let dirfd, let path, let flags, let mode, let how):
            if let how {
                io_uring_prep_openat2(sqe, dirfd, path.pointer, how.pointer)
            } else {
                io_uring_prep_openat(sqe, dirfd, path.pointer, flags, mode)
            }
        case .close(let fd):
            io_uring_prep_close(sqe, fd)
        case .statx(let dirfd, let path, let flags, let box):
            io_uring_prep_statx(sqe, dirfd, path.pointer, flags, StatxBox.mask, box.pointer)
        case .fsync(let fd, let dataOnly):
            io_uring_prep_fsync(sqe, fd, dataOnly ? UInt32(IORING_FSYNC_DATASYNC) : 0)
        case .pollAdd(let fd, let events):
            io_uring_prep_poll_add(sqe, fd, events)
        case .pollRemove(let target):
            // As a cancel (below): a poll not yet handed to the kernel is removed here, the kernel's remove
            // would find nothing.
            if inFlight[target] == nil
                && cancelPending(target, matching: { if case .pollAdd = $0 { true } else { false } })
            {
                io_uring_prep_nop(sqe)
                return
            }
            io_uring_prep_poll_remove(sqe, target)
        case .timeout(let deadline):
            io_uring_prep_timeout(sqe, deadline.pointer, 0, UInt32(IORING_TIMEOUT_ABS | IORING_TIMEOUT_BOOTTIME))
        case .timeoutRemove(let target):
            if inFlight[target] == nil
                && cancelPending(target, matching: { if case .timeout = $0 { true } else { false } })
            {
                io_uring_prep_nop(sqe)
                return
            }
            io_uring_prep_timeout_remove(sqe, target, 0)
        case .cancel(let target):
            // A request between two steps (a short transfer being resubmitted, or one waiting to poll for
            // readiness) is not in the kernel, where the cancel would find nothing: it ends at its next step.
            if let request = inFlight[target] {
                request.cancelRequested = true
            } else if cancelPending(target) {
                // Found before the kernel had it: the cancel succeeded (0, as the POSIX engine reports it),
                // where the kernel's would find nothing (ENOENT).
                io_uring_prep_nop(sqe)
                return
            }
            io_uring_prep_cancel64(sqe, target, 0)
        case .linkedCopy:
            preconditionFailure("linked copies are prepared by prepareCopy")
        }
    }

    // MARK: Linked copies

    /// Queues the seven linked requests of a whole-file copy (nine when it keeps its files open; two fewer
    /// for an empty file, which has nothing to splice), or parks the copy until a lane is free.
    ///
    /// The bytes go from the source's page cache into the lane's pipe by reference, and from the pipe
    /// into the destination with one copy (`splice`), as cp's `copy_file_range` does; a read and a write
    /// through a buffer would copy twice. Every step but the probe and the last close skips its completion
    /// when it succeeds; a step that fails posts its own completion and cancels the rest of the chain
    /// without posting theirs (the kernel skips a failed chain's completions when the failing request
    /// asked to skip its own). So a copy ends with either one completion from steps 1–4, or with both the
    /// probe's and the last close's (and, kept open, both installs'). The probe, the installs and the first
    /// close are hard links: the probe "fails" whenever it finds the end of the file (1 byte where 2 were
    /// asked), and the rest must run after it either way.
    private func prepareCopy(_ request: Request, _ copy: LinkedCopy) {
        guard let lane = takeLane(for: copy.length) else { return copiesWaiting.append(request) }
        copy.lane = lane
        copyLanesInUse.add(1, ordering: .relaxed)
        let slot = lane * 4
        // An empty file moves no bytes and needs no pipe.
        if copy.length > 0 && lanePipeSize[Int(lane)] == 0 {
            lanePipeSize[Int(lane)] =
                installPipe(at: slot + 2, size: lane < largeLaneCount ? Self.copyPipeSize : nil) ?? 0
        }
        guard copy.length <= lanePipeSize[Int(lane)] else {
            // No pipe (out of descriptors or pipe memory), or a smaller one than asked for (a lower
            // pipe-max-size, the user's pipe-user-pages limit): the caller copies it the ordinary way.
            copy.outcome = .notStarted
            freeLane(lane)
            return request.complete(IOCompletion(result: 0))
        }
        inFlight[request.id] = request
        // The whole chain must reach the kernel in one submission: a chain cut in two is two chains.
        while io_uring_sq_space_left(ring) < 9 {
            let rc = io_uring_submit(ring)
            if rc == -EBUSY || rc == -EAGAIN {
                stashAll?()
            } else if rc < 0 && rc != -EINTR {
                fatalError("io_uring_enter failed: \(Errno(rawValue: -rc))")
            }
        }
        let link = UInt8(1 << IOSQE_IO_LINK_BIT)
        let hardLink = UInt8(1 << IOSQE_IO_HARDLINK_BIT)
        let skip = UInt8(1 << IOSQE_CQE_SKIP_SUCCESS_BIT)
        let fixed = UInt8(1 << IOSQE_FIXED_FILE_BIT)
        let (source, destination, pipeRead, pipeWrite) = (slot, slot + 1, CInt(slot + 2), CInt(slot + 3))
        let length = UInt32(copy.length)
        let fixedInput = UInt32(SPLICE_F_FD_IN_FIXED)
        func add(_ step: UInt64, _ flags: UInt8, _ fill: (UnsafeMutablePointer<io_uring_sqe>) -> Void) {
            let sqe = io_uring_get_sqe(ring)!
            fill(sqe)
            sqe.pointee.flags |= flags
            io_uring_sqe_set_data64(sqe, request.id | step << Self.stepShift)
        }
        // O_CLOEXEC is refused for direct descriptors (they are not in the process's table at all).
        add(1, link | skip) {
            io_uring_prep_openat_direct($0, copy.sourceDirectory, copy.source.pointer, O_RDONLY, 0, source)
        }
        add(2, link | skip) {
            io_uring_prep_openat_direct(
                $0,
                copy.destinationDirectory,
                copy.destination.pointer,
                copy.flags & ~O_CLOEXEC,
                copy.mode,
                destination
            )
        }
        if length > 0 {
            add(3, link | skip | fixed) {
                io_uring_prep_splice($0, CInt(source), 0, pipeWrite, -1, length, fixedInput)
            }
            add(4, link | skip | fixed) {
                io_uring_prep_splice($0, pipeRead, -1, CInt(destination), 0, length, fixedInput)
            }
        }
        add(5, hardLink | fixed) {
            io_uring_prep_read($0, CInt(source), copy.probe, copy.probeLength, copy.probeOffset)
        }
        // Kept open: each file gets an ordinary descriptor before its slot is closed (the descriptor holds
        // the file; closing the slot only drops the table's reference).
        if copy.keepsOpen { add(8, hardLink) { curing_prep_fixed_fd_install($0, source) } }
        add(6, hardLink | skip) { io_uring_prep_close_direct($0, source) }
        if copy.keepsOpen { add(9, hardLink) { curing_prep_fixed_fd_install($0, destination) } }
        add(7, 0) { io_uring_prep_close_direct($0, destination) }
    }

    /// A free lane for a copy of `length` bytes: a small lane when the file fits a default pipe and one is
    /// free, else a large one; nil when none is free.
    private func takeLane(for length: Int) -> UInt32? {
        if length <= Self.smallPipeSize, let lane = freeSmallLanes.popLast() { return lane }
        return freeLanes.popLast()
    }

    /// The size of a new pipe (`PIPE_DEF_BUFFERS` pages), which a small lane's file must fit in.
    private static let smallPipeSize = 16 * 4096

    /// Makes a pipe of `size` (or what the kernel grants; the kernel's default size when nil) and puts its
    /// read and write ends in the registered slots at `slot` and `slot + 1`, replacing (and so releasing)
    /// whatever pipe was there. The process keeps no descriptor of it: the registered table holds the only
    /// references. Returns the pipe's size, or nil when there is no pipe.
    private func installPipe(at slot: UInt32, size: CInt?) -> Int? {
        var ends: [CInt] = [-1, -1]
        guard CURing.pipe2(&ends, O_CLOEXEC) == 0 else { return nil }
        defer {
            Glibc.close(ends[0])
            Glibc.close(ends[1])
        }
        if let size { _ = fcntl(ends[1], CURING_F_SETPIPE_SZ, size) }
        let size = Int(fcntl(ends[1], CURING_F_GETPIPE_SZ))
        guard size > 0, curing_register_files_update(ring, slot, &ends, 2) == 2 else { return nil }
        return size
    }

    private func handleCopy(_ request: Request, _ copy: LinkedCopy, step: UInt64, res: Int32) {
        func error(_ res: Int32) -> Errno { Errno(rawValue: -res) }
        switch step {
        case 1...4:
            // A step that failed (or came back short) ended the chain: the rest was cancelled silently,
            // so whatever the steps opened is still in the slots.
            switch step {
            case 1: copy.outcome = .failed(.openSource, error(res))
            case 2: copy.outcome = .failed(.openDestination, error(res))
            // EINVAL from a splice: a file the kernel cannot splice (a directory, a device without
            // splice support). Separate reads and writes report the real error, so the caller gets to try.
            case 3: copy.outcome = res < 0 && res != -EINVAL ? .failed(.read, error(res)) : .incomplete
            default: copy.outcome = res < 0 && res != -EINVAL ? .failed(.write, error(res)) : .incomplete
            }
            // Bytes may be left in the pipe: the lane gets a new one on its next use.
            if step >= 3 { lanePipeSize[Int(copy.lane)] = 0 }
            if step == 1 {
                // Nothing was opened: the lane is free at once.
                freeLane(copy.lane)
                finish(request, IOCompletion(result: 0))
                return
            }
            laneCleanups[Int(copy.lane)] = 2
            for slot in [copy.lane * 4, copy.lane * 4 + 1] {
                let sqe = nextSQE()
                io_uring_prep_close_direct(sqe, slot)
                io_uring_sqe_set_data64(sqe, Self.laneCleanupTag << Self.stepShift | UInt64(copy.lane))
            }
            finish(request, IOCompletion(result: 0))
            return
        case 5:
            copy.probeResult = res
            copy.probeDone = true
        case 7:
            copy.closeResult = res
            copy.closeDone = true
        case 8, 9:
            if step == 8 { copy.installedSource = res } else { copy.installedDestination = res }
            copy.installsDone += 1
        default:
            // The source's close failed; nothing is lost, and the chain goes on to the destination's.
            return
        }
        guard copy.probeDone && copy.closeDone && copy.installsDone == (copy.keepsOpen ? 2 : 0) else { return }
        if copy.probeResult < 0 {
            copy.outcome = .failed(.read, error(copy.probeResult))
        } else if copy.closeResult < 0 && !copy.keepsOpen {
            // (Kept open, the slot's close only dropped the table's reference: nothing was flushed.)
            copy.outcome = .failed(.closeDestination, error(copy.closeResult))
        } else if copy.probeResult != copy.probeExpects || copy.installedSource < 0 || copy.installedDestination < 0 {
            // A descriptor that could not be installed (EMFILE): the ordinary path reports it.
            copy.outcome = .incomplete
        }
        if copy.keepsOpen {
            if copy.outcome == .copied {
                copy.outcome = .copiedOpen(source: copy.installedSource, destination: copy.installedDestination)
            } else {
                for fd in [copy.installedSource, copy.installedDestination] where fd >= 0 { Glibc.close(fd) }
            }
        }
        freeLane(copy.lane)
        finish(request, IOCompletion(result: 0))
    }

    /// One of a failed copy's two closes completed (an empty slot's `EBADF` included).
    private func cleanedUp(lane: Int) {
        laneCleanups[lane] -= 1
        if laneCleanups[lane] == 0 { freeLane(UInt32(lane)) }
    }

    /// Returns a lane, and starts the copy that waited longest among those it can take.
    private func freeLane(_ lane: UInt32) {
        if lane < largeLaneCount {
            freeLanes.append(lane)
        } else {
            freeSmallLanes.append(lane)
        }
        copyLanesInUse.subtract(1, ordering: .relaxed)
        // The first waiting copy the lane can take: a small lane takes only a file that fits its pipe.
        let fits = { (request: Request) -> Bool in
            guard lane >= self.largeLaneCount, case .linkedCopy(let copy) = request.op else { return true }
            return copy.length <= Self.smallPipeSize
        }
        if let index = copiesWaiting.firstIndex(where: fits) {
            let next = copiesWaiting.remove(at: index)
            draining ? cancelUnsubmitted(next) : local.append(next)
        }
    }
}
