/// Every geographic region of a venue, prepared, behind an R-tree over their boxes.
///
/// Regions can be added, replaced and removed while it serves queries. Each polygon of a
/// MultiPolygon is indexed on its own, and a shape crossing the antimeridian gets one box on
/// each side, so the tree's boxes stay tight.
public struct GeofenceIndex: Sendable {
    /// Prepared regions by slot; a removed region leaves a nil slot that a later one reuses.
    private var slots: [PreparedRegion?] = []
    private var slotByID: [String: Int32] = [:]
    private var freeSlots: [Int32] = []
    /// What each R-tree entry is: (slot, part).
    private var entries: [(slot: Int32, part: Int32)] = []
    private var freeEntries: [Int32] = []
    private var entriesBySlot: [Int32: [(entry: Int32, box: BoundingBox)]] = [:]
    private var tree = RTree()

    public init() {}

    /// Prepares and indexes `regions` (bulk-loaded). Beacon regions are kept but never match a point.
    public init(_ regions: [Region]) {
        var boxes: [(box: BoundingBox, id: Int32)] = []
        for region in regions {
            let slot = Int32(slots.count)
            let prepared = PreparedRegion(region)
            slots.append(prepared)
            slotByID[region.id] = slot
            for (box, part) in prepared.indexBoxes {
                let entry = Int32(entries.count)
                entries.append((slot, Int32(part)))
                entriesBySlot[slot, default: []].append((entry, box))
                boxes.append((box, entry))
            }
        }
        tree = RTree(bulkLoading: boxes)
    }

    public var count: Int { slotByID.count }

    public subscript(id: String) -> PreparedRegion? {
        slotByID[id].flatMap { slots[Int($0)] }
    }

    public var regions: [PreparedRegion] { slots.compactMap { $0 } }

    /// Adds a region, or replaces the one with the same id.
    public mutating func upsert(_ region: Region) {
        remove(id: region.id)
        let prepared = PreparedRegion(region)
        let slot: Int32
        if let free = freeSlots.popLast() {
            slot = free
            slots[Int(slot)] = prepared
        } else {
            slot = Int32(slots.count)
            slots.append(prepared)
        }
        slotByID[region.id] = slot
        for (box, part) in prepared.indexBoxes {
            let entry: Int32
            if let free = freeEntries.popLast() {
                entry = free
                entries[Int(entry)] = (slot, Int32(part))
            } else {
                entry = Int32(entries.count)
                entries.append((slot, Int32(part)))
            }
            entriesBySlot[slot, default: []].append((entry, box))
            tree.insert(box, id: entry)
        }
    }

    /// Removes the region with `id`; returns whether there was one.
    @discardableResult
    public mutating func remove(id: String) -> Bool {
        guard let slot = slotByID.removeValue(forKey: id) else { return false }
        for (entry, box) in entriesBySlot.removeValue(forKey: slot) ?? [] {
            tree.remove(id: entry, box: box)
            freeEntries.append(entry)
        }
        slots[Int(slot)] = nil
        freeSlots.append(slot)
        return true
    }

    /// Calls `visit` once for each region containing the point (boundary included).
    ///
    /// - Parameter seen: scratch space the caller keeps between queries, so that no query allocates.
    public func forEachRegion(containing point: GeoPoint, seen: inout QueryScratch, _ visit: (PreparedRegion) -> Void) {
        seen.begin(slotCount: slots.count)
        tree.search(lon: point.lon, lat: point.lat) { entry in
            let (slot, part) = entries[Int(entry)]
            guard !seen.contains(slot), let region = slots[Int(slot)] else { return }
            if region.contains(part: Int(part), point) {
                seen.insert(slot)
                visit(region)
            }
        }
    }

    /// The ids of the regions containing the point, sorted.
    public func regionIDs(containing point: GeoPoint) -> [String] {
        var scratch = QueryScratch()
        var ids: [String] = []
        forEachRegion(containing: point, seen: &scratch) { ids.append($0.id) }
        return ids.sorted()
    }

    /// Regions whose boxes come within `meters` of the point (a superset of those the point is
    /// within `meters` of), each once, in slot order.
    public func regions(near point: GeoPoint, meters: Double) -> [PreparedRegion] {
        collect(Geodesy.boxes(around: point, meters: max(meters, 0)))
    }

    /// Regions whose boxes meet the box of the segment a→b (the short way across ±180).
    public func regions(alongSegment a: GeoPoint, _ b: GeoPoint) -> [PreparedRegion] {
        let end = PreparedPolygon.nearestCopy(of: b, to: a)
        let boxes = Geodesy.split(
            minLon: min(a.lon, end.lon), maxLon: max(a.lon, end.lon), minLat: min(a.lat, end.lat),
            maxLat: max(a.lat, end.lat))
        return collect(boxes)
    }

    private func collect(_ boxes: [BoundingBox]) -> [PreparedRegion] {
        var found = Set<Int32>()
        for box in boxes {
            tree.search(box) { entry in found.insert(entries[Int(entry)].slot) }
        }
        return found.sorted().compactMap { slots[Int($0)] }
    }
}

/// Reusable per-caller scratch for ``GeofenceIndex`` queries: a "seen" mark per region slot,
/// cleared in O(1) by bumping a generation number.
public struct QueryScratch: Sendable {
    private var marks: [UInt32] = []
    private var generation: UInt32 = 0

    public init() {}

    mutating func begin(slotCount: Int) {
        if marks.count < slotCount { marks.append(contentsOf: repeatElement(0, count: slotCount - marks.count)) }
        generation &+= 1
        if generation == 0 {
            for index in marks.indices { marks[index] = 0 }
            generation = 1
        }
    }

    @inline(__always)
    func contains(_ slot: Int32) -> Bool { marks[Int(slot)] == generation }

    @inline(__always)
    mutating func insert(_ slot: Int32) { marks[Int(slot)] = generation }
}
