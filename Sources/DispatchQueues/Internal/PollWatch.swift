import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

/// One descriptor watched through the engine with one-shot polls: the building block of every kernel
/// source (readiness, signalfd, pidfd, inotify, PSI).
///
/// At most one poll is in flight. `onReady` runs on the engine thread with the ready mask and must be short
/// (it records the event, and may read a non-blocking descriptor); it returns whether to poll again at
/// once. ``stop(then:)`` removes the poll and calls back once the engine no longer holds it; a descriptor the
/// watch owns is closed at that point.
final class PollWatch: @unchecked Sendable {
    let engine: IOEngine
    let fd: CInt
    let events: PollEvents
    let ownsDescriptor: Bool
    private let onReady: @Sendable (UInt32) -> Bool

    private let lock = Lock()
    // Guarded by `lock`.
    private var armed = false
    private var armSequence: UInt64 = 0
    private var opID: OperationID?
    private var stopped = false
    private var finished = false
    private var onStopped: (@Sendable () -> Void)?

    init(
        engine: IOEngine,
        fd: CInt,
        events: PollEvents,
        ownsDescriptor: Bool,
        onReady: @escaping @Sendable (UInt32) -> Bool
    ) {
        self.engine = engine
        self.fd = fd
        self.events = events
        self.ownsDescriptor = ownsDescriptor
        self.onReady = onReady
    }

    /// Submits a poll unless one is in flight or the watch is stopped.
    func arm() {
        lock.lock()
        guard !armed && !stopped else {
            lock.unlock()
            return
        }
        armed = true
        armSequence &+= 1
        let sequence = armSequence
        lock.unlock()
        let id = engine.poll(fd, events: events) { [self] completion in completed(completion, sequence: sequence) }
        lock.lock()
        var remove = false
        if armed && armSequence == sequence {
            opID = id
            remove = stopped
        }
        lock.unlock()
        if remove { engine.cancel(id) { _ in } }
    }

    private func completed(_ completion: IOCompletion, sequence: UInt64) {
        lock.lock()
        armed = false
        opID = nil
        if stopped {
            let done = takeFinishLocked()
            lock.unlock()
            finish(done)
            return
        }
        lock.unlock()
        if completion.error != nil {
            // EBADF and the like: the descriptor cannot be watched; the watch goes quiet.
            return
        }
        if onReady(UInt32(truncatingIfNeeded: completion.result)) { arm() }
    }

    /// Stops watching; `done` runs once nothing is in flight.
    ///
    /// The poll is withdrawn with ``IOEngine/cancel(_:then:)`` rather than `removePoll`: the POSIX engine
    /// only finds a poll to remove once a pool thread has parked it, and a removal that arrives between
    /// submission and parking would miss it and leave the poll (and this stop) waiting forever; a cancel
    /// also catches the poll while it is queued or being parked.
    func stop(then done: @escaping @Sendable () -> Void) {
        lock.lock()
        guard !stopped else {
            lock.unlock()
            done()
            return
        }
        stopped = true
        onStopped = done
        if armed {
            let id = opID
            lock.unlock()
            if let id { engine.cancel(id) { _ in } }
            return
        }
        let callback = takeFinishLocked()
        lock.unlock()
        finish(callback)
    }

    /// Claims the one finish; `nil` if it was already claimed.
    private func takeFinishLocked() -> FinishClaim? {
        guard !finished else { return nil }
        finished = true
        let callback = onStopped
        onStopped = nil
        return FinishClaim(callback: callback)
    }

    private struct FinishClaim {
        var callback: (@Sendable () -> Void)?
    }

    /// Closes an owned descriptor and reports the stop, once (when `claim` is not `nil`).
    private func finish(_ claim: FinishClaim?) {
        guard let claim else { return }
        if ownsDescriptor { _ = Glibc.close(fd) }
        claim.callback?()
    }
}
