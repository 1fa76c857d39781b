import Foundation

/// RFC 4180 CSV, one record at a time: quoted fields, doubled quotes, CRLF or LF.
public enum CSV {
    /// Splits one line into fields. A quoted field may not span lines here (point files and
    /// tracks never need it); an unterminated quote is an error.
    public static func fields(_ line: Substring) throws(CSVError) -> [String] {
        var fields: [String] = []
        var current = ""
        var inQuotes = false
        var wasQuoted = false
        var iterator = line.makeIterator()
        var pending: Character? = nil
        while let character = pending ?? iterator.next() {
            pending = nil
            if inQuotes {
                if character == "\"" {
                    if let next = iterator.next() {
                        if next == "\"" {
                            current.append("\"")
                        } else {
                            inQuotes = false
                            pending = next
                        }
                    } else {
                        inQuotes = false
                    }
                } else {
                    current.append(character)
                }
                continue
            }
            switch character {
            case ",":
                fields.append(current)
                current = ""
                wasQuoted = false
            case "\"" where current.isEmpty && !wasQuoted:
                inQuotes = true
                wasQuoted = true
            case "\r", "\r\n":
                continue
            default:
                current.append(character)
            }
        }
        if inQuotes { throw CSVError(message: "unterminated quoted field") }
        fields.append(current)
        return fields
    }

    /// One field, quoted when it holds a comma, quote or line break.
    public static func escape(_ field: String) -> String {
        guard field.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return field }
        return "\"" + field.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    public static func line(_ fields: [String]) -> String { fields.map(escape).joined(separator: ",") }
}

public struct CSVError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public var description: String { message }
}
