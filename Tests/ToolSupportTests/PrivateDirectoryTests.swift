import Testing
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// dcopy -rp sets a small file's metadata by name only in a directory that is private as held open (see
/// `privateDirectoryOwner`): anywhere else another user could put something else at that name.
struct PrivateDirectoryTests {
    /// Makes a directory under /dev/shm (tmpfs, with ACLs) with `mode`, runs `prepare` on its path, and
    /// returns what `privateDirectoryOwner` says of an `O_PATH` descriptor of it.
    func owner(mode: mode_t, _ prepare: (String) throws -> Void = { _ in }) throws -> FileOwner? {
        var template = Array("/dev/shm/private.XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        try #require(made != nil)
        let path = String(cString: made!)
        defer { _ = system("rm -rf '\(path)'") }
        try #require(chmod(path, mode) == 0)
        try prepare(path)
        let fd = open(path, openPath | O_DIRECTORY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        return privateDirectoryOwner(fd)
    }

    @Test func ownersBitsAloneMakeItPrivate() throws {
        #expect(try owner(mode: 0o700) == FileOwner(user: geteuid(), group: getegid()))
        #expect(try owner(mode: 0o500) == FileOwner(user: geteuid(), group: getegid()))
    }

    /// Any bit for the group or others (read alone would not let them make a name, but a directory made
    /// with -p has none, so any bit says it is not one).
    @Test(arguments: [0o710, 0o750, 0o770, 0o701, 0o705, 0o707, 0o1777] as [mode_t])
    func anyBitForOthersMakesItNot(mode: mode_t) throws {
        #expect(try owner(mode: mode) == nil)
    }

    /// A default ACL would give the files made in it an ACL that -p must take away where the source has
    /// none; an access ACL's named entries are held back by the group's bits, its mask.
    @Test(.enabled(if: access("/usr/bin/setfacl", X_OK) == 0))
    func aDefaultACLMakesItNotAndAnAccessACLMaskedToNothingDoesNot() throws {
        let inheriting = try owner(mode: 0o700) { path in
            try #require(system("setfacl -d -m u:65534:rwx '\(path)'") == 0)
        }
        #expect(inheriting == nil)
        let masked = try owner(mode: 0o700) { path in
            try #require(system("setfacl -m u:65534:rwx '\(path)' && chmod g-rwx '\(path)'") == 0)
        }
        #expect(masked == FileOwner(user: geteuid(), group: getegid()))
    }

    /// Another user's directory, as someone else could put at the name between the mkdir and the open.
    @Test(.enabled(if: geteuid() == 0, "needs root to give the directory away"))
    func anotherUsersDirectoryIsNot() throws {
        let given = try owner(mode: 0o700) { path in try #require(chown(path, 65534, 65534) == 0) }
        #expect(given == nil)
    }

    @Test func aBadDescriptorIsNot() {
        #expect(privateDirectoryOwner(-1) == nil)
    }
}
