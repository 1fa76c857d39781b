import Foundation
import PerimeterCore
import PerimeterKit

/// `perimeter bench beacons`: sightings per second through the whole beacon path (decode of
/// raw adverts, constraint matching, smoothing, region state and ranging) on one core, and the
/// decoder alone next to beacontools (Python) on the same adverts.
struct BenchBeaconsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "beacons", abstract: "Beacon sightings per second: decode, match, smoothing, state, ranging.",
        discussion: """
            A stadium-sized synthetic venue: --beacons beacons (80 % iBeacon, 10 % Eddystone-UID,
            10 % AltBeacon) as raw advertising data, --regions wildcard beacon regions
            (uuid, uuid+major, namespace, id1+id2 constraints) and --subjects phones in scanner
            mode. Every simulated second each phone reports --per-report beacons near its seat,
            with RSSI noise; ranging runs once per simulated second. Single thread; only the
            sighting loop is timed (generation is not). The decoder alone is then compared with
            beacontools' parse_packet on the same adverts (bench/python/beacon_baseline.py in a
            virtual environment at --venv). Target: ≥ 1,000,000 sightings/s on a release build.
            """)

    @Option(help: "Distinct beacons.", valueName: "n")
    var beacons: Int = 10_000

    @Option(help: "Beacon regions (wildcard constraints).", valueName: "n")
    var regions: Int = 100

    @Option(help: "Subjects (phones in scanner mode).", valueName: "n")
    var subjects: Int = 100_000

    @Option(help: "Beacons heard per report.", valueName: "n")
    var perReport: Int = 3

    @Option(help: "Simulated seconds (one report per subject per second).", valueName: "n")
    var seconds: Int = 10

    @Option(help: "Adverts the decoder comparison decodes.", valueName: "n")
    var decodeAdverts: Int = 200_000

    @Option(help: "Python virtual environment for the baseline.", valueName: "dir")
    var venv: String = ".build/bench-venv"

    @Option(help: "Directory of beacon_baseline.py and requirements.txt.", valueName: "dir")
    var scripts: String = "bench/python"

    @Option(help: "Random seed.", valueName: "n")
    var seed: Int = 1

    @Flag(help: "Measure Perimeter only (no Python baseline).")
    var noBaseline: Bool

    mutating func validate() throws {
        guard beacons > 0, regions > 0, subjects > 0, perReport > 0, seconds > 0, decodeAdverts > 0 else {
            throw ValidationError("counts must be positive")
        }
        guard perReport <= beacons else { throw ValidationError("--per-report cannot exceed --beacons") }
    }

    func run() async throws {
        #if DEBUG
            Output.error("warning: this is a debug build; build with 'swift build -c release' for real figures")
        #endif
        var random = SplitMix64(seed: UInt64(seed))
        let venue = SyntheticBeaconVenue(beacons: beacons, regions: regions, random: &random)
        let formats = Dictionary(grouping: venue.identities, by: \.format).mapValues(\.count)
        print(
            "bench beacons: \(beacons) beacons (\(formats[.iBeacon] ?? 0) iBeacon, \(formats[.eddystone] ?? 0) Eddystone-UID, \(formats[.altBeacon] ?? 0) AltBeacon), \(venue.regions.count) regions, \(subjects) subjects, \(perReport) sightings/report, \(seconds) s simulated"
        )
        let pipeline = try measurePipeline(venue, random: &random)
        print(pipeline.report)
        try compareDecoder(venue)
    }

    struct PipelineResult {
        var rate: Double
        var report: String
    }

    /// The whole sighting path, as the evaluator runs it per `obs/{agent}/ble` message.
    func measurePipeline(_ venue: SyntheticBeaconVenue, random: inout SplitMix64) throws -> PipelineResult {
        let names = (0..<subjects).map { "phone-\($0)" }
        let seats = (0..<subjects).map { _ in Int(random.next() % UInt64(beacons)) }
        // RSSI noise drawn up front so the timed loop measures Perimeter, not the generator.
        let noise = (0..<4096).map { _ in -55 - random.uniform(0, 30) }
        var engine = BeaconEngine(regions: venue.regions, parameters: BeaconParameters(venue: "bench"))
        let baseline = ProcessMemory.residentMB()
        var sightings = 0
        var events = 0
        var rangingReports = 0
        var decodeFailures = 0
        var noiseIndex = 0
        var sighted: [BeaconSighting] = []
        sighted.reserveCapacity(perReport)
        let origin = Date(timeIntervalSince1970: 1_750_000_000)
        let started = ContinuousClock.now
        for second in 0..<seconds {
            for subject in 0..<subjects {
                sighted.removeAll(keepingCapacity: true)
                for offset in 0..<perReport {
                    let beacon = (seats[subject] + offset) % beacons
                    let decoded = venue.adverts.withUnsafeBufferPointer { buffer in
                        let range = venue.advertRanges[beacon]
                        return try? AdvertisementDecoder.decode(
                            UnsafeBufferPointer(rebasing: buffer[range]))
                    }
                    guard let advert = decoded?.beacon else {
                        decodeFailures += 1
                        continue
                    }
                    noiseIndex = (noiseIndex + 1) & 4095
                    sighted.append(
                        BeaconSighting(identity: advert.identity, rssi: noise[noiseIndex], tx1m: advert.tx1m))
                }
                sightings += sighted.count
                let t = origin.addingTimeInterval(Double(second) + Double(subject) / Double(subjects))
                if case .success(let update) = engine.process(
                    BeaconReport(agent: names[subject], t: t, sightings: sighted))
                {
                    events += update.events.count
                }
            }
            engine.rangeDue(at: origin.addingTimeInterval(Double(second + 1))) { _ in rangingReports += 1 }
        }
        let elapsed = BenchMQTTCommand.seconds(ContinuousClock.now - started)
        let memory = ProcessMemory.residentMB() - baseline
        guard decodeFailures == 0 else { throw ExitCode(1, "\(decodeFailures) synthetic adverts failed to decode") }
        let rate = Double(sightings) / elapsed
        let verdict = rate >= 1_000_000 ? "met" : "NOT met"
        let report = """
            pipeline (decode → match → smoothing → state → ranging), one core:
              \(sightings) sightings in \(String(format: "%.2f", elapsed)) s = \(String(format: "%.2f", rate / 1e6)) M sightings/s (target ≥ 1 M/s: \(verdict))
              \(events) state/transition events, \(rangingReports) ranging reports; memory +\(String(format: "%.0f", memory)) MB (\(String(format: "%.0f", memory * 1_048_576 / Double(subjects))) B/subject)
            """
        return PipelineResult(rate: rate, report: report)
    }

    /// Decoder alone: the same adverts, as bytes, through Perimeter and beacontools.
    func compareDecoder(_ venue: SyntheticBeaconVenue) throws {
        let lines = (0..<decodeAdverts).map { venue.advertRanges[$0 % beacons] }
        var counts: [String: Int] = [:]
        var checksum: [String: UInt64] = [:]
        var best = Double.infinity
        for pass in 0..<3 {
            let started = ContinuousClock.now
            var found = 0
            venue.adverts.withUnsafeBufferPointer { buffer in
                for range in lines {
                    if case .beacon? = try? AdvertisementDecoder.decode(UnsafeBufferPointer(rebasing: buffer[range])) {
                        found += 1
                    }
                }
            }
            best = min(best, BenchMQTTCommand.seconds(ContinuousClock.now - started))
            if pass == 0 && found != lines.count { throw ExitCode(1, "decoded \(found) of \(lines.count) adverts") }
        }
        for range in lines {
            guard case .beacon(let advert)? = try? AdvertisementDecoder.decode(Array(venue.adverts[range])) else {
                continue
            }
            let name = advert.identity.format.name
            counts[name, default: 0] += 1
            if advert.identity.format != .eddystone {
                checksum[name, default: 0] =
                    (checksum[name, default: 0] + advert.identity.part2 * 65536 + advert.identity.part3) % (1 << 61)
            }
        }
        let rate = Double(lines.count) / best
        print(
            "decoder alone: Perimeter \(String(format: "%.2f", rate / 1e6)) M adverts/s (\(lines.count) adverts, best of 3)"
        )
        guard !noBaseline else { return }
        let work = FileManager.default.temporaryDirectory.appendingPathComponent(
            "perimeter-bench-beacons-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let path = work.appendingPathComponent("adverts.txt").path
        let text = lines.map { Hex.encode(venue.adverts[$0]) }.joined(separator: "\n") + "\n"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let python = try BaselineRunner.prepare(
            venv: venv, scripts: scripts, script: "beacon_baseline.py",
            versionProbe: "import importlib.metadata as m; print('beacontools', m.version('beacontools'))")
        let result = try python.runJSON(["--adverts", path, "--json"])
        let baselineRate = result["rate"]?.doubleValue ?? 0
        print(
            "decoder alone: \(python.versions) \(String(format: "%.0f", baselineRate)) adverts/s → Perimeter is \(String(format: "%.0f", rate / max(baselineRate, 1)))× faster"
        )
        // Parity: the same identities from both decoders.
        var agreements: [String] = []
        for (name, count) in counts.sorted(by: { $0.key < $1.key }) {
            let theirs = result["identities"]?[name]?.intValue
            let sums = checksum[name].map { ours in
                (ours, result["checksum"]?[name]?.doubleValue.map { UInt64($0) })
            }
            guard let theirs, theirs > 0 else {
                agreements.append("\(name): \(count) vs none (beacontools does not decode \(name))")
                continue
            }
            var line = "\(name): \(count) vs \(theirs)"
            if let (ours, theirs) = sums { line += ", id checksum \(theirs == ours ? "equal" : "DIFFERENT")" }
            agreements.append(line)
        }
        print("parity: " + agreements.joined(separator: "; "))
    }
}

