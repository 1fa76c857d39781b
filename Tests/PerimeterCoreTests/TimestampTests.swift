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
}
