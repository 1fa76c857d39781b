/// A strict RFC 8259 JSON reader with error positions, a depth limit and a fast number path.
///
/// Errors name the line and column: `line 3, column 14: expected ',' or '}' after an object
/// member`. Input is never trusted: nesting deeper than ``maximumDepth`` is an error, not a
/// stack overflow.
public struct JSONParser {
    public struct Error: Swift.Error, Sendable, Equatable, CustomStringConvertible {
        public var line: Int
        public var column: Int
        public var message: String
        public var description: String { "line \(line), column \(column): \(message)" }
    }

    public static let maximumDepth = 512

    /// Parses one JSON document (any value at the top, surrounding whitespace allowed).
    public static func parse(_ bytes: some Collection<UInt8>) throws(Error) -> JSONValue {
        let result: Result<JSONValue, Error>? = bytes.withContiguousStorageIfAvailable { buffer in
            var parser = Cursor(buffer)
            return Result { () throws(Error) in try parser.document() }
        }
        if let result { return try result.get() }
        return try parse(Array(bytes))
    }

    public static func parse(_ text: String) throws(Error) -> JSONValue {
        var text = text
        let result = text.withUTF8 { buffer in
            var parser = Cursor(buffer)
            return Result { () throws(Error) in try parser.document() }
        }
        return try result.get()
    }

    struct Cursor {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0
        var depth = 0

        init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        func fail(_ message: String, at position: Int? = nil) -> Error {
            let end = min(position ?? index, bytes.count)
            var line = 1
            var column = 1
            for i in 0..<end {
                if bytes[i] == UInt8(ascii: "\n") {
                    line += 1
                    column = 1
                } else if bytes[i] & 0xC0 != 0x80 {
                    column += 1
                }
            }
            return Error(line: line, column: column, message: message)
        }

