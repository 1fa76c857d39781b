/// Hexadecimal text, both ways.
public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// Lowercase hex of the bytes.
    public static func encode<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String {
        var result: [UInt8] = []
        for byte in bytes {
            result.append(digits[Int(byte >> 4)])
            result.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: result, as: UTF8.self)
    }

    /// Bytes of an even-length run of hex digits (either case); nil for anything else.
    public static func decode<Digits: Collection<UInt8>>(_ text: Digits) -> [UInt8]? {
        guard text.count % 2 == 0 else { return nil }
        var result: [UInt8] = []
        result.reserveCapacity(text.count / 2)
        var high: UInt8?
        for character in text {
            guard let value = nibble(character) else { return nil }
            if let pending = high {
                result.append(pending << 4 | value)
                high = nil
            } else {
                high = value
            }
        }
        return result
    }

    /// The value of one hex digit, or nil.
    @inline(__always)
    public static func nibble(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): character - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): character - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
