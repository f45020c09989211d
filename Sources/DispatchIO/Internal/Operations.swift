import DispatchData
import DispatchQueues
import Synchronization
import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

/// A channel's settings as an operation snapshots them when it is submitted (B7).
struct ChannelSettings: Sendable {
    var lowWater = IOTuning.defaultLowWater
    var highWater = Int.max
    var interval: Duration?
    var strictInterval = false
}

/// One read or write on a channel, from submission to its final handler.
///
/// Handlers of one operation run one at a time and in order, even on a concurrent queue: there they go
/// through a private serial queue that targets the caller's (B13). A serial queue keeps them in order by
/// itself, so they go straight onto it (one queue level and one queue creation less per operation).
///
/// An operation without a queue runs its handler calls on the thread that made them due, an engine thread
/// as a rule, as soon as the lock is let go of: see ``runInlineCalls()``.
class IOOperation: @unchecked Sendable {
    let channel: ChannelCore
    let entry: FileEntry
    let settings: ChannelSettings
    /// Where the handler runs; nil to run it on the thread that made the call due.
    let handlerQueue: WorkQueue?
    let lock = Lock()
    /// Kernel requests in flight: token → bytes asked, and token → the engine's identifier (for stop).
    var inFlight: [Int: Int] = [:]
    var kernelIDs: [Int: OperationID] = [:]
    var stopped = false
    var finalDelivered = false
    var reportedFinished = false

    init(channel: ChannelCore, settings: ChannelSettings, queue: WorkQueue?) {
        self.channel = channel
        self.entry = channel.entry
        self.settings = settings
        self.handlerQueue = queue.map { $0.isSerial ? $0 : WorkQueue(label: "io.opq", target: $0) }
        kindAtCreation = entry.operationCreated()
    }

    /// The entry's file kind when the operation was made (nil until a path is validated).
    let kindAtCreation: FileKind?

    /// Queues the final handler call; once it has returned, the entry may be given up (B4).
    func deliverFinal(_ call: @escaping @Sendable () -> Void) {
        let entry = self.entry
        deliverCall {
            call()
            entry.finalCallReturned()
        }
    }

    /// Queues one handler call: on the handler queue, or, without one, for ``runInlineCalls()``, which the
    /// code that made it due runs once it has let go of the lock.
    func deliverCall(_ call: @escaping @Sendable () -> Void) {
        guard let handlerQueue else { return inline.withLock { $0.calls.append(call) } }
        handlerQueue.async(execute: call)
    }

    /// Handler calls of an operation without a queue, due and not yet run, and whether a thread is running
    /// them. Its own lock, not `lock`: calls are queued with `lock` held or not.
    private let inline = Locked(InlineCalls())

    private struct InlineCalls {
        var calls: [@Sendable () -> Void] = []
        var running = false
    }

    /// Runs the handler calls that are due, in order, for an operation without a queue; lock not held.
    /// One thread runs them at a time, so that they stay in order and never overlap: a thread that finds
    /// another running them leaves its calls to it. Every path that can queue a call runs this after it
    /// lets go of the lock (`progress`, `fail`, an interval's tick); a handler that submits more work, which
    /// completes at once and runs this again, returns here without recursing.
    func runInlineCalls() {
        guard handlerQueue == nil else { return }
        while true {
            let calls = inline.withLock { inline -> [@Sendable () -> Void] in
                guard !inline.running, !inline.calls.isEmpty else { return [] }
                inline.running = true
                defer { inline.calls = [] }
                return inline.calls
            }
            if calls.isEmpty { return }
            for call in calls { call() }
            inline.withLock { $0.running = false }
        }
    }

    var isWrite: Bool { false }

    /// The stream lane this operation serialises in (B9), or nil for random operations. Asked under the
    /// entry's lock, after validation.
    var lane: Int? {
        guard channel.type == .stream else { return nil }
        if entry.kind?.isSeekableFile ?? true { return 0 }
        return isWrite ? 2 : 1
    }

