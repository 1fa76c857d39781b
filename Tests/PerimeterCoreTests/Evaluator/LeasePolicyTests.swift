import Foundation
import PerimeterCore
import Testing

@Suite("Lease policy")
struct LeasePolicyTests {
    static func lease(_ instance: String, takenOver: Bool = false) -> LeasePolicy.Lease {
        LeasePolicy.Lease(instance: instance, takenOver: takenOver, since: Date(timeIntervalSince1970: 0))
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var role: LeasePolicy.Role
        var leases: [String: LeasePolicy.Lease]
        var online: Set<String>
        var start: String
        var takeOver: Bool
        var stepDown: Bool
        var testDescription: String { name }
    }

    @Test(
        "start, takeover and step-down decisions",
        arguments: [
            Case(
                name: "no lease: active", role: .active, leases: [:], online: [], start: "active", takeOver: true,
                stepDown: false),
            Case(
                name: "held by a live active: refused", role: .active, leases: ["v": lease("a")], online: ["a"],
                start: "refuse", takeOver: false, stepDown: false),
            Case(
                name: "held by an offline active: active", role: .active, leases: ["v": lease("a")], online: [],
                start: "active", takeOver: true, stepDown: false),
            Case(
                name: "held by a live standby that took over: join as standby", role: .active,
                leases: ["v": lease("b", takenOver: true)], online: ["b"], start: "standby", takeOver: false,
                stepDown: true),
            Case(
                name: "held by me (restart): active", role: .active, leases: ["v": lease("me")], online: ["me"],
                start: "active", takeOver: true, stepDown: false),
            Case(
                name: "standby behind a live active", role: .standby, leases: ["v": lease("a")], online: ["a"],
                start: "standby", takeOver: false, stepDown: false),
            Case(
                name: "standby after the active's last will", role: .standby, leases: ["v": lease("a")],
                online: ["me"], start: "standby", takeOver: true, stepDown: false),
        ])
    func decisions(c: Case) {
        let view = LeasePolicy.View(leases: c.leases, online: c.online)
        let start: String
        switch LeasePolicy.start(role: c.role, me: "me", venues: ["v"], view: view) {
        case .active: start = "active"
        case .standby: start = "standby"
        case .refuse(let reason):
            start = "refuse"
            #expect(reason.contains("venue 'v'") && reason.contains("'a'"))
        }
        #expect(start == c.start)
        #expect(LeasePolicy.shouldTakeOver(me: "me", venues: ["v"], view: view) == c.takeOver)
        #expect(LeasePolicy.shouldStepDown(me: "me", venues: ["v"], view: view) == c.stepDown)
    }

    @Test("a lease reads back from its JSON")
    func json() {
        let original = Self.lease("b", takenOver: true)
        #expect(LeasePolicy.Lease(json: original.json) == original)
        #expect(LeasePolicy.Lease(json: ["takenOver": true]) == nil)
    }
}
