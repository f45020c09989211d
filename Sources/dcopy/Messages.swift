import DispatchQueues
import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

/// dcopy's messages, `-v` lines on standard output and errors on standard error, in the order cp would
/// print them: the order the walk reached their files, although up to ``Limits/files`` copies overlap.
///
/// A file's copy takes a place when the walk reaches it (``reserve()``) and fills it once, when it ends
/// (``fill(_:line:error:)``), with its `-v` line if it got as far as cp prints one and its error if it
/// failed; the walker's own messages take a place and fill it at once (``post(line:error:)``). A place's
/// messages are printed once every place before it is filled, on a serial queue of their own, so a copy
/// that ends on the ring thread never waits for a terminal or a pipe; ``flush()`` waits for them all.
final class Messages: @unchecked Sendable {
    private enum Message {
        case output(String)
        case error(String)
    }

    private let lock = Lock()
    /// The place the next ``reserve()`` takes.
    private var nextPlace = 0
    /// The first place not yet handed to the printer.
    private var head = 0
    /// Places filled while one before them was not.
    private var waiting: [Int: [Message]] = [:]
    /// Messages in order, for the printer.
    private var outbox: [Message] = []
    private var printing = false
    private let printer = WorkQueue(label: "dcopy messages")
    /// Standard output was closed at start (it is /dev/null now): a `-v` line fails as it would for cp.
    private let outputWasClosed: Bool
    /// The first `-v` line's write error; the printer alone writes it before ``flush()`` returns.
    private var outputFailure: Errno?

    init(outputWasClosed: Bool) {
        self.outputWasClosed = outputWasClosed
    }

    /// Takes the next place in the order.
    func reserve() -> Int {
        lock.withLock {
            defer { nextPlace += 1 }
            return nextPlace
        }
    }

    /// Fills `place` with a `-v` line (without its newline) and an error (without `dcopy: ` and its
    /// newline), either or both nil. Each place is filled exactly once.
    func fill(_ place: Int, line: String?, error: String?) {
        var messages: [Message] = []
        if let line { messages.append(.output(line + "\n")) }
        if let error { messages.append(.error("dcopy: \(error)\n")) }
        let startPrinter = lock.withLock { () -> Bool in
            precondition(place >= head && waiting[place] == nil, "dcopy: message place \(place) filled twice")
            waiting[place] = messages
            while let ready = waiting.removeValue(forKey: head) {
                outbox += ready
                head += 1
            }
            guard !printing, !outbox.isEmpty else { return false }
            printing = true
            return true
        }
        if startPrinter { printer.async { [self] in print() } }
    }

    /// Takes a place and fills it.
    func post(line: String? = nil, error: String? = nil) {
        fill(reserve(), line: line, error: error)
    }

    /// Waits until every message of the places filled so far is printed; returns the first `-v` line's
    /// write error.
    func flush() -> Errno? {
        printer.sync { outputFailure }
    }

    /// Prints the outbox until it is empty; on the printer queue.
    private func print() {
        while true {
            let batch = lock.withLock { () -> [Message] in
                defer { outbox.removeAll() }
                if outbox.isEmpty { printing = false }
                return outbox
            }
            if batch.isEmpty { return }
            for message in batch {
                switch message {
                case .output(let line):
                    let failure = outputWasClosed ? .badFileDescriptor : printOutput(line)
                    if let failure, outputFailure == nil { outputFailure = failure }
                case .error(let text):
                    printError(text)
                }
            }
        }
    }
}
