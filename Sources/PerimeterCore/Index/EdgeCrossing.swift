/// How a polygon edge meets the segment from a query point p to a reference point r whose inside/outside
/// status is known; counting `.crossing` over all edges gives p's status relative to r's (even-odd).
///
/// Degenerate contacts — the segment passing exactly through a vertex, or running along an edge — are
/// decided as if the segment were shifted by an infinitesimal amount to its left (the side where
/// orientation is positive): a vertex on the segment's line counts as lying right of it. The shifted
/// segment meets the boundary only in proper crossings and its ends keep p's and r's status, so the
/// count is exact whatever the data's collinear runs, spikes and shared coordinates. Only r must not lie
/// on the boundary (the builder guarantees it); p on an edge is reported as `.onEdge`.
enum EdgeCrossing {
    case none
    case crossing
    /// p lies on the edge (boundary points count as inside).
    case onEdge

    /// Classifies edge a→b against segment p→r. Exact: every sign comes from `PlanarOrientation`.
    @inline(__always)
    static func classify(
        px: Double, py: Double, rx: Double, ry: Double, ax: Double, ay: Double, bx: Double, by: Double
    ) -> EdgeCrossing {
        let aSide = PlanarOrientation.sign(px, py, rx, ry, ax, ay)
        let bSide = PlanarOrientation.sign(px, py, rx, ry, bx, by)
        if (aSide > 0) == (bSide > 0) {
            // Both on one side of the shifted segment. p can still be on the edge only if the edge touches
            // the segment's line: at an endpoint or along its whole length.
            if (aSide == 0 || bSide == 0) && isOnEdge(px, py, ax, ay, bx, by) { return .onEdge }
            return .none
        }
        // The edge crosses the shifted line. If an endpoint lies on the original line, the crossing is
        // (infinitesimally close to) that endpoint.
        if aSide == 0 { return touchCrossing(px, py, rx, ry, vx: ax, vy: ay) }
        if bSide == 0 { return touchCrossing(px, py, rx, ry, vx: bx, vy: by) }
        // A proper crossing of the two lines, strictly inside the edge: it lies on the segment iff p and r
        // are on opposite sides of the edge's line. p on that line means p is the crossing point itself.
        let pSide = PlanarOrientation.sign(ax, ay, bx, by, px, py)
        if pSide == 0 { return .onEdge }
        let rSide = PlanarOrientation.sign(ax, ay, bx, by, rx, ry)
        return rSide != 0 && (pSide > 0) != (rSide > 0) ? .crossing : .none
    }

    /// The edge leaves the segment's line at vertex v: a crossing iff v lies strictly between p and r.
    @inline(__always)
    private static func touchCrossing(
        _ px: Double, _ py: Double, _ rx: Double, _ ry: Double, vx: Double, vy: Double
    )
        -> EdgeCrossing
    {
        if vx == px && vy == py { return .onEdge }
        // v, p and r are collinear and p ≠ r here (otherwise every side would be 0), so comparing along
        // the segment's dominant axis is exact.
        if abs(rx - px) >= abs(ry - py) {
            return (px < vx && vx < rx) || (rx < vx && vx < px) ? .crossing : .none
        }
        return (py < vy && vy < ry) || (ry < vy && vy < py) ? .crossing : .none
    }

    /// Whether p lies on the closed segment a–b, exactly.
    @inline(__always)
    static func isOnEdge(_ px: Double, _ py: Double, _ ax: Double, _ ay: Double, _ bx: Double, _ by: Double) -> Bool {
        px >= min(ax, bx) && px <= max(ax, bx) && py >= min(ay, by) && py <= max(ay, by)
            && PlanarOrientation.sign(ax, ay, bx, by, px, py) == 0
    }
}
