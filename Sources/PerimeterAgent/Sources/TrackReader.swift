import Foundation
import FoundationXML
import PerimeterCore

/// Reads a recorded track for `perimeter replay` and the agent's replay source: GPX, CSV
/// (`t,lat,lon[,acc]`), JSON lines of `obs/…/gps` observations, or raw NMEA 0183 (RMC, GGA and
/// GSA combined into one fix per receiver cycle, checksums verified).
public struct TrackReader: Sendable {
    public enum Format: String, CaseIterable, Sendable {
        case gpx, csv, jsonl, nmea
    }

    /// A fix or the reason a record could not be read, with where it was.
    public struct Record: Sendable {
        public var location: String
        public var fix: Result<Fix, TrackError>

        public static func failure(_ location: String, _ message: String) -> Record {
            Record(location: location, fix: .failure(TrackError(message: message)))
        }
    }

    public struct TrackError: Error, CustomStringConvertible, Sendable {
        public var message: String
        public var description: String { message }
    }

    public let subject: String
    /// Accuracy for records that carry none (GPX without hdop, CSV without acc).
    public let defaultAccuracy: Double?
    /// Seconds between points for GPX tracks without times.
    public let interval: Double?

    public init(subject: String, defaultAccuracy: Double? = nil, interval: Double? = nil) {
        self.subject = subject
        self.defaultAccuracy = defaultAccuracy
        self.interval = interval
    }

    public static func guessFormat(path: String, data: Data) -> Format {
        switch URL(fileURLWithPath: path).pathExtension.lowercased() {
        case "gpx": return .gpx
        case "csv": return .csv
        case "jsonl", "ndjson", "json": return .jsonl
        case "nmea", "log": return .nmea
        default:
            let first = data.first { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }
            if first == UInt8(ascii: "<") { return .gpx }
            if first == UInt8(ascii: "$") || first == UInt8(ascii: "#") { return .nmea }
            if first == UInt8(ascii: "{") { return .jsonl }
            return .csv
        }
    }

    public func read(_ data: Data, format: Format, name: String) throws -> [Record] {
        switch format {
        case .gpx: return try readGPX(data, name: name)
        case .csv: return readCSV(data, name: name)
        case .jsonl: return readJSONLines(data, name: name)
        case .nmea: return readNMEA(data, name: name)
        }
    }

