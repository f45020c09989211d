// Counts Swift heap allocations made on one thread, to show that walking a buffer's regions allocates nothing.
//
// Every Swift heap object — class instances, closure contexts, array and string storage, boxes — is allocated by
// the runtime's `swift_allocObject`, which calls through the hook `_swift_allocObject` once
// `_swift_enableSwizzlingOfAllocationAndRefCountingFunctions_forInstrumentsOnly` is set (the runtime exports both
// for instrumentation). The hook counts the calls made on the watched thread and forwards to the original.
// Raw `malloc` calls made by C code (libdispatch's own) are not seen; defining `malloc` in a Swift executable is
// reserved to the runtime and would not be exported for interposition without extra linker flags.

import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

private typealias AllocateObject = @convention(c) (UnsafeRawPointer?, Int, Int) -> UnsafeMutableRawPointer?

/// The runtime's allocator before the hook was installed; written once, before the hook can run.
nonisolated(unsafe) private var originalAllocateObject: AllocateObject?
/// The thread whose allocations are counted; written only while no counted code runs.
nonisolated(unsafe) private var watchedThread: pthread_t = 0
private let swiftAllocations = Atomic<Int>(0)

private let countingAllocateObject: AllocateObject = { metadata, size, alignmentMask in
    if pthread_equal(pthread_self(), watchedThread) != 0 {
        swiftAllocations.add(1, ordering: .relaxed)
    }
    return originalAllocateObject!(metadata, size, alignmentMask)
}

/// Installs the hook, once. Returns `false` if this runtime does not export it.
private let hookInstalled: Bool = {
    let defaultHandle = UnsafeMutableRawPointer(bitPattern: 0)  // RTLD_DEFAULT
    guard let slot = dlsym(defaultHandle, "_swift_allocObject"),
        let enable = dlsym(
            defaultHandle,
            "_swift_enableSwizzlingOfAllocationAndRefCountingFunctions_forInstrumentsOnly"
        )
    else { return false }
    let hook = slot.assumingMemoryBound(to: AllocateObject?.self)
    originalAllocateObject = hook.pointee
    hook.pointee = countingAllocateObject
    enable.assumingMemoryBound(to: Bool.self).pointee = true
    return true
}()

/// The number of Swift heap allocations `body` makes on the calling thread, or `nil` if they cannot be counted.
func swiftAllocations(during body: () -> Void) -> Int? {
    guard hookInstalled else { return nil }
    watchedThread = pthread_self()
    let before = swiftAllocations.load(ordering: .relaxed)
    body()
    let after = swiftAllocations.load(ordering: .relaxed)
    watchedThread = 0
    return after - before
}