    func start(fd: CInt) {}
    func fail(_ error: Errno) {}
    /// The operation joined its entry's queue (it may start at once, or wait behind others).
    func queued() {}
    /// Queued on its file (lock not held): `behindBarrier` when a barrier is queued or running ahead of it
    /// there, so that it cannot start before a block of the caller's has returned.
    func enqueued(behindBarrier: Bool) {}

    /// Cancels what is in the kernel; the operation then ends with ECANCELED (B30).
    func stop() {
        let ids = lock.withLock { () -> [OperationID] in
            stopped = true
            return Array(kernelIDs.values)
        }
        for id in ids { entry.engine.cancel(id) { _ in } }
        progress()
    }

    /// Remembers the engine's name for a request, so that stop can cancel it. A stop or end that came while
    /// the request was being submitted found nothing to cancel, so it is cancelled here instead: a pipe read
    /// nobody will satisfy would otherwise keep the operation, and the cleanup handler, waiting forever.
    func recordKernelID(_ id: OperationID, token: Int) {
        let cancelNow = lock.withLock { () -> Bool in
            // The completion may already have run.
            guard inFlight[token] != nil else { return false }
            kernelIDs[token] = id
            return stopped || finalDelivered
        }
        if cancelNow { entry.engine.cancel(id) { _ in } }
    }

    /// Re-examines the state after a change; subclasses issue, deliver and finish from here.
    func progress() {}

    /// Runs `tick` under the lock every `settings.interval` from now (B27), until it returns false. A
    /// timeout that did not expire (the engine shutting down) ends it too, instead of arming it again.
    func armIntervalTimer(_ tick: @escaping @Sendable () -> Bool) {
        guard let interval = settings.interval, interval > .zero else { return }
        entry.engine.timeout(deadline: ContinuousClock.now + interval) { [self] completion in
            guard completion.error == nil else { return }
            let again = lock.withLock(tick)
            runInlineCalls()
            if again { armIntervalTimer(tick) }
        }
    }

    /// Tells the entry, once, that this operation has finished. Call without the lock.
    func reportFinishedIfDone() {
        let report = lock.withLock { () -> Bool in
            guard finalDelivered, inFlight.isEmpty, !reportedFinished else { return false }
            reportedFinished = true
            return true
        }
        if report { entry.finished(self) }
    }
}

/// A read: chunks from the kernel accumulate and are handed out by the water marks (B15–B18, B24, B27).
final class ReadOperation: IOOperation, @unchecked Sendable {
    /// The handler takes the data over: the operation keeps no reference to it while the handler runs
    /// (see ``Handoff``).
    typealias Handler = @Sendable (Bool, consuming DispatchDataBuffer?, Errno?) -> Void

    private let length: Int
    private let requestedOffset: Int64
    private let handler: Handler
    private let pool = BufferPool.shared
    /// On a stream (not read at offsets), no system call asks for fewer bytes: once something has been
    /// read, the read ends where the next call would ask for less, its last bytes in the final call
    /// (``IOChannel/read(length:askingAtLeast:queue:handler:)``). 1 for a plain read; the convenience read's
    /// `maxLength` ends it with its first bytes (B55).
    private let minimumRead: Int
    /// The read ended by ``minimumRead``, not at its length or end of file.
    private var endedBeforeLength = false

    // Guarded by `lock`.
    private var fd: CInt = -1
    private var positioned = false
    private var startOffset: Int64 = 0
    private var issued = 0
    private var received = 0
    private var nextSequence = 0
    private var deliverSequence = 0
    /// Chunks back from the kernel, not yet delivered: buffer, bytes read, error, bytes asked, and the pool
    /// the buffer goes back to.
    private var arrived: [Int: (UnsafeMutableRawPointer, Int, Errno?, Int, BufferPool)] = [:]
    private var pending = DispatchDataBuffer()
    private var outstanding = 0
    private var ended = false
    private var reachedEOF = false
    private var streamPositionToRestore: Int64?
    private var timerArmed = false
    private var sizeAtOpen: Int64 = 0

