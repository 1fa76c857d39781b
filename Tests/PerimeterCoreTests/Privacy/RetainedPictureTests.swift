import Foundation
import PerimeterCore
import Testing

private func at(_ seconds: Double) -> Date { Date(timeIntervalSince1970: 1_700_000_000 + seconds) }

/// One input to the gate, or an event from the engines (`precise`: a beacon or small region).
enum RetainedStep {
    case authorization(AuthorizationStatus, reduced: Bool = false)
    case usage(Bool)
    case session(String, ServiceSession?)
    case state(String, MembershipState, precise: Bool = false)
    case transition(RegionEvent.Kind, String, seq: Int, precise: Bool = false)
    case tick
}

/// What reaches consumers, as short strings: `enter hall 1`, `held enter hall 1`, `state hall outside @20`.
private func delivered(_ outputs: [PrivacyOutput]) -> [String] {
    outputs.compactMap { output in
        guard case .deliver(let event) = output else { return nil }
        let time = Int(event.t.timeIntervalSince1970 - 1_700_000_000)
        if event.kind == .state { return "state \(event.region) \(event.state!.rawValue) @\(time)" }
        return "\(event.held ? "held " : "")\(event.kind.rawValue) \(event.region) \(event.seq)"
    }
}

/// Runs steps one second apart (step i at t = i) and returns what each delivered.
private func run(_ steps: [RetainedStep], sessions: [ServiceSession]) -> (outputs: [[String]], gate: PrivacyGate) {
    var gate = PrivacyGate(settings: PrivacySettings(inUseGrace: 1, defaultSessions: sessions))
    var outputs: [[String]] = []
    for (index, step) in steps.enumerated() {
        let t = at(Double(index))
        switch step {
        case .authorization(let status, let reduced):
            outputs.append(
                delivered(
                    gate.apply(
                        authorization: AuthorizationRecord(status: status, reducedAccuracy: reduced), subject: "ann",
                        at: t)))
        case .usage(let inUse):
            outputs.append(delivered(gate.apply(usage: inUse, background: false, subject: "ann", at: t)))
        case .session(let key, let session):
            outputs.append(delivered(gate.apply(session: session, key: key, at: t)))
        case .state(let region, let state, let precise):
            let event = RegionEvent(kind: .state, region: region, subject: "ann", t: t, state: state)
            outputs.append(delivered(gate.gate(event, precise: precise)))
        case .transition(let kind, let region, let seq, let precise):
            let event = RegionEvent(
                kind: kind, region: region, subject: "ann", t: t, seq: seq,
                id: RegionEvent.makeID(venue: "v", region: region, subject: "ann", kind: kind, seq: seq))
            outputs.append(delivered(gate.gate(event, precise: precise)))
        case .tick:
            outputs.append(delivered(gate.tick(now: t)))
        }
    }
    return (outputs, gate)
}

private let always = ServiceSession(level: .always)

@Suite("Privacy gate: the retained picture equals what the delivered events imply (issue 19)")
struct RetainedPictureTests {
    struct Case: CustomStringConvertible, Sendable {
        var description: String
        var sessions: [ServiceSession] = [ServiceSession(level: .always)]
        var steps: [RetainedStep]
        /// What the last step delivers.
        var last: [String]
    }

    static let cases: [Case] = [
        Case(
            description: "provisional → always: the held enter, then the state it implies",
            steps: [
                .authorization(.provisionalAlways), .state("hall", .inside), .transition(.enter, "hall", seq: 1),
                .authorization(.always),
            ],
            last: ["held enter hall 1", "state hall inside @1"]),
        Case(
            description: "whenInUse: a withheld exit's state goes out once the subject is in use again",
            steps: [
                .authorization(.whenInUse), .usage(true), .state("hall", .inside), .transition(.enter, "hall", seq: 1),
                .usage(false), .tick, .tick, .state("hall", .outside), .transition(.exit, "hall", seq: 2),
                .usage(true),
            ],
            last: ["state hall outside @7"]),
        Case(
            description: "whenInUse: a state withheld, then superseded by a delivered one, is not delivered again",
            steps: [
                .authorization(.whenInUse), .state("hall", .inside), .usage(true), .state("hall", .outside),
                .usage(false), .usage(true),
            ],
            last: []),
        Case(
            description: "a session declared: the current state of every region",
            sessions: [],
            steps: [
                .authorization(.always), .state("hall", .inside), .state("cafe", .outside),
                .session("guide/1", ServiceSession(level: .always)),
            ],
            last: ["state cafe outside @2", "state hall inside @1"]),
        Case(
            description: "a whenInUse session while not in use resynchronizes nothing; in use it does",
            sessions: [],
            steps: [
                .authorization(.always), .state("hall", .inside),
                .session("guide/1", ServiceSession(level: .whenInUse)), .usage(true),
            ],
            last: ["state hall inside @1"]),
        Case(
            description: "reduced → full accuracy: the beacon region's state",
            steps: [
                .authorization(.always, reduced: true), .state("lobby", .inside, precise: true),
                .state("city", .inside), .authorization(.always),
            ],
            last: ["state lobby inside @1"]),
        Case(
            description: "a live exit drops the older held enter of the same region (no late contradiction)",
            steps: [
                .authorization(.provisionalAlways), .state("hall", .inside), .transition(.enter, "hall", seq: 3),
                .usage(true), .state("hall", .outside), .transition(.exit, "hall", seq: 4),
                .authorization(.always),
            ],
            last: []),
        Case(
            description: "denied: nothing withheld is delivered (the engines forget the subject)",
            steps: [
                .authorization(.whenInUse), .state("hall", .inside), .authorization(.denied),
                .authorization(.always),
            ],
            last: []),
    ]

    @Test(arguments: cases)
    func resynchronization(_ row: Case) {
        let (outputs, _) = run(row.steps, sessions: row.sessions)
        #expect(outputs.last == row.last)
    }

    @Test("the superseded held event is counted and leaves the diagnostics' held count")
    func supersededCounted() {
        let (outputs, gate) = run(Self.cases[6].steps, sessions: [always])
        #expect(outputs[3] == ["state hall inside @1"], "in use: the current state, the enter stays held")
        #expect(outputs[5] == ["exit hall 4"])
        #expect(gate.counters["superseded"] == 1)
        #expect(gate.diagnostics(of: "ann", at: at(6))["heldEvents"] == 0)
    }
}
