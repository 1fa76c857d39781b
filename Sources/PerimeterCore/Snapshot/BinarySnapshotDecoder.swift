import Dispatch
import Foundation
import Synchronization

/// Decodes what ``BinarySnapshotEncoder`` wrote. Every length, count and string index is
/// checked against the file (``BinaryReader``); any problem, including a value of the wrong
/// shape for its type, is a ``SnapshotFormatError`` naming the source and the byte offset.
public struct BinarySnapshotDecoder {
    public init() {}

    /// - Parameters:
    ///   - source: names the file in errors ("the snapshot in /var/lib/…/evaluator.sqlite").
    ///   - versions: the format versions the caller's types can read.
    public func decode<T: Decodable>(
        _ type: T.Type, from bytes: [UInt8], source: String, versions: ClosedRange<UInt32>
    ) throws -> (value: T, version: UInt32) {
        let decoder = BinaryDecoding(reader: try BinaryReader(bytes, source: source, versions: versions))
        let value: T
        do {
            value = try decoder.decodeValue(T.self)
        } catch let error as SnapshotFormatError {
            throw error
        } catch {
            throw decoder.reader.error("\(error)")
        }
        try decoder.reader.expectEnd()
        return (value, decoder.reader.version)
    }
}

/// The `Decoder` behind ``BinarySnapshotDecoder``.
final class BinaryDecoding: Decoder {
    /// Unchecked: one decoder runs on one thread, and the dynamic exclusivity checks of a class
    /// property were 5 % of a restart (`perf`).
    @exclusivity(unchecked) var reader: BinaryReader
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(reader: BinaryReader) { self.reader = reader }

    /// How each type is read, found once per type: the conformance checks it replaces were 8 %
    /// of a restart with 1,000,000 subjects (`perf`).
    private enum Kind {
        case value(any BinarySnapshotValue.Type)
        case collection(any BinaryCodableCollection.Type)
        case codable
        case concurrent([BinaryConcurrentField])
    }

    /// The fields the next struct opened decodes side by side (set for the struct's own
    /// container only: ``BinaryKeyedDecoding`` takes them as it opens).
    private var pendingConcurrent: [BinaryConcurrentField]?

    func takeConcurrentFields() -> [BinaryConcurrentField]? {
        defer { pendingConcurrent = nil }
        return pendingConcurrent
    }

    @exclusivity(unchecked) private var kinds: [ObjectIdentifier: Kind] = [:]

