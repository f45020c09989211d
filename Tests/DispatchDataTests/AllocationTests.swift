import DispatchData
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// Counts Swift heap allocations on one thread through the runtime's instrumentation hook `_swift_allocObject`
// (enabled by `_swift_enableSwizzlingOfAllocationAndRefCountingFunctions_forInstrumentsOnly`). Every Swift heap
// object — class instances, closure contexts, array storage, boxes — is allocated through it. The hook is only
// installed inside an exit test's child process, so that it never runs concurrently with other tests.

private typealias AllocateObject = @convention(c) (UnsafeRawPointer?, Int, Int) -> UnsafeMutableRawPointer?

/// Written once, before the hook is installed.
nonisolated(unsafe) private var originalAllocateObject: AllocateObject?
private let watchedThread = Atomic<UInt>(0)
private let watchedAllocations = Atomic<Int>(0)

private func countingAllocateObject(
    _ metadata: UnsafeRawPointer?,
    _ size: Int,
    _ alignmentMask: Int
) -> UnsafeMutableRawPointer? {
    if watchedThread.load(ordering: .relaxed) == UInt(pthread_self()) {
        watchedAllocations.add(1, ordering: .relaxed)
    }
    return originalAllocateObject.unsafelyUnwrapped(metadata, size, alignmentMask)
}

/// Installs the hook; returns `false` if this runtime does not export it.
private func installAllocationHook() -> Bool {
    let defaultHandle = UnsafeMutableRawPointer(bitPattern: 0)  // RTLD_DEFAULT
    guard let slot = dlsym(defaultHandle, "_swift_allocObject"),
        let enable = dlsym(
            defaultHandle,
            "_swift_enableSwizzlingOfAllocationAndRefCountingFunctions_forInstrumentsOnly"
        )
    else { return false }
    // Touch every global the hook reads before it can run, so that none is lazily initialized inside it.
    _ = watchedThread.load(ordering: .relaxed)
    _ = watchedAllocations.load(ordering: .relaxed)
    let hook = slot.assumingMemoryBound(to: AllocateObject?.self)
    originalAllocateObject = hook.pointee
    hook.pointee = { countingAllocateObject($0, $1, $2) }
    enable.assumingMemoryBound(to: Bool.self).pointee = true
    return true
}

/// Swift heap allocations made by `body` on the calling thread.
private func allocations(_ body: () -> Void) -> Int {
    watchedThread.store(UInt(pthread_self()), ordering: .relaxed)
    let before = watchedAllocations.load(ordering: .relaxed)
    body()
    let after = watchedAllocations.load(ordering: .relaxed)
    watchedThread.store(0, ordering: .relaxed)
    return after - before
}

/// Runs the walks and exits with 0 when none allocates, 2 when the counter is blind, 1 otherwise.
private func checkWalksAllocateNothing() -> Never {
    var buffer = DispatchDataBuffer()
    for index in 0..<1000 {
        buffer.append(DispatchDataBuffer([UInt8](repeating: UInt8(truncatingIfNeeded: index), count: 16)))
    }
    guard installAllocationHook() else { exit(0) }  // Nothing to count with: not a failure of the buffer.
    let control = allocations { _ = [Int](repeating: 1, count: 10).count }
    guard control >= 1 else { exit(2) }
    var total = 0
    let walks = [
        allocations {
            for region in buffer.regions { total &+= region.count &+ Int(region.bytes[0]) }
        },
        allocations {
            buffer.enumerateBytes { bytes, offset, _ in total &+= bytes.count &+ offset }
        },
        allocations {
            var visited = 0
            buffer.enumerateBytes { _, _, stop in
                visited += 1
                stop = visited == 10
            }
        },
        allocations {
            for byte in buffer { total &+= Int(byte) }
        },
        allocations {
            total &+= Int(buffer[12_345]) &+ buffer.count &+ buffer.regions[500].offset
        },
    ]
    exit(walks.allSatisfy { $0 == 0 } && total != 0 ? 0 : 1)
}

@Suite struct AllocationTests {
    @Test(.timeLimit(.minutes(1))) func walkingRegionsAndBytesAllocatesNothing() async {
        // The requirement: a region walk allocates nothing (nor do byte iteration and index lookup).
        await #expect(processExitsWith: .success) {
            checkWalksAllocateNothing()
        }
    }
}
