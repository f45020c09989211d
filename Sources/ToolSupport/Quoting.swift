#if canImport(Glibc)
import Glibc
#endif

extension PathName {
    /// The name as cp writes it in messages and `-v` lines: always quoted, in a form a shell reads back
    /// as the same bytes (GNU's `quoteaf`, the `shell-escape-always` quoting style).
    ///
    /// `'a b'`; `"it's"` when the name has a single quote and nothing a shell treats specially inside
    /// double quotes; otherwise `'it'\''s'`; a control character or a byte that is not a printable
    /// character of the locale as `$'\n'` or `$'\377'` (`'a'$'\n''b'`).
    package var quoted: String { ShellQuoting.quote(self, always: true, colon: false) }

    /// The name as cat writes it before `: reason`: quoted as ``quoted`` only when it needs to be for a
    /// shell or has a colon (GNU's `quotef`, the `shell-escape` style), else as it is: `dir/f`,
    /// `'a b'`, `'a:b'`.
    package var quotedIfNeeded: String { ShellQuoting.quote(self, always: false, colon: true) }

    /// The name as gnulib's `quote` writes it (the `locale` quoting style), which cp's ACL copy uses for
    /// `preserving permissions for ‘f’`: between ‘ and ’ in a UTF-8 locale and ' and ' in any other, with a
    /// backslash before a backslash and before the closing quote, C escapes for controls (`\n`), and octal
    /// ones for bytes the locale cannot print (`\377`). (helper-43: dcopy printed `'a'$'\n''b'` where cp
    /// prints `'a\nb'`.)
    package var quotedForLocale: String { ShellQuoting.localeQuote(self) }
}

/// GNU's shell-escape quoting of file names, as coreutils 9 prints them; rules read off cp and cat here.
enum ShellQuoting {
    /// One unit of a name: a character written as it is, or a byte written as an escape.
    private enum Unit {
        case character(ArraySlice<UInt8>)
        case escaped(UInt8)
    }

    static func quote(_ name: PathName, always: Bool, colon: Bool) -> String {
        let bytes = name.bytes
        // Most names are plain (`src/f0001.txt`): one pass over the bytes, without decoding characters, which
        // took half of `dcopy -v`'s time on the ring thread for 10,000 files.
        if !bytes.isEmpty && bytes.allSatisfy({ isPlain($0) && !(colon && $0 == UInt8(ascii: ":")) }) {
            let text = String(decoding: bytes, as: UTF8.self)
            return always ? "'" + text + "'" : text
        }
        let units = split(bytes)
        var needsQuotes = always || bytes.isEmpty
        // Whether the name can go between double quotes as it is: only when every character means itself
        // there too (no `$`, backquote, backslash, `!` and no escapes).
        var doubleQuotable = true
        var hasSingleQuote = false
        for (index, unit) in units.enumerated() {
            switch unit {
            case .escaped:
                needsQuotes = true
                doubleQuotable = false
            case .character(let character) where character.count > 1:
                continue
            case .character(let character):
                let byte = character.first!
                switch byte {
                case UInt8(ascii: "'"):
                    hasSingleQuote = true
                    needsQuotes = true
                case UInt8(ascii: ":"):
                    if colon { needsQuotes = true }
                case _ where isPlain(byte):
                    continue
                case UInt8(ascii: " "):
                    needsQuotes = true
                case UInt8(ascii: "#"), UInt8(ascii: "~"):
                    // Special to a shell only where a word starts.
                    if index == 0 { needsQuotes = true }
                    doubleQuotable = false
                case UInt8(ascii: "{"), UInt8(ascii: "}"):
                    // Special only alone (`{` and `}` are reserved words).
                    if units.count == 1 { needsQuotes = true }
                    doubleQuotable = false
                default:
                    needsQuotes = true
                    doubleQuotable = false
                }
            }
        }
        guard needsQuotes else { return String(decoding: bytes, as: UTF8.self) }
        if hasSingleQuote && doubleQuotable {
            return "\"" + String(decoding: bytes, as: UTF8.self) + "\""
        }
        var quoted: [UInt8] = [quote]
        // Inside `$'...'`, between escapes. GNU's quoting makes a name with a single quote in two passes,
        // and the second starts in the state the first ended in: when that was inside `$'...'`, the first
        // character writes `''` to end it (`'''q'\''...`), or a first escape lacks its `$'`
        // (`'\t''q'\''...`, which a shell does not read back as the name). Kept, to print what cp prints.
        let lastIsEscaped = if case .escaped = units.last { true } else { false }
        var escaping = hasSingleQuote && lastIsEscaped
        for unit in units {
            switch unit {
            case .escaped(let byte):
                if !escaping {
                    quoted += Array("'$'".utf8)
                    escaping = true
                }
                quoted += escape(byte)
            case .character(let character) where character == [quote]:
                // Ends the quotes (plain or `$'`), an escaped quote, and quotes again.
                quoted += Array("'\\''".utf8)
                escaping = false
            case .character(let character):
                if escaping {
                    quoted += [quote, quote]
                    escaping = false
                }
                quoted += character
            }
        }
        quoted.append(quote)
        return String(decoding: quoted, as: UTF8.self)
    }