    private func integer<I: FixedWidthInteger>(_ type: I.Type) throws -> I {
        let start = reader.offset
        if I.isSigned {
            let value = try reader.signed()
            guard let exact = I(exactly: value) else {
                throw reader.error("\(value) does not fit in \(I.self)", at: start)
            }
            return exact
        }
        let value = try reader.unsigned()
        guard let exact = I(exactly: value) else { throw reader.error("\(value) does not fit in \(I.self)", at: start) }
        return exact
    }

    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        if T.self == String.self { return try reader.string() as! T }
        if T.self == Double.self { return try reader.double() as! T }
        if T.self == Int.self { return try integer(Int.self) as! T }
        if T.self == Bool.self {
            let start = reader.offset
            switch try reader.byte() {
            case 0: return false as! T
            case 1: return true as! T
            case let other: throw reader.error("boolean \(other) is neither 0 nor 1", at: start)
            }
        }
        if T.self == Date.self { return Date(timeIntervalSinceReferenceDate: try reader.double()) as! T }
        if T.self == Int64.self { return try integer(Int64.self) as! T }
        if T.self == Int32.self { return try integer(Int32.self) as! T }
        if T.self == Int16.self { return try integer(Int16.self) as! T }
        if T.self == Int8.self { return try integer(Int8.self) as! T }
        if T.self == UInt.self { return try integer(UInt.self) as! T }
        if T.self == UInt64.self { return try integer(UInt64.self) as! T }
        if T.self == UInt32.self { return try integer(UInt32.self) as! T }
        if T.self == UInt16.self { return try integer(UInt16.self) as! T }
        if T.self == UInt8.self { return try integer(UInt8.self) as! T }
        if T.self == Float.self { return Float(bitPattern: try reader.fixed32()) as! T }
        let key = ObjectIdentifier(T.self)
        let kind: Kind
        if let known = kinds[key] {
            kind = known
        } else {
            if let value = T.self as? any BinarySnapshotValue.Type, value.binaryFormSince <= reader.version {
                kind = .value(value)
            } else if let collection = T.self as? any BinaryCodableCollection.Type {
                kind = .collection(collection)
            } else if let concurrent = T.self as? any BinaryFieldsDecodedConcurrently.Type {
                kind = .concurrent(concurrent.concurrentFields)
            } else {
                kind = .codable
            }
            kinds[key] = kind
        }
        switch kind {
        case .value(let value): return try value.init(binary: self) as! T
        case .collection(let collection): return try collection.decodeBinary(from: self) as! T
        case .codable: return try T(from: self)
        case .concurrent(let fields):
            pendingConcurrent = fields
            defer { pendingConcurrent = nil }
            return try T(from: self)
        }
    }

    /// Decodes `wanted` (those of `fields` that are there and not empty) on threads of their
    /// own, the longest first, each with a reader of its own over the same bytes and string
    /// table; every value must use exactly its field's length. The first error in field
    /// order is thrown.
    fileprivate func decodeConcurrently(
        _ wanted: [BinaryConcurrentField], in fields: [BinaryField]
    ) throws -> [String: any Sendable] {
        let jobs = wanted.compactMap { job in
            fields.first { $0.key == job.key && $0.length > 0 }.map { (job: job, field: $0) }
        }.sorted { $0.field.length > $1.field.length }
        let reader = self.reader
        let results = Mutex<[Int: Result<any Sendable, any Error>]>([:])
        DispatchQueue.concurrentPerform(iterations: jobs.count) { index in
            let (job, field) = jobs[index]
            var forked = reader
            forked.seek(field.offset)
            let decoder = BinaryDecoding(reader: forked)
            let result = Result { () throws -> any Sendable in
                let value = try job.decode(decoder)
                guard decoder.reader.offset == field.offset + field.length else {
                    throw decoder.reader.error(
                        "field '\(field.key)' is \(field.length) bytes long but its value took \(decoder.reader.offset - field.offset)",
                        at: field.offset)
                }
                return value
            }
            results.withLock { $0[index] = result }
        }
        var values: [String: any Sendable] = [:]
        let outcomes = results.withLock { $0 }
        for (index, entry) in jobs.enumerated().sorted(by: { $0.element.field.offset < $1.element.field.offset }) {
            switch outcomes[index] {
            case .success(let value)?: values[entry.job.key] = value
            case .failure(let error)?: throw error
            case nil: throw reader.error("field '\(entry.field.key)' was not decoded", at: entry.field.offset)
            }
        }
        return values
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(try BinaryKeyedDecoding<Key>(decoder: self))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer { try BinaryUnkeyedDecoding(decoder: self) }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { BinarySingleValueDecoding(decoder: self) }
}

/// A struct's fields: found by a scan when the container opens (so any order works and unknown
/// fields are skipped), each read in place; the reader is left after the struct.
/// A field of a struct as the scan found it (outside the generic container: its metadata was
/// instantiated on every access, 6 % of a restart).
private struct BinaryField {
    var key: String
    var offset: Int
    var length: Int
}

/// A struct whose fields a binary snapshot decodes side by side, each on a thread of its own:
/// a restart decoded a million subjects' state on one core while the other waited. The bytes
/// are the ordinary struct's (any version reads them); only how they are read changes.
protocol BinaryFieldsDecodedConcurrently: Decodable {
    /// The fields worth a thread: each by its name and the type of its value (the wrapped type
    /// for an optional field). A field not named, or absent, is read as usual.
    static var concurrentFields: [BinaryConcurrentField] { get }
}

/// One field ``BinaryFieldsDecodedConcurrently`` reads ahead: its name and how to read it.
struct BinaryConcurrentField: Sendable {
    let key: String
    let decode: @Sendable (BinaryDecoding) throws -> any Sendable

    init<T: Decodable & Sendable>(_ key: String, _ type: T.Type) {
        self.key = key
        decode = { try $0.decodeValue(T.self) }
    }
}

