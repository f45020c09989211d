import Testing
import ToolSupport

/// The split both tools make of their command line before ArgumentParser sees any of it: getopt's, for
/// options without values. The tool tests compare the tools' results on such command lines with cat's and
/// cp's; these pin the rule itself.
@Suite struct CommandLineWordsTests {
    private func split(
        _ arguments: [PathName],
        posixlyCorrect: Bool = false
    ) -> (options: [PathName], operands: [PathName]) {
        let words = CommandLineWords(arguments, posixlyCorrect: posixlyCorrect)
        return (words.options, words.operands)
    }

    /// With `POSIXLY_CORRECT`, getopt stops at the first operand: what follows is all operands, a `--`
    /// among them (`cp a b -r` copies two files into `-r`). Before it, a `--` still ends the options.
    @Test func posixlyCorrectOptionsEndAtTheFirstOperand() {
        #expect(split(["-v", "a", "b", "-r"], posixlyCorrect: true) == (["-v"], ["a", "b", "-r"]))
        #expect(split(["a", "--", "-r"], posixlyCorrect: true) == ([], ["a", "--", "-r"]))
        #expect(split(["-v", "--", "-r", "a"], posixlyCorrect: true) == (["-v"], ["-r", "a"]))
        #expect(split(["-", "-r"], posixlyCorrect: true) == ([], ["-", "-r"]))
    }

    @Test func operandsAloneAreOperandsInOrder() {
        #expect(split(["a", "b", "dir"]) == ([], ["a", "b", "dir"]))
        #expect(split([]) == ([], []))
    }

    /// GNU getopt permutes: an option after the operands is still an option (`cp a b -r`).
    @Test func optionsAreFoundWhereverTheyStand() {
        #expect(split(["-r", "a", "-v", "b", "--progress"]) == (["-r", "-v", "--progress"], ["a", "b"]))
    }

    /// `-` alone is an operand: standard input to cat, a file named `-` to cp.
    @Test func aLoneDashIsAnOperand() {
        #expect(split(["-", "a", "-"]) == ([], ["-", "a", "-"]))
        #expect(split(["-r", "-"]) == (["-r"], ["-"]))
    }

    /// The first `--` ends the options and is dropped; everything after it is an operand, a later `--`
    /// and words that look like options included (`dcat -- -n`, `dcopy -- -r a`).
    @Test func theFirstDoubleDashEndsTheOptions() {
        #expect(split(["--", "-n"]) == ([], ["-n"]))
        #expect(split(["-v", "--", "-r", "a", "--", "b"]) == (["-v"], ["-r", "a", "--", "b"]))
        #expect(split(["a", "--"]) == ([], ["a"]))
        #expect(split(["--"]) == ([], []))  // `dcat --` reads standard input
    }

    /// An empty argument is an operand (`cp ''` reports it), not an option.
    @Test func anEmptyArgumentIsAnOperand() {
        #expect(split([""]) == ([], [""]))
    }

    /// ArgumentParser gets the options as strings; the operands keep bytes that are not UTF-8.
    @Test func operandsKeepTheirBytes() {
        let name = PathName([0x66, 0xFF, 0].map { CChar(bitPattern: $0) })
        let words = CommandLineWords(["-v", name], posixlyCorrect: false)
        #expect(words.operands == [name])
        #expect(words.optionStrings == ["-v"])
    }
}
