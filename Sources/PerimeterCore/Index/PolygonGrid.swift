/// An adaptive grid over a polygon's bounding box that answers point-in-polygon from one small cell.
///
/// The root is a coarse uniform grid (about one cell per `rootEdgesPerCell` edges, shaped to the box's
/// aspect ratio), small enough to stay in cache: for most points one lookup in it settles the answer. Each
/// cell is outside, inside, a leaf boundary cell, or — when more than `leafEdgeLimit` edges meet it — a
/// child grid over the cell, built the same way. Dense coastlines thus get fine cells and empty oceans
/// none, and a random point costs one or two cache misses.
///
/// A leaf boundary cell lists every edge that meets it (grown by a tiny margin, so rounding in the cell
/// lookup never lands a point in a cell that misses an edge near it) and stores a reference point strictly
/// inside it and off every edge, with the reference's status. A query counts the listed edges crossing
/// the segment from the point to the reference (`EdgeCrossing`, exact): O(edges in the cell).
///
/// Statuses need no global ray test: starting from a point of known status (outside the box for the root,
/// the parent cell's reference for a child grid), each cell's reference is reached from its neighbour's by
/// counting crossings along the short segment between them, which lies in the two cells, so only their edge
/// lists are consulted. Build and query share the exact crossing rule, so they agree on every degenerate
/// configuration.
///
/// Storage is flat: one array of grid headers, one of cell codes for all grids, and per leaf boundary cell a
/// reference point and a range of one edge-id array (CSR).
struct PolygonGrid: Sendable {
    /// Average edges per root cell. Larger keeps the root small and cached; the children take the detail.
    static let rootEdgesPerCell = 16.0
    /// Cells per edge in a child grid.
    static let childCellsPerEdge = 0.5
    /// A boundary cell with more edges than this gets a child grid (depth permitting).
    static let leafEdgeLimit = 16
    /// Child grids nest at most this deep (guards against edges that no subdivision separates, such as a
    /// fan of edges through one vertex).
    static let maximumDepth = 4
    /// The build gives up (and the polygon is answered by the plain crossing-number scan) once its work —
    /// edge–cell incidences listed plus edge distances computed to place reference points — passes
    /// `workPerEdge` per edge plus `workAllowance`. Real outlines stay far below (the time-zone polygons
    /// need about 3–6 per edge); crafted ones do not: a 3,000-vertex star (spikes through one centre)
    /// took 13.5 s to build and 66 ms per fix to query, a 58 KB comb of long parallel teeth 2.4 s to
    /// build (`scripts/bench-regions.sh`). Without a grid a query costs one pass over the edges, which
    /// the region parser bounds for live regions.
    static let workPerEdge = 64
    static let workAllowance = 1 << 20

    /// One uniform grid: the root or a child.
    struct Level: Sendable {
        var minX, minY, inverseCellWidth, inverseCellHeight: Double
        var columns, rows, firstCell: Int
    }

    // Cell codes.
    private static let outsideCode: UInt32 = 0
    private static let insideCode: UInt32 = 1
    /// A boundary cell without a usable reference point: its queries run the full crossing-number test.
    private static let fallbackCode: UInt32 = 2
    /// Leaf boundary cell b with reference status s (0 or 1) has code `firstBoundaryCode + 2b + s`.
    private static let firstBoundaryCode: UInt32 = 4
    /// A cell refined by child grid g has code `childFlag | g`.
    private static let childFlag: UInt32 = 1 << 31

    private let levels: [Level]
    private let cells: [UInt32]
    /// Per leaf boundary cell, its reference point's x and y.
    private let references: [Double]
    /// Per leaf boundary cell b, its edges are `edgeIDs[edgeOffsets[b]..<edgeOffsets[b + 1]]`.
    private let edgeOffsets: [UInt32]
    /// Edge ids: the index of the edge's first vertex.
    private let edgeIDs: [UInt32]