/// Synthetic beacons, their raw adverts, and wildcard regions over them.
struct SyntheticBeaconVenue {
    var identities: [BeaconIdentity] = []
    /// Every beacon's advertising data, back to back; `advertRanges[i]` is beacon i's.
    var adverts: [UInt8] = []
    var advertRanges: [Range<Int>] = []
    var regions: [Region] = []

    init(beacons: Int, regions regionCount: Int, random: inout SplitMix64) {
        let uuids = (0..<8).map { _ in BeaconPrefix(high: random.next(), low: random.next()) }
        let namespaces = (0..<4).map { _ in
            BeaconPrefix(high: random.next(), low: random.next() & 0xFFFF_0000_0000_0000)
        }
        for index in 0..<beacons {
            let identity: BeaconIdentity
            var bytes: [UInt8] = [0x02, 0x01, 0x06]
            let tx = UInt8(bitPattern: Int8(-59 - Int(random.next() % 8)))
            switch index % 10 {
            case 8:
                identity = .eddystone(namespace: namespaces[index % 4], instance: UInt64(index))
                bytes += [0x03, 0x03, 0xAA, 0xFE, 0x17, 0x16, 0xAA, 0xFE, 0x00, tx &+ 41]
                bytes += identity.prefix.bytes.prefix(10)
                bytes += (0..<6).map { UInt8(truncatingIfNeeded: identity.part2 >> (40 - 8 * UInt64($0))) }
                bytes += [0, 0]
            case 9:
                identity = .altBeacon(id1: uuids[index % 8], id2: UInt16(index / 10 % 16), id3: UInt16(index % 65536))
                bytes += [0x1B, 0xFF, 0x18, 0x01, 0xBE, 0xAC] + identity.prefix.bytes
                bytes += [UInt8(identity.part2 >> 8), UInt8(identity.part2 & 0xFF)]
                bytes += [UInt8(identity.part3 >> 8), UInt8(identity.part3 & 0xFF), tx, 0x00]
            default:
                identity = .iBeacon(uuid: uuids[index % 8], major: UInt16(index / 8 % 16), minor: UInt16(index % 65536))
                bytes += [0x1A, 0xFF, 0x4C, 0x00, 0x02, 0x15] + identity.prefix.bytes
                bytes += [UInt8(identity.part2 >> 8), UInt8(identity.part2 & 0xFF)]
                bytes += [UInt8(identity.part3 >> 8), UInt8(identity.part3 & 0xFF), tx]
            }
            identities.append(identity)
            advertRanges.append(adverts.count..<(adverts.count + bytes.count))
            adverts += bytes
        }
        // Mostly uuid+major zones, some whole-uuid wildcards, Eddystone namespaces and AltBeacon id1+id2.
        for number in 0..<regionCount {
            let beacon: JSONValue
            switch number % 10 {
            case 0: beacon = ["uuid": .string(uuids[number / 10 % 8].uuidString)]
            case 1: beacon = ["namespace": .string(namespaces[number / 10 % 4].namespaceString)]
            case 2:
                beacon = ["id1": .string(uuids[number / 10 % 8].uuidString), "id2": .number(Double(number / 10 % 16))]
            default:
                beacon = ["uuid": .string(uuids[number % 8].uuidString), "major": .number(Double(number / 8 % 16))]
            }
            let feature: JSONValue = [
                "type": "Feature", "id": .string("zone-\(number)"), "geometry": nil,
                "properties": ["beacon": beacon],
            ]
            if let region = RegionParser.parseFeature(feature, index: number).1 { regions.append(region) }
        }
    }
}
