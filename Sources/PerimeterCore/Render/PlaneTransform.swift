/// A 2-D affine map, x' = a·x + c·y + e, y' = b·x + d·y + f: SVG's `matrix(a b c d e f)`.
///
/// Floor plans are georeferenced with it: two control points (pixel ↔ place) fix a similarity
/// (move, turn, one scale: a plan drawn to scale), three fix a general affine map (a scan that
/// is stretched or skewed). Both sides must be y-down planes (image pixels, the map picture),
/// so that a similarity never has to mirror.
public struct PlaneTransform: Sendable, Equatable, CustomStringConvertible {
    public var a, b, c, d, e, f: Double

    public init(a: Double, b: Double, c: Double, d: Double, e: Double, f: Double) {
        (self.a, self.b, self.c, self.d, self.e, self.f) = (a, b, c, d, e, f)
    }

    public static let identity = PlaneTransform(a: 1, b: 0, c: 0, d: 1, e: 0, f: 0)

    public struct Point: Sendable, Equatable {
        public var x: Double
        public var y: Double
        public init(_ x: Double, _ y: Double) {
            self.x = x
            self.y = y
        }
    }

    /// Why control points fix no transform.
    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
        public init(description: String) { self.description = description }
    }

    public func apply(_ p: Point) -> Point { Point(a * p.x + c * p.y + e, b * p.x + d * p.y + f) }

    public var determinant: Double { a * d - b * c }

    /// `self` after `first`: a point goes through `first`, then `self`.
    public func after(_ first: PlaneTransform) -> PlaneTransform {
        PlaneTransform(
            a: a * first.a + c * first.b, b: b * first.a + d * first.b,
            c: a * first.c + c * first.d, d: b * first.c + d * first.d,
            e: a * first.e + c * first.f + e, f: b * first.e + d * first.f + f)
    }

    /// The inverse map; nil when it flattens the plane (determinant 0).
    public var inverse: PlaneTransform? {
        let det = determinant
        guard det.isFinite, abs(det) > 1e-12 else { return nil }
        return PlaneTransform(
            a: d / det, b: -b / det, c: -c / det, d: a / det, e: (c * f - d * e) / det, f: (b * e - a * f) / det)
    }

    /// The transform taking each `from` point to its `to` point: a similarity for two pairs,
    /// the affine map for three.
    /// - Throws: ``Problem`` for another number of pairs, coincident points (two), or points
    ///   on one line (three).
    public static func fitting(from: [Point], to: [Point]) throws(Problem) -> PlaneTransform {
        guard from.count == to.count else {
            throw Problem(description: "\(from.count) source points but \(to.count) target points")
        }
        switch from.count {
        case 2: return try similarity(from: (from[0], from[1]), to: (to[0], to[1]))
        case 3: return try affine(from: (from[0], from[1], from[2]), to: (to[0], to[1], to[2]))
        default: throw Problem(description: "give two or three control points, got \(from.count)")
        }
    }

    /// Move, turn and scale (as complex numbers: w = s·z + t, s = (w₂ − w₁) / (z₂ − z₁)).
    static func similarity(from: (Point, Point), to: (Point, Point)) throws(Problem) -> PlaneTransform {
        let (zx, zy) = (from.1.x - from.0.x, from.1.y - from.0.y)
        let (wx, wy) = (to.1.x - to.0.x, to.1.y - to.0.y)
        let norm = zx * zx + zy * zy
        guard norm > 1e-18 else { throw Problem(description: "the two control points are at the same pixel") }
        guard wx * wx + wy * wy > 1e-18 else {
            throw Problem(description: "the two control points are at the same place")
        }
        // s = w / z = w · conj(z) / |z|²
        let sr = (wx * zx + wy * zy) / norm
        let si = (wy * zx - wx * zy) / norm
        // x' = sr·x − si·y + tx, y' = si·x + sr·y + ty
        let tx = to.0.x - (sr * from.0.x - si * from.0.y)
        let ty = to.0.y - (si * from.0.x + sr * from.0.y)
        return PlaneTransform(a: sr, b: si, c: -si, d: sr, e: tx, f: ty)
    }

    /// The affine map through three pairs (Cramer's rule on the source triangle).
    static func affine(from: (Point, Point, Point), to: (Point, Point, Point)) throws(Problem) -> PlaneTransform {
        let (p0, p1, p2) = from
        let (q0, q1, q2) = to
        let (ux, uy) = (p1.x - p0.x, p1.y - p0.y)
        let (vx, vy) = (p2.x - p0.x, p2.y - p0.y)
        let det = ux * vy - vx * uy
        let scale = max(ux * ux + uy * uy, vx * vx + vy * vy)
        guard scale > 0, abs(det) > 1e-9 * scale else {
            throw Problem(description: "the three control points lie on one line (pixels)")
        }
        let (sx, sy) = (q1.x - q0.x, q1.y - q0.y)
        let (tx, ty) = (q2.x - q0.x, q2.y - q0.y)
        // Solve M·u = s, M·v = t for M = [[a c], [b d]].
        let a = (sx * vy - tx * uy) / det
        let c = (tx * ux - sx * vx) / det
        let b = (sy * vy - ty * uy) / det
        let d = (ty * ux - sy * vx) / det
        let result = PlaneTransform(
            a: a, b: b, c: c, d: d, e: q0.x - a * p0.x - c * p0.y, f: q0.y - b * p0.x - d * p0.y)
        guard abs(result.determinant) > 1e-18 else {
            throw Problem(description: "the three control points lie on one line (places)")
        }
        return result
    }

    public var description: String { "matrix(\(a) \(b) \(c) \(d) \(e) \(f))" }
}
