import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// The privacy gate end to end: a real mosquitto, a real evaluator process.
@Suite("Privacy gate service", .serialized)
struct PrivacyServiceTests {
    static let hall = Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30)
    static let cafe = Venue.circle("cafe", lat: 48.861, lon: 2.336, radius: 12)
    static let city = Venue.circle("city", lat: 48.86, lon: 2.336, radius: 20000)

    static func privacy(sessions: JSONValue = [["subjects": "*", "level": "always"]]) -> JSONValue {
        ["inUseGrace": 1, "heldMaxAge": 2, "defaultSessions": sessions]
    }

    /// - Parameter clock: run the evaluator in this process on this manual clock (timing rules
    ///   then move with ``pass(_:_:)``, not with real time); nil: a real process on real time.
    static func start(
        sessions: JSONValue = [["subjects": "*", "level": "always"]], clock: ManualClock? = nil
    ) async throws -> EvaluatorHarness {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([hall, cafe, city]), venue: ["privacy": privacy(sessions: sessions)])
        if let clock { try await harness.startInProcess(clock: clock) } else { try await harness.startEvaluator() }
        return harness
    }

    static func now(_ harness: EvaluatorHarness) -> Double {
        (harness.clock?.now ?? Date()).timeIntervalSince1970
    }

    /// Lets `seconds` pass on the manual clock, once the evaluator has taken every input so far.
    static func pass(_ harness: EvaluatorHarness, _ seconds: Double) async throws {
        let clock = try #require(harness.clock, "timing rules run on a manual clock (start(clock:))")
        try await harness.settle()
        clock.advance(by: seconds)
    }

    static func authorize(_ harness: EvaluatorHarness, _ subject: String, _ record: JSONValue) async throws {
        try await harness.publish(harness.topics.authorization(subject: subject), record, retain: true)
    }

    /// Usage is dated when the evaluator receives it; the next fix's own time must come after
    /// that: a moment on the manual clock, or (real time) once the evaluator has processed it.
    static func use(_ harness: EvaluatorHarness, _ subject: String, _ inUse: Bool) async throws {
        try await harness.publish(
            "perimeter/v1/test/subjects/\(subject)/usage", ["inUse": .bool(inUse), "background": false])
        if harness.clock != nil {
            try await pass(harness, 0.15)
        } else {
            try await harness.settle()
        }
    }

    static func at(_ harness: EvaluatorHarness, _ subject: String, lat: Double, lon: Double = 2.336) async throws {
        try await harness.publish(
            harness.topics.gps(agent: subject),
            ["t": .number(now(harness)), "lat": .number(lat), "lon": .number(lon), "acc": 3])
    }

    static func events(_ harness: EvaluatorHarness, _ subject: String) -> [String] {
        harness.transitions.filter { $0["subject"]?.stringValue == subject }.map { payload in
            let held = payload["held"] == true ? " held" : ""
            return "\(payload["event"]?.stringValue ?? "?") \(payload["region"]?.stringValue ?? "?")\(held)"
        }
    }

    static func diagnostics(_ harness: EvaluatorHarness, _ subject: String) -> JSONObject? {
        harness.messages("diagnostics").last { $0.topic.hasSuffix("/\(subject)") }?.json
    }

    @Test(
        "provisional always: held, superseded, expired; the prompt once; an upgrade delivers held:true; a downgrade discards"
    )
    func provisionalAlways() async throws {
        let harness = try await Self.start(clock: ManualClock(Date()))
        try await Self.authorize(harness, "ann", ["status": "provisionalAlways"])
        try await Self.use(harness, "ann", true)
        try await Self.at(harness, "ann", lat: 48.86)
        try await harness.waitFor("enter hall and city, in use") { _ in Self.events(harness, "ann").count == 2 }
        try await Self.use(harness, "ann", false)
        try await Self.pass(harness, 1.5)  // past the 1 s grace
        try await Self.at(harness, "ann", lat: 48.86, lon: 2.40)  // exit hall: held
        try await harness.waitFor("held: 1") { _ in Self.diagnostics(harness, "ann")?["heldEvents"] == 1 }
        try await Self.pass(harness, 3)  // the held exit expires (heldMaxAge 2 s) at the next tick
        try await harness.waitFor("expired: 0 held") { _ in Self.diagnostics(harness, "ann")?["heldEvents"] == 0 }
        try await Self.at(harness, "ann", lat: 48.86)  // enter hall: held
        try await Self.at(harness, "ann", lat: 48.861)  // exit hall supersedes it; enter cafe: held
        try await harness.waitFor("held: 2") { _ in Self.diagnostics(harness, "ann")?["heldEvents"] == 2 }
        #expect(Set(Self.events(harness, "ann")) == ["enter hall", "enter city"], "nothing delivered while held")
        // In use with held events: the prompt, once ever.
        try await Self.use(harness, "ann", true)
        try await Self.use(harness, "ann", false)
        try await Self.use(harness, "ann", true)
        try await harness.waitFor("the prompt") { messages in messages.contains { $0.topic.hasSuffix("/ann/prompt") } }
        try await harness.settle()
        #expect(harness.messages.filter { $0.topic.hasSuffix("/ann/prompt") }.count == 1)
        #expect(harness.messages.first { $0.topic.hasSuffix("/ann/prompt") }?.json?["request"] == "always")
        // The upgrade delivers what is held, marked, in order.
        try await Self.authorize(harness, "ann", ["status": "always"])
        try await harness.waitFor("held events delivered") { _ in Self.events(harness, "ann").count == 4 }
        let delivered = Self.events(harness, "ann")
        #expect(Set(delivered.prefix(2)) == ["enter hall", "enter city"])
        #expect(Set(delivered.dropFirst(2)) == ["exit hall held", "enter cafe held"])

        // A downgrade discards.
        try await Self.authorize(harness, "bob", ["status": "provisionalAlways"])
        try await Self.at(harness, "bob", lat: 48.86)
        try await harness.waitFor("bob held (hall, city)") { _ in Self.diagnostics(harness, "bob")?["heldEvents"] == 2 }
        try await Self.authorize(harness, "bob", ["status": "whenInUse"])
        try await harness.waitFor("bob discarded") { _ in Self.diagnostics(harness, "bob")?["heldEvents"] == 0 }
        try await harness.settle()
        #expect(Self.events(harness, "bob").isEmpty)
        #expect(Self.diagnostics(harness, "bob")?["insufficientlyInUse"] == true)
        await harness.stop()
    }

    /// The retained `state` topic of a subject for a region, as the broker holds it now.
    static func retainedState(_ harness: EvaluatorHarness, _ region: String, _ subject: String) async throws -> String?
    {
        let picture = try await harness.retainedPicture()
        let payload = picture[harness.topics.state(region: region, subject: subject)]
        return payload.flatMap { try? JSONParser.parse($0)["state"]?.stringValue }
    }

    @Test(
        "the retained state follows access: after a provisional → always upgrade, and once a whenInUse subject is in use again (issue 19)"
    )
    func retainedStateFollowsAccess() async throws {
        let harness = try await Self.start(clock: ManualClock(Date()))
        try await Self.authorize(harness, "ann", ["status": "provisionalAlways"])
        try await Self.at(harness, "ann", lat: 48.86)  // enter hall and city: held, their states withheld
        try await harness.waitFor("ann held (hall, city)") { _ in Self.diagnostics(harness, "ann")?["heldEvents"] == 2 }
        #expect(try await Self.retainedState(harness, "hall", "ann") == nil)
        try await Self.authorize(harness, "ann", ["status": "always"])
        try await harness.waitFor("the held enters") { _ in Self.events(harness, "ann").count == 2 }
        try await harness.settle()
        #expect(try await Self.retainedState(harness, "hall", "ann") == "inside", "the state the held enter implies")

        try await Self.authorize(harness, "bob", ["status": "whenInUse"])
        try await Self.use(harness, "bob", true)
        try await Self.at(harness, "bob", lat: 48.86)
        try await harness.waitFor("bob enters, in use") { _ in Self.events(harness, "bob").count == 2 }
        try await Self.use(harness, "bob", false)
        try await Self.pass(harness, 1.5)  // past the 1 s grace
        try await Self.at(harness, "bob", lat: 48.86, lon: 2.40)  // exit hall: withheld
        try await harness.settle()
        #expect(try await Self.retainedState(harness, "hall", "bob") == "inside", "the last state delivered")
        try await Self.use(harness, "bob", true)
        try await harness.settle()
        #expect(try await Self.retainedState(harness, "hall", "bob") == "outside", "resynchronized once in use")
        #expect(!Self.events(harness, "bob").contains("exit hall"), "no exit is made up")
        await harness.stop()
    }

    @Test("the in-use grace window; allow once reverting; undetermined subjects dropped at ingest")
    func inUseAndAllowOnce() async throws {
        let harness = try await Self.start(clock: ManualClock(Date()))
        try await Self.authorize(harness, "dana", ["status": "whenInUse"])
        try await Self.use(harness, "dana", true)
        try await Self.use(harness, "dana", false)
        try await Self.at(harness, "dana", lat: 48.86)  // within the 1 s grace: delivered
        try await harness.waitFor("enter within the grace") { _ in Self.events(harness, "dana").count == 2 }
        try await Self.pass(harness, 1.5)
        try await Self.at(harness, "dana", lat: 48.86, lon: 2.40)  // after it: not delivered, not held
        try await harness.waitFor("insufficiently in use") { _ in
            Self.diagnostics(harness, "dana")?["insufficientlyInUse"] == true
        }
        try await harness.settle()
        #expect(Set(Self.events(harness, "dana")) == ["enter hall", "enter city"])
        #expect(Self.diagnostics(harness, "dana")?["heldEvents"] == 0)

        // Allow once: in use, then not, then past the grace: the record reverts, republished.
        try await Self.authorize(harness, "carl", ["status": "whenInUse", "temporary": true])
        try await Self.use(harness, "carl", true)
        try await Self.at(harness, "carl", lat: 48.86)
        try await harness.waitFor("carl enters") { _ in Self.events(harness, "carl").count == 2 }
        try await Self.use(harness, "carl", false)
        try await Self.pass(harness, 1.5)  // past the grace: the next tick reverts the record
        try await harness.waitFor("carl's record reverts") { messages in
            messages.contains {
                $0.topic == harness.topics.authorization(subject: "carl") && $0.json?["status"] == "notDetermined"
            }
        }
        try await harness.waitFor("carl unmonitored") { messages in
            messages.contains { $0.topic.hasSuffix("/state/hall/carl") && $0.json?["state"] == "unmonitored" }
        }
        // Now undetermined: observations are dropped at ingest, and counted.
        try await Self.at(harness, "carl", lat: 48.86, lon: 2.40)
        try await Self.pass(harness, 1.1)  // the next stats message (statsInterval 1 s)
        try await harness.waitFor("the drop counted") { messages in
            messages.contains {
                $0.topic.hasSuffix("/stats") && $0.json?["privacyDrops"]?["authorizationNotDetermined"] != nil
            }
        }
        #expect(Set(Self.events(harness, "carl")) == ["enter hall", "enter city"])
        await harness.stop()
    }

    @Test("reduced accuracy: fixes snapped, small regions give accuracyLimited; sessions layer")
    func reducedAccuracyAndSessions() async throws {
        let harness = try await Self.start(sessions: [], clock: ManualClock(Date()))
        let root = "perimeter/v1/test/sessions"
        try await harness.publish("\(root)/guide/basic", ["subjects": "*", "level": "whenInUse"], retain: true)
        try await harness.publish(
            "\(root)/nav/1", ["subjects": ["eve", "fay"], "level": "always", "fullAccuracyPurpose": "Navigation"],
            retain: true)
        try await Self.authorize(harness, "eve", ["status": "always", "accuracy": "reduced"])
        try await Self.at(harness, "eve", lat: 48.861)  // in the 12 m cafe and the 20 km city
        try await harness.waitFor("eve enters the city") { _ in Self.events(harness, "eve") == ["enter city"] }
        let enter = try #require(harness.transitions.first { $0["subject"] == "eve" })
        #expect(enter["fix"]?["acc"] == 5000, "the fix was coarsened")
        #expect(enter["fix"]?["lat"]?.doubleValue != 48.861)
        let eve = Self.diagnostics(harness, "eve")
        #expect(eve?["accuracyLimited"] == true)
        #expect(eve?["fullAccuracyDenied"] == true)

        // Layered sessions: fay is covered at always by nav, at whenInUse by the basic one.
        try await Self.authorize(harness, "fay", ["status": "always"])
        try await Self.at(harness, "fay", lat: 48.86)
        try await harness.waitFor("fay enters (nav asks for always)") { _ in
            Self.events(harness, "fay").contains("enter hall")
        }
        try await harness.publish("\(root)/nav/1", text: "", retain: true)  // ends the full-accuracy session
        try await Self.pass(harness, 0.3)
        try await Self.at(harness, "fay", lat: 48.86, lon: 2.40)
        try await harness.settle()
        #expect(!Self.events(harness, "fay").contains("exit hall"), "only the when-in-use session is left")
        #expect(Self.diagnostics(harness, "fay")?["serviceSessionRequired"] == false)
        try await harness.publish("\(root)/guide/basic", text: "", retain: true)
        try await harness.waitFor("no session left") { _ in
            Self.diagnostics(harness, "fay")?["serviceSessionRequired"] == true
        }
        await harness.stop()
    }

    @Test(
        "temporary full accuracy: the request, the grant to one session, its end with the session; an unrecorded subject is told (issue 19)"
    )
    func temporaryFullAccuracy() async throws {
        let harness = try await Self.start(sessions: [], clock: ManualClock(Date()))
        let root = "perimeter/v1/test/sessions"
        try await Self.authorize(harness, "eve", ["status": "always", "accuracy": "reduced"])
        try await harness.publish(
            "\(root)/nav/1", ["subjects": ["eve"], "level": "always", "fullAccuracyPurpose": "Navigation"],
            retain: true)
        try await harness.waitFor("the request for eve") { messages in
            messages.contains {
                $0.topic.hasSuffix("/eve/prompt") && $0.json?["request"] == "temporaryFullAccuracy"
                    && $0.json?["session"] == "nav/1" && $0.json?["purpose"] == "Navigation"
            }
        }
        try await Self.authorize(
            harness, "eve", ["status": "always", "accuracy": "reduced", "temporaryFullAccuracy": "nav/1"])
        try await Self.pass(harness, 0.1)
        try await Self.at(harness, "eve", lat: 48.861)  // in the 12 m cafe: needs full accuracy
        try await harness.waitFor("eve enters the cafe") { _ in Self.events(harness, "eve").contains("enter cafe") }
        let enter = harness.transitions.first { $0["subject"] == "eve" && $0["region"] == "cafe" }
        #expect(enter?["fix"]?["acc"] == 3, "not coarsened while the grant lasts")
        #expect(Self.diagnostics(harness, "eve")?["temporaryFullAccuracy"] == true)
        // perimeter subjects show names the grant and until when it lasts.
        let shown = try await runProduct(["subjects", "show", "eve", "--config", harness.configPath, "--timeout", "60"])
        #expect(shown.status == .exited(0), "\(shown.stderr)")
        let grant = try JSONParser.parse(shown.stdout)["temporaryFullAccuracy"]
        #expect(grant?["session"] == "nav/1")
        #expect(grant?["purpose"] == "Navigation")
        #expect(grant?["until"] == "sessionEnd")
        try await harness.publish("\(root)/nav/1", text: "", retain: true)
        try await harness.waitFor("the grant ends with the session") { messages in
            messages.contains {
                $0.topic == harness.topics.authorization(subject: "eve") && $0.json?["temporary"] == false
                    && $0.json?["accuracy"] == "reduced" && $0.json?["temporaryFullAccuracy"] == nil
            }
        }
        try await harness.waitFor("reduced again") { _ in
            Self.diagnostics(harness, "eve")?["temporaryFullAccuracy"] == false
        }
        let ended = try await runProduct(["subjects", "show", "eve", "--config", harness.configPath, "--timeout", "60"])
        #expect(try JSONParser.parse(ended.stdout)["temporaryFullAccuracy"] == .null, "the grant ended with nav/1")

        try await Self.at(harness, "zed", lat: 48.86)  // no authorization record: dropped, but told
        try await harness.waitFor("zed's diagnostics") { _ in
            Self.diagnostics(harness, "zed")?["authorizationRecordMissing"] == true
        }
        #expect(Self.diagnostics(harness, "zed")?["status"] == "notDetermined")
        #expect(Self.events(harness, "zed").isEmpty)
        await harness.stop()
    }

    @Test("perimeter subjects show and erase: erase leaves no retained topic behind")
    func erase() async throws {
        let harness = try await Self.start()
        try await Self.authorize(harness, "gus", ["status": "always"])
        try await harness.publish(
            "perimeter/v1/test/subjects/gus/preferences", ["defaultPlace": "cafe"], retain: true)
        try await Self.at(harness, "gus", lat: 48.86)
        try await harness.waitFor("gus enters") { _ in Self.events(harness, "gus").contains("enter hall") }
        let shown = try await runProduct(["subjects", "show", "gus", "--config", harness.configPath, "--timeout", "60"])
        #expect(shown.status == .exited(0), "\(shown.stderr)")
        let document = try JSONParser.parse(shown.stdout)
        #expect(document["states"]?["hall"] == "inside")
        #expect(document["status"] == "always")
        #expect(document["diagnostics"]?["heldEvents"] == 0)
        let erased = try await runProduct([
            "subjects", "erase", "gus", "--config", harness.configPath, "--timeout", "60",
        ])
        #expect(erased.status == .exited(0), "\(erased.stderr)")
        // A fresh look at the broker: nothing retained names gus.
        let retained = try await harness.retainedPicture().filter {
            !$0.value.isEmpty && $0.key.split(separator: "/").contains("gus")
        }
        #expect(retained.keys.sorted() == [])
        let after = try await runProduct(["subjects", "show", "gus", "--config", harness.configPath])
        let forgotten = try JSONParser.parse(after.stdout)
        #expect(forgotten["states"] == [:])
        #expect(forgotten["authorization"] == nil || forgotten["authorization"] == .null)
        await harness.stop()
    }
}