    /// NMEA: `#` comment lines (as in gpsd's test logs) and blank lines are skipped; a
    /// sentence with a bad checksum or field is reported and left out of its cycle.
    private func readNMEA(_ data: Data, name: String) -> [Record] {
        var records: [Record] = []
        var assembler = NMEAFixAssembler()
        var lastLine = 0
        func append(_ reading: GPSReading?, line: Int) {
            guard let reading else { return }
            let fix = Fix(
                subject: subject, t: reading.t, position: reading.position,
                accuracy: reading.accuracy ?? defaultAccuracy, source: "replay")
            records.append(Record(location: "\(name):\(line)", fix: .success(fix)))
        }
        for (offset, line) in Lines(data: data).enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            do {
                let sentence = try NMEASentence.parse(trimmed)
                // A cycle is reported where the next one starts (the line that completed it).
                append(assembler.add(sentence), line: offset + 1)
                lastLine = offset + 1
            } catch {
                records.append(.failure("\(name):\(offset + 1)", "\(error)"))
            }
        }
        append(assembler.finish(), line: lastLine)
        return records
    }

    private func readJSONLines(_ data: Data, name: String) -> [Record] {
        var records: [Record] = []
        for (offset, line) in Lines(data: data).enumerated() where !line.allSatisfy(\.isWhitespace) {
            let location = "\(name):\(offset + 1)"
            do {
                let value = try JSONValue(parsing: String(line))
                let fix = try GPSObservation.decode(value, defaultSubject: subject, source: "replay")
                records.append(Record(location: location, fix: .success(withDefaultAccuracy(fix))))
            } catch {
                records.append(.failure(location, "\(error)"))
            }
        }
        return records
    }

    private func readCSV(_ data: Data, name: String) -> [Record] {
        var records: [Record] = []
        var columns = (t: 0, lat: 1, lon: 2, acc: 3 as Int?)
        for (offset, line) in Lines(data: data).enumerated() where !line.allSatisfy(\.isWhitespace) {
            let location = "\(name):\(offset + 1)"
            guard let fields = try? CSV.fields(line).map({ $0.trimmingCharacters(in: .whitespaces) }) else {
                records.append(.failure(location, "unterminated quoted field"))
                continue
            }
            let lowered = fields.map { $0.lowercased() }
            if offset == 0, let t = lowered.firstIndex(where: { $0 == "t" || $0 == "time" }),
                let lat = lowered.firstIndex(of: "lat"), let lon = lowered.firstIndex(of: "lon")
            {
                columns = (t, lat, lon, lowered.firstIndex(where: { $0 == "acc" || $0 == "accuracy" }))
                continue
            }
            let needed = max(columns.t, columns.lat, columns.lon) + 1
            guard fields.count >= needed else {
                records.append(.failure(location, "expected t,lat,lon[,acc], got \(fields.count) fields"))
                continue
            }
            guard let t = Timestamp.parse(fields[columns.t]) else {
                records.append(.failure(location, "t '\(fields[columns.t])' is not an ISO 8601 time or epoch seconds"))
                continue
            }
            guard let lat = Double(fields[columns.lat]), let lon = Double(fields[columns.lon]) else {
                records.append(
                    .failure(location, "lat/lon '\(fields[columns.lat])', '\(fields[columns.lon])' are not numbers"))
                continue
            }
            var accuracy: Double?
            if let column = columns.acc, column < fields.count, !fields[column].isEmpty {
                guard let value = Double(fields[column]) else {
                    records.append(.failure(location, "acc '\(fields[column])' is not a number"))
                    continue
                }
                accuracy = value
            }
            let fix = Fix(
                subject: subject, t: t, position: GeoPoint(lon: lon, lat: lat), accuracy: accuracy ?? defaultAccuracy,
                source: "replay")
            records.append(Record(location: location, fix: .success(fix)))
        }
        return records
    }

    private func withDefaultAccuracy(_ fix: Fix) -> Fix {
        var fix = fix
        if fix.accuracy == nil { fix.accuracy = defaultAccuracy }
        return fix
    }

    private func readGPX(_ data: Data, name: String) throws -> [Record] {
        let parser = XMLParser(data: data)
        let collector = GPXCollector()
        parser.delegate = collector
        guard parser.parse() else {
            let error = parser.parserError.map { "\($0.localizedDescription)" } ?? "unknown error"
            throw TrackError(message: "\(name): not valid GPX (line \(parser.lineNumber)): \(error)")
        }
        var records: [Record] = []
        var start: Date?
        for (index, point) in collector.points.enumerated() {
            let location = "\(name): track point \(index + 1) (line \(point.line))"
            guard let lat = point.lat.flatMap(Double.init), let lon = point.lon.flatMap(Double.init) else {
                records.append(.failure(location, "lat/lon attributes missing or not numbers"))
                continue
            }
            var t = point.time.flatMap(Timestamp.parse)
            if t == nil, let interval {
                start = start ?? Date(timeIntervalSince1970: 0)
                t = start!.addingTimeInterval(interval * Double(index))
            }
            guard let t else {
                records.append(.failure(location, "no <time>; pass --interval SECONDS to replay an untimed track"))
                continue
            }
            // GPX has no accuracy; a dilution of precision times a typical 5 m range error is a fair stand-in.
            let accuracy = point.hdop.flatMap(Double.init).map { $0 * 5 } ?? defaultAccuracy
            let fix = Fix(
                subject: subject, t: t, position: GeoPoint(lon: lon, lat: lat), accuracy: accuracy, source: "replay")
            records.append(Record(location: location, fix: .success(fix)))
        }
        return records
    }
}

/// Collects `<trkpt>` (and `<rtept>`) points with their time and hdop.
private final class GPXCollector: NSObject, XMLParserDelegate {
    struct Point {
        var lat: String?
        var lon: String?
        var time: String?
        var hdop: String?
        var line: Int
    }

    var points: [Point] = []
    private var current: Point?
    private var text = ""

    func parser(
        _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?, qualifiedName: String?,
        attributes: [String: String]
    ) {
        let name = elementName.split(separator: ":").last.map(String.init) ?? elementName
        if name == "trkpt" || name == "rtept" {
            current = Point(lat: attributes["lat"], lon: attributes["lon"], line: parser.lineNumber)
        }
        text = ""
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }

    func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
        let name = elementName.split(separator: ":").last.map(String.init) ?? elementName
        let value = text.trimmingCharacters(in: .whitespacesAndNewlines)
        switch name {
        case "time": current?.time = value
        case "hdop": current?.hdop = value
        case "trkpt", "rtept":
            if let point = current { points.append(point) }
            current = nil
        default: break
        }
        text = ""
    }
}
