import DispatchQueues
import URing

#if canImport(Glibc)
import Glibc
#endif

/// The `--progress` bar: one line on standard error, redrawn every ``interval``.
///
/// It counts bytes as their writes complete (``add(_:)``), and a timer on a global queue redraws it.
/// The channels' own interval (`IOChannel.setInterval`) is not what paces it: dcopy's reads are
/// chunk-sized operations that end long before any useful interval, so an interval on them would never
/// fire; one timer for the whole copy is also one line for many files.
final class ProgressMeter: @unchecked Sendable {
    /// How often the bar is redrawn.
    static let interval = Duration.milliseconds(200)

    /// Bytes to copy in all, found by a walk before the copy starts.
    var total: Int64 = 0
    private let state = Locked<(copied: Int64, running: Bool)>((0, false))
    private var began = ContinuousClock.now
    /// Runs a drawing where it cannot fall between two messages (dcopy's message printer).
    private let drawing: @Sendable (@escaping @Sendable () -> Void) -> Void

    /// `drawing` runs each redraw (and ``finish()`` must be called there too).
    init(drawing: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) {
        self.drawing = drawing
    }

    func start() {
        began = .now
        state.withLock { $0.running = true }
        schedule()
    }

    func add(_ count: Int) {
        state.withLock { $0.copied += Int64(count) }
    }

    /// Draws the final state and ends the line; nothing when the bar was never started (a command line
    /// refused before copying). Where the redraws run, so that none comes after it.
    func finish() {
        let wasRunning = state.withLock { state in
            defer { state.running = false }
            return state.running
        }
        if wasRunning { draw(final: true) }
    }

    private func schedule() {
        WorkQueue.global().asyncAfter(deadline: .now + Self.interval) { [self] in
            drawing { [self] in
                guard state.withLock({ $0.running }) else { return }
                draw(final: false)
                schedule()
            }
        }
    }

    private func draw(final: Bool) {
        let copied = state.withLock { $0.copied }
        let fraction = total > 0 ? min(Double(copied) / Double(total), 1) : 1
        let width = 30
        let filled = Int(fraction * Double(width))
        let elapsed = ContinuousClock.now - began
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
        let rate = seconds > 0 ? Double(copied) / seconds : 0
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let percent = String(Int(fraction * 100))
        let amounts = "\(Self.size(copied)) / \(Self.size(total)) \(Self.size(Int64(rate)))/s"
        // Carriage return to redraw in place; erase to the end of the line in case it got shorter.
        let line = "\r[\(bar)] \(percent)% \(amounts)\u{1B}[K"
        printError(final ? line + "\n" : line)
    }

    /// A size with one decimal in binary units (`12.3 MiB`).
    static func size(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10) \(units[unit])"
    }
}
