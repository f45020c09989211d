import Synchronization
import URing

/// What an ``EventSource`` watches.
enum SourceKind: Sendable, Equatable {
    case dataAdd
    case dataOr
    case dataReplace
    case timer
    case signal
    case read
    case write
    case process
    case fileSystem
    case memoryPressure

    var isCustom: Bool {
        switch self {
        case .dataAdd, .dataOr, .dataReplace: return true
        default: return false
        }
    }

    var isReadiness: Bool { self == .read || self == .write }

    var name: String {
        switch self {
        case .dataAdd: return "data-add"
        case .dataOr: return "data-or"
        case .dataReplace: return "data-replace"
        case .timer: return "timer"
        case .signal: return "signal"
        case .read: return "read"
        case .write: return "write"
        case .process: return "process"
        case .fileSystem: return "file-system"
        case .memoryPressure: return "memory-pressure"
        }
    }
}

/// Watches the kernel, through the engine, for one source.
protocol SourceMonitor: AnyObject, Sendable {
    /// Starts watching; called once, when the source is activated.
    func start()
    /// Watches again after the event handler returned (level-triggered readiness); others ignore it.
    func rearm()
    /// Stops watching. `done` runs once (on any thread) when nothing of this monitor is left in flight in
    /// the engine, so that the descriptor it watched may be closed.
    func stop(then done: @escaping @Sendable () -> Void)
}

extension SourceMonitor {
    func rearm() {}
}

/// A timer source's schedule. Guarded by the core's lock.
struct TimerState {
    /// The next fire time; `nil` when the timer is not scheduled (or was one-shot and fired).
    var next: ContinuousClock.Instant?
    /// Nanoseconds between fires; `nil` for a one-shot timer.
    var interval: Int64?
    var leeway: Duration = .zero
    /// Bumped by every schedule change and by cancellation; a fire of an older generation is ignored.
    var generation: UInt64 = 0
    /// The engine timeout armed for this generation (engines other than the shared one).
    var armedID: OperationID?
    /// The generation a fire job is out for: arming it again (a schedule racing an activation, or a fire
    /// re-arming after a schedule from another thread) would double every fire job from then on.
    var armedGeneration: UInt64?
}

/// The shared state of an ``EventSource``: what the engine callbacks, the queued jobs and the public
/// handle all point to.
///
/// Deliveries run on `queue`, a private serial queue that targets the user's queue; that is what keeps
/// a source's handlers from ever running concurrently with themselves (SEMANTICS D4), holds events while
/// the source is suspended or inactive (D1, D21) and makes retargeting asynchronous (D23). Pending event
/// data lives in one atomic word, merged by the kind's rule; `scheduled` makes sure at most one delivery
/// job waits in the queue, so everything that arrives before it runs is coalesced into one handler call
/// (D7).
final class SourceCore: QueueJob, @unchecked Sendable {
    let kind: SourceKind
    let handle: UInt
    let mask: UInt
    let engine: IOEngine
    let queue: WorkQueue
    /// Whether timers go through the module's shared ``TimerScheduler`` (the shared engine) or arm their
    /// own engine timeouts.
    let usesTimerScheduler: Bool
    /// For readiness sources: whether the fd is a regular file (`data` is then the bytes left to EOF).
    let isRegularFile: Bool

    let cancelled = Atomic<Bool>(false)
    let scheduled = Atomic<Bool>(false)
    let pending = Atomic<UInt>(0)
    let latched = Atomic<UInt>(0)

    let lock = Lock()
    // Guarded by `lock`.
    var eventHandler: (@Sendable () -> Void)?
    var cancelHandler: (@Sendable () -> Void)?
    var registrationHandler: (@Sendable () -> Void)?
    var activated = false
    var suspendCount = 0
    var monitor: (any SourceMonitor)?
    /// Set once the monitor (if any) has left the engine after cancellation.
    var monitorStopped = false
    var cancelEnqueued = false
    var timer = TimerState()
    var termination: EventSource.Termination?
    /// Readiness: the source saw end of file or hang-up and fired its last event (D30).
    var finished = false

