import DispatchQueues
import Synchronization
import Testing
import URing

/// Lifecycle, handlers, coalescing and custom data (SEMANTICS D1–D10, D16–D25, D37), on custom sources,
/// which involve no engine.
@Suite("EventSource lifecycle", .timeLimit(.minutes(1)))
struct EventSourceLifecycleTests {
    // D1, D2
    @Test("merges before activation are kept and coalesced; resume activates")
    func mergesBeforeActivation() {
        let source = EventSource.makeUserDataAddSource()
        let seen = Seen()
        source.setEventHandler { seen.add(source.data) }
        source.merge(data: 5)
        source.merge(data: 7)
        #expect(seen.nothing(within: .milliseconds(50)))
        source.resume()
        seen.next()
        #expect(seen.all == [12])
        cancelAndWait(source)
    }

    // D2: a second activate does nothing.
    @Test("activate twice")
    func activateTwice() {
        let source = EventSource.makeUserDataAddSource()
        let seen = Seen()
        source.setEventHandler { seen.add(source.data) }
        source.activate()
        source.activate()
        source.merge(data: 1)
        seen.next()
        cancelAndWait(source)
    }

    // D4: never concurrent with itself, even on a concurrent target queue.
    @Test("handler never runs concurrently with itself")
    func notReentrant() {
        let queue = WorkQueue(label: "concurrent target", attributes: .concurrent)
        let source = EventSource.makeUserDataAddSource(queue: queue)
        let probe = ConcurrencyProbe()
        let total = Unsynchronized<UInt>(0)
        let done = WorkSemaphore(value: 0)
        source.setEventHandler {
            probe.enter()
            total.value += source.data
            if total.value == 40_000 { done.signal() }
            probe.leave()
        }
        source.activate()
        let group = WorkGroup()
        for _ in 0..<4 {
            WorkQueue.global().async(group: group) {
                for _ in 0..<10_000 { source.merge(data: 1) }
            }
        }
        expectDone(group)
        expectSignalled(done)
        #expect(probe.highest == 1)
        cancelAndWait(source)
    }

    // D5
    @Test("registration handler runs once, before the first event handler")
    func registration() {
        let order = Locked<[String]>([])
        let seen = Seen()
        let source = EventSource.makeUserDataAddSource()
        source.setRegistrationHandler { order.withLock { $0.append("registration") } }
        source.setEventHandler {
            order.withLock { $0.append("event \(source.data)") }
            seen.add(source.data)
        }
        source.merge(data: 3)
        source.activate()
        seen.next()
        source.merge(data: 4)
        seen.next()
        #expect(order.withLock { $0 } == ["registration", "event 3", "event 4"])
        cancelAndWait(source)
    }

    // D5: set after activation, it still runs, once.
    @Test("registration handler set after activation still runs")
    func lateRegistration() {
        let source = EventSource.makeUserDataAddSource()
        source.activate()
        let ran = WorkSemaphore(value: 0)
        source.setRegistrationHandler { ran.signal() }
        expectSignalled(ran)
        source.merge(data: 1)
        #expect(ran.wait(timeout: .milliseconds(100)) == .timedOut)
        cancelAndWait(source)
    }

    // D5, D19: cancelled before activation: no registration, no event, cancel handler after activate.
    @Test("cancelled before activation: only the cancel handler runs, after activate")
    func cancelInactive() {
        let source = EventSource.makeUserDataAddSource()
        let calls = Locked<[String]>([])
        let cancelled = WorkSemaphore(value: 0)
        source.setRegistrationHandler { calls.withLock { $0.append("registration") } }
        source.setEventHandler { calls.withLock { $0.append("event") } }
        source.setCancelHandler {
            calls.withLock { $0.append("cancel") }
            cancelled.signal()
        }
        source.merge(data: 1)
        source.cancel()
        #expect(source.isCancelled)
        #expect(cancelled.wait(timeout: .milliseconds(100)) == .timedOut)
        source.activate()
        expectSignalled(cancelled)
        #expect(calls.withLock { $0 } == ["cancel"])
    }