    /// Whether the point (known to lie in the polygon's bounding box) is inside or on the boundary.
    ///
    /// - Parameter fallback: the full crossing-number test, for the (practically nonexistent) cells where
    ///   no reference point could be placed.
    @inline(__always)
    func contains(x: Double, y: Double, coordinates: UnsafeBufferPointer<Double>, fallback: () -> Bool) -> Bool {
        var levelIndex = 0
        var code: UInt32
        repeat {
            let level = levels[levelIndex]
            // Clamped both ways: a point on the far edge maps one past the last cell, and a point that
            // rounding put in a parent cell may lie a hair outside it.
            let column = min(max(Int((x - level.minX) * level.inverseCellWidth), 0), level.columns - 1)
            let row = min(max(Int((y - level.minY) * level.inverseCellHeight), 0), level.rows - 1)
            code = cells[level.firstCell + row * level.columns + column]
            levelIndex = Int(code & ~Self.childFlag)
        } while code >= Self.childFlag
        if code < Self.fallbackCode { return code == Self.insideCode }
        if code == Self.fallbackCode { return fallback() }
        let boundaryCell = Int((code - Self.firstBoundaryCode) >> 1)
        var inside = code & 1 == 1
        let rx = references[2 * boundaryCell], ry = references[2 * boundaryCell + 1]
        // Edges whose box misses the segment's box can neither cross it nor hold the point.
        let segmentMinX = min(x, rx), segmentMaxX = max(x, rx)
        let segmentMinY = min(y, ry), segmentMaxY = max(y, ry)
        return edgeIDs.withUnsafeBufferPointer { edgeIDs in
            for slot in Int(edgeOffsets[boundaryCell])..<Int(edgeOffsets[boundaryCell + 1]) {
                let index = 2 * Int(edgeIDs[slot])
                let ax = coordinates[index], ay = coordinates[index + 1]
                let bx = coordinates[index + 2], by = coordinates[index + 3]
                if (ax < segmentMinX && bx < segmentMinX) || (ax > segmentMaxX && bx > segmentMaxX)
                    || (ay < segmentMinY && by < segmentMinY) || (ay > segmentMaxY && by > segmentMaxY)
                {
                    continue
                }
                switch EdgeCrossing.classify(px: x, py: y, rx: rx, ry: ry, ax: ax, ay: ay, bx: bx, by: by) {
                case .none: break
                case .crossing: inside.toggle()
                case .onEdge: return true
                }
            }
            return inside
        }
    }

    /// The ids of the edges listed in the leaf cells that `box` meets (plus one cell around, against
    /// rounding), sorted and unique: a superset of the edges meeting `box`. Nil when that would cover a
    /// large part of the root grid (scanning all edges is then cheaper) or meets a fallback cell.
    func edgeIDs(near box: BoundingBox) -> [UInt32]? {
        let root = levels[0]
        guard let columns = Self.cellRange(box.minLon, box.maxLon, root.minX, root.inverseCellWidth, root.columns),
            let rows = Self.cellRange(box.minLat, box.maxLat, root.minY, root.inverseCellHeight, root.rows)
        else { return [] }
        guard columns.count * rows.count * 4 < root.columns * root.rows else { return nil }
        var result: [UInt32] = []
        var pending = [(level: 0, columns: columns, rows: rows)]
        while let (levelIndex, columns, rows) = pending.popLast() {
            let level = levels[levelIndex]
            for row in rows {
                for column in columns {
                    let code = cells[level.firstCell + row * level.columns + column]
                    if code >= Self.childFlag {
                        let child = levels[Int(code & ~Self.childFlag)]
                        if let childColumns = Self.cellRange(
                            box.minLon, box.maxLon, child.minX, child.inverseCellWidth, child.columns),
                            let childRows = Self.cellRange(
                                box.minLat, box.maxLat, child.minY, child.inverseCellHeight, child.rows)
                        {
                            pending.append((Int(code & ~Self.childFlag), childColumns, childRows))
                        }
                    } else if code == Self.fallbackCode {
                        return nil
                    } else if code >= Self.firstBoundaryCode {
                        let boundaryCell = Int((code - Self.firstBoundaryCode) >> 1)
                        result.append(
                            contentsOf: edgeIDs[Int(edgeOffsets[boundaryCell])..<Int(edgeOffsets[boundaryCell + 1])])
                    }
                }
            }
        }
        result.sort()
        var unique = 0
        for id in result where unique == 0 || result[unique - 1] != id {
            result[unique] = id
            unique += 1
        }
        result.removeLast(result.count - unique)
        return result
    }

