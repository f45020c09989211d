import Dispatch
import DispatchQueues
import Foundation
import Testing

/// The public names must not collide with the toolchain's Dispatch or Foundation: this file imports all
/// three and uses every public type unqualified.
@Suite("Names")
struct NameCollisionTests {
    @Test("public types are usable unqualified next to Foundation and Dispatch", .timeLimit(.minutes(1)))
    func unqualifiedNames() {
        let queue: WorkQueue = WorkQueue(label: "names")
        let group: WorkGroup = WorkGroup()
        let semaphore: WorkSemaphore = WorkSemaphore(value: 0)
        let once: Once = Once()
        let item: WorkItem = WorkItem { semaphore.signal() }
        let key = WorkQueue.SpecificKey<Int>()
        let result: TimeoutResult = .success
        queue.async(group: group) {}
        queue.async(execute: item)
        semaphore.wait()
        #expect(group.wait(timeout: .seconds(10)) == result)
        once.perform {}
        #expect(queue.getSpecific(key: key) == nil)
        // The toolchain's types still resolve to themselves.
        let theirs: DispatchQueue = DispatchQueue(label: "theirs")
        theirs.sync {}
        let data: Data = Data([1, 2, 3])
        #expect(data.count == 3)
    }
}