    // D19: cancelled while suspended: the cancel handler waits for the resume.
    @Test("cancelled while suspended: cancel handler after resume")
    func cancelSuspended() {
        let source = EventSource.makeUserDataAddSource()
        let events = Atomic<Int>(0)
        source.setEventHandler { events.wrappingAdd(1, ordering: .relaxed) }
        let cancelled = WorkSemaphore(value: 0)
        source.setCancelHandler { cancelled.signal() }
        source.activate()
        source.suspend()
        source.merge(data: 2)
        source.cancel()
        #expect(cancelled.wait(timeout: .milliseconds(100)) == .timedOut)
        source.resume()
        expectSignalled(cancelled)
        #expect(events.load(ordering: .relaxed) == 0)
    }

    // D6: replaced handlers apply from the next event; events without a handler are dropped.
    @Test("replacing the handler; no handler drops events")
    func replaceHandler() {
        let queue = WorkQueue(label: "d6")
        let source = EventSource.makeUserDataAddSource(queue: queue)
        source.activate()
        // No handler: 5 is consumed silently. The queue's FIFO order tells us when it has been.
        source.merge(data: 5)
        let drained = WorkSemaphore(value: 0)
        queue.async { drained.signal() }
        expectSignalled(drained)
        let first = Seen()
        source.setEventHandler { first.add(source.data) }
        source.merge(data: 7)
        first.next()
        let second = Seen()
        source.setEventHandler { second.add(source.data) }
        source.merge(data: 9)
        second.next()
        #expect(first.all == [7])
        #expect(second.all == [9])
        // Outside a handler, data is the last latched value.
        #expect(source.data == 9)
        cancelAndWait(source)
    }

    // D7, D21: three merges while suspended give one event of their sum; suspensions count.
    @Test("suspend coalesces; two suspends need two resumes")
    func suspendCoalesces() {
        let source = EventSource.makeUserDataAddSource()
        let seen = Seen()
        source.setEventHandler { seen.add(source.data) }
        source.activate()
        source.suspend()
        source.suspend()
        source.merge(data: 1)
        source.merge(data: 2)
        source.merge(data: 3)
        source.resume()
        #expect(seen.nothing(within: .milliseconds(50)))
        source.resume()
        seen.next()
        #expect(seen.all == [6])
        cancelAndWait(source)
    }

    // D7, D37: merges made from the target queue are coalesced, and merge never runs the handler inline.
    @Test("merges from the target queue coalesce; merge is asynchronous")
    func mergeFromTargetQueue() {
        let queue = WorkQueue(label: "d7")
        let source = EventSource.makeUserDataAddSource(queue: queue)
        let seen = Seen()
        source.setEventHandler { seen.add(source.data) }
        source.activate()
        let inline = Atomic<Bool>(false)
        queue.async {
            source.merge(data: 10)
            source.merge(data: 20)
            inline.store(seen.count > 0, ordering: .relaxed)
        }
        seen.next()
        #expect(seen.all == [30])
        let ranInline = inline.load(ordering: .relaxed)
        #expect(!ranInline)
        cancelAndWait(source)
    }

    // D8, D9, D10
    @Test("add, or and replace; zero merges")
    func dataKinds() {
        let queue = WorkQueue(label: "kinds")
        let add = EventSource.makeUserDataAddSource(queue: queue)
        let or = EventSource.makeUserDataOrSource(queue: queue)
        let replace = EventSource.makeUserDataReplaceSource(queue: queue)
        let seenAdd = Seen()
        let seenOr = Seen()
        let seenReplace = Seen()
        add.setEventHandler { seenAdd.add(add.data) }
        or.setEventHandler { seenOr.add(or.data) }
        replace.setEventHandler { seenReplace.add(replace.data) }
        for source in [add, or, replace] { source.suspend() }
        add.merge(data: 2)
        add.merge(data: 0)
        add.merge(data: 3)
        or.merge(data: 1)
        or.merge(data: 4)
        replace.merge(data: 9)
        replace.merge(data: 4)
        for source in [add, or, replace] { source.activate() }
        for source in [add, or, replace] { source.resume() }
        seenAdd.next()
        seenOr.next()
        seenReplace.next()
        #expect(seenAdd.all == [5])
        #expect(seenOr.all == [5])
        #expect(seenReplace.all == [4])
        // D8, D10: merging 0 gives no call; replace keeps its previous value.
        add.merge(data: 0)
        replace.merge(data: 0)
        #expect(seenAdd.nothing(within: .milliseconds(50)))
        #expect(seenReplace.nothing(within: .milliseconds(10)))
        #expect(replace.data == 4)
        for source in [add, or, replace] { cancelAndWait(source) }
    }

