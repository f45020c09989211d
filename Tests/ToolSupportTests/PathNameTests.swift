import Testing
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// Names as bytes, and the quoting of names in messages. The expected spellings are what GNU cp 9
/// (`quoteaf`) and cat (`quotef`) print here for the same names; names past ASCII depend on the locale and
/// are compared with cp and cat themselves in ToolTests.
@Suite struct PathNameTests {
    private func name(_ bytes: [UInt8]) -> PathName {
        PathName((bytes + [0]).map { CChar(bitPattern: $0) })
    }

    @Test func bytesThatAreNotUTF8AreKept() {
        let path = name([0x62, 0xFF, 0xFE])
        #expect(Array(path.bytes) == [0x62, 0xFF, 0xFE])
        #expect(path.count == 3)
        #expect(path.withCString { strlen($0) } == 3)
    }

    @Test func joiningDropsTheDirectorysTrailingSlashesButARootsOnes() {
        #expect(PathName("dir").appending("f") == "dir/f")
        #expect(PathName("dir//").appending("f") == "dir/f")
        #expect(PathName("/").appending("f") == "/f")
        #expect(PathName("dir").appending("") == "dir/")
        #expect(name([0xFF]).appending(name([0xFE])) == name([0xFF, 0x2F, 0xFE]))
    }

    @Test func dotComponentsAndRepeatedSlashesAreDropped() {
        let cases: [(PathName, PathName)] = [
            ("e/./d", "e/d"), ("d//f", "d/f"), ("./f", "f"), (".", "."), ("/", "/"), ("/./a", "/a"),
            ("a/./././b/.", "a/b"), ("d/", "d"), ("a/..", "a/.."), ("../a", "../a"), ("..", ".."), ("", ""),
            ("e/.d", "e/.d"), ("plain/path", "plain/path"),
        ]
        for (path, expected) in cases {
            #expect(path.withoutDotComponents == expected, "\(path)")
        }
        #expect(name([0xFF, 0x2F, 0x2E, 0x2F, 0xFE]).withoutDotComponents == name([0xFF, 0x2F, 0xFE]))
    }

    @Test func lastComponentAndParent() {
        #expect(PathName("a/b/").lastComponent == "b")
        #expect(PathName("b").lastComponent == "b")
        #expect(PathName("/").lastComponent == "/")
        #expect(PathName("a//b").parent == "a")
        #expect(PathName("b").parent == ".")
        #expect(PathName("/b").parent == "/")
        #expect(PathName("a/b/").parent == "a")
    }

    @Test func withinIsByComponents() {
        #expect(PathName("/a/b").isWithin("/a"))
        #expect(PathName("/a").isWithin("/a"))
        #expect(!PathName("/ab").isWithin("/a"))
    }

    @Test func dotAndDotDot() {
        #expect(PathName(".").isDotOrDotDot)
        #expect(PathName("..").isDotOrDotDot)
        #expect(!PathName("...").isDotOrDotDot)
        #expect(!PathName(".a").isDotOrDotDot)
    }

    // cp quotes every name.
    @Test(arguments: [
        ("plain", "'plain'"),
        ("", "''"),
        ("sp ace", "'sp ace'"),
        ("it's", "\"it's\""),
        ("a'b c", "\"a'b c\""),
        ("it's$x", "'it'\\''s$x'"),
        ("it's#", "'it'\\''s#'"),
        ("it's:", "\"it's:\""),
        ("'", "\"'\""),
        ("a\"b", "'a\"b'"),
        ("back\\slash", "'back\\slash'"),
        ("n\nl", "'n'$'\\n''l'"),
        ("\nx", "''$'\\n''x'"),
        ("\t", "''$'\\t'"),
        ("a\u{1}b\u{7F}c\u{1B}", "'a'$'\\001''b'$'\\177''c'$'\\033'"),
        ("a\rb\u{B}c\u{C}d\u{8}e\u{7}f", "'a'$'\\r''b'$'\\v''c'$'\\f''d'$'\\b''e'$'\\a''f'"),
    ])
    func cpQuotesEveryName(_ text: String, _ expected: String) {
        #expect(PathName(text).quoted == expected)
    }

