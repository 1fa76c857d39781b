/// A map from ids to values that usually holds one or two entries: a subject's memberships
/// (the regions it is inside or near).
///
/// A `Dictionary` with one entry is a hash table of two buckets with a header, ~250 B for a
/// membership; in an array the same entry takes ~130 B. Lookups scan the entries while there are
/// at most ``limit``; beyond that (a subject inside many overlapping regions) it is a
/// `Dictionary`, so no lookup costs more than a hash. Iteration order is unspecified, as a
/// dictionary's. Its snapshot forms are `[String: Value]`'s, so snapshots read either.
struct SmallMap<Value> {
    static var limit: Int { 8 }

    fileprivate enum Storage {
        case few(ContiguousArray<(key: String, value: Value)>)
        case many([String: Value])
    }

    private var storage: Storage = .few([])

    init() {}

    init(_ dictionary: [String: Value]) {
        storage = dictionary.count > Self.limit ? .many(dictionary) : .few(ContiguousArray(dictionary.map { ($0, $1) }))
    }

    var count: Int {
        switch storage {
        case .few(let entries): entries.count
        case .many(let dictionary): dictionary.count
        }
    }

    var isEmpty: Bool { count == 0 }

    var keys: [String] {
        switch storage {
        case .few(let entries): entries.map(\.key)
        case .many(let dictionary): Array(dictionary.keys)
        }
    }

    subscript(key: String) -> Value? {
        get {
            switch storage {
            case .few(let entries): entries.first { $0.key == key }?.value
            case .many(let dictionary): dictionary[key]
            }
        }
        set {
            switch storage {
            case .few(var entries):
                storage = .few([])  // the array is uniquely held while it changes
                if let index = entries.firstIndex(where: { $0.key == key }) {
                    if let newValue { entries[index].value = newValue } else { entries.remove(at: index) }
                } else if let newValue {
                    entries.append((key, newValue))
                }
                storage =
                    entries.count > Self.limit
                    ? .many(Dictionary(uniqueKeysWithValues: entries.map { ($0.key, $0.value) })) : .few(entries)
            case .many(var dictionary):
                storage = .few([])
                dictionary[key] = newValue
                storage =
                    dictionary.count > Self.limit
                    ? .many(dictionary) : .few(ContiguousArray(dictionary.map { ($0, $1) }))
            }
        }
    }

    @discardableResult
    mutating func removeValue(forKey key: String) -> Value? {
        let old = self[key]
        if old != nil { self[key] = nil }
        return old
    }

    var dictionary: [String: Value] {
        switch storage {
        case .few(let entries): Dictionary(uniqueKeysWithValues: entries.map { ($0.key, $0.value) })
        case .many(let dictionary): dictionary
        }
    }
}

extension SmallMap: Sequence {
    func makeIterator() -> AnyIterator<(key: String, value: Value)> {
        switch storage {
        case .few(let entries):
            var iterator = entries.makeIterator()
            return AnyIterator { iterator.next() }
        case .many(let dictionary):
            var iterator = dictionary.makeIterator()
            return AnyIterator { iterator.next() }
        }
    }

    var underestimatedCount: Int { count }
}

extension SmallMap: ExpressibleByDictionaryLiteral {
    init(dictionaryLiteral elements: (String, Value)...) {
        self.init(Dictionary(uniqueKeysWithValues: elements))
    }
}

extension SmallMap: Sendable where Value: Sendable {}
extension SmallMap.Storage: Sendable where Value: Sendable {}

extension SmallMap: Codable where Value: Codable {
    init(from decoder: any Decoder) throws { self.init(try [String: Value](from: decoder)) }
    func encode(to encoder: any Encoder) throws { try dictionary.encode(to: encoder) }
}

extension SmallMap: BinaryCodableCollection where Value: Codable {
    func encodeBinary(into encoder: BinaryEncoding) throws { try encoder.writePairs(self, count: count) }

    static func decodeBinary(from decoder: BinaryDecoding) throws -> Self {
        Self(try [String: Value].decodeBinary(from: decoder))
    }
}