private final class BinaryKeyedDecoding<Key: CodingKey>: KeyedDecodingContainerProtocol {
    typealias Field = BinaryField

    let decoder: BinaryDecoding
    @exclusivity(unchecked) var fields: [Field] = []
    /// Where the struct ends: the reader goes back there after each field.
    @exclusivity(unchecked) var end = 0
    /// Where the next field in written order is: synthesized decoders read in that order.
    @exclusivity(unchecked) var next = 0
    /// Fields already decoded side by side (``BinaryFieldsDecodedConcurrently``), by name.
    @exclusivity(unchecked) var prefetched: [String: any Sendable] = [:]
    var codingPath: [any CodingKey] { [] }

    init(decoder: BinaryDecoding) throws {
        self.decoder = decoder
        let start = decoder.reader.offset
        let count = Int(try decoder.reader.fixed32())
        // A field is at least a key index and a length.
        guard count <= (Int.max / 5), count * 5 <= decoder.reader.remaining else {
            throw decoder.reader.error("a struct of \(count) fields does not fit in the rest of the file", at: start)
        }
        fields.reserveCapacity(count)
        for _ in 0..<count {
            let key = try decoder.reader.string()
            let length = try decoder.reader.length()
            fields.append(Field(key: key, offset: decoder.reader.offset, length: length))
            decoder.reader.seek(decoder.reader.offset + length)
        }
        end = decoder.reader.offset
        if let concurrent = decoder.takeConcurrentFields() {
            prefetched = try decoder.decodeConcurrently(concurrent, in: fields)
        }
    }

    var allKeys: [Key] { fields.compactMap { Key(stringValue: $0.key) } }

    private func find(_ key: Key) -> Int? {
        let name = key.stringValue
        if next < fields.count, fields[next].key == name { return next }
        for index in fields.indices where fields[index].key == name { return index }
        return nil
    }

    private func field(_ key: Key) throws -> Field {
        guard let index = find(key) else {
            throw decoder.reader.error("no field '\(key.stringValue)' in the struct")
        }
        next = index + 1
        return fields[index]
    }

    func contains(_ key: Key) -> Bool { find(key) != nil }

    func decodeNil(forKey key: Key) throws -> Bool { try field(key).length == 0 }

    /// Reads a field's value where it is, checks that it used exactly its length, and puts the
    /// reader back after the struct.
    private func inField<T>(_ key: Key, _ body: () throws -> T) throws -> T {
        let field = try field(key)
        decoder.reader.seek(field.offset)
        let value = try body()
        guard decoder.reader.offset == field.offset + field.length else {
            throw decoder.reader.error(
                "field '\(field.key)' is \(field.length) bytes long but its value took \(decoder.reader.offset - field.offset)",
                at: field.offset)
        }
        decoder.reader.seek(end)
        return value
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        if let value = prefetched.removeValue(forKey: key.stringValue) {
            _ = try field(key)
            guard let value = value as? T else {
                throw decoder.reader.error(
                    "field '\(key.stringValue)' was read ahead as \(Swift.type(of: value)), not \(T.self)")
            }
            return value
        }
        return try inField(key) { try decoder.decodeValue(T.self) }
    }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type, forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        try inField(key) { KeyedDecodingContainer(try BinaryKeyedDecoding<NestedKey>(decoder: decoder)) }
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        let field = try field(key)
        decoder.reader.seek(field.offset)
        defer { decoder.reader.seek(end) }
        return try BinaryUnkeyedDecoding(decoder: decoder)
    }

    func superDecoder() throws -> any Decoder { try superDecoder(forKey: Key(stringValue: "super")!) }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        decoder.reader.seek(try field(key).offset)
        return decoder
    }
}

/// A sequence: a count, then the elements one after the other.
private final class BinaryUnkeyedDecoding: UnkeyedDecodingContainer {
    let decoder: BinaryDecoding
    let count: Int?
    private(set) var currentIndex = 0
    /// Where the next element starts.
    var cursor: Int
    var codingPath: [any CodingKey] { [] }

