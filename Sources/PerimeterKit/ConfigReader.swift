import Foundation
import PerimeterCore

/// Reads typed settings from layered sources and collects every problem before anything starts.
///
/// Precedence, lowest first: defaults in code, the JSON file, `PERIMETER_*` environment
/// variables, `--set key=value` flags. A key path `broker.clientId` is the file's nested
/// object `{"broker": {"clientId": …}}`, the variable `PERIMETER_BROKER_CLIENT_ID` and the
/// flag `--set broker.clientId=…`.
///
/// ```swift
/// let reader = try ConfigReader(filePath: path, environment: env, overrides: sets)
/// let port = reader.int("broker.port", default: 1883, range: 1...65535)
/// try reader.finish()          // throws ConfigError listing every problem
/// logger.info("configuration", metadata: reader.effectiveMetadata)   // secrets redacted
/// ```
public final class ConfigReader {
    /// A raw value and where it came from. Environment variables and flags are strings.
    struct Raw {
        var value: JSONValue
        var origin: String
    }

    private var file: [String: Raw] = [:]
    private let environment: [String: String]
    private var overrides: [String: Raw] = [:]
    private var problems: [ConfigError.Problem] = []
    private var known: Set<String> = []
    private(set) var effective: [(key: String, value: String)] = []

    /// - Parameters:
    ///   - filePath: a JSON file whose top level is an object, or nil.
    ///   - environment: usually `ProcessInfo.processInfo.environment`.
    ///   - overrides: `key=value` strings from `--set` flags.
    /// - Throws: ``ConfigError`` when the file is unreadable or not a JSON object, or an override
    ///   has no `=`.
    public convenience init(
        filePath: String? = nil, environment: [String: String] = [:], overrides: [String] = []
    )
        throws(ConfigError)
    {
        var top: JSONObject?
        if let filePath {
            guard let data = FileManager.default.contents(atPath: filePath) else {
                throw ConfigError(key: "config", "cannot read \(filePath)")
            }
            top = try Self.topLevel(data, origin: filePath)
        }
        try self.init(top: top, origin: filePath ?? "", environment: environment, overrides: overrides)
    }

    /// The same reader over a file's contents already in memory (`origin` names it in problems).
    public convenience init(
        contents: some Collection<UInt8>, origin: String, environment: [String: String] = [:], overrides: [String] = []
    ) throws(ConfigError) {
        try self.init(
            top: try Self.topLevel(contents, origin: origin), origin: origin, environment: environment,
            overrides: overrides)
    }

    private init(
        top: JSONObject?, origin: String, environment: [String: String], overrides: [String]
    )
        throws(ConfigError)
    {
        self.environment = environment
        if let top { Self.flatten(top, prefix: "", origin: origin, into: &file) }
        for setting in overrides {
            guard let equals = setting.firstIndex(of: "="), equals != setting.startIndex else {
                throw ConfigError(key: "--set", "expected key=value, got \"\(setting)\"")
            }
            let key = String(setting[..<equals])
            self.overrides[key] = Raw(
                value: .string(String(setting[setting.index(after: equals)...])), origin: "--set \(key)")
        }
    }

    /// A configuration file's top-level object.
    private static func topLevel(_ data: some Collection<UInt8>, origin: String) throws(ConfigError) -> JSONObject {
        let document: JSONValue
        do {
            document = try JSONParser.parse(data)
        } catch {
            throw ConfigError(key: "config", "\(origin) is not valid JSON: \(error)")
        }
        guard case .object(let top) = document else {
            throw ConfigError(key: "config", "\(origin) must hold a JSON object at the top level")
        }
        return top
    }

    /// What every command reads: `--config FILE` (else `PERIMETER_CONFIG`), the process's
    /// `PERIMETER_*` variables, and `--set key=value` overrides.
    public static func forCommand(config: String?, overrides: [String]) throws(ConfigError) -> ConfigReader {
        let environment = ProcessInfo.processInfo.environment
        return try ConfigReader(
            filePath: config ?? environment["PERIMETER_CONFIG"], environment: environment, overrides: overrides)
    }

    private static func flatten(_ object: JSONObject, prefix: String, origin: String, into result: inout [String: Raw])
    {
        for (key, value) in object {
            let path = prefix.isEmpty ? key : "\(prefix).\(key)"
            if case .object(let nested) = value {
                flatten(nested, prefix: path, origin: origin, into: &result)
            } else {
                result[path] = Raw(value: value, origin: origin)
            }
        }
    }

    /// `broker.clientId` → `PERIMETER_BROKER_CLIENT_ID`.
    public static func environmentName(for key: String) -> String {
        var name = "PERIMETER_"
        var previousLower = false
        for character in key {
            if character == "." || character == "-" {
                name += "_"
                previousLower = false
            } else if character.isUppercase && previousLower {
                name += "_" + character.uppercased()
                previousLower = false
            } else {
                name += character.uppercased()
                previousLower = character.isLowercase || character.isNumber
            }
        }
        return name
    }

