import Foundation
import Testing

@testable import PerimeterCore

private let epoch = Date(timeIntervalSince1970: 1_700_000_000)
private func at(_ seconds: Double) -> Date { epoch.addingTimeInterval(seconds) }

private let hallFeature = #"""
    {"type":"Feature","id":"hall","properties":{"radius":30,"place":true},"geometry":{"type":"Point","coordinates":[2.336,48.86]}}
    """#
private let lobbyFeature = #"""
    {"type":"Feature","id":"lobby","properties":{"beacon":{"uuid":"2f234454-cf6d-4a0f-adf2-f4911ba9ffa6","major":1}},"geometry":null}
    """#
private func region(_ json: String) -> Region {
    RegionParser.parseFeature(try! JSONParser.parse(json), index: 0).1!
}
private let inHall = GeoPoint(lon: 2.336, lat: 48.86)
private let awayFromHall = GeoPoint(lon: 2.34, lat: 48.86)

/// Every shape the snapshot types use, in one value.
private struct Sample: Codable, Equatable {
    enum Kind: Codable, Equatable {
        case empty
        case one(Int32)
        case pair(name: String, at: Date)
    }

    var text: String
    var integers: [Int64]
    var unsigned: UInt64
    var small: Int8
    var flags: [Bool]
    var doubles: [Double]
    var date: Date
    var maybe: String?
    var maybeNot: Double? = nil
    var optionals: [Int?]
    var nested: [[String: Set<String>]]
    var byNumber: [Int: String]
    var kinds: [Kind]
    var json: JSONValue

    static func == (lhs: Sample, rhs: Sample) -> Bool {
        // NaN is not equal to itself: compare doubles by bit pattern.
        lhs.text == rhs.text && lhs.integers == rhs.integers && lhs.unsigned == rhs.unsigned && lhs.small == rhs.small
            && lhs.flags == rhs.flags && lhs.doubles.map(\.bitPattern) == rhs.doubles.map(\.bitPattern)
            && lhs.date == rhs.date && lhs.maybe == rhs.maybe && lhs.maybeNot == rhs.maybeNot
            && lhs.optionals == rhs.optionals && lhs.nested == rhs.nested && lhs.byNumber == rhs.byNumber
            && lhs.kinds == rhs.kinds && lhs.json == rhs.json
    }
}

private let samples: [Sample] = [
    Sample(
        text: "", integers: [], unsigned: 0, small: 0, flags: [], doubles: [], date: epoch, maybe: nil, optionals: [],
        nested: [], byNumber: [:], kinds: [], json: .null),
    Sample(
        text: "salle des États — 展示室 🏛", integers: [0, 1, -1, 63, -64, 64, .max, .min], unsigned: .max, small: -128,
        flags: [true, false], doubles: [0, -0.0, 1.5, .infinity, -.infinity, .nan, .leastNonzeroMagnitude],
        date: Date(timeIntervalSince1970: -1e9), maybe: "present", maybeNot: 2.5, optionals: [1, nil, 3],
        nested: [["hall": ["v1", "v2"], "lobby": []], [:]], byNumber: [1: "one", -7: "minus seven"],
        kinds: [.empty, .one(.min), .pair(name: "hall", at: epoch)],
        json: ["status": "always", "n": 3, "list": [true, .null]]),
]

/// One kind of evaluator state: an evaluator and a day of inputs (`nil` input: a tick).
struct StateKind: CustomTestStringConvertible, Sendable {
    var name: String
    var make: @Sendable () -> VenueEvaluator
    var steps: [(Inbound?, String?, Double)]
    var testDescription: String { name }

    static func apply(_ venue: inout VenueEvaluator, _ step: (Inbound?, String?, Double)) -> [EvaluatorOutput] {
        guard let input = step.0 else { return venue.tick(now: at(step.2)) }
        return (try? venue.handle(input, agent: step.1, receivedAt: at(step.2)).get()) ?? []
    }

    static let all: [StateKind] = [
        StateKind(
            name: "geofence tracks, beacon scanners, gateways, region changes, offline agents",
            make: { VenueEvaluatorTests.evaluator(staleAfter: 60) },
            steps: VenueSnapshotTests.inputs()),
        StateKind(
            name: "privacy: authorization, sessions, usage, held events (provisionalAlways) delivered on upgrade",
            make: {
                var settings = VenueSettings(id: "museum")
                settings.trust.reporters = [try! ReporterRule.make(agent: "phone", subjects: ["*"]).get()]
                return VenueEvaluator(settings: settings, regions: [region(hallFeature), region(lobbyFeature)])
            },
            steps: {
                var steps: [(Inbound?, String?, Double)] = [
                    (.session(consumer: "guide", session: "s", ["subjects": "*", "level": "always"]), nil, 0),
                    (.authorization(subject: "v1", ["status": "provisionalAlways"]), nil, 0),
                    (.authorization(subject: "v2", ["status": "whenInUse", "accuracy": "reduced"]), nil, 0),
                    (.usage(subject: "v2", ["inUse": true]), nil, 0),
                ]
                for minute in 0..<12 {
                    let t = Double(minute) * 60 + 1
                    for subject in ["v1", "v2", "v3"] {
                        let position = minute % 4 < 2 ? inHall : awayFromHall
                        steps.append(
                            (.fix(Fix(subject: subject, t: at(t), position: position, accuracy: 3)), "phone", t))
                    }
                    steps.append((nil, nil, t + 30))
                    if minute == 9 { steps.append((.authorization(subject: "v1", ["status": "always"]), nil, t + 31)) }
                }
                return steps
            }()),
        StateKind(
            name: "visits under way and after departure",
            make: {
                var evaluator = VenueEvaluator(settings: VenueSettings(id: "museum"), regions: [])
                _ = evaluator.handle(
                    .authorization(subject: "ann", ["status": "always"]), agent: nil, receivedAt: epoch)
                _ = evaluator.handle(
                    .session(consumer: "guide", session: "s", ["subjects": "*", "level": "always"]), agent: nil,
                    receivedAt: epoch)
                return evaluator
            },
            steps: (0...16).flatMap { minute -> [(Inbound?, String?, Double)] in
                let t = Double(minute) * 60
                let fix = Fix(subject: "ann", t: at(t), position: minute <= 11 ? inHall : awayFromHall, accuracy: 5)
                return [(.fix(fix), "ann", t), (nil, nil, t + 1)]
            }),
        StateKind(
            name: "live streams and their rate limits",
            make: {
                var settings = VenueSettings(id: "museum")
                settings.locationServices.live.minInterval = 5
                settings.trust.reporters = [try! ReporterRule.make(agent: "phone", subjects: ["*"]).get()]
                var evaluator = VenueEvaluator(settings: settings, regions: [])
                _ = evaluator.handle(
                    .authorization(subject: "ann", ["status": "always", "accuracy": "reduced"]), agent: nil,
                    receivedAt: epoch)
                _ = evaluator.handle(
                    .session(consumer: "guide", session: "s", ["subjects": "*", "level": "always", "live": true]),
                    agent: nil, receivedAt: epoch)
                return evaluator
            },
            steps: (0..<30).flatMap { second -> [(Inbound?, String?, Double)] in
                let t = Double(second) * 1.5
                let fix = Fix(subject: "ann", t: at(t), position: inHall, accuracy: 5)
                return second == 20
                    ? [(.session(consumer: "guide", session: "s", nil), nil, t)]
                    : [(.fix(fix), "phone", t), (nil, nil, t + 0.5)]
            }),
    ]
}

@Suite("Binary snapshots")
struct BinarySnapshotTests {
    @Test("every shape round-trips exactly", arguments: samples.indices)
    func roundTrip(index: Int) throws {
        let bytes = try BinarySnapshotEncoder().encode(samples[index], version: 3)
        let (back, version) = try BinarySnapshotDecoder().decode(
            Sample.self, from: bytes, source: "sample", versions: 1...3)
        #expect(back == samples[index])
        #expect(version == 3)
    }

    /// (type, fields it has, fields its binary form writes).
    static func handWritten() -> [(String, Int, Int)] {
        let fix = Fix(subject: "s", t: epoch, position: inHall)
        let cluster = VisitDetector.Cluster(fix)
        let uuid = BeaconPrefix(uuid: "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6")!
        let identity = BeaconIdentity.iBeacon(uuid: uuid, major: 1, minor: 2)
        let heard = BeaconEngine.HeardBeacon(identity: identity, slots: [], generation: 0, lastSeen: 0)
        func fields(_ value: Any) -> Int { Mirror(reflecting: value).children.count }
        var rows: [(String, Int, Int)] = []
        rows.append(("GeoPoint", fields(inHall), 2))
        rows.append(("Fix", fields(fix), 6))
        rows.append(("Membership", fields(Membership()), 8))
        rows.append(("GeofenceEngine.Track", fields(GeofenceEngine.Track()), 5))
        rows.append(("VisitDetector.Cluster", fields(cluster), 10))
        rows.append(("VisitDetector.Track", fields(VisitDetector.Track(stay: cluster, lastFix: epoch)), 6))
        rows.append(("BeaconEngine.ScannerSubject", fields(BeaconEngine.ScannerSubject(id: "s")), 7))
        rows.append(("BeaconEngine.RegionState", fields(BeaconEngine.RegionState(slot: 0)), 6))
        rows.append(("BeaconEngine.HeardBeacon", fields(heard), 6))
        rows.append(("AuthorizationRecord", fields(AuthorizationRecord(status: .always)), 4))
        rows.append(
            ("PrivacyGate.UsageMark", fields(PrivacyGate.UsageMark(t: epoch, inUse: true, background: false)), 3))
        rows.append(("Fingerprint", fields(Fingerprint(value: 1)), 1))
        rows.append(("JSONText", fields(JSONText(.null)), 1))
        return rows
    }

    @Test(
        "the types with a hand-written binary form have the fields it writes (a new field fails here until BinarySnapshotValue.swift writes it)",
        arguments: handWritten())
    func handWrittenFields(type: String, fields: Int, written: Int) {
        #expect(fields == written, "\(type) has \(fields) fields; its binary form writes \(written)")
    }

    @Test("repeated strings are stored once")
    func interning() throws {
        let ids = (0..<1000).map { _ in "a-region-id-longer-than-sixteen-bytes" }
        let bytes = try BinarySnapshotEncoder().encode(ids, version: 1)
        #expect(bytes.count < 1000 * 2 + 100, "\(bytes.count) bytes")
    }

    @Test("a snapshot restored from the binary format continues exactly like the original", arguments: StateKind.all)
    func continuesExactly(kind: StateKind) throws {
        let steps = kind.steps
        var outputsAfterCuts = 0
        for cut in [0, steps.count / 3, steps.count / 2, 2 * steps.count / 3, steps.count] {
            var original = kind.make()
            for step in steps.prefix(cut) { _ = StateKind.apply(&original, step) }
            let bytes = try VenueEvaluator.encodeSnapshot(original.snapshot)
            #expect(BinaryFormat.isBinary(bytes))
            let snapshot = try VenueEvaluator.decodeSnapshot(VenueEvaluator.Snapshot.self, from: bytes, source: "test")
            var restored = VenueEvaluator(settings: original.settings, restoring: snapshot)
            var expected: [EvaluatorOutput] = []
            var actual: [EvaluatorOutput] = []
            for step in steps.dropFirst(cut) {
                expected += StateKind.apply(&original, step)
                actual += StateKind.apply(&restored, step)
            }
            #expect(actual == expected, "cut at \(cut) of \(steps.count)")
            outputsAfterCuts += expected.count
            // Encoded again, the restored state is the same size: nothing was lost or doubled.
            #expect(
                try VenueEvaluator.encodeSnapshot(restored.snapshot).count
                    == VenueEvaluator.encodeSnapshot(original.snapshot).count)
        }
        #expect(outputsAfterCuts > 0, "the inputs after the cuts produced nothing to compare")
    }

    @Test(
        "a version 1 snapshot (the privacy gate's records in their keyed form) restores to what version 2 does",
        arguments: StateKind.all)
    func readsVersion1(kind: StateKind) throws {
        var original = kind.make()
        let steps = kind.steps
        for step in steps.prefix(steps.count / 2) { _ = StateKind.apply(&original, step) }
        let version1 = try BinarySnapshotEncoder().encode(original.snapshot, version: 1)
        let version2 = try VenueEvaluator.encodeSnapshot(original.snapshot)
        #expect(VenueEvaluator.snapshotFormatVersion == 2)
        #expect(version1 != version2, "the two versions wrote the same bytes: no older form was exercised")
        var fromVersion1 = VenueEvaluator(
            settings: original.settings,
            restoring: try VenueEvaluator.decodeSnapshot(VenueEvaluator.Snapshot.self, from: version1, source: "v1"))
        var fromVersion2 = VenueEvaluator(
            settings: original.settings,
            restoring: try VenueEvaluator.decodeSnapshot(VenueEvaluator.Snapshot.self, from: version2, source: "v2"))
        #expect(try VenueEvaluator.encodeSnapshot(fromVersion1.snapshot).count == version2.count)
        var (outputs1, outputs2): ([EvaluatorOutput], [EvaluatorOutput]) = ([], [])
        for step in steps.dropFirst(steps.count / 2) {
            outputs1 += StateKind.apply(&fromVersion1, step)
            outputs2 += StateKind.apply(&fromVersion2, step)
        }
        #expect(outputs1 == outputs2)
        #expect(!outputs2.isEmpty, "the inputs after the cut produced nothing to compare")
    }

    @Test("a venue's fields read side by side are exactly its stored fields, and read back whole")
    func concurrentFields() throws {
        var venue = VenueEvaluatorTests.evaluator(staleAfter: 60)
        for step in VenueSnapshotTests.inputs().prefix(40) { _ = StateKind.apply(&venue, step) }
        let snapshot = venue.snapshot
        let stored = Set(Mirror(reflecting: snapshot).children.compactMap(\.label))
        let named = VenueEvaluator.Snapshot.concurrentFields.map(\.key)
        // A misspelt name is read sequentially without a word: pin the list to the struct.
        #expect(Set(named) == stored)
        #expect(named.count == stored.count, "a field is named twice")
        // Read side by side, written again: as long (a set's order may differ), and so again.
        let bytes = try VenueEvaluator.encodeSnapshot(snapshot)
        let restored = try Self.decode(bytes)
        #expect(try VenueEvaluator.encodeSnapshot(restored).count == bytes.count)
        #expect(!snapshot.inside.isEmpty && restored.inside == snapshot.inside)
    }

    @Test("JSON snapshots from before the binary format are still read (the upgrade path)")
    func readsJSON() throws {
        var original = VenueEvaluatorTests.evaluator(staleAfter: 60)
        let steps = VenueSnapshotTests.inputs()
        for step in steps.prefix(60) { _ = StateKind.apply(&original, step) }
        let json = Array(try VenueEvaluator.snapshotEncoder().encode(original.snapshot))
        let fromJSON = try VenueEvaluator.decodeSnapshot(VenueEvaluator.Snapshot.self, from: json, source: "old")
        let binary = try VenueEvaluator.encodeSnapshot(original.snapshot)
        #expect(binary.count < json.count, "binary \(binary.count) B, JSON \(json.count) B")
        var restored = VenueEvaluator(settings: original.settings, restoring: fromJSON)
        let expected = steps.dropFirst(60).flatMap { StateKind.apply(&original, $0) }
        let actual = steps.dropFirst(60).flatMap { StateKind.apply(&restored, $0) }
        #expect(actual == expected)
    }

    /// A small real snapshot (three subjects' tracks, a scanner, privacy records).
    static func smallSnapshot() throws -> [UInt8] {
        var venue = VenueEvaluatorTests.evaluator(staleAfter: 60)
        for step in VenueSnapshotTests.inputs().prefix(12) { _ = StateKind.apply(&venue, step) }
        return try VenueEvaluator.encodeSnapshot(venue.snapshot)
    }

    static func decode(_ bytes: [UInt8]) throws -> VenueEvaluator.Snapshot {
        try VenueEvaluator.decodeSnapshot(VenueEvaluator.Snapshot.self, from: bytes, source: "the snapshot in test.db")
    }

    @Test("truncated at every byte: a clear error naming the file and an offset, never a crash")
    func truncatedEverywhere() throws {
        let bytes = try Self.smallSnapshot()
        #expect(bytes.count > 200)
        for length in 0..<bytes.count {
            do {
                _ = try Self.decode(Array(bytes.prefix(length)))
                Issue.record("a snapshot cut to \(length) of \(bytes.count) bytes was read")
            } catch let error as SnapshotFormatError {
                #expect(error.source == "the snapshot in test.db")
                #expect((0...bytes.count).contains(error.offset))
                #expect("\(error)".hasPrefix("the snapshot in test.db: byte "))
            }
        }
    }

    /// Rewrites the checksum after a change, as a hostile writer would.
    static func resealed(_ bytes: [UInt8]) -> [UInt8] {
        var bytes = bytes
        let end = bytes.count - 8
        let checksum = BinaryFormat.checksum(bytes[0..<end])
        withUnsafeBytes(of: checksum.littleEndian) { raw in
            for index in 0..<8 { bytes[end + index] = raw[index] }
        }
        return bytes
    }

    /// Damage to a small snapshot: (what is done, the offset reported or nil, the problem named).
    enum Damage: String, CaseIterable, Sendable {
        case badMagic, jsonGarbage, newerVersion, flippedBit, lengthLongerThanFile, bytesAppended

        func apply(_ b: inout [UInt8]) {
            switch self {
            case .badMagic: b[0] = UInt8(ascii: "Q")
            case .jsonGarbage: b = Array("{\"venues\": 3".utf8)
            case .newerVersion: b[8] = 99
            case .flippedBit: b[b.count / 2] ^= 0x10
            case .lengthLongerThanFile:
                b[12] = 0xFF
                b[13] = 0xFF
            case .bytesAppended: b += [0, 0, 0]
            }
        }

        var expected: (offset: Int?, problem: String) {
            switch self {
            case .badMagic: (0, "bad magic")
            case .jsonGarbage: (0, "JSON snapshot")
            case .newerVersion: (8, "format version 99")
            case .flippedBit: (nil, "checksum mismatch")
            case .lengthLongerThanFile: (12, "truncated: the header says")
            case .bytesAppended: (12, "bytes after the end")
            }
        }
    }

    @Test("a damaged header or body is refused with what is wrong and where", arguments: Damage.allCases)
    func damaged(damage: Damage) throws {
        var bytes = try Self.smallSnapshot()
        damage.apply(&bytes)
        let error = try #require(throws: SnapshotFormatError.self, "\(damage)") { try Self.decode(bytes) }
        #expect(error.description.contains(damage.expected.problem), "\(damage): \(error)")
        if let offset = damage.expected.offset { #expect(error.offset == offset, "\(damage): \(error)") }
    }

    /// Bodies that lie about what follows, under a valid checksum (a hostile writer).
    enum Lie: String, CaseIterable, Sendable {
        case hugeStringTable, stringLongerThanFile, hugeStruct, stringIndexPastTable, elevenByteVarint

        func write(_ w: inout BinaryWriter) {
            switch self {
            case .hugeStringTable: w.unsigned(1 << 40)
            case .stringLongerThanFile:
                w.unsigned(1)
                w.unsigned(1 << 30)
            case .hugeStruct:
                w.unsigned(0)
                w.fixed32(1 << 31)
            case .stringIndexPastTable:
                w.unsigned(0)
                w.fixed32(1)
                w.unsigned(5)
                w.fixed32(0)
            case .elevenByteVarint: for _ in 0..<11 { w.byte(0xFF) }
            }
        }

        var problem: String {
            switch self {
            case .hugeStringTable, .stringLongerThanFile, .hugeStruct: "does not fit"
            case .stringIndexPastTable: "not in the table"
            case .elevenByteVarint: "longer than 64 bits"
            }
        }
    }

    @Test(
        "lying counts and lengths under a valid checksum are refused before anything is allocated",
        arguments: Lie.allCases)
    func lying(lie: Lie) throws {
        var writer = BinaryWriter()
        lie.write(&writer)
        // The writer puts its own (empty) string table first: take it out, so that the lie is
        // where the table is read from; then fix the length and the checksum.
        var bytes = writer.finish(version: VenueEvaluator.snapshotFormatVersion)
        bytes.remove(at: BinaryFormat.headerSize)
        withUnsafeBytes(of: UInt64(bytes.count - BinaryFormat.headerSize - 8).littleEndian) { raw in
            for index in 0..<8 { bytes[12 + index] = raw[index] }
        }
        let error = try #require(throws: SnapshotFormatError.self, "\(lie)") { try Self.decode(Self.resealed(bytes)) }
        #expect(error.description.contains(lie.problem), "\(lie): \(error)")
    }

    @Test("every byte of the body overwritten under a valid checksum: an error or a value, never a crash")
    func hostileBytes() throws {
        let bytes = try Self.smallSnapshot()
        var refused = 0
        for offset in BinaryFormat.headerSize..<(bytes.count - 8) {
            for value: UInt8 in [0x00, 0xFF] where bytes[offset] != value {
                var changed = bytes
                changed[offset] = value
                do {
                    _ = try Self.decode(Self.resealed(changed))
                } catch is SnapshotFormatError {
                    refused += 1
                }
            }
        }
        #expect(refused > bytes.count / 2, "only \(refused) changes were noticed")
    }
}