    init(kind: SourceKind, handle: UInt, mask: UInt, target: WorkQueue?, engine: IOEngine, isRegularFile: Bool = false)
    {
        self.kind = kind
        self.handle = handle
        self.mask = mask
        self.engine = engine
        self.isRegularFile = isRegularFile
        usesTimerScheduler = engine === IOEngine.shared
        queue = WorkQueue(label: "EventSource(\(kind.name))", attributes: .initiallyInactive, target: target)
    }

    // MARK: Recording events (any thread, including the engine's)

    /// Adds `value` to the pending data (signals: deliveries; timers: fires) and schedules a delivery.
    func record(add value: UInt) {
        guard value != 0, !cancelled.load(ordering: .relaxed) else { return }
        pending.wrappingAdd(value, ordering: .sequentiallyConsistent)
        scheduleDelivery()
    }

    /// ORs `bits` into the pending data and schedules a delivery.
    func record(or bits: UInt) {
        guard bits != 0, !cancelled.load(ordering: .relaxed) else { return }
        pending.bitwiseOr(bits, ordering: .sequentiallyConsistent)
        scheduleDelivery()
    }

    /// Replaces the pending data with `value` and schedules a delivery.
    func record(replace value: UInt) {
        guard value != 0, !cancelled.load(ordering: .relaxed) else { return }
        pending.store(value, ordering: .sequentiallyConsistent)
        scheduleDelivery()
    }

    /// Puts one delivery job on the source's queue unless one is already waiting.
    ///
    /// With `run`, a handshake over two words: here the data is recorded, then `scheduled` read; there
    /// `scheduled` is cleared, then the data taken. Either this sees the flag cleared, or that takes the
    /// data, only if all four accesses are sequentially consistent: a release or relaxed order lets a
    /// weakly ordered processor (arm64) read the flag before the data is visible, and the event waits
    /// for a delivery that never comes. On x86-64 this costs nothing more.
    @inline(__always)
    func scheduleDelivery() {
        if scheduled.load(ordering: .sequentiallyConsistent) { return }
        if scheduled.exchange(true, ordering: .acquiringAndReleasing) { return }
        queue.enqueue(self)
    }

    // MARK: Delivery (on `queue`)

    /// The delivery job: takes the pending data and calls the event handler once with it.
    func run() {
        scheduled.store(false, ordering: .sequentiallyConsistent)
        deliver()
    }

    /// Runs the registration handler the first time a job of an activated source runs (D5).
    private func runRegistrationIfNeeded() {
        lock.lock()
        let registration = registrationHandler
        registrationHandler = nil
        lock.unlock()
        guard let registration, !cancelled.load(ordering: .acquiring) else { return }
        registration()
    }

    func deliver() {
        runRegistrationIfNeeded()
        guard !cancelled.load(ordering: .acquiring) else { return }
        let value = pending.exchange(0, ordering: .sequentiallyConsistent)
        guard value != 0 else { return }
        var data = value
        var last = false
        if kind.isReadiness {
            (data, last) = readinessData(revents: value)
            if last {
                lock.lock()
                finished = true
                lock.unlock()
            }
        }
        latched.store(data, ordering: .releasing)
        lock.lock()
        let handler = eventHandler
        lock.unlock()
        // No handler: the event is consumed silently (D6).
        handler?()
        if kind.isReadiness && !last && !cancelled.load(ordering: .acquiring) {
            lock.lock()
            let monitor = self.monitor
            lock.unlock()
            monitor?.rearm()
        }
    }

