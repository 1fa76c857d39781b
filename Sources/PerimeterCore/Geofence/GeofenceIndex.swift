/// Every geographic region of a venue, prepared, behind an R-tree over their boxes.
///
/// Regions can be added, replaced and removed while it serves queries. Each polygon of a
/// MultiPolygon is indexed on its own, and a shape crossing the antimeridian gets one box on
/// each side, so the tree's boxes stay tight.
public struct GeofenceIndex: Sendable {
    /// Prepared regions by slot; a removed region leaves a nil slot that a later one reuses.
    private var slots: [PreparedRegion?] = []
    /// Each slot's region id, apart so that reading it does not copy the region.
    private var slotIDs: [String] = []
    private var slotByID: [String: Int32] = [:]
    private var freeSlots: [Int32] = []
    /// What each R-tree entry tests, in flat arrays the point query reads without touching the
    /// (large) `PreparedRegion` values: the region's slot and its shape, a circle
    /// (`shape < 0`: `circles[-shape - 1]`) or a polygon part (`polygons[shape]`).
    private var entries: [(slot: Int32, shape: Int32)] = []
    private var freeEntries: [Int32] = []
    private var circles: [PreparedCircle] = []
    private var freeCircles: [Int32] = []
    private var polygons: [PreparedPolygon] = []
    private var freePolygons: [Int32] = []
    private var entriesBySlot: [Int32: [(entry: Int32, box: BoundingBox)]] = [:]
    private var tree = RTree()

    public init() {}

    /// Prepares and indexes `regions` (bulk-loaded). Beacon regions are kept but never match a point.
    public init(_ regions: [Region]) {
        var boxes: [(box: BoundingBox, id: Int32)] = []
        for region in regions {
            for (box, entry) in add(PreparedRegion(region)) { boxes.append((box, entry)) }
        }
        tree = RTree(bulkLoading: boxes)
    }

    public var count: Int { slotByID.count }

    public subscript(id: String) -> PreparedRegion? {
        slotByID[id].flatMap { slots[Int($0)] }
    }

    /// The region in a slot handed to a ``forEachRegion(containing:seen:_:)`` visitor.
    public subscript(slot: RegionSlot) -> PreparedRegion { slots[Int(slot.value)]! }

    /// The id of the region in a slot.
    @inline(__always)
    public func id(_ slot: RegionSlot) -> String { slotIDs[Int(slot.value)] }

    public var regions: [PreparedRegion] { slots.compactMap { $0 } }

    /// Stores a prepared region's shapes and entries (not yet in the tree); returns the entries.
    private mutating func add(_ prepared: PreparedRegion) -> [(BoundingBox, Int32)] {
        let slot: Int32
        if let free = freeSlots.popLast() {
            slot = free
            slots[Int(slot)] = prepared
            slotIDs[Int(slot)] = prepared.id
        } else {
            slot = Int32(slots.count)
            slots.append(prepared)
            slotIDs.append(prepared.id)
        }
        slotByID[prepared.id] = slot
        var shapes: [Int: Int32] = [:]
        switch prepared.geometry {
        case .circle(let circle): shapes[0] = -Self.store(circle, in: &circles, free: &freeCircles) - 1
        case .polygons(let parts):
            for (number, part) in parts.enumerated() {
                shapes[number] = Self.store(part, in: &polygons, free: &freePolygons)
            }
        case .beacon: break
        }
        var added: [(BoundingBox, Int32)] = []
        for (box, part) in prepared.indexBoxes {
            let target = (slot: slot, shape: shapes[part]!)
            let entry: Int32
            if let free = freeEntries.popLast() {
                entry = free
                entries[Int(entry)] = target
            } else {
                entry = Int32(entries.count)
                entries.append(target)
            }
            entriesBySlot[slot, default: []].append((entry, box))
            added.append((box, entry))
        }
        return added
    }

    private static func store<T>(_ value: T, in array: inout [T], free: inout [Int32]) -> Int32 {
        if let index = free.popLast() {
            array[Int(index)] = value
            return index
        }
        array.append(value)
        return Int32(array.count - 1)
    }

    /// Adds a region, or replaces the one with the same id.
    public mutating func upsert(_ region: Region) {
        remove(id: region.id)
        for (box, entry) in add(PreparedRegion(region)) { tree.insert(box, id: entry) }
    }

    /// Removes the region with `id`; returns whether there was one.
    @discardableResult
    public mutating func remove(id: String) -> Bool {
        guard let slot = slotByID.removeValue(forKey: id) else { return false }
        var freed: Set<Int32> = []
        for (entry, box) in entriesBySlot.removeValue(forKey: slot) ?? [] {
            tree.remove(id: entry, box: box)
            freeEntries.append(entry)
            freed.insert(entries[Int(entry)].shape)
        }
        for shape in freed {
            if shape < 0 {
                freeCircles.append(-shape - 1)
            } else {
                polygons[Int(shape)] = PreparedPolygon.empty
                freePolygons.append(shape)
            }
        }
        slots[Int(slot)] = nil
        freeSlots.append(slot)
        return true
    }

    /// Calls `visit` once for each region containing the point (boundary included).
    ///
    /// - Parameter seen: scratch space the caller keeps between queries, so that no query allocates.
    @inline(__always)
    public func forEachRegion(containing point: GeoPoint, seen: inout QueryScratch, _ visit: (RegionSlot) -> Void) {
        seen.begin(slotCount: slots.count)
        entries.withUnsafeBufferPointer { entries in
            circles.withUnsafeBufferPointer { circles in
                polygons.withUnsafeBufferPointer { polygons in
                    tree.search(lon: point.lon, lat: point.lat) { entry in
                        let target = entries[Int(entry)]
                        guard !seen.contains(target.slot) else { return }
                        let inside =
                            target.shape < 0
                            ? circles[Int(-target.shape - 1)].contains(point)
                            : polygons[Int(target.shape)].contains(point)
                        if inside {
                            seen.insert(target.slot)
                            visit(RegionSlot(value: target.slot))
                        }
                    }
                }
            }
        }
    }

    /// The ids of the regions containing the point, sorted.
    public func regionIDs(containing point: GeoPoint) -> [String] {
        var scratch = QueryScratch()
        var ids: [String] = []
        forEachRegion(containing: point, seen: &scratch) { ids.append(id($0)) }
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

/// A region's place in a ``GeofenceIndex``, as handed to query visitors (cheaper than the region).
public struct RegionSlot: Sendable, Hashable {
    let value: Int32
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