    /// Whether a read at `offset` of `size` bytes goes to io_uring's workers (see `IOEngine.read(offload:)`):
    /// only where the file had at least ``IOTuning/offloadMinimum`` bytes from there when it was opened. A
    /// worker copies beside the ring thread, which pays on long reads, but the hand-off costs more than
    /// copying a few kilobytes, and the first one of a process waits for the kernel to start a worker (an
    /// empty file's read did, 0.1 ms of dcat's start-up). Past that size the read most likely finds the end
    /// of the file, or what a growing file added since. Lock held.
    private func offloads(at offset: Int64?, size: Int) -> Bool {
        guard let offset, IOTuning.offload, IOTuning.readAheadDepth > 1 else { return false }
        return min(Int64(size), sizeAtOpen - offset) >= Int64(IOTuning.offloadMinimum)
    }

    init(
        channel: ChannelCore,
        offset: Int64,
        length: Int,
        settings: ChannelSettings,
        queue: WorkQueue?,
        minimumRead: Int = 1,
        handler: @escaping Handler
    ) {
        self.length = length
        self.requestedOffset = offset
        self.handler = handler
        self.minimumRead = minimumRead
        super.init(channel: channel, settings: settings, queue: queue)
    }

    /// Fails before starting: `(true, nil, error)` (B18).
    override func fail(_ error: Errno) {
        lock.withLock {
            finalDelivered = true
            reportedFinished = true
        }
        let handler = self.handler
        deliverFinal { handler(true, nil, error) }
        runInlineCalls()
    }

    override func start(fd: CInt) {
        let seekable = entry.kind?.isSeekableFile ?? false
        let size = entry.sizeAtOpen
        lock.withLock {
            self.fd = fd
            sizeAtOpen = size
            if channel.type == .random {
                positioned = true
                startOffset = channel.baseOffset + requestedOffset
            } else if seekable {
                // Stream reads of a regular file go at explicit offsets from the current position, so that
                // several can be in flight; the position is moved past what was read at the end (B8).
                positioned = true
                let position = lseek(fd, 0, SEEK_CUR)
                startOffset = Int64(max(position, 0))
                streamPositionToRestore = startOffset
            }
        }
        progress()
    }

    /// The interval runs from here, not from the start: a read queued behind a stalled one ticks too (B27).
    override func queued() { armIntervalTimer { [self] in tick() } }

    private var depth: Int { positioned && !shortReadsSeen ? IOTuning.readAheadDepth : 1 }
    /// A read came back short in mid-file (a procfs or sysfs file): the rest is read one chunk at a time,
    /// each where the last ended. Such a file is generated as it is read, and a read far ahead makes the
    /// kernel generate everything before it again (/proc/kallsyms took minutes with reads ahead).
    private var shortReadsSeen = false

    /// Bytes the operation may hold at once: what is in flight, buffered, or in handlers not yet returned.
    ///
    /// Nothing is delivered before the low water mark is buffered or the length is read (B24), so the
    /// budget always has room for the smaller of the two, or the read would stop asking and never deliver
    /// (a low water mark above the read-ahead, such as `Int.max` for one delivery at the end).
    private var budget: Int {
        let beforeDelivery = min(max(settings.lowWater, 1), length - (received - pending.count))
        let (sum, overflow) = beforeDelivery.addingReportingOverflow(pool.size)
        return max(depth * pool.size, overflow ? Int.max : sum)
    }

