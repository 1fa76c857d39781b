/// Places text labels next to points on a picture so that no two labels overlap, and gathers
/// the points whose label finds no room into clusters labelled with their count.
///
/// Greedy, in a fixed order (top to bottom, then left to right, then id), so the same input
/// always gives the same picture: each label tries the positions around its point (right,
/// left, above, below and the diagonals), first close by, then farther out (the page draws a
/// leader line to a distant label). A label that fits nowhere joins a cluster of its unplaced
/// neighbours within ``clusterRadius``, labelled "+N"; the cluster label is placed the same way,
/// and a crowd whose count finds no room either joins the nearest crowd whose count did (a
/// count is reported with no box only when no count found room at all). No label covers
/// another point's marker or an obstacle (the region names).
///
/// Text widths are estimated from DejaVu Sans' advance widths (the page's font); the page
/// draws each label with `textLength` set to the estimated width, so the box computed here is
/// the box drawn whatever font the browser substitutes.
public struct LabelPlacement: Sendable {
    /// An axis-aligned box in picture coordinates (y grows downwards).
    public struct Box: Sendable, Equatable, CustomStringConvertible {
        public var x: Double
        public var y: Double
        public var width: Double
        public var height: Double

        public init(x: Double, y: Double, width: Double, height: Double) {
            self.x = x
            self.y = y
            self.width = width
            self.height = height
        }

        /// True when the two boxes share area (touching edges do not count).
        public func overlaps(_ other: Box) -> Bool {
            x < other.x + other.width && other.x < x + width && y < other.y + other.height && other.y < y + height
        }

        public func contains(_ other: Box) -> Bool {
            other.x >= x && other.y >= y && other.x + other.width <= x + width && other.y + other.height <= y + height
        }

        public var description: String { "[\(x), \(y) \(width)×\(height)]" }
    }

    /// A point to label.
    public struct Item: Sendable, Equatable {
        public var id: String
        public var x: Double
        public var y: Double
        public var text: String

        public init(id: String, x: Double, y: Double, text: String) {
            self.id = id
            self.x = x
            self.y = y
            self.text = text
        }
    }

    /// Where one label went: its box, and whether it is far enough from its point to need a leader line.
    public struct Placed: Sendable, Equatable {
        public var box: Box
        public var leader: Bool
    }

    /// Points gathered under one count label.
    public struct Cluster: Sendable, Equatable {
        public var members: [String]
        /// The centre of the members' points.
        public var x: Double
        public var y: Double
        public var text: String
        /// nil when even the count found no room.
        public var placed: Placed?
    }

    public struct Result: Sendable, Equatable {
        /// By item id.
        public var labels: [String: Placed] = [:]
        public var clusters: [Cluster] = []
        /// Every placed box: labels and cluster labels.
        public var boxes: [Box] {
            Array(labels.values.map(\.box)) + clusters.compactMap { $0.placed?.box }
        }
    }

    public var fontSize: Double
    /// The picture: no label leaves it.
    public var bounds: Box
    /// Gap between a point and its label.
    public var gap: Double
    /// Unplaced points within this distance of each other share a cluster.
    public var clusterRadius: Double
    /// The radius of the marker drawn at each point: no label covers another point's marker.
    public var markerRadius: Double

    public init(
        bounds: Box, fontSize: Double = 11, gap: Double = 8, clusterRadius: Double = 60, markerRadius: Double = 6
    ) {
        self.bounds = bounds
        self.markerRadius = markerRadius
        self.fontSize = fontSize
        self.gap = gap
        self.clusterRadius = clusterRadius
    }

    /// The box height of one line of text.
    public var lineHeight: Double { (fontSize * 1.25).rounded(.up) }

    /// Advance widths of DejaVu Sans in em (from its hmtx table, rounded up); others 0.64.
    static func advance(_ scalar: Unicode.Scalar) -> Double {
        switch scalar {
        case "i", "j", "l", "'", "|", "!", ".", ",", ":", ";": 0.28
        case " ": 0.32
        case "f", "t", "r", "(", ")", "-", "[", "]", "/": 0.42
        case "m": 0.98
        case "w", "W", "M", "@", "—": 1.0
        case "0"..."9", "a"..."z", "+", "=", "<", ">", "_", "~": 0.64
        case "A"..."Z": 0.78
        default: scalar.value > 0x2E80 ? 1.0 : 0.64
        }
    }

