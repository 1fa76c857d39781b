import Foundation

/// Reads notification rules (a venue's rules file, or one retained `rules/{rule}` message) and
/// refuses every rule that cannot work, naming the rule and the problem: an unknown placeholder,
/// an unknown channel, a bad pattern, a malformed schedule.
///
/// ```json
/// {"rules": [{
///   "id": "pickup-ready", "on": ["enter"], "regions": ["cafe-*"], "subjects": "*",
///   "audience": "subject", "repeats": true, "cooldown": 600,
///   "quietHours": {"from": "22:00", "to": "07:00"},
///   "channels": ["app"], "fields": {"price": 12.5, "ready": 300},
///   "title": {"en": "Order ready", "de": "Bestellung fertig"},
///   "body": {"en": "Your order is ready at {ready:time} — {price:currency}",
///            "de": "Ihre Bestellung ist um {ready:time} fertig — {price:currency}"}
/// }]}
/// ```
public enum RuleParser {
    static let known = [
        "id", "on", "regions", "subjects", "audience", "repeats", "cooldown", "quietHours", "schedule", "channels",
        "title", "body", "fallback", "fields", "description",
    ]

    /// Every rule of a rules document (`{"rules": […]}` or a bare array) that can work, and a
    /// problem for each that cannot.
    public static func parse(
        document: JSONValue, channels: Set<String>
    ) -> (rules: [NotificationRule], problems: [String]) {
        let list: [JSONValue]
        switch document {
        case .array(let items): list = items
        case .object(let object):
            guard case .array(let items)? = object["rules"] else {
                return ([], ["a rules document is {\"rules\": [ … ]} or an array of rules"])
            }
            list = items
        default:
            return ([], ["a rules document is {\"rules\": [ … ]} or an array of rules, got \(document.typeName)"])
        }
        var rules: [NotificationRule] = []
        var problems: [String] = []
        var seen: Set<String> = []
        for (index, item) in list.enumerated() {
            switch parse(rule: item, channels: channels, place: "rules[\(index)]") {
            case .success(let rule):
                if !seen.insert(rule.id).inserted {
                    problems.append("rule '\(rule.id)' (rules[\(index)]): the id is used by an earlier rule")
                } else {
                    rules.append(rule)
                }
            case .failure(let error): problems.append(error.description)
            }
        }
        return (rules, problems)
    }

    /// One rule. `place` says where it came from, for the error when it has no usable id.
    public static func parse(
        rule value: JSONValue, channels: Set<String>, place: String
    ) -> Result<
        NotificationRule, RuleError
    > {
        guard case .object(let object) = value else {
            return .failure(RuleError(rule: place, ["must be an object, got \(value.typeName)"]))
        }
        var problems: [String] = []
        let id = object["id"]?.stringValue ?? ""
        if let problem = idProblem(id) { problems.append("id \(problem)") }
        for key in object.keys where !known.contains(key) {
            problems.append("unknown field '\(key)' (known: \(known.joined(separator: ", ")))")
        }

        var events: Set<RegionEvent.Kind> = []
        for name in strings(object["on"], "on", &problems) {
            if let kind = RegionEvent.Kind(rawValue: name), kind != .state {
                events.insert(kind)
            } else {
                problems.append("on: unknown transition '\(name)' (use enter, exit, dwell)")
            }
        }
        if object["on"] == nil { problems.append("on: missing (enter, exit and/or dwell)") }

        var regions: [Glob] = []
        for pattern in strings(object["regions"], "regions", &problems) {
            do { regions.append(try Glob(pattern)) } catch { problems.append("regions: \(error)") }
        }
        if object["regions"] == nil { problems.append("regions: missing (ids or patterns such as \"cafe-*\")") }

        var subjects = NotificationRule.Subjects.any
        switch object["subjects"] {
        case nil, .null?: break
        case .object(let constraint)?:
            guard let beacon = constraint["beacon"], constraint.count == 1 else {
                problems.append("subjects: an object must be {\"beacon\": {…}} (a beacon constraint for tags)")
                break
            }
            switch BeaconRegionSpec.parse(beacon) {
            case .success(let spec): subjects = .beacon(spec.constraint)
            case .failure(let found): problems += found.messages.map { "subjects.beacon: \($0)" }
            }
        case let other?:
            var globs: [Glob] = []
            for pattern in strings(other, "subjects", &problems) {
                do { globs.append(try Glob(pattern)) } catch { problems.append("subjects: \(error)") }
            }
            if !globs.contains(where: { $0.pattern == "*" }) { subjects = .patterns(globs) }
        }

        var audience = NotificationRule.Audience.consumers
        if let name = object["audience"] {
            if let known = name.stringValue.flatMap(NotificationRule.Audience.init(rawValue:)) {
                audience = known
            } else {
                problems.append("audience must be \"consumers\" or \"subject\", got \(name.serialized())")
            }
        }
        var repeats = true
        if let value = object["repeats"] {
            if let flag = value.boolValue { repeats = flag } else { problems.append("repeats must be true or false") }
        }
        var cooldown = 0.0
        if let value = object["cooldown"] {
            if case .number(let seconds) = value, seconds.isFinite, seconds >= 0 {
                cooldown = seconds
            } else {
                problems.append("cooldown must be a number of seconds ≥ 0, got \(value.serialized())")
            }
        }
        let quietHours = object["quietHours"].flatMap { quiet($0, &problems) }
        var schedule: WeeklySchedule?
        if let value = object["schedule"] {
            let (parsed, found) = WeeklySchedule.parse(value, place: "schedule")
            schedule = parsed
            problems += found
        }

        let channelNames = strings(object["channels"], "channels", &problems)
        if channelNames.isEmpty { problems.append("channels: missing (at least one configured channel)") }
        for name in channelNames where !channels.contains(name) {
            problems.append(
                "channels: unknown channel '\(name)' (configured: \(channels.sorted().joined(separator: ", ")))")
        }

        var fields: [String: JSONValue] = [:]
        switch object["fields"] {
        case nil, .null?: break
        case .object(let given)?:
            for (key, value) in given {
                if MessageTemplate.builtIn.contains(key) {
                    problems.append("fields.\(key): the name is a built-in placeholder")
                } else if !isPlainValue(value) {
                    problems.append("fields.\(key) must be a string, number or boolean, got \(value.typeName)")
                } else {
                    fields[key] = value
                }
            }
        case let other?: problems.append("fields must be an object, got \(other.typeName)")
        }

        let fallback = object["fallback"]?.stringValue
        let title = object["title"].flatMap { text($0, "title", fields: fields, fallback: fallback, &problems) }
        let body = object["body"].flatMap { text($0, "body", fields: fields, fallback: fallback, &problems) }
        if object["body"] == nil { problems.append("body: missing (the notification's text)") }

        guard problems.isEmpty, let body else {
            return .failure(RuleError(rule: id.isEmpty ? place : "rule '\(id)'", problems))
        }
        return .success(
            NotificationRule(
                id: id, events: events, regions: regions, subjects: subjects, audience: audience, repeats: repeats,
                cooldown: cooldown, quietHours: quietHours, schedule: schedule, channels: channelNames, title: title,
                body: body, fields: fields, source: value))
    }