    override func progress() {
        var submissions: [(UnsafeMutableRawPointer, BufferPool, Int, Int64?, Int, Bool)] = []
        var finished = false
        lock.withLock {
            if ended {
                // Chunks that complete after the end are not delivered; their buffers go back.
                for (_, chunk) in arrived { chunk.4.give(chunk.0) }
                arrived.removeAll()
            } else {
                deliverArrived()
            }
            if !ended && stopped {
                end(error: .canceled)
            }
            while !ended, issued < length, inFlight.count < depth,
                pending.count + outstanding + inFlight.values.reduce(0, +) < budget
            {
                if !positioned && !inFlight.isEmpty { break }
                // At or past the file's size at open the read most likely finds the end of the file. It waits
                // for the ones before it, which tell whether the file ends where its size said (a small file
                // is one read, not `depth` of them; a file that grew is still read to its end), and gets a
                // small buffer, so that reads finding nothing do not each hold a pooled megabyte (which reused
                // buffers keep resident: dcat of 1,000 files of 1 MiB peaked at 19 MiB).
                let probe = positioned && startOffset + Int64(issued) >= sizeAtOpen
                if probe && !inFlight.isEmpty { break }
                // Only a read whose own file has nothing queued behind it may wait for the backlog: a write
                // queued on the same file's lane could otherwise wait for this read forever.
                if positioned && !entry.hasQueuedItems && !WriteBacklog.shared.admit(self) {
                    // Queued between the look and the wait, an item's wake-up found no one waiting: look again.
                    guard entry.hasQueuedItems, WriteBacklog.shared.withdraw(self) else { break }
                }
                // One system call asks for at most what fits under the high water mark (B24).
                let room =
                    settings.highWater == Int.max
                    ? Int.max : settings.highWater - pending.count - inFlight.values.reduce(0, +)
                if room <= 0 { break }
                // Offsets stop at the largest a file can have (a random read starting near it, or a
                // stream read from a position near it): past that there is nothing to read, as at EOF.
                let offsetRoom = positioned ? Int64.max - startOffset - Int64(issued) : Int64.max
                if offsetRoom == 0 {
                    if inFlight.isEmpty { end(error: nil) }
                    break
                }
                // What is left of the file at open fits a small buffer: a pooled megabyte, touched whole by
                // an earlier read, would stay resident under a few bytes (dcat of a 7 MiB file and fifteen
                // of 100 bytes, sixty times over, peaked at 23 MiB; helper-38).
                // (Less than 64 KiB: a read of exactly 64 KiB fills its buffer, and a full read is not the end
                // of the file, so one more read would follow to find it.)
                let tail = positioned && sizeAtOpen - startOffset - Int64(issued) < Int64(BufferPool.probes.size)
                let chunkPool = probe || tail ? BufferPool.probes : pool
                let size = min(chunkPool.size, length - issued, room, Int(clamping: offsetRoom))
                // Bytes held below the low water mark leave less room under the high water mark: a call that
                // would ask for less than the least ends the read instead, with those bytes in the final call
                // (the length's own end is caught as the bytes arrive, in `deliverArrived`; helper-68).
                if !positioned && size < minimumRead && received > 0 {
                    if inFlight.isEmpty {
                        endedBeforeLength = true
                        end(error: nil)
                    }
                    break
                }
                let buffer = chunkPool.take()
                let sequence = nextSequence
                nextSequence += 1
                let offset: Int64? = positioned ? startOffset + Int64(issued) : nil
                issued += size
                inFlight[sequence] = size
                submissions.append((buffer, chunkPool, size, offset, sequence, offloads(at: offset, size: size)))
            }
            finished = ended && inFlight.isEmpty && finalDelivered
        }
        for (buffer, chunkPool, size, offset, sequence, offload) in submissions {
            submit(buffer: buffer, from: chunkPool, size: size, offset: offset, sequence: sequence, offload: offload)
        }
        if finished { reportFinishedIfDone() }
        runInlineCalls()
    }

