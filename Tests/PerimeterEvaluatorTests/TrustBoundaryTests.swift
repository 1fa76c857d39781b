import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// The trust rules of docs/security.md, each pinned over a real broker against the real
/// evaluator (issue 17: each test failed on the main it was written against).
@Suite("Trust boundaries")
struct TrustBoundaryTests {
    static let hall = Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30, extra: [("dwellAfter", 8)])
    static let inside: (lat: Double, lon: Double) = (48.86, 2.336)
    static let farAway: (lat: Double, lon: Double) = (48.9, 2.4)

    static func fix(_ t: Date, _ point: (lat: Double, lon: Double), subject: String? = nil) -> JSONValue {
        var object: JSONObject = [
            "t": .string(Timestamp.format(t)), "lat": .number(point.lat), "lon": .number(point.lon), "acc": 5,
        ]
        if let subject { object["subject"] = .string(subject) }
        return .object(object)
    }

    static func deadLetters(_ harness: EvaluatorHarness) -> [JSONObject] {
        harness.messages("deadletter").compactMap(\.json)
    }

    @Test(
        "futureTimeMovesNoClock: a fix dated 9999 (denied subject) and one 10 min ahead are refused; dwell fires on time"
    )
    func futureTimeMovesNoClock() async throws {
        let harness = try await EvaluatorHarness(regions: Venue.collection([Self.hall]))
        let start = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        let clock = ManualClock(start)
        try await harness.startInProcess(clock: clock)
        try await harness.publish(
            harness.topics.authorization(subject: "mallory"), ["status": "denied"], retain: true)
        try await harness.publish(harness.topics.gps(agent: "alice"), Self.fix(start, Self.inside))
        try await harness.waitFor("alice's enter") { $0.contains { $0.topic.hasSuffix("/enter/hall/alice") } }

        try await harness.publish(
            harness.topics.gps(agent: "mallory"), Self.fix(Timestamp.parse("9999-12-31T00:00:00Z")!, Self.inside))
        try await harness.publish(harness.topics.gps(agent: "bob"), Self.fix(start + 600, Self.farAway))
        try await harness.waitFor("two futureTime dead letters") { _ in
            Self.deadLetters(harness).filter { $0["code"] == "futureTime" }.count == 2
        }
        let refused = Self.deadLetters(harness).filter { $0["code"] == "futureTime" }
        #expect(refused.contains { $0["topic"]?.stringValue?.contains("/obs/bob/") == true && $0["payload"] != .null })
        // mallory is denied: the dead letter says what is wrong where, and nothing of the fix.
        let mallory = try #require(refused.first { $0["topic"]?.stringValue?.contains("/obs/mallory/") == true })
        #expect(mallory["payload"] == .null && mallory["redacted"] == .bool(true))
        #expect(mallory["reason"]?.stringValue?.contains("48.86") == false)

        // Time passes on the service's clock only: one second, then the dwell's eight.
        for _ in 0..<8 {
            try await harness.settle()
            clock.advance(by: 1)
        }
        try await harness.waitFor("alice's dwell") { $0.contains { $0.topic.hasSuffix("/dwell/hall/alice") } }
        let dwell = try #require(harness.messages("dwell").first?.json)
        #expect(dwell["t"]?.stringValue == Timestamp.format(start + 8))
        let unknown = harness.messages("state").compactMap(\.json).filter { $0["state"] == "unknown" }
        #expect(unknown.isEmpty, "nobody went stale: \(unknown)")
        await harness.stop()
    }

    @Test("agentSpeaksOnlyForItself: another subject in the payload is refused unless bound by venues.reporters")
    func agentSpeaksOnlyForItself() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Self.hall]), venue: ["reporters": ["phone-*": ["visitor-*"]]])
        try await harness.startEvaluator()
        try await harness.publish(
            harness.topics.gps(agent: "mallory"), Self.fix(Date(), Self.inside, subject: "victim-1"))
        try await harness.publish(
            harness.topics.gps(agent: "phone-7"), Self.fix(Date(), Self.inside, subject: "visitor-8"))
        // Published last: phone-7 reporting its own visitor-7 is the marker.
        try await harness.publish(
            harness.topics.gps(agent: "phone-7"), Self.fix(Date(), Self.inside, subject: "visitor-7"))
        try await harness.waitFor("visitor-7's enter") { $0.contains { $0.topic.hasSuffix("/enter/hall/visitor-7") } }
        let senders = Self.deadLetters(harness).filter { $0["code"] == "sender" }
        #expect(senders.count == 2, "\(Self.deadLetters(harness))")
        #expect(!harness.messages.contains { $0.topic.hasSuffix("/victim-1") || $0.topic.hasSuffix("/visitor-8") })
        await harness.stop()
    }

    @Test("sizeCheckedBeforeStorage: an oversized payload leaves a stub in the journal and a tooLarge dead letter")
    func sizeCheckedBeforeStorage() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Self.hall]), evaluator: ["maxPayloadBytes": 1024])
        try await harness.startEvaluator()
        // Over the 1 KiB limit, under what the evaluator announces to the broker as its
        // maximum packet (4 × the limit + 64 KiB; larger ones the broker never sends it).
        let big = String(repeating: "x", count: 20_000)
        try await harness.publish(harness.topics.gps(agent: "alice"), text: #"{"pad":"\#(big)"}"#)
        try await harness.publish(harness.topics.gps(agent: "alice"), Self.fix(Date(), Self.inside))
        try await harness.waitFor("alice's enter") { $0.contains { $0.topic.hasSuffix("/enter/hall/alice") } }
        let letter = try #require(Self.deadLetters(harness).first { $0["code"] == "tooLarge" })
        #expect(letter["payloadBytes"]?.intValue == 20_010)
        // The journal as it stands (before a snapshot prunes it): a stub, never the payload.
        let store = try EvaluatorStore(path: harness.directory.appendingPathComponent("evaluator.sqlite").path)
        let rows = try store.inbox(after: 0, limit: 100_000)
        #expect(rows.contains { $0.kind == .oversized && $0.payload == Array("20010".utf8) })
        #expect(rows.allSatisfy { $0.payload.count <= 1024 }, "\(rows.map(\.payload.count).max() ?? 0) bytes stored")
        await harness.stop()
    }

    /// (Mosquitto itself refuses control characters in topic names, so ids with them arrive in
    /// payloads; the topic-level check is a core test, for brokers that let them through.)
    @Test("controlCharactersInIDs: 'a\\u0000b' is refused in payloads; subject a keeps its state")
    func controlCharactersInIDs() async throws {
        let harness = try await EvaluatorHarness(regions: Venue.collection([Self.hall]))
        try await harness.startEvaluator()
        try await harness.publish(harness.topics.gps(agent: "a"), Self.fix(Date(), Self.inside))
        try await harness.waitFor("a's enter") { $0.contains { $0.topic.hasSuffix("/enter/hall/a") } }
        try await harness.publish(
            harness.topics.gps(agent: "a"), Self.fix(Date(), Self.farAway, subject: "a\u{0}b"))
        try await harness.publish(harness.topics.preferences(subject: "a"), ["defaultPlace": "hall\u{0}"])
        try await harness.publish(
            "perimeter/v1/test/sessions/app/s1", ["subjects": ["a\u{1}b"], "level": "always"], retain: true)
        try await harness.waitFor("three dead letters") { _ in Self.deadLetters(harness).count >= 3 }
        let codes = Self.deadLetters(harness).compactMap { $0["code"]?.stringValue }
        #expect(codes == ["schema", "schema", "schema"], "\(Self.deadLetters(harness))")
        #expect(Self.deadLetters(harness).contains { $0["reason"]?.stringValue?.contains("U+0000") == true })
        let picture = try await harness.retainedPicture()
        let state = try #require(picture["perimeter/v1/test/state/hall/a"])
        #expect(state.contains(#""state":"inside""#))
        #expect(!harness.messages("exit").contains { $0.topic.hasSuffix("/a") })
        await harness.stop()
    }

    @Test("deadLettersRespectPrivacy: a denied subject's misspelt fix shows no coordinates; an allowed one's does")
    func deadLettersRespectPrivacy() async throws {
        let harness = try await EvaluatorHarness(regions: Venue.collection([Self.hall]))
        try await harness.startEvaluator()
        try await harness.publish(harness.topics.authorization(subject: "dora"), ["status": "denied"], retain: true)
        let misspelt: JSONValue = ["t": .string(Timestamp.format(Date())), "lattitude": 48.8612, "lon": 2.3371]
        try await harness.publish(harness.topics.gps(agent: "dora"), misspelt)
        try await harness.publish(harness.topics.gps(agent: "eve"), misspelt)
        try await harness.waitFor("two dead letters") { _ in Self.deadLetters(harness).count >= 2 }
        let letters = Self.deadLetters(harness)
        let dora = try #require(letters.first { $0["topic"]?.stringValue?.contains("/obs/dora/") == true })
        let eve = try #require(letters.first { $0["topic"]?.stringValue?.contains("/obs/eve/") == true })
        #expect(!JSONValue.object(dora).serialized().contains("48.86"))
        #expect(!JSONValue.object(dora).serialized().contains("2.337"))
        #expect(JSONValue.object(eve).serialized().contains("48.8612"))
        await harness.stop()
    }

    @Test("brokerLossIsReported: messages the broker drops (a queue limit) make /healthz say degraded")
    func brokerLossIsReported() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Self.hall]), evaluator: ["http": "127.0.0.1:0"],
            brokerConfiguration: ["max_queued_messages 5", "sys_interval 1"])
        try await harness.startEvaluator()
        let port = try harness.metricsPort()
        #expect(try httpGet(port: port, path: "/healthz").body.contains(#""status":"ok""#))
        // No wait for the counter: whether the evaluator reads it retained at start (the broker is
        // young) or only when the drops below change it (Mosquitto lets it expire 60 s after a
        // change, and a loaded machine can start the evaluator later than that), the loss shows.
        // A parked session (subscribed, then gone) whose queue holds at most 5 messages.
        var parkedConfiguration = harness.broker.clientConfiguration("parked", cleanStart: false)
        parkedConfiguration.sessionExpiry = 3600
        let parked = try MQTTClient(parkedConfiguration)
        try await parked.connect(timeout: .seconds(5))
        _ = try await parked.subscribe("perimeter/v1/test/obs/#", qos: .atLeastOnce)
        await parked.disconnect()
        for index in 0..<30 {
            try await harness.publish(
                harness.topics.gps(agent: "walker-\(index)"), Self.fix(Date(), Self.farAway))
        }
        var health = try httpGet(port: port, path: "/healthz")
        _ = try await waitForCondition(timeout: .seconds(30), every: .milliseconds(100)) {
            health = try httpGet(port: port, path: "/healthz")
            return health.body.contains(#""status":"degraded""#)
        }
        #expect(health.status == 200)
        #expect(health.body.contains(#""status":"degraded""#), "\(health.body)")
        #expect(health.body.contains("messages dropped"))
        let metrics = try httpGet(port: port, path: "/metrics").body
        #expect(metrics.contains("perimeter_broker_dropped_since_start"))
        await harness.stop()
    }

    @Test("numberingGapsAreReported: a gap in an agent's numbers (n) is counted, logged and makes /healthz degraded")
    func numberingGapsAreReported() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Self.hall]), evaluator: ["http": "127.0.0.1:0"])
        try await harness.startEvaluator()
        let port = try harness.metricsPort()
        func send(_ agent: String, _ n: Int) async throws {
            guard case .object(var fix) = Self.fix(Date(), Self.farAway) else { return }
            fix["n"] = .number(Double(n))
            try await harness.publish(harness.topics.gps(agent: agent), .object(fix))
        }
        // In order, a redelivery, and an agent that numbers afresh: nothing missing.
        for n in [1, 2, 3, 3] { try await send("walker", n) }
        for n in [9, 1, 2] { try await send("runner", n) }
        try await harness.settle()
        #expect(try httpGet(port: port, path: "/healthz").body.contains(#""status":"ok""#))
        // 4, 5 and 6 never arrive.
        try await send("walker", 7)
        try await harness.settle()
        let health = try httpGet(port: port, path: "/healthz")
        #expect(health.status == 200)
        #expect(health.body.contains(#""status":"degraded""#), "\(health.body)")
        #expect(health.body.contains("3 messages missing from agents' numbering"), "\(health.body)")
        let metrics = try httpGet(port: port, path: "/metrics").body
        #expect(metrics.contains(#"perimeter_agent_messages_missing_total{venue="test"} 3"#), "\(metrics)")
        #expect(harness.evaluatorOutput.contains("messages from an agent never arrived"))
        #expect(harness.evaluatorOutput.contains("agent=walker"))
        await harness.stop()
    }

    /// A burst of `agents × each` numbered fixes (far from every region) in one batch, without
    /// waiting for each acknowledgement: then one more per agent once the burst is through, so
    /// that a loss at the end of an agent's burst is a gap too.
    static func burst(_ harness: EvaluatorHarness, port: Int, agents: Int, each: Int) async throws {
        func message(_ agent: Int, _ n: Int) -> MQTTMessage {
            guard case .object(var fix) = Self.fix(Date(), Self.farAway) else { fatalError("a fix is an object") }
            fix["n"] = .number(Double(n))
            return MQTTMessage(
                topic: harness.topics.gps(agent: "burst-\(agent)"),
                payload: Array(JSONValue.object(fix).serialized().utf8),
                qos: .atLeastOnce)
        }
        try await harness.publisher.publish(batch: (1...each).flatMap { n in (0..<agents).map { message($0, n) } })
        try await through(harness, "the burst")
        try await harness.publisher.publish(batch: (0..<agents).map { message($0, each + 1) })
        // And the final fixes: what the evaluator counts is complete once this is back.
        try await through(harness, "the final fixes")
    }

    /// Waits until a marker sent now is back as a dead letter, so that everything queued
    /// before it was processed. Under the stock limits the broker's queue may still be full and
    /// drop the marker, so a new one is sent until one comes back (a count that stood still for
    /// a second was taken for "through" once on a loaded CI machine, and the final fixes were
    /// dropped behind the burst).
    static func through(_ harness: EvaluatorHarness, _ what: String) async throws {
        try await waitUntil("\(what) through the evaluator", timeout: .seconds(180), every: .milliseconds(1)) {
            let marker = harness.topics.gps(agent: "burst-marker-\(UUID().uuidString.prefix(8))")
            try await harness.publisher.publish(marker, "marker", qos: .atLeastOnce)
            return
                (try? await harness.waitFor("the dead letter of \(marker)", timeout: .seconds(5)) { messages in
                    messages.contains {
                        $0.topic.hasSuffix("/deadletter/evaluator") && $0.json?["topic"]?.stringValue == marker
                    }
                }) != nil
        }
    }

    /// Markers the evaluator was given: each is not JSON, a rejected observation (code json)
    /// that no fix of the burst is, and is left out of the count.
    static func markersGiven(_ port: Int) throws -> Double {
        try httpGet(port: port, path: "/metrics").body.split(separator: "\n").filter {
            $0.hasPrefix("perimeter_inbound_rejected_total{") && $0.contains(#"code="json""#)
        }.compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +)
    }

    /// Observations the evaluator was given (accepted or refused) and those its agents'
    /// numbering says are missing, from /metrics.
    static func given(_ port: Int) throws -> Double {
        try metric(port, "perimeter_observations_total").reduce(0, +)
    }

    static func metric(_ port: Int, _ name: String) throws -> [Double] {
        try httpGet(port: port, path: "/metrics").body.split(separator: "\n").filter {
            $0.hasPrefix(name + "{") || $0.hasPrefix(name + " ")
        }.compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }
    }

    @Test(
        "burstIsAccountedFor: 5,000 numbered fixes at once: under the shipped broker limits none is lost; under Mosquitto's stock limits every loss is counted and /healthz says degraded",
        arguments: [true, false])
    func burstIsAccountedFor(shippedLimits: Bool) async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Self.hall]), evaluator: ["http": "127.0.0.1:0"],
            // Stock: Mosquitto's defaults (the issue's setting, where half the burst was lost).
            brokerConfiguration: shippedLimits ? [] : ["max_queued_messages 1000", "max_queued_bytes 0"])
        try await harness.startEvaluator()
        let port = try harness.metricsPort()
        let (agents, each) = (50, 100)
        try await Self.burst(harness, port: port, agents: agents, each: each)
        let total = Double(agents * (each + 1))
        // Every fix was processed (both markers came back): each is given, or counted missing by
        // the numbering, or counted lost by the journal. Metrics are counted before the marker's
        // dead letter is published, so this holds at once; the wait only covers HTTP.
        var (given, missing, lost) = (0.0, 0.0, 0.0)
        do {
            try await waitUntil(
                "every observation given or counted missing", timeout: .seconds(10), every: .milliseconds(200),
                context: { "given \(given), missing \(missing), lost by the journal \(lost) of \(total)" }
            ) {
                given = try Self.given(port) - Self.markersGiven(port)
                missing = try Self.metric(port, "perimeter_agent_messages_missing_total").reduce(0, +)
                lost = try Self.metric(port, "perimeter_journal_lost_total").reduce(0, +)
                return given + missing + lost >= total
            }
        } catch {
            // What the evaluator said that is not the gaps themselves (one line per gap).
            let said = harness.evaluatorOutput.split(separator: "\n").filter {
                !$0.contains("level=info") && !$0.contains("messages from an agent never arrived")
            }
            print("burst: the evaluator said:\n\(said.suffix(40).joined(separator: "\n"))")
            print("burst: /metrics:\n\((try? httpGet(port: port, path: "/metrics").body) ?? "")")
            throw error
        }
        #expect(given + missing + lost == total)
        #expect(lost == 0, "the journal lost \(lost)")
        let health = try httpGet(port: port, path: "/healthz").body
        if shippedLimits {
            #expect(missing == 0, "the shipped limits lost \(missing) of \(total)")
            #expect(health.contains(#""status":"ok""#), "\(health)")
        } else if missing > 0 {
            #expect(health.contains(#""status":"degraded""#), "\(health)")
            #expect(health.contains("messages missing from agents' numbering"), "\(health)")
        }
        print("burst (\(shippedLimits ? "shipped" : "stock") limits): \(Int(missing)) of \(Int(total)) missing")
        await harness.stop()
    }

    @Test(
        "intakeHeld: 5,000 fixes at once past maxJournalBacklog 1,000: reading stops and resumes, none is lost, the holds are counted"
    )
    func intakeHeld() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Self.hall]), evaluator: ["http": "127.0.0.1:0", "maxJournalBacklog": 1000])
        try await harness.startEvaluator()
        let port = try harness.metricsPort()
        let (agents, each) = (50, 100)
        try await Self.burst(harness, port: port, agents: agents, each: each)
        let given = try Self.given(port) - Self.markersGiven(port)
        let missing = try Self.metric(port, "perimeter_agent_messages_missing_total").reduce(0, +)
        let holds = try Self.metric(port, "perimeter_intake_holds_total").reduce(0, +)
        #expect(given == Double(agents * (each + 1)), "missing \(missing)")
        #expect(missing == 0)
        #expect(holds >= 1, "a backlog of 5,000 never reached 1,000?")
        await harness.stop()
    }

    @Test("journalRetention: a quiet venue's journal is pruned by a snapshot every snapshotInterval (manual clock)")
    func journalRetention() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Self.hall]), evaluator: ["snapshotInterval": 60])
        let clock = ManualClock(Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)))
        try await harness.startInProcess(clock: clock)
        for index in 0..<20 {
            try await harness.publish(harness.topics.gps(agent: "walker-\(index)"), Self.fix(clock.now, Self.farAway))
        }
        try await harness.settle()
        let store = try EvaluatorStore(path: harness.directory.appendingPathComponent("evaluator.sqlite").path)
        let before = try store.journalLength()
        #expect(before >= 20)
        clock.advance(by: 30)
        try await harness.settle()
        clock.advance(by: 31)
        let pruned = try await waitForValue(timeout: .seconds(30), every: .milliseconds(20)) {
            let now = try store.journalLength()
            return now < 5 ? now : nil
        }
        let left = try store.journalLength()
        #expect(pruned != nil, "the journal still holds \(left) rows (had \(before))")
        await harness.stop()
    }

    @Test("waypointsStayWithTheirUser: an OwnTracks waypoint is a region for its user only, visible and deletable")
    func waypointsStayWithTheirUser() async throws {
        let harness = try await EvaluatorHarness(regions: Venue.collection([]), adapters: true)
        try await harness.startEvaluator()
        let tst = Date().timeIntervalSince1970.rounded(.down)
        let waypoint: JSONValue = [
            "_type": "waypoint", "desc": "Home", "lat": 48.8584, "lon": 2.2945, "rad": 50, "tst": .number(tst - 100),
            "rid": "home-1",
        ]
        try await harness.publish("owntracks/jane/phone", waypoint)
        let location: JSONValue = ["_type": "location", "acc": 10, "lat": 48.8585, "lon": 2.2946, "tst": .number(tst)]
        try await harness.publish("owntracks/mallory/phone", location)
        try await harness.publish("owntracks/jane/tablet", location)
        try await harness.waitFor("jane's tablet enters") {
            $0.contains { $0.topic.hasSuffix("/enter/owntracks-home-1/owntracks:jane:tablet") }
        }
        #expect(!harness.messages.contains { $0.topic.contains("owntracks:mallory") && $0.topic.contains("/enter/") })
        let published = try #require(
            harness.messages.last { $0.topic == "perimeter/v1/test/waypoints/owntracks-home-1" }?.json)
        #expect(published["properties"]?["subjectPrefix"] == "owntracks:jane:")

        try await harness.publish(harness.topics.region("owntracks-home-1"), text: "", retain: true)
        try await harness.waitFor("the waypoint cleared") {
            $0.contains { $0.topic == "perimeter/v1/test/waypoints/owntracks-home-1" && $0.payload.isEmpty }
        }
        await harness.stop()
    }
}

