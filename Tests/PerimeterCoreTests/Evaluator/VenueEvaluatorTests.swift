import Foundation
import PerimeterCore
import Testing

private func at(_ seconds: Double) -> Date { Date(timeIntervalSince1970: 1_700_000_000 + seconds) }

private func region(_ json: String) -> Region {
    let (_, region, problems) = RegionParser.parseFeature(try! JSONParser.parse(json), index: 0)
    precondition(problems.isEmpty, "\(problems)")
    return region!
}

private let hall = region(
    #"{"type":"Feature","id":"hall","properties":{"radius":30,"place":true},"geometry":{"type":"Point","coordinates":[2.336,48.86]}}"#
)
private let lobby = region(
    #"{"type":"Feature","id":"lobby","properties":{"beacon":{"uuid":"2f234454-cf6d-4a0f-adf2-f4911ba9ffa6","major":1}},"geometry":null}"#
)
private let inside = GeoPoint(lon: 2.336, lat: 48.86)
private let outside = GeoPoint(lon: 2.34, lat: 48.86)

private func fix(_ subject: String, _ time: Double, _ position: GeoPoint) -> Inbound {
    .fix(Fix(subject: subject, t: at(time), position: position, accuracy: 3))
}

/// Outputs as short strings: `occupancy hall 1`, `enter hall v1`, `place v1 hall gps` …
private func describe(_ outputs: [EvaluatorOutput]) -> [String] {
    outputs.compactMap { output in
        switch output {
        case .event(let event) where event.kind == .state:
            "state \(event.region) \(event.subject) \(event.state!.rawValue)\(event.reason.map { " " + $0 } ?? "")"
        case .event(let event): "\(event.kind.rawValue) \(event.region) \(event.subject)"
        case .occupancy(let region, let count, _): "occupancy \(region) \(count)"
        case .ranging(let report): "ranging \(report.region) \(report.subject) \(report.beacons.count)"
        case .place(let subject, let answer, _):
            "place \(subject) \(answer?.place ?? "none") \(answer?.source.rawValue ?? "")"
        case .ownTracksTransition(let user, let device, let payload):
            "owntracks \(user)/\(device) \(payload["event"]?.stringValue ?? "?")"
        case .diagnostics: nil
        case .prompt(let subject): "prompt \(subject)"
        case .fullAccuracyRequest(let subject, let session, _): "fullAccuracyRequest \(subject) \(session)"
        case .authorization(let subject, let record): "authorization \(subject) \(record.status.rawValue)"
        case .privacyDrop(let subject, let reason): "dropped \(subject) \(reason)"
        case .unrecordedSubject(let subject, _): "unrecorded \(subject)"
        case .erased(let subject, let regions): "erased \(subject) \(regions.joined(separator: ","))"
        case .shown(let subject, _): "shown \(subject)"
        case .selfNotification(let event): "self \(event.kind.rawValue) \(event.region) \(event.subject)"
        case .waypoint(let region, let feature): "waypoint \(region) \(feature == nil ? "cleared" : "set")"
        case .discovery(let topic, let config): "discovery \(topic) \(config == nil ? "cleared" : "set")"
        case .visit(let visit): "visit \(visit.kind.rawValue) \(visit.subject)"
        case .live: nil
        }
    }
}

@Suite("Venue evaluator")
struct VenueEvaluatorTests {
    /// A venue where the agents `phone` and `agent` may report any subject (`venues.{id}.reporters`).
    static func evaluator(_ regions: [Region] = [hall, lobby], staleAfter: Double = 300) -> VenueEvaluator {
        var settings = VenueSettings(id: "museum", staleAfter: staleAfter, privacy: .open)
        settings.trust.reporters = ["phone", "agent"].map { try! ReporterRule.make(agent: $0, subjects: ["*"]).get() }
        return VenueEvaluator(settings: settings, regions: regions)
    }

    static func run(
        _ evaluator: inout VenueEvaluator, _ input: Inbound, agent: String? = "agent", time: Double = 0
    )
        -> [String]
    {
        switch evaluator.handle(input, agent: agent, receivedAt: at(time)) {
        case .success(let outputs): describe(outputs)
        case .failure(let error): ["rejected \(error.code)"]
        }
    }