    private func submit(
        buffer: UnsafeMutableRawPointer,
        from chunkPool: BufferPool,
        size: Int,
        offset: Int64?,
        sequence: Int,
        offload: Bool
    ) {
        let keep = KeepAlive(buffer: buffer)
        let id = entry.engine.read(
            fd,
            into: UnsafeMutableRawBufferPointer(start: buffer, count: size),
            at: offset,
            offload: offload,
            keepAlive: keep
        ) { [self, address = UInt(bitPattern: buffer)] completion in
            lock.withLock {
                inFlight[sequence] = nil
                kernelIDs[sequence] = nil
                // Asked before a short read restarted the reading behind it (see `deliverArrived`).
                if sequence < deliverSequence {
                    chunkPool.give(UnsafeMutableRawPointer(bitPattern: address)!)
                    return
                }
                // On a pipe, socket or terminal a short read is not the end: count only what came, or a
                // read of a finite length would stop asking once the sizes asked add up to it.
                if !positioned, completion.error == nil, completion.result > 0 {
                    issued -= size - completion.result
                }
                arrived[sequence] = (
                    UnsafeMutableRawPointer(bitPattern: address)!, completion.result, completion.error, size,
                    chunkPool
                )
            }
            progress()
        }
        recordKernelID(id, token: sequence)
    }

    /// Moves arrived chunks, in order, into `pending`, and delivers by the water marks. Lock held.
    private func deliverArrived() {
        while let (buffer, count, error, asked, chunkPool) = arrived.removeValue(forKey: deliverSequence) {
            deliverSequence += 1
            if reachedEOF || ended {
                chunkPool.give(buffer)
                continue
            }
            if let error {
                chunkPool.give(buffer)
                end(error: error)
                return
            }
            let copiedUpTo = positioned ? min(IOTuning.copiedChunk, chunkPool.size / 2) : chunkPool.size / 2
            if count > 0 && count < asked && count <= copiedUpTo {
                // The tail of a file (or a small file) in a pooled megabyte, or in a 64 KiB buffer, would keep
                // the buffer for as long as the caller keeps the bytes: copied, it holds only what it has. A
                // read that brought all it asked (a small high water mark) is handed over as it is, without a
                // copy per chunk. So is a pipe's or socket's short piece, which a reader faster than its
                // writer gets again and again: a window of a megabyte in pieces of 128 KiB held eight pooled
                // megabytes, and dcat of files around a pipe peaked at 18.7 MiB (helper-45).
                pending.append(DispatchDataBuffer(bytes: UnsafeRawBufferPointer(start: buffer, count: count)))
                chunkPool.give(buffer)
            } else {
                pending.append(chunkPool.data(buffer, count: count))
            }
            received += count
            // The end of file is a read of 0 bytes (B17), as for libdispatch, or a short one that ends
            // exactly where the file's size at open said it ends: the file had no more when that read ran,
            // so asking again would only find nothing (a small file is one read, not two: dcat of 10,000
            // files of 4 KiB made 20,000). Any other short read is not the end: a procfs or sysfs file gives
            // less than asked in mid-file (a page of /proc/kallsyms at a time), and counting that as the end
            // cut such files short. The chunks asked behind it started past the gap it left: drop them and
            // ask again from where it ended.
            if count == 0 || (positioned && count < asked && startOffset + Int64(received) == sizeAtOpen) {
                reachedEOF = true
            }
            if positioned && !reachedEOF && count > 0 && count < asked && received < length {
                shortReadsSeen = true
                issued = received
                deliverSequence = nextSequence
                for (sequence, chunk) in arrived where sequence < nextSequence {
                    chunk.4.give(chunk.0)
                    arrived[sequence] = nil
                }
            }
            if received >= length || reachedEOF {
                end(error: nil)
                return
            }
            if !positioned && count > 0 && length - received < minimumRead {
                endedBeforeLength = true
                end(error: nil)
                return
            }
            deliverByWaterMarks()
        }
    }

    /// Non-final deliveries: everything buffered once it reaches the low water mark, in pieces of at most
    /// the high water mark (B24). Lock held.
    private func deliverByWaterMarks() {
        let low = max(settings.lowWater, 1)
        while pending.count >= low {
            let size = min(pending.count, max(settings.highWater, 1))
            let piece = pending.subdata(in: 0..<size)
            pending = pending.subdata(in: size..<pending.count)
            deliver(done: false, data: piece, error: nil)
        }
    }

