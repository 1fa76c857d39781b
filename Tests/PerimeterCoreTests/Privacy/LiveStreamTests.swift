import Foundation
import PerimeterCore
import PerimeterTestSupport
import Testing

/// One step of a live-stream scenario; each first moves the manual clock to `at` seconds.
enum LiveStep: Sendable {
    /// `sessions/{consumer}/s`: nil ends it.
    case session(at: Double, String, JSONValue?)
    case authorization(at: Double, JSONValue)
    case usage(at: Double, inUse: Bool)
    /// A fix of `ann` (or `subject`) at the museum.
    case fix(at: Double, subject: String = "ann")
    case tick(at: Double)
    case erase(at: Double)
}

private let start = Date(timeIntervalSince1970: 1_700_000_000)
private let where_ = GeoPoint(lon: 2.3363, lat: 48.8606)

private func live(_ level: String = "always", subjects: JSONValue = "*") -> JSONValue {
    ["subjects": subjects, "level": .string(level), "live": true]
}

private func always(_ accuracy: String = "full") -> JSONValue { ["status": "always", "accuracy": .string(accuracy)] }

/// Runs the steps through an evaluator (no regions, privacy defaults) on a manual clock; the
/// live outputs as `guide ann @t full|reduced` and `guide ann stopped reason @t`.
/// `tallied` gets what the streams counted for the service's metrics (``LiveStreams/Tally``).
private func run(
    _ steps: [LiveStep], minInterval: Double = 1, tallied: ((LiveStreams.Tally) -> Void)? = nil
) -> [String] {
    let clock = ManualClock(start)
    var settings = VenueSettings(id: "museum")
    settings.locationServices.live.minInterval = minInterval
    settings.trust.reporters = [try! ReporterRule.make(agent: "phone", subjects: ["*"]).get()]
    var evaluator = VenueEvaluator(settings: settings, regions: [])
    var outputs: [EvaluatorOutput] = []
    func at(_ t: Double) { clock.set(start.addingTimeInterval(t)) }
    func handle(_ input: Inbound, agent: String? = nil) {
        if case .success(let more) = evaluator.handle(input, agent: agent, receivedAt: clock.now) { outputs += more }
    }
    for step in steps {
        switch step {
        case .session(let t, let consumer, let record):
            at(t)
            handle(.session(consumer: consumer, session: "s", record))
        case .authorization(let t, let record):
            at(t)
            handle(.authorization(subject: "ann", record))
        case .usage(let t, let inUse):
            at(t)
            handle(.usage(subject: "ann", ["inUse": .bool(inUse)]))
        case .fix(let t, let subject):
            at(t)
            handle(.fix(Fix(subject: subject, t: clock.now, position: where_, accuracy: 5)), agent: "phone")
        case .tick(let t):
            at(t)
            outputs += evaluator.tick(now: clock.now)
        case .erase(let t):
            at(t)
            outputs += evaluator.erase("ann", at: clock.now)
        }
    }
    tallied?(evaluator.takeLiveTally())
    func s(_ date: Date) -> String { "@\(Int(date.timeIntervalSince(start)))" }
    return outputs.compactMap { output in
        guard case .live(let update) = output else { return nil }
        switch update {
        case .position(let consumer, let fix, let reduced):
            return "\(consumer) \(fix.subject) \(s(fix.t)) \(reduced ? "reduced" : "full")"
        case .stopped(let consumer, let subject, let reason, let t):
            return "\(consumer) \(subject) stopped \(reason) \(s(t))"
        }
    }
}

