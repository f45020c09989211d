import Dispatch
import DispatchData
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// When and where deallocators run (A2–A5): exactly once, after the last reference anywhere.
@Suite(.timeLimit(.minutes(1))) struct DeallocatorTests {
    @Test func freeReleasesTheMemoryWhenTheLastReferenceGoes() {
        // A2 → ours: `.free` works (the toolchain's crashes on Linux) and frees on the releasing thread.
        // 64 MiB is above glibc's largest dynamic mmap threshold, so malloc maps it and free unmaps it.
        let size = 64 << 20
        let memory = malloc(size)!
        let address = Int(bitPattern: memory)
        var buffer: DispatchDataBuffer? = DispatchDataBuffer(
            bytesNoCopy: UnsafeRawBufferPointer(start: memory, count: size),
            deallocator: .free
        )
        var derived: DispatchDataBuffer? = buffer!.subdata(in: 10..<20) + DispatchDataBuffer("x")
        buffer = nil
        #expect(isMapped(address, size))
        #expect(derived!.count == 11)
        derived = nil
        #expect(!isMapped(address, size))
    }

    @Test func unmapUnmapsARealMappedFile() throws {
        // A4 → ours: `.unmap` calls munmap with the given length on the releasing thread.
        var template = Array("/tmp/dispatch-data-unmap-XXXXXX".utf8CString)
        let fd = mkstemp(&template)
        try #require(fd >= 0)
        defer {
            close(fd)
            unlink(template)
        }
        let contents = Array("mapped file contents\n".utf8)
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        #expect(write(fd, contents, contents.count) == contents.count)
        let mapping = mmap(nil, page, PROT_READ, MAP_SHARED, fd, 0)
        try #require(mapping != MAP_FAILED)
        let address = Int(bitPattern: mapping)
        var file: DispatchDataBuffer? = DispatchDataBuffer(
            bytesNoCopy: UnsafeRawBufferPointer(start: mapping, count: page),
            deallocator: .unmap
        )
        var line: DispatchDataBuffer? = file!.subdata(in: 0..<contents.count)
        #expect(Array(line!) == contents)
        file = nil
        #expect(isMapped(address, page))
        #expect(String(decoding: line!.subdata(in: 0..<6), as: UTF8.self) == "mapped")
        line = nil
        #expect(!isMapped(address, page))
    }

    @Test func customRunsOnceAfterEveryDerivedBufferIsGone() {
        // A3: concat, subrange, map results, regions and held owners all keep the memory alive.
        let counter = DeallocationCounter()
        var original: DispatchDataBuffer? = DispatchDataBuffer(
            bytesNoCopy: mallocCopy(Array("0123456789".utf8)),
            deallocator: .custom(nil) { counter.record() }
        )
        var concat: DispatchDataBuffer? = DispatchDataBuffer("head") + original! + DispatchDataBuffer("tail")
        var sub: DispatchDataBuffer? = original!.subdata(in: 2..<5)
        var region: DispatchDataBuffer? = concat!.region(location: 6).data
        var owner: AnyObject? = sub!.regions[0].owner
        var regionView: DispatchDataBuffer.Region? = original!.regions[0]
        original = nil
        #expect(counter.count == 0)
        concat = nil
        #expect(counter.count == 0)
        sub = nil
        #expect(counter.count == 0)
        #expect(region! == DispatchDataBuffer("0123456789"))
        region = nil
        #expect(counter.count == 0)
        regionView = nil
        #expect(counter.count == 0)
        _ = owner
        owner = nil
        // Without a queue the deallocator runs synchronously on the releasing thread.
        #expect(counter.count == 1)
        _ = (original, concat, sub, region, regionView)
    }

    @Test func customRunsOnTheGivenQueue() {
        // A3: the deallocator is handed to the given queue, once.
        let counter = DeallocationCounter()
        let queue = TestQueue(label: "A3 deallocation queue")
        let ranOnQueue = DeallocationCounter()
        var buffer: DispatchDataBuffer? = DispatchDataBuffer(
            bytesNoCopy: mallocCopy([1, 2, 3]),
            deallocator: .custom(queue) {
                if queue.isCurrent { ranOnQueue.record() }
                counter.record()
            }
        )
        var concat: DispatchDataBuffer? = buffer! + buffer!
        buffer = nil
        #expect(concat!.count == 6)
        concat = nil
        #expect(counter.waitForRun())
        #expect(ranOnQueue.count == 1)
        // Nothing more arrives: the queue is serial, so a barrier-like sync drains anything else queued.
        queue.queue.sync {}
        #expect(counter.count == 1)
    }

    @Test func emptyNoCopyBufferRunsItsDeallocatorAtOnce() {
        // A5: size 0 gives the empty buffer and the deallocator runs at once (as libdispatch's C API does).
        let counter = DeallocationCounter()
        let empty = DispatchDataBuffer(
            bytesNoCopy: UnsafeRawBufferPointer(start: nil, count: 0),
            deallocator: .custom(nil) { counter.record() }
        )
        #expect(empty.isIdentical(to: .empty))
        #expect(counter.count == 1)
        let queue = TestQueue(label: "A5 queue")
        let queued = DeallocationCounter()
        let memory = malloc(1)!
        _ = DispatchDataBuffer(
            bytesNoCopy: UnsafeRawBufferPointer(start: memory, count: 0),
            deallocator: .custom(queue) { queued.record() }
        )
        #expect(queued.waitForRun())
        free(memory)
        // `.free` of a zero-length malloc block frees it at once (nothing to observe but no leak or crash).
        _ = DispatchDataBuffer(bytesNoCopy: UnsafeRawBufferPointer(start: malloc(16), count: 0), deallocator: .free)
    }

    @Test func noneNeverTouchesTheMemory() {
        // `.none`: the caller keeps ownership; the memory stays usable after the buffer is gone.
        var bytes: [UInt8] = [7, 8, 9]
        bytes.withUnsafeMutableBytes { memory in
            var buffer: DispatchDataBuffer? = DispatchDataBuffer(
                bytesNoCopy: UnsafeRawBufferPointer(memory),
                deallocator: .none
            )
            #expect(buffer!.count == 3)
            buffer = nil
            memory[0] = 1
        }
        #expect(bytes == [1, 8, 9])
    }

    @Test(arguments: [false, true])
    func releasesFromManyThreadsRunTheDeallocatorExactlyOnce(onQueue: Bool) {
        // A3: copies and derived buffers dropped concurrently on many threads; the last one runs it, once.
        let queue = TestQueue(label: "many threads")
        for _ in 0..<50 {
            let counter = DeallocationCounter()
            let memory = mallocCopy([UInt8](repeating: 42, count: 4096))
            let address = Int(bitPattern: memory.baseAddress)
            let release: @Sendable () -> Void = {
                free(UnsafeMutableRawPointer(bitPattern: address))
                counter.record()
            }
            let holders = (0..<16).map { _ in Holder() }
            do {
                let shared = DispatchDataBuffer(
                    bytesNoCopy: memory,
                    deallocator: .custom(onQueue ? queue : nil, release)
                )
                for (index, holder) in holders.enumerated() {
                    switch index % 4 {
                    case 0: holder.buffer = shared
                    case 1: holder.buffer = shared.subdata(in: index..<(index + 100))
                    case 2: holder.buffer = DispatchDataBuffer("x") + shared
                    default: holder.buffer = shared.region(location: index).data
                    }
                }
            }
            #expect(counter.count == 0)
            DispatchQueue.concurrentPerform(iterations: holders.count) { index in
                let holder = holders[index]
                // Churn: make and drop copies and derived buffers concurrently with the other threads.
                for round in 0..<100 {
                    let copy = holder.buffer!
                    let derived = copy.subdata(in: 0..<(round % 50 + 1)) + copy
                    #expect(derived.count > copy.count)
                }
                holder.buffer = nil
            }
            if onQueue {
                #expect(counter.waitForRun())
                queue.queue.sync {}
            }
            #expect(counter.count == 1)
        }
    }
}

/// One thread's buffer: only that thread touches it after the hand-over.
private final class Holder: @unchecked Sendable {
    var buffer: DispatchDataBuffer?
}
