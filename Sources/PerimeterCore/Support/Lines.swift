import Foundation

/// Splits bytes into lines (LF or CRLF), without copying the whole input into strings.
public struct Lines: Sequence {
    public let data: Data

    public init(data: Data) { self.data = data }

    public func makeIterator() -> AnyIterator<Substring> {
        let text = String(decoding: data, as: UTF8.self)
        // Split on the newline byte, not the Character "\n": "\r\n" is one Character, and not "\n".
        var lines = text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)[...]
        if lines.last?.isEmpty == true { lines = lines.dropLast() }
        return AnyIterator {
            guard let line = lines.popFirst() else { return nil }
            let end = line.last == UInt8(ascii: "\r") ? line.index(before: line.endIndex) : line.endIndex
            return text[line.startIndex..<end]
        }
    }
}