/// How the evaluator reads Mosquitto's dropped counter: retained at subscribe time it is the
/// baseline; a first value that arrives live is a change made while it listened.
@Suite("Broker dropped counter")
struct BrokerDroppedCounterTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        /// (payload, arrived retained)
        let values: [(String, Bool)]
        let sinceStart: Double?
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "retained 0, then 25: 25 lost", values: [("0", true), ("25", false)], sinceStart: 25),
        Case(name: "retained 7 (older loss), unchanged: none lost", values: [("7", true)], sinceStart: 0),
        Case(name: "retained 7, then 9: 2 lost", values: [("7", true), ("9", false)], sinceStart: 2),
        Case(name: "expired, first seen live at 40: at least 1 lost", values: [("40", false)], sinceStart: 1),
        Case(name: "first live 40, then 45: 6 lost", values: [("40", false), ("45", false)], sinceStart: 6),
        Case(name: "live 0 (a broker started after us): none lost", values: [("0", false)], sinceStart: 0),
        Case(name: "broker restarted: its 0 is the new baseline", values: [("30", true), ("0", true)], sinceStart: 0),
        Case(name: "restarted, then 3: 3 lost", values: [("30", true), ("0", true), ("3", false)], sinceStart: 3),
        Case(name: "not a number: ignored", values: [("lots", true)], sinceStart: nil),
        Case(name: "negative: ignored", values: [("-4", true)], sinceStart: nil),
    ]

    @Test("baseline and loss, table", arguments: cases)
    func counter(_ test: Case) {
        let metrics = Metrics()
        EvaluatorService.declareBrokerLoss(in: metrics)
        for (payload, retained) in test.values {
            EvaluatorService.noteBrokerDropped(Array(payload.utf8), retained: retained, metrics: metrics)
        }
        #expect(metrics.value("perimeter_broker_dropped_since_start") == test.sinceStart)
    }
}
