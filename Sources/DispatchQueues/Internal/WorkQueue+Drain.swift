import Synchronization
import URing

/// Draining: how a queue's blocks get a thread.
///
/// A custom queue that has runnable blocks puts *drain tokens* on its target; running a token drains the
/// queue. A serial queue has at most one token (or one inline `sync`) at a time, which is what makes it
/// serial whatever its target does. A concurrent queue has up to `drainerLimit` tokens, each popping one
/// block at a time, so blocks start in FIFO order and barriers can wait for `inflight` to reach zero.
/// Because tokens are ordinary work on the target, a serial target runs the tokens of all its children one
/// at a time, which serialises the whole hierarchy (SEMANTICS C12).
extension WorkQueue {
    /// Blocks a serial drain moves out of the queue per lock round trip.
    static let serialChunk = 64
    /// Blocks one drain runs before it yields its thread by going to the back of its target.
    static let drainBudget = 1024

    /// Most concurrent drainers worth having: more than the pool can run, or more than a serial target
    /// lets through, only cost wake-ups.
    var drainerLimit: Int {
        if let target, target.isSerial { return 1 }
        return WorkerPool.shared.cores
    }

    /// A re-targeting waits, besides for the blocks running, for every other drain token to be gone: a
    /// token still queued on the old target would otherwise run later blocks there (C13). Each token that
    /// finds it first leaves; the last one takes it, and new tokens go to the new target.
    var canPopConcurrentLocked: Bool {
        isActive && suspendCount == 0 && !items.isEmpty && !barrierRunning
            && (inflight == 0 || !items.firstIsBarrier) && (drainers <= 1 || !items.firstIsRetarget)
    }

    /// How many drain tokens to put on the target now; counts them as taken. Lock held.
    func drainersToSpawnLocked() -> Int {
        guard isActive && suspendCount == 0 && !items.isEmpty else { return 0 }
        if isSerial {
            guard drainers == 0 else { return 0 }
            drainers = 1
            return 1
        }
        guard canPopConcurrentLocked else { return 0 }
        if items.firstIsBarrier {
            guard drainers == 0 else { return 0 }
            drainers = 1
            return 1
        }
        let wanted = min(drainerLimit, items.count) - drainers
        guard wanted > 0 else { return 0 }
        drainers += wanted
        return wanted
    }

    /// Runs a drain token of this queue on the current thread.
    func drain(context: ThreadContext) {
        if isSerial {
            drainSerial(context: context)
        } else {
            drainConcurrent(context: context)
        }
    }

    private func drainSerial(context: ThreadContext) {
        context.withFrame(self, exclusive: true) { frame in
            withUnsafeTemporaryAllocation(of: Work.self, capacity: Self.serialChunk) { buffer in
                let base = buffer.baseAddress.unsafelyUnwrapped
                var processed = 0
                while true {
                    lock.lock()
                    guard isActive && suspendCount == 0 && !items.isEmpty else {
                        drainers = 0
                        lock.unlock()
                        return
                    }
                    if processed >= Self.drainBudget {
                        // Keep ownership, but let other queues of the target have the thread.
                        let target = self.target
                        lock.unlock()
                        target.unsafelyUnwrapped.submit(.drain(self))
                        return
                    }
                    let count = items.moveFront(into: base, limit: Self.serialChunk)
                    lock.unlock()
                    var index = 0
                    while index < count {
                        let work = (base + index).move()
                        index += 1
                        if case .retarget(let newTarget) = work {
                            lock.lock()
                            if index < count { items.moveBackToFront(from: base + index, count: count - index) }
                            target = newTarget
                            drainers = 0
                            let spawn = drainersToSpawnLocked()
                            lock.unlock()
                            spawnDrainers(spawn, on: newTarget)
                            return
                        }
                        WorkQueue.execute(work, frame: frame, context: context)
                        processed += 1
                        if index < count && suspendHint.load(ordering: .relaxed) != 0 {
                            // Suspended by the block just run: the rest waits for the resume (C8).
                            lock.lock()
                            items.moveBackToFront(from: base + index, count: count - index)
                            lock.unlock()
                            break
                        }
                    }
                }
            }
        }
    }

    private func drainConcurrent(context: ThreadContext) {
        context.withFrame(self, exclusive: false, holdsDrainerSlot: true) { frame in
            var processed = 0
            lock.lock()
            while true {
                if frame.pointee.released {
                    // The slot went back while the last block blocked; take one again if there is room.
                    guard canPopConcurrentLocked && drainers < drainerLimit else { break }
                    drainers += 1
                    frame.pointee.released = false
                }
                guard canPopConcurrentLocked && processed < Self.drainBudget else {
                    drainers -= 1
                    frame.pointee.released = true
                    break
                }
                let work = items.popFirst().unsafelyUnwrapped
                let barrier = work.isBarrier
                if barrier { barrierRunning = true }
                inflight += 1
                let spawn = barrier ? 0 : drainersToSpawnLocked()
                let target = self.target
                lock.unlock()
                spawnDrainers(spawn, on: target)
                if case .retarget(let newTarget) = work {
                    lock.lock()
                    self.target = newTarget
                    inflight -= 1
                    barrierRunning = false
                    drainers -= 1
                    frame.pointee.released = true
                    break
                }
                frame.pointee.exclusive = barrier
                WorkQueue.execute(work, frame: frame, context: context)
                frame.pointee.exclusive = false
                processed += 1
                lock.lock()
                inflight -= 1
                if barrier { barrierRunning = false }
            }
            let spawn = drainersToSpawnLocked()
            let target = self.target
            lock.unlock()
            spawnDrainers(spawn, on: target)
        }
    }

    /// A drainer of this concurrent queue is about to block: give its slot to another drainer.
    func releaseDrainerSlot() {
        lock.lock()
        drainers -= 1
        let spawn = drainersToSpawnLocked()
        let target = self.target
        lock.unlock()
        spawnDrainers(spawn, on: target)
    }

    /// Runs one item that a global queue handed to a worker.
    func runRootWork(_ work: Work, context: ThreadContext) {
        context.withFrame(self, exclusive: false) { frame in
            WorkQueue.execute(work, frame: frame, context: context)
        }
    }

    /// ``execute(_:frame:context:)`` for the work inside a timer release (out of line: no recursive inlining).
    @inline(never)
    static func executeReleased(_ work: Work, frame: UnsafeMutablePointer<Frame>, context: ThreadContext) {
        execute(work, frame: frame, context: context)
    }

    /// Runs one unit of work in `frame`, the innermost frame of the queue it was taken from.
    @inline(__always)
    static func execute(_ work: consuming Work, frame: UnsafeMutablePointer<Frame>, context: ThreadContext) {
        switch work {
        case .block(let body), .barrier(let body):
            body()
        case .group(let body, let group, _):
            body()
            group.leave()
        case .item(let item):
            item.run()
        case .sync(let request):
            // The caller is blocked; its frames count as ours while its block runs (C4 through handoff).
            let saved = frame.pointee.inherited
            frame.pointee.inherited = request.callerFrame
            request.invoke()
            frame.pointee.inherited = saved
            request.finish()
        case .drain(let child):
            child.drain(context: context)
        case .job(let job):
            job.run()
        case .apply(let apply):
            apply.help(context: context)
        case .timer(let release):
            release.waitUntilDue()
            executeReleased(release.work, frame: frame, context: context)
        case .retarget:
            break
        }
    }
}