    @Test("occupancy follows the state of every subject; a place region gives a gps place")
    func occupancy() {
        var venue = Self.evaluator()
        let steps: [(Inbound, String, [String])] = [
            (
                fix("v1", 0, inside), "v1",
                ["state hall v1 inside", "occupancy hall 1", "enter hall v1", "place v1 hall gps"]
            ),
            (
                fix("v2", 1, inside), "v2",
                ["state hall v2 inside", "occupancy hall 2", "enter hall v2", "place v2 hall gps"]
            ),
            (
                fix("v1", 2, outside), "v1",
                ["state hall v1 outside", "occupancy hall 1", "exit hall v1", "place v1 none "]
            ),
            (
                fix("v2", 3, outside), "v2",
                ["state hall v2 outside", "occupancy hall 0", "exit hall v2", "place v2 none "]
            ),
        ]
        for (input, agent, expected) in steps {
            #expect(Self.run(&venue, input, agent: agent) == expected)
        }
        #expect(venue.occupants(of: "hall").isEmpty)
    }

    @Test("a bad fix is rejected with the engine's reason code")
    func rejection() {
        var venue = Self.evaluator()
        let result = Self.run(&venue, .fix(Fix(subject: "v1", t: at(0), position: GeoPoint(lon: 2, lat: 95))))
        #expect(result == ["rejected latitudeOutOfRange"])
    }

    @Test("OwnTracks subjects get OwnTracks-shaped transitions for the waypoint regions")
    func ownTracks() throws {
        let waypoint = region(
            #"{"type":"Feature","id":"owntracks-w1","properties":{"name":"Office","radius":50,"owntracks":{"user":"jane","device":"phone","rid":"w1","tst":1699999000}},"geometry":{"type":"Point","coordinates":[2.336,48.86]}}"#
        )
        var venue = Self.evaluator([waypoint])
        let output = venue.handle(
            fix("owntracks:jane:phone", 0, inside), agent: "owntracks:jane:phone", receivedAt: at(0))
        let outputs = try output.get()
        guard case .ownTracksTransition(let user, let device, let payload)? = outputs.last else {
            Issue.record("no OwnTracks transition in \(describe(outputs))")
            return
        }
        #expect(user == "jane")
        #expect(device == "phone")
        #expect(payload["_type"] == "transition")
        #expect(payload["event"] == "enter")
        #expect(payload["rid"] == "w1")
        #expect(payload["desc"] == "Office")
        #expect(payload["t"] == "c")
        #expect(payload["wtst"] == 1_699_999_000)
        #expect(payload["tst"] == 1_700_000_000)
        let leave = describe(
            try venue.handle(fix("owntracks:jane:phone", 5, outside), agent: nil, receivedAt: at(5)).get())
        #expect(leave.last == "owntracks jane/phone leave")
    }

    /// One row of the last-will table: inputs with the agent that sends them and their time,
    /// then what a tick at `tick` gives.
    struct WillCase: CustomStringConvertible, Sendable {
        var description: String
        var steps: [(Inbound, String, Double)]
        /// What the last step gives.
        var last: [String]
        var tick: Double
        var ticked: [String]
    }

    static let willCases: [WillCase] = [
        WillCase(
            description: "the will acts at once: unknown (agentOffline), occupancy 0, no exit; staleAfter adds nothing",
            steps: [
                (fix("v1", 0, inside), "phone", 0),
                (.agentStatus(AgentStatus(agent: "phone", online: false)), "phone", 1),
            ],
            last: ["state hall v1 unknown agentOffline", "occupancy hall 0"], tick: 11, ticked: []),
        WillCase(
            description: "a subject another agent still observes stays as it is",
            steps: [
                (fix("v1", 0, inside), "phone", 0), (fix("v1", 0.5, inside), "agent", 0.5),
                (.agentStatus(AgentStatus(agent: "phone", online: false)), "phone", 1),
            ],
            last: [], tick: 5, ticked: []),
        WillCase(
            description: "back online and seen inside again: the same stay, no second enter",
            steps: [
                (fix("v1", 0, inside), "phone", 0),
                (.agentStatus(AgentStatus(agent: "phone", online: false)), "phone", 1),
                (.agentStatus(AgentStatus(agent: "phone", online: true)), "phone", 2),
                (fix("v1", 3, inside), "phone", 3),
            ],
            last: ["state hall v1 inside", "occupancy hall 1"], tick: 4, ticked: []),
        WillCase(
            description: "OwnTracks lwt: the device's subject goes unknown at once; its next location is news",
            steps: [
                (fix("owntracks:jane:phone", 0, inside), "owntracks:jane:phone", 0),
                (
                    .agentStatus(AgentStatus(agent: "owntracks:jane:phone", online: false)), "owntracks:jane:phone",
                    1
                ),
            ],
            last: ["state hall owntracks:jane:phone unknown agentOffline", "occupancy hall 0"], tick: 400,
            ticked: []),
        WillCase(
            description: "a repeated will changes nothing",
            steps: [
                (fix("v1", 0, inside), "phone", 0),
                (.agentStatus(AgentStatus(agent: "phone", online: false)), "phone", 1),
                (.agentStatus(AgentStatus(agent: "phone", online: false)), "phone", 2),
            ],
            last: [], tick: 3, ticked: []),
    ]

