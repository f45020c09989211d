import DispatchQueues
import Synchronization
import SystemPackage
import Testing
import URing

#if canImport(Glibc)
import Glibc
#endif

/// Spawns `/bin/sh -c script` and returns its pid.
func spawnShell(_ script: String) -> pid_t {
    var pid: pid_t = 0
    let arguments: [UnsafeMutablePointer<CChar>?] = ["/bin/sh", "-c", script].map { text in
        text.withCString { strdup($0) }
    }
    defer { for argument in arguments { free(argument) } }
    var argv = arguments + [nil]
    let rc = posix_spawn(&pid, "/bin/sh", nil, nil, &argv, environ)
    precondition(rc == 0, "posix_spawn failed: \(rc)")
    return pid
}

/// The current action for `signal`.
func currentHandler(_ signal: CInt) -> UInt {
    var action = sigaction()
    sigaction(signal, nil, &action)
    return unsafeBitCast(action.__sigaction_handler.sa_handler, to: UInt.self)
}

@Suite("EventSource signals", .timeLimit(.minutes(1)))
struct EventSourceSignalTests {
    // D12 [DIV] → ours: deliveries are counted (a real-time signal queues each one); D24: handle.
    @Test("signal deliveries are counted while suspended", arguments: EngineKind.allCases)
    func counted(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            let signal: CInt = 40  // a real-time signal: the kernel queues every send
            let source = EventSource.makeSignalSource(signal: signal, queue: nil, engine: engine)
            #expect(source.handle == UInt(signal))
            let seen = Seen()
            source.setEventHandler { seen.add(source.data) }
            source.suspend()
            source.activate()
            for _ in 0..<3 { kill(getpid(), signal) }
            #expect(seen.nothing(within: .milliseconds(100)))
            source.resume()
            seen.next()
            #expect(seen.all == [3])
            cancelAndWait(source)
        }
    }

    // D12, D32: a standard signal raised by the process to itself, default action "terminate": the
    // process survives, the source sees it; the action is put back after the last cancel.
    @Test("SIGUSR1 observed; previous action restored", arguments: EngineKind.allCases)
    func observed(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            let before = currentHandler(SIGUSR1)
            let source = EventSource.makeSignalSource(signal: SIGUSR1, queue: nil, engine: engine)
            let seen = Seen()
            source.setEventHandler { seen.add(source.data) }
            source.activate()
            kill(getpid(), SIGUSR1)
            seen.next()
            #expect(seen.all == [1])
            cancelAndWait(source)
            #expect(currentHandler(SIGUSR1) == before)
        }
    }

    // D33: several sources for one signal all fire; the action is restored only after the last.
    @Test("two sources for one signal both fire", arguments: EngineKind.allCases)
    func twoSources(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            var ignore = sigaction()
            ignore.__sigaction_handler.sa_handler = SIG_IGN
            var previous = sigaction()
            sigaction(SIGUSR2, &ignore, &previous)
            defer { sigaction(SIGUSR2, &previous, nil) }
            let ignored = currentHandler(SIGUSR2)
            let first = EventSource.makeSignalSource(signal: SIGUSR2, queue: nil, engine: engine)
            let second = EventSource.makeSignalSource(signal: SIGUSR2, queue: nil, engine: engine)
            let seenFirst = Seen()
            let seenSecond = Seen()
            first.setEventHandler { seenFirst.add(first.data) }
            second.setEventHandler { seenSecond.add(second.data) }
            first.activate()
            second.activate()
            kill(getpid(), SIGUSR2)
            seenFirst.next()
            seenSecond.next()
            #expect(seenFirst.all == [1] && seenSecond.all == [1])
            cancelAndWait(first)
            #expect(currentHandler(SIGUSR2) != ignored)  // still watched by `second`
            cancelAndWait(second)
            #expect(currentHandler(SIGUSR2) == ignored)  // SIG_IGN is back
        }
    }

    // D1: a signal that arrives before activation is kept.
    @Test("signal before activation is delivered after", arguments: EngineKind.allCases)
    func beforeActivation(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            let source = EventSource.makeSignalSource(signal: 41, queue: nil, engine: engine)
            let seen = Seen()
            source.setEventHandler { seen.add(source.data) }
            kill(getpid(), 41)
            #expect(seen.nothing(within: .milliseconds(50)))
            source.activate()
            seen.next()
            #expect(seen.all == [1])
            cancelAndWait(source)
        }
    }
}