    /// The final calls (B16–B18). Lock held.
    private func end(error: Errno?) {
        guard !ended else { return }
        ended = true
        // The position moves past what was read before the final call, which may look at it (B8).
        if let position = streamPositionToRestore {
            lseek(fd, off_t(position) + received, SEEK_SET)
        }
        if let error {
            if !pending.isEmpty { deliver(done: false, data: pending, error: nil) }
            pending = DispatchDataBuffer()
            deliver(done: true, data: nil, error: error)
        } else if received >= length || endedBeforeLength {
            // The last bytes come in the final call, so that it is not taken for the end of file.
            deliver(done: true, data: pending, error: nil)
            pending = DispatchDataBuffer()
        } else {
            if !pending.isEmpty { deliver(done: false, data: pending, error: nil) }
            pending = DispatchDataBuffer()
            deliver(done: true, data: DispatchDataBuffer(), error: nil)
        }
        finalDelivered = true
        for (_, chunk) in arrived { chunk.4.give(chunk.0) }
        arrived.removeAll()
        // Requests still in the kernel are cancelled; their buffers come back through their completions.
        for id in kernelIDs.values { entry.engine.cancel(id) { _ in } }
    }

    /// Hands one call to the handler queue. Lock held, so that calls are queued in order.
    private func deliver(done: Bool, data: DispatchDataBuffer?, error: Errno?) {
        let count = data?.count ?? 0
        outstanding += count
        let handler = self.handler
        let handoff = Handoff(data)
        let call: @Sendable () -> Void = { [self] in
            handler(done, handoff.take(), error)
            guard count > 0 else { return }
            lock.withLock { outstanding -= count }
            progress()
        }
        if done { deliverFinal(call) } else { deliverCall(call) }
    }

    // MARK: Interval (B27)

    /// A tick delivers what was read since the last call (even nothing) with `.strictInterval`, or what
    /// has reached the low water mark without it. Lock held.
    private func tick() -> Bool {
        // (A read that failed before starting never ends; its final call is all the same.)
        guard !ended && !finalDelivered else { return false }
        if settings.strictInterval {
            let piece = pending
            pending = DispatchDataBuffer()
            deliver(done: false, data: piece, error: nil)
        } else if pending.count >= max(settings.lowWater, 1) {
            deliverByWaterMarks()
        }
        return true
    }
}

/// A write: regions of the data go to `writev` as they are, with progress reported by the low water mark
/// (B19, B26).
final class WriteOperation: IOOperation, @unchecked Sendable {
    typealias Handler = @Sendable (Bool, DispatchDataBuffer?, Errno?) -> Void

    private let handler: Handler
    private let requestedOffset: Int64

    // Guarded by `lock`.
    private var fd: CInt = -1
    /// The bytes to write; `written` of them are. The rest is cut out only when a handler needs it: cutting
    /// it after every `writev` cost time in proportion to the regions left, so a buffer of a million small
    /// regions took a quadratic time to write. Let go of at the end, before the final call: the caller's
    /// handler may start work that takes new buffers (dcat's next read) while this operation lives on.
    private var data: DispatchDataBuffer
    /// The bytes the write was given (`data`'s count until the end).
    private let total: Int
    private var offset: Int64?
    private var sinceReport = 0
    private var writing = false
    private var ended = false
    private var streamPositionToRestore: Int64?
    private var written = 0

    init(
        channel: ChannelCore,
        offset: Int64,
        data: DispatchDataBuffer,
        settings: ChannelSettings,
        queue: WorkQueue?,
        handler: @escaping Handler
    ) {
        self.data = data
        self.total = data.count
        self.requestedOffset = offset
        self.handler = handler
        super.init(channel: channel, settings: settings, queue: queue)
        // Descriptor channels know their file at once; a path channel's writes are not counted.
        countsInBacklog = kindAtCreation == .regular
    }

