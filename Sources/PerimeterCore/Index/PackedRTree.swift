/// A static R-tree packed into flat arrays by sort-tile-recursive (STR) bulk loading; entries can be
/// removed (tombstoned) but not added. `RTree` layers live insertion on top of it.
///
/// Layout: every node has `fanout` slots, and a node's child boxes are one block of `4 × fanout` floats —
/// all minLon, then all minLat, all maxLon, all maxLat — so testing a whole node against a point is four
/// vector compares over four cache lines, with no pointer chasing and no branch per slot. Queries are
/// bound by memory traffic and work per node, which is why the blocks hold floats, not doubles: the
/// floats are rounded outwards, so they never reject a point the exact box would accept. A leaf slot they
/// accept is settled by testing the point rounded down and up against the same floats, and only a point
/// within a float ulp (about 0.4 m at 50°) of the box's edge needs the exact double box (`exact`).
/// `children` holds, per slot, the entry id in a leaf node and the child node's index in an inner node.
/// Leaves come first (node indices below `leafCount`). The root is wider than the other nodes (up to
/// `rootFanout` slots, kept apart): packing stops as soon as a level fits in it, which saves a level —
/// a whole node visit per query — whenever the top of a 16-way tree would be a nearly empty node.
/// Empty and removed slots hold NaN, which fails every comparison, so queries never test whether a slot is
/// occupied.
struct PackedRTree: Sendable {
    static let fanout = 16
    private static let blockSize = 4 * fanout
    static let rootFanout = 2 * fanout
    /// Deep enough for any tree an Int32 id space can fill: the root's slots plus fanout − 1 per level below.
    private static let stackCapacity = rootFanout + 8 * fanout

    /// One bulk-load input: a box and its id.
    struct Item {
        var minLon, minLat, maxLon, maxLat: Double
        var id: Int32

        init(_ box: BoundingBox, id: Int32) {
            minLon = box.minLon
            minLat = box.minLat
            maxLon = box.maxLon
            maxLat = box.maxLat
            self.id = id
        }

        var box: BoundingBox { BoundingBox(minLon: minLon, minLat: minLat, maxLon: maxLon, maxLat: maxLat) }

        /// Sort keys; an empty box's centre is NaN, which would break the sort's ordering, so it sorts as 0.
        var centerLon: Double {
            let center = (minLon + maxLon) / 2
            return center.isNaN ? 0 : center
        }
        var centerLat: Double {
            let center = (minLat + maxLat) / 2
            return center.isNaN ? 0 : center
        }
    }

    /// Per node, `blockSize` floats: its slots' boxes rounded outwards, NaN in empty slots.
    private var bounds: [Float] = []
    /// Per leaf slot, the entry's exact box: minLon, minLat, maxLon, maxLat (NaN when empty).
    private var exact: [Double] = []
    private var children: [Int32] = []
    /// Each node's parent and its slot there, for refitting the path above a removed entry.
    private var parents: [Int32] = []
    private var parentSlots: [UInt8] = []
    private var leafCount = 0
    /// The root's slots, `rootFanout` floats per coordinate (minLon…, minLat…, maxLon…, maxLat…), and
    /// the nodes they hold; `rootChildren` is empty for an empty tree.
    private var rootBounds = [Float](repeating: .nan, count: 4 * rootFanout)
    private var rootChildren: [Int32] = []
    /// Entries not removed.
    private(set) var count = 0
    /// Removed entries whose slots still occupy leaves.
    private(set) var removedCount = 0

    init() {}

    /// STR bulk load: sort by centre longitude, cut into √(nodes) vertical slices, sort each slice by
    /// centre latitude and cut it into nodes; repeat on the nodes until they fit in the root.
    init(items: [Item]) {
        count = items.count
        guard !items.isEmpty else { return }
        var level = items
        var isLeafLevel = true
        repeat {
            let nodeCount = (level.count + Self.fanout - 1) / Self.fanout
            // Known before the leaves are appended, so slot accessors tell leaves from inner nodes throughout.
            if isLeafLevel { leafCount = nodeCount }
            let sliceCount = Int(Double(nodeCount).squareRoot().rounded(.up))
            let sliceLength = sliceCount * Self.fanout
            level.sort { $0.centerLon < $1.centerLon }
            var start = 0
            while start < level.count {
                let end = min(start + sliceLength, level.count)
                level[start..<end].sort { $0.centerLat < $1.centerLat }
                start = end
            }
            var upper: [Item] = []
            upper.reserveCapacity(nodeCount)
            start = 0
            while start < level.count {
                let end = min(start + Self.fanout, level.count)
                let node = appendNode(level[start..<end], isLeaf: isLeafLevel)
                upper.append(Item(nodeBox(node) ?? .empty, id: Int32(node)))
                start = end
            }
            isLeafLevel = false
            level = upper
        } while level.count > Self.rootFanout
        for (slot, item) in level.enumerated() {
            rootChildren.append(item.id)
            setRootSlot(slot, to: item.box)
            parentSlots[Int(item.id)] = UInt8(slot)
        }
    }