@Suite("Live location stream")
struct LiveStreamTests {
    @Test(
        "positions go to consumers with a live session, rate-limited, and stop when the session or the authorization narrows",
        arguments: [
            ("no session: nothing", [.authorization(at: 0, always()), .fix(at: 1)], []),
            (
                "a session that does not ask for live: nothing",
                [
                    .authorization(at: 0, always()), .session(at: 0, "guide", ["subjects": "*", "level": "always"]),
                    .fix(at: 1),
                ], []
            ),
            (
                "positions as they arrive, at most one a second (minInterval)",
                [
                    .authorization(at: 0, always()), .session(at: 0, "guide", live()), .fix(at: 1), .fix(at: 1.5),
                    .fix(at: 2), .fix(at: 10),
                ],
                ["guide ann @1 full", "guide ann @2 full", "guide ann @10 full"]
            ),
            (
                "only the consumer that asked; a session of someone else gives nothing",
                [
                    .authorization(at: 0, always()), .session(at: 0, "guide", live()),
                    .session(at: 0, "shop", ["subjects": "*", "level": "always"]), .fix(at: 1),
                ],
                ["guide ann @1 full"]
            ),
            (
                "a session for other subjects: nothing for ann",
                [.authorization(at: 0, always()), .session(at: 0, "guide", live(subjects: ["bob"])), .fix(at: 1)], []
            ),
            (
                "the session ends: one stopped, then nothing",
                [
                    .authorization(at: 0, always()), .session(at: 0, "guide", live()), .fix(at: 1),
                    .session(at: 5, "guide", nil), .fix(at: 6),
                ],
                ["guide ann @1 full", "guide ann stopped sessionEnded @5"]
            ),
            (
                "always narrowed to whenInUse while not in use: stopped at once",
                [
                    .authorization(at: 0, always()), .session(at: 0, "guide", live()), .fix(at: 1),
                    .authorization(at: 5, ["status": "whenInUse"]), .fix(at: 6),
                ],
                ["guide ann @1 full", "guide ann stopped insufficientlyInUse @5"]
            ),
            (
                "denied: stopped",
                [
                    .authorization(at: 0, always()), .session(at: 0, "guide", live()), .fix(at: 1),
                    .authorization(at: 5, ["status": "denied"]),
                ],
                ["guide ann @1 full", "guide ann stopped authorizationDenied @5"]
            ),
            (
                "reduced accuracy: coarsened positions, the stream goes on",
                [.authorization(at: 0, always("reduced")), .session(at: 0, "guide", live()), .fix(at: 1)],
                ["guide ann @1 reduced"]
            ),
            (
                "a temporary full-accuracy grant is the granted consumer's: full for it, reduced for the others",
                [
                    .session(
                        at: 0, "guide",
                        ["subjects": "*", "level": "always", "live": true, "fullAccuracyPurpose": "tour"]),
                    .session(at: 0, "shop", live()),
                    .authorization(
                        at: 0, ["status": "always", "accuracy": "reduced", "temporaryFullAccuracy": "guide/s"]),
                    .fix(at: 1),
                ],
                ["guide ann @1 full", "shop ann @1 reduced"]
            ),
            (
                "the grant ends with its session: the stream goes back to reduced",
                [
                    .session(
                        at: 0, "guide",
                        ["subjects": "*", "level": "always", "live": true, "fullAccuracyPurpose": "tour"]),
                    .authorization(
                        at: 0, ["status": "always", "accuracy": "reduced", "temporaryFullAccuracy": "guide/s"]),
                    .fix(at: 1), .session(at: 2, "guide", live()), .fix(at: 3),
                ],
                ["guide ann @1 full", "guide ann @3 reduced"]
            ),
            (
                "whenInUse: while in use, stopped when the 10 s grace after leaving runs out",
                [
                    .authorization(at: 0, ["status": "whenInUse"]), .session(at: 0, "guide", live()),
                    .usage(at: 0, inUse: true), .fix(at: 1), .usage(at: 5, inUse: false), .fix(at: 10), .tick(at: 15),
                    .tick(at: 16), .fix(at: 20),
                ],
                ["guide ann @1 full", "guide ann @10 full", "guide ann stopped insufficientlyInUse @16"]
            ),
            (
                "a whenInUse session: an always subject only while in use",
                [
                    .authorization(at: 0, always()), .session(at: 0, "guide", live("whenInUse")), .fix(at: 1),
                    .usage(at: 2, inUse: true), .fix(at: 3),
                ],
                ["guide ann @3 full"]
            ),
            (
                "the stream opens again with the next allowed fix",
                [
                    .authorization(at: 0, always()), .session(at: 0, "guide", live()), .fix(at: 1),
                    .authorization(at: 2, ["status": "denied"]), .authorization(at: 3, always()), .fix(at: 4),
                ],
                ["guide ann @1 full", "guide ann stopped authorizationDenied @2", "guide ann @4 full"]
            ),
            (
                "erasure forgets the stream without a word",
                [
                    .authorization(at: 0, always()), .session(at: 0, "guide", live()), .fix(at: 1), .erase(at: 2),
                    .tick(at: 3),
                ],
                ["guide ann @1 full"]
            ),
        ] as [(String, [LiveStep], [String])])
    func scenarios(_ name: String, steps: [LiveStep], expected: [String]) {
        #expect(run(steps) == expected, "\(name)")
    }

    struct TallyCase: CustomStringConvertible, Sendable {
        var description: String
        var steps: [LiveStep]
        var updates: [String: Int]
        var stops: [String: Int] = [:]
    }

