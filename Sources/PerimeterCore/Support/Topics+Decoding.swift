extension Topics {
    /// The id behind a topic level: the inverse of ``level(_:)``.
    ///
    /// Decodes exactly the escapes ``level(_:)`` writes (`%2F`, `%2B`, `%23`, `%25`, hex digits in
    /// either case), in one pass. A level holding any other `%` sequence (`50%`, `%41`, `%2`) was
    /// not written by ``level(_:)``: it is returned as it is rather than guessed at, so a
    /// publisher that never encodes still gets its ids back unchanged.
    public static func decodeLevel(_ level: String) -> String {
        guard level.utf8.contains(UInt8(ascii: "%")) else { return level }
        let bytes = Array(level.utf8)
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            guard bytes[index] == UInt8(ascii: "%") else {
                decoded.append(bytes[index])
                index += 1
                continue
            }
            guard index + 2 < bytes.count, bytes[index + 1] == UInt8(ascii: "2"),
                let character = escaped(bytes[index + 2])
            else { return level }
            decoded.append(character)
            index += 3
        }
        return String(decoding: decoded, as: UTF8.self)
    }

    /// The character behind `%2X`, for the four that ``level(_:)`` escapes.
    private static func escaped(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "F"), UInt8(ascii: "f"): UInt8(ascii: "/")
        case UInt8(ascii: "B"), UInt8(ascii: "b"): UInt8(ascii: "+")
        case UInt8(ascii: "3"): UInt8(ascii: "#")
        case UInt8(ascii: "5"): UInt8(ascii: "%")
        default: nil
        }
    }
}
