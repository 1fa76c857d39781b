/// A set of ids that almost always holds one: the agents observing a subject (a phone observes
/// itself), the subjects an agent observes, the places a subject is inside.
///
/// `Set<String>` puts even one element in a hash table on the heap (~100 B with its header);
/// at a million subjects, each in two such sets, that was a fifth of the evaluator's memory. One
/// id is kept inline (a short id takes no allocation at all), two or more in a `Set`. Its
/// snapshot forms (`Codable`'s and the binary one) are `Set<String>`'s, so snapshots read either.
public struct IDSet: Sendable, Hashable {
    /// Invariant: `.many` holds at least two ids, so equal sets have equal storage.
    private enum Storage: Sendable, Hashable {
        case empty
        case one(String)
        case many(Set<String>)
    }

    private var storage: Storage = .empty

    public init() {}

    public init<S: Sequence>(_ ids: S) where S.Element == String {
        for id in ids { insert(id) }
    }

    public var isEmpty: Bool {
        if case .empty = storage { return true }
        return false
    }

    public var count: Int {
        switch storage {
        case .empty: 0
        case .one: 1
        case .many(let set): set.count
        }
    }

    public func contains(_ id: String) -> Bool {
        switch storage {
        case .empty: false
        case .one(let only): only == id
        case .many(let set): set.contains(id)
        }
    }

    /// Adds `id`; true when it was not there.
    @discardableResult
    public mutating func insert(_ id: String) -> Bool {
        switch storage {
        case .empty:
            storage = .one(id)
            return true
        case .one(let only):
            guard only != id else { return false }
            storage = .many([only, id])
            return true
        case .many(var set):
            storage = .empty  // the set is uniquely held while it changes
            let inserted = set.insert(id).inserted
            storage = .many(set)
            return inserted
        }
    }

    /// Removes `id`; true when it was there.
    @discardableResult
    public mutating func remove(_ id: String) -> Bool {
        switch storage {
        case .empty:
            return false
        case .one(let only):
            guard only == id else { return false }
            storage = .empty
            return true
        case .many(var set):
            storage = .empty
            let removed = set.remove(id) != nil
            storage = set.count == 1 ? .one(set.first!) : .many(set)
            return removed
        }
    }
}

extension IDSet: Sequence {
    public func makeIterator() -> AnyIterator<String> {
        switch storage {
        case .empty: return AnyIterator { nil }
        case .one(let only):
            var done = false
            return AnyIterator {
                defer { done = true }
                return done ? nil : only
            }
        case .many(let set):
            var iterator = set.makeIterator()
            return AnyIterator { iterator.next() }
        }
    }

    public var underestimatedCount: Int { count }
}

extension IDSet: ExpressibleByArrayLiteral {
    public init(arrayLiteral ids: String...) { self.init(ids) }
}

extension IDSet: Codable {
    public init(from decoder: any Decoder) throws {
        self.init(try Set<String>(from: decoder))
    }

    public func encode(to encoder: any Encoder) throws {
        try Set(self).encode(to: encoder)
    }
}

extension IDSet: BinaryCodableCollection {
    func encodeBinary(into encoder: BinaryEncoding) throws { try encoder.writeElements(self, count: count) }

    static func decodeBinary(from decoder: BinaryDecoding) throws -> Self {
        let start = decoder.reader.offset
        let count = try decoder.reader.count(minimumElementSize: 1)
        var ids = IDSet()
        for _ in 0..<count { ids.insert(try decoder.decodeValue(String.self)) }
        guard ids.count == count else { throw decoder.reader.error("a set of \(count) repeats elements", at: start) }
        return ids
    }
}
