import Foundation
import PerimeterCore
import Testing

@Suite("LocationNotification rules and templates")
struct NotifierRuleTests {
    static let channels: Set<String> = ["app", "ops"]

    static func rule(_ json: String) throws -> NotificationRule {
        let value = try JSONParser.parse(json)
        return try RuleParser.parse(rule: value, channels: channels, place: "test").get()
    }

    static func problems(_ json: String) throws -> String {
        let value = try JSONParser.parse(json)
        switch RuleParser.parse(rule: value, channels: channels, place: "rules[0]") {
        case .success: return ""
        case .failure(let error): return error.description
        }
    }

    // MARK: Globs

    @Test(
        "glob patterns",
        arguments: [
            ("cafe-*", "cafe-1", true), ("cafe-*", "cafe-", true), ("cafe-*", "café-1", false),
            ("*", "anything", true), ("?ate", "gate", true), ("?ate", "ate", false), ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYbZ", false), ("gallery-1", "gallery-1", true), ("gallery-1", "gallery-10", false),
            ("*-beacons", "gallery-1-beacons", true), ("ü?", "üx", true),
        ])
    func glob(pattern: String, id: String, expected: Bool) throws {
        let matched = try Glob(pattern).matches(id)
        #expect(matched == expected)
    }

    @Test("a pattern with a class or escape is refused, naming it")
    func badGlob() {
        #expect(throws: GlobError.self) { try Glob("cafe-[12]") }
        #expect(throws: GlobError.self) { try Glob("") }
    }

    // MARK: Rejected at load