    // D16, D17, D20
    @Test("cancel: immediate flag, running handler finishes first, merges ignored, state cleared")
    func cancelOrder() {
        let source = EventSource.makeUserDataOrSource()
        let order = Locked<[String]>([])
        let inside = WorkSemaphore(value: 0)
        let release = WorkSemaphore(value: 0)
        let cancelled = WorkSemaphore(value: 0)
        let dataInCancel = Atomic<UInt>(99)
        source.setEventHandler {
            inside.signal()
            _ = release.wait(timeout: patience)
            order.withLock { $0.append("event handler finishing after cancel") }
        }
        source.setCancelHandler {
            dataInCancel.store(source.data, ordering: .relaxed)
            order.withLock { $0.append("cancel handler") }
            cancelled.signal()
        }
        source.activate()
        source.merge(data: 2)
        expectSignalled(inside)
        #expect(source.mask == 0)
        source.cancel()
        #expect(source.isCancelled)
        source.cancel()  // a second cancel does nothing
        source.merge(data: 8)  // ignored
        release.signal()
        expectSignalled(cancelled)
        #expect(order.withLock { $0 } == ["event handler finishing after cancel", "cancel handler"])
        #expect(dataInCancel.load(ordering: .relaxed) == 0)
        #expect(source.mask == 0)
        #expect(cancelled.wait(timeout: .milliseconds(50)) == .timedOut)  // exactly once
    }

    // D18: releasing an active source without cancelling it: no cancel handler.
    @Test("releasing an active source unregisters it silently")
    func releaseActive() {
        let cancelled = WorkSemaphore(value: 0)
        do {
            let source = EventSource.makeUserDataAddSource()
            source.setCancelHandler { cancelled.signal() }
            source.activate()
            source.merge(data: 1)
        }
        #expect(cancelled.wait(timeout: .milliseconds(100)) == .timedOut)
    }

    // D20: handlers are released after the cancel handler (a handler capturing its own source).
    @Test("cancel releases the handlers")
    func cancelReleasesHandlers() {
        final class Token: Sendable {}
        weak var weakToken: Token?
        let source = EventSource.makeUserDataAddSource()
        do {
            let token = Token()
            weakToken = token
            source.setEventHandler { withExtendedLifetime(token) {} }
        }
        #expect(weakToken != nil)
        source.activate()
        cancelAndWait(source)
        // The cancel handler has returned; the handlers are gone once its job finished.
        let queueDrained = WorkSemaphore(value: 0)
        WorkQueue.global().asyncAfter(deadline: .now + .milliseconds(20)) { queueDrained.signal() }
        expectSignalled(queueDrained)
        #expect(weakToken == nil)
    }

    // D20: a handler holding the last reference to its own source is released after the cancel handler,
    // and the source's deinit then runs without deadlocking (regression: handlers were released under the
    // source's lock).
    @Test("a self-capturing handler is released by cancel")
    func selfCapturingHandler() {
        final class Token: Sendable {
            let released: WorkSemaphore
            init(_ released: WorkSemaphore) { self.released = released }
            deinit { released.signal() }
        }
        let released = WorkSemaphore(value: 0)
        let cancelled = WorkSemaphore(value: 0)
        do {
            let source = EventSource.makeUserDataAddSource()
            let token = Token(released)
            source.setEventHandler { withExtendedLifetime((source, token)) {} }
            source.setCancelHandler { cancelled.signal() }
            source.activate()
            source.merge(data: 1)
            source.cancel()
        }
        expectSignalled(cancelled)
        expectSignalled(released)
    }