    /// The cells of one axis that [low, high] meets, grown by one cell; nil when none.
    private static func cellRange(
        _ low: Double, _ high: Double, _ origin: Double, _ inverseSize: Double, _ count: Int
    )
        -> ClosedRange<Int>?
    {
        // Clamped before conversion, so infinite bounds are fine; NaN fails the guard.
        let first = ((low - origin) * inverseSize).rounded(.down) - 1
        let last = ((high - origin) * inverseSize).rounded(.down) + 1
        guard first <= last, last >= 0, first < Double(count) else { return nil }
        return Int(max(first, 0))...Int(min(last, Double(count - 1)))
    }

    // MARK: - Building

    /// Builds the grid for the polygon whose closed rings are stored in `coordinates` (x, y pairs) and end
    /// at the vertex indices `ringEnds`. `box` must have positive, finite width and height.
    ///
    /// Nil when the build would cost more than its work budget (``workPerEdge``): a grid cannot
    /// separate edges that all cross the same cells (a fan, a comb of long teeth), and building one
    /// then costs far more than scanning the edges.
    init?(coordinates: [Double], ringEnds: [Int], box: BoundingBox) {
        var builder = Builder(coordinates: coordinates, ringEnds: ringEnds, box: box)
        builder.build(box: box)
        guard builder.work <= builder.workLimit else { return nil }
        levels = builder.levels
        cells = builder.cells
        references = builder.references
        edgeOffsets = builder.edgeOffsets
        edgeIDs = builder.edgeIDs
    }

    /// The build's working state and output; see `PolygonGrid` for the plan.
    private struct Builder {
        let coordinates: [Double]
        let ringEnds: [Int]
        /// Scale of the coordinates, for the absolute part of the margins and clearances.
        let magnitude: Double

        var levels: [Level] = []
        var cells: [UInt32] = []
        var references: [Double] = []
        var edgeOffsets: [UInt32] = [0]
        var edgeIDs: [UInt32] = []
        /// Per edge, the last crossing count that looked at it: each edge is counted once per segment even
        /// when both cells around the segment list it.
        var stamps: [UInt32]
        var stamp: UInt32 = 0
        /// Work done so far (see ``PolygonGrid/workPerEdge``) and the most allowed.
        var work = 0
        let workLimit: Int

        init(coordinates: [Double], ringEnds: [Int], box: BoundingBox) {
            self.coordinates = coordinates
            self.ringEnds = ringEnds
            magnitude = max(abs(box.minLon), abs(box.maxLon), abs(box.minLat), abs(box.maxLat), 1)
            stamps = Array(repeating: 0, count: coordinates.count / 2)
            workLimit = PolygonGrid.workPerEdge * (coordinates.count / 2) + PolygonGrid.workAllowance
        }

        /// One grid level's geometry.
        struct Frame {
            let minX, minY, cellWidth, cellHeight: Double
            let columns, rows: Int
            /// How far a cell is grown when collecting its edges: far beyond the rounding error of
            /// locating a point's cell or of clipping an edge to a column, far below anything geometric.
            let margin: Double

            // Truncation is floor here (negative positions are clamped first), and it avoids a libm call.
            func column(_ x: Double) -> Int {
                let position = (x - minX) / cellWidth
                return position < 0 ? 0 : (position >= Double(columns) ? columns - 1 : Int(position))
            }

            func row(_ y: Double) -> Int {
                let position = (y - minY) / cellHeight
                return position < 0 ? 0 : (position >= Double(rows) ? rows - 1 : Int(position))
            }

