import Foundation
import Testing

/// dcat against GNU cat on the same inputs: bytes, exit status, messages.
@Suite(.timeLimit(.minutes(1)))
struct DcatTests {
    /// Runs `arguments` (shell words) through both cat and dcat; returns both outcomes.
    func both(_ scratch: Scratch, _ arguments: String, setup: String = "") throws -> (cat: Outcome, dcat: Outcome) {
        let cat = try scratch.run("\(setup) cat \(arguments)")
        let dcat = try scratch.run("\(setup) \"$DCAT\" \(arguments)")
        return (cat, dcat)
    }

    @Test func fixturesInOrderMatchCat() throws {
        try inScratch { scratch in
            let (cat, dcat) = try both(
                scratch,
                "$FIX/text/hello.txt $FIX/binary/random-64k.bin $FIX/empty.txt $FIX/text/no-final-newline.txt "
                    + "$FIX/binary/zeros-and-ff.bin $FIX/text/utf8.txt"
            )
            #expect(cat.status == 0)
            #expect(dcat == cat)
        }
    }

    @Test func missingFileAndDirectoryAreReportedAndTheRestStillComesOut() throws {
        try inScratch { scratch in
            let (cat, dcat) = try both(scratch, "$FIX/text/hello.txt missing $FIX/tree $FIX/text/lines.txt")
            #expect(cat.status == 1)
            #expect(dcat.status == 1)
            #expect(dcat.stdout == cat.stdout)
            #expect(dcat.stderr == renamed(cat.stderr, from: "cat", to: "dcat"))
            #expect(
                dcat.stderr
                    == "dcat: missing: No such file or directory\ndcat: \(Tools.fixtures)/tree: Is a directory\n"
            )
        }
    }

    @Test func standardInputWithoutArgumentsAndAsDash() throws {
        try inScratch { scratch in
            let (cat, dcat) = try both(
                scratch,
                "$FIX/text/hello.txt - $FIX/text/hello.txt",
                setup: "printf 'from stdin\\n' |"
            )
            #expect(dcat == cat)
            let plain = try scratch.run("\"$DCAT\" < $FIX/binary/random-64k.bin")
            #expect(
                plain.stdout == (try Data(contentsOf: URL(fileURLWithPath: Tools.fixtures + "/binary/random-64k.bin")))
            )
        }
    }

    @Test func largePipeInputAndOutput() throws {
        try inScratch { scratch in
            // 40 MiB through a pipe in and a pipe out: pieces arrive 64 KiB at a time.
            let script = "head -c 41943040 /dev/urandom > big; cat big | %@ | md5sum; md5sum < big"
            let ours = try scratch.run(script.replacingOccurrences(of: "%@", with: "\"$DCAT\""))
            let lines = ours.text.split(separator: "\n")
            #expect(ours.status == 0)
            #expect(lines.count == 2 && lines[0] == lines[1])
        }
    }

    @Test func procFilesHaveContentDespiteSizeZero() throws {
        try inScratch { scratch in
            let (cat, dcat) = try both(scratch, "/proc/version /proc/self/mountinfo")
            #expect(dcat.status == 0)
            // mountinfo is the same for both; version is constant.
            #expect(dcat.stdout == cat.stdout)
            #expect(!dcat.stdout.isEmpty)
        }
    }

    @Test func devNullIsEmpty() throws {
        try inScratch { scratch in
            let (cat, dcat) = try both(scratch, "/dev/null")
            #expect(dcat == cat)
            #expect(dcat.stdout.isEmpty)
        }
    }

    @Test func appendModeStandardOutput() throws {
        try inScratch { scratch in
            let ours = try scratch.run(
                "printf 'first\\n' > o; \"$DCAT\" $FIX/text/lines.txt >> o; \"$DCAT\" $FIX/text/hello.txt >> o; cat o"
            )
            let theirs = try scratch.run(
                "printf 'first\\n' > o; cat $FIX/text/lines.txt >> o; cat $FIX/text/hello.txt >> o; cat o"
            )
            #expect(ours == theirs)
        }
    }

    @Test func sharedFileOffsetIsLeftWhereCatLeavesIt() throws {
        try inScratch { scratch in
            // The shell's commands share one descriptor: each must leave the position after its output.
            let script =
                "{ %@ $FIX/binary/random-64k.bin; printf X; %@ $FIX/text/lines.txt $FIX/text/hello.txt; "
                + "printf Y; } > o; md5sum < o"
            let ours = try scratch.run(script.replacingOccurrences(of: "%@", with: "\"$DCAT\""))
            let theirs = try scratch.run(script.replacingOccurrences(of: "%@", with: "cat"))
            #expect(ours == theirs)
        }
    }

    @Test func writeErrorToDevFullIsReported() throws {
        try inScratch { scratch in
            let (cat, dcat) = try both(scratch, "$FIX/text/hello.txt > /dev/full")
            #expect(cat.status == 1)
            #expect(dcat.status == 1)
            #expect(dcat.stderr == renamed(cat.stderr, from: "cat", to: "dcat"))
            #expect(dcat.stderr == "dcat: write error: No space left on device\n")
        }
    }

    @Test func readerGoingAwayEndsQuietlyBySIGPIPE() throws {
        try inScratch { scratch in
            let script =
                "head -c 20000000 /dev/zero > z; %@ z z z 2>err | head -c 10 > /dev/null; "
                + "echo ${PIPESTATUS[0]}; cat err"
            let ours = try scratch.run(script.replacingOccurrences(of: "%@", with: "\"$DCAT\""))
            let theirs = try scratch.run(script.replacingOccurrences(of: "%@", with: "cat"))
            #expect(theirs.text == "141\n")
            #expect(ours.text == "141\n")
        }
    }

    @Test func sparseFileOverFourGiB() throws {
        try inScratch { scratch in
            // 4.5 GiB, all holes but a marker past 4 GiB: offsets beyond 32 bits, and fast.
            let ours = try scratch.run(
                "truncate -s 4831838208 sp; printf MARK | dd of=sp bs=1 seek=4500000000 conv=notrunc 2>/dev/null; "
                    + "\"$DCAT\" sp | { head -c 4500000000 > /dev/null; head -c 4; wc -c; }"
            )
            #expect(ours.status == 0)
            // The marker, then the count of the bytes after it.
            #expect(ours.text == "MARK331838204\n")
        }
    }

    @Test func inputFileIsOutputFileIsRefused() throws {
        try inScratch { scratch in
            // cat: input file is output file, when the input's position is before its size. That is cat 9.1's
            // rule (not the output's position, nor O_APPEND alone): `a 1<>a` is refused, `a >> a` of an empty a
            // and an input already read to its end are not. The size counts once earlier inputs are written
            // (`a b a > a`, `b - >> a`).
            let script =
                "printf 'A\\n' > a; printf 'B\\n' > b; %@ a b a > a; echo $?; cat a; "
                + "printf 'A\\n' > a; %@ b a >> a; echo $?; cat a; %@ a 1<>a; echo $?; cat a; "
                + ": > a; %@ a >> a; echo $?; printf 'A\\n' > a; %@ b - b - < a > a; echo $?; cat a; "
                + "printf 'one\\n' > a; { read -r x; %@ - b; } < a 1<>a; echo $?; cat a; "
                + "printf 'one\\n' > a; { read -r x; %@ b -; } < a >> a; echo $?; cat a"
            let ours = try scratch.run(script.replacingOccurrences(of: "%@", with: "\"$DCAT\""))
            let theirs = try scratch.run(script.replacingOccurrences(of: "%@", with: "cat"))
            #expect(theirs.text == "1\nB\n1\nA\nB\n1\nA\nB\n0\n1\nB\nB\n0\nB\ne\n1\none\nB\n")
            #expect(ours.stdout == theirs.stdout)
            #expect(ours.status == theirs.status)
            #expect(ours.stderr == renamed(theirs.stderr, from: "cat", to: "dcat"))
            #expect(ours.stderr.components(separatedBy: "dcat: a: input file is output file\n").count == 4)
            #expect(ours.stderr.components(separatedBy: "dcat: -: input file is output file\n").count == 4)
        }
    }

    @Test func unreadableFileAsUnprivilegedUser() throws {
        try inScratch { scratch in
            let drop = isRoot ? "setpriv --reuid=65534 --regid=65534 --clear-groups" : ""
            let setup = "printf secret > locked; chmod 000 locked; printf ok > open; chmod 644 open;"
            let ours = try scratch.run("\(setup) \(drop) \"$DCAT\" locked open")
            let theirs = try scratch.run("\(setup) \(drop) cat locked open")
            #expect(theirs.stderr == "cat: locked: Permission denied\n")
            #expect(ours == Outcome(status: 1, stdout: Data("ok".utf8), stderr: "dcat: locked: Permission denied\n"))
        }
    }
}