    /// Runs the cancel handler, once, and lets go of every handler (D17, D20).
    func runCancel() {
        latched.store(0, ordering: .releasing)
        lock.lock()
        let handlers = takeHandlersLocked()
        lock.unlock()
        handlers.cancel?()
        // Released here, outside the lock: a handler that captured the public source may hold its last
        // reference, whose deinit takes the lock.
        withExtendedLifetime(handlers) {}
    }

    // MARK: Lifecycle

    func activate() {
        lock.lock()
        guard !activated else {
            lock.unlock()
            return
        }
        activated = true
        let isCancelled = cancelled.load(ordering: .acquiring)
        let monitor = isCancelled ? nil : self.monitor
        let enqueueCancel = isCancelled && monitorStopped && !cancelEnqueued
        if enqueueCancel { cancelEnqueued = true }
        lock.unlock()
        if !isCancelled {
            monitor?.start()
            if kind == .timer { armTimer() }
            // Runs the registration handler, and delivers what arrived before activation (D1, D5).
            scheduleDelivery()
        }
        if enqueueCancel { queue.async { self.runCancel() } }
        queue.activate()
    }

    func cancel() {
        guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        lock.lock()
        let monitor = self.monitor
        timer.generation &+= 1
        timer.next = nil
        let armed = timer.armedID
        timer.armedID = nil
        lock.unlock()
        if let armed { engine.removeTimeout(armed) { _ in } }
        pending.store(0, ordering: .relaxed)
        if let monitor {
            monitor.stop { self.monitorDidStop(enqueueCancel: true) }
        } else {
            monitorDidStop(enqueueCancel: true)
        }
    }

    /// The public handle went away without `cancel()`: unregister silently, no cancel handler (D18).
    func releaseSilently() {
        guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        lock.lock()
        let monitor = self.monitor
        timer.generation &+= 1
        timer.next = nil
        let armed = timer.armedID
        timer.armedID = nil
        let handlers = takeHandlersLocked()
        lock.unlock()
        withExtendedLifetime(handlers) {}
        if let armed { engine.removeTimeout(armed) { _ in } }
        monitor?.stop { self.monitorDidStop(enqueueCancel: false) }
    }

    /// Moves every handler out, so that they are released by the caller after it unlocks. Lock held.
    private func takeHandlersLocked() -> SourceHandlers {
        defer {
            eventHandler = nil
            cancelHandler = nil
            registrationHandler = nil
        }
        return SourceHandlers(event: eventHandler, cancel: cancelHandler, registration: registrationHandler)
    }

    private func monitorDidStop(enqueueCancel: Bool) {
        lock.lock()
        monitorStopped = true
        monitor = nil
        let enqueue = enqueueCancel && activated && !cancelEnqueued
        if enqueue { cancelEnqueued = true }
        lock.unlock()
        if enqueue { queue.async { self.runCancel() } }
    }

    // MARK: Timers