            func center(_ cell: Int) -> (x: Double, y: Double) {
                (minX + (Double(cell % columns) + 0.5) * cellWidth, minY + (Double(cell / columns) + 0.5) * cellHeight)
            }
        }

        /// A grid still to build: over a rectangle, for the edges meeting it, starting status propagation
        /// from a point of known status such that every edge crossing the segment from it to any point of
        /// the rectangle is among those edges.
        struct Task {
            var minX, minY, width, height, targetCells: Double
            var start: (x: Double, y: Double, inside: Bool)
            /// The task's edges in its generation's edge buffer.
            var edges: Range<Int>
            var depth: Int
            /// The parent cell to point at the new grid; nil for the root.
            var parentCell: Int?
        }

        // Scratch space reused by every level, so small child grids cost no allocations.
        private var offsets: [UInt32] = []
        private var cellEdges: [UInt32] = []
        private var referenceX: [Double] = []
        private var referenceY: [Double] = []
        private var insides: [Bool] = []

        /// Builds the root grid over `box`, then the child grids generation by generation (breadth first,
        /// so each generation's edge lists live in one buffer).
        mutating func build(box: BoundingBox) {
            var edges: [UInt32] = []
            var start = 0
            for end in ringEnds {
                for edge in start..<max(start, end - 1) { edges.append(UInt32(edge)) }
                start = end
            }
            // Outside the box, hence outside the polygon.
            let outside = (x: box.minLon - box.width, y: box.minLat - box.height, inside: false)
            var tasks = [
                Task(
                    minX: box.minLon, minY: box.minLat, width: box.width, height: box.height,
                    targetCells: Double(edges.count) / PolygonGrid.rootEdgesPerCell, start: outside,
                    edges: 0..<edges.count, depth: 0, parentCell: nil)
            ]
            while !tasks.isEmpty {
                var childTasks: [Task] = []
                var childEdges: [UInt32] = []
                for task in tasks {
                    buildLevel(task, edges: edges[task.edges], childTasks: &childTasks, childEdges: &childEdges)
                    if work > workLimit { return }
                }
                tasks = childTasks
                edges = childEdges
            }
        }