    init(decoder: BinaryDecoding) throws {
        self.decoder = decoder
        let start = decoder.reader.offset
        let count = Int(try decoder.reader.fixed32())
        guard count <= decoder.reader.remaining else {
            throw decoder.reader.error("a sequence of \(count) does not fit in the rest of the file", at: start)
        }
        self.count = count
        cursor = decoder.reader.offset
    }

    var isAtEnd: Bool { currentIndex >= count ?? 0 }

    private func element<T>(_ body: () throws -> T) throws -> T {
        guard !isAtEnd else { throw decoder.reader.error("read past the end of a sequence of \(count ?? 0)") }
        decoder.reader.seek(cursor)
        let value = try body()
        cursor = decoder.reader.offset
        currentIndex += 1
        return value
    }

    func decodeNil() throws -> Bool { false }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try element { try decoder.decodeValue(T.self) } }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey>
    {
        try element { KeyedDecodingContainer(try BinaryKeyedDecoding<NestedKey>(decoder: decoder)) }
    }

    func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try element { try BinaryUnkeyedDecoding(decoder: decoder) }
    }

    func superDecoder() throws -> any Decoder {
        try element { decoder }
    }
}

private struct BinarySingleValueDecoding: SingleValueDecodingContainer {
    let decoder: BinaryDecoding
    var codingPath: [any CodingKey] { [] }

    /// Optionals are read by ``BinaryCodableCollection``: a bare value is never nil.
    func decodeNil() -> Bool { false }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decodeValue(T.self) }
}

/// Readers the hand-written forms (``BinarySnapshotValue``) call with concrete types, so that
/// the compiler specializes them: through ``BinaryDecoding/decodeValue(_:)`` every optional
/// date of a million tracks found its type's kind in a dictionary at run time. The bytes are
/// the same as the generic path's (``BinaryCodableCollection``).
extension BinaryDecoding {
    func date() throws -> Date { Date(timeIntervalSinceReferenceDate: try reader.double()) }

    func bool() throws -> Bool {
        let start = reader.offset
        switch try reader.byte() {
        case 0: return false
        case 1: return true
        case let other: throw reader.error("boolean \(other) is neither 0 nor 1", at: start)
        }
    }

    func int() throws -> Int {
        let start = reader.offset
        let value = try reader.signed()
        guard let exact = Int(exactly: value) else { throw reader.error("\(value) does not fit in Int", at: start) }
        return exact
    }

    /// The presence byte of an optional.
    func present() throws -> Bool {
        let start = reader.offset
        switch try reader.byte() {
        case 0: return false
        case 1: return true
        case let other: throw reader.error("optional marker \(other) is neither 0 nor 1", at: start)
        }
    }

    func optional<T>(_ read: () throws -> T) throws -> T? { try present() ? try read() : nil }

    func optional<V: BinarySnapshotValue>(_ type: V.Type) throws -> V? {
        try present() ? try V(binary: self) : nil
    }

    func array<V: BinarySnapshotValue>(of type: V.Type) throws -> [V] {
        let count = try reader.count(minimumElementSize: 1)
        var array: [V] = []
        array.reserveCapacity(count)
        for _ in 0..<count { array.append(try V(binary: self)) }
        return array
    }

    func dictionary<V: BinarySnapshotValue>(of type: V.Type) throws -> [String: V] {
        let start = reader.offset
        let count = try reader.count(minimumElementSize: 2)
        var dictionary: [String: V] = Dictionary(minimumCapacity: count)
        for _ in 0..<count {
            let key = try reader.string()
            dictionary[key] = try V(binary: self)
        }
        guard dictionary.count == count else { throw reader.error("a dictionary of \(count) repeats keys", at: start) }
        return dictionary
    }

    /// ``dictionary(of:)``'s form read into a ``SmallMap`` (no hash table for a map of a few).
    func smallMap<V: BinarySnapshotValue>(of type: V.Type) throws -> SmallMap<V> {
        let start = reader.offset
        let count = try reader.count(minimumElementSize: 2)
        var map = SmallMap<V>()
        for _ in 0..<count {
            let key = try reader.string()
            map[key] = try V(binary: self)
        }
        guard map.count == count else { throw reader.error("a dictionary of \(count) repeats keys", at: start) }
        return map
    }
}