@Suite("EventSource processes", .timeLimit(.minutes(1)))
struct EventSourceProcessTests {
    // D35: exit observed once, with its status; the source does not reap the child.
    @Test("child exit with status 3", arguments: EngineKind.allCases)
    func childExit(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            let pid = spawnShell("exit 3")
            let source = EventSource.makeProcessSource(identifier: pid, eventMask: .exit, queue: nil, engine: engine)
            #expect(source.handle == UInt(pid))
            #expect(source.mask == EventSource.ProcessEvent.exit.rawValue)
            let seen = Seen()
            let status = Locked<EventSource.Termination?>(nil)
            source.setEventHandler {
                status.withLock { $0 = source.terminationStatus }
                seen.add(source.data)
            }
            source.activate()
            seen.next()
            #expect(seen.all == [EventSource.ProcessEvent.exit.rawValue])
            #expect(status.withLock { $0 } == .exited(3))
            #expect(seen.nothing(within: .milliseconds(50)))
            // Not reaped by the source: waitpid still collects it.
            var raw: CInt = 0
            #expect(waitpid(pid, &raw, 0) == pid)
            #expect((raw >> 8) & 0xff == 3)
            cancelAndWait(source)
        }
    }

    // D35: five observers each see the exit once; a signal death is reported as such.
    @Test("five observers; death by signal", arguments: EngineKind.allCases)
    func observers(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            let pid = spawnShell("kill -9 $$")
            let group = WorkGroup()
            let counts = Locked<[Int]>(Array(repeating: 0, count: 5))
            var sources: [EventSource] = []
            for index in 0..<5 {
                let source = EventSource.makeProcessSource(
                    identifier: pid,
                    eventMask: .exit,
                    queue: nil,
                    engine: engine
                )
                group.enter()
                source.setEventHandler {
                    counts.withLock { $0[index] += 1 }
                    group.leave()
                }
                source.activate()
                sources.append(source)
            }
            expectDone(group)
            #expect(sources[0].terminationStatus == .signaled(SIGKILL))
            var raw: CInt = 0
            #expect(waitpid(pid, &raw, 0) == pid)
            for source in sources { cancelAndWait(source) }
            #expect(counts.withLock { $0 } == [1, 1, 1, 1, 1])
        }
    }

    // D35: a zombie (exited, not yet reaped) gives its exit at once, with its status.
    @Test("zombie child", arguments: EngineKind.allCases)
    func zombie(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            let pid = spawnShell("exit 5")
            var info = siginfo_t()
            // Wait for the exit without reaping: the child stays a zombie.
            #expect(waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == 0)
            let source = EventSource.makeProcessSource(identifier: pid, eventMask: .exit, queue: nil, engine: engine)
            let seen = Seen()
            source.setEventHandler { seen.add(source.data) }
            source.activate()
            seen.next()
            #expect(source.terminationStatus == .exited(5))
            var raw: CInt = 0
            #expect(waitpid(pid, &raw, 0) == pid)
            cancelAndWait(source)
        }
    }

    // D35: a process that does not exist gives one synthetic exit.
    @Test("non-existent pid: one synthetic exit", arguments: EngineKind.allCases)
    func missing(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            let source = EventSource.makeProcessSource(
                identifier: 0x3fff_fff0,
                eventMask: .exit,
                queue: nil,
                engine: engine
            )
            let seen = Seen()
            source.setEventHandler { seen.add(source.data) }
            source.activate()
            seen.next()
            #expect(seen.all == [EventSource.ProcessEvent.exit.rawValue])
            #expect(source.terminationStatus == nil)
            #expect(seen.nothing(within: .milliseconds(50)))
            cancelAndWait(source)
        }
    }
}

@Suite("EventSource file system", .timeLimit(.minutes(1)))
struct EventSourceFileSystemTests {
    typealias Event = EventSource.FileSystemEvent

    /// Runs `change` and returns the data of the handler call it caused.
    func observe(_ seen: Seen, _ change: () -> Void) -> Event {
        let before = seen.count
        change()
        seen.next()
        return Event(rawValue: seen.all[before])
    }

