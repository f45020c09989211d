import DispatchData
import DispatchQueues
import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

/// A channel's state, which operations hold on to: the public ``IOChannel`` can go away (B6) while
/// operations still run.
final class ChannelCore: @unchecked Sendable {
    let entry: FileEntry
    let type: IOChannel.StreamType
    let queue: WorkQueue
    private let cleanupHandler: @Sendable (Errno?) -> Void

    // Guarded by `lock`.
    private let lock = Lock()
    private var settings = ChannelSettings()
    private var target = WorkQueue.global()
    private var closed = false
    private var stopped = false
    private var cleanupSent = false
    private var failure: Errno?
    /// For random channels: offsets are relative to the descriptor's position at creation (B10, B46).
    private(set) var baseOffset: Int64 = 0

    /// `position`: the descriptor's position, when the caller knows it (a random channel's offsets start
    /// there).
    init(
        entry: FileEntry,
        type: IOChannel.StreamType,
        queue: WorkQueue,
        position: Int64? = nil,
        cleanupHandler: @escaping @Sendable (Errno?) -> Void
    ) {
        self.entry = entry
        self.type = type
        self.queue = queue
        self.cleanupHandler = cleanupHandler
        if type == .random, case .descriptor = entry.source {
            baseOffset = position ?? Int64(max(lseek(entry.fd, 0, SEEK_CUR), 0))
        }
    }

    /// Called under the entry's lock when validation is known; returns the prompt cleanup of a failed
    /// channel (B2), to run outside the lock.
    func validationFinished() -> (() -> Void)? {
        let entryError = entry.failure(for: type)
        return lock.withLock { () -> (() -> Void)? in
            guard let error = failure ?? entryError, !cleanupSent else { return nil }
            failure = error
            cleanupSent = true
            let handler = cleanupHandler
            return { [queue] in queue.async { handler(error) } }
        }
    }

    /// Makes the channel fail like one on a bad descriptor (made from a closed channel, B45).
    func markFailed(_ error: Errno) { lock.withLock { failure = error } }

    /// The error this channel's operations fail with, if its file or the channel itself failed. Called
    /// under the entry's lock.
    var operationFailure: Errno? {
        let entryError = entry.failure(for: type)
        return lock.withLock { failure ?? entryError }
    }

    /// The error a queued operation of this channel fails with instead of starting: ECANCELED once stopped
    /// (a `read` that passed the closed check while `close(flags: .stop)` ran is queued after the stop took
    /// the queue, B30), else ``operationFailure``. Called under the entry's lock.
    var startFailure: Errno? {
        let entryError = entry.failure(for: type)
        return lock.withLock { stopped ? .canceled : failure ?? entryError }
    }

    /// Runs the cleanup handler, once, on the channel's queue with no error (B4, B5).
    func runCleanup() {
        let send = lock.withLock { () -> Bool in
            defer { cleanupSent = true }
            return !cleanupSent
        }
        guard send else { return }
        let handler = cleanupHandler
        queue.async { handler(nil) }
    }

    var isClosed: Bool { lock.withLock { closed || stopped } }

    var currentSettings: ChannelSettings { lock.withLock { settings } }

    /// Where barriers run (B49, B59).
    var targetQueue: WorkQueue {
        get { lock.withLock { target } }
        set { lock.withLock { target = newValue } }
    }

    func update(_ change: (inout ChannelSettings) -> Void) { lock.withLock { change(&settings) } }

    /// The error new operations fail with at once, if any: ECANCELED once closed or stopped (B28, B31).
    var refusal: Errno? { lock.withLock { closed || stopped ? .canceled : nil } }

    var descriptor: CInt? {
        // The entry's lock is taken on its own: the entry takes the channel's lock while holding its own.
        let fd = entry.lock.withLock { entry.fd }
        return lock.withLock { closed || stopped || failure != nil || fd < 0 ? nil : fd }
    }

    func close(stop: Bool) {
        let nowStopping = lock.withLock { () -> Bool in
            let wasStopped = stopped
            closed = true
            if stop { stopped = true }
            return stop && !wasStopped
        }
        if nowStopping {
            for operation in entry.takeQueued(of: self) { operation.fail(.canceled) }
            for operation in entry.runningOperations(of: self) { operation.stop() }
        }
        entry.channelClosed()
    }
}
