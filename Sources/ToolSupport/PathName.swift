#if canImport(Glibc)
import Glibc
#endif

/// A file name or path as the kernel spells it: bytes, which need not be UTF-8.
///
/// The tools carry every name they are given or find in a directory as one of these, from the command
/// line (``init(_:)-(UnsafePointer<CChar>)``) or a directory entry to the system call that uses it, so that
/// a name that is not UTF-8 still names its file. A `String` made from such a name would replace the bytes
/// that are not UTF-8 with U+FFFD, which names another file (or none).
package struct PathName: Sendable, Hashable, ExpressibleByStringLiteral {
    /// The bytes, NUL-terminated, so that a system call takes them as they are.
    private let storage: [CChar]

    /// The bytes of a NUL-terminated C string, such as an element of `CommandLine.unsafeArgv`.
    package init(_ cString: UnsafePointer<CChar>) {
        storage = Array(UnsafeBufferPointer(start: cString, count: strlen(cString) + 1))
    }

    /// A name spelled as UTF-8.
    package init(_ string: String) {
        storage = Array(string.utf8CString)
    }

    /// A name spelled as UTF-8.
    package init(stringLiteral value: String) {
        self.init(value)
    }

    private init(storage: [CChar]) {
        self.storage = storage
    }

    /// The bytes in one go: an array's own hash takes them one element at a time, and paths are dictionary
    /// keys on dcopy's walk.
    package func hash(into hasher: inout Hasher) {
        storage.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    /// The bytes with a terminating NUL, for a system call's path argument (an array passed as an
    /// `UnsafePointer<CChar>` argument is passed without a copy).
    package var cString: [CChar] { storage }

    /// The bytes, without the terminating NUL.
    package var bytes: ArraySlice<UInt8> {
        ArraySlice(storage.dropLast().map { UInt8(bitPattern: $0) })
    }

    /// The number of bytes.
    package var count: Int { storage.count - 1 }

    /// Whether the name has no bytes (`cp ''` reports it; no file has it).
    package var isEmpty: Bool { count == 0 }

    /// Runs `body` with the name as a NUL-terminated C string, without copying it.
    package func withCString<Result>(_ body: (UnsafePointer<CChar>) throws -> Result) rethrows -> Result {
        try storage.withUnsafeBufferPointer { try body($0.baseAddress!) }
    }

    private func byte(_ index: Int) -> UInt8 { UInt8(bitPattern: storage[index]) }

    /// Whether the name starts with `-`, as an option on a command line does (`-` alone included).
    package var looksLikeAnOption: Bool { count > 0 && byte(0) == UInt8(ascii: "-") }

    /// Whether the last byte is a slash.
    package var endsWithSlash: Bool { count > 0 && byte(count - 1) == slash }

    /// Whether the name is `.` or `..`, the entries `readdir` gives besides a directory's contents.
    package var isDotOrDotDot: Bool {
        (count == 1 || count == 2) && (0..<count).allSatisfy { byte($0) == dot }
    }

    /// `self/name`, spelled as cp's `file_name_concat` spells it, so that messages and `-v` lines match
    /// cp's: this path's trailing slashes are dropped (`dir//` and `f` give `dir/f`), except a root's
    /// (`/` and `f` give `/f`).
    package func appending(_ name: PathName) -> PathName {
        var end = count
        while end > 0 && byte(end - 1) == slash { end -= 1 }
        var joined = [CChar]()
        joined.reserveCapacity(count + name.count + 2)
        if end == 0 {
            // Empty or only slashes: kept as they are.
            joined += storage.dropLast()
            if count == 0 { joined.append(CChar(bitPattern: slash)) }
        } else {
            joined += storage[..<end]
            joined.append(CChar(bitPattern: slash))
        }
        joined += name.storage
        return PathName(storage: joined)
    }

    /// The last component, trailing slashes dropped (`a/b/` gives `b`), as cp names a source's copy in a
    /// directory; a path of only slashes is its own last component.
    package var lastComponent: PathName {
        var end = count
        while end > 0 && byte(end - 1) == slash { end -= 1 }
        guard end > 0 else { return self }
        var start = end
        while start > 0 && byte(start - 1) != slash { start -= 1 }
        return PathName(storage: Array(storage[start..<end]) + [0])
    }

    /// The path without its last component and the slashes before it; `.` for a bare name, `/` for a name
    /// in the root.
    package var parent: PathName {
        var end = count
        while end > 0 && byte(end - 1) == slash { end -= 1 }
        while end > 0 && byte(end - 1) != slash { end -= 1 }
        let hadDirectory = end > 0
        while end > 0 && byte(end - 1) == slash { end -= 1 }
        if end == 0 { return hadDirectory ? "/" : "." }
        return PathName(storage: Array(storage[..<end]) + [0])
    }

    /// The path without its `.` components and repeated slashes (`d/./f` and `d//f` give `d/f`, `./f` gives
    /// `f`, `.` stays `.`), which name the same file whatever the links on the way; `..` stays, since what
    /// it leads to depends on them. Returns `self` when there is nothing to drop, without a copy.
    package var withoutDotComponents: PathName {
        let n = count
        // Nothing to drop unless a component is empty or `.` (the common case: one pass, no allocation).
        var needed = false
        var start = 0
        for index in 0...n where index == n || byte(index) == slash {
            let length = index - start
            // (The empty component before an absolute path's first slash is the root, not a repeat.)
            if length == 0 && index > 0 || length == 1 && byte(start) == dot {
                needed = true
                break
            }
            start = index + 1
        }
        guard needed else { return self }
        var components: [ArraySlice<CChar>] = []
        start = 0
        for index in 0...n where index == n || byte(index) == slash {
            let component = storage[start..<index]
            if !component.isEmpty && !(component.count == 1 && byte(start) == dot) { components.append(component) }
            start = index + 1
        }
        var joined: [CChar] = n > 0 && byte(0) == slash ? [CChar(bitPattern: slash)] : []
        for (position, component) in components.enumerated() {
            if position > 0 { joined.append(CChar(bitPattern: slash)) }
            joined += component
        }
        if joined.isEmpty { joined = [CChar(bitPattern: dot)] }
        return PathName(storage: joined + [0])
    }

    /// Whether this path is `ancestor` or lies under it (byte-wise, on resolved paths).
    package func isWithin(_ ancestor: PathName) -> Bool {
        let prefix = ancestor.appending("")
        return self == ancestor
            || count >= prefix.count && (0..<prefix.count).allSatisfy { byte($0) == prefix.byte($0) }
    }

    /// The path with every symbolic link, `.` and `..` resolved (`realpath`), or nil if that fails.
    package var resolved: PathName? {
        guard let resolved = withCString({ realpath($0, nil) }) else { return nil }
        defer { free(resolved) }
        return PathName(resolved)
    }
}

private let slash = UInt8(ascii: "/")
private let dot = UInt8(ascii: ".")