        /// Builds one grid: its cells' edge lists, reference points, statuses and codes. Leaf boundary cells go
        /// to the output; crowded ones become tasks for the next generation.
        private mutating func buildLevel(
            _ task: Task, edges: ArraySlice<UInt32>, childTasks: inout [Task], childEdges: inout [UInt32]
        ) {
            let target = min(max(task.targetCells, 1), Double(1 << 24))
            // Square-ish cells: columns / rows ≈ width / height, columns · rows ≈ target.
            let columns = Int(min(max((target * task.width / task.height).squareRoot().rounded(), 1), target))
            let rows = Int(min(max((target / Double(columns)).rounded(), 1), target))
            let cellCount = columns * rows
            let cellWidth = task.width / Double(columns), cellHeight = task.height / Double(rows)
            let frame = Frame(
                minX: task.minX, minY: task.minY, cellWidth: cellWidth, cellHeight: cellHeight, columns: columns,
                rows: rows, margin: 1e-7 * max(cellWidth, cellHeight) + 1e-12 * magnitude)
            if let parentCell = task.parentCell { cells[parentCell] = PolygonGrid.childFlag | UInt32(levels.count) }
            let firstCell = cells.count
            levels.append(
                Level(
                    minX: task.minX, minY: task.minY, inverseCellWidth: Double(columns) / task.width,
                    inverseCellHeight: Double(rows) / task.height, columns: columns, rows: rows, firstCell: firstCell))
            cells.append(contentsOf: repeatElement(0, count: cellCount))

            // Edges per cell, as CSR: cell c lists cellEdges[offsets[c]..<offsets[c + 1]]. Counted into
            // offsets[c + 2], summed so offsets[c + 1] is c's start, then filled advancing offsets[c + 1].
            offsets.removeAll(keepingCapacity: true)
            offsets.append(contentsOf: repeatElement(0, count: cellCount + 2))
            forEachEdgeCell(edges, frame) { cell, _ in offsets[cell + 2] += 1 }
            for cell in 0..<cellCount { offsets[cell + 2] += offsets[cell + 1] }
            work += Int(offsets[cellCount + 1])
            if work > workLimit { return }
            cellEdges.removeAll(keepingCapacity: true)
            cellEdges.append(contentsOf: repeatElement(0, count: Int(offsets[cellCount + 1])))
            forEachEdgeCell(edges, frame) { cell, edge in
                cellEdges[Int(offsets[cell + 1])] = edge
                offsets[cell + 1] += 1
            }

            // Reference points (NaN where none could be placed) and their statuses.
            referenceX.removeAll(keepingCapacity: true)
            referenceY.removeAll(keepingCapacity: true)
            for cell in 0..<cellCount {
                let list = Int(offsets[cell])..<Int(offsets[cell + 1])
                let point = list.isEmpty ? frame.center(cell) : placeReference(cell: cell, frame: frame, edges: list)
                if work > workLimit { return }
                referenceX.append(point?.x ?? .nan)
                referenceY.append(point?.y ?? .nan)
            }
            propagateStatuses(frame: frame, start: task.start, startEdges: edges)

            for cell in 0..<cellCount {
                let list = cellEdges[Int(offsets[cell])..<Int(offsets[cell + 1])]
                let code: UInt32
                if list.isEmpty {
                    code = insides[cell] ? PolygonGrid.insideCode : PolygonGrid.outsideCode
                } else if referenceX[cell].isNaN {
                    code = PolygonGrid.fallbackCode
                } else if list.count > PolygonGrid.leafEdgeLimit && task.depth < PolygonGrid.maximumDepth {
                    let first = childEdges.count
                    childEdges.append(contentsOf: list)
                    childTasks.append(
                        Task(
                            minX: task.minX + Double(cell % columns) * cellWidth,
                            minY: task.minY + Double(cell / columns) * cellHeight, width: cellWidth,
                            height: cellHeight, targetCells: Double(list.count) * PolygonGrid.childCellsPerEdge,
                            start: (referenceX[cell], referenceY[cell], insides[cell]), edges: first..<childEdges.count,
                            depth: task.depth + 1, parentCell: firstCell + cell))
                    code = 0  // replaced when the child is built
                } else {
                    let boundaryCell = UInt32(edgeOffsets.count - 1)
                    references.append(referenceX[cell])
                    references.append(referenceY[cell])
                    edgeIDs.append(contentsOf: list)
                    edgeOffsets.append(UInt32(edgeIDs.count))
                    code = PolygonGrid.firstBoundaryCode + 2 * boundaryCell + (insides[cell] ? 1 : 0)
                }
                cells[firstCell + cell] = code
            }
        }

        // MARK: Edges per cell

        /// Calls `body(cell, edge)` once for every cell of the frame each edge meets (cells grown by the
        /// margin).
        ///
        /// The edge is walked along its dominant axis, column by column for a flat edge and row by row for
        /// a steep one, so the interpolated coordinate has a slope of at most 1 and its rounding error stays
        /// far inside the margin.
        private func forEachEdgeCell(
            _ edges: ArraySlice<UInt32>, _ frame: Frame, _ body: (_ cell: Int, _ edge: UInt32) -> Void
        ) {
            let margin = frame.margin
            for edge in edges {
                let index = 2 * Int(edge)
                let ax = coordinates[index], ay = coordinates[index + 1]
                let bx = coordinates[index + 2], by = coordinates[index + 3]
                if abs(bx - ax) >= abs(by - ay) {
                    for column in frame.column(min(ax, bx) - margin)...frame.column(max(ax, bx) + margin) {
                        let (low, high) = Self.span(
                            of: (ax, ay), (bx, by), from: frame.minX + Double(column) * frame.cellWidth - margin,
                            to: frame.minX + Double(column + 1) * frame.cellWidth + margin)
                        for row in frame.row(low - margin)...frame.row(high + margin) {
                            body(row * frame.columns + column, edge)
                        }
                    }
                } else {
                    for row in frame.row(min(ay, by) - margin)...frame.row(max(ay, by) + margin) {
                        let (low, high) = Self.span(
                            of: (ay, ax), (by, bx), from: frame.minY + Double(row) * frame.cellHeight - margin,
                            to: frame.minY + Double(row + 1) * frame.cellHeight + margin)
                        for column in frame.column(low - margin)...frame.column(high + margin) {
                            body(row * frame.columns + column, edge)
                        }
                    }
                }
            }
        }

