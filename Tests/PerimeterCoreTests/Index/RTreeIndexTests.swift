import Testing

@testable import PerimeterCore

private func box(_ minLon: Double, _ minLat: Double, _ maxLon: Double, _ maxLat: Double) -> BoundingBox {
    BoundingBox(minLon: minLon, minLat: minLat, maxLon: maxLon, maxLat: maxLat)
}

private extension RTree {
    func ids(lon: Double, lat: Double) -> [Int32] {
        var result: [Int32] = []
        search(lon: lon, lat: lat) { result.append($0) }
        return result.sorted()
    }

    func ids(in query: BoundingBox) -> [Int32] {
        var result: [Int32] = []
        search(query) { result.append($0) }
        return result.sorted()
    }
}

@Suite("RTree")
struct RTreeIndexTests {
    /// Three boxes: two touching along lon 1, one far away; a point box; and a box only 1e-12 wide.
    static let entries: [(box: BoundingBox, id: Int32)] = [
        (box(0, 0, 1, 1), 1),
        (box(1, 0, 2, 1), 2),
        (box(10, 10, 11, 12), 3),
        (box(5, 5, 5, 5), 4),
        (box(2.35, 48.85, 2.35 + 1e-12, 48.86), 5),
    ]

    struct PointCase: Sendable, CustomStringConvertible {
        let lon, lat: Double
        let expected: [Int32]
        let why: String
        var description: String { "\(why) (\(lon), \(lat))" }
    }

    static let pointCases: [PointCase] = [
        PointCase(lon: 0.5, lat: 0.5, expected: [1], why: "inside"),
        PointCase(lon: 0, lat: 0, expected: [1], why: "corner"),
        PointCase(lon: 0.5, lat: 1, expected: [1], why: "top edge"),
        PointCase(lon: 1, lat: 0.5, expected: [1, 2], why: "shared edge"),
        PointCase(lon: 2, lat: 1, expected: [2], why: "far corner"),
        PointCase(lon: 2.000000001, lat: 1, expected: [], why: "just right of the corner"),
        PointCase(lon: 0.5, lat: -1e-15, expected: [], why: "just below"),
        PointCase(lon: 10.5, lat: 12, expected: [3], why: "tall box's top edge"),
        PointCase(lon: 5, lat: 5, expected: [4], why: "degenerate point box"),
        PointCase(lon: 5, lat: 5.000001, expected: [], why: "next to the point box"),
        PointCase(lon: 2.35 + 0.5e-12, lat: 48.855, expected: [5], why: "inside a 1e-12-wide box"),
        PointCase(lon: 2.35 + 2e-12, lat: 48.855, expected: [], why: "beside a 1e-12-wide box"),
        PointCase(lon: .nan, lat: 0.5, expected: [], why: "NaN matches nothing"),
    ]

    @Test("point queries: closed boxes, bulk-loaded and inserted alike", arguments: pointCases)
    func pointQueries(_ testCase: PointCase) {
        let bulk = RTree(bulkLoading: Self.entries)
        #expect(bulk.ids(lon: testCase.lon, lat: testCase.lat) == testCase.expected)
        var live = RTree()
        for entry in Self.entries { live.insert(entry.box, id: entry.id) }
        #expect(live.ids(lon: testCase.lon, lat: testCase.lat) == testCase.expected)
    }

    @Test(
        "box queries: touching counts",
        arguments: [
            (box(1, 1, 1, 1), [Int32]([1, 2])),
            (box(2, -5, 3, 0), [2]),
            (box(2.0000001, 0, 3, 1), []),
            (box(-100, -100, 100, 100), [1, 2, 3, 4, 5]),
            (box(4, 4, 6, 6), [4]),
            (box(-.infinity, -.infinity, .infinity, .infinity), [1, 2, 3, 4, 5]),
        ])
    func boxQueries(_ query: BoundingBox, _ expected: [Int32]) {
        #expect(RTree(bulkLoading: Self.entries).ids(in: query) == expected)
    }

