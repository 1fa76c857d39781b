import Foundation
import PerimeterCore
import Testing

@Suite("Timestamps keep the millisecond they were given")
struct TimestampTests {
    @Test(
        "what is read is written back unchanged",
        arguments: [
            "2026-12-01T00:10:56.060Z", "2026-12-01T00:10:56.059Z", "2026-12-01T23:59:59.999Z",
            "2026-12-01T00:00:00.000Z", "1970-01-01T00:00:00.001Z", "2024-02-29T12:34:56.789Z",
            "1969-12-31T23:59:59.999Z", "2000-03-01T00:00:00.500Z", "2100-02-28T23:59:59.007Z",
            "9999-12-31T23:59:59.999Z", "1583-01-01T00:00:00.000Z",
        ])
    func roundTrip(_ text: String) throws {
        let date = try #require(Timestamp.parse(text))
        #expect(Timestamp.format(date) == text)
    }

    @Test(
        "a time is rounded to the nearest millisecond, carrying into the next second",
        arguments: [
            (1_780_000_000.06, "2026-05-28T20:26:40.060Z"), (1_780_000_000.0596, "2026-05-28T20:26:40.060Z"),
            (1_780_000_000.0594, "2026-05-28T20:26:40.059Z"), (1_780_000_000.9996, "2026-05-28T20:26:41.000Z"),
            (-0.0004, "1970-01-01T00:00:00.000Z"), (-0.0006, "1969-12-31T23:59:59.999Z"),
        ] as [(Double, String)])
    func rounding(_ seconds: Double, _ expected: String) {
        #expect(Timestamp.format(Date(timeIntervalSince1970: seconds)) == expected)
    }

    /// From 1583: before the Gregorian reform Foundation's calendar is the Julian one, while ISO
    /// 8601 (and Perimeter) count in the proleptic Gregorian calendar.
    @Test("date and time agree with Foundation's calendar over 20,000 random instants (years 1583…9999)")
    func agreesWithFoundation() {
        let style = Date.ISO8601FormatStyle(timeZone: TimeZone(identifier: "UTC")!)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let milliseconds = Int64.random(in: -12_212_553_600_000..<253_402_300_800_000, using: &generator)
            let text = Timestamp.format(Date(timeIntervalSince1970: Double(milliseconds) / 1000))
            let seconds = milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
            let whole = Date(timeIntervalSince1970: Double(seconds)).formatted(style)
            #expect(String(text.prefix(19)) == String(whole.prefix(19)), "\(milliseconds)")
            let fraction = milliseconds - seconds * 1000
            #expect(text.hasSuffix(String(format: ".%03lldZ", fraction)), "\(milliseconds): \(text)")
        }
    }

    /// The fast reading of the common form gives what Foundation's ISO 8601 parser gives.
    @Test("parse agrees with Foundation's ISO 8601 parser: 20,000 random times, fractions of 0…9 digits, offsets")
    func parseAgreesWithFoundation() throws {
        let withFraction = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        let plain = Date.ISO8601FormatStyle()
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let seconds = Int64.random(in: -12_212_553_600..<253_402_300_000, using: &generator)
            var text = String(Timestamp.format(Date(timeIntervalSince1970: Double(seconds))).prefix(19))
            let digits = Int.random(in: 0...9, using: &generator)
            if digits > 0 {
                text +=
                    "." + String((0..<digits).map { _ in Character(String(Int.random(in: 0...9, using: &generator))) })
            }
            let offsets = ["Z", "+02:00", "-05:30", "+00:00", "-11:45"]
            text += offsets[Int.random(in: 0..<offsets.count, using: &generator)]
            let foundation = (try? withFraction.parse(text)) ?? (try? plain.parse(text))
            let ours = Timestamp.parse(text)
            #expect((foundation == nil) == (ours == nil), "\(text)")
            if let foundation, let ours {
                // Foundation's own reading of a fraction is off by up to ~30 µs far from 1970;
                // what Perimeter keeps is the millisecond, the same for both.
                #expect(abs(foundation.timeIntervalSince1970 - ours.timeIntervalSince1970) < 1e-4, "\(text)")
                if digits <= 3 { #expect(Timestamp.format(foundation) == Timestamp.format(ours), "\(text)") }
            }
        }
    }

    @Test(
        "impossible dates and other forms are left to Foundation: parse gives what Foundation's parser gives",
        arguments: [
            "2026-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-13-01T00:00:00Z", "2026-12-01T24:00:00Z",
            "2026-12-01T23:60:00Z", "2026-12-01T23:59:60.5Z", "2026-12-01T23:59:59", "2026-12-01T23:59:59.Z",
            "2026-12-01T23:59:59.1234567890Z", "2026-12-01T23:59:59+25:00", "2026-12-01 23:59:59Z",
            "2026-12-01T23:59:59ZZ", "1582-10-10T00:00:00Z",
        ])
    func leftToFoundation(_ text: String) {
        let foundation =
            (try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text))
            ?? (try? Date.ISO8601FormatStyle().parse(text))
        #expect(Timestamp.parse(text) == foundation, "\(text)")
    }
}