    /// The width the page draws `text` at (`textLength`), in picture units.
    public func width(of text: String) -> Double {
        let ems = text.unicodeScalars.reduce(0) { $0 + Self.advance($1) }
        return (ems * fontSize + 2).rounded(.up)
    }

    /// Candidate boxes for a label of `width` around (x, y), nearest first.
    func candidates(x: Double, y: Double, width: Double, steps: Int = 4) -> [(Box, leader: Bool)] {
        let h = lineHeight
        var result: [(Box, Bool)] = []
        for step in 0..<steps {
            let d = gap + Double(step) * h
            let leader = step > 0
            let positions: [(Double, Double)] = [
                (x + d, y - h / 2),  // right
                (x - d - width, y - h / 2),  // left
                (x + d * 0.8, y - d * 0.8 - h),  // above right
                (x + d * 0.8, y + d * 0.8),  // below right
                (x - d * 0.8 - width, y - d * 0.8 - h),  // above left
                (x - d * 0.8 - width, y + d * 0.8),  // below left
                (x - width / 2, y - d - h),  // above
                (x - width / 2, y + d),  // below
            ]
            for (bx, by) in positions {
                result.append((Box(x: bx, y: by, width: width, height: h), leader))
            }
        }
        return result
    }

    private func fits(_ box: Box, _ taken: [Box]) -> Bool {
        bounds.contains(box) && !taken.contains { $0.overlaps(box) }
    }

    /// Places a label for every item, clustering those that find no room.
    /// - Parameters:
    ///   - items: the points and their texts.
    ///   - obstacles: boxes no label may cover (the region names already drawn).
    public func place(_ items: [Item], obstacles: [Box] = []) -> Result {
        let ordered = items.sorted { ($0.y, $0.x, $0.id) < ($1.y, $1.x, $1.id) }
        // Markers are obstacles too (a label's own marker never meets it: the gap is wider than
        // the marker), so a name never hides a neighbour.
        var taken =
            obstacles
            + items.map {
                Box(x: $0.x - markerRadius, y: $0.y - markerRadius, width: 2 * markerRadius, height: 2 * markerRadius)
            }
        var result = Result()
        var unplaced: [Item] = []
        for item in ordered {
            let width = width(of: item.text)
            if let (box, leader) = candidates(x: item.x, y: item.y, width: width).first(where: { fits($0.0, taken) }) {
                taken.append(box)
                result.labels[item.id] = Placed(box: box, leader: leader)
            } else {
                unplaced.append(item)
            }
        }
        // Gather the unplaced: each cluster starts at the first unplaced point left and takes
        // every unplaced point within the radius of that seed.
        var remaining = unplaced
        while let seed = remaining.first {
            let near = remaining.filter { item in
                let dx = item.x - seed.x
                let dy = item.y - seed.y
                return dx * dx + dy * dy <= clusterRadius * clusterRadius
            }
            let ids = Set(near.map(\.id))
            remaining.removeAll { ids.contains($0.id) }
            let x = near.reduce(0) { $0 + $1.x } / Double(near.count)
            let y = near.reduce(0) { $0 + $1.y } / Double(near.count)
            var cluster = Cluster(members: near.map(\.id).sorted(), x: x, y: y, text: "", placed: nil)
            // Every count label is as wide as "+000", so that merging below never widens one;
            // a count looks farther out than a name (a leader line finds it).
            let width = width(of: "+000")
            if let (box, leader) = candidates(x: x, y: y, width: width, steps: 12).first(where: { fits($0.0, taken) }) {
                taken.append(box)
                cluster.placed = Placed(box: box, leader: leader)
            }
            result.clusters.append(cluster)
        }
        // A crowd whose count found no room either joins the nearest crowd whose count did.
        let placed = result.clusters.filter { $0.placed != nil }
        if !placed.isEmpty {
            var merged = placed
            for cluster in result.clusters where cluster.placed == nil {
                let nearest = merged.indices.min { i, j in
                    let (di, dj) = (merged[i], merged[j])
                    return (di.x - cluster.x) * (di.x - cluster.x) + (di.y - cluster.y) * (di.y - cluster.y)
                        < (dj.x - cluster.x) * (dj.x - cluster.x) + (dj.y - cluster.y) * (dj.y - cluster.y)
                }!
                merged[nearest].members = (merged[nearest].members + cluster.members).sorted()
            }
            result.clusters = merged
        }
        for index in result.clusters.indices {
            result.clusters[index].text = "+\(result.clusters[index].members.count)"
        }
        return result
    }
}
