/// A spatial index of boxes (planar lon/lat, no wrapping) answering "which entries contain this point".
///
/// An entry is a (box, id) pair: the same id may appear with several boxes, e.g. a region split at the
/// antimeridian. Queries are the hot path, so the index is built for them:
///
/// - Bulk loading packs a static R-tree by sort-tile-recursive into flat arrays (`PackedRTree`): 16 slots
///   per node, each node's child boxes stored as four contiguous float vectors (rounded outwards, exact
///   doubles kept for the leaves), no object per node, an explicit stack on the call's own frame, nothing
///   allocated per query.
/// - Live changes are layered (a two-level Bentley–Saxe scheme) so that no insert pays for a full rebuild
///   every time: an insert goes to an unsorted buffer of at most `pendingLimit` entries that queries scan
///   linearly; a full buffer is packed together with the `recent` tree into a new `recent` tree; when
///   `recent` outgrows √(`main.count` · `pendingLimit`) everything is packed into a new `main`. That
///   balances the two rebuild costs at about √(n / `pendingLimit`) · log n work per insert, amortized
///   (about 16 µs at n = 100,000), while queries search at most two trees and 31 loose boxes.
/// - A removal tombstones the slot (NaN bounds never match) and shrinks the boxes on its path to the root,
///   so queries stay tight; a tree is repacked once more than half its slots are dead.
///
/// - Important: Box coordinates must not be NaN (a precondition): NaN marks empty slots internally.
public struct RTree: Sendable {
    /// Largest number of loose entries that queries scan one by one.
    static let pendingLimit = 32
    /// `recent` is never merged into `main` while smaller than this.
    private static let recentMinimum = 256

    private var main = PackedRTree()
    private var recent = PackedRTree()
    private var pending: [PackedRTree.Item] = []

    /// An empty index.
    public init() {}

    /// Packs all entries at once (sort-tile-recursive): the best query layout, and O(n log n).
    public init(bulkLoading entries: [(box: BoundingBox, id: Int32)]) {
        main = PackedRTree(
            items: entries.map { entry in
                Self.checkBox(entry.box)
                return PackedRTree.Item(entry.box, id: entry.id)
            })
    }

    /// Number of entries.
    public var count: Int { main.count + recent.count + pending.count }

    /// The union of all entries' boxes; `.empty` when there are none. O(n): computed from the leaves.
    public var bounds: BoundingBox {
        var result = main.boundingBox.union(recent.boundingBox)
        for item in pending { result = result.union(item.box) }
        return result
    }

    /// Adds an entry. Amortized O(√(n / 32) · log n); see the type's notes.
    public mutating func insert(_ box: BoundingBox, id: Int32) {
        Self.checkBox(box)
        pending.append(PackedRTree.Item(box, id: id))
        if pending.count >= Self.pendingLimit { flushPending() }
    }

    /// Removes one entry with exactly this id and box (the box it was inserted with).
    ///
    /// - Returns: false when there is no such entry.
    @discardableResult
    public mutating func remove(id: Int32, box: BoundingBox) -> Bool {
        if let index = pending.firstIndex(where: { $0.id == id && $0.box == box }) {
            pending.swapAt(index, pending.count - 1)
            pending.removeLast()
            return true
        }
        if recent.remove(id: id, box: box) {
            if Self.isMostlyDead(recent) { recent = PackedRTree(items: recent.items) }
            return true
        }
        if main.remove(id: id, box: box) {
            if Self.isMostlyDead(main) { main = PackedRTree(items: main.items) }
            return true
        }
        return false
    }

    /// Calls `visit` with the id of every entry whose closed box contains the point (edges count), once
    /// per matching entry, in no particular order.
    public func search(lon: Double, lat: Double, _ visit: (Int32) -> Void) {
        main.search(lon: lon, lat: lat, visit)
        if recent.count > 0 { recent.search(lon: lon, lat: lat, visit) }
        for item in pending
        where lon >= item.minLon && lon <= item.maxLon && lat >= item.minLat && lat <= item.maxLat {
            visit(item.id)
        }
    }

    /// Calls `visit` with the id of every entry whose box intersects `box` (closed boxes: touching counts).
    public func search(_ box: BoundingBox, _ visit: (Int32) -> Void) {
        main.search(box, visit)
        if recent.count > 0 { recent.search(box, visit) }
        for item in pending where item.box.intersects(box) { visit(item.id) }
    }

    /// Packs the buffer into `recent`, or everything into `main` once `recent` is large enough that
    /// repacking it on every flush would cost more than a full repack amortizes to.
    private mutating func flushPending() {
        var items = recent.items
        items.append(contentsOf: pending)
        pending.removeAll(keepingCapacity: true)
        let recentLimit = max(Self.recentMinimum, Int((Double(main.count) * Double(Self.pendingLimit)).squareRoot()))
        if items.count > recentLimit {
            items.append(contentsOf: main.items)
            main = PackedRTree(items: items)
            recent = PackedRTree()
        } else {
            recent = PackedRTree(items: items)
        }
    }

    /// Dead slots cost memory and a little scanning; repacking pays off once they outnumber live ones.
    private static func isMostlyDead(_ tree: PackedRTree) -> Bool {
        tree.removedCount >= 64 && tree.removedCount > tree.count
    }

    private static func checkBox(_ box: BoundingBox) {
        precondition(
            !box.minLon.isNaN && !box.minLat.isNaN && !box.maxLon.isNaN && !box.maxLat.isNaN,
            "RTree: box \(box) has a NaN coordinate")
    }
}