    /// Why `id` cannot name a rule; nil when it can.
    public static func idProblem(_ id: String) -> String? {
        if id.isEmpty { return "is missing (letters, digits, '.', '_', '-')" }
        if id.utf8.count > 64 { return "'\(id)' is longer than 64 bytes" }
        let allowed = id.utf8.allSatisfy {
            ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x2E
                || $0 == 0x5F || $0 == 0x2D
        }
        return allowed ? nil : "'\(id)' may hold only letters, digits, '.', '_' and '-'"
    }

    private static func isPlainValue(_ value: JSONValue) -> Bool {
        switch value {
        case .string, .number, .bool: true
        default: false
        }
    }

    /// A string or an array of strings.
    private static func strings(_ value: JSONValue?, _ key: String, _ problems: inout [String]) -> [String] {
        switch value {
        case nil, .null?: return []
        case .string(let one)?: return [one]
        case .array(let items)?:
            var result: [String] = []
            for item in items {
                if let text = item.stringValue {
                    result.append(text)
                } else {
                    problems.append("\(key) must hold strings, got \(item.serialized())")
                }
            }
            return result
        case let other?:
            problems.append("\(key) must be a string or an array of strings, got \(other.typeName)")
            return []
        }
    }

    /// `{"from": "22:00", "to": "07:00", "days"?: […]}`, or weekly windows as in `schedule`.
    private static func quiet(_ value: JSONValue, _ problems: inout [String]) -> WeeklySchedule? {
        var windows = value
        if case .object(let object) = value {
            var window = JSONObject()
            for (key, member) in object {
                window[key == "from" ? "start" : key == "to" ? "end" : key] = member
            }
            windows = .array([.object(window)])
        }
        let (schedule, found) = WeeklySchedule.parse(windows, place: "quietHours")
        problems += found.map {
            $0.replacingOccurrences(of: "quietHours[0].start", with: "quietHours.from").replacingOccurrences(
                of: "quietHours[0].end", with: "quietHours.to")
        }
        return schedule
    }

    /// A template in one language (a string) or several (`{"en": …, "de": …}`).
    private static func text(
        _ value: JSONValue, _ key: String, fields: [String: JSONValue], fallback: String?, _ problems: inout [String]
    ) -> LocalizedText? {
        var given: [(String, String)] = []
        switch value {
        case .string(let one): given = [("en", one)]
        case .object(let object):
            for (language, text) in object {
                guard let text = text.stringValue else {
                    problems.append("\(key).\(language) must be a string, got \(text.typeName)")
                    continue
                }
                given.append((language, text))
            }
        default:
            problems.append("\(key) must be a string or an object of languages, got \(value.typeName)")
            return nil
        }
        if given.isEmpty {
            problems.append("\(key) has no text")
            return nil
        }
        var variants: [String: MessageTemplate] = [:]
        for (language, text) in given {
            do { variants[language] = try MessageTemplate(text, fields: fields) } catch {
                problems.append("\(key).\(language): \(error)")
            }
        }
        let chosen = fallback ?? (variants["en"] != nil ? "en" : given[0].0)
        guard variants[chosen] != nil else {
            if variants.count == given.count {
                problems.append(
                    "fallback '\(chosen)' has no \(key) text (given: \(given.map(\.0).joined(separator: ", ")))")
            }
            return nil
        }
        return LocalizedText(variants: variants, fallback: chosen)
    }
}

/// A rule that cannot work, naming it and every problem.
public struct RuleError: Error, Sendable, Hashable, CustomStringConvertible {
    public var rule: String
    public var problems: [String]
    public init(rule: String, _ problems: [String]) {
        self.rule = rule
        self.problems = problems
    }
    public var description: String { "\(rule): \(problems.joined(separator: "; "))" }
}
