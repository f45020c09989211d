#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A value and the `pthread_mutex_t` that guards it, in one heap allocation.
///
/// A `ManagedBuffer` keeps the mutex at a fixed address inside the object (a mutex must never move), so a
/// lock costs one allocation instead of two (object and mutex), and a ``Locked`` value one instead of
/// three: measured at 105 `malloc` calls per small file copied by dcopy before this, locks made ten of them.
@usableFromInline
final class LockStorage<Value>: ManagedBuffer<Value, pthread_mutex_t> {
    @usableFromInline
    static func make(_ value: Value) -> LockStorage<Value> {
        let buffer = create(minimumCapacity: 1) { _ in value }
        // `create` on a subclass makes an instance of that subclass.
        let storage = unsafeDowncast(buffer, to: LockStorage<Value>.self)
        storage.withUnsafeMutablePointerToElements { mutex in
            mutex.initialize(to: pthread_mutex_t())
            let rc = pthread_mutex_init(mutex, nil)
            precondition(rc == 0, "pthread_mutex_init failed: \(rc)")
        }
        return storage
    }

    deinit {
        // The header (the value) is destroyed by ManagedBuffer; the element is ours.
        withUnsafeMutablePointerToElements { mutex in
            pthread_mutex_destroy(mutex)
            _ = mutex.deinitialize(count: 1)
        }
    }

    @inlinable
    func lock() {
        let rc = withUnsafeMutablePointerToElements { pthread_mutex_lock($0) }
        precondition(rc == 0, "pthread_mutex_lock failed: \(rc)")
    }

    @inlinable
    func unlock() {
        let rc = withUnsafeMutablePointerToElements { pthread_mutex_unlock($0) }
        precondition(rc == 0, "pthread_mutex_unlock failed: \(rc)")
    }
}

/// A mutual-exclusion lock over `pthread_mutex_t`.
///
/// The package uses this one lock type everywhere instead of the standard library's `Mutex`, because
/// ThreadSanitizer on Linux does not see `Mutex`'s futex and reports false races on correct code, which
/// would make `swift test --sanitize=thread` useless. A `Lock` is a reference: copies share one mutex.
package struct Lock: @unchecked Sendable {
    @usableFromInline let storage: LockStorage<Void>

    /// Creates an unlocked lock.
    package init() {
        storage = .make(())
    }

    /// Acquires the lock, blocking the calling thread until it is free.
    @inlinable
    package func lock() { storage.lock() }

    /// Releases the lock; the calling thread must hold it.
    @inlinable
    package func unlock() { storage.unlock() }

    /// Waits on `condition`, which releases the lock while waiting; the calling thread must hold it.
    package func wait(on condition: UnsafeMutablePointer<pthread_cond_t>) {
        let rc = storage.withUnsafeMutablePointerToElements { pthread_cond_wait(condition, $0) }
        precondition(rc == 0, "pthread_cond_wait failed: \(rc)")
    }

    /// Waits on `condition` until it is signalled or `deadline` (an absolute time on the condition's clock)
    /// passes, which releases the lock while waiting; the calling thread must hold it.
    package func wait(on condition: UnsafeMutablePointer<pthread_cond_t>, until deadline: timespec) {
        var deadline = deadline
        let rc = storage.withUnsafeMutablePointerToElements { pthread_cond_timedwait(condition, $0, &deadline) }
        precondition(rc == 0 || rc == ETIMEDOUT, "pthread_cond_timedwait failed: \(rc)")
    }

    /// Runs `body` with the lock held and returns its result.
    @inlinable
    package func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        storage.lock()
        defer { storage.unlock() }
        return try body()
    }
}

/// A value that is only read or changed with its lock held. A reference: copies share the value.
package struct Locked<Value>: @unchecked Sendable {
    @usableFromInline let storage: LockStorage<Value>

    /// Wraps `value`.
    package init(_ value: Value) {
        storage = .make(value)
    }

    /// Runs `body` with the lock held, giving it the value to read or change, and returns its result.
    @inlinable
    package func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        storage.lock()
        defer { storage.unlock() }
        return try storage.withUnsafeMutablePointerToHeader { value throws(E) -> T in try body(&value.pointee) }
    }
}