    /// The raw value with the highest precedence for `key`, if any.
    private func raw(_ key: String) -> Raw? {
        known.insert(key)
        if let value = overrides[key] { return value }
        let variable = Self.environmentName(for: key)
        if let value = environment[variable] { return Raw(value: .string(value), origin: variable) }
        return file[key]
    }

    private func problem(_ key: String, _ message: String, _ raw: Raw?) {
        problems.append(ConfigError.Problem(key: key, message: message, origin: raw?.origin))
    }

    private func record(_ key: String, _ value: String, secret: Bool) {
        effective.append((key, secret ? (value.isEmpty ? "" : "***") : value))
    }

    private static func show(_ value: JSONValue) -> String {
        value.serialized()
    }

    /// A string setting.
    public func string(_ key: String, default defaultValue: String, secret: Bool = false) -> String {
        if let value = optionalString(key, secret: secret) { return value }
        record(key, defaultValue, secret: secret)
        return defaultValue
    }

    /// A string setting with no default.
    public func optionalString(_ key: String, secret: Bool = false) -> String? {
        guard let raw = raw(key), !raw.value.isNull else { return nil }
        guard let string = raw.value.stringValue else {
            problem(key, "expected a string, got \(Self.show(raw.value))", raw)
            return nil
        }
        record(key, string, secret: secret)
        return string
    }

    /// A secret taken only from its environment variable (`dashboard.password` →
    /// `PERIMETER_DASHBOARD_PASSWORD`, e.g. from a systemd `EnvironmentFile` of mode 0640):
    /// the same key in the JSON file (often world-readable) or a `--set` flag (visible in `ps`)
    /// is a problem naming `instead`, the way to give it.
    public func environmentSecret(_ key: String, instead: String) -> String? {
        known.insert(key)
        if let raw = overrides[key] ?? file[key] {
            problem(key, "a secret is never read from the configuration file or --set: \(instead)", raw)
        }
        guard let value = environment[Self.environmentName(for: key)] else { return nil }
        record(key, value, secret: true)
        return value
    }

    /// Reads `key` with `parse`, which returns nil for a value it rejects; `expected` says what
    /// was wanted ("expected an integer 1–65535").
    private func typed<T>(
        _ key: String, default defaultValue: T, expected: String, _ parse: (JSONValue) -> T?
    ) -> T {
        guard let raw = raw(key), !raw.value.isNull else {
            record(key, "\(defaultValue)", secret: false)
            return defaultValue
        }
        guard let value = parse(raw.value) else {
            problem(key, "\(expected), got \(Self.show(raw.value))", raw)
            return defaultValue
        }
        record(key, "\(value)", secret: false)
        return value
    }

    /// An integer setting within `range`.
    public func int(_ key: String, default defaultValue: Int, range: ClosedRange<Int>) -> Int {
        typed(key, default: defaultValue, expected: "expected an integer \(range.lowerBound)–\(range.upperBound)") {
            let value = $0.intValue ?? $0.stringValue.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
            return value.flatMap { range.contains($0) ? $0 : nil }
        }
    }

    /// A finite floating-point setting within `range`.
    public func double(_ key: String, default defaultValue: Double, range: ClosedRange<Double>) -> Double {
        typed(key, default: defaultValue, expected: "expected a number \(range.lowerBound)–\(range.upperBound)") {
            let value = $0.doubleValue ?? $0.stringValue.flatMap { Double($0.trimmingCharacters(in: .whitespaces)) }
            return value.flatMap { $0.isFinite && range.contains($0) ? $0 : nil }
        }
    }

    /// A boolean setting: JSON true/false, or the strings true/false/yes/no/1/0/on/off.
    public func bool(_ key: String, default defaultValue: Bool) -> Bool {
        typed(key, default: defaultValue, expected: "expected true or false") {
            if let bool = $0.boolValue { return bool }
            switch $0.stringValue?.lowercased() {
            case "true", "yes", "1", "on": return true
            case "false", "no", "0", "off": return false
            default: return nil
            }
        }
    }

    /// One of a fixed set of string values.
    public func choice<T: RawRepresentable & CaseIterable>(_ key: String, default defaultValue: T) -> T
    where T.RawValue == String {
        let allowed = T.allCases.map(\.rawValue).joined(separator: ", ")
        return typed(key, default: defaultValue, expected: "expected one of \(allowed)") {
            $0.stringValue.flatMap(T.init(rawValue:))
        }
    }

