/// Stops the process when `condition` is false, printing `message`: a misuse of the API (A17).
///
/// `fatalError`, not `precondition`: an optimised build drops a precondition's message and leaves a bare
/// `SIGILL`, and the inlinable parts of this module are compiled in the client's build, usually optimised.
/// The message is made only when the check fails.
@inlinable
@inline(__always)
func require(
    _ condition: Bool,
    _ message: @autoclosure () -> String,
    file: StaticString = #fileID,
    line: UInt = #line
) {
    if _slowPath(!condition) { misuse(message(), file: file, line: line) }
}

/// Stops the process, printing `message` (see ``require(_:_:file:line:)``).
@usableFromInline
func misuse(_ message: String, file: StaticString, line: UInt) -> Never {
    fatalError(message, file: file, line: line)
}