    @Test(
        "an agent's last will: its subjects go unknown at once with reason agentOffline, never exit (issue 19)",
        arguments: willCases)
    func lastWill(_ row: WillCase) {
        var venue = Self.evaluator(staleAfter: 10)
        var last: [String] = []
        for (input, agent, time) in row.steps { last = Self.run(&venue, input, agent: agent, time: time) }
        #expect(last.filter { !$0.hasPrefix("owntracks ") && !$0.hasPrefix("place ") } == row.last)
        #expect(
            describe(venue.tick(now: at(row.tick))).filter { !$0.hasPrefix("state hall v1 unknown stale") }
                == row.ticked)
    }

    @Test(
        "ESPresense: a room place expires after staleAfter on the clock, or at once with its gateways' wills (issue 19)"
    )
    func roomPlacesExpire() {
        var venue = Self.evaluator(staleAfter: 10)
        let seen = TagReport(
            gateway: "office", t: at(0),
            sightings: [TagSighting(subject: "espresense:watch", identity: nil, rssi: -60, tx1m: -59)])
        #expect(Self.run(&venue, .tags(seen), agent: "office") == ["place espresense:watch office beacon"])
        #expect(describe(venue.tick(now: at(9))).isEmpty)
        #expect(describe(venue.tick(now: at(10))) == ["place espresense:watch none "])
        var again = Self.evaluator(staleAfter: 10)
        _ = Self.run(&again, .tags(seen), agent: "office")
        #expect(
            Self.run(&again, .agentStatus(AgentStatus(agent: "office", online: false)), agent: "office", time: 1) == [
                "place espresense:watch none "
            ])
    }

    struct CapabilityCase: CustomStringConvertible, Sendable {
        var description: String
        /// The agent's announced caps (nil: no status).
        var caps: [String]?
        var scan: [String]
        var tick: [String]
        var fix: [String]
    }

    static let capabilityCases: [CapabilityCase] = [
        CapabilityCase(
            description: "gps only: a BLE scan is refused (no enter, ranging or place); fixes are used", caps: ["gps"],
            scan: ["rejected capability"], tick: [],
            fix: ["state hall phone inside", "occupancy hall 1", "enter hall phone", "place phone hall gps"]),
        CapabilityCase(
            description: "ble-scan without ranging: monitoring, no ranging and no beacon place; fixes refused",
            caps: ["ble-scan"], scan: ["state lobby phone inside", "occupancy lobby 1", "enter lobby phone"], tick: [],
            fix: ["rejected capability"]),
        CapabilityCase(
            description: "all three", caps: ["gps", "ble-scan", "ranging"],
            scan: ["state lobby phone inside", "occupancy lobby 1", "enter lobby phone"],
            tick: ["ranging lobby phone 1", "place phone lobby beacon"],
            fix: ["state hall phone inside", "occupancy hall 1", "enter hall phone"]),
        CapabilityCase(
            description: "no status: nothing is limited", caps: nil,
            scan: ["state lobby phone inside", "occupancy lobby 1", "enter lobby phone"],
            tick: ["ranging lobby phone 1", "place phone lobby beacon"],
            fix: ["state hall phone inside", "occupancy hall 1", "enter hall phone"]),
    ]

    @Test(
        "capabilities: an agent gets from its observations only what its caps announce (issue 19)",
        arguments: capabilityCases)
    func capabilities(_ row: CapabilityCase) {
        var venue = Self.evaluator()
        if let caps = row.caps {
            #expect(
                Self.run(
                    &venue, .agentStatus(AgentStatus(agent: "phone", online: true, capabilities: caps)), agent: "phone")
                    == [])
        }
        let uuid = BeaconPrefix(uuid: "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6")!
        let report = BeaconReport(
            agent: "phone", t: at(0),
            sightings: [BeaconSighting(identity: .iBeacon(uuid: uuid, major: 1, minor: 7), rssi: -60, tx1m: -59)])
        #expect(Self.run(&venue, .beacons(report), agent: "phone") == row.scan)
        #expect(describe(venue.tick(now: at(0.5))) == row.tick)
        #expect(Self.run(&venue, fix("phone", 1, inside), agent: "phone", time: 1) == row.fix)
    }

    @Test("capabilities: a later status without caps lifts the limit")
    func capabilitiesLifted() {
        var venue = Self.evaluator()
        _ = Self.run(
            &venue, .agentStatus(AgentStatus(agent: "phone", online: true, capabilities: ["ble-scan"])), agent: "phone")
        #expect(Self.run(&venue, fix("phone", 0, inside), agent: "phone") == ["rejected capability"])
        _ = Self.run(&venue, .agentStatus(AgentStatus(agent: "phone", online: true)), agent: "phone", time: 1)
        #expect(Self.run(&venue, fix("phone", 1, inside), agent: "phone", time: 1).first == "state hall phone inside")
    }

    @Test(
        "a subject with no authorization record: its first dropped observation is told (diagnostics, log), later ones counted (issue 19)"
    )
    func unrecordedSubject() {
        var settings = VenueSettings(id: "museum")
        settings.trust.reporters = [try! ReporterRule.make(agent: "phone", subjects: ["*"]).get()]
        var venue = VenueEvaluator(settings: settings, regions: [hall])
        #expect(
            Self.run(&venue, fix("v9", 0, inside), agent: "phone") == [
                "dropped v9 authorizationNotDetermined", "unrecorded v9",
            ])
        #expect(
            Self.run(&venue, fix("v9", 1, inside), agent: "phone", time: 1) == ["dropped v9 authorizationNotDetermined"]
        )
        let outputs = try! venue.handle(fix("v8", 2, inside), agent: "phone", receivedAt: at(2)).get()
        let diagnostics = outputs.compactMap { output -> JSONValue? in
            if case .diagnostics("v8", let value) = output { return value }
            return nil
        }
        #expect(diagnostics.first?["authorizationRecordMissing"] == true)
    }

    @Test("a subject not heard from goes unknown with reason stale when its agent is online")
    func stale() {
        var venue = Self.evaluator(staleAfter: 10)
        _ = Self.run(&venue, fix("v1", 0, inside), agent: "phone")
        #expect(describe(venue.tick(now: at(11))) == ["state hall v1 unknown stale", "occupancy hall 0"])
    }

    @Test("scanner mode: enter, ranging on ticks at most once a second, the beacon's region as place")
    func beacons() {
        var venue = Self.evaluator()
        let uuid = BeaconPrefix(uuid: "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6")!
        let report = BeaconReport(
            agent: "phone", t: at(0),
            sightings: [BeaconSighting(identity: .iBeacon(uuid: uuid, major: 1, minor: 7), rssi: -60, tx1m: -59)])
        #expect(
            Self.run(&venue, .beacons(report)) == [
                "state lobby phone inside", "occupancy lobby 1", "enter lobby phone",
            ])
        #expect(describe(venue.tick(now: at(0.5))) == ["ranging lobby phone 1", "place phone lobby beacon"])
        #expect(describe(venue.tick(now: at(1))).isEmpty)
        // A second later the beacon has no new sample (proximity unknown): the place stays.
        #expect(describe(venue.tick(now: at(2))) == ["ranging lobby phone 1"])
        #expect(venue.place(of: "phone")?.place == "lobby")
    }

    /// (what the scanner does after its first scan, ranging reports in the next eight ticks a second apart)
    static let rangingEndCases: [(String, Int)] = [
        ("scans on every second", 8), ("falls silent", 4), ("goes offline", 0),
    ]

    @Test(
        "ranging after the first scan: every second while scanning, for five intervals once silent, none once offline (issue 19)",
        arguments: rangingEndCases)
    func rangingEnds(_ behaviour: String, _ reports: Int) {
        var venue = Self.evaluator()
        let uuid = BeaconPrefix(uuid: "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6")!
        func scan(_ t: Double) -> Inbound {
            .beacons(
                BeaconReport(
                    agent: "phone", t: at(t),
                    sightings: [
                        BeaconSighting(identity: .iBeacon(uuid: uuid, major: 1, minor: 7), rssi: -60, tx1m: -59)
                    ]
                ))
        }
        _ = Self.run(&venue, scan(0), agent: "phone")
        #expect(describe(venue.tick(now: at(0.5))).first == "ranging lobby phone 1")
        if behaviour == "goes offline" {
            #expect(
                Self.run(&venue, .agentStatus(AgentStatus(agent: "phone", online: false)), agent: "phone", time: 1)
                    == ["state lobby phone unknown agentOffline", "occupancy lobby 0"])
        }
        var ranged = 0
        for second in 1...8 {
            let t = Double(second) + 0.5
            if behaviour == "scans on every second" {
                _ = Self.run(&venue, scan(t - 0.4), agent: "phone", time: t - 0.4)
            }
            ranged += describe(venue.tick(now: at(t))).filter { $0.hasPrefix("ranging lobby phone") }.count
        }
        #expect(ranged == reports)
    }

    @Test("regions: a removed region is unmonitored with occupancy 0; a reload adds, changes and removes")
    func regions() {
        var venue = Self.evaluator([hall])
        _ = Self.run(&venue, fix("v1", 0, inside))
        #expect(
            describe(venue.remove(regionID: "hall", at: at(1)))
                == ["state hall v1 unmonitored regionRemoved", "occupancy hall 0", "place v1 none "])
        #expect(venue.state(subject: "v1", region: "hall") == .unmonitored)
        var reloaded = Self.evaluator([hall])
        #expect(
            describe(reloaded.reload([lobby], previous: ["hall"], at: at(2))) == [
                "occupancy hall 0", "occupancy lobby 0",
            ])
        #expect(reloaded.region("hall") == nil)
        #expect(reloaded.region("lobby") != nil)
    }

    static func hallOf(radius: Double) -> Region {
        region(
            #"{"type":"Feature","id":"hall","properties":{"radius":\#(radius),"place":true},"geometry":{"type":"Point","coordinates":[2.336,48.86]}}"#
        )
    }

    struct ShapeCase: CustomStringConvertible, Sendable {
        var description: String
        /// Metres north of the hall's centre of v1's last fix.
        var north: Double
        var radius: Double
        var expected: [String]
        /// Ticks past staleAfter first.
        var stale = false
    }

    static let shapeCases: [ShapeCase] = [
        ShapeCase(
            description: "shrunk away from a subject inside: exit and occupancy at once", north: 20, radius: 10,
            expected: ["state hall v1 outside", "occupancy hall 0", "exit hall v1", "place v1 none "]),
        ShapeCase(description: "shrunk, the subject still inside: nothing", north: 5, radius: 15, expected: []),
        ShapeCase(
            description: "grown over a subject outside: enter", north: 60, radius: 100,
            expected: ["state hall v1 inside", "occupancy hall 1", "enter hall v1", "place v1 hall gps"]),
        ShapeCase(description: "the same shape again: nothing", north: 20, radius: 30, expected: []),
        ShapeCase(
            description: "a stale subject stays unknown until its next fix", north: 20, radius: 10, expected: [],
            stale: true),
    ]

    @Test(
        "a changed region re-decides its subjects against their last fix (issue 19: occupancy after a shrink)",
        arguments: shapeCases)
    func regionChanged(_ row: ShapeCase) {
        var venue = Self.evaluator([Self.hallOf(radius: 30)], staleAfter: 100)
        let position = GeoPoint(lon: 2.336, lat: 48.86 + row.north / 111_320)
        _ = Self.run(&venue, fix("v1", 0, position), agent: "phone")
        if row.stale { _ = venue.tick(now: at(200)) }
        let changed = venue.upsert(Self.hallOf(radius: row.radius), at: at(300))
        #expect(describe(changed) == row.expected)
        if let exit = changed.first(where: { if case .event(let e) = $0 { e.kind == .exit } else { false } }),
            case .event(let event) = exit
        {
            #expect(event.source == "regionChanged")
            #expect(event.t == at(300))
        }
        #expect(venue.occupants(of: "hall").count == (venue.state(subject: "v1", region: "hall") == .inside ? 1 : 0))
    }

    @Test(
        "erase: the snapshot keeps nothing naming the subject (no id, no transition counts); a returning subject's ids are new (issue 19)"
    )
    func eraseLeavesNothing() throws {
        var venue = Self.evaluator()
        let uuid = BeaconPrefix(uuid: "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6")!
        func enterID(_ outputs: [EvaluatorOutput]) -> (seq: Int, id: String)? {
            for case .event(let event) in outputs where event.kind == .enter { return (event.seq, event.id) }
            return nil
        }
        let first = try venue.handle(fix("visitor-77", 0, inside), agent: "phone", receivedAt: at(0)).get()
        _ = venue.handle(fix("visitor-77", 1, outside), agent: "phone", receivedAt: at(1))
        let scan = BeaconReport(
            agent: "visitor-77", t: at(2),
            sightings: [BeaconSighting(identity: .iBeacon(uuid: uuid, major: 1, minor: 7), rssi: -60, tx1m: -59)])
        _ = venue.handle(.beacons(scan), agent: "visitor-77", receivedAt: at(2))
        _ = venue.handle(
            .agentStatus(AgentStatus(agent: "visitor-77", online: true, capabilities: ["ble-scan"])),
            agent: "visitor-77",
            receivedAt: at(2))
        _ = venue.remove(regionID: "hall", at: at(3))  // retires the seq of (visitor-77, hall)
        _ = venue.upsert(hall, at: at(4))
        let before = String(decoding: try VenueEvaluator.snapshotEncoder().encode(venue.snapshot), as: UTF8.self)
        #expect(before.contains("visitor-77"))
        _ = venue.erase("visitor-77", at: at(5))
        let after = String(decoding: try VenueEvaluator.snapshotEncoder().encode(venue.snapshot), as: UTF8.self)
        #expect(!after.contains("visitor-77"), "the snapshot still names the erased subject")
        let again = try venue.handle(fix("visitor-77", 6, inside), agent: "phone", receivedAt: at(6)).get()
        let old = try #require(enterID(first))
        let new = try #require(enterID(again))
        #expect(new.seq == 1, "nothing was kept: it counts from 1 again")
        #expect(new.id != old.id, "an id from before the erasure is never reused")
    }

    struct PrecedenceCase: CustomStringConvertible, Sendable {
        var description: String
        var input: Inbound
        var expected: [String]
        /// The file no longer defines hall when the input comes.
        var hallLeftTheFile = false
    }

    static let precedenceCases: [PrecedenceCase] = [
        PrecedenceCase(
            description: "an MQTT delete of a file region is refused", input: .regionRemove(id: "hall"),
            expected: ["rejected region"]),
        PrecedenceCase(
            description: "an MQTT change of a file region is refused", input: .regionUpsert(hallOf(radius: 10)),
            expected: ["rejected region"]),
        PrecedenceCase(
            description: "the file's own definition over MQTT (perimeter up) changes nothing",
            input: .regionUpsert(hallOf(radius: 30)), expected: []),
        PrecedenceCase(
            description: "a region the file does not define is MQTT's", input: .regionUpsert(lobby),
            expected: ["occupancy lobby 0"]),
        PrecedenceCase(
            description: "once the file no longer defines it, MQTT may define it again",
            input: .regionUpsert(hallOf(radius: 10)), expected: ["occupancy hall 0"], hallLeftTheFile: true),
    ]

    @Test(
        "regions: the regions file wins for the ids it defines; MQTT manages the others (issue 19)",
        arguments: precedenceCases)
    func filePrecedence(_ row: PrecedenceCase) {
        var venue = Self.evaluator([])
        _ = venue.reload([Self.hallOf(radius: 30)], previous: [], at: at(0))
        if row.hallLeftTheFile { _ = venue.reload([], previous: ["hall"], at: at(1)) }
        #expect(Self.run(&venue, row.input, agent: nil, time: 2) == row.expected)
        if !row.hallLeftTheFile {
            #expect(venue.region("hall") == Self.hallOf(radius: 30), "the file's definition stands")
        }
    }

    @Test("preferences: the chosen default place answers when nothing live does")
    func defaultPlace() {
        var venue = Self.evaluator()
        let outputs = Self.run(
            &venue, .preferences(subject: "v9", SubjectPreferences(defaultPlace: "cafe")), agent: nil)
        #expect(outputs == ["place v9 cafe default"])
    }

    @Test(
        "occupancy is one retained count per region and change: a new region says 0; a deletion with three inside says 0 once"
    )
    func occupancyCoalesced() {
        var venue = Self.evaluator([hall])
        for (index, subject) in ["v1", "v2", "v3"].enumerated() {
            _ = Self.run(&venue, fix(subject, Double(index), inside), agent: subject, time: Double(index))
        }
        #expect(venue.occupants(of: "hall").count == 3)
        let removed = describe(venue.remove(regionID: "hall", at: at(5))).filter { $0.hasPrefix("occupancy") }
        #expect(removed == ["occupancy hall 0"], "one count, not 2, 1, 0")
        let added = describe(venue.upsert(lobby, at: at(6))).filter { $0.hasPrefix("occupancy") }
        #expect(added == ["occupancy lobby 0"], "a region nobody has entered is at 0")
        let again = describe(venue.upsert(lobby, at: at(7))).filter { $0.hasPrefix("occupancy") }
        #expect(again == [], "a changed region keeps its count; nothing new to say")
        #expect(describe(venue.upsert(hall, at: at(8))).filter { $0.hasPrefix("occupancy") } == ["occupancy hall 0"])
        for (index, subject) in ["v1", "v2", "v3"].enumerated() {
            _ = Self.run(&venue, fix(subject, 9 + Double(index), inside), agent: subject, time: 9 + Double(index))
        }
        // All three go stale on the same tick: one count.
        let stale = describe(venue.tick(now: at(1000))).filter { $0.hasPrefix("occupancy") }
        #expect(stale == ["occupancy hall 0"], "\(stale)")
    }

    /// Caffè Macs uses the default place exactly when location is not available: a denied
    /// subject keeps the place it chose itself (it says nothing about where the person is).
    @Test(
        "the default place is the subject's own choice: kept when the gate refuses the location",
        arguments: [
            // (steps: "denied" | "always" | "prefs" | "in" (a fix inside the hall, a place region)), expected places
            (["prefs", "denied"], ["place v9 cafe default"]),
            (["denied", "prefs"], ["place v9 cafe default"]),
            (
                ["always", "prefs", "in", "denied"],
                ["place v9 cafe default", "place v9 hall gps", "place v9 cafe default"]
            ),
            (["always", "in", "denied"], ["place v9 hall gps", "place v9 none "]),
        ] as [([String], [String])])
    func defaultPlaceWhenDenied(_ steps: [String], _ expected: [String]) {
        var settings = VenueSettings(
            id: "museum", privacy: PrivacySettings(defaultSessions: [ServiceSession(level: .always)]))
        settings.trust.reporters = []
        var venue = VenueEvaluator(settings: settings, regions: [hall, lobby])
        var places: [String] = []
        for (index, step) in steps.enumerated() {
            let input: Inbound =
                switch step {
                case "denied": .authorization(subject: "v9", ["status": "denied"])
                case "always": .authorization(subject: "v9", ["status": "always"])
                case "prefs": .preferences(subject: "v9", SubjectPreferences(defaultPlace: "cafe"))
                default: fix("v9", Double(index), inside)
                }
            let agent: String? = step == "in" ? "v9" : nil
            places += Self.run(&venue, input, agent: agent, time: Double(index)).filter { $0.hasPrefix("place ") }
        }
        #expect(places == expected)
    }
}

