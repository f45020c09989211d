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

/// The options with each abbreviated long option written out, as getopt takes one (`--rec` for
/// `--recursive`, helper-43: dcopy refused `--rec --verb` that cp runs), or getopt's refusal of one that
/// several long options start with: `option '--ver' is ambiguous; possibilities: '--verbose' '--version'`
/// (with what followed the `--`, a value included, as glibc prints it).
/// A name that is a whole option is that option, and one that starts none is left for
/// ``unknownOptionMessage(in:shortFlags:longFlags:)`` to refuse.
///
/// - Parameters:
///   - arguments: The options (of the command line before its `--`).
///   - longFlags: The names of the tool's long options, without `--`, in the order getopt would list them.
package func expandingAbbreviations(
    _ arguments: [String],
    longFlags: [String]
) -> (arguments: [String], refusal: String?) {
    var expanded: [String] = []
    for (index, argument) in arguments.enumerated() {
        if argument == "--" { return (expanded + arguments[index...], nil) }
        guard argument.hasPrefix("--") else {
            expanded.append(argument)
            continue
        }
        let option = argument.dropFirst(2)
        let name = option.prefix { $0 != "=" }
        let value = option.dropFirst(name.count)
        let candidates = longFlags.filter { $0.hasPrefix(name) }
        if longFlags.contains(String(name)) || candidates.isEmpty {
            expanded.append(argument)
        } else if candidates.count == 1 {
            expanded.append("--" + candidates[0] + value)
        } else {
            let possibilities = candidates.map { "'--\($0)'" }.joined(separator: " ")
            return (expanded, "option '\(argument)' is ambiguous; possibilities: \(possibilities)")
        }
    }
    return (expanded, nil)
}
