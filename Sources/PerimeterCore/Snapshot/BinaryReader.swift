/// A binary snapshot that cannot be read: which one, where in it, and what is wrong there.
public struct SnapshotFormatError: Error, CustomStringConvertible, Equatable {
    /// What was being read (the snapshot in a database file, say).
    public var source: String
    /// Byte offset in the file where the problem is.
    public var offset: Int
    public var problem: String

    public init(source: String, offset: Int, problem: String) {
        self.source = source
        self.offset = offset
        self.problem = problem
    }

    public var description: String { "\(source): byte \(offset): \(problem)" }
}

/// Reads what ``BinaryWriter`` wrote, checking every length, count and index against the bytes
/// that are there: a truncated, corrupt or hostile file gives a ``SnapshotFormatError`` naming
/// the offset, never a trap or a huge allocation.
public struct BinaryReader: Sendable {
    public let source: String
    public private(set) var version: UInt32
    private let bytes: [UInt8]
    /// End of the body (the checksum follows).
    private var end: Int
    public private(set) var offset: Int
    /// The interned strings, by index.
    private var table: [String] = []

    /// Checks the header, length and checksum, and reads the string table.
    /// - Parameters:
    ///   - source: names the file in errors.
    ///   - versions: the versions this reader understands.
    public init(_ bytes: [UInt8], source: String, versions: ClosedRange<UInt32>) throws {
        self.bytes = bytes
        self.source = source
        offset = 0
        end = 0
        version = 0
        guard bytes.count >= BinaryFormat.headerSize + 8 else {
            throw SnapshotFormatError(
                source: source, offset: bytes.count,
                problem: "truncated: \(bytes.count) bytes, shorter than a header and checksum")
        }
        guard BinaryFormat.isBinary(bytes) else {
            throw SnapshotFormatError(source: source, offset: 0, problem: "not a Perimeter binary snapshot (bad magic)")
        }
        offset = 8
        let version = UInt32(truncatingIfNeeded: try fixed(4))
        guard versions.contains(version) else {
            throw SnapshotFormatError(
                source: source, offset: 8,
                problem: "format version \(version); this version reads \(versions.lowerBound)…\(versions.upperBound)")
        }
        self.version = version
        let length = try fixed(8)
        let expected = UInt64(BinaryFormat.headerSize) &+ length &+ 8
        guard length <= UInt64(bytes.count), expected == UInt64(bytes.count) else {
            throw SnapshotFormatError(
                source: source, offset: min(bytes.count, 12),
                problem: length > UInt64(bytes.count) || expected > UInt64(bytes.count)
                    ? "truncated: the header says \(expected) bytes, the file has \(bytes.count)"
                    : "\(UInt64(bytes.count) - expected) bytes after the end the header gives")
        }
        end = bytes.count - 8
        let stored = bytes.withUnsafeBytes {
            UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: end, as: UInt64.self))
        }
        guard BinaryFormat.checksum(bytes[0..<end]) == stored else {
            throw SnapshotFormatError(source: source, offset: end, problem: "checksum mismatch: the file is corrupt")
        }
        let count = try self.count(minimumElementSize: 1)
        table.reserveCapacity(count)
        for _ in 0..<count {
            let length = try self.count(minimumElementSize: 1, what: "string length")
            table.append(String(decoding: bytes[offset..<offset + length], as: UTF8.self))
            offset += length
        }
    }

    /// A problem at the current offset.
    public func error(_ problem: String, at offset: Int? = nil) -> SnapshotFormatError {
        SnapshotFormatError(source: source, offset: offset ?? self.offset, problem: problem)
    }

    public var isAtEnd: Bool { offset >= end }

    /// Throws unless the body has been read to its end.
    public func expectEnd() throws {
        guard offset == end else { throw error("\(end - offset) bytes left after the snapshot") }
    }

    private mutating func fixed(_ size: Int) throws -> UInt64 {
        guard offset + size <= bytes.count else {
            throw error("truncated: a \(size)-byte field runs past the end")
        }
        var value: UInt64 = 0
        for index in (0..<size).reversed() { value = value << 8 | UInt64(bytes[offset + index]) }
        offset += size
        return value
    }

    public mutating func byte() throws -> UInt8 {
        guard offset < end else { throw error("truncated: a byte runs past the end") }
        defer { offset += 1 }
        return bytes[offset]
    }

    public mutating func fixed32() throws -> UInt32 {
        guard offset + 4 <= end else { throw error("truncated: a 4-byte field runs past the end") }
        return UInt32(truncatingIfNeeded: try fixed(4))
    }

    public mutating func fixed64() throws -> UInt64 {
        guard offset + 8 <= end else { throw error("truncated: an 8-byte field runs past the end") }
        return try fixed(8)
    }

    public mutating func unsigned() throws -> UInt64 {
        let start = offset
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard offset < end else { throw error("truncated: a number runs past the end", at: start) }
            let byte = bytes[offset]
            offset += 1
            guard shift < 64, shift < 63 || byte <= 1 else { throw error("a number longer than 64 bits", at: start) }
            value |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
    }

    public mutating func signed() throws -> Int64 {
        let raw = try unsigned()
        return Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
    }

    public mutating func double() throws -> Double { Double(bitPattern: try fixed64()) }

    public mutating func string() throws -> String {
        let start = offset
        let index = try unsigned()
        guard index < UInt64(table.count) else {
            throw error("string \(index) is not in the table of \(table.count)", at: start)
        }
        return table[Int(index)]
    }

    /// A count of elements at least `minimumElementSize` bytes each: one that could not fit in
    /// the rest of the file is refused before anything is allocated for it.
    public mutating func count(minimumElementSize: Int, what: String = "count") throws -> Int {
        let start = offset
        let value = try unsigned()
        let room = UInt64(end - offset)
        guard value <= room / UInt64(max(minimumElementSize, 1)) else {
            throw error("\(what) \(value) does not fit in the \(room) bytes left", at: start)
        }
        return Int(value)
    }

    /// A `UInt32` length of bytes that follow (they must be there).
    public mutating func length() throws -> Int {
        let start = offset
        let value = Int(try fixed32())
        guard value <= end - offset else {
            throw error("length \(value) runs past the end (\(end - offset) bytes left)", at: start)
        }
        return value
    }

    /// Moves to `offset` (one this reader returned or checked before).
    public mutating func seek(_ offset: Int) { self.offset = offset }
}

extension BinaryReader {
    /// Bytes left before the checksum.
    public var remaining: Int { end - offset }
}
