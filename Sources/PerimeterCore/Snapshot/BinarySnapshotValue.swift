import Foundation

/// A type with a hand-written binary form: the per-subject state a restart reads a million of.
///
/// Through `Codable` every field costs a key lookup, a length and a generic call: `perf` on
/// `bench restart` (100,000 subjects) put 89 % of the restart in the generic decoder, 40 % of
/// it in geofence tracks and 20 % in visit tracks. These types write their fields in a fixed
/// order instead, nested values through the same coder. Whoever adds a field to one of them
/// adds it here too: `BinarySnapshotTests.handWrittenFields` counts the fields and fails
/// until this file is updated (and ``VenueEvaluator/snapshotFormatVersion`` bumped).
protocol BinarySnapshotValue {
    func writeBinary(to encoder: BinaryEncoding) throws
    init(binary decoder: BinaryDecoding) throws
    /// The format version that introduced this form: files of older versions hold the type in
    /// its generic keyed `Codable` form, which is read (and written, for such a version) instead.
    static var binaryFormSince: UInt32 { get }
}

extension BinarySnapshotValue {
    static var binaryFormSince: UInt32 { 1 }
}

extension BinaryDecoding {
    /// A value of an enum written as its name (`rawValue`); an unknown name is an error naming it.
    func named<T: RawRepresentable>(_ type: T.Type, _ what: String) throws -> T where T.RawValue == String {
        let start = reader.offset
        let text = try reader.string()
        guard let value = T(rawValue: text) else { throw reader.error("'\(text)' is not \(what)", at: start) }
        return value
    }
}

extension GeoPoint: BinarySnapshotValue {
    func writeBinary(to encoder: BinaryEncoding) throws {
        encoder.writer.double(lon)
        encoder.writer.double(lat)
    }

    init(binary decoder: BinaryDecoding) throws {
        let lon = try decoder.reader.double()
        self.init(lon: lon, lat: try decoder.reader.double())
    }
}

extension Fix: BinarySnapshotValue {
    func writeBinary(to encoder: BinaryEncoding) throws {
        encoder.writer.string(subject)
        try encoder.encodeValue(t)
        try position.writeBinary(to: encoder)
        try encoder.encodeValue(accuracy)
        try encoder.encodeValue(floor)
        encoder.writer.string(source)
    }

    init(binary decoder: BinaryDecoding) throws {
        let subject = try decoder.reader.string()
        let t = try decoder.date()
        let position = try GeoPoint(binary: decoder)
        let accuracy = try decoder.optional { try decoder.reader.double() }
        let floor = try decoder.optional { try decoder.int() }
        self.init(
            subject: subject, t: t, position: position, accuracy: accuracy, floor: floor,
            source: try decoder.reader.string())
    }
}

extension Membership: BinarySnapshotValue {
    func writeBinary(to encoder: BinaryEncoding) throws {
        try encoder.encodeValue(state)
        try encoder.encodeValue(lastKnown)
        try encoder.encodeValue(pending)
        try encoder.encodeValue(enteredAt)
        try encoder.encodeValue(insideSince)
        try encoder.encodeValue(dwellFired)
        try encoder.encodeValue(seq)
        try encoder.encodeValue(epoch)
    }

    init(binary decoder: BinaryDecoding) throws {
        self.init()
        state = try MembershipState(binary: decoder)
        lastKnown = try decoder.optional(MembershipState.self)
        pending = try decoder.optional { try decoder.decodeValue(Pending.self) }
        enteredAt = try decoder.optional(decoder.date)
        insideSince = try decoder.optional(decoder.date)
        dwellFired = try decoder.bool()
        seq = try decoder.int()
        epoch = try decoder.optional(decoder.int)
    }
}

extension GeofenceEngine.Track: BinarySnapshotValue {
    func writeBinary(to encoder: BinaryEncoding) throws {
        try encoder.encodeValue(lastFix)
        try encoder.encodeValue(lastTime)
        try encoder.encodeValue(lastEmitted)
        try encoder.encodeValue(stale)
        try encoder.encodeValue(memberships)
    }

