/// A map from subject ids to one concern's per-subject state, without a dictionary's empty buckets.
///
/// A `Dictionary` keeps its keys and values in arrays as long as its hash table, which doubles
/// when it is three quarters full: 20,000 subjects sit in 32,768 buckets, so every byte of a value
/// costs 1.6–2 bytes (`bench restart`: a geofence or visit track of ~140 B took ~250 B). Here the
/// keys and values are dense arrays as long as the count (grown by half when full), and the hash
/// table (open addressing, linear probing) holds only 4-byte positions into them.
///
/// Iteration is in insertion order, except that removing an entry moves the last one into its
/// place; as with a dictionary, nothing may depend on it. Its snapshot forms (`Codable`'s and the
/// binary one) are `[String: Value]`'s, so snapshots read either.
public struct SubjectTable<Value> {
    private var keyArray: ContiguousArray<String> = []
    private var valueArray: ContiguousArray<Value> = []
    /// Per bucket, the position of its entry plus one; 0 is an empty bucket. Empty or a power of
    /// two at most three quarters full.
    private var buckets: ContiguousArray<UInt32> = []

    public init() {}

    public init(minimumCapacity: Int) {
        reserveCapacity(minimumCapacity)
    }

    public var count: Int { keyArray.count }

    public var isEmpty: Bool { keyArray.isEmpty }

    /// The subject ids, in iteration order.
    public var keys: ContiguousArray<String> { keyArray }

    /// The values, in iteration order.
    public var values: ContiguousArray<Value> { valueArray }

    /// Room for `capacity` entries without growing: the entries' arrays exactly, the hash table
    /// to the power of two that keeps it at most three quarters full.
    public mutating func reserveCapacity(_ capacity: Int) {
        if keyArray.capacity < capacity {
            keyArray.reserveCapacity(capacity)
            valueArray.reserveCapacity(capacity)
        }
        let needed = Self.bucketCount(for: capacity)
        if needed > buckets.count { rehash(bucketCount: needed) }
    }

    public subscript(key: String) -> Value? {
        get { position(of: key).map { valueArray[$0] } }
        set {
            if let newValue {
                if let position = position(of: key) {
                    valueArray[position] = newValue
                } else {
                    append(key, newValue)
                }
            } else {
                removeValue(forKey: key)
            }
        }
    }

    public subscript(key: String, default defaultValue: @autoclosure () -> Value) -> Value {
        get { position(of: key).map { valueArray[$0] } ?? defaultValue() }
        _modify {
            let position = position(of: key) ?? append(key, defaultValue())
            yield &valueArray[position]
        }
    }

    /// Removes `key`'s entry; the last entry takes its place in the arrays.
    @discardableResult
    public mutating func removeValue(forKey key: String) -> Value? {
        guard let (bucket, position) = find(key), let position else { return nil }
        let removed = valueArray[position]
        deleteBucket(bucket)
        let last = keyArray.count - 1
        if position != last {
            let moved = bucketHolding(last)
            keyArray.swapAt(position, last)
            valueArray.swapAt(position, last)
            buckets[moved] = UInt32(position + 1)
        }
        keyArray.removeLast()
        valueArray.removeLast()
        return removed
    }

    /// A dictionary with the same entries.
    public var dictionary: [String: Value] {
        Dictionary(uniqueKeysWithValues: zip(keyArray, valueArray))
    }

    // MARK: - Hash table

    private static func bucketCount(for capacity: Int) -> Int {
        var count = 8
        while capacity * 4 > count * 3 { count *= 2 }
        return count
    }

    private var mask: Int { buckets.count - 1 }

    private func ideal(_ key: String) -> Int { key.hashValue & mask }

    private func position(of key: String) -> Int? {
        guard let (_, position) = find(key) else { return nil }
        return position
    }

    /// The bucket that holds `key`, or the empty one where it would go; nil before any entry.
    private func find(_ key: String) -> (bucket: Int, position: Int?)? {
        guard !buckets.isEmpty else { return nil }
        var bucket = ideal(key)
        while true {
            let slot = buckets[bucket]
            if slot == 0 { return (bucket, nil) }
            if keyArray[Int(slot) - 1] == key { return (bucket, Int(slot) - 1) }
            bucket = (bucket + 1) & mask
        }
    }

    /// The bucket that points at the entry at `position`.
    private func bucketHolding(_ position: Int) -> Int {
        var bucket = ideal(keyArray[position])
        while buckets[bucket] != UInt32(position + 1) { bucket = (bucket + 1) & mask }
        return bucket
    }

