import Foundation
import Testing

@testable import PerimeterCore

/// The compact forms of per-subject state (``IDSet``, ``JSONText``, ``OutOfLine``, ``SubjectTable``,
/// ``PrivacyGate/UsageMarks``): the same
/// semantics as what they replace, and the same stored forms, so snapshots read either way.
@Suite("Compact per-subject state")
struct CompactStateTests {
    /// A step on a set and what the set holds after it, in order.
    enum Step: CustomStringConvertible {
        case insert(String, inserted: Bool)
        case remove(String, removed: Bool)
        var description: String {
            switch self {
            case .insert(let id, let inserted): "insert \(id) → \(inserted)"
            case .remove(let id, let removed): "remove \(id) → \(removed)"
            }
        }
    }

    static let scripts: [[(Step, Set<String>)]] = [
        [(.insert("a", inserted: true), ["a"]), (.insert("a", inserted: false), ["a"])],
        [(.remove("a", removed: false), [])],
        [
            (.insert("a", inserted: true), ["a"]), (.remove("b", removed: false), ["a"]),
            (.remove("a", removed: true), []),
        ],
        [
            (.insert("a", inserted: true), ["a"]), (.insert("b", inserted: true), ["a", "b"]),
            (.insert("b", inserted: false), ["a", "b"]), (.insert("c", inserted: true), ["a", "b", "c"]),
            (.remove("b", removed: true), ["a", "c"]), (.remove("a", removed: true), ["c"]),
            (.remove("a", removed: false), ["c"]), (.insert("a", inserted: true), ["a", "c"]),
            (.remove("c", removed: true), ["a"]), (.remove("a", removed: true), []),
        ],
        [
            (
                .insert("a-subject-id-longer-than-fifteen-bytes", inserted: true),
                ["a-subject-id-longer-than-fifteen-bytes"]
            ),
            (.insert("gw", inserted: true), ["a-subject-id-longer-than-fifteen-bytes", "gw"]),
            (.remove("a-subject-id-longer-than-fifteen-bytes", removed: true), ["gw"]),
        ],
    ]

    @Test("IDSet behaves as Set<String> step by step", arguments: scripts.indices)
    func idSetSteps(script: Int) {
        var ids = IDSet()
        for (step, expected) in Self.scripts[script] {
            switch step {
            case .insert(let id, let inserted): #expect(ids.insert(id) == inserted, "\(step)")
            case .remove(let id, let removed): #expect(ids.remove(id) == removed, "\(step)")
            }
            #expect(Set(ids) == expected, "after \(step)")
            #expect(ids.count == expected.count && ids.isEmpty == expected.isEmpty, "after \(step)")
            for id in ["a", "b", "c", "gw"] {
                #expect(ids.contains(id) == expected.contains(id), "\(id) after \(step)")
            }
            // Equal contents, equal sets, however they were reached.
            #expect(ids == IDSet(expected.sorted()), "after \(step)")
            #expect(ids.hashValue == IDSet(expected.sorted()).hashValue, "after \(step)")
        }
    }

