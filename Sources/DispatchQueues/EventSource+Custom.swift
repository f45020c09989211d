import URing

extension EventSource {
    /// Makes a custom source whose ``data`` is the **sum** of the values merged since the previous event
    /// handler call (SEMANTICS D8).
    ///
    /// ``merge(data:)`` with 0 does nothing. Like every source it starts inactive.
    ///
    /// - Parameter queue: The queue the handlers run on; `nil` means the default global queue.
    public static func makeUserDataAddSource(queue: WorkQueue? = nil) -> EventSource {
        makeUserDataAddSource(queue: queue, engine: .shared)
    }

    /// Makes a custom source whose ``data`` is the bitwise **OR** of the values merged since the previous
    /// event handler call (SEMANTICS D9). ``merge(data:)`` with 0 does nothing.
    ///
    /// - Parameter queue: The queue the handlers run on; `nil` means the default global queue.
    public static func makeUserDataOrSource(queue: WorkQueue? = nil) -> EventSource {
        makeUserDataOrSource(queue: queue, engine: .shared)
    }

    /// Makes a custom source whose ``data`` is the **last** non-zero value merged before the event handler
    /// call (SEMANTICS D10). ``merge(data:)`` with 0 stores nothing: no handler call, and ``data`` keeps
    /// its previous value.
    ///
    /// - Parameter queue: The queue the handlers run on; `nil` means the default global queue.
    public static func makeUserDataReplaceSource(queue: WorkQueue? = nil) -> EventSource {
        makeUserDataReplaceSource(queue: queue, engine: .shared)
    }

    package static func makeUserDataAddSource(queue: WorkQueue?, engine: IOEngine) -> EventSource {
        EventSource(core: SourceCore(kind: .dataAdd, handle: 0, mask: 0, target: queue, engine: engine))
    }

    package static func makeUserDataOrSource(queue: WorkQueue?, engine: IOEngine) -> EventSource {
        EventSource(core: SourceCore(kind: .dataOr, handle: 0, mask: 0, target: queue, engine: engine))
    }

    package static func makeUserDataReplaceSource(queue: WorkQueue?, engine: IOEngine) -> EventSource {
        EventSource(core: SourceCore(kind: .dataReplace, handle: 0, mask: 0, target: queue, engine: engine))
    }

    /// Merges `data` into a custom source's pending data — added, ORed or replacing, by the source's kind —
    /// and makes the event handler run soon with the result (SEMANTICS D8–D10, D37).
    ///
    /// Callable from any thread, including the handler's own queue, and before activation (the data is then
    /// delivered after activation, D1). It never runs the handler synchronously. 0 is ignored; so is any
    /// merge after ``cancel()`` (D16). Calling it on a source that is not a custom data source is a
    /// programming error and stops the process.
    public func merge(data: UInt) {
        let core = self.core
        switch core.kind {
        case .dataAdd: core.record(add: data)
        case .dataOr: core.record(or: data)
        case .dataReplace: core.record(replace: data)
        default:
            misuse(
                "EventSource.merge(data:) on a \(core.kind.name) source: only data-add, data-or and data-replace sources take merged data"
            )
        }
    }
}