    @discardableResult
    private mutating func append(_ key: String, _ value: Value) -> Int {
        if buckets.isEmpty || (keyArray.count + 1) * 4 > buckets.count * 3 {
            rehash(bucketCount: Self.bucketCount(for: keyArray.count + 1))
        }
        if keyArray.count == keyArray.capacity {
            let grown = Swift.max(8, keyArray.count + keyArray.count / 2)
            keyArray.reserveCapacity(grown)
            valueArray.reserveCapacity(grown)
        }
        guard let (bucket, _) = find(key) else { preconditionFailure("a table with entries has buckets") }
        let position = keyArray.count
        keyArray.append(key)
        valueArray.append(value)
        buckets[bucket] = UInt32(position + 1)
        return position
    }

    private mutating func rehash(bucketCount: Int) {
        buckets = ContiguousArray(repeating: 0, count: bucketCount)
        for (position, key) in keyArray.enumerated() {
            var bucket = ideal(key)
            while buckets[bucket] != 0 { bucket = (bucket + 1) & mask }
            buckets[bucket] = UInt32(position + 1)
        }
    }

    /// Empties `bucket`, moving later entries of the same probe run back so that every entry
    /// stays reachable from its ideal bucket (backward-shift deletion, no tombstones).
    private mutating func deleteBucket(_ bucket: Int) {
        var hole = bucket
        var next = (bucket + 1) & mask
        while buckets[next] != 0 {
            let home = ideal(keyArray[Int(buckets[next]) - 1])
            // The entry at `next` may move into the hole when the hole lies on its probe path.
            if (next - home) & mask >= (next - hole) & mask {
                buckets[hole] = buckets[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        buckets[hole] = 0
    }
}

extension SubjectTable: Sequence {
    public struct Iterator: IteratorProtocol {
        fileprivate let table: SubjectTable
        fileprivate var position = 0

        public mutating func next() -> (key: String, value: Value)? {
            guard position < table.keyArray.count else { return nil }
            defer { position += 1 }
            return (table.keyArray[position], table.valueArray[position])
        }
    }

    public func makeIterator() -> Iterator { Iterator(table: self) }

    public var underestimatedCount: Int { count }
}

extension SubjectTable: ExpressibleByDictionaryLiteral {
    public init(dictionaryLiteral elements: (String, Value)...) {
        self.init(minimumCapacity: elements.count)
        for (key, value) in elements { self[key] = value }
    }
}

extension SubjectTable {
    public init(_ dictionary: [String: Value]) {
        self.init(minimumCapacity: dictionary.count)
        for (key, value) in dictionary { append(key, value) }
    }
}

extension SubjectTable: Sendable where Value: Sendable {}

extension SubjectTable: Equatable where Value: Equatable {
    public static func == (lhs: Self, rhs: Self) -> Bool {
        guard lhs.count == rhs.count else { return false }
        return lhs.allSatisfy { rhs[$0.key] == $0.value }
    }
}

extension SubjectTable: Hashable where Value: Hashable {
    /// Independent of the order of the entries, as equality is.
    public func hash(into hasher: inout Hasher) {
        var combined = 0
        for (key, value) in self {
            var entry = Hasher()
            entry.combine(key)
            entry.combine(value)
            combined ^= entry.finalize()
        }
        hasher.combine(count)
        hasher.combine(combined)
    }
}

extension SubjectTable: Codable where Value: Codable {
    public init(from decoder: any Decoder) throws {
        self.init(try [String: Value](from: decoder))
    }

    public func encode(to encoder: any Encoder) throws {
        try dictionary.encode(to: encoder)
    }
}

extension SubjectTable: BinaryCodableCollection where Value: Codable {
    func encodeBinary(into encoder: BinaryEncoding) throws {
        try encoder.writePairs(zip(keyArray, valueArray).lazy.map { (key: $0, value: $1) }, count: count)
    }

    static func decodeBinary(from decoder: BinaryDecoding) throws -> Self {
        let start = decoder.reader.offset
        let count = try decoder.reader.count(minimumElementSize: 2)
        var table = Self(minimumCapacity: count)
        for _ in 0..<count {
            let key = try decoder.reader.string()
            table[key] = try decoder.decodeValue(Value.self)
        }
        guard table.count == count else {
            throw decoder.reader.error("a dictionary of \(count) repeats keys", at: start)
        }
        return table
    }
}
