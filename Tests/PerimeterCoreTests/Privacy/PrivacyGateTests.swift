import Foundation
import PerimeterCore
import Testing

private func at(_ seconds: Double) -> Date { Date(timeIntervalSince1970: 1_700_000_000 + seconds) }

private func event(_ kind: RegionEvent.Kind, _ region: String, _ time: Double, subject: String = "ann") -> RegionEvent {
    RegionEvent(
        kind: kind, region: region, subject: subject, t: at(time), seq: 1,
        id: RegionEvent.makeID(venue: "v", region: region, subject: subject, kind: kind, seq: Int(time)))
}

/// Outputs as short strings: `deliver enter hall @5`, `held enter hall @5`, `prompt ann` …
private func describe(_ outputs: [PrivacyOutput]) -> [String] {
    outputs.compactMap { output in
        switch output {
        case .deliver(let event):
            "\(event.held ? "held " : "deliver ")\(event.kind.rawValue) \(event.region) @\(Int(event.t.timeIntervalSince1970 - 1_700_000_000))"
        case .prompt(let subject): "prompt \(subject)"
        case .fullAccuracyRequest(let subject, let session, _): "fullAccuracyRequest \(subject) \(session)"
        case .authorization(let subject, let record): "authorization \(subject) \(record.status.rawValue)"
        case .unmonitor(let subject, let reason): "unmonitor \(subject) \(reason)"
        case .notifySelf(let event):
            "self \(event.kind.rawValue) \(event.region) @\(Int(event.t.timeIntervalSince1970 - 1_700_000_000))"
        case .diagnostics: nil
        }
    }
}

private let everyone = ServiceSession(level: .always)

private func gate(
    _ status: AuthorizationStatus?, sessions: [ServiceSession] = [everyone], reduced: Bool = false
)
    -> PrivacyGate
{
    var gate = PrivacyGate(settings: PrivacySettings(defaultSessions: sessions))
    if let status {
        _ = gate.apply(
            authorization: AuthorizationRecord(status: status, reducedAccuracy: reduced), subject: "ann", at: at(0))
    }
    return gate
}

@Suite("Privacy gate")
struct PrivacyGateTests {
    @Test(
        "rule 1: observations of undetermined, denied and restricted subjects are refused, with the reason",
        arguments: [
            (AuthorizationStatus?.none, "authorizationNotDetermined"), (.notDetermined, "authorizationNotDetermined"),
            (.denied, "authorizationDenied"), (.restricted, "authorizationRestricted"), (.whenInUse, nil),
            (.always, nil), (.provisionalAlways, nil),
        ] as [(AuthorizationStatus?, String?)])
    func refusal(status: AuthorizationStatus?, reason: String?) {
        #expect(gate(status).refusal(of: "ann") == reason)
    }

    @Test("rule 1: a subject that stops being allowed is unmonitored; assets default to always")
    func unmonitor() {
        var gate = gate(.whenInUse)
        let outputs = gate.apply(authorization: AuthorizationRecord(status: .denied), subject: "ann", at: at(1))
        #expect(describe(outputs) == ["unmonitor ann authorizationDenied"])
        let tag = "ibeacon:2f234454-cf6d-4a0f-adf2-f4911ba9ffa6:7:1"
        let settings = PrivacySettings(
            assets: [
                BeaconConstraint(format: .iBeacon, prefix: BeaconPrefix(uuid: "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6")!)
            ])
        let assets = PrivacyGate(settings: settings)
        #expect(assets.status(of: tag) == .always)
        #expect(assets.status(of: "ann") == .notDetermined)
    }

