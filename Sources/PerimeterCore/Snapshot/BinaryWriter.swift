/// Appends the primitives of Perimeter's binary snapshot format to a byte buffer:
/// little-endian fixed-width integers, LEB128 varints (zigzag for signed values), IEEE doubles
/// by bit pattern (±∞ and NaN survive) and strings interned in a table (each distinct string is
/// stored once; a use is its index).
///
/// A file is ``BinaryFormat/magic``, a `UInt32` version, a `UInt64` length of what follows up to
/// the checksum, the string table (count, then each string as length + UTF-8), the body, and a
/// `UInt64` ``BinaryFormat/checksum(_:)`` of everything before it. ``finish(version:)`` puts
/// them together; the body is written first because the table is only known at the end.
public struct BinaryWriter {
    /// The body written so far.
    public private(set) var body: [UInt8] = []
    private var strings: [String: UInt32] = [:]
    private var table: [String] = []

    public init(capacity: Int = 1 << 16) { body.reserveCapacity(capacity) }

    public var count: Int { body.count }

    public mutating func byte(_ value: UInt8) { body.append(value) }

    public mutating func fixed32(_ value: UInt32) {
        withUnsafeBytes(of: value.littleEndian) { body.append(contentsOf: $0) }
    }

    public mutating func fixed64(_ value: UInt64) {
        withUnsafeBytes(of: value.littleEndian) { body.append(contentsOf: $0) }
    }

    /// Overwrites the `UInt32` at `offset` (a count or length known only once what it counts is written).
    public mutating func patch32(_ value: UInt32, at offset: Int) {
        withUnsafeBytes(of: value.littleEndian) { bytes in
            for index in 0..<4 { body[offset + index] = bytes[index] }
        }
    }

    public mutating func unsigned(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            body.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        body.append(UInt8(value))
    }

    public mutating func signed(_ value: Int64) {
        unsigned(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
    }

    public mutating func double(_ value: Double) { fixed64(value.bitPattern) }

    /// A string, as its index in the table.
    public mutating func string(_ value: String) {
        if let index = strings[value] {
            unsigned(UInt64(index))
            return
        }
        let index = UInt32(table.count)
        strings[value] = index
        table.append(value)
        unsigned(UInt64(index))
    }

    /// The whole file: header, string table, body, checksum.
    public func finish(version: UInt32) -> [UInt8] {
        var head = BinaryWriter(capacity: 0)
        head.unsigned(UInt64(table.count))
        for string in table {
            head.unsigned(UInt64(string.utf8.count))
            head.body.append(contentsOf: string.utf8)
        }
        var file: [UInt8] = []
        file.reserveCapacity(BinaryFormat.headerSize + head.count + body.count + 8)
        file.append(contentsOf: BinaryFormat.magic)
        withUnsafeBytes(of: version.littleEndian) { file.append(contentsOf: $0) }
        withUnsafeBytes(of: UInt64(head.count + body.count).littleEndian) { file.append(contentsOf: $0) }
        file.append(contentsOf: head.body)
        file.append(contentsOf: body)
        let checksum = BinaryFormat.checksum(file[...])
        withUnsafeBytes(of: checksum.littleEndian) { file.append(contentsOf: $0) }
        return file
    }
}

/// Constants of the binary snapshot format shared by ``BinaryWriter`` and ``BinaryReader``.
public enum BinaryFormat {
    /// The first eight bytes of every binary snapshot.
    public static let magic: [UInt8] = Array("PRMSNAP\u{1A}".utf8)
    /// Magic, version, payload length.
    public static let headerSize = 8 + 4 + 8

    /// Whether `bytes` start like a binary snapshot (else: a JSON one from before).
    public static func isBinary(_ bytes: [UInt8]) -> Bool {
        bytes.count >= magic.count && bytes[0..<magic.count].elementsEqual(magic)
    }

    /// A 64-bit check of the bytes, eight at a time (multiply, xor-shift): it catches a torn
    /// or flipped write, not an attacker; every field is bounds-checked on reading anyway.
    public static func checksum(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        var hash: UInt64 = 0x9E37_79B9_7F4A_7C15 ^ UInt64(bytes.count)
        bytes.withUnsafeBytes { raw in
            let words = raw.count / 8
            for index in 0..<words {
                let word = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: index * 8, as: UInt64.self))
                hash = (hash ^ word) &* 0xFF51_AFD7_ED55_8CCD
                hash ^= hash >> 32
            }
            var tail: UInt64 = 0
            for index in (words * 8)..<raw.count { tail = tail << 8 | UInt64(raw[index]) }
            hash = (hash ^ tail) &* 0xC4CE_B9FE_1A85_EC53
            hash ^= hash >> 29
        }
        return hash
    }
}
