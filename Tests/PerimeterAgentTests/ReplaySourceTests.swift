import Foundation
import PerimeterAgent
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Synchronization
import Testing

@Suite("Replay source")
struct ReplaySourceTests {
    static let logger = Logger(label: "test", handler: DiscardingLogHandler())

    static func replay(
        _ path: String, format: TrackReader.Format? = nil, speed: Double = 0
    ) async throws -> [GPSReading] {
        let source = try ReplaySource(path: path, format: format, speed: speed, logger: logger)
        let collected = Collected()
        try await source.run { collected.add($0) }
        return collected.readings
    }

    static func write(_ name: String, _ text: String) throws -> String {
        let path = try temporaryDirectory().appendingPathComponent(name).path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test("GPX: every timed track point, in order, with its time")
    func gpx() async throws {
        let readings = try await Self.replay(try Fixtures.path("tracks/around-visnjan-with-car.gpx"))
        #expect(readings.count == 104)
        #expect(readings.first.map { Timestamp.format($0.t) } == "2020-12-18T06:15:50.000Z")
        #expect(abs((readings.first?.position.lat ?? 0) - 45.2735188510) < 1e-9)
        #expect(readings.map(\.t) == readings.map(\.t).sorted())
    }

    @Test("CSV with a header and an accuracy column")
    func csv() async throws {
        let path = try Self.write(
            "walk.csv", "t,lat,lon,acc\n2026-12-01T10:00:00Z,48.8606,2.3354,5\n2026-12-01T10:00:02Z,48.8607,2.3355,\n")
        let readings = try await Self.replay(path)
        #expect(readings.count == 2)
        #expect(readings.map(\.accuracy) == [5, nil])
        #expect(readings.last.map { Timestamp.format($0.t) } == "2026-12-01T10:00:02.000Z")
    }

    @Test("JSON lines of obs/…/gps payloads; a bad line is skipped, not fatal")
    func jsonLines() async throws {
        let path = try Self.write(
            "walk.jsonl",
            #"{"t":"2026-12-01T10:00:00Z","lat":48.8606,"lon":2.3354,"acc":4}"# + "\n" + #"{"t":"x"}"# + "\n"
                + #"{"subject":"v-9","t":1796119201,"lat":48.8607,"lon":2.3355,"acc":6,"floor":1}"# + "\n")
        let readings = try await Self.replay(path)
        #expect(readings.count == 2)
        #expect(readings.last?.subject == "v-9")
        #expect(readings.last?.floor == 1)
        #expect(readings.first?.subject == nil)
    }

    @Test(
        "NMEA: the capture's fixes at gpsd's positions and times of day", arguments: ["bu353s4.log", "haicom-305N.log"])
    func nmea(_ name: String) async throws {
        let readings = try await Self.replay(try Fixtures.path("nmea/\(name)"))
        // gpsd reports a cycle more than once as sentences arrive; compare distinct positions.
        let gpsd = try Fixtures.gpsdFixes(name)
        var expected: [GPSReading] = []
        for fix in gpsd where expected.last?.t != fix.t { expected.append(fix) }
        #expect(readings.count == expected.count)
        for (reading, want) in zip(readings, expected) {
            #expect(abs(reading.position.lat - want.position.lat) < 1e-8)
            #expect(abs(reading.position.lon - want.position.lon) < 1e-8)
            // gpsd 3.22 moves these old two-digit-year dates by its week-rollover rule; the
            // time of day is the receiver's.
            let ours = reading.t.timeIntervalSince1970.truncatingRemainder(dividingBy: 86_400)
            let theirs = want.t.timeIntervalSince1970.truncatingRemainder(dividingBy: 86_400)
            #expect(abs(ours - theirs) < 0.001)
        }
    }

    @Test("speed paces the replay by the gaps between points divided by the speed", arguments: [1.0, 10.0, 0.5])
    func paced(_ speed: Double) async throws {
        let path = try Self.write(
            "paced.csv",
            "2026-12-01T10:00:00Z,48.8606,2.3354,5\n2026-12-01T10:00:02Z,48.8607,2.3355,5\n"
                + "2026-12-01T10:00:02Z,48.8608,2.3356,5\n2026-12-01T10:00:05Z,48.8609,2.3357,5\n")
        var source = try ReplaySource(path: path, speed: speed, logger: Self.logger)
        let waits = Mutex<[Duration]>([])
        source.sleep = { duration in waits.withLock { $0.append(duration) } }
        let collected = Collected()
        try await source.run { collected.add($0) }
        #expect(collected.readings.count == 4)
        // Gaps of 2 s, 0 s (no wait) and 3 s.
        let expected: [Duration] = [.milliseconds(Int(2000 / speed)), .milliseconds(Int(3000 / speed))]
        #expect(waits.withLock { $0 } == expected)
    }

    @Test("at ten times real time, a 4 s track takes at least 0.4 s")
    func pacedWallClock() async throws {
        let path = try Self.write(
            "paced.csv", "2026-12-01T10:00:00Z,48.8606,2.3354,5\n2026-12-01T10:00:04Z,48.8608,2.3356,5\n")
        let clock = ContinuousClock()
        let started = clock.now
        let readings = try await Self.replay(path, speed: 10)
        #expect(readings.count == 2)
        #expect(clock.now - started >= .milliseconds(390))
    }

    @Test("an unreadable file is an error naming it")
    func missing() {
        #expect {
            try ReplaySource(path: "/nonexistent/track.gpx", logger: Self.logger)
        } throws: { error in
            "\(error)".contains("/nonexistent/track.gpx")
        }
    }
}
