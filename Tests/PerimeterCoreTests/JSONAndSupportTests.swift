import Foundation
import PerimeterCore
import Testing

@Suite("JSON reader")
struct JSONParserTests {
    @Test(
        "values round-trip",
        arguments: [
            #"{"a":[1,2.5,-3e2,true,false,null,"x\"y\\z\n\u00e9\ud83d\ude00"],"b":{}}"#,
            #"[]"#, #""plain""#, #"0"#, #"-0.000001"#, #"1.7976931348623157e308"#,
        ])
    func roundTrip(text: String) throws {
        let value = try JSONValue(parsing: text)
        #expect(try JSONValue(parsing: value.serialized()) == value)
    }

    @Test(
        "numbers are read exactly",
        arguments: [
            ("2.3362", 2.3362), ("48.8608000", 48.8608), ("-179.999999", -179.999999), ("1e-7", 1e-7),
            ("123456789012345678", 123456789012345678.0),
        ])
    func numbers(text: String, value: Double) throws {
        #expect(try JSONValue(parsing: text) == .number(value))
    }

    @Test(
        "errors name line, column and problem",
        arguments: [
            ("{\"a\": 1,\n \"b\" 2}", "line 2, column 6: expected ':' after member name \"b\""),
            ("[1, 2", "unexpected end of input: expected ',' or ']' after an array element"),
            ("{\"a\":1,\"a\":2}", "duplicate member name \"a\""),
            ("[01]", "leading zero"),
            ("\"\\x\"", "invalid escape"),
            ("NaN", "unexpected 'N': expected a value"),
            ("[1] 2", "unexpected '2' after the JSON value"),
            ("", "empty input"),
        ])
    func errors(text: String, message: String) {
        #expect(throws: JSONParser.Error.self) { try JSONValue(parsing: text) }
        do {
            _ = try JSONValue(parsing: text)
        } catch {
            #expect(error.description.contains(message), "\(error)")
        }
    }

    @Test("deep nesting is an error, not a crash")
    func depthLimit() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: JSONParser.Error.self) { try JSONValue(parsing: deep) }
    }
}

@Suite("JSON numbers out of range")
struct JSONRangeTests {
    @Test(
        "a number too large for a double is an error naming it, not infinity (found by fuzzing)",
        arguments: ["24E688", "-1e999", "[1,2e400]"])
    func outOfRange(text: String) {
        do {
            let value = try JSONParser.parse(text)
            Issue.record("parsed \(value)")
        } catch {
            #expect("\(error)".contains("out of range"), "\(error)")
        }
    }

    @Test("large but finite numbers and underflow to zero still parse")
    func finite() throws {
        #expect(try JSONParser.parse("1.7976931348623157e308") == .number(.greatestFiniteMagnitude))
        #expect(try JSONParser.parse("1e-400") == .number(0))
    }
}

@Suite("Support")
struct SupportTests {
    @Test(
        "SHA-256 test vectors (FIPS 180-4)",
        arguments: [
            ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
            ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
            (
                "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
            ),
        ])
    func sha256(input: String, digest: String) {
        #expect(Hex.encode(SHA256.hash(Array(input.utf8))) == digest)
    }

