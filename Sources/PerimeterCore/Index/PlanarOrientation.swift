/// The exact sign of a planar orientation determinant, the one predicate point-in-polygon tests rest on.
///
/// Floating-point evaluation answers almost every call; a call it cannot decide (the point within a few
/// ulps of the line) falls back to exact arithmetic, so a point exactly on an edge is recognised as such
/// and every test over the same vertices agrees with every other one. The filter is Shewchuk's
/// `orient2d` bound; the exact fallback sums the six products of the expanded determinant as a
/// floating-point expansion (FMA gives each product exactly as two doubles).
enum PlanarOrientation {
    /// Shewchuk's `ccwerrboundA`: (3 + 16ε)ε with ε = 2⁻⁵³.
    private static let errorBound = (3.0 + 16.0 * 0x1p-53) * 0x1p-53

    /// The sign of (b − a) × (c − a): +1 when c lies left of the directed line a→b, −1 right of it,
    /// 0 when the three points are exactly collinear.
    @inline(__always)
    static func sign(_ ax: Double, _ ay: Double, _ bx: Double, _ by: Double, _ cx: Double, _ cy: Double) -> Int {
        let left = (bx - ax) * (cy - ay)
        let right = (by - ay) * (cx - ax)
        let det = left - right
        let bound = errorBound * (abs(left) + abs(right))
        if det > bound { return 1 }
        if det < -bound { return -1 }
        return exactSign(ax, ay, bx, by, cx, cy)
    }

    /// The exact sign, for the rare calls the filter cannot decide.
    @inline(never)
    static func exactSign(_ ax: Double, _ ay: Double, _ bx: Double, _ by: Double, _ cx: Double, _ cy: Double) -> Int {
        // (b − a) × (c − a) = bx·cy − bx·ay − ax·cy − by·cx + by·ax + ay·cx, every product exact as hi + lo.
        var terms = Expansion()
        terms.addProduct(bx, cy)
        terms.addProduct(-bx, ay)
        terms.addProduct(-ax, cy)
        terms.addProduct(-by, cx)
        terms.addProduct(by, ax)
        terms.addProduct(ay, cx)
        return terms.sign
    }
}

/// A sum of up to twelve doubles kept exactly as a nonoverlapping expansion (Shewchuk's Grow-Expansion
/// with zero elimination), in a fixed-size tuple so the exact path allocates nothing.
private struct Expansion {
    private var parts:
        (Double, Double, Double, Double, Double, Double, Double, Double, Double, Double, Double, Double) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    private var count = 0

    /// Adds `x · y` exactly: the rounded product and its rounding error are both representable.
    mutating func addProduct(_ x: Double, _ y: Double) {
        let product = x * y
        let error = (-product).addingProduct(x, y)
        add(error)
        add(product)
    }

    /// Grow-Expansion: the new value ripples up through the components, smallest first.
    private mutating func add(_ value: Double) {
        withUnsafeMutableBytes(of: &parts) { raw in
            let parts = raw.bindMemory(to: Double.self)
            var carry = value
            var kept = 0
            for index in 0..<count {
                let (sum, error) = Self.twoSum(carry, parts[index])
                if error != 0 {
                    parts[kept] = error
                    kept += 1
                }
                carry = sum
            }
            if carry != 0 {
                parts[kept] = carry
                kept += 1
            }
            count = kept
        }
    }

    /// The sign of the exact sum: the sign of its largest component, which is the last one kept.
    var sign: Int {
        guard count > 0 else { return 0 }
        let top = withUnsafeBytes(of: parts) { $0.load(fromByteOffset: (count - 1) * 8, as: Double.self) }
        return top > 0 ? 1 : (top < 0 ? -1 : 0)
    }

    @inline(__always)
    private static func twoSum(_ a: Double, _ b: Double) -> (sum: Double, error: Double) {
        let sum = a + b
        let bVirtual = sum - a
        let aVirtual = sum - bVirtual
        return (sum, (a - aVirtual) + (b - bVirtual))
    }
}