        var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x0A, 0x0D, 0x09: index += 1
                default: return
                }
            }
        }

        mutating func document() throws(Error) -> JSONValue {
            skipWhitespace()
            if index == bytes.count { throw fail("empty input: expected a JSON value") }
            let value = try self.value()
            skipWhitespace()
            if index != bytes.count { throw fail("unexpected \(describe(bytes[index])) after the JSON value") }
            return value
        }

        func describe(_ byte: UInt8) -> String {
            if byte >= 0x21 && byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
            return "byte 0x\(String(byte, radix: 16, uppercase: true))"
        }

        mutating func value() throws(Error) -> JSONValue {
            guard let byte = current else { throw fail("unexpected end of input: expected a value") }
            switch byte {
            case UInt8(ascii: "{"): return try object()
            case UInt8(ascii: "["): return try array()
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"):
                try literal("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try literal("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try literal("null")
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return .number(try number())
            default:
                throw fail("unexpected \(describe(byte)): expected a value")
            }
        }

        mutating func literal(_ word: StaticString) throws(Error) {
            let start = index
            let expected = UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
            for byte in expected {
                guard index < bytes.count, bytes[index] == byte else {
                    throw fail("invalid literal: expected '\(word)'", at: start)
                }
                index += 1
            }
        }

        mutating func enter() throws(Error) {
            depth += 1
            if depth > JSONParser.maximumDepth {
                throw fail("nesting deeper than \(JSONParser.maximumDepth) levels")
            }
        }

        mutating func object() throws(Error) -> JSONValue {
            try enter()
            defer { depth -= 1 }
            index += 1
            var object = JSONObject()
            skipWhitespace()
            if current == UInt8(ascii: "}") {
                index += 1
                return .object(object)
            }
            while true {
                skipWhitespace()
                guard current == UInt8(ascii: "\"") else {
                    throw fail(
                        current == nil ? "unexpected end of input in an object" : "expected a member name in quotes")
                }
                let key = try string()
                skipWhitespace()
                guard current == UInt8(ascii: ":") else { throw fail("expected ':' after member name \"\(key)\"") }
                index += 1
                skipWhitespace()
                let member = try value()
                if object[key] != nil { throw fail("duplicate member name \"\(key)\"") }
                object[key] = member
                skipWhitespace()
                switch current {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "}"):
                    index += 1
                    return .object(object)
                case nil: throw fail("unexpected end of input: expected ',' or '}' after an object member")
                default: throw fail("expected ',' or '}' after an object member")
                }
            }
        }

        mutating func array() throws(Error) -> JSONValue {
            try enter()
            defer { depth -= 1 }
            index += 1
            var elements: [JSONValue] = []
            skipWhitespace()
            if current == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            while true {
                skipWhitespace()
                elements.append(try value())
                skipWhitespace()
                switch current {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "]"):
                    index += 1
                    return .array(elements)
                case nil: throw fail("unexpected end of input: expected ',' or ']' after an array element")
                default: throw fail("expected ',' or ']' after an array element")
                }
            }
        }

        mutating func string() throws(Error) -> String {
            let start = index
            index += 1
            // Fast path: no escapes.
            var scan = index
            while scan < bytes.count {
                let byte = bytes[scan]
                if byte == UInt8(ascii: "\"") {
                    let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[index..<scan]), as: UTF8.self)
                    index = scan + 1
                    return text
                }
                if byte == UInt8(ascii: "\\") || byte < 0x20 { break }
                scan += 1
            }
            var utf8: [UInt8] = Array(bytes[index..<scan])
            index = scan
            while true {
                guard index < bytes.count else { throw fail("unterminated string", at: start) }
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(decoding: utf8, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard index < bytes.count else { throw fail("unterminated string", at: start) }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""): utf8.append(0x22)
                    case UInt8(ascii: "\\"): utf8.append(0x5C)
                    case UInt8(ascii: "/"): utf8.append(0x2F)
                    case UInt8(ascii: "b"): utf8.append(0x08)
                    case UInt8(ascii: "f"): utf8.append(0x0C)
                    case UInt8(ascii: "n"): utf8.append(0x0A)
                    case UInt8(ascii: "r"): utf8.append(0x0D)
                    case UInt8(ascii: "t"): utf8.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try hex4()
                        if (0xD800..<0xDC00).contains(scalar) {
                            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                                bytes[index + 1] == UInt8(ascii: "u")
                            else { throw fail("unpaired surrogate \\u\(String(scalar, radix: 16)) in string") }
                            index += 2
                            let low = try hex4()
                            guard (0xDC00..<0xE000).contains(low) else {
                                throw fail("invalid low surrogate \\u\(String(low, radix: 16)) in string")
                            }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00..<0xE000).contains(scalar) {
                            throw fail("unpaired surrogate \\u\(String(scalar, radix: 16)) in string")
                        }
                        utf8.append(contentsOf: String(Character(Unicode.Scalar(scalar)!)).utf8)
                    default:
                        throw fail("invalid escape '\\\(Character(Unicode.Scalar(escape)))' in string", at: index - 2)
                    }
                default:
                    if byte < 0x20 { throw fail("unescaped control character in string", at: index - 1) }
                    utf8.append(byte)
                }
            }
        }

        mutating func hex4() throws(Error) -> UInt32 {
            guard index + 4 <= bytes.count else { throw fail("truncated \\u escape") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw fail("invalid hex digit in \\u escape")
                }
                value = value << 4 | digit
                index += 1
            }
            return value
        }

        mutating func number() throws(Error) -> Double {
            let start = index
            var negative = false
            if current == UInt8(ascii: "-") {
                negative = true
                index += 1
            }
            var mantissa: UInt64 = 0
            var digits = 0
            var exponent = 0
            var exact = true
            func isDigit(_ byte: UInt8?) -> Bool { byte.map { $0 >= 0x30 && $0 <= 0x39 } ?? false }
            guard isDigit(current) else { throw fail("invalid number: expected a digit", at: start) }
            if current == UInt8(ascii: "0") {
                index += 1
                if isDigit(current) { throw fail("invalid number: leading zero", at: start) }
            } else {
                while let byte = current, isDigit(byte) {
                    if digits < 19 {
                        mantissa = mantissa &* 10 &+ UInt64(byte - 0x30)
                        digits += 1
                    } else {
                        exponent += 1
                        exact = false
                    }
                    index += 1
                }
            }
            if current == UInt8(ascii: ".") {
                index += 1
                guard isDigit(current) else { throw fail("invalid number: expected a digit after '.'", at: start) }
                while let byte = current, isDigit(byte) {
                    if digits < 19 {
                        mantissa = mantissa &* 10 &+ UInt64(byte - 0x30)
                        if mantissa != 0 || digits > 0 { digits += 1 }
                        exponent -= 1
                    } else {
                        exact = false
                    }
                    index += 1
                }
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                index += 1
                var exponentNegative = false
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") {
                    exponentNegative = current == UInt8(ascii: "-")
                    index += 1
                }
                guard isDigit(current) else {
                    throw fail("invalid number: expected a digit in the exponent", at: start)
                }
                var written = 0
                while let byte = current, isDigit(byte) {
                    if written < 100_000 { written = written * 10 + Int(byte - 0x30) }
                    index += 1
                }
                exponent += exponentNegative ? -written : written
            }
            // Clinger's fast path: exact when the mantissa and the power of ten are both exact doubles.
            if exact && mantissa < (1 << 53) && exponent >= -22 && exponent <= 22 {
                var value = Double(mantissa)
                if exponent < 0 {
                    value /= Self.powersOfTen[-exponent]
                } else {
                    value *= Self.powersOfTen[exponent]
                }
                return negative ? -value : value
            }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            guard let value = Double(text) else { throw fail("invalid number '\(text)'", at: start) }
            // JSON has no infinity: a number too large for a double is an error, not ±inf
            // (which would serialise as null; found by fuzzing).
            guard value.isFinite else { throw fail("number '\(text)' is out of range", at: start) }
            return value
        }

        static let powersOfTen: [Double] = (0...22).map { exponent in
            var value = 1.0
            for _ in 0..<exponent { value *= 10 }
            return value
        }
    }
}

extension JSONValue {
    /// Parses a JSON document. - Throws: ``JSONParser/Error`` with line and column.
    public init(parsing text: String) throws(JSONParser.Error) {
        self = try JSONParser.parse(text)
    }

    public init(parsing bytes: some Collection<UInt8>) throws(JSONParser.Error) {
        self = try JSONParser.parse(bytes)
    }
}