    /// Counted from when it is queued, so that reads stop while writes pile up behind the one running;
    /// but one queued behind a barrier only from when it starts. The barrier's block may wait for a read
    /// of another file, which would wait for this write's bytes to leave the backlog (helper-39: a 20 MiB
    /// write queued behind a barrier that waited for a read of another file held that read for good).
    override func enqueued(behindBarrier: Bool) {
        guard !behindBarrier, lock.withLock({ takeCount() }) else { return }
        WriteBacklog.shared.add(total)
    }

    /// Whether the write is to be added to the backlog now: once, unless it has ended. Lock held.
    private func takeCount() -> Bool {
        guard countsInBacklog && !counted && !ended && !finalDelivered else { return false }
        counted = true
        return true
    }

    private var countsInBacklog = false
    /// Whether the backlog holds this write's bytes. Lock held.
    private var counted = false
    /// The token of the chunk in the kernel: a new one per chunk, so that the engine's name for a chunk
    /// that has already completed is never recorded against the next one (which stop would then miss).
    private var chunkToken = 0
    /// Bytes of the backlog this operation holds and has finished with, to give back outside the lock.
    private var backlogToRelease = 0

    override var isWrite: Bool { true }

    /// What is still to be written. Lock held.
    private var remaining: DispatchDataBuffer { data.subdata(in: written..<total) }

    /// Fails before starting: `(true, data, error)` (B19).
    override func fail(_ error: Errno) {
        let (data, wasCounted) = lock.withLock { () -> (DispatchDataBuffer, Bool) in
            finalDelivered = true
            reportedFinished = true
            defer {
                counted = false
                self.data = DispatchDataBuffer()
            }
            return (remaining, counted)
        }
        if wasCounted { WriteBacklog.shared.remove(total) }
        let handler = self.handler
        deliverFinal { handler(true, data, error) }
        runInlineCalls()
    }

    override func start(fd: CInt) {
        let seekable = entry.kind?.isSeekableFile ?? false
        let count = lock.withLock { () -> Bool in
            self.fd = fd
            if channel.type == .random {
                offset = channel.baseOffset + requestedOffset
            } else if seekable && !entry.isAppend {
                let position = Int64(max(lseek(fd, 0, SEEK_CUR), 0))
                offset = position
                streamPositionToRestore = position
            }
            return takeCount()
        }
        if count { WriteBacklog.shared.add(total) }
        progress()
    }

    override func progress() {
        var chunk: (data: DispatchDataBuffer, token: Int)?
        var finished = false
        var release = 0
        lock.withLock {
            // A stop that came while the last chunk was in the kernel finds the write done: it succeeded.
            if !ended && stopped && !writing && written < total {
                end(error: .canceled)
            }
            if !ended && !writing {
                if written == total {
                    end(error: nil)
                } else {
                    let piece = gather()
                    writing = true
                    chunkToken += 1
                    inFlight[chunkToken] = piece.count
                    chunk = (piece, chunkToken)
                }
            }
            finished = ended && !writing && finalDelivered
            swap(&release, &backlogToRelease)
        }
        if release > 0 { WriteBacklog.shared.remove(release) }
        if let (piece, token) = chunk.take() { submit(consume piece, token: token) }
        if finished { reportFinishedIfDone() }
        runInlineCalls()
    }

    /// The next piece to write: the first bytes up to the chunk size and the high water mark (B26), cut
    /// where the regions would not fit one `writev`. Regions are split, never copied.
    private func gather() -> DispatchDataBuffer {
        let limit = min(IOTuning.writeChunk, max(settings.highWater, 1), total - written)
        var size = 0
        var regions = 0
        while regions < IOTuning.maxIOVecs && size < limit {
            let location = written + size
            let (region, start) = data.region(location: location)
            size += region.count - (location - start)
            regions += 1
        }
        return data.subdata(in: written..<written + min(size, limit))
    }