        /// The range of the second coordinate along segment a–b while its first coordinate runs over
        /// [from, to] (clipped to the segment). Coordinates are passed as (primary, secondary).
        private static func span(
            of a: (Double, Double), _ b: (Double, Double), from: Double, to: Double
        )
            -> (Double, Double)
        {
            let low = max(from, min(a.0, b.0)), high = min(to, max(a.0, b.0))
            let delta = b.0 - a.0
            guard delta != 0, low <= high else { return (min(a.1, b.1), max(a.1, b.1)) }
            let slope = (b.1 - a.1) / delta
            let first = a.1 + (low - a.0) * slope, second = a.1 + (high - a.0) * slope
            // Clamp to the segment's own range: interpolation must not overshoot the endpoints.
            return (max(min(first, second), min(a.1, b.1)), min(max(first, second), max(a.1, b.1)))
        }

        // MARK: Reference points

        /// A reference point for a boundary cell: the first candidate (centre first, then a Halton sequence
        /// over the cell's middle 80 %) comfortably clear of the cell's edges, else the clearest candidate
        /// that is exactly off every edge; nil if all 256 candidates lie on edges.
        private mutating func placeReference(cell: Int, frame: Frame, edges: Range<Int>) -> (x: Double, y: Double)? {
            let left = frame.minX + Double(cell % frame.columns) * frame.cellWidth
            let bottom = frame.minY + Double(cell / frame.columns) * frame.cellHeight
            let comfortable = 1e-3 * min(frame.cellWidth, frame.cellHeight)
            var best: (x: Double, y: Double, clearance: Double)?
            for candidate in 0..<256 {
                work += edges.count
                if work > workLimit { return nil }
                let u = candidate == 0 ? 0.5 : 0.1 + 0.8 * Self.halton(candidate, 2)
                let v = candidate == 0 ? 0.5 : 0.1 + 0.8 * Self.halton(candidate, 3)
                let x = left + u * frame.cellWidth, y = bottom + v * frame.cellHeight
                guard let clearance = clearance(x: x, y: y, edges: edges) else { continue }
                if clearance > best?.clearance ?? -1 { best = (x, y, clearance) }
                if clearance >= comfortable { break }
            }
            return best.map { (x: $0.x, y: $0.y) }
        }

        /// The distance from the point to the nearest of the edges `cellEdges[edges]`, or nil if it lies
        /// exactly on one.
        private func clearance(x: Double, y: Double, edges: Range<Int>) -> Double? {
            var nearest = Double.infinity
            for slot in edges {
                let index = 2 * Int(cellEdges[slot])
                let ax = coordinates[index], ay = coordinates[index + 1]
                let bx = coordinates[index + 2], by = coordinates[index + 3]
                let distance = Self.distance(x, y, ax, ay, bx, by)
                // Rounding can only blur distances near zero; decide those exactly.
                if distance < 1e-9 * magnitude && EdgeCrossing.isOnEdge(x, y, ax, ay, bx, by) { return nil }
                nearest = min(nearest, distance)
            }
            return nearest
        }

        private static func distance(
            _ px: Double, _ py: Double, _ ax: Double, _ ay: Double, _ bx: Double, _ by: Double
        ) -> Double {
            let dx = bx - ax, dy = by - ay
            let lengthSquared = dx * dx + dy * dy
            let t = lengthSquared > 0 ? min(max(((px - ax) * dx + (py - ay) * dy) / lengthSquared, 0), 1) : 0
            let ex = px - (ax + t * dx), ey = py - (ay + t * dy)
            return (ex * ex + ey * ey).squareRoot()
        }

