import Foundation
import PerimeterCore
import Testing

/// Sentences from real receivers: gpsd 3.22's test logs (bu353s4.log: GlobalSat BU-353-S4,
/// Hamilton NZ, 2014; haicom-305N.log: Haicom HI-305N, Queensland, 2007), BSD-2-Clause.
@Suite("NMEA sentences")
struct NMEATests {
    struct Case: Sendable, CustomStringConvertible {
        var line: String
        var check: @Sendable (NMEASentence) -> Bool
        var description: String { String(line.prefix(30)) }
    }

    static let valid: [Case] = [
        Case(line: "$GPRMC,030719.000,A,3747.0873,S,17518.8938,E,0.69,181.39,311214,,,A*7D") {
            guard case .rmc(let rmc) = $0, let p = rmc.position else { return false }
            return rmc.valid && rmc.timeOfDay == 3 * 3600 + 7 * 60 + 19
                && rmc.date == DateComponents(year: 2014, month: 12, day: 31) && abs(p.lat - -37.784788333) < 1e-8
                && abs(p.lon - 175.314896667) < 1e-8 && rmc.knots == 0.69 && rmc.course == 181.39
        },
        Case(line: "$GPGGA,030719.000,3747.0873,S,17518.8938,E,1,08,1.1,59.9,M,23.7,M,,0000*7D") {
            guard case .gga(let gga) = $0 else { return false }
            return gga.quality == 1 && gga.satellites == 8 && gga.hdop == 1.1 && gga.altitude == 59.9
        },
        Case(line: "$GPGSA,A,3,17,28,06,01,30,20,26,13,,,,,1.8,1.1,1.5*33") {
            guard case .gsa(let gsa) = $0 else { return false }
            return gsa.mode == 3 && gsa.pdop == 1.8 && gsa.hdop == 1.1 && gsa.vdop == 1.5
        },
        // No fix yet: RMC status V, GGA quality 0, GSA mode 1.
        Case(line: "$GPRMC,095257.809,V,2712.6404,S,15303.1201,E,0.00,0.00,080407,,,A*64") {
            guard case .rmc(let rmc) = $0 else { return false }
            return !rmc.valid && rmc.date == DateComponents(year: 2007, month: 4, day: 8)
        },
        Case(line: "$GPGGA,095258.809,2712.6404,S,15303.1201,E,0,00,00.0,4.0,M,42.2,M,,*74") {
            guard case .gga(let gga) = $0 else { return false }
            return gga.quality == 0
        },
        Case(line: "$GPGSA,A,1,,,,,,,,,,,,,0.0,0.0,0.0*30") {
            guard case .gsa(let gsa) = $0 else { return false }
            return gsa.mode == 1
        },
        Case(line: "$GPGSV,3,3,12,24,58,220,,26,17,053,,29,20,063,,30,60,311,44*7F\r\n") {
            $0 == .other("GSV")
        },
        Case(line: "$GPVTG,0.00,T,,,0.00,N,0.00,K,A*70") { $0 == .other("VTG") },
    ]

    @Test("real sentences parse", arguments: valid)
    func parses(_ example: Case) throws {
        let sentence = try NMEASentence.parse(example.line)
        #expect(example.check(sentence), "\(sentence)")
    }

    static let invalid: [(line: String, message: String)] = [
        ("$GPRMC,030719.000,A,3747.0873,S,17518.8938,E,0.69,181.39,311214,,,A*7E", "checksum mismatch"),
        ("$GPRMC,030719.000,A,3747.0873,S,17518.8938,E,0.69,181.39,311214,,,A", "no checksum"),
        ("GPRMC,030719.000,A*7D", "not an NMEA sentence"),
        ("$GPRMC,030719.000,A,3747.0873,S,17518.8938,E,0.69,181.39,311214,,,A*ZZ", "not two hex digits"),
        ("$GPGGA,030719.000,3747.0873,X,17518.8938,E,1,08,1.1,59.9,M,23.7,M,,0000*76", "position"),
        ("$GPRMC,250719.000,A,3747.0873,S,17518.8938,E,0.69,181.39,311214,,,A*79", "time"),
        ("$GPGSA,A,3*30", "GSA"),
    ]