@Suite("Event ids across region lifecycles")
struct RegionLifecycleIDTests {
    /// Enter, remove, add again, enter: the second enter must not repeat the first one's id.
    @Test("a region removed and added again continues its sequence numbers (geofence and beacon)")
    func noReusedIDs() throws {
        var venue = VenueEvaluator(settings: VenueSettings(id: "museum", privacy: .open), regions: [hall, lobby])
        let uuid = BeaconPrefix(uuid: "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6")!
        func scan(_ time: Double) -> Inbound {
            .beacons(
                BeaconReport(
                    agent: "v1", t: at(time),
                    sightings: [BeaconSighting(identity: .iBeacon(uuid: uuid, major: 1, minor: 1), rssi: -60)]))
        }
        func transitions(_ result: Result<[EvaluatorOutput], InboundError>) throws -> [RegionEvent] {
            try result.get().compactMap {
                if case .event(let event) = $0, event.kind != .state { return event }
                return nil
            }
        }
        var first = try transitions(venue.handle(fix("v1", 0, inside), agent: "v1", receivedAt: at(0)))
        first += try transitions(venue.handle(scan(0), agent: "v1", receivedAt: at(0)))
        _ = venue.remove(regionID: "hall", at: at(1))
        _ = venue.remove(regionID: "lobby", at: at(1))
        _ = venue.upsert(hall, at: at(2))
        _ = venue.upsert(lobby, at: at(2))
        var second = try transitions(venue.handle(fix("v1", 3, inside), agent: "v1", receivedAt: at(3)))
        second += try transitions(venue.handle(scan(3), agent: "v1", receivedAt: at(3)))
        #expect(first.map(\.region) == ["hall", "lobby"])
        #expect(second.map(\.region) == ["hall", "lobby"])
        #expect(second.map(\.seq) == [2, 2])
        #expect(Set(first.map(\.id)).isDisjoint(with: second.map(\.id)))
    }
}

