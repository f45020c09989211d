import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// dcopy and dcat against cp and cat on trees drawn at random from a fixed seed: sizes at every boundary
/// the tools care about (the 64 KiB small lanes, the 1 MiB linked-copy limit and read size, dcat's 2 MiB
/// windows), sparse files, symbolic links, FIFOs, empty directories, and every mode bit. The cases are
/// reproducible: a failure names its seed. A comparison like this, run as `nobody` on root's files, found
/// the `-p` sticky bit difference that `DcopyTests.preserveAsAnotherUserDropsSetIDBits` now pins.
@Suite(.timeLimit(.minutes(1)))
struct RandomTreeTests {
    /// What both sides list after a copy: every entry's type, mode, size and link target, then the bytes
    /// of the regular files (FIFOs are not read: that would block). Only `t`, the copy.
    static let listing =
        "cd t && find . -printf '%p %y %m %s %l\\n' | LC_ALL=C sort && "
        + "find . -type f -exec md5sum {} + | LC_ALL=C sort"

    /// `-p` also keeps modification times (access times move when a later run reads the source).
    static let listingWithTimes = listing + " && find . ! -type l -printf '%p %T@\\n' | LC_ALL=C sort"

    /// The options compared, with what to list after each. With `-v`, standard error goes into standard
    /// output, so the `-v` lines and the errors are compared in one stream, in the order they came out
    /// (cp's output made line-buffered: to a file it would hold its lines until it exits).
    static let variants = [
        ("-r", listing), ("-rp", listingWithTimes), ("-rv 2>&1", listing), ("-rpv 2>&1", listingWithTimes),
    ]

    @Test(arguments: [1, 2, 5, 7])
    func recursiveCopyMatchesCp(seed: UInt64) throws {
        try inScratch { scratch in
            try makeTree(at: scratch.path + "/src", seed: seed, unreadable: false)
            for (options, check) in Self.variants {
                let (theirs, ours) = try compare(scratch, "%cp \(options) ../src t", check: check)
                #expect(ours.status == theirs.status, "seed \(seed) \(options)")
                #expect(ours.stderr == renamed(theirs.stderr, from: "cp", to: "dcopy"), "seed \(seed) \(options)")
                #expect(ours.stdout == renamed(theirs.stdout, from: "cp", to: "dcopy"), "seed \(seed) \(options)")
                #expect(ours.check == theirs.check, "seed \(seed) \(options)")
                #expect(!theirs.check.isEmpty)
            }
        }
    }

    // The same as a user who cannot read some of the files and directories and cannot keep root's owner:
    // the errors, in cp's order, and what -p keeps of the mode bits.
    @Test(.enabled(if: isRoot), arguments: [11, 12, 14])
    func recursiveCopyAsAnotherUserMatchesCp(seed: UInt64) throws {
        try inScratch { scratch in
            chmod(scratch.path, 0o777)
            try makeTree(at: scratch.path + "/src", seed: seed, unreadable: true)
            let drop = "setpriv --reuid=65534 --regid=65534 --clear-groups"
            for (options, check) in Self.variants {
                let (theirs, ours) = try compare(scratch, "\(drop) %cp \(options) ../src t", check: check)
                #expect(ours.status == theirs.status, "seed \(seed) \(options)")
                #expect(ours.stderr == renamed(theirs.stderr, from: "cp", to: "dcopy"), "seed \(seed) \(options)")
                #expect(ours.stdout == renamed(theirs.stdout, from: "cp", to: "dcopy"), "seed \(seed) \(options)")
                #expect(ours.check == theirs.check, "seed \(seed) \(options)")
                #expect(theirs.status == 1, "seed \(seed): the tree should hold something unreadable")
            }
        }
    }

    // dcat of every regular file and link of a tree, in one command line and through a pipe: the same bytes
    // and messages as cat (dangling links fail, the rest still come out).
    @Test(arguments: [21, 22])
    func concatenationMatchesCat(seed: UInt64) throws {
        try inScratch { scratch in
            try makeTree(at: scratch.path + "/src", seed: seed, unreadable: false)
            let files = "$(find src \\( -type f -o -type l \\) | LC_ALL=C sort)"
            let script =
                "IFS=$'\\n'; %cat \(files) | md5sum; echo \"${PIPESTATUS[0]}\"; cat \(files) 2>/dev/null | %cat | md5sum"
            let theirs = try scratch.run(script.replacingOccurrences(of: "%cat", with: "cat"))
            let ours = try scratch.run(script.replacingOccurrences(of: "%cat", with: "\"$DCAT\""))
            #expect(ours.text == theirs.text, "seed \(seed)")
            #expect(ours.stderr == renamed(theirs.stderr, from: "cat", to: "dcat"), "seed \(seed)")
        }
    }

