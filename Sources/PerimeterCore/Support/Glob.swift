/// A shell-style pattern over ids: `*` any run of characters (also none), `?` one character,
/// everything else literal. `cafe-*` matches `cafe-1` and `cafe-north`; `*` matches every id.
///
/// Ids are matched by Unicode scalars, so `?` is one scalar whatever its UTF-8 length.
public struct Glob: Sendable, Hashable, CustomStringConvertible {
    public let pattern: String
    private let scalars: [Unicode.Scalar]

    /// - Throws: ``GlobError`` for an empty pattern or one with `[`, `]` or `\` (character
    ///   classes and escapes are not supported, and a pattern using them would silently match
    ///   something else).
    public init(_ pattern: String) throws(GlobError) {
        if pattern.isEmpty { throw GlobError(pattern: pattern, "is empty") }
        if let bad = pattern.unicodeScalars.first(where: { $0 == "[" || $0 == "]" || $0 == "\\" }) {
            throw GlobError(pattern: pattern, "uses '\(bad)'; only '*' and '?' are wildcards")
        }
        self.pattern = pattern
        scalars = Array(pattern.unicodeScalars)
    }

    public var description: String { pattern }

    /// Whether the pattern has no wildcard (it names one id).
    public var isLiteral: Bool { !scalars.contains { $0 == "*" || $0 == "?" } }

    /// Whether `id` matches the whole pattern. Linear backtracking on the last `*` only, so the
    /// cost is O(pattern × id) at worst, never exponential.
    public func matches(_ id: String) -> Bool {
        let text = Array(id.unicodeScalars)
        var p = 0
        var t = 0
        var star: Int?
        var resume = 0
        while t < text.count {
            if p < scalars.count, scalars[p] == "?" || scalars[p] == text[t] {
                p += 1
                t += 1
            } else if p < scalars.count, scalars[p] == "*" {
                star = p
                resume = t
                p += 1
            } else if let star {
                p = star + 1
                resume += 1
                t = resume
            } else {
                return false
            }
        }
        while p < scalars.count, scalars[p] == "*" { p += 1 }
        return p == scalars.count
    }
}

/// A pattern that cannot be used, and why.
public struct GlobError: Error, Sendable, Hashable, CustomStringConvertible {
    public var pattern: String
    public var problem: String
    public init(pattern: String, _ problem: String) {
        self.pattern = pattern
        self.problem = problem
    }
    public var description: String { "pattern '\(pattern)' \(problem)" }
}