    @Test("an empty tree finds nothing and has empty bounds")
    func emptyTree() {
        for tree in [RTree(), RTree(bulkLoading: [])] {
            #expect(tree.count == 0)
            #expect(tree.bounds.isEmpty)
            #expect(tree.ids(lon: 0, lat: 0).isEmpty)
            #expect(tree.ids(in: box(-.infinity, -.infinity, .infinity, .infinity)).isEmpty)
        }
    }

    @Test("one id with two boxes (a region split at the antimeridian) is found through either, removed one at a time")
    func duplicateIDs() {
        let east = box(170, -20, 180, -10), west = box(-180, -20, -170, -10)
        var tree = RTree(bulkLoading: [(east, 7), (west, 7), (box(0, 0, 1, 1), 8)])
        #expect(tree.count == 3)
        #expect(tree.ids(lon: 175, lat: -15) == [7])
        #expect(tree.ids(lon: -175, lat: -15) == [7])
        #expect(tree.ids(lon: 180, lat: -15) == [7])
        #expect(tree.ids(in: box(-180, -20, 180, -10)) == [7, 7])
        let removedEast = tree.remove(id: 7, box: east)
        #expect(removedEast)
        #expect(tree.ids(lon: 175, lat: -15) == [])
        #expect(tree.ids(lon: -175, lat: -15) == [7])
        let removedTwice = tree.remove(id: 7, box: east)
        #expect(!removedTwice, "already removed")
        let removedWrongID = tree.remove(id: 8, box: west)
        #expect(!removedWrongID, "right box, wrong id")
        let removedWrongBox = tree.remove(id: 7, box: box(-180, -20, -170, -10.5))
        #expect(!removedWrongBox, "right id, wrong box")
        #expect(tree.count == 2)
    }

    @Test("the same (box, id) inserted twice is two entries")
    func identicalEntries() {
        var tree = RTree()
        tree.insert(box(0, 0, 1, 1), id: 1)
        tree.insert(box(0, 0, 1, 1), id: 1)
        #expect(tree.ids(lon: 0.5, lat: 0.5) == [1, 1])
        let removed = tree.remove(id: 1, box: box(0, 0, 1, 1))
        #expect(removed)
        #expect(tree.ids(lon: 0.5, lat: 0.5) == [1])
    }

    @Test(
        "inserts after a bulk load are found, across buffer flushes and merges", arguments: [5, 31, 32, 33, 700, 3_000])
    func insertAfterBulkLoad(inserted: Int) {
        let bulk = (0..<500).map { (box(Double($0), 0, Double($0) + 0.5, 1), Int32($0)) }
        var tree = RTree(bulkLoading: bulk)
        for index in 0..<inserted {
            tree.insert(box(Double(index), 2, Double(index) + 0.5, 3), id: Int32(10_000 + index))
        }
        #expect(tree.count == 500 + inserted)
        for index in [0, 1, inserted / 2, inserted - 1] {
            #expect(tree.ids(lon: Double(index) + 0.25, lat: 2.5) == [Int32(10_000 + index)])
            #expect(tree.ids(lon: Double(index % 500) + 0.25, lat: 0.5) == [Int32(index % 500)])
        }
        #expect(tree.ids(lon: 0.75, lat: 2.5).isEmpty)
        #expect(tree.bounds == box(0, 0, Double(max(499, inserted - 1)) + 0.5, 3))
    }