    @Test("bad sentences are refused with the reason", arguments: invalid)
    func refuses(_ example: (line: String, message: String)) {
        #expect {
            try NMEASentence.parse(example.line)
        } throws: { error in
            "\(error)".contains(example.message)
        }
    }

    @Test("RMC, GGA and GSA of a cycle combine into one fix; cycles without a fix give none")
    func assembles() throws {
        let lines = [
            "$GPGGA,095258.809,2712.6404,S,15303.1201,E,0,00,00.0,4.0,M,42.2,M,,*74",
            "$GPRMC,095258.809,V,2712.6404,S,15303.1201,E,0.00,0.00,080407,,,A*6B",
            "$GPGGA,030719.000,3747.0873,S,17518.8938,E,1,08,1.1,59.9,M,23.7,M,,0000*7D",
            "$GPGSA,A,3,17,28,06,01,30,20,26,13,,,,,1.8,1.1,1.5*33",
            "$GPRMC,030719.000,A,3747.0873,S,17518.8938,E,0.69,181.39,311214,,,A*7D",
            "$GPGGA,030720.000,3747.0875,S,17518.8938,E,1,08,1.1,59.8,M,23.7,M,,0000*70",
            "$GPGSA,A,3,17,28,06,01,30,20,26,13,,,,,1.8,1.1,1.5*33",
            "$GPRMC,030720.000,A,3747.0875,S,17518.8938,E,1.15,181.39,311214,,,A*7B",
        ]
        var assembler = NMEAFixAssembler()
        var readings: [GPSReading] = []
        for line in lines {
            if let reading = assembler.add(try NMEASentence.parse(line)) { readings.append(reading) }
        }
        if let last = assembler.finish() { readings.append(last) }
        #expect(readings.count == 2)
        let first = try #require(readings.first)
        #expect(Timestamp.format(first.t) == "2014-12-31T03:07:19.000Z")
        #expect(abs(first.position.lat - -37.784788333) < 1e-8)
        #expect(first.altitude == 59.9)
        #expect(abs((first.accuracy ?? 0) - 5.5) < 1e-9)
        #expect(abs((first.speed ?? 0) - 0.69 * 1852 / 3600) < 1e-9)
        #expect(Timestamp.format(readings[1].t) == "2014-12-31T03:07:20.000Z")
    }
}

@Suite("gpsd TPV reports")
struct GPSDReportTests {
    // Lines as Debian's gpsd 3.22 sends them for bu353s4.log (see the agent's gpsd test).
    static let cases: [(line: String, expected: GPSDReport)] = [
        (
            #"{"class":"TPV","device":"tcp://127.0.0.1:1","mode":3,"time":"2034-08-16T03:07:19.000Z","ept":0.005,"lat":-37.784788333,"lon":175.314896667,"altHAE":83.6000,"altMSL":59.9000,"alt":59.9000,"epv":34.500,"track":181.3900,"magtrack":201.9320,"magvar":20.5,"speed":0.355,"geoidSep":23.700,"eph":20.900,"sep":34.200}"#,
            .fix(
                GPSReading(
                    t: Timestamp.parse("2034-08-16T03:07:19.000Z")!,
                    position: GeoPoint(lon: 175.314896667, lat: -37.784788333), accuracy: 20.9, altitude: 59.9,
                    speed: 0.355, course: 181.39))
        ),
        // No eph: the larger of epx and epy.
        (
            #"{"class":"TPV","mode":2,"time":"2026-11-22T09:53:05.802Z","lat":-27.2,"lon":153.05,"epx":9.484,"epy":12.791}"#,
            .fix(
                GPSReading(
                    t: Timestamp.parse("2026-11-22T09:53:05.802Z")!, position: GeoPoint(lon: 153.05, lat: -27.2),
                    accuracy: 12.791))
        ),
        (#"{"class":"TPV","mode":1}"#, .noFix(mode: 1)),
        (#"{"class":"TPV","device":"/dev/ttyUSB0"}"#, .noFix(mode: 0)),
        (
            #"{"class":"TPV","mode":3,"lat":-37.784788333,"lon":175.314896667,"alt":59.9,"eph":20.9}"#,
            .noTime
        ),
        (#"{"class":"SKY","satellites":[]}"#, .other("SKY")),
        (#"{"class":"VERSION","release":"3.22"}"#, .other("VERSION")),
    ]

    @Test("TPV reports map to readings", arguments: cases)
    func maps(_ example: (line: String, expected: GPSDReport)) throws {
        #expect(try GPSDReport.interpret(example.line) == example.expected)
    }

    static let bad: [(line: String, message: String)] = [
        ("not json", "not JSON"),
        (#"{"mode":3}"#, "class"),
        (#"{"class":"TPV","mode":3,"time":"2026-11-22T09:53:05Z"}"#, "no lat/lon"),
        (#"{"class":"TPV","mode":3,"lat":95,"lon":1,"time":"2026-11-22T09:53:05Z"}"#, "off the globe"),
        (#"{"class":"TPV","mode":3,"lat":"x","lon":1}"#, "TPV lat"),
        (#"{"class":"TPV","mode":3,"lat":1,"lon":1,"time":"yesterday"}"#, "TPV time"),
        // Found by the agent fuzz target: a mode too large for an Int trapped in Int(_:).
        (#"{"class":"TPV","mode":1e300,"lat":1,"lon":1}"#, "TPV mode"),
        (#"{"class":"TPV","mode":2.5,"lat":1,"lon":1}"#, "TPV mode"),
        (#"{"class":"TPV","mode":-1}"#, "TPV mode"),
    ]

    @Test("malformed reports are errors naming the problem", arguments: bad)
    func refuses(_ example: (line: String, message: String)) {
        #expect {
            try GPSDReport.interpret(example.line)
        } throws: { error in
            "\(error)".contains(example.message)
        }
    }
}
