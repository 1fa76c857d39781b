/// A beacon region ready for matching: the region and its checked constraint.
public struct BeaconRegion: Sendable {
    public var region: Region
    public var spec: BeaconRegionSpec

    /// Nil when the region is not a beacon region or its `properties.beacon` is invalid (the
    /// region parser has already reported why).
    public init?(_ region: Region) {
        guard case .beacon(let value) = region.shape, case .success(let spec) = BeaconRegionSpec.parse(value) else {
            return nil
        }
        self.region = region
        self.spec = spec
    }

    public var id: String { region.id }
}

/// Finds every beacon region whose constraint a concrete beacon satisfies, through hash indexes:
/// one lookup on the identity's prefix (uuid / namespace / id1), then at most two lookups on its
/// parts. Never a scan over regions, so the cost does not grow with the number of regions.
public struct BeaconMatcher: Sendable {
    /// The regions, by slot (slots are stable while the matcher lives; removed ones leave a hole).
    public private(set) var regions: [BeaconRegion?] = []
    /// Per slot, for the hot path without copying regions: the RSSI floor (−∞ when none, +∞
    /// for a removed slot, so nothing counts) and whether the region has a dwell time.
    public private(set) var rssiFloors: [Double] = []
    public private(set) var hasDwell: [Bool] = []
    private var slotByID: [String: Int] = [:]
    private var byPrefix: [PrefixKey: PrefixEntry] = [:]

    struct PrefixKey: Hashable, Sendable {
        var format: BeaconFormat
        var prefix: BeaconPrefix
    }

    /// The constraints that share one prefix, by how much of the identity they pin.
    struct PrefixEntry: Sendable {
        var wildcard: [Int32] = []
        var byPart2: [UInt64: [Int32]] = [:]
        var byParts: [Parts: [Int32]] = [:]

        var isEmpty: Bool { wildcard.isEmpty && byPart2.isEmpty && byParts.isEmpty }
    }

    struct Parts: Hashable, Sendable {
        var part2: UInt64
        var part3: UInt64
    }

    public init(_ regions: [Region] = []) {
        for region in regions { upsert(region) }
    }

    /// A matcher with exactly these slots (nil: a removed region's hole), as ``slotted`` gave them.
    public init(slotted: [Region?]) {
        for region in slotted {
            if let region, upsert(region) { continue }
            regions.append(nil)
            rssiFloors.append(.infinity)
            hasDwell.append(false)
        }
    }

    /// The regions by slot, holes included: what ``init(slotted:)`` rebuilds from.
    public var slotted: [Region?] { regions.map { $0?.region } }

    public var count: Int { slotByID.count }

    public subscript(id: String) -> BeaconRegion? { slotByID[id].flatMap { regions[$0] } }

    public func slot(of id: String) -> Int? { slotByID[id] }

    /// The id of the region in `slot`, without copying the region; nil for a removed one.
    public func regionID(slot: Int) -> String? { regions[slot]?.region.id }

    /// How much of an identity the constraint in `slot` pins (0 for a removed one).
    public func specificity(slot: Int) -> Int { regions[slot]?.spec.constraint.specificity ?? 0 }

    /// Adds or replaces a beacon region (ignores other regions); returns whether it was taken.
    @discardableResult
    public mutating func upsert(_ region: Region) -> Bool {
        guard let prepared = BeaconRegion(region) else { return false }
        let slot: Int
        if let existing = slotByID[region.id] {
            unindex(slot: existing)
            slot = existing
            regions[slot] = prepared
        } else {
            slot = regions.count
            regions.append(prepared)
            rssiFloors.append(0)
            hasDwell.append(false)
            slotByID[region.id] = slot
        }
        rssiFloors[slot] = prepared.spec.minRssi ?? -.infinity
        hasDwell[slot] = region.dwellAfter != nil
        let constraint = prepared.spec.constraint
        let key = PrefixKey(format: constraint.format, prefix: constraint.prefix)
        var entry = byPrefix[key] ?? PrefixEntry()
        switch (constraint.part2, constraint.part3) {
        case (nil, _): entry.wildcard.append(Int32(slot))
        case (let part2?, nil): entry.byPart2[part2, default: []].append(Int32(slot))
        case (let part2?, let part3?): entry.byParts[Parts(part2: part2, part3: part3), default: []].append(Int32(slot))
        }
        byPrefix[key] = entry
        return true
    }

    /// Removes a region; returns whether it was there.
    @discardableResult
    public mutating func remove(id: String) -> Bool {
        guard let slot = slotByID.removeValue(forKey: id) else { return false }
        unindex(slot: slot)
        regions[slot] = nil
        rssiFloors[slot] = .infinity
        hasDwell[slot] = false
        return true
    }

    private mutating func unindex(slot: Int) {
        guard let constraint = regions[slot]?.spec.constraint else { return }
        let key = PrefixKey(format: constraint.format, prefix: constraint.prefix)
        guard var entry = byPrefix[key] else { return }
        let target = Int32(slot)
        entry.wildcard.removeAll { $0 == target }
        if let part2 = constraint.part2 {
            if let part3 = constraint.part3 {
                let parts = Parts(part2: part2, part3: part3)
                entry.byParts[parts]?.removeAll { $0 == target }
                if entry.byParts[parts]?.isEmpty == true { entry.byParts[parts] = nil }
            } else {
                entry.byPart2[part2]?.removeAll { $0 == target }
                if entry.byPart2[part2]?.isEmpty == true { entry.byPart2[part2] = nil }
            }
        }
        byPrefix[key] = entry.isEmpty ? nil : entry
    }

    /// Calls `body` with the slot of every region `identity` satisfies, least specific first.
    @inline(__always)
    public func forEachMatch(_ identity: BeaconIdentity, _ body: (Int) -> Void) {
        guard let entry = byPrefix[PrefixKey(format: identity.format, prefix: identity.prefix)] else { return }
        for slot in entry.wildcard { body(Int(slot)) }
        if !entry.byPart2.isEmpty, let slots = entry.byPart2[identity.part2] {
            for slot in slots { body(Int(slot)) }
        }
        if !entry.byParts.isEmpty, let slots = entry.byParts[Parts(part2: identity.part2, part3: identity.part3)] {
            for slot in slots { body(Int(slot)) }
        }
    }

    /// The slots of every region `identity` satisfies, least specific first.
    public func matches(_ identity: BeaconIdentity) -> [Int] {
        var result: [Int] = []
        forEachMatch(identity) { result.append($0) }
        return result
    }

    /// The ids of every region `identity` satisfies, sorted.
    public func regionIDs(matching identity: BeaconIdentity) -> [String] {
        matches(identity).compactMap { regions[$0]?.id }.sorted()
    }
}
