import DispatchQueues
import SystemPackage
import URing

#if canImport(Glibc)
import Glibc
#endif

/// dcopy's messages, `-v` lines on standard output and errors on standard error, in the order cp would
/// print them: the order the walk reached their files, although up to ``Limits/files`` copies overlap.
///
/// A file's copy takes a place when the walk reaches it (``reserve()``), may put its `-v` line there
/// when it gets as far as cp prints one (``announce(_:line:)``), and fills it once, when it ends
/// (``fill(_:line:error:)``), with its error if it failed; the walker's own messages take a place and fill
/// it at once (``post(line:error:)``). A place's messages are printed once every place before it is
/// filled (a `-v` line of the first unfilled place at once, as cp prints it before copying), on a serial
/// queue of their own, so a copy that ends on the ring thread never waits for a terminal or a pipe;
/// ``flush()`` waits for them all.
///
/// The walk stays at most ``ahead`` places ahead of what is printed: a slow first file, or a standard
/// output nobody reads (`dcopy -rv tree dst | less`), makes it wait, as cp would wait, instead of holding
/// the messages of a whole tree in memory.
final class Messages: @unchecked Sendable {
    private enum Message {
        case output(String)
        case error(String)
    }

    /// A place's messages not yet handed to the printer, and whether its copy has ended.
    private struct Place {
        var messages: [Message] = []
        var filled = false
    }

    /// Places the walk may take beyond the last one printed. Each holds at most a `-v` line and an error,
    /// a few hundred bytes with common paths.
    static let ahead = 2048

    private let lock = Lock()
    /// The place the next ``reserve()`` takes.
    private var nextPlace = 0
    /// The first place not yet handed to the printer whole.
    private var head = 0
    /// Places announced or filled while one before them was not filled.
    private var waiting: [Int: Place] = [:]
    /// Messages in order, for the printer.
    private var outbox: [Message] = []
    private var printing = false
    /// Every place before this one has its messages written (or had none).
    private var printed = 0
    /// The walker waits in ``reserve()`` for `room`.
    private var walkerWaits = false
    private let room = WorkSemaphore(value: 0)
    private let printer = WorkQueue(label: "dcopy messages")
    /// Written to standard error before each batch: the progress bar's line is cleared for the messages,
    /// and the bar drawn again below them at its next tick.
    private let beforeMessages: String?
    /// Standard output was closed at start (it is /dev/null now): a `-v` line fails as it would for cp.
    private let outputWasClosed: Bool
    /// The first `-v` line's write error; the printer alone writes it before ``flush()`` returns.
    private var outputFailure: Errno?

    /// `clearingProgress`: a progress bar is drawn on standard error, to be cleared before messages.
    init(outputWasClosed: Bool, clearingProgress: Bool = false) {
        self.outputWasClosed = outputWasClosed
        beforeMessages = clearingProgress ? "\r\u{1B}[K" : nil
    }

    /// Takes the next place in the order; on the walker's thread alone, which it may hold until the printer
    /// has caught up to within ``ahead`` places. The places before it are filled by copies that run on
    /// without the walker, so the wait ends.
    func reserve() -> Int {
        let mustWait = lock.withLock { () -> Bool in
            walkerWaits = nextPlace - printed >= Self.ahead
            return walkerWaits
        }
        if mustWait { room.wait() }
        return lock.withLock {
            defer { nextPlace += 1 }
            return nextPlace
        }
    }

    /// Puts a copy's `-v` line (without its newline) in `place` before the copy ends: it is printed as soon
    /// as every place before it is filled. At most once per place, before it is filled.
    func announce(_ place: Int, line: String) {
        update(place) { entry in
            precondition(!entry.filled, "dcopy: message place \(place) announced after it was filled")
            entry.messages.append(.output(line + "\n"))
        }
    }

    /// Fills `place` with a `-v` line (without its newline) and an error (without `dcopy: ` and its
    /// newline), either or both nil. Each place is filled exactly once.
    func fill(_ place: Int, line: String?, error: String?) {
        update(place) { entry in
            precondition(!entry.filled, "dcopy: message place \(place) filled twice")
            if let line { entry.messages.append(.output(line + "\n")) }
            if let error { entry.messages.append(.error("dcopy: \(error)\n")) }
            entry.filled = true
        }
    }

    /// Changes `place` and hands the printer whatever is now in order.
    private func update(_ place: Int, _ change: (inout Place) -> Void) {
        let (startPrinter, wakeWalker) = lock.withLock { () -> (Bool, Bool) in
            precondition(place >= head && place < nextPlace, "dcopy: message place \(place) is not open")
            change(&waiting[place, default: Place()])
            while var entry = waiting[head] {
                outbox += entry.messages
                if !entry.filled {
                    entry.messages = []
                    waiting[head] = entry
                    break
                }
                waiting[head] = nil
                head += 1
            }
            if printing { return (false, false) }
            if !outbox.isEmpty {
                printing = true
                return (true, false)
            }
            // Nothing to print (no -v, no error): the places are done as they are handed over.
            printed = head
            return (false, walkerMayGoOn())
        }
        if startPrinter { printer.async { [self] in print() } }
        if wakeWalker { room.signal() }
    }

    /// Whether the walker waits and may go on now; under the lock. Half way down before it goes on, so
    /// that it does not wake for every place.
    private func walkerMayGoOn() -> Bool {
        guard walkerWaits && nextPlace - printed <= Self.ahead / 2 else { return false }
        walkerWaits = false
        return true
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
        // Where the batch being written ends: every place before it is printed once it is written.
        var batchEnd: Int?
        while true {
            let (batch, wakeWalker) = lock.withLock { () -> ([Message], Bool) in
                defer { outbox.removeAll() }
                if let batchEnd { printed = batchEnd }
                batchEnd = head
                if outbox.isEmpty {
                    printing = false
                    printed = head
                }
                return (outbox, walkerMayGoOn())
            }
            if wakeWalker { room.signal() }
            if batch.isEmpty { return }
            if let beforeMessages { printError(beforeMessages) }
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