    @Test("IDSet's stored forms are Set<String>'s, both ways", arguments: [[], ["a"], ["a", "b", "c"]] as [[String]])
    func idSetStoredForms(ids: [String]) throws {
        let set = Set(ids)
        let compact = IDSet(ids)
        // Binary snapshot: written by either, read by the other.
        let fromSet = try BinarySnapshotEncoder().encode(["s": set], version: 1)
        let fromCompact = try BinarySnapshotEncoder().encode(["s": compact], version: 1)
        #expect(
            try BinarySnapshotDecoder().decode([String: IDSet].self, from: fromSet, source: "test", versions: 1...1)
                .value["s"] == compact)
        #expect(
            try BinarySnapshotDecoder().decode(
                [String: Set<String>].self, from: fromCompact, source: "test", versions: 1...1
            ).value["s"] == set)
        // JSON (snapshots from before the binary format).
        let json = try JSONEncoder().encode(["s": set])
        #expect(try JSONDecoder().decode([String: IDSet].self, from: json)["s"] == compact)
        #expect(
            try JSONDecoder().decode([String: Set<String>].self, from: JSONEncoder().encode(["s": compact]))["s"] == set
        )
    }

    @Test("a repeated id in a stored set is refused, not silently merged")
    func idSetRepeats() throws {
        let bytes = try BinarySnapshotEncoder().encode(["a", "a"], version: 1)
        #expect(throws: (any Error).self) {
            try BinarySnapshotDecoder().decode(IDSet.self, from: bytes, source: "test", versions: 1...1).value
        }
    }

    @Test("JSONText keeps the document and reads what JSONValue wrote, including the older structural form")
    func jsonText() throws {
        let record: JSONValue = ["status": "always", "accuracy": "full"]
        let text = JSONText(record)
        #expect(text.value == record)
        let written = try BinarySnapshotEncoder().encode(["x": record], version: 1)
        #expect(
            try BinarySnapshotDecoder().decode([String: JSONText].self, from: written, source: "test", versions: 1...1)
                .value["x"] == text)
        let back = try BinarySnapshotEncoder().encode(["x": text], version: 1)
        #expect(
            try BinarySnapshotDecoder().decode([String: JSONValue].self, from: back, source: "test", versions: 1...1)
                .value["x"] == record)
        // The synthesized form JSONValue had before it was written as text.
        let legacy = #"{"x":{"object":{"_0":{"keys":["inUse"],"storage":{"inUse":{"bool":{"_0":true}}}}}}}"#
        let decoded = try JSONDecoder().decode([String: JSONText].self, from: Data(legacy.utf8))
        #expect(decoded["x"]?.value == ["inUse": true])
        // Text that is not JSON (a damaged snapshot) reads as null, never a crash.
        let damaged = try BinarySnapshotEncoder().encode(["x": "{not json"], version: 1)
        #expect(
            try BinarySnapshotDecoder().decode([String: JSONText].self, from: damaged, source: "test", versions: 1...1)
                .value["x"]?.value == .null)
    }

    @Test("a membership's pending change and a visit's next cluster keep their stored key out of line")
    func outOfLine() throws {
        var membership = Membership(seq: 3)
        #expect(membership.pending == nil)
        membership.pending = .init(
            state: .inside, since: Date(timeIntervalSince1970: 10), evidence: Evidence(source: "timer"))
        var copy = membership
        copy.pending?.since = Date(timeIntervalSince1970: 20)
        #expect(membership.pending?.since == Date(timeIntervalSince1970: 10), "a copy's change leaves the original")
        #expect(copy.pending?.since == Date(timeIntervalSince1970: 20))
        let json = String(decoding: try JSONEncoder().encode(membership), as: UTF8.self)
        #expect(json.contains(#""pending":"#) && !json.contains("Box"), "\(json)")
        let back = try JSONDecoder().decode(Membership.self, from: Data(json.utf8))
        #expect(back.pending?.state == .inside && back.seq == 3)
        #expect(MemoryLayout<Membership>.size <= 80, "\(MemoryLayout<Membership>.size) B inline")
        #expect(MemoryLayout<VisitDetector.Track>.size <= 160, "\(MemoryLayout<VisitDetector.Track>.size) B inline")
    }

    @Test(
        "SmallMap answers as [String: Int] through random sets, removals and growth past its limit",
        arguments: [(seed: 1, keys: 3), (seed: 2, keys: 8), (seed: 3, keys: 9), (seed: 4, keys: 40)] as [(UInt64, Int)])
    func smallMapAgainstDictionary(seed: UInt64, keys: Int) {
        var random = SplitMix64(seed: seed)
        var map = SmallMap<Int>()
        var reference: [String: Int] = [:]
        var largest = 0
        for step in 0..<2_000 {
            let key = "r\(Int.random(in: 0..<keys, using: &random))"
            switch Int.random(in: 0..<4, using: &random) {
            case 0:
                #expect(map.removeValue(forKey: key) == reference.removeValue(forKey: key), "step \(step)")
            case 1:
                map[key] = nil
                reference[key] = nil
            default:
                map[key] = step
                reference[key] = step
            }
            largest = max(largest, reference.count)
            #expect(map.count == reference.count && map[key] == reference[key], "step \(step)")
        }
        #expect(map.dictionary == reference)
        #expect(Set(map.keys) == Set(reference.keys))
        #expect(Dictionary(uniqueKeysWithValues: map.map { ($0.key, $0.value) }) == reference)
        #expect(keys <= SmallMap<Int>.limit || largest > SmallMap<Int>.limit, "the run grew the map past its limit")
    }

    @Test("SmallMap's stored forms are [String: V]'s, both ways", arguments: [0, 1, 3, 12])
    func smallMapStoredForms(count: Int) throws {
        let dictionary = Dictionary(uniqueKeysWithValues: (0..<count).map { ("k\($0)", $0) })
        let map = SmallMap(dictionary)
        let fromMap = try BinarySnapshotEncoder().encode(map, version: 1)
        let fromDictionary = try BinarySnapshotEncoder().encode(dictionary, version: 1)
        #expect(
            try BinarySnapshotDecoder().decode([String: Int].self, from: fromMap, source: "test", versions: 1...1).value
                == dictionary)
        #expect(
            try BinarySnapshotDecoder().decode(
                SmallMap<Int>.self, from: fromDictionary, source: "test", versions: 1...1
            ).value.dictionary == dictionary)
        let json = try JSONEncoder().encode(map)
        #expect(try JSONDecoder().decode([String: Int].self, from: json) == dictionary)
        #expect(
            try JSONDecoder().decode(SmallMap<Int>.self, from: JSONEncoder().encode(dictionary)).dictionary
                == dictionary)
    }

    @Test(
        "SubjectTable answers as [String: Int] through random sets, removals, defaults and growth",
        arguments: [(seed: 1, keys: 5), (seed: 2, keys: 60), (seed: 3, keys: 700), (seed: 4, keys: 3_000)]
            as [(UInt64, Int)])
    func subjectTableAgainstDictionary(seed: UInt64, keys: Int) {
        var random = SplitMix64(seed: seed)
        var table = SubjectTable<Int>()
        var reference: [String: Int] = [:]
        var largest = 0
        for step in 0..<8_000 {
            let key = "s\(Int.random(in: 0..<keys, using: &random))"
            switch Int.random(in: 0..<6, using: &random) {
            case 0:
                #expect(table.removeValue(forKey: key) == reference.removeValue(forKey: key), "step \(step)")
            case 1:
                table[key] = nil
                reference[key] = nil
            case 2:
                table[key, default: -1] += 1
                reference[key, default: -1] += 1
            default:
                table[key] = step
                reference[key] = step
            }
            largest = max(largest, reference.count)
            #expect(table.count == reference.count && table[key] == reference[key], "step \(step)")
        }
        // Every key still reachable after the removals' backward shifts, none left over.
        for index in 0..<keys { #expect(table["s\(index)"] == reference["s\(index)"], "s\(index)") }
        #expect(table.dictionary == reference)
        #expect(Set(table.keys) == Set(reference.keys) && table.keys.count == table.count)
        #expect(Dictionary(uniqueKeysWithValues: table.map { ($0.key, $0.value) }) == reference)
        #expect(keys < 100 || largest > 64, "the run grew the table past a few rehashes")
    }

    @Test("SubjectTable: equal contents are equal and hash alike whatever the order they came in")
    func subjectTableEquality() {
        let entries = (0..<50).map { ("s\($0)", $0) }
        var forward = SubjectTable<Int>()
        for (key, value) in entries { forward[key] = value }
        var backward = SubjectTable<Int>()
        for (key, value) in entries.reversed() { backward[key] = value }
        backward["extra"] = 1
        backward["extra"] = nil
        #expect(forward == backward)
        #expect(forward.hashValue == backward.hashValue)
        backward["s7"] = 8
        #expect(forward != backward)
    }

    @Test("SubjectTable's stored forms are [String: V]'s, both ways", arguments: [0, 1, 3, 200])
    func subjectTableStoredForms(count: Int) throws {
        let dictionary = Dictionary(uniqueKeysWithValues: (0..<count).map { ("k\($0)", $0) })
        let table = SubjectTable(dictionary)
        let fromTable = try BinarySnapshotEncoder().encode(table, version: 2)
        let fromDictionary = try BinarySnapshotEncoder().encode(dictionary, version: 2)
        #expect(
            try BinarySnapshotDecoder().decode([String: Int].self, from: fromTable, source: "test", versions: 2...2)
                .value == dictionary)
        #expect(
            try BinarySnapshotDecoder().decode(
                SubjectTable<Int>.self, from: fromDictionary, source: "test", versions: 2...2
            ).value == table)
        let json = try JSONEncoder().encode(table)
        #expect(try JSONDecoder().decode([String: Int].self, from: json) == dictionary)
        #expect(try JSONDecoder().decode(SubjectTable<Int>.self, from: JSONEncoder().encode(dictionary)) == table)
    }

    @Test("a repeated key in a stored table is refused, not silently merged")
    func subjectTableRepeats() throws {
        let pairs: [(key: String, value: Int)] = [("a", 1), ("a", 2)]
        let encoder = BinarySnapshotEncoder()
        let bytes = try encoder.encode(PairsForTest(pairs: pairs), version: 2)
        #expect(throws: (any Error).self) {
            try BinarySnapshotDecoder().decode(SubjectTable<Int>.self, from: bytes, source: "test", versions: 2...2)
                .value
        }
    }

    @Test(
        "usage marks kept inline for one are [UsageMark]'s in every stored form",
        arguments: [0, 1, 2, 5])
    func usageMarks(count: Int) throws {
        let marks = (0..<count).map {
            PrivacyGate.UsageMark(t: Date(timeIntervalSince1970: Double($0)), inUse: $0 % 2 == 0, background: false)
        }
        let compact = PrivacyGate.UsageMarks(marks)
        #expect(compact.count == count && compact.array.map(\.t) == marks.map(\.t))
        #expect(compact.last?.t == marks.last?.t && compact.lastIndex { $0.inUse } == marks.lastIndex { $0.inUse })
        for version: UInt32 in [1, 2] {
            let fromArray = try BinarySnapshotEncoder().encode(marks, version: version)
            let read = try BinarySnapshotDecoder().decode(
                PrivacyGate.UsageMarks.self, from: fromArray, source: "test", versions: version...version
            ).value
            #expect(read.map(\.t) == marks.map(\.t) && read.map(\.inUse) == marks.map(\.inUse), "version \(version)")
            let fromCompact = try BinarySnapshotEncoder().encode(compact, version: version)
            #expect(fromCompact == fromArray, "version \(version): the same bytes as the array's")
        }
        let sorted = JSONEncoder()
        sorted.outputFormatting = .sortedKeys
        let json = try sorted.encode(compact)
        #expect(json == (try sorted.encode(marks)))
        #expect(try JSONDecoder().decode(PrivacyGate.UsageMarks.self, from: json).map(\.t) == marks.map(\.t))
    }
}

/// A dictionary's binary form with a repeated key (no `Dictionary` can hold one).
private struct PairsForTest: Encodable, BinaryCodableCollection {
    let pairs: [(key: String, value: Int)]

    func encode(to encoder: any Encoder) throws {}

    func encodeBinary(into encoder: BinaryEncoding) throws { try encoder.writePairs(pairs, count: pairs.count) }

    static func decodeBinary(from decoder: BinaryDecoding) throws -> Self { Self(pairs: []) }
}