    @Test(
        "rule 2: in use = foreground, a background session, or within the 10 s grace after leaving",
        arguments: [
            // (usage marks (t, inUse, background), question time, in use?)
            ([(0.0, true, false)], 5.0, true),
            ([(0.0, true, false), (10, false, false)], 15, true),
            ([(0.0, true, false), (10, false, false)], 20, true),
            ([(0.0, true, false), (10, false, false)], 20.5, false),
            ([(0.0, false, true)], 100, true),
            ([(0.0, false, false)], 1, false),
            ([(5.0, true, false)], 1, false),
            ([(0.0, true, false), (10, false, false), (12, true, false)], 30, true),
        ] as [([(Double, Bool, Bool)], Double, Bool)])
    func inUse(marks: [(Double, Bool, Bool)], time: Double, expected: Bool) {
        var gate = gate(.whenInUse)
        for (t, inUse, background) in marks {
            _ = gate.apply(usage: inUse, background: background, subject: "ann", at: at(t))
        }
        #expect(gate.isInUse("ann", at: at(time)) == expected)
    }

    @Test("rules 3 and 4: whenInUse delivers only in use (never held); always at any time")
    func whenInUseAndAlways() {
        var whenInUse = gate(.whenInUse)
        _ = whenInUse.apply(usage: true, background: false, subject: "ann", at: at(0))
        _ = whenInUse.apply(usage: false, background: false, subject: "ann", at: at(10))
        #expect(describe(whenInUse.gate(event(.enter, "hall", 5), precise: false)) == ["deliver enter hall @5"])
        #expect(describe(whenInUse.gate(event(.exit, "hall", 60), precise: false)) == ["self exit hall @60"])
        #expect(whenInUse.counters["withheld.insufficientlyInUse"] == 1)
        #expect(whenInUse.counters["held"] == nil)
        var always = gate(.always)
        #expect(describe(always.gate(event(.enter, "hall", 60), precise: false)) == ["deliver enter hall @60"])
        // A consumer that only asked for when-in-use gets nothing beyond it.
        var narrow = gate(.always, sessions: [ServiceSession(level: .whenInUse)])
        #expect(describe(narrow.gate(event(.enter, "hall", 60), precise: false)) == ["self enter hall @60"])
    }

