import Foundation
import Synchronization

/// A structured logger shaped like swift-log's: a value passed into libraries, never built by them.
///
/// ```swift
/// var logger = Logger(label: "evaluator", handler: StreamLogHandler(format: .json))
/// logger[metadataKey: "venue"] = "museum"
/// logger.info("region loaded", metadata: ["region.id": "gallery-3"])
/// ```
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
        case trace, debug, info, notice, warning, error, critical

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }
        public var description: String {
            switch self {
            case .trace: "trace"
            case .debug: "debug"
            case .info: "info"
            case .notice: "notice"
            case .warning: "warning"
            case .error: "error"
            case .critical: "critical"
            }
        }

        /// Parses `trace`, `debug`, `info`, `notice`, `warning` (or `warn`), `error`, `critical`.
        public init?(name: String) {
            let lowered = name.lowercased()
            if lowered == "warn" {
                self = .warning
                return
            }
            guard let level = Level.allCases.first(where: { $0.description == lowered }) else { return nil }
            self = level
        }
    }

    /// Metadata values: strings, or nested lists and dictionaries.
    public typealias Metadata = [String: MetadataValue]

    public enum MetadataValue: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral,
        ExpressibleByStringInterpolation
    {
        case string(String)
        case array([MetadataValue])
        case dictionary([String: MetadataValue])

        public init(stringLiteral value: String) { self = .string(value) }
        public var description: String {
            switch self {
            case .string(let value): value
            case .array(let values): "[" + values.map(\.description).joined(separator: ", ") + "]"
            case .dictionary(let values):
                "{" + values.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ")
                    + "}"
            }
        }
    }

    public let label: String
    public var level: Level
    public var metadata: Metadata
    public let handler: any LogHandler

    public init(label: String, level: Level = .info, handler: any LogHandler) {
        self.label = label
        self.level = level
        self.metadata = [:]
        self.handler = handler
    }

    /// A logger that writes nothing (for tools and tests that do not care).
    public static func discarding(label: String = "discard") -> Logger {
        Logger(label: label, level: .critical, handler: DiscardingLogHandler())
    }

    public subscript(metadataKey key: String) -> MetadataValue? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(
        _ level: Level, _ message: @autoclosure () -> String, metadata extra: @autoclosure () -> Metadata? = nil,
        file: String = #fileID, line: Int = #line
    ) {
        guard level >= self.level else { return }
        var merged = metadata
        if let extra = extra() { merged.merge(extra) { $1 } }
        handler.write(
            LogRecord(
                time: Date(), level: level, label: label, message: message(), metadata: merged,
                source: "\(file):\(line)"))
    }

    public func trace(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(.trace, message(), metadata: metadata())
    }
    public func debug(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(.debug, message(), metadata: metadata())
    }
    public func info(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(.info, message(), metadata: metadata())
    }
    public func notice(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(.notice, message(), metadata: metadata())
    }
    public func warning(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(.warning, message(), metadata: metadata())
    }
    public func error(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(.error, message(), metadata: metadata())
    }
    public func critical(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(.critical, message(), metadata: metadata())
    }
}

/// One log event, as handed to a ``LogHandler``.
public struct LogRecord: Sendable {
    public var time: Date
    public var level: Logger.Level
    public var label: String
    public var message: String
    public var metadata: Logger.Metadata
    public var source: String
}

/// Where log records go.
public protocol LogHandler: Sendable {
    func write(_ record: LogRecord)
}

/// Drops every record.
public struct DiscardingLogHandler: LogHandler {
    public init() {}
    public func write(_ record: LogRecord) {}
}

/// Writes one line per record to standard error, as JSON or logfmt.
public final class StreamLogHandler: LogHandler {
    public enum Format: String, Sendable, CaseIterable {
        case json
        case logfmt
    }

    public let format: Format
    private let lock = Mutex(())
    private let write: @Sendable (String) -> Void

    /// - Parameter write: where lines go; standard error by default.
    public init(format: Format, write: @escaping @Sendable (String) -> Void = StreamLogHandler.standardError) {
        self.format = format
        self.write = write
    }

    public static let standardError: @Sendable (String) -> Void = { line in
        FileHandle.standardError.write(Data(line.utf8))
    }

    public func write(_ record: LogRecord) {
        let line = format == .json ? Self.json(record) : Self.logfmt(record)
        lock.withLock { _ in write(line + "\n") }
    }

    static func timestamp(_ date: Date) -> String {
        date.formatted(
            .iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted))
    }

    /// `{"t":"…","level":"info","label":"evaluator","msg":"…","region.id":"gallery-3"}`
    static func json(_ record: LogRecord) -> String {
        var object: [String: Any] = [
            "t": timestamp(record.time), "level": record.level.description, "label": record.label,
            "msg": record.message,
        ]
        for (key, value) in record.metadata where object[key] == nil { object[key] = jsonValue(value) }
        guard
            let data = try? JSONSerialization.data(
                withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        else { return "{\"msg\":\"unencodable log record\"}" }
        return String(decoding: data, as: UTF8.self)
    }

    private static func jsonValue(_ value: Logger.MetadataValue) -> Any {
        switch value {
        case .string(let string): string
        case .array(let values): values.map(jsonValue)
        case .dictionary(let values): values.mapValues(jsonValue)
        }
    }

    /// `t=… level=info label=evaluator msg="region loaded" region.id=gallery-3`
    static func logfmt(_ record: LogRecord) -> String {
        var parts = [
            "t=\(timestamp(record.time))", "level=\(record.level)", "label=\(quote(record.label))",
            "msg=\(quote(record.message))",
        ]
        for (key, value) in record.metadata.sorted(by: { $0.key < $1.key }) {
            parts.append("\(key)=\(quote(value.description))")
        }
        return parts.joined(separator: " ")
    }

    private static func quote(_ text: String) -> String {
        let plain =
            !text.isEmpty && text.unicodeScalars.allSatisfy { $0.value > 0x20 && $0 != "\"" && $0 != "=" && $0 != "\\" }
        if plain { return text }
        var escaped = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": escaped += "\\\""
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            case "\t": escaped += "\\t"
            default: escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped + "\""
    }
}