    // D36: write/extend, attrib, link, rename, delete, mapped from inotify.
    @Test("write, extend, attrib, link, rename, delete", arguments: EngineKind.allCases)
    func events(kind: EngineKind) throws {
        try withSourceEngine(kind) { engine in
            let directory = SourceTemporaryDirectory()
            defer { directory.remove() }
            let path = directory.path + "/watched"
            let file = try FileDescriptor.open(
                FilePath(path),
                .readWrite,
                options: [.create],
                permissions: .ownerReadWrite
            )
            defer { try? file.close() }
            let source = EventSource.makeFileSystemObjectSource(
                fileDescriptor: file,
                eventMask: .all,
                queue: nil,
                engine: engine
            )
            #expect(source.handle == UInt(file.rawValue))
            #expect(source.mask == Event.all.rawValue)
            let seen = Seen()
            let ready = WorkSemaphore(value: 0)
            source.setRegistrationHandler { ready.signal() }
            source.setEventHandler { seen.add(source.data) }
            source.activate()
            expectSignalled(ready)
            let grew = observe(seen) { _ = try? file.writeAll([1, 2, 3]) }
            #expect(grew == [.write, .extend])
            let rewrote = observe(seen) { _ = try? file.writeAll(toAbsoluteOffset: 0, [4]) }
            #expect(rewrote == .write)
            let attrib = observe(seen) { _ = fchmod(file.rawValue, 0o600) }
            #expect(attrib == .attrib)
            let linked = observe(seen) { _ = link(path, path + ".2") }
            #expect(linked == [.attrib, .link])
            let renamed = observe(seen) { _ = rename(path, path + ".3") }
            #expect(renamed == .rename)
            _ = unlink(path + ".2")
            seen.next()  // the link count dropped: attrib | link
            let deleted = observe(seen) { _ = unlink(path + ".3") }
            #expect(deleted.contains(.delete))
            cancelAndWait(source)
        }
    }

    // D36: a directory's entries changing is a write to the directory; removing it is a delete.
    @Test("directory: entries created and removed are writes", arguments: EngineKind.allCases)
    func directory(kind: EngineKind) throws {
        try withSourceEngine(kind) { engine in
            let directory = SourceTemporaryDirectory()
            defer { directory.remove() }
            let handle = try FileDescriptor.open(FilePath(directory.path), .readOnly, options: [.directory])
            defer { try? handle.close() }
            let source = EventSource.makeFileSystemObjectSource(
                fileDescriptor: handle,
                eventMask: [.write, .delete],
                queue: nil,
                engine: engine
            )
            let seen = Seen()
            let ready = WorkSemaphore(value: 0)
            source.setRegistrationHandler { ready.signal() }
            source.setEventHandler { seen.add(source.data) }
            source.activate()
            expectSignalled(ready)
            let created = observe(seen) {
                let fd = open(directory.path + "/entry", O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
                close(fd)
            }
            #expect(created == .write)
            let removed = observe(seen) { _ = unlink(directory.path + "/entry") }
            #expect(removed == .write)
            cancelAndWait(source)
        }
    }

    // D36: a mask filters; renames one after another are each reported (T:dispatch_vnode.c, with 100).
    @Test("100 renames, each reported", arguments: EngineKind.allCases)
    func renames(kind: EngineKind) throws {
        try withSourceEngine(kind) { engine in
            let directory = SourceTemporaryDirectory()
            defer { directory.remove() }
            let file = try FileDescriptor.open(
                FilePath(directory.path + "/r0"),
                .readWrite,
                options: [.create],
                permissions: .ownerReadWrite
            )
            defer { try? file.close() }
            let source = EventSource.makeFileSystemObjectSource(
                fileDescriptor: file,
                eventMask: .rename,
                queue: nil,
                engine: engine
            )
            let seen = Seen()
            let ready = WorkSemaphore(value: 0)
            source.setRegistrationHandler { ready.signal() }
            source.setEventHandler { seen.add(source.data) }
            source.activate()
            expectSignalled(ready)
            _ = fchmod(file.rawValue, 0o600)  // attrib: filtered out by the mask
            for index in 0..<100 {
                _ = rename(directory.path + "/r\(index)", directory.path + "/r\(index + 1)")
                seen.next()
            }
            #expect(seen.all == Array(repeating: Event.rename.rawValue, count: 100))
            cancelAndWait(source)
        }
    }
}

@Suite("EventSource memory pressure", .timeLimit(.minutes(1)))
struct EventSourceMemoryPressureTests {
    // Memory pressure through PSI triggers: creation, activation and cancellation where the kernel
    // offers them (pressure itself cannot be caused safely in a test).
    @Test("PSI trigger source: create, activate, cancel", arguments: EngineKind.allCases)
    func lifecycle(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            let source: EventSource
            do {
                source = try EventSource.makeMemoryPressureSource(
                    eventMask: [.warning, .critical],
                    queue: nil,
                    engine: engine
                )
            } catch {
                // No PSI here (ENOENT) or no permission: the documented error.
                let expected: [Errno] = [.noSuchFileOrDirectory, .permissionDenied, .notPermitted, .notSupported]
                #expect(expected.contains { $0 == error as? Errno })
                return
            }
            #expect(source.mask == 6)
            source.activate()
            cancelAndWait(source)
        }
    }