    @Test("SHA-256 of a million 'a'")
    func sha256Long() {
        var hasher = SHA256()
        hasher.update(Array(repeating: UInt8(ascii: "a"), count: 1_000_000))
        #expect(Hex.encode(hasher.finalize()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test("SHA-256 fed in pieces of every size, as strings and bytes, equals one pass")
    func sha256Pieces() {
        let text = String(repeating: "perimeter/v1/museum/ü-", count: 9)
        let whole = SHA256.hash(Array(text.utf8))
        for size in [1, 3, 63, 64, 65, 100] {
            var bytes = SHA256()
            var strings = SHA256()
            var start = text.utf8.startIndex
            while start != text.utf8.endIndex {
                let end = text.utf8.index(start, offsetBy: size, limitedBy: text.utf8.endIndex) ?? text.utf8.endIndex
                bytes.update(Array(text.utf8[start..<end]))
                strings.update(AnySequence(text.utf8[start..<end]))
                start = end
            }
            #expect(bytes.finalize() == whole, "pieces of \(size)")
            #expect(strings.finalize() == whole, "pieces of \(size), not contiguous")
        }
        var hasher = SHA256()
        hasher.update(text)
        #expect(hasher.finalize() == whole)
    }

    @Test(
        "CSV fields",
        arguments: [
            ("a,b,c", ["a", "b", "c"]), ("\"x,y\",2", ["x,y", "2"]),
            ("\"he said \"\"hi\"\"\",", ["he said \"hi\"", ""]),
            ("1,2\r", ["1", "2"]), ("", [""]),
        ])
    func csv(line: String, fields: [String]) throws {
        #expect(try CSV.fields(Substring(line)) == fields)
        #expect(try CSV.fields(Substring(CSV.line(fields))) == fields)
    }

    @Test(
        "weekly windows, overnight too, in the venue's zone",
        arguments: [
            // 2026-06-01 is a Monday. (hour UTC, zone, active)
            (10.0, "UTC", true), (8.0, "UTC", false), (7.5, "Europe/Paris", true), (23.0, "UTC", true),
            (2.0, "UTC", false), (26.0, "UTC", true), (30.0, "UTC", false),
        ])
    func schedule(hour: Double, zone: String, active: Bool) {
        let schedule = WeeklySchedule(windows: [
            .init(days: [.mon], start: 9 * 60, end: 17 * 60), .init(days: [.mon], start: 22 * 60, end: 3 * 60),
        ])
        let monday = Date(timeIntervalSince1970: 1_780_272_000)
        #expect(
            schedule.isActive(at: monday.addingTimeInterval(hour * 3600), in: TimeZone(identifier: zone)!) == active)
    }

    @Test("topics are built in one place")
    func topics() {
        let topics = Topics(venue: "museum")
        #expect(topics.gps(agent: "phone-1") == "perimeter/v1/museum/obs/phone-1/gps")
        #expect(topics.event(.enter, region: "hall", subject: "s") == "perimeter/v1/museum/enter/hall/s")
        #expect(topics.state(region: "hall", subject: "s") == "perimeter/v1/museum/state/hall/s")
        #expect(Topics(prefix: "x/y", venue: "v").all == "x/y/v/#")
        #expect(
            topics.state(region: "Europe/Paris", subject: "a+b") == "perimeter/v1/museum/state/Europe%2FParis/a%2Bb")
        #expect(Topics.decodeLevel(Topics.level("50%/#x")) == "50%/#x")
        // Found by fuzzing: a separator or '%' next to a combining mark is one Character in
        // Swift, but still a byte the broker reads as a separator; topics split on the byte too.
        for id in ["a/\u{301}b", "sitowntr%%%%\u{353}", "+\u{300}", "#\u{20DD}", "\u{0595}", "a\u{070F}"] {
            let level = Topics.level(id)
            let route = InboundDecoder.route(
                topic: Topics(venue: "museum").gps(agent: id), prefix: "perimeter/v1", venues: ["museum"])
            #expect(route == .gps(venue: "museum", agent: id), "\(id.debugDescription)")
            #expect(!level.utf8.contains { $0 == 0x2F || $0 == 0x2B || $0 == 0x23 }, "\(id.debugDescription)")
            #expect(Topics.decodeLevel(level) == id, "\(id.debugDescription)")
        }
    }

    @Test(
        "GPS observations decode, or name the bad field",
        arguments: [
            (#"{"t":"2026-01-01T10:00:00Z","lat":48.8,"lon":2.3,"acc":5}"#, nil),
            (#"{"t":1780000000,"lat":48.8,"lon":2.3,"floor":2,"subject":"badge-7"}"#, nil),
            (#"{"t":"yesterday","lat":48.8,"lon":2.3}"#, "t: 'yesterday' is not an ISO 8601 time"),
            (#"{"t":1,"lat":"48.8","lon":2.3}"#, "lat: expected a number, got a string"),
            (#"{"t":1,"lat":48.8}"#, "lon: missing"),
            (#"{"t":1,"lat":48.8,"lon":2,"floor":1.5}"#, "floor: expected an integer, got 1.5"),
            (#"[1,2]"#, "expected a JSON object, got an array"),
        ] as [(String, String?)])
    func observations(json: String, expected: String?) throws {
        let value = try JSONValue(parsing: json)
        do {
            let fix = try GPSObservation.decode(value, defaultSubject: "phone")
            #expect(expected == nil, "decoded \(fix) but expected: \(expected ?? "")")
            #expect(fix.subject == (json.contains("badge-7") ? "badge-7" : "phone"))
        } catch {
            #expect(error.description == expected)
        }
    }
}