    init(binary decoder: BinaryDecoding) throws {
        self.init()
        lastFix = try decoder.optional(Fix.self)
        lastTime = try decoder.optional(decoder.date)
        lastEmitted = try decoder.optional(decoder.date)
        stale = try decoder.bool()
        memberships = try decoder.smallMap(of: Membership.self)
    }
}

extension VisitDetector.Cluster: BinarySnapshotValue {
    func writeBinary(to encoder: BinaryEncoding) throws {
        try origin.writeBinary(to: encoder)
        try encoder.encodeValue(first)
        try encoder.encodeValue(last)
        try encoder.encodeValue(count)
        encoder.writer.double(sumX)
        encoder.writer.double(sumY)
        encoder.writer.double(sumSquares)
        encoder.writer.double(sumAccuracy)
        try encoder.encodeValue(accuracies)
        encoder.writer.string(source)
    }

    init(binary decoder: BinaryDecoding) throws {
        let origin = try GeoPoint(binary: decoder)
        let first = try decoder.date()
        self.init(Fix(subject: "", t: first, position: origin))
        self.origin = origin
        self.first = first
        last = try decoder.date()
        count = try decoder.int()
        sumX = try decoder.reader.double()
        sumY = try decoder.reader.double()
        sumSquares = try decoder.reader.double()
        sumAccuracy = try decoder.reader.double()
        accuracies = try decoder.int()
        source = try decoder.reader.string()
    }
}

extension VisitDetector.Track: BinarySnapshotValue {
    func writeBinary(to encoder: BinaryEncoding) throws {
        try stay.writeBinary(to: encoder)
        try encoder.encodeValue(confirmed)
        try encoder.encodeValue(next)
        try encoder.encodeValue(outsideSince)
        try encoder.encodeValue(seq)
        try encoder.encodeValue(lastFix)
    }

    init(binary decoder: BinaryDecoding) throws {
        let stay = try VisitDetector.Cluster(binary: decoder)
        let confirmed = try decoder.bool()
        let next = try decoder.optional(VisitDetector.Cluster.self)
        let outsideSince = try decoder.optional(decoder.date)
        let seq = try decoder.int()
        self.init(
            stay: stay, confirmed: confirmed, next: next, outsideSince: outsideSince, seq: seq,
            lastFix: try decoder.date())
    }
}

extension MembershipState: BinarySnapshotValue {
    func writeBinary(to encoder: BinaryEncoding) throws { encoder.writer.string(rawValue) }

    init(binary decoder: BinaryDecoding) throws { self = try decoder.named(Self.self, "a membership state") }
}

extension BeaconEngine.HeardBeacon: BinarySnapshotValue {
    func writeBinary(to encoder: BinaryEncoding) throws {
        try encoder.encodeValue(identity)
        try encoder.encodeValue(slots)
        try encoder.encodeValue(generation)
        encoder.writer.double(lastSeen)
        try encoder.encodeValue(tx1m)
        try encoder.encodeValue(samples)
    }

    init(binary decoder: BinaryDecoding) throws {
        let identity = try decoder.decodeValue(BeaconIdentity.self)
        let slots = try decoder.decodeValue([Int32].self)
        let generation = try decoder.int()
        let lastSeen = try decoder.reader.double()
        let tx1m = try decoder.optional { try decoder.reader.double() }
        self.init(
            identity: identity, slots: slots, generation: generation, lastSeen: lastSeen, tx1m: tx1m,
            samples: try decoder.decodeValue(RSSISamples.self))
    }
}

extension BeaconEngine.RegionState: BinarySnapshotValue {
    func writeBinary(to encoder: BinaryEncoding) throws {
        try encoder.encodeValue(slot)
        try membership.writeBinary(to: encoder)
        encoder.writer.double(lastMatch)
        try encoder.encodeValue(strongest)
        encoder.writer.double(strongestRSSI)
        encoder.writer.double(strongestAt)
    }