    /// Runs `command` (with `%cp`) for cp in `theirs/` and dcopy in `ours/`, then `check` in each.
    private func compare(
        _ scratch: Scratch,
        _ command: String,
        check: String
    ) throws
        -> (theirs: Side, ours: Side)
    {
        func side(_ name: String, _ tool: String) throws -> Side {
            let prefix = "rm -rf \(name) && mkdir -m 777 \(name) && cd \(name) && "
            let outcome = try scratch.run(prefix + command.replacingOccurrences(of: "%cp", with: tool))
            let checked = try scratch.run("cd \(name) && " + check)
            return Side(status: outcome.status, stdout: outcome.text, stderr: outcome.stderr, check: checked.text)
        }
        return (try side("theirs", "stdbuf -oL cp"), try side("ours", "\"$DCOPY\""))
    }

    /// What one side's copy gave.
    struct Side {
        var status: Int32
        var stdout: String
        var stderr: String
        var check: String
    }
}

/// A small, seeded generator (SplitMix64): the same tree for the same seed on every machine.
private struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Makes a random tree at `path`. `unreadable`: some files and directories get modes their owner's
/// neighbours cannot read or search (for a run as another user).
private func makeTree(at path: String, seed: UInt64, unreadable: Bool) throws {
    var random = SeededGenerator(state: seed)
    let sizes = [
        0, 1, 4095, 4096, 65535, 65536, 65537, 1_048_575, 1_048_576, 1_048_577, 2_097_155, 3_145_745,
    ]
    var fileModes: [mode_t] = [0o644, 0o600, 0o755, 0o444, 0o640, 0o4755, 0o1644, 0o2750, 0o7777]
    var directoryModes: [mode_t] = [0o755, 0o777, 0o1777, 0o2775]
    if unreadable {
        fileModes += [0o000, 0o200, 0o044]
        directoryModes += [0o000, 0o311, 0o644]
    }
    var pool = [UInt8](repeating: 0, count: 1 << 16)
    for index in pool.indices { pool[index] = UInt8(truncatingIfNeeded: random.next()) }

    func writeFile(_ file: String) throws {
        let size = sizes.randomElement(using: &random)!
        let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        try #require(fd >= 0)
        defer { close(fd) }
        if size > 65536 && Int.random(in: 0..<4, using: &random) == 0 {
            // Sparse: a few islands of data in a hole the size of the file.
            try #require(ftruncate(fd, off_t(size)) == 0)
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                let offset = Int.random(in: 0..<size, using: &random)
                let count = min(pool.count, size - offset)
                _ = pool.withUnsafeBytes { pwrite(fd, $0.baseAddress, count, off_t(offset)) }
            }
        } else {
            // The pool's bytes from a random start, repeated: no two files alike, no page alike.
            var written = 0
            var start = Int.random(in: 0..<pool.count, using: &random)
            while written < size {
                let count = min(pool.count - start, size - written)
                let done = pool.withUnsafeBytes { write(fd, $0.baseAddress! + start, count) }
                try #require(done == count)
                written += count
                start = (start + 7) % pool.count
            }
        }
        try #require(fchmod(fd, fileModes.randomElement(using: &random)!) == 0)
    }

    func makeDirectory(_ directory: String, depth: Int) throws {
        try #require(mkdir(directory, 0o755) == 0)
        let names = ["f", "g", "x y", "ü", "-dash", ".hidden", String(repeating: "n", count: 60)]
        for index in 0..<Int.random(in: (depth == 0 ? 8 : 0)...(depth < 2 ? 12 : 4), using: &random) {
            let entry = directory + "/" + names.randomElement(using: &random)! + String(index)
            switch Int.random(in: 0..<100, using: &random) {
            case 0..<65: try writeFile(entry)
            case 65..<80 where depth < 3: try makeDirectory(entry, depth: depth + 1)
            case 65..<88:
                try #require(
                    symlink(["../x", "nowhere", "/dev/null", "f0"].randomElement(using: &random)!, entry) == 0
                )
            // Named so that no link points at one: dcat would wait on it forever, as cat would.
            case 88..<93: try #require(mkfifo(directory + "/pipe" + String(index), 0o644) == 0)
            default: try #require(mkdir(entry, 0o700) == 0)
            }
        }
        if depth > 0 { try #require(chmod(directory, directoryModes.randomElement(using: &random)!) == 0) }
    }

    try makeDirectory(path, depth: 0)
}