    static func localeQuote(_ name: PathName) -> String {
        let (open, close) = LocaleText.isUTF8 ? ("\u{2018}", "\u{2019}") : ("'", "'")
        let closing = Array(close.utf8)
        let backslash = UInt8(ascii: "\\")
        var quoted = Array(open.utf8)
        for unit in split(name.bytes) {
            switch unit {
            case .escaped(let byte):
                quoted += escape(byte)
            case .character(let character) where Array(character) == closing || character.first == backslash:
                quoted += [backslash] + character
            case .character(let character):
                quoted += character
            }
        }
        quoted += closing
        return String(decoding: quoted, as: UTF8.self)
    }

    /// Bytes a shell takes as themselves anywhere, quoted or not: letters, digits and `%+,-./:@]_`.
    private static func isPlain(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return plainPunctuation.contains(byte)
        }
    }

    private static let plainPunctuation = Set("%+,-./:@]_".utf8)

    /// Cuts a name into printable characters and bytes to escape: ASCII controls and DEL, a byte that does
    /// not start a valid UTF-8 sequence, and each byte of a character the locale cannot print (or of any
    /// character past ASCII when the locale is not UTF-8).
    private static func split(_ bytes: ArraySlice<UInt8>) -> [Unit] {
        var units: [Unit] = []
        units.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte < 0x80 {
                units.append(byte < 0x20 || byte == 0x7F ? .escaped(byte) : .character(bytes[index...index]))
                index += 1
                continue
            }
            if let scalar = decodeScalar(bytes[index...]), LocaleText.canPrint(scalar) {
                let length = UTF8.width(scalar)
                units.append(.character(bytes[index..<index + length]))
                index += length
            } else if let scalar = decodeScalar(bytes[index...]) {
                // A valid character the locale cannot print: each of its bytes.
                for offset in 0..<UTF8.width(scalar) { units.append(.escaped(bytes[index + offset])) }
                index += UTF8.width(scalar)
            } else {
                // A byte that does not start a valid sequence: alone.
                units.append(.escaped(byte))
                index += 1
            }
        }
        return units
    }

    /// The character the UTF-8 sequence at the start of `bytes` encodes, or nil if it does not start with
    /// a valid one (overlong forms, surrogates and values past U+10FFFF are not valid, as for glibc's
    /// `mbrtowc`).
    private static func decodeScalar(_ bytes: ArraySlice<UInt8>) -> Unicode.Scalar? {
        var iterator = bytes.makeIterator()
        var decoder = UTF8()
        guard case .scalarValue(let scalar) = decoder.decode(&iterator) else { return nil }
        return scalar
    }

    private static func escape(_ byte: UInt8) -> [UInt8] {
        let letter: Character? =
            switch byte {
            case 0x07: "a"
            case 0x08: "b"
            case 0x09: "t"
            case 0x0A: "n"
            case 0x0B: "v"
            case 0x0C: "f"
            case 0x0D: "r"
            default: nil
            }
        if let letter { return Array("\\\(letter)".utf8) }
        let digits = [byte >> 6, (byte >> 3) & 7, byte & 7].map { UInt8(ascii: "0") + $0 }
        return [UInt8(ascii: "\\")] + digits
    }

    private static let quote = UInt8(ascii: "'")
}

/// Whether the locale the environment names (`LC_ALL`, `LC_CTYPE`, `LANG`, as `setlocale` reads them)
/// can print a character, as cp and cat decide it with `iswprint`.
///
/// In a UTF-8 locale glibc prints every assigned character but controls, surrogates and the line and
/// paragraph separators (U+2028, U+2029); Unicode's categories say the same here, without `iswprint`,
/// which Swift's Glibc module does not bring in. In any other locale a byte past ASCII is escaped.
enum LocaleText {
    /// Whether the environment's character-type locale is UTF-8 (`C.UTF-8` here). False for the C locale,
    /// for one that is not installed (glibc then stays in the C locale, as cp does), and for other
    /// character sets. The locale is loaded as an object the first time a name past ASCII is quoted, and
    /// never made the process's own: `setlocale` is not safe while other threads run.
    static let isUTF8: Bool = {
        // Names are quoted for messages before the failed call's errno is read (`fail("… \(name.quoted)",
        // Errno(rawValue: errno))`): loading a locale, which opens files, must leave it as it was.
        let savedErrno = errno
        defer { errno = savedErrno }
        guard let locale = newlocale(LC_CTYPE_MASK, "", nil) else { return false }
        defer { freelocale(locale) }
        // Through this thread's locale (`uselocale`), not `nl_langinfo_l`: in a statically linked binary
        // that answers "ANSI_X3.4-1968" for a UTF-8 locale object.
        let previous = uselocale(locale)
        defer { uselocale(previous) }
        guard let codeset = nl_langinfo(nl_item(CODESET)) else { return false }
        return String(cString: codeset) == "UTF-8"
    }()

    static func canPrint(_ scalar: Unicode.Scalar) -> Bool {
        guard isUTF8 else { return false }
        switch scalar.properties.generalCategory {
        case .control, .surrogate, .unassigned, .lineSeparator, .paragraphSeparator: return false
        default: return true
        }
    }
}