    init(binary decoder: BinaryDecoding) throws {
        let slot = try decoder.decodeValue(Int32.self)
        let membership = try Membership(binary: decoder)
        let lastMatch = try decoder.reader.double()
        let strongest = try decoder.optional { try decoder.decodeValue(BeaconIdentity.self) }
        let strongestRSSI = try decoder.reader.double()
        self.init(
            slot: slot, membership: membership, lastMatch: lastMatch, strongest: strongest,
            strongestRSSI: strongestRSSI, strongestAt: try decoder.reader.double())
    }
}

extension BeaconEngine.ScannerSubject: BinarySnapshotValue {
    func writeBinary(to encoder: BinaryEncoding) throws {
        encoder.writer.string(id)
        try encoder.encodeValue(beacons)
        try encoder.encodeValue(regions)
        encoder.writer.double(lastReport)
        encoder.writer.double(lastRanging)
        try encoder.encodeValue(stale)
        try encoder.encodeValue(closest)
    }

    init(binary decoder: BinaryDecoding) throws {
        let id = try decoder.reader.string()
        let beacons = try decoder.array(of: BeaconEngine.HeardBeacon.self)
        let regions = try decoder.array(of: BeaconEngine.RegionState.self)
        let lastReport = try decoder.reader.double()
        let lastRanging = try decoder.reader.double()
        let stale = try decoder.bool()
        self.init(
            id: id, beacons: beacons, regions: regions, lastReport: lastReport, lastRanging: lastRanging, stale: stale,
            closest: try decoder.optional { try decoder.decodeValue(Closest.self) })
    }
}

// Since format version 2: the privacy gate's per-subject records (a million of each with a
// million consenting subjects: through `Codable` they were over a third of a restart's decoding).

extension AuthorizationRecord: BinarySnapshotValue {
    static var binaryFormSince: UInt32 { 2 }

    func writeBinary(to encoder: BinaryEncoding) throws {
        try status.writeBinary(to: encoder)
        try encoder.encodeValue(reducedAccuracy)
        try encoder.encodeValue(temporary)
        try encoder.encodeValue(temporaryFullAccuracy)
    }

    init(binary decoder: BinaryDecoding) throws {
        let status = try AuthorizationStatus(binary: decoder)
        let reducedAccuracy = try decoder.bool()
        let temporary = try decoder.bool()
        self.init(
            status: status, reducedAccuracy: reducedAccuracy, temporary: temporary,
            temporaryFullAccuracy: try decoder.optional { try decoder.reader.string() })
    }
}

extension AuthorizationStatus: BinarySnapshotValue {
    static var binaryFormSince: UInt32 { 2 }

    func writeBinary(to encoder: BinaryEncoding) throws { encoder.writer.string(rawValue) }

    init(binary decoder: BinaryDecoding) throws { self = try decoder.named(Self.self, "an authorization status") }
}

extension PrivacyGate.UsageMark: BinarySnapshotValue {
    static var binaryFormSince: UInt32 { 2 }

    func writeBinary(to encoder: BinaryEncoding) throws {
        try encoder.encodeValue(t)
        try encoder.encodeValue(inUse)
        try encoder.encodeValue(background)
    }

    init(binary decoder: BinaryDecoding) throws {
        let t = try decoder.date()
        let inUse = try decoder.bool()
        self.init(t: t, inUse: inUse, background: try decoder.bool())
    }
}

extension Fingerprint: BinarySnapshotValue {
    static var binaryFormSince: UInt32 { 2 }

    func writeBinary(to encoder: BinaryEncoding) throws { try encoder.encodeValue(value) }

    init(binary decoder: BinaryDecoding) throws { self.init(value: try decoder.decodeValue(UInt64.self)) }
}

extension JSONText: BinarySnapshotValue {
    static var binaryFormSince: UInt32 { 1 }  // the same bytes as the single string it always was

    func writeBinary(to encoder: BinaryEncoding) throws { encoder.writer.string(text) }

    init(binary decoder: BinaryDecoding) throws { self.init(text: try decoder.reader.string()) }
}