        /// The radical inverse of `index` in `base`: a low-discrepancy sequence in [0, 1).
        private static func halton(_ index: Int, _ base: Int) -> Double {
            var result = 0.0, fraction = 1.0 / Double(base), rest = index
            while rest > 0 {
                result += Double(rest % base) * fraction
                rest /= base
                fraction /= Double(base)
            }
            return result
        }

        // MARK: Statuses

        /// Each cell's reference status (into `insides`): carried from `start` to cell 0's reference (over
        /// `startEdges`), then from cell to cell along each row, and from row to row up column 0.
        private mutating func propagateStatuses(
            frame: Frame, start: (x: Double, y: Double, inside: Bool), startEdges: ArraySlice<UInt32>
        ) {
            insides.removeAll(keepingCapacity: true)
            insides.append(contentsOf: repeatElement(false, count: frame.columns * frame.rows))
            // The last point of known status, and the cell whose edges cover the way from it (-1: `startEdges`).
            var rowStart = (x: start.x, y: start.y, inside: start.inside, cell: -1)
            for row in 0..<frame.rows {
                var previous = rowStart
                for column in 0..<frame.columns {
                    let cell = row * frame.columns + column
                    let x = referenceX[cell], y = referenceY[cell]
                    if x.isNaN {
                        // No reference: the cell falls back to full tests, and the chain restarts after it.
                        previous.cell = cell
                    } else {
                        var crossings = false
                        if previous.cell >= 0 && referenceX[previous.cell].isNaN {
                            crossings = fullTest(x: x, y: y) != previous.inside
                        } else {
                            stamp &+= 1
                            if previous.cell < 0 {
                                countCrossings(from: previous, to: (x, y), edges: startEdges, parity: &crossings)
                            } else {
                                countCrossings(from: previous, to: (x, y), cell: previous.cell, parity: &crossings)
                            }
                            countCrossings(from: previous, to: (x, y), cell: cell, parity: &crossings)
                        }
                        insides[cell] = previous.inside != crossings
                        previous = (x, y, insides[cell], cell)
                    }
                    if column == 0 { rowStart = previous }
                }
            }
        }

        /// `countCrossings` over a cell's edge list.
        private mutating func countCrossings(
            from: (x: Double, y: Double, inside: Bool, cell: Int), to: (x: Double, y: Double), cell: Int,
            parity: inout Bool
        ) {
            for slot in Int(offsets[cell])..<Int(offsets[cell + 1]) {
                countCrossing(from: from, to: to, edge: Int(cellEdges[slot]), parity: &parity)
            }
        }

        /// Toggles `parity` for every edge (not yet seen under the current stamp) crossing from → to.
        private mutating func countCrossings(
            from: (x: Double, y: Double, inside: Bool, cell: Int), to: (x: Double, y: Double),
            edges: ArraySlice<UInt32>, parity: inout Bool
        ) {
            for edge in edges { countCrossing(from: from, to: to, edge: Int(edge), parity: &parity) }
        }

        /// Toggles `parity` if the edge (not yet seen under the current stamp) crosses from → to.
        @inline(__always)
        private mutating func countCrossing(
            from: (x: Double, y: Double, inside: Bool, cell: Int), to: (x: Double, y: Double), edge: Int,
            parity: inout Bool
        ) {
            guard stamps[edge] != stamp else { return }
            stamps[edge] = stamp
            let crossing = EdgeCrossing.classify(
                px: from.x, py: from.y, rx: to.x, ry: to.y, ax: coordinates[2 * edge], ay: coordinates[2 * edge + 1],
                bx: coordinates[2 * edge + 2], by: coordinates[2 * edge + 3])
            // `from` is a reference point or the outside start, never on an edge: `.onEdge` cannot occur.
            if crossing == .crossing { parity.toggle() }
        }

        private func fullTest(x: Double, y: Double) -> Bool {
            coordinates.withUnsafeBufferPointer {
                PolygonIndex.crossingNumberContains(x: x, y: y, coordinates: $0, ringEnds: ringEnds)
            }
        }
    }
}