    // D6: replacing a handler that holds the last reference to the source.
    @Test("replacing a self-capturing handler from inside it")
    func replaceSelfCapturingHandler() {
        let done = WorkSemaphore(value: 0)
        let source = EventSource.makeUserDataAddSource()
        source.setEventHandler { [source] in
            source.setEventHandler { done.signal() }
            source.merge(data: 1)
        }
        source.activate()
        source.merge(data: 1)
        expectSignalled(done)
        cancelAndWait(source)
    }

    // D22: suspending the target queue stops delivery too.
    @Test("suspending the target queue holds the handler")
    func suspendedTarget() {
        let queue = WorkQueue(label: "d22")
        let source = EventSource.makeUserDataAddSource(queue: queue)
        let seen = Seen()
        source.setEventHandler { seen.add(source.data) }
        source.activate()
        queue.suspend()
        source.merge(data: 1)
        source.merge(data: 1)
        #expect(seen.nothing(within: .milliseconds(50)))
        queue.resume()
        seen.next()
        #expect(seen.all == [2])
        cancelAndWait(source)
    }

    // D23: retargeting an active source; later events run on the new queue.
    @Test("changing the target queue")
    func retarget() {
        let key = WorkQueue.SpecificKey<String>()
        let old = WorkQueue(label: "old")
        let new = WorkQueue(label: "new")
        old.setSpecific(key: key, value: "old")
        new.setSpecific(key: key, value: "new")
        let source = EventSource.makeUserDataAddSource(queue: old)
        let where_ = Locked<[String]>([])
        let seen = Seen()
        source.setEventHandler {
            where_.withLock { $0.append(WorkQueue.getSpecific(key: key) ?? "none") }
            seen.add(source.data)
        }
        source.activate()
        source.merge(data: 1)
        seen.next()
        source.setTarget(queue: new)
        // The change is asynchronous; wait until it has happened, then the next event runs on `new`.
        let flushed = WorkSemaphore(value: 0)
        new.async { flushed.signal() }
        expectSignalled(flushed)
        source.merge(data: 1)
        seen.next()
        #expect(where_.withLock { $0 }.first == "old")
        #expect(where_.withLock { $0 }.last == "new")
        cancelAndWait(source)
    }

    // D24, D25
    @Test("handle and mask of custom and timer sources")
    func handleAndMask() {
        let add = EventSource.makeUserDataAddSource()
        #expect(add.handle == 0 && add.mask == 0)
        let timer = EventSource.makeTimerSource(flags: .strict)
        #expect(timer.handle == 0 && timer.mask == EventSource.TimerFlags.strict.rawValue)
        for source in [add, timer] {
            source.activate()
            cancelAndWait(source)
        }
        #expect(timer.mask == 0)
    }

    // D37 and the test: 1M merges from several threads sum exactly.
    @Test("a million merges from four threads sum exactly")
    func millionMerges() {
        let source = EventSource.makeUserDataAddSource()
        let total = Unsynchronized<UInt>(0)
        let calls = Unsynchronized<Int>(0)
        let done = WorkSemaphore(value: 0)
        source.setEventHandler {
            total.value += source.data
            calls.value += 1
            if total.value == 1_000_000 { done.signal() }
        }
        source.activate()
        let group = WorkGroup()
        for _ in 0..<4 {
            WorkQueue.global().async(group: group) {
                for _ in 0..<250_000 { source.merge(data: 1) }
            }
        }
        expectDone(group)
        expectSignalled(done)
        let finished = WorkSemaphore(value: 0)
        source.setCancelHandler { finished.signal() }
        source.cancel()
        expectSignalled(finished)
        #expect(total.value == 1_000_000)
        #expect(calls.value >= 1 && calls.value <= 1_000_000)
    }
}
