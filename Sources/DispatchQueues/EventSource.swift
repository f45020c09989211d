import Synchronization
import URing

/// Watches for one kind of event — a timer, a signal, a readable or writable descriptor, a process exit,
/// a change to a file, memory pressure, or data merged in by the program — and runs an event handler on
/// a queue when it happens: the counterpart of the toolchain's `DispatchSource`.
///
/// Make one with a `make…Source` factory (``makeTimerSource(flags:queue:)``,
/// ``makeReadSource(fileDescriptor:queue:)``, …). A new source is *inactive*: set its handlers, then call
/// ``activate()`` (or ``resume()``). Every kernel event reaches the source through the package's I/O engine
/// (io_uring, or its POSIX stand-in); no thread sleeps on behalf of a source.
///
/// ## Handlers
/// - The **event handler** (``setEventHandler(handler:)``) runs on the source's target queue, never
///   concurrently with itself or with the source's other handlers. Events that arrive while it runs, while
///   it waits in the queue, while the source is suspended or before it is activated are *coalesced*: the
///   next call sees them all at once in ``data`` (SEMANTICS D4, D7). It may be replaced at any time; the
///   change applies from the next call (D6). Without one, events are consumed and dropped.
/// - The **registration handler** (``setRegistrationHandler(handler:)``) runs once, on the target queue,
///   after activation and before the first event handler call, unless the source was cancelled first (D5).
/// - The **cancel handler** (``setCancelHandler(handler:)``) runs once after ``cancel()``, on the target
///   queue, after any event handler call in progress has returned and after the source has left the
///   engine, so that the descriptor it watched may then be closed (D17). It runs only if ``cancel()`` was
///   called, and for a suspended or inactive source only once it is resumed or activated (D18, D19).
///   After it, the source holds no handler any more: a handler that captures its own source is released.
///
/// ## Lifetime and misuse
/// Releasing the last reference to an active, uncancelled source unregisters it silently, without the
/// cancel handler (D18). These are programming errors and stop the process with a message naming them
/// (D2, C9, D37): releasing a source that was never activated or that is suspended, calling ``resume()``
/// more often than ``suspend()``, and ``merge(data:)`` on a source that is not a custom data source.
public final class EventSource: @unchecked Sendable {
    let core: SourceCore

    init(core: SourceCore) {
        self.core = core
    }

    deinit {
        core.lock.lock()
        let activated = core.activated
        let suspended = core.suspendCount > 0
        core.lock.unlock()
        // SEMANTICS D2 and C9: libdispatch crashes on both.
        sourceRequire(
            activated,
            "EventSource(\(core.kind.name)) released before it was activated (call activate() first)"
        )
        sourceRequire(
            !suspended,
            "EventSource(\(core.kind.name)) released while suspended (resume it before the last release)"
        )
        core.releaseSilently()
    }

    // MARK: Handlers

    /// Sets the block run for each (coalesced) batch of events, or removes it with `nil`.
    ///
    /// The handler runs on the target queue, never concurrently with itself; inside it, ``data`` holds what
    /// was coalesced since the previous call (see the factory of each kind). It takes effect from the next
    /// call (SEMANTICS D6). Events that arrive while there is no handler are dropped, not replayed.
    public func setEventHandler(handler: (@Sendable () -> Void)?) {
        guard !core.cancelled.load(ordering: .acquiring) else { return }
        core.lock.lock()
        let old = core.eventHandler
        core.eventHandler = handler
        core.lock.unlock()
        // Released outside the lock: the old handler may hold the last reference to this source.
        withExtendedLifetime(old) {}
    }

    /// Sets the block run once after ``cancel()`` (see the type's discussion), or removes it with `nil`.
    ///
    /// It runs on the target queue, after the running event handler (if any) returned and after the source
    /// left the engine; ``data`` reads 0 inside it (SEMANTICS D17, D20).
    public func setCancelHandler(handler: (@Sendable () -> Void)?) {
        core.lock.lock()
        let old = core.cancelHandler
        if !core.cancelEnqueued { core.cancelHandler = handler }
        core.lock.unlock()
        withExtendedLifetime(old) {}
    }

    /// Sets the block run once, on the target queue, when the source is installed, before the first event
    /// handler call (SEMANTICS D5).
    ///
    /// Set after activation, it still runs once, soon. It never runs for a source cancelled before it got
    /// to run.
    public func setRegistrationHandler(handler: (@Sendable () -> Void)?) {
        guard !core.cancelled.load(ordering: .acquiring) else { return }
        core.lock.lock()
        let old = core.registrationHandler
        core.registrationHandler = handler
        let activated = core.activated
        core.lock.unlock()
        withExtendedLifetime(old) {}
        if activated && handler != nil { core.scheduleDelivery() }
    }

    // MARK: Lifecycle

    /// Starts a new source: it begins watching, the registration handler runs, and events seen since
    /// creation are delivered (SEMANTICS D1, D2). A second call does nothing.
    public func activate() {
        core.activate()
    }

    /// Stops the source from running its event handler until a matching ``resume()``; events go on being
    /// recorded and are delivered as one coalesced call after the last resume (SEMANTICS D21). A handler
    /// already running finishes. Suspensions count: two need two resumes.
    public func suspend() {
        core.lock.lock()
        core.suspendCount += 1
        core.lock.unlock()
        core.queue.suspend()
    }

    /// Undoes one ``suspend()``; on a source that was never activated and is not suspended, activates it
    /// as ``activate()`` does (SEMANTICS D2).
    ///
    /// Resuming an active source that is not suspended is a programming error and stops the process
    /// ("over-resume", SEMANTICS C9).
    public func resume() {
        core.lock.lock()
        if core.suspendCount > 0 {
            core.suspendCount -= 1
            core.lock.unlock()
            core.queue.resume()
            return
        }
        let activated = core.activated
        core.lock.unlock()
        sourceRequire(
            !activated,
            "Over-resume of EventSource(\(core.kind.name)): resume() called more times than suspend()"
        )
        core.activate()
    }

    /// Cancels the source: ``isCancelled`` is `true` at once, no new event handler call starts, merged data
    /// is ignored, and the cancel handler runs once as the type's discussion says (SEMANTICS D16, D17). A
    /// second call does nothing.
    public func cancel() {
        core.cancel()
    }

    /// Whether ``cancel()`` was called.
    public var isCancelled: Bool { core.cancelled.load(ordering: .acquiring) }

    /// Makes the source run its handlers on `queue` (`nil`: the default global queue).
    ///
    /// On an active source the change is asynchronous: a handler call already queued runs on the old
    /// queue, and events around the change may be handled on either (SEMANTICS D23).
    public func setTarget(queue: WorkQueue?) {
        core.queue.setTarget(queue: queue ?? WorkQueue.global())
    }

    // MARK: Getters

    /// The data of the current event: inside the event handler, what was coalesced for this call (its
    /// meaning depends on the kind; see each factory). Outside it, the value of the last call; 0 before the
    /// first and inside the cancel handler (SEMANTICS D6, D20).
    public var data: UInt { core.latched.load(ordering: .acquiring) }

    /// The mask given at creation (timer flags, process or file-system events, memory-pressure levels); 0
    /// for the other kinds, and 0 once cancelled (SEMANTICS D25).
    public var mask: UInt { isCancelled ? 0 : core.mask }

    /// The descriptor of a read, write or file-system source, the signal number of a signal source, the
    /// process identifier of a process source; 0 for the others (SEMANTICS D24).
    public var handle: UInt { core.handle }
}
