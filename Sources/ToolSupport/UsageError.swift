/// getopt's words for an option the tool does not have, as cat and cp print them before their exit status
/// 1: `invalid option -- 'x'` for a short one, `unrecognized option '--bogus'` for a long one, and
/// `option '--verbose' doesn't allow an argument` for a flag given a value.
///
/// ArgumentParser still parses the command line; this only words its refusal as GNU's tools do (its own
/// message and exit status 64 would differ from theirs, and scripts test for 1).
///
/// - Parameters:
///   - arguments: The command line without the program's name.
///   - shortFlags: The letters of the tool's short options (all flags).
///   - longFlags: The names of its long options, without `--` (all flags).
/// - Returns: The message without the tool's name, or nil if every option before `--` is known.
package func unknownOptionMessage(
    in arguments: some Sequence<String>,
    shortFlags: Set<Character>,
    longFlags: Set<String>
) -> String? {
    for argument in arguments {
        if argument == "--" { return nil }
        guard argument.hasPrefix("-"), argument != "-" else { continue }
        if argument.hasPrefix("--") {
            let option = argument.dropFirst(2)
            let name = String(option.prefix { $0 != "=" })
            guard longFlags.contains(name) else { return "unrecognized option '\(argument)'" }
            if option.contains("=") { return "option '--\(name)' doesn't allow an argument" }
        } else if let letter = argument.dropFirst().first(where: { !shortFlags.contains($0) }) {
            return "invalid option -- '\(letter)'"
        }
    }
    return nil
}
