/// Arrays, sets, dictionaries and optionals in the binary snapshot format: a count (or a
/// presence byte) and the elements, with no per-element framing. `Codable`'s own forms need
/// a container per element (and a dictionary's keys before its values), which is most of the
/// cost of a subject's state.
protocol BinaryCodableCollection {
    func encodeBinary(into encoder: BinaryEncoding) throws
    static func decodeBinary(from decoder: BinaryDecoding) throws -> Self
}

extension Optional: BinaryCodableCollection where Wrapped: Codable {
    func encodeBinary(into encoder: BinaryEncoding) throws {
        switch self {
        case .none: encoder.writer.byte(0)
        case .some(let wrapped):
            encoder.writer.byte(1)
            try encoder.encodeValue(wrapped)
        }
    }

    static func decodeBinary(from decoder: BinaryDecoding) throws -> Self {
        let start = decoder.reader.offset
        switch try decoder.reader.byte() {
        case 0: return nil
        case 1: return try decoder.decodeValue(Wrapped.self)
        case let other: throw decoder.reader.error("optional marker \(other) is neither 0 nor 1", at: start)
        }
    }
}

extension BinaryEncoding {
    /// A collection's form: its count, then each element.
    func writeElements<S: Sequence>(_ elements: S, count: Int) throws where S.Element: Encodable {
        writer.unsigned(UInt64(count))
        for element in elements { try encodeValue(element) }
    }

    /// A dictionary's form: its count, then each key and its value.
    func writePairs<S: Sequence, K: Encodable, V: Encodable>(_ pairs: S, count: Int) throws
    where S.Element == (key: K, value: V) {
        writer.unsigned(UInt64(count))
        for (key, value) in pairs {
            try encodeValue(key)
            try encodeValue(value)
        }
    }
}

extension Array: BinaryCodableCollection where Element: Codable {
    func encodeBinary(into encoder: BinaryEncoding) throws { try encoder.writeElements(self, count: count) }

    static func decodeBinary(from decoder: BinaryDecoding) throws -> Self {
        let count = try decoder.reader.count(minimumElementSize: 1)
        var array: [Element] = []
        array.reserveCapacity(count)
        for _ in 0..<count { array.append(try decoder.decodeValue(Element.self)) }
        return array
    }
}

extension Set: BinaryCodableCollection where Element: Codable {
    func encodeBinary(into encoder: BinaryEncoding) throws { try encoder.writeElements(self, count: count) }

    static func decodeBinary(from decoder: BinaryDecoding) throws -> Self {
        let start = decoder.reader.offset
        let count = try decoder.reader.count(minimumElementSize: 1)
        var set = Set(minimumCapacity: count)
        for _ in 0..<count { set.insert(try decoder.decodeValue(Element.self)) }
        guard set.count == count else { throw decoder.reader.error("a set of \(count) repeats elements", at: start) }
        return set
    }
}

extension Dictionary: BinaryCodableCollection where Key: Codable, Value: Codable {
    func encodeBinary(into encoder: BinaryEncoding) throws { try encoder.writePairs(self, count: count) }

    static func decodeBinary(from decoder: BinaryDecoding) throws -> Self {
        let start = decoder.reader.offset
        let count = try decoder.reader.count(minimumElementSize: 2)
        var dictionary = Self(minimumCapacity: count)
        for _ in 0..<count {
            let key = try decoder.decodeValue(Key.self)
            dictionary[key] = try decoder.decodeValue(Value.self)
        }
        guard dictionary.count == count else {
            throw decoder.reader.error("a dictionary of \(count) repeats keys", at: start)
        }
        return dictionary
    }
}
