import Foundation

/// Encodes any `Encodable` value in the binary snapshot format (``BinaryWriter``).
///
/// The evaluator's state was JSON through Foundation's `JSONEncoder`/`JSONDecoder`: about
/// 8 MB/s to read back, 14.85 s of restart for 100,000 subjects (`bench restart`). This coder
/// keeps the types' own `Codable` conformances (one definition of what a snapshot holds) and
/// writes them compactly:
/// - strings (keys, subject, region and venue ids) once each in the string table;
/// - integers as varints, doubles and dates by bit pattern;
/// - arrays, sets and dictionaries as a count and their elements (dictionary keys interned);
/// - optionals as a presence byte;
/// - a struct (keyed container) as a `UInt32` count, then per field its key and a `UInt32`
///   length, so a reader can skip a field it does not know and read fields in any order.
public struct BinarySnapshotEncoder {
    public init() {}

    public func encode<T: Encodable>(_ value: T, version: UInt32) throws -> [UInt8] {
        let encoder = BinaryEncoding(version: version)
        try encoder.encodeValue(value)
        encoder.close(from: 0)
        return encoder.writer.finish(version: version)
    }
}

/// The `Encoder` behind ``BinarySnapshotEncoder``: one buffer, written depth first.
final class BinaryEncoding: Encoder {
    var writer = BinaryWriter()
    /// The format version being written: a hand-written form newer than it is not used.
    let version: UInt32

    init(version: UInt32) { self.version = version }

    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    /// Nesting depth of the value being encoded.
    var depth = 0
    /// Length fields of struct fields not yet known, with the depth of the struct that owns them.
    private var open: [(offset: Int, depth: Int)] = []

    /// Fills in the lengths of the fields of structs at `depth` and deeper: they are complete
    /// once anything is written at a shallower depth or beside them.
    func close(from depth: Int) {
        while let last = open.last, last.depth >= depth {
            writer.patch32(UInt32(writer.count - last.offset - 4), at: last.offset)
            open.removeLast()
        }
    }

    /// Starts a field of a struct at `depth`: its key and a length to fill in.
    func beginField(_ key: String, depth: Int) {
        close(from: depth)
        writer.string(key)
        open.append((writer.count, depth))
        writer.fixed32(0)
    }

    func encodeValue<T: Encodable>(_ value: T) throws {
        switch value {
        case let value as any BinaryCodableCollection:
            // Before the primitives: an Optional would be cast to its wrapped type.
            try value.encodeBinary(into: self)
        case let value as any BinarySnapshotValue where type(of: value).binaryFormSince <= version:
            try value.writeBinary(to: self)
        case let value as String: writer.string(value)
        case let value as Double: writer.double(value)
        case let value as Int: writer.signed(Int64(value))
        case let value as Bool: writer.byte(value ? 1 : 0)
        case let value as Date: writer.double(value.timeIntervalSinceReferenceDate)
        case let value as Int64: writer.signed(value)
        case let value as Int32: writer.signed(Int64(value))
        case let value as Int16: writer.signed(Int64(value))
        case let value as Int8: writer.signed(Int64(value))
        case let value as UInt: writer.unsigned(UInt64(value))
        case let value as UInt64: writer.unsigned(value)
        case let value as UInt32: writer.unsigned(UInt64(value))
        case let value as UInt16: writer.unsigned(UInt64(value))
        case let value as UInt8: writer.unsigned(UInt64(value))
        case let value as Float: writer.fixed32(value.bitPattern)
        default:
            let saved = depth
            depth += 1
            defer { depth = saved }
            try value.encode(to: self)
        }
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(BinaryKeyedEncoding<Key>(encoder: self))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer { BinaryUnkeyedEncoding(encoder: self, depth: depth) }

    func singleValueContainer() -> any SingleValueEncodingContainer { BinarySingleValueEncoding(encoder: self) }
}

/// A struct: a count of fields, then each field's key, length and value.
private final class BinaryKeyedEncoding<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let encoder: BinaryEncoding
    let depth: Int
    let countOffset: Int
    var count: UInt32 = 0
    var codingPath: [any CodingKey] { [] }

    init(encoder: BinaryEncoding, depth: Int? = nil) {
        self.encoder = encoder
        self.depth = depth ?? encoder.depth
        encoder.close(from: self.depth)
        countOffset = encoder.writer.count
        encoder.writer.fixed32(0)
    }

    private func field(_ key: Key) {
        encoder.beginField(key.stringValue, depth: depth)
        count += 1
        encoder.writer.patch32(count, at: countOffset)
    }

    /// A nil written on purpose: a field of length 0 (no value is ever 0 bytes long).
    func encodeNil(forKey key: Key) throws {
        field(key)
        encoder.close(from: depth)
    }

    func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        field(key)
        let saved = encoder.depth
        encoder.depth = depth
        defer { encoder.depth = saved }
        try encoder.encodeValue(value)
        encoder.close(from: depth)
    }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type, forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        field(key)
        return KeyedEncodingContainer(BinaryKeyedEncoding<NestedKey>(encoder: encoder, depth: depth + 1))
    }

    func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        field(key)
        return BinaryUnkeyedEncoding(encoder: encoder, depth: depth + 1)
    }

    func superEncoder() -> any Encoder { superEncoder(forKey: Key(stringValue: "super")!) }

    /// Not used by any snapshot type: the field holds whatever one container the caller writes.
    func superEncoder(forKey key: Key) -> any Encoder {
        field(key)
        return encoder
    }
}

/// A sequence: a count, then the elements.
private final class BinaryUnkeyedEncoding: UnkeyedEncodingContainer {
    let encoder: BinaryEncoding
    let depth: Int
    let countOffset: Int
    private(set) var count = 0
    var codingPath: [any CodingKey] { [] }

    init(encoder: BinaryEncoding, depth: Int) {
        self.encoder = encoder
        self.depth = depth
        encoder.close(from: depth)
        countOffset = encoder.writer.count
        encoder.writer.fixed32(0)
    }

    private func element() {
        encoder.close(from: depth + 1)
        count += 1
        encoder.writer.patch32(UInt32(count), at: countOffset)
    }

    /// Optionals in arrays are written by ``BinaryCodableCollection``; a bare nil has no form.
    func encodeNil() throws {
        throw EncodingError.invalidValue(
            "nil", EncodingError.Context(codingPath: [], debugDescription: "a bare nil has no binary form"))
    }

    func encode<T: Encodable>(_ value: T) throws {
        element()
        let saved = encoder.depth
        encoder.depth = depth
        defer { encoder.depth = saved }
        try encoder.encodeValue(value)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        element()
        return KeyedEncodingContainer(BinaryKeyedEncoding<NestedKey>(encoder: encoder, depth: depth + 1))
    }

    func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        element()
        return BinaryUnkeyedEncoding(encoder: encoder, depth: depth + 1)
    }

    func superEncoder() -> any Encoder {
        element()
        return encoder
    }
}

private struct BinarySingleValueEncoding: SingleValueEncodingContainer {
    let encoder: BinaryEncoding
    var codingPath: [any CodingKey] { [] }

    /// Only an Optional asks for this, and optionals are written by ``BinaryCodableCollection``.
    func encodeNil() throws {
        throw EncodingError.invalidValue(
            "nil", EncodingError.Context(codingPath: [], debugDescription: "a bare nil has no binary form"))
    }

    func encode<T: Encodable>(_ value: T) throws { try encoder.encodeValue(value) }
}
