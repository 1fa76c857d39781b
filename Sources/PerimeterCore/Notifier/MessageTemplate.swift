import Foundation

/// A notification text with placeholders, checked when the rule is loaded:
/// `"Your order is ready at {ready:time} — {price:currency}"`.
///
/// - `{subject}`, `{region}` (the region's name, else its id), `{regionId}`, `{event}`
///   (`enter`, `exit`, `dwell`), `{venue}`, `{rule}`;
/// - `{time}`, `{date}`, `{datetime}`: the event's time in the venue's time zone, in the
///   recipient's conventions, with an optional style `:short`, `:medium`, `:long`, `:full`;
/// - the rule's `fields` by name, plain or with a format: `:currency` (the venue's currency,
///   always its ISO 4217 code, never the recipient's), `:number`, `:integer`, `:percent`,
///   `:time` / `:date` / `:datetime` (a number of seconds after the event, or an ISO 8601 time).
///
/// `{{` and `}}` stand for literal braces.
public struct MessageTemplate: Sendable, Hashable {
    public enum Segment: Sendable, Hashable {
        case text(String)
        case placeholder(name: String, format: Format?)
    }

    public enum Format: String, Sendable, Hashable, CaseIterable {
        case short, medium, long, full
        case currency, number, integer, percent
        case time, date, datetime
    }

    /// The built-in placeholders (rule fields come on top).
    public static let builtIn = ["subject", "region", "regionId", "event", "venue", "rule", "time", "date", "datetime"]
    static let clockNames: Set<String> = ["time", "date", "datetime"]
    static let styles: Set<Format> = [.short, .medium, .long, .full]

    public let text: String
    public let segments: [Segment]

    /// - Parameter fields: the rule's fields, the only other names a placeholder may use.
    /// - Throws: ``TemplateError`` naming the placeholder: unknown name, a format its value
    ///   cannot take, an unclosed brace.
    public init(_ text: String, fields: [String: JSONValue] = [:]) throws(TemplateError) {
        self.text = text
        var segments: [Segment] = []
        var literal = ""
        var scalars = text.unicodeScalars.makeIterator()
        while let scalar = scalars.next() {
            switch scalar {
            case "{":
                var inner = ""
                var closed = false
                while let next = scalars.next() {
                    if next == "}" {
                        closed = true
                        break
                    }
                    if next == "{" && inner.isEmpty {
                        break
                    }
                    inner.unicodeScalars.append(next)
                }
                if !closed && inner.isEmpty {
                    literal += "{"  // `{{`
                    continue
                }
                guard closed else { throw TemplateError("unclosed '{\(inner)' (write {{ for a literal brace)") }
                if !literal.isEmpty { segments.append(.text(literal)) }
                literal = ""
                segments.append(try Self.placeholder(inner, fields: fields))
            case "}":
                var lookahead = scalars
                if lookahead.next() == "}" { scalars = lookahead }
                literal += "}"
            default:
                literal.unicodeScalars.append(scalar)
            }
        }
        if !literal.isEmpty { segments.append(.text(literal)) }
        self.segments = segments
    }

    private static func placeholder(_ inner: String, fields: [String: JSONValue]) throws(TemplateError) -> Segment {
        let parts = inner.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        let name = parts[0]
        var format: Format?
        if parts.count == 2 {
            guard let known = Format(rawValue: parts[1]) else {
                throw TemplateError(
                    "{\(inner)}: unknown format '\(parts[1])' (known: \(Format.allCases.map(\.rawValue).joined(separator: ", ")))"
                )
            }
            format = known
        }
        if clockNames.contains(name) {
            if let format, !styles.contains(format) {
                throw TemplateError("{\(inner)}: \(name) takes a style: short, medium, long or full")
            }
            return .placeholder(name: name, format: format)
        }
        if builtIn.contains(name) {
            if let format { throw TemplateError("{\(inner)}: \(name) takes no format, got '\(format.rawValue)'") }
            return .placeholder(name: name, format: nil)
        }
        guard let value = fields[name] else {
            let known = (builtIn + fields.keys.sorted()).joined(separator: ", ")
            throw TemplateError("unknown placeholder {\(name)} (known: \(known))")
        }
        if let format {
            switch (format, value) {
            case (.currency, .number), (.number, .number), (.integer, .number), (.percent, .number),
                (.time, .number), (.date, .number), (.datetime, .number),
                (.time, .string), (.date, .string), (.datetime, .string):
                break
            default:
                throw TemplateError(
                    "{\(inner)}: field '\(name)' is \(value.serialized()), which cannot be shown as \(format.rawValue)")
            }
            if case .string(let text) = value, Timestamp.parse(text) == nil {
                throw TemplateError("{\(inner)}: field '\(name)' is not an ISO 8601 time: \(text)")
            }
        }
        return .placeholder(name: name, format: format)
    }
}

/// A template that cannot be used, and why.
public struct TemplateError: Error, Sendable, Hashable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A text in several languages with a fallback: `{"en": "…", "de": "…", "ja": "…"}` or one
/// string. The recipient's locale picks the variant: `de_DE` tries `de_DE` (or `de-DE`), then
/// `de`, then the fallback (the rule's `fallback`, else `en`, else the first variant given).
public struct LocalizedText: Sendable, Hashable {
    public var variants: [String: MessageTemplate]
    public var fallback: String

    public init(variants: [String: MessageTemplate], fallback: String) {
        self.variants = variants
        self.fallback = fallback
    }

    /// The variant for `locale` and the language tag it was chosen by.
    public func variant(for locale: String) -> (language: String, template: MessageTemplate) {
        // Character by character: Foundation's replacingOccurrences (through NSString on Linux)
        // was 4% of the notifier's processing of an event (`bench notifier`, perf).
        let normal = String(locale.map { $0 == "-" ? "_" : $0 })
        let language = String(normal.prefix { $0 != "_" })
        for tag in [normal, String(normal.map { $0 == "_" ? "-" : $0 }), language] {
            if let template = variants[tag] { return (tag, template) }
        }
        return (fallback, variants[fallback]!)
    }
}
