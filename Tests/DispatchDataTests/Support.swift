import Dispatch
import DispatchData
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Counts how often a deallocator ran, and lets a test wait for it without sleeping.
final class DeallocationCounter: Sendable {
    private let runs = Atomic<Int>(0)
    private let ran = DispatchSemaphore(value: 0)

    var count: Int { runs.load(ordering: .acquiring) }

    func record() {
        runs.add(1, ordering: .releasing)
        ran.signal()
    }

    /// Waits until the deallocator has run once more, for at most ten seconds.
    func waitForRun() -> Bool {
        ran.wait(timeout: .now() + .seconds(10)) == .success
    }
}

/// A toolchain queue as a ``DeallocationQueue``, that can tell whether code runs on it.
struct TestQueue: DeallocationQueue {
    let queue: DispatchQueue
    private let key = DispatchSpecificKey<Int>()

    init(label: String) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: key, value: 1)
    }

    var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == 1 }

    func async(execute work: @escaping @Sendable () -> Void) {
        queue.async(execute: work)
    }
}

/// `malloc`ed memory filled with `bytes`, to hand to a buffer with `.free`.
func mallocCopy(_ bytes: [UInt8]) -> UnsafeRawBufferPointer {
    let memory = malloc(Swift.max(bytes.count, 1))!
    bytes.withUnsafeBytes { memory.copyMemory(from: $0.baseAddress!, byteCount: bytes.count) }
    return UnsafeRawBufferPointer(start: memory, count: bytes.count)
}

/// Whether any page of `[address, address + length)` is mapped in this process (mincore fails with ENOMEM for
/// unmapped ranges).
func isMapped(_ address: Int, _ length: Int) -> Bool {
    let page = Int(sysconf(Int32(_SC_PAGESIZE)))
    let start = address & ~(page - 1)
    let pages = (address + length - start + page - 1) / page
    var vector = [UInt8](repeating: 0, count: pages)
    return mincore(UnsafeMutableRawPointer(bitPattern: start), address + length - start, &vector) == 0
}

/// A buffer with the given region sizes, filled with `A`, `B`, `C`, ...
func lettered(_ sizes: [Int]) -> DispatchDataBuffer {
    var result = DispatchDataBuffer()
    for (index, size) in sizes.enumerated() {
        result.append(DispatchDataBuffer([UInt8](repeating: UInt8(ascii: "A") + UInt8(index), count: size)))
    }
    return result
}

extension DispatchDataBuffer {
    /// The region sizes, in order.
    var regionSizes: [Int] { regions.map(\.count) }

    /// The bytes of each region, as strings.
    var regionStrings: [String] { regions.map { String(decoding: $0.bytes, as: UTF8.self) } }
}

/// Checks that an exit test's standard error holds `fragment`: a trap's message names the misuse (A17).
func expectMessage(_ result: ExitTest.Result?, _ fragment: String, sourceLocation: SourceLocation = #_sourceLocation) {
    let text = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(text.contains(fragment), "standard error was: \(text.prefix(1_000))", sourceLocation: sourceLocation)
}