    /// Every live entry, in leaf order: the input of a rebuild.
    var items: [Item] {
        var result: [Item] = []
        result.reserveCapacity(count)
        for leaf in 0..<leafCount {
            for slot in 0..<Self.fanout {
                guard let box = exactBox(leaf * Self.fanout + slot) else { continue }
                result.append(Item(box, id: children[leaf * Self.fanout + slot]))
            }
        }
        return result
    }

    /// The union of all live boxes (`.empty` when there are none), from the leaves: exact, O(n).
    var boundingBox: BoundingBox {
        var union = BoundingBox.empty
        for slotIndex in 0..<(leafCount * Self.fanout) {
            if let box = exactBox(slotIndex) { union = union.union(box) }
        }
        return union
    }

    // MARK: - Queries

    /// Calls `visit` with the id of every live entry whose closed box contains the point.
    @inline(__always)
    func search(lon: Double, lat: Double, _ visit: (Int32) -> Void) {
        guard !rootChildren.isEmpty else { return }
        let leafCount = self.leafCount
        // Rounding to nearest is monotonic, so a float box rounded outwards still holds the rounded point.
        let lonF = Float(lon), latF = Float(lat)
        // Bracketing floats: a point whose lower rounding is above a (rounded-down) minimum is above the
        // exact minimum too, and likewise for maxima, which settles almost every hit without the doubles.
        let lonDown = Self.roundedDown(lon), lonUp = Self.roundedUp(lon)
        let latDown = Self.roundedDown(lat), latUp = Self.roundedUp(lat)
        bounds.withUnsafeBufferPointer { bounds in
            exact.withUnsafeBufferPointer { exact in
                children.withUnsafeBufferPointer { children in
                    withUnsafeTemporaryAllocation(of: Int32.self, capacity: Self.stackCapacity) { stack in
                        var depth = pushRootChildren(containingLon: lonF, lat: latF, onto: stack)
                        while depth > 0 {
                            depth &-= 1
                            let node = Int(stack[depth])
                            let block = bounds.baseAddress! + node &* Self.blockSize
                            var mask = Self.pointMask(block, lon: lonF, lat: latF)
                            let firstSlot = node &* Self.fanout
                            if node < leafCount {
                                while mask != 0 {
                                    let slot = mask.trailingZeroBitCount
                                    mask &= mask &- 1
                                    let clearlyInside =
                                        lonDown > block[slot] && latDown > block[Self.fanout &+ slot]
                                        && lonUp < block[2 &* Self.fanout &+ slot]
                                        && latUp < block[3 &* Self.fanout &+ slot]
                                    let box = 4 &* (firstSlot &+ slot)
                                    if clearlyInside
                                        || (lon >= exact[box] && lat >= exact[box &+ 1] && lon <= exact[box &+ 2]
                                            && lat <= exact[box &+ 3])
                                    {
                                        visit(children[firstSlot &+ slot])
                                    }
                                }
                            } else {
                                while mask != 0 {
                                    stack[depth] = children[firstSlot &+ mask.trailingZeroBitCount]
                                    depth &+= 1
                                    mask &= mask &- 1
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Calls `visit` with the id of every live entry whose box intersects `box` (closed boxes).
    func search(_ box: BoundingBox, _ visit: (Int32) -> Void) {
        forEachLeafSlot(intersecting: box) { slot in visit(children[slot]) }
    }

    /// Pushes the root's children whose boxes contain the point; returns the new stack depth.
    @inline(__always)
    private func pushRootChildren(
        containingLon lon: Float, lat: Float, onto stack: UnsafeMutableBufferPointer<Int32>
    )
        -> Int
    {
        var depth = 0
        rootBounds.withUnsafeBufferPointer { rootBounds in
            for first in stride(from: 0, to: rootChildren.count, by: Self.fanout) {
                var mask = Self.pointMask(rootBounds.baseAddress! + first, lon: lon, lat: lat, stride: Self.rootFanout)
                while mask != 0 {
                    stack[depth] = rootChildren[first &+ mask.trailingZeroBitCount]
                    depth &+= 1
                    mask &= mask &- 1
                }
            }
        }
        return depth
    }

    /// Which of 16 slots contain the point, as a bit mask (bit i = slot i). The slots' minLon values start
    /// at `block`, and minLat, maxLon, maxLat follow at `stride` floats from each other. NaN slots fail.
    @inline(__always)
    private static func pointMask(
        _ block: UnsafePointer<Float>, lon: Float, lat: Float, stride: Int = fanout
    )
        -> UInt32
    {
        let raw = UnsafeRawPointer(block)
        let lonVector = SIMD16<Float>(repeating: lon)
        let latVector = SIMD16<Float>(repeating: lat)
        let minLon = raw.loadUnaligned(as: SIMD16<Float>.self)
        let minLat = raw.loadUnaligned(fromByteOffset: stride * 4, as: SIMD16<Float>.self)
        let maxLon = raw.loadUnaligned(fromByteOffset: stride * 8, as: SIMD16<Float>.self)
        let maxLat = raw.loadUnaligned(fromByteOffset: stride * 12, as: SIMD16<Float>.self)
        let hits = (lonVector .>= minLon) .& (latVector .>= minLat) .& (lonVector .<= maxLon) .& (latVector .<= maxLat)
        let bytes = unsafeBitCast(
            SIMD16<Int8>(truncatingIfNeeded: unsafeBitCast(hits, to: SIMD16<Int32>.self)), to: SIMD2<UInt64>.self)
        return UInt32(truncatingIfNeeded: gatherBits(bytes[0]) | gatherBits(bytes[1]) << 8)
    }

    /// The lowest bit of each byte of `word`, packed into 8 bits (byte i → bit i).
    ///
    /// Swift cannot bit-cast a vector mask to an integer (x86's movmsk), and summing lanes weighted by
    /// powers of two compiles to dozens of shuffles; narrowing each lane to a byte and gathering the bytes'
    /// bits with one multiply is a handful of instructions.
    @inline(__always)
    static func gatherBits(_ word: UInt64) -> UInt64 {
        // Byte i's bit times 2^(56 − 7i) lands on bit 56 + i; no other partial product reaches the top byte.
        ((word & 0x0101_0101_0101_0101) &* 0x0102_0408_1020_4080) >> 56
    }

    /// Calls `body` with the index of every live leaf slot whose box intersects `box`.
    private func forEachLeafSlot(intersecting box: BoundingBox, _ body: (_ slot: Int) -> Void) {
        withUnsafeTemporaryAllocation(of: Int32.self, capacity: Self.stackCapacity) { stack in
            var depth = 0
            for (slot, child) in rootChildren.enumerated() {
                guard let slotBox = rootSlotBox(slot), slotBox.intersects(box) else { continue }
                stack[depth] = child
                depth += 1
            }
            while depth > 0 {
                depth -= 1
                let node = Int(stack[depth])
                for slot in 0..<Self.fanout {
                    // The float boxes are wider than the exact ones, so this never prunes a match; NaN slots
                    // give nil.
                    guard let slotBox = slotBox(node: node, slot: slot), slotBox.intersects(box) else { continue }
                    let slotIndex = node * Self.fanout + slot
                    if node < leafCount {
                        if let exactBox = exactBox(slotIndex), exactBox.intersects(box) { body(slotIndex) }
                    } else {
                        stack[depth] = children[slotIndex]
                        depth += 1
                    }
                }
            }
        }
    }

    // MARK: - Removal

    /// Removes one entry with exactly this box and id: its slot becomes NaN and the boxes above it shrink
    /// to fit. Returns false when there is no such entry.
    mutating func remove(id: Int32, box: BoundingBox) -> Bool {
        var found: Int?
        forEachLeafSlot(intersecting: box) { slotIndex in
            if found == nil, children[slotIndex] == id, exactBox(slotIndex) == box { found = slotIndex }
        }
        guard let slotIndex = found else { return false }
        let leaf = slotIndex / Self.fanout
        setSlot(node: leaf, slot: slotIndex % Self.fanout, to: nil)
        for index in 4 * slotIndex..<4 * slotIndex + 4 { exact[index] = .nan }
        count -= 1
        removedCount += 1
        var node = leaf
        while parents[node] >= 0 {
            let parent = Int(parents[node])
            setSlot(node: parent, slot: Int(parentSlots[node]), to: nodeBox(node))
            node = parent
        }
        setRootSlot(Int(parentSlots[node]), to: nodeBox(node))
        return true
    }

    // MARK: - Building blocks

    /// Appends a node holding `items` in its slots and returns its index. All leaves are appended before
    /// the first inner node.
    private mutating func appendNode(_ items: ArraySlice<Item>, isLeaf: Bool) -> Int {
        let node = parents.count
        bounds.append(contentsOf: repeatElement(.nan, count: Self.blockSize))
        if isLeaf { exact.append(contentsOf: repeatElement(.nan, count: 4 * Self.fanout)) }
        children.append(contentsOf: repeatElement(-1, count: Self.fanout))
        parents.append(-1)
        parentSlots.append(0)
        for (slot, item) in items.enumerated() {
            setSlot(node: node, slot: slot, to: item.box)
            children[node * Self.fanout + slot] = item.id
            if isLeaf {
                let base = 4 * (node * Self.fanout + slot)
                exact[base] = item.minLon
                exact[base + 1] = item.minLat
                exact[base + 2] = item.maxLon
                exact[base + 3] = item.maxLat
            } else {
                parents[Int(item.id)] = Int32(node)
                parentSlots[Int(item.id)] = UInt8(slot)
            }
        }
        return node
    }

    /// Writes a slot's box, rounded outwards to floats; nil makes it empty (NaN).
    private mutating func setSlot(node: Int, slot: Int, to box: BoundingBox?) {
        let base = node * Self.blockSize + slot
        bounds[base] = box.map { Self.roundedDown($0.minLon) } ?? .nan
        bounds[base + Self.fanout] = box.map { Self.roundedDown($0.minLat) } ?? .nan
        bounds[base + 2 * Self.fanout] = box.map { Self.roundedUp($0.maxLon) } ?? .nan
        bounds[base + 3 * Self.fanout] = box.map { Self.roundedUp($0.maxLat) } ?? .nan
    }

    /// Writes a root slot's box, rounded outwards to floats; nil makes it empty (NaN).
    private mutating func setRootSlot(_ slot: Int, to box: BoundingBox?) {
        rootBounds[slot] = box.map { Self.roundedDown($0.minLon) } ?? .nan
        rootBounds[slot + Self.rootFanout] = box.map { Self.roundedDown($0.minLat) } ?? .nan
        rootBounds[slot + 2 * Self.rootFanout] = box.map { Self.roundedUp($0.maxLon) } ?? .nan
        rootBounds[slot + 3 * Self.rootFanout] = box.map { Self.roundedUp($0.maxLat) } ?? .nan
    }

    /// A root slot's float box; nil for an empty slot.
    private func rootSlotBox(_ slot: Int) -> BoundingBox? {
        guard !rootBounds[slot].isNaN else { return nil }
        return BoundingBox(
            minLon: Double(rootBounds[slot]), minLat: Double(rootBounds[slot + Self.rootFanout]),
            maxLon: Double(rootBounds[slot + 2 * Self.rootFanout]),
            maxLat: Double(rootBounds[slot + 3 * Self.rootFanout]))
    }

    /// A slot's float box, as wide as or wider than the exact one; nil for an empty slot.
    private func slotBox(node: Int, slot: Int) -> BoundingBox? {
        let base = node * Self.blockSize + slot
        guard !bounds[base].isNaN else { return nil }
        return BoundingBox(
            minLon: Double(bounds[base]), minLat: Double(bounds[base + Self.fanout]),
            maxLon: Double(bounds[base + 2 * Self.fanout]), maxLat: Double(bounds[base + 3 * Self.fanout]))
    }

    /// A leaf slot's exact box; nil for an empty slot.
    private func exactBox(_ slotIndex: Int) -> BoundingBox? {
        let base = 4 * slotIndex
        guard !exact[base].isNaN else { return nil }
        return BoundingBox(
            minLon: exact[base], minLat: exact[base + 1], maxLon: exact[base + 2], maxLat: exact[base + 3])
    }

    /// The union of a node's occupied slots (exact in a leaf); nil when every slot is empty.
    private func nodeBox(_ node: Int) -> BoundingBox? {
        var union: BoundingBox?
        for slot in 0..<Self.fanout {
            let slotBox = node < leafCount ? exactBox(node * Self.fanout + slot) : slotBox(node: node, slot: slot)
            guard let box = slotBox else { continue }
            union = union?.union(box) ?? box
        }
        return union
    }

    /// The largest float not above `value` (NaN stays NaN).
    private static func roundedDown(_ value: Double) -> Float {
        let rounded = Float(value)
        return Double(rounded) > value ? rounded.nextDown : rounded
    }

    /// The smallest float not below `value` (NaN stays NaN).
    private static func roundedUp(_ value: Double) -> Float {
        let rounded = Float(value)
        return Double(rounded) < value ? rounded.nextUp : rounded
    }
}
