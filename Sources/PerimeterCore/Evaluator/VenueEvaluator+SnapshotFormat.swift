import Foundation

/// How the evaluator's state is written to and read from its database.
///
/// Written in the binary format (``BinarySnapshotEncoder``) since format version 1; the JSON
/// snapshots written before are still read (``BinaryFormat/isBinary(_:)`` tells them apart), so
/// an upgrade restarts from the snapshot it finds and writes binary from its next one.
extension VenueEvaluator {
    /// The binary snapshot format version written now; bump it when a snapshot type changes in
    /// a way an older reader would misread: a removed or retyped field, or any change to a type
    /// with a hand-written form (``BinarySnapshotValue``: its fields have no keys). Fields added
    /// to the other types need no bump (a struct's fields are keyed: a missing optional field
    /// reads as absent, an unknown one is skipped). After a bump, the hand-written readers read
    /// the new layout only: keep a reader for the old one, or raise the lower bound of the
    /// versions ``decodeSnapshot(_:from:source:)`` accepts so that an old file is refused
    /// with a clear error rather than misread.
    ///
    /// - 1: the first binary format.
    /// - 2: the privacy gate's per-subject records (authorization, usage marks, diagnostics
    ///   fingerprints) in hand-written forms (``BinarySnapshotValue/binaryFormSince``); version 1
    ///   files hold them in the keyed form, which is still read.
    public static let snapshotFormatVersion: UInt32 = 2

    /// A snapshot's bytes in the binary format.
    public static func encodeSnapshot<T: Encodable>(_ snapshot: T) throws -> [UInt8] {
        try BinarySnapshotEncoder().encode(snapshot, version: snapshotFormatVersion)
    }

    /// Reads a snapshot in the binary format or, from before it, JSON.
    /// - Parameter source: names the file in errors.
    /// - Throws: ``SnapshotFormatError`` naming `source`, the byte offset and the problem.
    public static func decodeSnapshot<T: Decodable>(_ type: T.Type, from bytes: [UInt8], source: String) throws -> T {
        if BinaryFormat.isBinary(bytes) {
            return try BinarySnapshotDecoder().decode(
                type, from: bytes, source: source, versions: 1...snapshotFormatVersion
            ).value
        }
        guard bytes.first == UInt8(ascii: "{") else {
            throw SnapshotFormatError(
                source: source, offset: 0, problem: "neither a binary snapshot (bad magic) nor a JSON one")
        }
        do {
            return try snapshotDecoder().decode(type, from: Data(bytes))
        } catch {
            throw SnapshotFormatError(source: source, offset: 0, problem: "JSON snapshot: \(error)")
        }
    }
}

/// A venue's engines and per-subject tables are independent of each other: a restart reads
/// them on both cores at once (`perimeter bench restart`; the bytes are unchanged).
extension VenueEvaluator.Snapshot: BinaryFieldsDecodedConcurrently {
    static let concurrentFields: [BinaryConcurrentField] = [
        BinaryConcurrentField("regions", [Region].self),
        BinaryConcurrentField("geofences", GeofenceEngine.Snapshot.self),
        BinaryConcurrentField("beacons", BeaconEngine.Snapshot.self),
        BinaryConcurrentField("inside", [String: Set<String>].self),
        BinaryConcurrentField("gpsPlaces", [String: IDSet].self),
        BinaryConcurrentField("places", [String: PlaceAnswer].self),
        BinaryConcurrentField("preferences", [String: SubjectPreferences].self),
        BinaryConcurrentField("observers", SubjectTable<IDSet>.self),
        BinaryConcurrentField("observed", SubjectTable<IDSet>.self),
        BinaryConcurrentField("offline", [String: Date].self),
        BinaryConcurrentField("authorization", SubjectTable<JSONText>.self),
        BinaryConcurrentField("usage", SubjectTable<JSONText>.self),
        BinaryConcurrentField("sessions", [String: JSONValue].self),
        BinaryConcurrentField("privacy", PrivacyGate.State.self),
        BinaryConcurrentField("homeAssistantTrackers", Set<String>.self),
        BinaryConcurrentField("locationServices", LocationServices.State.self),
        BinaryConcurrentField("located", [String: Date].self),
        BinaryConcurrentField("capabilities", [String: Set<String>].self),
        BinaryConcurrentField("fileRegionIDs", Set<String>.self),
    ]
}
