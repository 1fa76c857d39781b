/// Everything wrong with a configuration, each problem naming its key path and source.
///
/// `broker.port: expected an integer 1–65535, got "abc" (from PERIMETER_BROKER_PORT)`
public struct ConfigError: Error, CustomStringConvertible, Sendable, Equatable {
    public struct Problem: Sendable, Equatable, CustomStringConvertible {
        public var key: String
        public var message: String
        public var origin: String?

        public var description: String {
            "\(key): \(message)" + (origin.map { " (from \($0))" } ?? "")
        }
    }

    public var problems: [Problem]

    public init(_ problems: [Problem]) { self.problems = problems }

    public init(key: String, _ message: String, origin: String? = nil) {
        self.problems = [Problem(key: key, message: message, origin: origin)]
    }

    public var description: String {
        if problems.count == 1 { return "configuration error: \(problems[0])" }
        return "configuration has \(problems.count) errors:\n" + problems.map { "  \($0)" }.joined(separator: "\n")
    }
}
