import Foundation

/// Who decides what in a notification at a venue (the Caffè Macs lesson): the words and their
/// conventions follow the recipient's locale, else the venue's `locale`; times are the venue's
/// (`timeZone`); money is the venue's `currency`, always with its ISO 4217 code.
public struct VenueConventions: Sendable, Hashable {
    public var timeZone: TimeZone
    public var locale: String
    public var currency: String

    public init(timeZone: TimeZone, locale: String, currency: String) {
        self.timeZone = timeZone
        self.locale = locale
        self.currency = currency
    }
}

/// One rendered notification for one channel: what the outbox keeps and the channels send.
public struct LocationNotification: Sendable, Hashable {
    /// Event id + rule id: the idempotency key (`Idempotency-Key`, the MQTT record's `id`,
    /// the mail's Message-ID). The same event and rule always give the same key.
    public var key: String
    public var rule: String
    public var channel: String
    public var event: NotifiedEvent
    public var regionName: String
    public var audience: NotificationRule.Audience
    /// The locale the text was rendered in, and the language variant chosen.
    public var locale: String
    public var language: String
    public var title: String?
    public var body: String

    public static func key(event: String, rule: String) -> String { "\(event):\(rule)" }

    /// The JSON record: the MQTT payload, the webhook body.
    public var record: JSONValue {
        var object: JSONObject = [
            "id": .string(key), "rule": .string(rule), "channel": .string(channel), "venue": .string(event.venue),
            "subject": .string(event.subject), "region": .string(event.region), "regionName": .string(regionName),
            "event": .string(event.kind.rawValue), "eventId": .string(event.id),
            "t": .string(Timestamp.format(event.t)),
            "audience": .string(audience.rawValue), "locale": .string(locale), "language": .string(language),
        ]
        if let title { object["title"] = .string(title) }
        object["body"] = .string(body)
        if event.held { object["held"] = true }
        return .object(object)
    }

    /// ``record`` serialized, byte for byte, written straight out: building the object first
    /// (a dictionary of thirteen members, each key hashed) and then serializing it was a fifth
    /// of the notifier's processing of an event (perf, `bench notifier`).
    public var serializedRecord: String {
        var out = "{"
        out.reserveCapacity(256 + body.utf8.count + (title?.utf8.count ?? 0))
        func member(_ name: String, _ value: String) {
            if out.utf8.count > 1 { out += "," }
            JSONValue.writeString(name, to: &out)
            out += ":"
            JSONValue.writeString(value, to: &out)
        }
        member("id", key)
        member("rule", rule)
        member("channel", channel)
        member("venue", event.venue)
        member("subject", event.subject)
        member("region", event.region)
        member("regionName", regionName)
        member("event", event.kind.rawValue)
        member("eventId", event.id)
        member("t", Timestamp.format(event.t))
        member("audience", audience.rawValue)
        member("locale", locale)
        member("language", language)
        if let title { member("title", title) }
        member("body", body)
        if event.held { out += #","held":true"# }
        out += "}"
        return out
    }
}

/// Renders rules' templates. Keeps its formatters (they are costly to make), so one renderer
/// serves one task.
///
/// Each formatter also keeps the last text it made and what it was made from: the next call
/// for the same minute (a time format without seconds) or the same number (a rule's field)
/// takes it as it is. Formatting through ICU was most of the cost of rendering a notification
/// (perf, `bench notifier`), and events in a burst fall in the same minute.
public final class NotificationRenderer {
    private final class DateEntry {
        let formatter: DateFormatter
        /// The pattern shows nothing finer than minutes: one text per minute.
        let byMinute: Bool
        var minute: Double = .nan
        var text = ""
        init(_ formatter: DateFormatter) {
            self.formatter = formatter
            // Quoted literals aside, no seconds (s), fractions (S) or milliseconds in day (A).
            var quoted = false
            var finer = false
            for character in formatter.dateFormat ?? "s" {
                if character == "'" {
                    quoted.toggle()
                } else if !quoted && (character == "s" || character == "S" || character == "A") {
                    finer = true
                }
            }
            byMinute = !finer
        }
    }

    private final class NumberEntry {
        let formatter: NumberFormatter
        var value: Double = .nan
        var text = ""
        init(_ formatter: NumberFormatter) { self.formatter = formatter }
    }

    private var dateFormatters: [String: DateEntry] = [:]
    private var numberFormatters: [String: NumberEntry] = [:]

    public init() {}

