import PerimeterCore
import Testing

@Suite("Label placement: no two labels overlap, crowds become counts")
struct LabelPlacementTests {
    typealias Box = LabelPlacement.Box
    let placer = LabelPlacement(bounds: Box(x: 0, y: 0, width: 960, height: 640))

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var items: [LabelPlacement.Item]
        var obstacles: [Box] = []
        /// Expected side of each label relative to its point: "right", "left", "above", "below".
        var sides: [String: String]
        var testDescription: String { name }
    }

    static func item(_ id: String, _ x: Double, _ y: Double) -> LabelPlacement.Item {
        LabelPlacement.Item(id: id, x: x, y: y, text: id)
    }

    static let cases: [Case] = [
        Case(name: "a lone point: its label to the right", items: [item("a", 100, 100)], sides: ["a": "right"]),
        Case(
            name: "at the right edge: to the left", items: [item("visitor-1", 955, 100)], sides: ["visitor-1": "left"]),
        Case(name: "at the top edge: below", items: [item("a", 480, 2)], sides: ["a": "below"]),
        Case(
            name: "a region name to the right: another side",
            items: [item("a", 100, 100)], obstacles: [Box(x: 105, y: 80, width: 200, height: 40)],
            sides: ["a": "left"]),
        Case(
            name: "two points side by side: the upper first, the other elsewhere",
            items: [item("b", 100, 104), item("a", 100, 100)], sides: ["a": "right", "b": "left"]),
    ]

    static func side(_ box: Box, x: Double, y: Double) -> String {
        if box.x >= x { return box.y + box.height <= y ? "above" : (box.y >= y ? "below" : "right") }
        if box.x + box.width <= x { return "left" }
        return box.y + box.height <= y ? "above" : "below"
    }

    @Test(arguments: cases)
    func placesBySide(_ example: Case) {
        let result = placer.place(example.items, obstacles: example.obstacles)
        for item in example.items {
            let placed = result.labels[item.id]
            #expect(placed != nil, "\(item.id) labelled")
            if let placed {
                #expect(
                    Self.side(placed.box, x: item.x, y: item.y) == example.sides[item.id], "\(item.id): \(placed.box)")
            }
        }
        Self.expectNoOverlap(result, obstacles: example.obstacles, bounds: placer.bounds)
    }

    /// 80 visitors in the central hall (about 180 × 120 picture units), around two region names.
    static func crowdedHall(count: Int = 80) -> [LabelPlacement.Item] {
        var random = SplitMix64(seed: 20)
        return (0..<count).map { index in
            let x = 400 + Double(random.next() % 180)
            let y = 260 + Double(random.next() % 120)
            return LabelPlacement.Item(id: "visitor-\(index)", x: x, y: y, text: "visitor-\(index) @ Central hall")
        }
    }

    static func expectNoOverlap(_ result: LabelPlacement.Result, obstacles: [Box], bounds: Box) {
        let boxes = result.boxes
        for (i, a) in boxes.enumerated() {
            #expect(bounds.contains(a), "\(a) leaves the picture")
            for b in boxes[(i + 1)...] { #expect(!a.overlaps(b), "\(a) overlaps \(b)") }
            for obstacle in obstacles { #expect(!a.overlaps(obstacle), "\(a) covers the region name at \(obstacle)") }
        }
    }

    @Test("A crowded hall: no two placed labels overlap; everyone is labelled or counted once")
    func crowdedHallHasNoOverlaps() {
        let items = Self.crowdedHall()
        let obstacles = [Box(x: 440, y: 300, width: 90, height: 15), Box(x: 200, y: 100, width: 120, height: 15)]
        let result = placer.place(items, obstacles: obstacles)
        Self.expectNoOverlap(result, obstacles: obstacles, bounds: placer.bounds)
        for item in items {
            let marker = Box(x: item.x - 6, y: item.y - 6, width: 12, height: 12)
            for box in result.boxes { #expect(!box.overlaps(marker), "\(box) hides the marker of \(item.id)") }
        }
        let clustered = result.clusters.flatMap(\.members)
        #expect(Set(clustered).count == clustered.count, "nobody in two clusters")
        #expect(Set(clustered).isDisjoint(with: result.labels.keys), "nobody both labelled and counted")
        #expect(result.labels.count + clustered.count == items.count)
        #expect(!result.clusters.isEmpty, "80 long labels in a small hall cannot all fit: some are counted")
        #expect(result.labels.count >= 20, "most of the room is used: \(result.labels.count) labelled")
        for cluster in result.clusters {
            #expect(cluster.text == "+\(cluster.members.count)")
            #expect(cluster.placed != nil, "the count of \(cluster.members) is shown")
        }
    }

    @Test("The same crowd in another order gives the same picture")
    func deterministic() {
        let items = Self.crowdedHall(count: 40)
        #expect(placer.place(items) == placer.place(items.reversed()))
    }

    @Test("Widths follow the font: wide letters take more room than narrow ones")
    func widths() {
        #expect(placer.width(of: "mmmm") > placer.width(of: "iiii"))
        #expect(placer.width(of: "") == 2)
        // DejaVu Sans draws "visitor-12" 51.8 units wide at 11: the estimate must not be narrower.
        #expect(placer.width(of: "visitor-12") >= 52, "\(placer.width(of: "visitor-12"))")
    }
}
