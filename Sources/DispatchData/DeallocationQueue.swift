/// Something that can run a closure later, used to run a buffer's custom deallocator.
///
/// `DispatchData` depends on no other module, so it cannot name the package's `WorkQueue`; it accepts any type
/// that can schedule work instead. `WorkQueue` (module `DispatchQueues`) is meant to conform, and
/// `DispatchDataBridge` makes the toolchain's `DispatchQueue` conform, so `.custom(queue) { ... }` reads the same as
/// with libdispatch. The requirement has the name and label of `DispatchQueue.async(execute:)`, so a queue type that
/// mirrors the toolchain's API conforms with a one-line forwarding method.
///
/// Conforming types must run every closure they are given exactly once, at some later time, on whatever thread
/// or queue they stand for. They must not run it synchronously inside ``async(execute:)`` when that could
/// deadlock: the call happens on the thread that dropped the last reference to a buffer, which may hold locks.
public protocol DeallocationQueue: Sendable {
    /// Schedules `work` to run once, later.
    ///
    /// - Parameter work: The closure to run. It is called exactly once.
    func async(execute work: @escaping @Sendable () -> Void)
}

extension DispatchDataBuffer {
    /// What to do with memory that a buffer was created over without copying, once nothing uses it any more.
    ///
    /// The deallocator runs exactly once, after the last reference to the memory is gone. References include
    /// every copy of the buffer, every buffer derived from it by concatenation (`append(_:)`,
    /// `+`), ``DispatchDataBuffer/subdata(in:)``, ``DispatchDataBuffer/region(location:)`` and
    /// ``DispatchDataBuffer/regions``, and buffers held by I/O operations still in flight. A buffer derived from
    /// only part of the memory keeps the whole allocation alive.
    ///
    /// This mirrors the toolchain's `DispatchData.Deallocator`; unlike the toolchain on Linux, `.free` and `.unmap`
    /// work (SEMANTICS.md A2, A4).
    public enum Deallocator: Sendable {
        /// Calls `free` on the start address, synchronously on the thread that drops the last reference.
        /// The memory must come from `malloc`, `calloc`, `realloc`, `posix_memalign` or `aligned_alloc`.
        case free
        /// Calls `munmap` on the start address with the byte count given at creation, synchronously on the thread
        /// that drops the last reference. The memory must come from `mmap`.
        case unmap
        /// Does nothing: the caller keeps ownership and must keep the memory valid and unchanged for as long as any
        /// buffer uses it (which is hard to know: prefer `.custom`).
        case none
        /// Runs a closure once.
        ///
        /// With a queue, the closure is handed to its ``DeallocationQueue/async(execute:)`` and runs there. Without
        /// one (`nil`), it runs synchronously on the thread that drops the last reference, so it should be short
        /// and must not take locks that a releasing thread might hold. (libdispatch would use a global queue here;
        /// this module has none to use.) The closure receives nothing: capture what it needs.
        case custom((any DeallocationQueue)?, @Sendable () -> Void)
    }
}
