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
/// (``fill(_:line:errors:)``), with its errors if it failed; the walker's own messages take a place and fill
/// it at once (``post(line:error:)``). A place's messages are printed once every place before it is
/// filled (a `-v` line of the first unfilled place at once, as cp prints it before copying), on a serial
/// queue of their own, so a copy that ends on the ring thread never waits for a terminal or a pipe;
/// ``flush()`` waits for them all. The progress bar is drawn on the same queue (``onPrinter(_:)``), so
/// never in the middle of a batch of messages.
///
/// At most ``ahead`` messages wait to be written: behind a copy that cannot end (a FIFO without a writer)
/// or a standard output nobody reads (`dcopy -rv tree dst | less`), the walk waits in ``reserve()``, as
/// cp would wait, instead of holding a whole tree's lines in memory. Places without messages (no `-v`, no
/// error) cost a bit each and never hold the walk back: the small files behind a large one go on copying.
final class Messages: @unchecked Sendable {
    private enum Message {
        case output(String)
        case error(String)
    }

    /// Messages written or waiting beyond which the walker waits: each is a `-v` line or an error, a few
    /// hundred bytes with common paths.
    static let ahead = 2048

    private let lock = Lock()
    /// The place the next ``reserve()`` takes.
    private var nextPlace = 0
    /// The first place not yet handed to the printer whole.
    private var head = 0
    /// Messages of places at or past `head`, not yet handed to the printer.
    private var waiting: [Int: [Message]] = [:]
    /// Which places at or past `head` are filled.
    private var filled = PlaceSet()
    /// Messages in order, for the printer.
    private var outbox: [Message] = []
    private var printing = false
    /// Messages made and not yet written.
    private var unwritten = 0
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

    /// Takes the next place in the order; on the walker's thread alone, which waits while ``ahead``
    /// messages are unwritten. Each of them is written once the places before it are filled, by copies
    /// that run on without the walker, so the wait ends.
    func reserve() -> Int {
        let mustWait = lock.withLock { () -> Bool in
            walkerWaits = unwritten >= Self.ahead
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
        update(place, [.output(line + "\n")], fills: false)
    }

    /// Fills `place` with a `-v` line (without its newline) and errors (without `dcopy: ` and newline),
    /// any of them absent. Each place is filled exactly once.
    func fill(_ place: Int, line: String?, errors: [String]) {
        var messages: [Message] = []
        if let line { messages.append(.output(line + "\n")) }
        messages += errors.map { .error("dcopy: \($0)\n") }
        update(place, messages, fills: true)
    }

    /// Adds `messages` to `place`, and fills it if `fills`; hands the printer whatever is now in order.
    private func update(_ place: Int, _ messages: [Message], fills: Bool) {
        let startPrinter = lock.withLock { () -> Bool in
            precondition(place >= head && place < nextPlace, "dcopy: message place \(place) is not open")
            precondition(!filled.contains(place), "dcopy: message place \(place) filled twice")
            unwritten += messages.count
            if !messages.isEmpty { waiting[place, default: []] += messages }
            if fills { filled.insert(place) }
            while filled.contains(head) {
                if let ready = waiting.removeValue(forKey: head) { outbox += ready }
                head += 1
                filled.dropBelow(head)
            }
            // The first unfilled place's `-v` line goes out before its copy ends.
            if let early = waiting.removeValue(forKey: head) { outbox += early }
            guard !printing, !outbox.isEmpty else { return false }
            printing = true
            return true
        }
        if startPrinter { printer.async { [self] in print() } }
    }

    /// Takes a place and fills it.
    func post(line: String? = nil, error: String? = nil) {
        fill(reserve(), line: line, errors: error.map { [$0] } ?? [])
    }

    /// Runs `body` on the printer's queue, between batches of messages.
    func onPrinter(_ body: @escaping @Sendable () -> Void) {
        printer.async(execute: body)
    }

    /// Waits until every message of the places filled so far is printed, then runs `last` on the printer's
    /// queue; returns the first `-v` line's write error.
    func flush(then last: () -> Void = {}) -> Errno? {
        printer.sync {
            last()
            return outputFailure
        }
    }

    /// Prints the outbox until it is empty; on the printer queue.
    private func print() {
        var written = 0
        while true {
            let (batch, wakeWalker) = lock.withLock { () -> ([Message], Bool) in
                defer { outbox.removeAll() }
                unwritten -= written
                if outbox.isEmpty { printing = false }
                // Half way down before the walker goes on, so that it does not wake for every message.
                let wake = walkerWaits && unwritten <= Self.ahead / 2
                if wake { walkerWaits = false }
                return (outbox, wake)
            }
            if wakeWalker { room.signal() }
            if batch.isEmpty { return }
            written = batch.count
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

/// A set of places at or past a moving start, one bit each: the filled places ahead of the first unfilled
/// one, which a slow first file can make millions.
struct PlaceSet {
    private var words: [UInt64] = []
    /// The place of bit 0 of `words[first]`; a multiple of 64.
    private var base = 0
    private var first = 0

    func contains(_ place: Int) -> Bool {
        guard place >= base else { return false }
        let word = first + (place - base) >> 6
        return word < words.count && words[word] & (1 << UInt64((place - base) & 63)) != 0
    }

    mutating func insert(_ place: Int) {
        precondition(place >= base, "PlaceSet: place \(place) below its start")
        let word = first + (place - base) >> 6
        if word >= words.count { words += repeatElement(0, count: word - words.count + 1) }
        words[word] |= 1 << UInt64((place - base) & 63)
    }

    /// Forgets the places below `start` (none of them is asked about again).
    mutating func dropBelow(_ start: Int) {
        while start - base >= 64 && first < words.count {
            first += 1
            base += 64
        }
        // Compacted once half the array is dropped words: amortised constant time per place.
        if first > 0 && first * 2 >= words.count {
            words.removeFirst(first)
            first = 0
        }
    }
}