    /// The notification `rule` sends on `channel` for `event`.
    /// - Parameters:
    ///   - recipientLocale: the subject's `preferences.locale`, if it has one.
    ///   - regionName: the region's `name`, else its id.
    public func render(
        _ rule: NotificationRule, event: NotifiedEvent, channel: String, recipientLocale: String?,
        venue: VenueConventions, regionName: String?
    ) -> LocationNotification {
        let locale = recipientLocale ?? venue.locale
        let name = regionName ?? event.region
        let context = Context(event: event, rule: rule, regionName: name, locale: locale, venue: venue)
        let (language, body) = rule.body.variant(for: locale)
        let title = rule.title.map { render($0.variant(for: locale).template, context) }
        return LocationNotification(
            key: LocationNotification.key(event: event.id, rule: rule.id), rule: rule.id, channel: channel,
            event: event,
            regionName: name, audience: rule.audience, locale: locale, language: language, title: title,
            body: render(body, context))
    }

    struct Context {
        var event: NotifiedEvent
        var rule: NotificationRule
        var regionName: String
        var locale: String
        var venue: VenueConventions
    }

    func render(_ template: MessageTemplate, _ context: Context) -> String {
        var out = ""
        for segment in template.segments {
            switch segment {
            case .text(let text): out += text
            case .placeholder(let name, let format): out += value(name, format, context)
            }
        }
        return out
    }

    private func value(_ name: String, _ format: MessageTemplate.Format?, _ context: Context) -> String {
        let event = context.event
        switch name {
        case "subject": return event.subject
        case "region": return context.regionName
        case "regionId": return event.region
        case "event": return event.kind.rawValue
        case "venue": return event.venue
        case "rule": return context.rule.id
        case "time", "date", "datetime":
            return clock(event.t, name, style: format ?? (name == "date" ? .medium : .short), context)
        default:
            guard let field = context.rule.fields[name] else { return "" }
            return fieldValue(field, format, context)
        }
    }

    private func fieldValue(_ field: JSONValue, _ format: MessageTemplate.Format?, _ context: Context) -> String {
        switch (format, field) {
        case (.time?, _), (.date?, _), (.datetime?, _):
            let t: Date
            switch field {
            case .number(let seconds): t = context.event.t.addingTimeInterval(seconds)
            case .string(let text): t = Timestamp.parse(text) ?? context.event.t
            default: t = context.event.t
            }
            return clock(t, format!.rawValue, style: .short, context)
        case (let format?, .number(let value)):
            return number(value, format, context)
        case (nil, .number(let value)):
            return number(value, .number, context)
        case (_, .string(let text)): return text
        case (_, .bool(let flag)): return flag ? "true" : "false"
        default: return field.serialized()
        }
    }

    private func clock(_ t: Date, _ kind: String, style: MessageTemplate.Format, _ context: Context) -> String {
        let key = "\(context.locale)|\(context.venue.timeZone.identifier)|\(kind)|\(style.rawValue)"
        let entry: DateEntry
        if let cached = dateFormatters[key] {
            entry = cached
        } else {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: context.locale)
            formatter.timeZone = context.venue.timeZone
            let dateStyle: DateFormatter.Style
            switch style {
            case .full: dateStyle = .full
            case .long: dateStyle = .long
            case .medium: dateStyle = .medium
            default: dateStyle = .short
            }
            formatter.dateStyle = kind == "time" ? .none : dateStyle
            formatter.timeStyle = kind == "date" ? .none : (kind == "datetime" ? .short : dateStyle)
            entry = DateEntry(formatter)
            dateFormatters[key] = entry
        }
        guard entry.byMinute else { return entry.formatter.string(from: t) }
        let minute = (t.timeIntervalSince1970 / 60).rounded(.down)
        if minute != entry.minute {
            entry.text = entry.formatter.string(from: t)
            entry.minute = minute
        }
        return entry.text
    }

    private func number(_ value: Double, _ format: MessageTemplate.Format, _ context: Context) -> String {
        let key = "\(context.locale)|\(context.venue.currency)|\(format.rawValue)"
        let entry: NumberEntry
        if let cached = numberFormatters[key] {
            entry = cached
        } else {
            let formatter = NumberFormatter()
            formatter.locale = Locale(identifier: context.locale)
            switch format {
            case .currency:
                formatter.numberStyle = .currency
                // The venue's currency, whatever the recipient's locale would use.
                formatter.currencyCode = context.venue.currency
            case .integer:
                formatter.numberStyle = .decimal
                formatter.maximumFractionDigits = 0
            case .percent: formatter.numberStyle = .percent
            default: formatter.numberStyle = .decimal
            }
            entry = NumberEntry(formatter)
            numberFormatters[key] = entry
        }
        // Compared bit for bit: 0 and -0 may read differently; NaN is never kept.
        if value.bitPattern != entry.value.bitPattern || value.isNaN {
            entry.text = entry.formatter.string(from: NSNumber(value: value)) ?? "\(value)"
            entry.value = value
        }
        return entry.text
    }
}