    /// A structured setting (an array or object) as JSON: from the file as written, or from a
    /// variable or `--set` flag holding JSON text.
    public func json(_ key: String) -> JSONValue? {
        guard let raw = raw(key), !raw.value.isNull else { return nil }
        let fromFile = overrides[key] == nil && environment[Self.environmentName(for: key)] == nil
        if !fromFile, case .string(let text) = raw.value {
            guard let parsed = try? JSONParser.parse(text) else {
                problem(key, "expected JSON, got \(Self.show(raw.value))", raw)
                return nil
            }
            record(key, parsed.serialized(), secret: false)
            return parsed
        }
        record(key, raw.value.serialized(), secret: false)
        return raw.value
    }

    /// A list of strings: a JSON array of strings (in the file, or as JSON text in a variable
    /// or `--set` flag), or one string of comma-separated items (`a, b,c`; blanks around
    /// items are dropped). Nil when unset; an empty list is a problem.
    public func stringList(_ key: String) -> [String]? {
        guard let raw = raw(key), !raw.value.isNull else { return nil }
        var value = raw.value
        // JSON text in a variable or flag; `[::1]:1883,…` is not JSON but a list of addresses.
        if case .string(let text) = value, text.trimmingCharacters(in: .whitespaces).hasPrefix("["),
            let parsed = try? JSONParser.parse(text)
        {
            value = parsed
        }
        let items: [String]
        switch value {
        case .string(let text):
            items = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        case .array(let elements) where elements.allSatisfy({ $0.stringValue != nil }):
            items = elements.compactMap(\.stringValue)
        default:
            problem(key, "expected a JSON array of strings or a comma-separated list, got \(Self.show(value))", raw)
            return nil
        }
        if items.isEmpty {
            problem(key, "the list is empty", raw)
            return nil
        }
        record(key, items.joined(separator: ","), secret: false)
        return items
    }

    /// The names under `prefix` in the file and the `--set` flags: `venues` → `["museum", "zoo"]`
    /// for `venues.museum.*` and `venues.zoo.*` keys.
    public func children(of prefix: String) -> [String] {
        var names: Set<String> = []
        for key in Set(file.keys).union(overrides.keys) where key.hasPrefix(prefix + ".") {
            if let name = key.dropFirst(prefix.count + 1).split(separator: ".").first { names.insert(String(name)) }
        }
        return names.sorted()
    }

    /// Marks every key under `prefix` as read (its reader checks the values itself).
    public func claim(_ prefix: String) {
        for key in Set(file.keys).union(overrides.keys) where key == prefix || key.hasPrefix(prefix + ".") {
            known.insert(key)
        }
    }

    /// Adds a problem found by a cross-field check (e.g. a TLS key without a certificate).
    public func reject(_ key: String, _ message: String) {
        problem(key, message, raw(key))
    }

    /// Throws every problem found, including keys in the file or `--set` flags that no setting read.
    public func finish() throws(ConfigError) {
        for key in (Set(file.keys).union(overrides.keys)).subtracting(known).sorted() {
            let raw = overrides[key] ?? file[key]
            let hint = Self.closest(to: key, in: known).map { " (did you mean \($0)?)" } ?? ""
            problem(key, "unknown setting\(hint)", raw)
        }
        if !problems.isEmpty { throw ConfigError(problems) }
    }

    /// The settings as used, secrets redacted, for logging once at start-up.
    public var effectiveMetadata: Logger.Metadata {
        var metadata: Logger.Metadata = [:]
        for (key, value) in effective { metadata["config.\(key)"] = .string(value) }
        return metadata
    }

    /// The known key within 3 edits of `key`. Only candidates within 3 of its length are
    /// compared (the distance is at least the difference in length): a long garbage key took
    /// seconds against every setting (found by fuzzing `config`).
    private static func closest(to key: String, in candidates: Set<String>) -> String? {
        let length = key.unicodeScalars.count
        return candidates.filter { abs($0.unicodeScalars.count - length) <= 3 }.map { ($0, editDistance($0, key)) }
            .filter { $0.1 <= 3 }.min { $0.1 < $1.1 }?.0
    }

    private static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.unicodeScalars)
        let b = Array(b.unicodeScalars)
        if a.isEmpty { return b.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...max(b.count, 1) where j <= b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}

/// A service's settings: read from a ``ConfigReader``, with log settings of their own.
public protocol ServiceSettings: Sendable {
    static func read(_ reader: ConfigReader) throws -> Self
    var log: LogSettings { get }
}

extension ServiceSettings {
    /// What a service command does first: reads the settings (``ConfigReader/forCommand(config:overrides:)``),
    /// makes the service's logger and logs the effective settings with it (secrets redacted).
    public static func load(config: String?, overrides: [String], label: String) throws -> (Self, Logger) {
        let reader = try ConfigReader.forCommand(config: config, overrides: overrides)
        let settings = try read(reader)
        let logger = settings.log.makeLogger(label: label)
        logger.info("configuration", metadata: reader.effectiveMetadata)
        return (settings, logger)
    }
}
