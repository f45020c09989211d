import URing

extension WorkQueue {
    /// Runs `work` on this queue and returns its result once it has run, exactly once.
    ///
    /// When the queue and every queue of its target chain are idle, `work` runs on the calling thread
    /// while they are held (no allocation, no thread switch); otherwise it is queued in FIFO order and runs
    /// on a worker (the main queue: on the ``dispatchMain()`` thread) while the caller waits. Inside
    /// `work`, ``getSpecific(key:)`` sees this queue (SEMANTICS C3). Waiting on a suspended or inactive
    /// queue lasts until it is resumed (C5).
    ///
    /// `sync` onto a queue that the current thread already holds exclusively, directly or anywhere in this
    /// queue's target chain, would deadlock: it stops the process with a message naming the queue
    /// (SEMANTICS C4). So does a barrier `sync` onto a concurrent queue the current thread is running on.
    ///
    /// - Parameters:
    ///   - flags: `.barrier` makes `work` a barrier on a concurrent queue.
    ///   - work: Runs once; what it throws is rethrown to the caller.
    public func sync<T, E: Error>(flags: WorkItem.Flags = [], execute work: () throws(E) -> T) throws(E) -> T {
        let barrier = flags.contains(.barrier) && !isSerial && isCustom
        let context = ThreadContext.current
        checkSyncAllowed(barrier: barrier, context: context, operation: "sync")
        var result: Result<T, E>?
        func body() {
            result = Result { () throws(E) -> T in try work() }
        }
        runSync(barrier: barrier, context: context, body)
        return try result.unsafelyUnwrapped.get()
    }

    /// Runs a work item on this queue and returns after it has run (or been skipped because it was
    /// cancelled). Its `.barrier` flag is honoured.
    public func sync(execute workItem: WorkItem) {
        sync(flags: workItem.flags) { workItem.run() }
    }

    /// Traps on a `sync` that can only deadlock (SEMANTICS C4, C25).
    func checkSyncAllowed(barrier: Bool, context: ThreadContext, operation: String) {
        // Also inside blocks that other syncs run inline on the main thread: they do not make it a drainer.
        checkNotMainThreadOntoMain(context: context, operation: operation)
        guard context.frame != nil else { return }
        var cursor: WorkQueue? = self
        while let queue = cursor {
            if queue.isCustom && context.holds(queue, exclusively: true) {
                if queue === self {
                    misuse(
                        "WorkQueue.\(operation) onto queue '\(label)' already owned by the current thread: this would deadlock"
                    )
                }
                misuse(
                    "WorkQueue.\(operation) onto queue '\(label)', whose target chain includes queue '\(queue.label)' already owned by the current thread: this would deadlock"
                )
            }
            cursor = queue.currentTarget
        }
        if barrier && context.holds(self, exclusively: false) {
            misuse(
                "WorkQueue.\(operation) with .barrier onto concurrent queue '\(label)' from a block running on it: the barrier would wait for its own caller"
            )
        }
    }

    /// The main thread before (or without) ``dispatchMain()``, in a block or not: a `sync` whose chain ends
    /// at the main queue could only be run by this very thread, so it would wait forever (SEMANTICS C4).
    private func checkNotMainThreadOntoMain(context: ThreadContext, operation: String) {
        // The thread first (cached per thread): on a worker the chain need not be walked at all.
        guard isCustom, !context.isMainDrainer, context.isProcessMainThread else { return }
        var cursor: WorkQueue? = self
        var reachesMain = false
        while let queue = cursor {
            if queue.isMain {
                reachesMain = true
                break
            }
            cursor = queue.currentTarget
        }
        guard reachesMain, !MainRunner.shared.hasDrainer else { return }
        misuse(
            "WorkQueue.\(operation) onto queue '\(label)', which runs on the main queue, from the main thread before dispatchMain(): this would deadlock"
        )
    }

    /// Runs `body` on this queue, inline if every queue of the chain can be taken, else by handoff.
    func runSync(barrier: Bool, context: ThreadContext, _ body: () -> Void) {
        if runInline(barrier: barrier, context: context, body) { return }
        withoutActuallyEscaping(body) { escapable in
            var closure = escapable
            withUnsafeMutablePointer(to: &closure) { pointer in
                let request = SyncRequest(
                    body: pointer,
                    callerFrame: context.frame,
                    barrier: barrier,
                    parker: context.parker
                )
                submit(.sync(request))
                context.willBlock()
                request.waitUntilDone()
                context.didUnblock()
            }
        }
    }

    /// Takes this queue and, recursively, its target chain for a block run on the calling thread; runs
    /// `body` with a frame per taken queue and releases them innermost first. Returns `false`, having
    /// taken nothing, when some queue of the chain is busy, suspended, inactive or the main queue's root.
    private func runInline(barrier: Bool, context: ThreadContext, _ body: () -> Void) -> Bool {
        switch kind {
        case .root:
            context.withFrame(self, exclusive: false) { _ in body() }
            return true
        case .mainRoot:
            return false
        case .serial, .concurrent:
            break
        }
        guard let target = tryEnterInline(barrier: barrier) else { return false }
        let ran = target.runInline(barrier: false, context: context) {
            context.withFrame(self, exclusive: isSerial || barrier) { _ in body() }
            exitInline(barrier: barrier)
        }
        if !ran { exitInline(barrier: barrier) }
        return ran
    }

    /// Takes the queue for one inline block if it could start one now without overtaking queued blocks;
    /// returns its target, or `nil` if it cannot.
    private func tryEnterInline(barrier: Bool) -> WorkQueue? {
        lock.lock()
        defer { lock.unlock() }
        guard isActive && suspendCount == 0 && items.isEmpty else { return nil }
        if isSerial {
            guard drainers == 0 else { return nil }
            drainers = 1
        } else {
            guard !barrierRunning else { return nil }
            if barrier {
                guard inflight == 0 else { return nil }
                barrierRunning = true
            }
            inflight += 1
        }
        return target
    }

    private func exitInline(barrier: Bool) {
        lock.lock()
        if isSerial {
            drainers = 0
        } else {
            inflight -= 1
            if barrier { barrierRunning = false }
        }
        let spawn = drainersToSpawnLocked()
        let target = self.target
        lock.unlock()
        spawnDrainers(spawn, on: target)
    }
}