    @Test("removed entries are gone, others stay; bounds shrink", arguments: [false, true])
    func removeThenQuery(live: Bool) {
        let entries = (0..<400).map { index -> (BoundingBox, Int32) in
            let column = Double(index % 20), row = Double(index / 20)
            return (box(column, row, column + 1, row + 1), Int32(index))
        }
        var tree = RTree()
        if live {
            for entry in entries { tree.insert(entry.0, id: entry.1) }
        } else {
            tree = RTree(bulkLoading: entries)
        }
        // Remove every entry in the top row and the right column, then most of the rest.
        for (entryBox, id) in entries where entryBox.maxLat == 20 || entryBox.maxLon == 20 {
            let removed = tree.remove(id: id, box: entryBox)
            #expect(removed)
        }
        #expect(tree.count == 400 - 39)
        #expect(tree.bounds == box(0, 0, 19, 19))
        #expect(tree.ids(lon: 19.5, lat: 5.5).isEmpty)
        #expect(tree.ids(lon: 18.5, lat: 5.5) == [Int32(5 * 20 + 18)])
        #expect(tree.ids(lon: 19, lat: 19) == [Int32(18 * 20 + 18)])
        for (entryBox, id) in entries where entryBox.maxLat < 20 && entryBox.maxLon < 20 && id != 0 {
            let removed = tree.remove(id: id, box: entryBox)
            #expect(removed)
        }
        #expect(tree.count == 1)
        #expect(tree.ids(in: box(-.infinity, -.infinity, .infinity, .infinity)) == [0])
        #expect(tree.bounds == box(0, 0, 1, 1))
    }

    @Test(
        "random boxes and points agree with brute force, before and after interleaved inserts and removes",
        arguments: [UInt64(1)])
    func randomCrossCheck(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        func randomBox() -> BoundingBox {
            let width = random.uniform(0, 0.05), height = random.uniform(0, 0.05)
            let lon = random.uniform(2, 3 - width), lat = random.uniform(48, 49 - height)
            return box(lon, lat, lon + width, lat + height)
        }
        var live: [(box: BoundingBox, id: Int32)] = (0..<5_000).map { (randomBox(), Int32($0)) }
        var tree = RTree(bulkLoading: live)

        func check(_ stage: String) {
            #expect(tree.count == live.count, "\(stage)")
            var mismatches = 0
            for _ in 0..<2_000 {
                // Half the points land exactly on a box's corner or edge.
                let lon: Double, lat: Double
                if random.next() % 2 == 0, let target = live.randomElement(using: &random) {
                    lon = random.next() % 2 == 0 ? target.box.minLon : target.box.maxLon
                    lat = random.uniform(target.box.minLat, target.box.maxLat)
                } else {
                    lon = random.uniform(1.99, 3.01)
                    lat = random.uniform(47.99, 49.01)
                }
                var expected: [Int32] = []
                for entry in live where entry.box.contains(lon: lon, lat: lat) { expected.append(entry.id) }
                if tree.ids(lon: lon, lat: lat) != expected.sorted() { mismatches += 1 }
            }
            for _ in 0..<200 {
                let query = randomBox()
                var expected: [Int32] = []
                for entry in live where entry.box.intersects(query) { expected.append(entry.id) }
                if tree.ids(in: query) != expected.sorted() { mismatches += 1 }
            }
            #expect(mismatches == 0, "\(stage)")
            let union = live.reduce(BoundingBox.empty) { $0.union($1.box) }
            #expect(tree.bounds == union, "\(stage)")
        }

        check("bulk loaded")
        var nextID = Int32(5_000)
        for round in 0..<2 {
            // Enough inserts to flush the buffer many times and merge into the main tree; enough removals to
            // repack.
            for _ in 0..<1_200 {
                if random.next() % 3 == 0, !live.isEmpty {
                    let index = Int(random.next() % UInt64(live.count))
                    let removed = tree.remove(id: live[index].id, box: live[index].box)
                    #expect(removed)
                    live.swapAt(index, live.count - 1)
                    live.removeLast()
                } else {
                    let entry = (box: randomBox(), id: nextID)
                    nextID += 1
                    tree.insert(entry.box, id: entry.id)
                    live.append(entry)
                }
            }
            check("after round \(round) of interleaved changes")
        }
        while live.count > 500 {
            let entry = live.removeLast()
            let removed = tree.remove(id: entry.id, box: entry.box)
            #expect(removed)
        }
        check("after removing most entries")
    }

    @Test("gathering one bit per byte packs byte i's low bit into bit i, for all 256 lane masks")
    func gatherBits() {
        for pattern in 0..<256 {
            var word: UInt64 = 0
            for byte in 0..<8 where pattern & (1 << byte) != 0 { word |= 0xFF << (8 * byte) }
            #expect(PackedRTree.gatherBits(word) == UInt64(pattern))
        }
    }
}