@Suite("Venue evaluator snapshots")
struct VenueSnapshotTests {
    /// A day in a small venue: fixes, scans, a gateway, ticks, a region change.
    static func inputs() -> [(Inbound?, String?, Double)] {
        let uuid = BeaconPrefix(uuid: "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6")!
        func scan(_ agent: String, _ minor: UInt16, _ rssi: Double, _ time: Double) -> Inbound {
            .beacons(
                BeaconReport(
                    agent: agent, t: at(time),
                    sightings: [BeaconSighting(identity: .iBeacon(uuid: uuid, major: 1, minor: minor), rssi: rssi)]))
        }
        var steps: [(Inbound?, String?, Double)] = []
        for step in 0..<40 {
            let time = Double(step) * 7
            let position = step % 3 == 0 ? outside : inside
            steps.append((fix("v\(step % 4)", time, position), "a\(step % 4)", time))
            steps.append((scan("p\(step % 3)", UInt16(step % 5), -55 - Double(step % 20), time), "p\(step % 3)", time))
            steps.append((nil, nil, time + 3))  // a tick
            if step == 1 { steps.append((scan("solo", 1, -60, time), "solo", time)) }
            if step == 5 {
                // A scan without the beacon once the exit timeout ran out: an exit (and ±∞ "never"
                // sentinels in the state, which the snapshot must carry).
                steps.append((.beacons(BeaconReport(agent: "solo", t: at(time + 2), sightings: [])), "solo", time + 2))
            }
            if step == 20 { steps.append((.regionRemove(id: "hall"), nil, time + 4)) }
            if step == 25 { steps.append((.regionUpsert(hall), nil, time + 4)) }
            if step == 30 {
                steps.append((.agentStatus(AgentStatus(agent: "a1", online: false)), "a1", time + 4))
            }
        }
        return steps
    }

