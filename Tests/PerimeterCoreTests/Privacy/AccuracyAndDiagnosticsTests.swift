import Foundation
import PerimeterCore
import Testing

private func at(_ seconds: Double) -> Date { Date(timeIntervalSince1970: 1_700_000_000 + seconds) }

private func enter(_ region: String, _ time: Double) -> RegionEvent {
    RegionEvent(
        kind: .enter, region: region, subject: "ann", t: at(time), seq: Int(time),
        id: RegionEvent.makeID(venue: "v", region: region, subject: "ann", kind: .enter, seq: Int(time)))
}

/// The gate's outputs, short: `authorization ann always reduced grant:nav/1`, `request ann nav/1`.
private func describe(_ outputs: [PrivacyOutput]) -> [String] {
    outputs.compactMap { output in
        switch output {
        case .authorization(let subject, let record):
            "authorization \(subject) \(record.status.rawValue) \(record.reducedAccuracy ? "reduced" : "full") grant:\(record.temporaryFullAccuracy ?? "none")"
        case .fullAccuracyRequest(let subject, let session, let purpose): "request \(subject) \(session) \(purpose)"
        case .deliver(let event): "deliver \(event.kind.rawValue) \(event.region)"
        default: nil
        }
    }
}

private let navigation = ServiceSession(level: .always, fullAccuracyPurpose: "Navigation")

/// Steps of the temporary full accuracy table.
enum GrantStep: Sendable {
    case record(reduced: Bool, grant: String?)
    case session(String, ServiceSession?)
    case preciseEnter
}

@Suite("Privacy gate: temporary full accuracy and diagnostics (issue 19)")
struct AccuracyAndDiagnosticsTests {
    struct GrantCase: CustomStringConvertible, Sendable {
        var description: String
        var steps: [GrantStep]
        var last: [String]
        /// Reduced accuracy in force after the steps.
        var reduced: Bool
    }

    static let grants: [GrantCase] = [
        GrantCase(
            description: "a session with a purpose asks the reduced subjects it covers, once",
            steps: [.record(reduced: true, grant: nil), .session("nav/1", navigation)],
            last: ["request ann nav/1 Navigation"], reduced: true),
        GrantCase(
            description: "the same session declared again does not ask again",
            steps: [.record(reduced: true, grant: nil), .session("nav/1", navigation), .session("nav/1", navigation)],
            last: [], reduced: true),
        GrantCase(
            description: "granted to a session in force: full accuracy, precise events delivered",
            steps: [.session("nav/1", navigation), .record(reduced: true, grant: "nav/1"), .preciseEnter],
            last: ["deliver enter lobby"], reduced: false),
        GrantCase(
            description: "the grant ends with its session: the record is republished without it",
            steps: [
                .session("nav/1", navigation), .record(reduced: true, grant: "nav/1"), .session("nav/1", nil),
            ],
            last: ["authorization ann always reduced grant:none"], reduced: true),
        GrantCase(
            description: "the grant ends when its session stops asking for full accuracy",
            steps: [
                .session("nav/1", navigation), .record(reduced: true, grant: "nav/1"),
                .session("nav/1", ServiceSession(level: .always)),
            ],
            last: ["authorization ann always reduced grant:none"], reduced: true),
        GrantCase(
            description: "another session ending leaves the grant",
            steps: [
                .session("nav/1", navigation), .session("other/1", ServiceSession(level: .always)),
                .record(reduced: true, grant: "nav/1"), .session("other/1", nil),
            ],
            last: [], reduced: false),
        GrantCase(
            description: "a grant to a session not in force is void at once (republished without it)",
            steps: [.record(reduced: true, grant: "nav/1")],
            last: ["authorization ann always reduced grant:none"], reduced: true),
        GrantCase(
            description: "after the grant ended, precise events are accuracyLimited again",
            steps: [
                .session("nav/1", navigation), .record(reduced: true, grant: "nav/1"), .session("nav/1", nil),
                .preciseEnter,
            ],
            last: [], reduced: true),
    ]

    @Test("temporary full accuracy: a grant scoped to one session, ending with it", arguments: grants)
    func temporaryFullAccuracy(_ row: GrantCase) {
        var gate = PrivacyGate(settings: PrivacySettings())
        var last: [PrivacyOutput] = []
        for (index, step) in row.steps.enumerated() {
            let t = at(Double(index))
            switch step {
            case .record(let reduced, let grant):
                last = gate.apply(
                    authorization: AuthorizationRecord(
                        status: .always, reducedAccuracy: reduced, temporaryFullAccuracy: grant), subject: "ann", at: t)
            case .session(let key, let session):
                last = gate.apply(session: session, key: key, at: t)
            case .preciseEnter:
                last = gate.gate(enter("lobby", Double(index)), precise: true)
            }
        }
        #expect(describe(last) == row.last)
        #expect(gate.isReduced("ann") == row.reduced)
        #expect(gate.diagnostics(of: "ann", at: at(10))["temporaryFullAccuracy"] == .bool(!row.reduced))
        let fix = Fix(subject: "ann", t: at(10), position: GeoPoint(lon: 2.3362, lat: 48.8604), accuracy: 5)
        #expect((gate.coarsen(fix) == fix) == !row.reduced, "fixes are coarsened only while reduced")
    }

    @Test("diagnostics: events withheld by a whenInUse-only session are explained (insufficientlyInUse, sessionLevel)")
    func whenInUseSession() {
        var gate = PrivacyGate(settings: PrivacySettings(defaultSessions: [ServiceSession(level: .whenInUse)]))
        _ = gate.apply(authorization: AuthorizationRecord(status: .always), subject: "ann", at: at(0))
        #expect(describe(gate.gate(enter("hall", 1), precise: false)) == [])
        let diagnostics = gate.diagnostics(of: "ann", at: at(1))
        #expect(diagnostics["insufficientlyInUse"] == true)
        #expect(diagnostics["sessionLevel"] == "whenInUse")
        #expect(diagnostics["alwaysAuthorizationDenied"] == false)
        _ = gate.apply(usage: true, background: false, subject: "ann", at: at(2))
        #expect(gate.diagnostics(of: "ann", at: at(2))["insufficientlyInUse"] == false)
    }

    @Test("diagnostics: a subject with no authorization record is told about once, then not again")
    func unrecorded() {
        var gate = PrivacyGate(settings: PrivacySettings())
        let first = gate.noteUnrecorded("ann", at: at(0))
        guard case .diagnostics(let subject, let value)? = first?.first else {
            Issue.record("no diagnostics: \(String(describing: first))")
            return
        }
        #expect(subject == "ann")
        #expect(value["authorizationRecordMissing"] == true)
        #expect(value["status"] == "notDetermined")
        #expect(gate.noteUnrecorded("ann", at: at(1)) == nil, "once")
        _ = gate.apply(authorization: AuthorizationRecord(status: .whenInUse), subject: "ann", at: at(2))
        #expect(gate.diagnostics(of: "ann", at: at(2))["authorizationRecordMissing"] == false)
        #expect(gate.noteUnrecorded("ann", at: at(3)) == nil, "it has a record now")
    }
}