    func schedule(deadline: ContinuousClock.Instant?, interval: Duration?, leeway: Duration) {
        guard !cancelled.load(ordering: .acquiring) else { return }  // D20
        var nanos: Int64?
        if let interval {
            // D27: 0 (or negative) means 1 ns; an interval too long to represent means one-shot.
            let (seconds, attoseconds) = interval.components
            if seconds >= Int64.max / 1_000_000_000 {
                nanos = nil
            } else {
                nanos = max(1, seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
            }
        }
        var clampedLeeway = max(leeway, .zero)
        if let nanos { clampedLeeway = min(clampedLeeway, .nanoseconds(nanos / 2)) }  // D28
        if mask & EventSource.TimerFlags.strict.rawValue != 0 { clampedLeeway = .zero }
        lock.lock()
        timer.generation &+= 1
        timer.next = deadline
        timer.interval = nanos
        timer.leeway = clampedLeeway
        let stale = timer.armedID
        timer.armedID = nil
        let active = activated
        // D26: a new schedule clears the fires not yet delivered; under the lock, so that a fire of the
        // old generation cannot add its count after this.
        pending.store(0, ordering: .relaxed)
        lock.unlock()
        if let stale { engine.removeTimeout(stale) { _ in } }
        if active { armTimer() }
    }

    /// Arms the engine (or the shared timer scheduler) for the current schedule.
    func armTimer() {
        lock.lock()
        guard let next = timer.next, !cancelled.load(ordering: .relaxed), timer.armedGeneration != timer.generation
        else {
            lock.unlock()
            return
        }
        let generation = timer.generation
        timer.armedGeneration = generation
        let leeway = timer.leeway
        lock.unlock()
        let job = TimerFireJob(core: self, generation: generation)
        if usesTimerScheduler {
            // The scheduler releases the job to our queue and holds it until `next`: never early.
            TimerScheduler.shared.schedule(.job(job), on: queue, deadline: next, leeway: leeway)
            return
        }
        let queue = self.queue
        let id = engine.timeout(deadline: next + leeway) { completion in
            if completion.error == nil { queue.enqueue(job) }
        }
        lock.lock()
        if timer.generation == generation { timer.armedID = id }
        lock.unlock()
    }

    /// Whether a fire of `generation` would be ignored (see ``timerFired(generation:)``). Takes the source's
    /// lock: the timer scheduler asks with its own held, and never the other way round.
    func isStaleTimer(generation: UInt64) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return timer.generation != generation || cancelled.load(ordering: .relaxed)
    }

    /// A fire of generation `generation`, on `queue`: counts the fires due, schedules the next one, and
    /// delivers (D11, D26).
    func timerFired(generation: UInt64) {
        let now = ContinuousClock.now
        lock.lock()
        guard timer.generation == generation, let deadline = timer.next, !cancelled.load(ordering: .relaxed) else {
            lock.unlock()
            return
        }
        timer.armedID = nil
        timer.armedGeneration = nil
        if now < deadline {
            // Never early: an engine that woke us too soon gets asked again.
            lock.unlock()
            armTimer()
            return
        }
        var fires: UInt = 1
        if let interval = timer.interval {
            let late = deadline.duration(to: now)
            let (seconds, attoseconds) = late.components
            let lateNanos = seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
            let missed = lateNanos / interval
            fires &+= UInt(missed)
            timer.next = deadline + .nanoseconds(interval) * Int(missed + 1)
        } else {
            timer.next = nil
        }
        let again = timer.next != nil
        // Counted under the lock: a schedule from another thread either comes before (and this fire was
        // ignored) or after (and clears the count).
        pending.wrappingAdd(fires, ordering: .releasing)
        lock.unlock()
        if again { armTimer() }
        deliver()
    }
}

/// A source's handlers, taken out together.
struct SourceHandlers {
    var event: (@Sendable () -> Void)?
    var cancel: (@Sendable () -> Void)?
    var registration: (@Sendable () -> Void)?
}

/// One timer fire travelling to the source's queue; it holds the source weakly so that a released or
/// rescheduled timer costs nothing but a no-op when it comes due.
final class TimerFireJob: QueueJob, @unchecked Sendable {
    weak var core: SourceCore?
    let generation: UInt64

    init(core: SourceCore, generation: UInt64) {
        self.core = core
        self.generation = generation
    }

    func run() {
        core?.timerFired(generation: generation)
    }

    /// Whether the fire can only be ignored now: its source rescheduled, was cancelled, or is gone.
    var isStale: Bool {
        guard let core else { return true }
        return core.isStaleTimer(generation: generation)
    }
}

/// Stops the process with `message` unless `condition` holds: the sources' misuse check. Built on
/// ``misuse(_:file:line:)`` (`fatalError`), so that optimised builds keep the message, which a failed
/// `precondition` would drop.
@inline(__always)
func sourceRequire(
    _ condition: Bool,
    _ message: @autoclosure () -> String,
    file: StaticString = #fileID,
    line: UInt = #line
) {
    if !condition { misuse(message(), file: file, line: line) }
}