    @Test("rule 5: provisional always holds, supersedes, expires, prompts once, and an upgrade delivers held events")
    func provisional() {
        var gate = gate(.provisionalAlways)
        _ = gate.apply(usage: true, background: false, subject: "ann", at: at(0))
        #expect(describe(gate.gate(event(.enter, "hall", 5), precise: false)) == ["deliver enter hall @5"])
        _ = gate.apply(usage: false, background: false, subject: "ann", at: at(10))
        #expect(describe(gate.gate(event(.exit, "hall", 100), precise: false)) == ["self exit hall @100"])
        #expect(describe(gate.gate(event(.enter, "cafe", 200), precise: false)) == ["self enter cafe @200"])
        #expect(
            describe(gate.gate(event(.exit, "cafe", 300), precise: false)) == ["self exit cafe @300"],
            "replaces the cafe enter")
        #expect(gate.counters["superseded"] == 1)
        #expect(gate.diagnostics(of: "ann", at: at(300))["heldEvents"] == 2)
        // In use again with held events: the prompt, once ever.
        #expect(describe(gate.apply(usage: true, background: false, subject: "ann", at: at(400))) == ["prompt ann"])
        _ = gate.apply(usage: false, background: false, subject: "ann", at: at(410))
        #expect(describe(gate.apply(usage: true, background: false, subject: "ann", at: at(420))) == [])
        let upgrade = gate.apply(authorization: AuthorizationRecord(status: .always), subject: "ann", at: at(500))
        #expect(describe(upgrade) == ["held exit hall @100", "held exit cafe @300"])
    }

    @Test("rule 5: held events expire after heldMaxAge; a downgrade to whenInUse discards them")
    func provisionalExpiryAndDowngrade() {
        var gate = gate(.provisionalAlways)
        _ = gate.gate(event(.enter, "hall", 100), precise: false)
        _ = gate.gate(event(.enter, "cafe", 1500), precise: false)
        _ = gate.tick(now: at(1901))
        #expect(gate.counters["expired"] == 1)
        #expect(gate.diagnostics(of: "ann", at: at(1901))["heldEvents"] == 1)
        let downgrade = gate.apply(authorization: AuthorizationRecord(status: .whenInUse), subject: "ann", at: at(1902))
        #expect(describe(downgrade) == [])
        #expect(gate.counters["discarded"] == 1)
        #expect(gate.diagnostics(of: "ann", at: at(1902))["heldEvents"] == 0)
    }

    @Test("rule 6: allow once reverts to notDetermined when the subject stops being in use, after the grace")
    func allowOnce() {
        var gate = gate(nil)
        _ = gate.apply(
            authorization: AuthorizationRecord(status: .whenInUse, temporary: true), subject: "ann", at: at(0))
        _ = gate.apply(usage: true, background: false, subject: "ann", at: at(1))
        #expect(describe(gate.tick(now: at(5))) == [])
        _ = gate.apply(usage: false, background: false, subject: "ann", at: at(20))
        #expect(describe(gate.tick(now: at(29))) == [], "within the grace")
        #expect(
            describe(gate.tick(now: at(31)))
                == ["authorization ann notDetermined", "unmonitor ann authorizationNotDetermined"])
        #expect(gate.status(of: "ann") == .notDetermined)
    }

    @Test("rule 7: reduced accuracy snaps fixes to the grid and limits precise regions")
    func reducedAccuracy() throws {
        var gate = gate(.always, reduced: true)
        let fix = Fix(subject: "ann", t: at(0), position: GeoPoint(lon: 2.3362, lat: 48.8604), accuracy: 5)
        let coarse = gate.coarsen(fix)
        #expect(coarse.accuracy == 5000)
        #expect(Geodesy.distance(coarse.position, fix.position) < 5000)
        let neighbour = gate.coarsen(Fix(subject: "ann", t: at(0), position: GeoPoint(lon: 2.3370, lat: 48.8610)))
        #expect(neighbour.position == coarse.position, "nearby fixes fall in the same cell")
        #expect(describe(gate.gate(event(.enter, "cafe", 1), precise: true)) == [])
        #expect(gate.counters["withheld.accuracyLimited"] == 1)
        #expect(describe(gate.gate(event(.enter, "city", 1), precise: false)) == ["deliver enter city @1"])
        let full = PrivacyGate(settings: PrivacySettings(defaultStatus: .always))
        #expect(full.coarsen(fix) == fix)
        // A session that needs full accuracy, a record that gives reduced: fullAccuracyDenied.
        _ = gate.apply(
            session: ServiceSession(level: .always, fullAccuracyPurpose: "Navigation"), key: "guide/1", at: at(2))
        #expect(gate.diagnostics(of: "ann", at: at(2))["fullAccuracyDenied"] == true)
        _ = gate.apply(authorization: AuthorizationRecord(status: .always), subject: "ann", at: at(3))
        #expect(gate.diagnostics(of: "ann", at: at(3))["fullAccuracyDenied"] == false)
        #expect(describe(gate.gate(event(.enter, "cafe", 4), precise: true)) == ["deliver enter cafe @4"])
    }

    @Test("rule 8: sessions layer; ending one leaves the others; none withholds with serviceSessionRequired")
    func sessions() {
        var gate = gate(.always, sessions: [])
        #expect(describe(gate.gate(event(.enter, "hall", 1), precise: false)) == ["self enter hall @1"])
        #expect(gate.counters["withheld.serviceSessionRequired"] == 1)
        _ = gate.apply(session: ServiceSession(subjects: ["ann"], level: .whenInUse), key: "basic/1", at: at(2))
        _ = gate.apply(
            session: ServiceSession(level: .always, fullAccuracyPurpose: "Navigation"), key: "nav/1", at: at(2))
        #expect(describe(gate.gate(event(.exit, "hall", 3), precise: false)) == ["deliver exit hall @3"])
        _ = gate.apply(session: nil, key: "nav/1", at: at(4))
        // Only the when-in-use session is left, and ann is not in use.
        #expect(describe(gate.gate(event(.enter, "hall", 5), precise: false)) == ["self enter hall @5"])
        #expect(gate.diagnostics(of: "ann", at: at(5))["serviceSessionRequired"] == false)
        _ = gate.apply(session: nil, key: "basic/1", at: at(6))
        #expect(gate.diagnostics(of: "ann", at: at(6))["serviceSessionRequired"] == true)
    }

    @Test("erasure: the removal of the erased subject's record that comes back afterwards publishes nothing")
    func erasedStaysErased() {
        var erased = gate(.always)
        erased.erase("ann")
        #expect(erased.apply(authorization: nil, subject: "ann", at: at(2)).isEmpty)
        #expect(erased.apply(authorization: nil, subject: "bob", at: at(2)).isEmpty, "never known either")
        // A record removed from a subject the gate holds is news (diagnostics change).
        var held = gate(.whenInUse)
        #expect(!held.apply(authorization: nil, subject: "ann", at: at(3)).isEmpty)
    }

    @Test("rule 9: diagnostics follow the inputs and are published only when they change")
    func diagnostics() {
        var gate = PrivacyGate(settings: PrivacySettings(defaultSessions: [everyone]))
        func flags(_ outputs: [PrivacyOutput]) -> [String] {
            outputs.compactMap { output in
                guard case .diagnostics(_, let value) = output, case .object(let object) = value else { return nil }
                return object.filter { $0.value == .bool(true) }.map(\.key).sorted().joined(separator: ",")
            }
        }
        let denied = gate.apply(authorization: AuthorizationRecord(status: .denied), subject: "ann", at: at(0))
        #expect(flags(denied) == ["authorizationDenied"])
        let restricted = gate.apply(authorization: AuthorizationRecord(status: .restricted), subject: "ann", at: at(1))
        #expect(flags(restricted) == ["authorizationRestricted"])
        let whenInUse = gate.apply(authorization: AuthorizationRecord(status: .whenInUse), subject: "ann", at: at(2))
        #expect(flags(whenInUse) == ["alwaysAuthorizationDenied,insufficientlyInUse"])
        #expect(
            flags(gate.apply(usage: true, background: false, subject: "ann", at: at(3))) == [
                "alwaysAuthorizationDenied,inUse"
            ])
        #expect(flags(gate.tick(now: at(4))) == [], "unchanged: not published again")
    }

    @Test(
        "rule 10: notifications to the subject itself need only whenInUse, in use or not, with no session",
        arguments: [
            (AuthorizationStatus?.none, false, false), (.denied, false, false), (.restricted, false, false),
            (.whenInUse, false, true), (.provisionalAlways, false, true), (.always, false, true),
            (.whenInUse, true, false),
        ] as [(AuthorizationStatus?, Bool, Bool)])
    func selfNotification(status: AuthorizationStatus?, reduced: Bool, allowed: Bool) {
        let gate = gate(status, sessions: [], reduced: reduced)
        #expect(gate.allowsSelfNotification("ann", precise: true) == allowed)
        #expect(!gate.isInUse("ann", at: at(1)), "not in use, no session: consumers get nothing")
    }

    @Test("ranging: whenInUse only while in use, always at any time, never with reduced accuracy")
    func ranging() {
        var whenInUse = gate(.whenInUse)
        #expect(!whenInUse.allowsRanging("ann", at: at(1)))
        _ = whenInUse.apply(usage: true, background: false, subject: "ann", at: at(0))
        #expect(whenInUse.allowsRanging("ann", at: at(1)))
        var gate = gate(.always)
        #expect(gate.allowsRanging("ann", at: at(1)))
        _ = gate.apply(usage: true, background: false, subject: "ann", at: at(0))
        #expect(gate.allowsRanging("ann", at: at(1)))
        _ = gate.apply(
            authorization: AuthorizationRecord(status: .always, reducedAccuracy: true), subject: "ann", at: at(2))
        #expect(!gate.allowsRanging("ann", at: at(3)))
    }
}
