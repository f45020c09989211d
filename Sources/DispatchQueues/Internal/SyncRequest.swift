import Synchronization

/// A `sync` call that could not run inline: its caller is blocked until a worker has run the body.
///
/// The body stays on the caller's stack; the request only points at it, so nothing retains the caller's
/// non-escaping closure and no allocation beyond this object is made.
final class SyncRequest: @unchecked Sendable {
    private let body: UnsafeMutableRawPointer
    let callerFrame: UnsafeMutablePointer<Frame>?
    let barrier: Bool
    private let parker: Parker
    private let done = Atomic<Bool>(false)

    init(
        body: UnsafeMutablePointer<() -> Void>,
        callerFrame: UnsafeMutablePointer<Frame>?,
        barrier: Bool,
        parker: Parker
    ) {
        self.body = UnsafeMutableRawPointer(body)
        self.callerFrame = callerFrame
        self.barrier = barrier
        self.parker = parker
    }

    /// Runs the caller's body on the current thread.
    func invoke() {
        invokeBorrowed(body)
    }

    /// Releases the caller. After this the caller's stack, and the body, may be gone.
    func finish() {
        let parker = self.parker
        done.store(true, ordering: .releasing)
        parker.unpark()
    }

    /// Blocks the caller until ``finish()``.
    func waitUntilDone() {
        while !done.load(ordering: .acquiring) { parker.park() }
    }
}

/// Calls the closure stored at `pointer` without taking ownership of it. Kept out of line so that any
/// retain of the closure's context is balanced before the caller signals completion: the caller's
/// `withoutActuallyEscaping` checks that nothing kept the closure.
@inline(never)
func invokeBorrowed(_ pointer: UnsafeMutableRawPointer) {
    pointer.assumingMemoryBound(to: (() -> Void).self).pointee()
}
