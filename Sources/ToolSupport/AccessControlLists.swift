import CGlibcExtras

#if canImport(Glibc)
import Glibc
#endif

/// A file whose extended attributes are read or written: by descriptor, or by path (following links).
package enum AttributeTarget {
    case descriptor(CInt)
    case path(PathName)

    func get(_ name: String, _ buffer: UnsafeMutableRawPointer?, _ size: Int) -> Int {
        switch self {
        case .descriptor(let fd): fgetxattr(fd, name, buffer, size)
        case .path(let path): getxattr(path.cString, name, buffer, size)
        }
    }

    func set(_ name: String, _ buffer: UnsafeRawPointer, _ size: Int) -> CInt {
        switch self {
        case .descriptor(let fd): fsetxattr(fd, name, buffer, size, 0)
        case .path(let path): setxattr(path.cString, name, buffer, size, 0)
        }
    }

    func remove(_ name: String) {
        switch self {
        case .descriptor(let fd): _ = fremovexattr(fd, name)
        case .path(let path): _ = removexattr(path.cString, name)
        }
    }
}

/// Whether a file has a POSIX ACL of one kind.
package enum AccessControlListPresence: Equatable {
    /// It has none, or its file system has none.
    case absent
    case present
    /// The look failed with this `errno`.
    case unknown(CInt)
}

/// Whether `target` has a POSIX ACL: its access ACL, or with `isDefault`, a directory's default ACL (which
/// the files made in it take).
package func accessControlList(of target: AttributeTarget, isDefault: Bool = false) -> AccessControlListPresence {
    if target.get(isDefault ? "system.posix_acl_default" : "system.posix_acl_access", nil, 0) > 0 { return .present }
    return errno == ENODATA || errno == EOPNOTSUPP ? .absent : .unknown(errno)
}

/// Gives `destination` the POSIX ACLs of `source`, as cp -p does, before its mode is set: the access ACL,
/// and a directory's default ACL. Where the source has none, the destination's are removed, so that an ACL
/// inherited from the destination's parent does not grant what the source's mode does not. Returns the
/// `errno` of a source ACL that could not be set (an access ACL on a file system without ACLs), or nil.
package func preserveAccessControlLists(
    from source: AttributeTarget,
    to destination: AttributeTarget,
    isDirectory: Bool
)
    -> CInt?
{
    var failure: CInt?
    let names = isDirectory ? ["system.posix_acl_access", "system.posix_acl_default"] : ["system.posix_acl_access"]
    for name in names {
        let size = source.get(name, nil, 0)
        guard size > 0 else {
            destination.remove(name)
            continue
        }
        var bytes = [UInt8](repeating: 0, count: size)
        let read = bytes.withUnsafeMutableBytes { source.get(name, $0.baseAddress, size) }
        guard read > 0 else { continue }
        // A default ACL that a file system without ACLs refuses is not reported, as cp reports only an
        // access ACL it could not keep (helper-43: `cp -rp` of a directory with only a default ACL onto
        // ramfs said nothing, with status 0, and dcopy failed it).
        if bytes.withUnsafeBytes({ destination.set(name, $0.baseAddress!, read) }) != 0
            && !(name == "system.posix_acl_default" && errno == EOPNOTSUPP)
        {
            failure = failure ?? errno
        }
    }
    return failure
}
