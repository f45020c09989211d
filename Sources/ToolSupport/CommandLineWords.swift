#if canImport(Glibc)
import Glibc
#endif

/// A command line split into options and operands, as getopt splits one for tools whose options take no
/// values: before the first `--`, an argument that starts with `-` and is not `-` alone is an option,
/// wherever it stands (`cp a b -r`, as GNU getopt permutes); that `--` ends the options and is dropped; all
/// else is an operand, in order (`-` among them, standard input to cat, a file named `-` to cp).
///
/// Both tools split their command line before anything else, so that one without options skips
/// ArgumentParser, whose start-up reflects over every protocol conformance of the binary. Options and
/// operands keep the kernel's bytes: a file name need not be UTF-8.
package struct CommandLineWords: Sendable {
    /// The options, in order.
    package let options: [PathName]
    /// The operands, in order.
    package let operands: [PathName]

    /// Splits `arguments`, a command line without the program's name.
    ///
    /// With `POSIXLY_CORRECT` in the environment, as getopt then does, the options also end at the first
    /// operand (`cp a b -r` copies to `-r`).
    package init(_ arguments: [PathName], posixlyCorrect: Bool = getenv("POSIXLY_CORRECT") != nil) {
        // The `--` that ends the options, dropped; one after the first operand is an operand when the
        // options end there.
        var terminator = arguments.firstIndex(of: "--")
        var optionsEnd = terminator ?? arguments.endIndex
        if posixlyCorrect, let operand = arguments.firstIndex(where: { !$0.looksLikeAnOption || $0 == "-" }),
            operand < optionsEnd
        {
            optionsEnd = operand
            terminator = nil
        }
        var options: [PathName] = []
        var operands: [PathName] = []
        for (index, argument) in arguments.enumerated() where index != terminator {
            if index < optionsEnd && argument.looksLikeAnOption && argument != "-" {
                options.append(argument)
            } else {
                operands.append(argument)
            }
        }
        self.options = options
        self.operands = operands
    }

    /// This process's command line, from `argv` (none at all when ``unreadableCommandLine()`` has a reason).
    package static func current() -> CommandLineWords {
        CommandLineWords((1..<max(1, Int(CommandLine.argc))).map { PathName(CommandLine.unsafeArgv[$0]!) })
    }

    /// The options as strings, for ArgumentParser (bytes that are not UTF-8 would become U+FFFD, but no
    /// option has them: such an option is unknown, and refused before the parse).
    package var optionStrings: [String] {
        options.map { String(decoding: $0.bytes, as: UTF8.self) }
    }
}