    static func apply(_ venue: inout VenueEvaluator, _ step: (Inbound?, String?, Double)) -> [EvaluatorOutput] {
        guard let input = step.0 else { return venue.tick(now: at(step.2)) }
        return (try? venue.handle(input, agent: step.1, receivedAt: at(step.2)).get()) ?? []
    }

    @Test("a snapshot taken anywhere, encoded and restored, continues exactly like the original")
    func continuesExactly() throws {
        let steps = Self.inputs()
        for cut in [0, 17, 60, 95, steps.count] {
            var original = VenueEvaluatorTests.evaluator(staleAfter: 60)
            for step in steps.prefix(cut) { _ = Self.apply(&original, step) }
            let data = try VenueEvaluator.snapshotEncoder().encode(original.snapshot)
            let snapshot = try VenueEvaluator.snapshotDecoder().decode(VenueEvaluator.Snapshot.self, from: data)
            var restored = VenueEvaluator(settings: original.settings, restoring: snapshot)
            var expected: [EvaluatorOutput] = []
            var actual: [EvaluatorOutput] = []
            for step in steps.dropFirst(cut) {
                expected += Self.apply(&original, step)
                actual += Self.apply(&restored, step)
            }
            #expect(actual == expected, "cut at \(cut)")
            if cut < steps.count { #expect(!expected.isEmpty) }
        }
    }
}