    private func submit(_ chunk: consuming DispatchDataBuffer, token: Int) {
        let buffers = chunk.regions.map(\.bytes)
        let position = lock.withLock { offset }
        // A pipe or socket takes what its buffer holds per system call. Progress is reported per call, as
        // libdispatch reports it (B26: a 200,000-byte pipe write with low water 1 reported 134,464, 68,928
        // and 3,392 bytes left), where the piece was written whole first (helper-39), when the low water
        // mark or an interval asks for reports within a piece.
        let reportsWithin =
            !(entry.kind?.isSeekableFile ?? false) && (settings.lowWater < chunk.count || settings.interval != nil)
        let id = entry.engine.writev(
            fd,
            from: buffers,
            at: position,
            completesShort: reportsWithin,
            keepAlive: KeepAlive(data: consume chunk)
        ) { [self] completion in
            lock.withLock {
                inFlight[token] = nil
                kernelIDs[token] = nil
                writing = false
                let count = completion.result
                written += count
                if let current = offset { offset = current + Int64(count) }
                sinceReport += count
                if let error = completion.error {
                    end(error: error)
                } else if written < total && sinceReport >= max(settings.lowWater, 1) {
                    sinceReport = 0
                    deliver(done: false, data: remaining, error: nil)
                }
            }
            progress()
        }
        recordKernelID(id, token: token)
    }

    /// The final call: `(true, nil, nil)` on success, `(true, unwritten, error)` otherwise. Lock held.
    private func end(error: Errno?) {
        guard !ended else { return }
        ended = true
        if let position = streamPositionToRestore {
            lseek(fd, off_t(position) + written, SEEK_SET)
        }
        if counted {
            // Given back by `progress` once the lock is released (woken reads take this operation's lock),
            // not by a block on the handler queue: a queue that is suspended, or busy waiting for a read,
            // would hold back every read in the process behind this finished write.
            counted = false
            backlogToRelease = total
        }
        // Let go of before the final call is queued, which may run on another thread at once.
        let unwritten = error == nil ? nil : remaining
        data = DispatchDataBuffer()
        deliver(done: true, data: unwritten, error: error)
        finalDelivered = true
    }

    private func deliver(done: Bool, data: DispatchDataBuffer?, error: Errno?) {
        let handler = self.handler
        if done {
            deliverFinal { handler(done, data, error) }
        } else {
            deliverCall { handler(done, data, error) }
        }
    }

    // MARK: Interval (B27)

    /// The interval runs from here, as a read's does: a write queued behind a stalled one ticks too.
    override func queued() { armIntervalTimer { [self] in tick() } }

    /// A tick reports what is still to be written, as the per-chunk rule does (B26): with
    /// `.strictInterval` every time, even when nothing moved since the last call (a write into a pipe
    /// nobody reads shows the same bytes again); without it only once the bytes written since the last
    /// report reach the low water mark, which the rule after each chunk has then already done. Lock held.
    private func tick() -> Bool {
        guard !ended && !finalDelivered else { return false }
        if settings.strictInterval || (sinceReport > 0 && sinceReport >= max(settings.lowWater, 1)) {
            sinceReport = 0
            deliver(done: false, data: remaining, error: nil)
        }
        return true
    }
}

/// Data on its way to a handler, which takes it over once: the call that delivers it then holds no reference
/// of its own while the handler runs. A handler that moves the bytes on and goes on to other work in the
/// same call (dcat's pump, which writes them and may issue the next reads) would otherwise keep the read's
/// pooled buffer alive under it, after the bytes' write has completed on another thread, and the next read
/// would take a fresh buffer beside it.
final class Handoff: @unchecked Sendable {
    private var data: DispatchDataBuffer?

    init(_ data: DispatchDataBuffer?) { self.data = data }

    /// The data, once; nil after. Only the one call that delivers it calls this.
    func take() -> DispatchDataBuffer? {
        defer { data = nil }
        return data
    }
}