    // Where PSI is unavailable, creation throws the errno.
    @Test("no PSI: a documented error", arguments: EngineKind.allCases)
    func unavailable(kind: EngineKind) {
        withSourceEngine(kind) { engine in
            #expect(throws: Errno.noSuchFileOrDirectory) {
                _ = try EventSource.makeMemoryPressureSource(
                    eventMask: .warning,
                    queue: nil,
                    engine: engine,
                    pressureFile: "/proc/pressure/nonexistent"
                )
            }
        }
    }
}

/// Every kind of source, created, activated and cancelled, leaves no descriptor open: the cancel handler
/// runs after the source's own descriptors (signalfd, pidfd, inotify, PSI trigger) are closed.
@Suite("EventSource descriptors", .timeLimit(.minutes(1)))
struct EventSourceDescriptorTests {
    static func openDescriptors() -> Int {
        guard let directory = opendir("/proc/self/fd") else { return -1 }
        defer { closedir(directory) }
        var count = 0
        while readdir(directory) != nil { count += 1 }
        return count
    }

    @Test("no descriptor leaks", arguments: EngineKind.allCases)
    func noLeaks(kind: EngineKind) throws {
        try withSourceEngine(kind) { engine in
            let directory = SourceTemporaryDirectory()
            defer { directory.remove() }
            let file = try FileDescriptor.open(
                FilePath(directory.path + "/f"),
                .readWrite,
                options: [.create],
                permissions: .ownerReadWrite
            )
            defer { try? file.close() }
            let pid = spawnShell("exit 0")
            defer {
                var raw: CInt = 0
                _ = waitpid(pid, &raw, 0)
            }
            // The engines' own descriptors are not the sources' (the POSIX engine makes its reactor's when the
            // first source waits in it; the process's shared engine is made on first use).
            let shared = IOEngine.shared
            func sourcesDescriptors() -> Int {
                // The engines' counts first: they wait for a new engine's thread, which may still be about to
                // close the ring's descriptor.
                let engines = engine.ownDescriptorCount + shared.ownDescriptorCount
                return Self.openDescriptors() - engines
            }
            let before = sourcesDescriptors()
            for _ in 0..<3 {
                var sources: [EventSource] = [
                    EventSource.makeSignalSource(signal: 42, queue: nil, engine: engine),
                    EventSource.makeProcessSource(identifier: pid, eventMask: .exit, queue: nil, engine: engine),
                    EventSource.makeFileSystemObjectSource(
                        fileDescriptor: file,
                        eventMask: .all,
                        queue: nil,
                        engine: engine
                    ),
                    EventSource.makeReadSource(fileDescriptor: file, queue: nil, engine: engine),
                    EventSource.makeTimerSource(queue: nil, engine: engine),
                ]
                if let pressure = try? EventSource.makeMemoryPressureSource(
                    eventMask: .warning,
                    queue: nil,
                    engine: engine
                ) {
                    sources.append(pressure)
                }
                for source in sources {
                    source.activate()
                    cancelAndWait(source)
                }
            }
            #expect(sourcesDescriptors() == before)
        }
    }
}
