import DispatchData
import DispatchIO
import DispatchQueues
import SystemPackage
import Testing

/// The README's IOChannel example, kept here so that it keeps compiling as the API changes.
private func readmeExample() throws {
    let queue = WorkQueue(label: "reader")
    let fd = try FileDescriptor.open("/etc/os-release", .readOnly)
    let channel = IOChannel(type: .stream, fileDescriptor: fd, queue: queue) { error in
        try? fd.close()  // the cleanup handler: the channel is done with the descriptor
    }
    channel.setLimit(lowWater: 1)  // deliver as data arrives (the default waits for 1 MiB, as libdispatch)
    channel.read(offset: 0, length: .max, queue: queue) { done, data, error in
        if let data { print(String(decoding: data, as: UTF8.self), terminator: "") }
        if done { channel.close() }
    }
}

@Test func readmeExampleCompiles() {
    let example: () throws -> Void = readmeExample
    _ = example
}