    static let tallies: [TallyCase] = [
        TallyCase(
            description: "no live session: no_session once per fix",
            steps: [.authorization(at: 0, always()), .fix(at: 1), .fix(at: 2)], updates: ["no_session": 2]),
        TallyCase(
            description: "full accuracy: published; one sooner than minInterval: rate_limited",
            steps: [
                .authorization(at: 0, always()), .session(at: 0, "guide", live()), .fix(at: 1), .fix(at: 1.5),
                .fix(at: 2),
            ], updates: ["published": 2, "rate_limited": 1]),
        TallyCase(
            description: "reduced accuracy: coarsened",
            steps: [.authorization(at: 0, always("reduced")), .session(at: 0, "guide", live()), .fix(at: 1)],
            updates: ["coarsened": 1]),
        TallyCase(
            description: "one per consumer",
            steps: [
                .authorization(at: 0, always()), .session(at: 0, "guide", live()), .session(at: 0, "shop", live()),
                .fix(at: 1),
            ], updates: ["published": 2]),
        TallyCase(
            description: "whenInUse, not in use: refused, and no stream was open to stop",
            steps: [.authorization(at: 0, ["status": "whenInUse"]), .session(at: 0, "guide", live()), .fix(at: 1)],
            updates: ["refused": 1]),
        TallyCase(
            description: "the session ends: one stop, sessionEnded",
            steps: [
                .authorization(at: 0, always()), .session(at: 0, "guide", live()), .fix(at: 1),
                .session(at: 2, "guide", nil), .fix(at: 3),
            ], updates: ["published": 1, "no_session": 1], stops: ["sessionEnded": 1]),
    ]

    @Test("the tally behind perimeter_live_updates_total and perimeter_live_stops_total", arguments: tallies)
    func tally(_ row: TallyCase) {
        var tally = LiveStreams.Tally()
        _ = run(row.steps) { tally = $0 }
        #expect(tally.updates == row.updates)
        #expect(tally.stops == row.stops)
    }

    @Test("minInterval is a setting: 5 s")
    func minInterval() {
        let steps: [LiveStep] = [
            .authorization(at: 0, always()), .session(at: 0, "guide", live()), .fix(at: 1), .fix(at: 3), .fix(at: 6),
        ]
        #expect(run(steps, minInterval: 5) == ["guide ann @1 full", "guide ann @6 full"])
    }

    @Test("the messages: live/{consumer}/{subject}, positions QoS 0 with a 5 s expiry, stops QoS 1; reduced is snapped")
    func messages() throws {
        let topics = Topics(venue: "museum")
        let fix = Fix(subject: "ann", t: start, position: where_, accuracy: 5)
        let position = try #require(
            EvaluatorOutput.live(.position(consumer: "guide/app", fix, reduced: false)).messages(topics: topics).first)
        #expect(position.topic == "perimeter/v1/museum/live/guide%2Fapp/ann")
        #expect(position.qos == 0 && !position.retain && position.expiry == 5)
        let payload = try JSONParser.parse(position.payloadString)
        #expect(payload["lat"]?.doubleValue == where_.lat && payload["accuracy"]?.stringValue == "full")
        let stop = try #require(
            EvaluatorOutput.live(.stopped(consumer: "guide", subject: "ann", reason: "sessionEnded", t: start))
                .messages(topics: topics).first)
        #expect(stop.qos == 1 && !stop.retain)
        #expect(try JSONParser.parse(stop.payloadString)["stopped"]?.boolValue == true)
        // Reduced accuracy: what goes out is the gate's snapped fix.
        let gate = PrivacyGate(settings: PrivacySettings())
        var reduced = gate
        _ = reduced.apply(
            authorization: AuthorizationRecord(status: .always, reducedAccuracy: true), subject: "ann", at: start)
        let coarse = reduced.coarsen(fix)
        #expect(coarse.position != fix.position && coarse.accuracy == 5000)
    }

    @Test("a snapshot keeps the open streams and the live sessions")
    func snapshot() throws {
        var streams = LiveStreams()
        streams.apply(session: ServiceSession(level: .always), live: true, consumer: "guide", key: "s")
        _ = streams.offer(Fix(subject: "ann", t: start, position: where_)) { _ in nil }
        let data = try JSONEncoder().encode(streams.snapshot)
        var restored = LiveStreams(
            parameters: LiveParameters(), restoring: try JSONDecoder().decode(LiveStreams.State.self, from: data))
        #expect(restored.openCount == 1)
        #expect(restored.level(consumer: "guide", subject: "ann") == .always)
        restored.apply(session: nil, live: false, consumer: "guide", key: "s")
        #expect(
            restored.review(at: start) { _, _ in nil } == [
                .stopped(consumer: "guide", subject: "ann", reason: "sessionEnded", t: start)
            ])
    }
}