    @Test(
        "rules that cannot work are refused with the rule and the problem",
        arguments: [
            (
                #"{"id":"r1","on":"enter","regions":"cafe","channels":["app"],"body":"Hi {nme}"}"#,
                "rule 'r1': body.en: unknown placeholder {nme}"
            ),
            (
                #"{"id":"r1","on":"enter","regions":"cafe","channels":["pager"],"body":"Hi"}"#,
                "rule 'r1': channels: unknown channel 'pager' (configured: app, ops)"
            ),
            (
                #"{"id":"r1","on":"enter","regions":"cafe-[12]","channels":["app"],"body":"Hi"}"#,
                "rule 'r1': regions: pattern 'cafe-[12]' uses '['"
            ),
            (
                #"{"id":"r1","on":"arrive","regions":"cafe","channels":["app"],"body":"Hi"}"#,
                "rule 'r1': on: unknown transition 'arrive'"
            ),
            (
                #"{"id":"r1","on":"enter","regions":"cafe","channels":["app"],"body":"{price:currency}","fields":{"price":"cheap"}}"#,
                "cannot be shown as currency"
            ),
            (
                #"{"id":"r1","on":"enter","regions":"cafe","channels":["app"],"body":"{time:currency}"}"#,
                "time takes a style"
            ),
            (
                #"{"id":"r 1","on":"enter","regions":"cafe","channels":["app"],"body":"Hi"}"#,
                "id 'r 1' may hold only letters"
            ),
            (#"{"on":"enter","regions":"cafe","channels":["app"],"body":"Hi"}"#, "rules[0]: id is missing"),
            (
                #"{"id":"r1","on":"enter","regions":"cafe","channels":["app"],"body":"Hi","quietHours":{"from":"25:00","to":"07:00"}}"#,
                "quietHours.from must be a time"
            ),
            (
                #"{"id":"r1","on":"enter","regions":"cafe","channels":["app"],"body":"Hi","cooldown":-5}"#,
                "cooldown must be a number of seconds ≥ 0"
            ),
            (
                #"{"id":"r1","on":"enter","regions":"cafe","channels":["app"],"body":"Hi","repeat":false}"#,
                "unknown field 'repeat'"
            ),
            (
                #"{"id":"r1","on":"enter","regions":"cafe","channels":["app"],"body":{"de":"Hallo"},"fallback":"en"}"#,
                "fallback 'en' has no body text"
            ),
            (#"{"id":"r1","on":"enter","regions":"cafe","channels":["app"],"body":"Hi {unclosed"}"#, "unclosed"),
            (
                #"{"id":"r1","on":"enter","regions":"cafe","channels":["app"],"body":"Hi","subjects":{"beacon":{"uuid":"nope"}}}"#,
                "subjects.beacon:"
            ),
        ])
    func rejected(json: String, expected: String) throws {
        let found = try Self.problems(json)
        #expect(found.contains(expected), "\(found)")
    }

    @Test("a rules document keeps the good rules and names each bad one")
    func document() throws {
        let document = try JSONParser.parse(
            #"{"rules":[{"id":"a","on":"enter","regions":"*","channels":["app"],"body":"x"},{"id":"b","on":"enter","regions":"*","channels":["nope"],"body":"x"},{"id":"a","on":"exit","regions":"*","channels":["app"],"body":"y"}]}"#
        )
        let (rules, problems) = RuleParser.parse(document: document, channels: Self.channels)
        #expect(rules.map(\.id) == ["a"])
        #expect(problems.count == 2)
        #expect(problems.contains { $0.hasPrefix("rule 'b'") })
        #expect(problems.contains { $0.contains("used by an earlier rule") })
    }

    // MARK: Templates: recipient's language and formats, venue's time zone and currency

    static let usCafe = VenueConventions(
        timeZone: TimeZone(identifier: "America/Chicago")!, locale: "en_US", currency: "USD")
    static let tokyoCafe = VenueConventions(
        timeZone: TimeZone(identifier: "Asia/Tokyo")!, locale: "ja_JP", currency: "JPY")
    /// 2025-12-01T15:41:00Z (a Monday): 09:41 in Chicago, 00:41 the next day in Tokyo.
    static let t = Date(timeIntervalSince1970: 1_764_603_660)

    static let pickup = #"""
        {"id":"pickup","on":"enter","regions":"cafe-*","channels":["app"],"audience":"subject",
         "fields":{"price":12.5},
         "title":{"en":"Order ready","de":"Bestellung fertig","ja":"ご注文の準備ができました"},
         "body":{"en":"Your order is ready at {time} — {price:currency}",
                 "de":"Ihre Bestellung ist um {time} fertig — {price:currency}",
                 "ja":"{time}にご注文の準備ができました — {price:currency}"}}
        """#

    @Test(
        "three recipient locales at one US venue: words and formats follow the recipient; time and currency the venue",
        arguments: [
            (nil as String?, "en", "Your order is ready at 9:41\u{202F}AM — $12.50"),
            ("en_US", "en", "Your order is ready at 9:41\u{202F}AM — $12.50"),
            ("de_DE", "de", "Ihre Bestellung ist um 09:41 fertig — 12,50\u{A0}$"),
            ("ja_JP", "ja", "9:41にご注文の準備ができました — $12.50"),
            ("fr_FR", "en", "Your order is ready at 09:41 — 12,50\u{A0}$US"),
        ])
    func locales(recipient: String?, language: String, expected: String) throws {
        let rule = try Self.rule(Self.pickup)
        let event = NotifiedEvent(
            id: "e1", kind: .enter, venue: "campus", region: "cafe-1", subject: "s1", t: Self.t)
        let rendered = NotificationRenderer().render(
            rule, event: event, channel: "app", recipientLocale: recipient, venue: Self.usCafe, regionName: "Café")
        #expect(rendered.body == expected)
        #expect(rendered.language == language)
        #expect(rendered.key == "e1:pickup")
    }

    @Test(
        "the record written straight out is the record serialized, byte for byte: title or none, held or not, text to escape",
        arguments: [(false, false), (true, false), (false, true), (true, true)])
    func serializedRecord(titled: Bool, held: Bool) throws {
        let rule = try Self.rule(Self.pickup)
        let event = NotifiedEvent(
            id: "e\"1", kind: .exit, venue: "campus", region: "cafe\\1", subject: "s\n1", t: Self.t, held: held)
        var notification = NotificationRenderer().render(
            rule, event: event, channel: "app", recipientLocale: "de_DE", venue: Self.usCafe,
            regionName: "Café \"Süd\"\t")
        notification.title = titled ? "Fertig\u{1}" : nil
        #expect(notification.serializedRecord == notification.record.serialized())
        let parsed = try JSONParser.parse(notification.serializedRecord)
        #expect(parsed == notification.record)
        #expect(parsed["held"]?.boolValue == (held ? true : nil))
        #expect(parsed["title"]?.stringValue == (titled ? "Fertig\u{1}" : nil))
    }

    /// The renderer keeps each formatter's last text (a time without seconds by the minute, a
    /// number by its value): reused over events and rules it must say what a fresh one says.
    @Test("a renderer reused over many events and rules says what a fresh one says")
    func reusedRenderer() throws {
        func rule(_ id: String, price: Double) throws -> NotificationRule {
            try Self.rule(
                #"{"id":"\#(id)","on":"enter","regions":"*","channels":["app"],"fields":{"price":\#(price)},"body":"{time} {time:medium} {date} {datetime} {price:currency} {price}"}"#
            )
        }
        let rules = [try rule("a", price: 12.5), try rule("b", price: 13), try rule("c", price: -0.0)]
        let renderer = NotificationRenderer()
        // Seconds apart, across minutes, backwards, and into summer time (Chicago, June).
        let offsets: [Double] = [0, 1, 30, 59, 60, 61, 59, 3_600, -1, -61, 86_400 * 200, 86_400 * 200 + 1]
        var texts = Set<String>()
        for (index, offset) in offsets.enumerated() {
            let event = NotifiedEvent(
                id: "e\(index)", kind: .enter, venue: "campus", region: "r", subject: "s",
                t: Self.t.addingTimeInterval(offset))
            for rule in index.isMultiple(of: 2) ? rules : rules.reversed() {
                for locale in ["en_US", "de_DE"] {
                    let reused = renderer.render(
                        rule, event: event, channel: "app", recipientLocale: locale, venue: Self.usCafe, regionName: nil
                    )
                    let fresh = NotificationRenderer().render(
                        rule, event: event, channel: "app", recipientLocale: locale, venue: Self.usCafe, regionName: nil
                    )
                    #expect(reused.body == fresh.body, "\(offset) s, rule \(rule.id), \(locale)")
                    texts.insert(reused.body)
                }
            }
        }
        let at = { (offset: Double) in
            renderer.render(
                rules[0],
                event: NotifiedEvent(
                    id: "x", kind: .enter, venue: "campus", region: "r", subject: "s",
                    t: Self.t.addingTimeInterval(offset)),
                channel: "app", recipientLocale: "en_US", venue: Self.usCafe, regionName: nil
            ).body
        }
        #expect(at(59).hasPrefix("9:41\u{202F}AM 9:41:59"), "\(at(59))")
        #expect(at(60).hasPrefix("9:42\u{202F}AM 9:42:00"), "\(at(60))")
        #expect(texts.count == offsets.count * 2 * 3 - 6, "the same minute and second twice (59 s) is the only repeat")
    }

    @Test("yen at a Tokyo café has no decimals, in the café's time zone")
    func yen() throws {
        var json = Self.pickup.replacingOccurrences(of: "12.5", with: "1250")
        json = json.replacingOccurrences(of: "\"audience\"", with: "\"fallback\":\"ja\",\"audience\"")
        let rule = try Self.rule(json)
        let event = NotifiedEvent(id: "e", kind: .enter, venue: "tokyo", region: "cafe-1", subject: "s", t: Self.t)
        let rendered = NotificationRenderer().render(
            rule, event: event, channel: "app", recipientLocale: "ja_JP", venue: Self.tokyoCafe, regionName: nil)
        #expect(rendered.body == "0:41にご注文の準備ができました — ¥1,250")
        #expect(rendered.title == "ご注文の準備ができました")
        #expect(rendered.regionName == "cafe-1")
    }

    @Test("field formats: a time offset from the event, numbers, plain values, escaped braces")
    func fieldFormats() throws {
        let rule = try Self.rule(
            #"{"id":"r","on":"dwell","regions":"*","channels":["app"],"fields":{"ready":600,"n":1234.5,"name":"Latte","open":true},"body":"{{{name}}} {ready:time} {n:integer} {n} {open} {region}/{regionId}/{event}/{venue}/{rule}/{subject}"}"#
        )
        let event = NotifiedEvent(id: "e", kind: .dwell, venue: "campus", region: "r-1", subject: "s", t: Self.t)
        let rendered = NotificationRenderer().render(
            rule, event: event, channel: "app", recipientLocale: "en_US", venue: Self.usCafe, regionName: "Room")
        #expect(rendered.body == "{Latte} 9:51\u{202F}AM 1,234 1,234.5 true Room/r-1/dwell/campus/r/s")
    }

    // MARK: Firing: repeats, cooldown, quiet hours, schedule, audience

    struct Step: Sendable, CustomTestStringConvertible {
        var rule: String
        /// (seconds after t0, expected: "fire" or the skip reason)
        var events: [(Double, String)]
        var testDescription: String { rule }
    }

    @Test(
        "verdicts over a sequence of events for one subject",
        arguments: [
            Step(rule: #""repeats":false"#, events: [(0, "fire"), (60, "disarmed"), (7200, "disarmed")]),
            Step(rule: #""cooldown":600"#, events: [(0, "fire"), (300, "cooldown"), (599, "cooldown"), (600, "fire")]),
            Step(rule: #""repeats":true"#, events: [(0, "fire"), (1, "fire"), (0.5, "outOfOrder")]),
            // t0 = 09:41 Chicago; quiet 09:50–10:00 venue time.
            Step(
                rule: #""quietHours":{"from":"09:50","to":"10:00"}"#,
                events: [(0, "fire"), (600, "quietHours"), (1200, "fire")]),
            // overnight quiet hours 22:00–07:00 do not cover 09:41.
            Step(
                rule: #""quietHours":{"from":"22:00","to":"07:00"}"#,
                events: [(0, "fire"), (12 * 3600 + 20 * 60, "quietHours")]),
            Step(
                rule: #""schedule":[{"days":["mon"],"start":"09:00","end":"10:00"}]"#,
                events: [(0, "fire"), (3600, "schedule")]),
        ])
    func verdicts(step: Step) throws {
        let rule = try Self.rule(
            #"{"id":"r","on":"enter","regions":"*","channels":["app"],"body":"x","# + step.rule + "}")
        var state: RuleState?
        for (offset, expected) in step.events {
            let event = NotifiedEvent(
                id: "e\(offset)", kind: .enter, venue: "v", region: "cafe", subject: "s",
                t: Self.t.addingTimeInterval(offset))
            let verdict = rule.verdict(for: event, state: state, timeZone: Self.usCafe.timeZone)
            switch verdict {
            case .fire:
                #expect(expected == "fire", "at +\(offset)")
                state = (state ?? RuleState()).firing(at: event.t)
            case .skip(let reason): #expect(reason == expected, "at +\(offset)")
            }
        }
    }

    @Test(
        "matching: transition, region, subject, audience",
        arguments: [
            (#""on":"enter","regions":"cafe-*""#, "enter", "cafe-1", "s1", false, true),
            (#""on":"enter","regions":"cafe-*""#, "exit", "cafe-1", "s1", false, false),
            (#""on":["enter","dwell"],"regions":"cafe-*""#, "dwell", "cafe-2", "s1", false, true),
            (#""on":"enter","regions":"cafe-*""#, "enter", "gallery", "s1", false, false),
            (#""on":"enter","regions":"*","subjects":["staff-*"]"#, "enter", "x", "visitor-1", false, false),
            (#""on":"enter","regions":"*","subjects":["staff-*"]"#, "enter", "x", "staff-7", false, true),
            // An event only the subject's own device may learn of (rule 10).
            (#""on":"enter","regions":"*""#, "enter", "x", "s", true, false),
            (#""on":"enter","regions":"*","audience":"subject""#, "enter", "x", "s", true, true),
            (
                #""on":"enter","regions":"*","subjects":{"beacon":{"uuid":"f7826da6-4fa2-4e98-8024-bc5b71e0893e","major":3}}"#,
                "enter", "x", "ibeacon:f7826da6-4fa2-4e98-8024-bc5b71e0893e:3:9", false, true
            ),
            (
                #""on":"enter","regions":"*","subjects":{"beacon":{"uuid":"f7826da6-4fa2-4e98-8024-bc5b71e0893e","major":3}}"#,
                "enter", "x", "ibeacon:f7826da6-4fa2-4e98-8024-bc5b71e0893e:4:9", false, false
            ),
        ])
    func matching(
        rule: String, kind: String, region: String, subject: String, selfOnly: Bool, expected: Bool
    )
        throws
    {
        let parsed = try Self.rule(#"{"id":"r","channels":["app"],"body":"x","# + rule + "}")
        let event = NotifiedEvent(
            id: "e", kind: RegionEvent.Kind(rawValue: kind)!, venue: "v", region: region, subject: subject, t: Self.t,
            selfOnly: selfOnly)
        #expect(parsed.matches(event) == expected)
    }

    @Test("event payloads from the evaluator decode; broken ones name the field")
    func decode() throws {
        let event = try NotifiedEvent.decode(
            Array(
                #"{"id":"abc","event":"dwell","venue":"m","region":"g","subject":"s","t":"2025-12-01T15:41:00.000Z","seq":2,"source":"timer","held":true}"#
                    .utf8), selfOnly: false)
        #expect(event.kind == .dwell && event.held && event.t == Self.t)
        #expect(throws: InboundError.self) {
            try NotifiedEvent.decode(
                Array(#"{"id":"abc","event":"state","region":"g","subject":"s","t":0}"#.utf8), selfOnly: false)
        }
    }
}