    @Test func bytesThatAreNotUTF8AreEscapedInOctal() {
        #expect(name([0x62, 0xFF]).quoted == "'b'$'\\377'")
        #expect(name([0x27, 0xFF]).quoted == "''\\'''$'\\377'")
        #expect(name([0x61, 0xFF, 0x62, 0xFE]).quotedIfNeeded == "'a'$'\\377''b'$'\\376'")
        // GNU's second pass over a name with a single quote starts inside the `$'...'` the first ended in.
        #expect(name([0x71, 0x27, 0xFF]).quoted == "'''q'\\'''$'\\377'")
        #expect(name([0x09, 0x71, 0x27, 0xFF]).quoted == "'\\t''q'\\'''$'\\377'")
        #expect(name([0x71, 0x27, 0xFF, 0x78]).quoted == "'q'\\'''$'\\377''x'")
        // A lead byte without its continuation is one invalid byte; what follows is itself.
        #expect(name([0xE2, 0x80, 0x78]).quoted == "''$'\\342\\200''x'")
    }

    // cat quotes a name only when a shell would need it, or for a colon.
    @Test(arguments: [
        ("plain", "plain"),
        ("/n/-x", "/n/-x"),
        ("", "''"),
        ("a b", "'a b'"),
        ("a:b", "'a:b'"),
        ("x=y", "'x=y'"),
        ("#a", "'#a'"),
        ("a#", "a#"),
        ("~a", "'~a'"),
        ("a~", "a~"),
        ("{", "'{'"),
        ("}", "'}'"),
        ("{a", "{a"),
        ("a]", "a]"),
        ("a[", "'a['"),
        ("a*", "'a*'"),
        ("%+,-./@]_", "%+,-./@]_"),
        ("it's", "\"it's\""),
        ("it's:", "\"it's:\""),
        ("\\x", "'\\x'"),
        ("a\tb", "'a'$'\\t''b'"),
    ])
    func catQuotesOnlyWhatNeedsIt(_ text: String, _ expected: String) {
        #expect(PathName(text).quotedIfNeeded == expected)
    }

    // getopt's words for options the tool does not have; nil when all are known or after `--`.
    @Test func unknownOptionsInGetoptsWords() {
        let short: Set<Character> = ["r", "v"]
        let long: Set<String> = ["recursive", "verbose"]
        func message(_ arguments: [String]) -> String? {
            unknownOptionMessage(in: arguments, shortFlags: short, longFlags: long)
        }
        #expect(message(["-rv", "--verbose", "-", "a", "b"]) == nil)
        #expect(message(["-rq", "a"]) == "invalid option -- 'q'")
        #expect(message(["--bogus"]) == "unrecognized option '--bogus'")
        #expect(message(["--verbose=yes"]) == "option '--verbose' doesn't allow an argument")
        #expect(message(["--", "-q", "--bogus"]) == nil)
        #expect(message(["a", "-x"]) == "invalid option -- 'x'")
    }

    // getopt takes a long option's unambiguous prefix for it (helper-43: `cp --rec --verb` runs), and
    // refuses one that starts several, listing them in the tool's order.
    @Test func abbreviatedLongOptionsAsGetoptTakesThem() {
        let long = ["recursive", "verbose", "version", "progress"]
        func expand(_ arguments: [String]) -> (arguments: [String], refusal: String?) {
            expandingAbbreviations(arguments, longFlags: long)
        }
        #expect(
            expand(["--rec", "-v", "--verb", "--pro"]).arguments == ["--recursive", "-v", "--verbose", "--progress"]
        )
        #expect(expand(["--verbose", "--r=1"]).arguments == ["--verbose", "--recursive=1"])
        #expect(expand(["--bogus", "--", "--rec"]).arguments == ["--bogus", "--", "--rec"])
        #expect(expand(["--ver"]).refusal == "option '--ver' is ambiguous; possibilities: '--verbose' '--version'")
        #expect(expand(["--rec"]).refusal == nil)
    }
}
