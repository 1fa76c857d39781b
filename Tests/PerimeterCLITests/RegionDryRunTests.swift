import Foundation
import PerimeterCore
import Testing

@testable import PerimeterCLI

/// What `regions put --dry-run` and `regions delete --dry-run` say, one row per kind of change.
@Suite("region dry run")
struct RegionDryRunTests {
    static func region(
        _ properties: String, geometry: String = #"{"type":"Point","coordinates":[2.3,48.8]}"#
    )
        -> Region
    {
        let text = #"{"type":"Feature","id":"r","properties":"# + properties + #","geometry":"# + geometry + "}"
        let document = RegionParser.parse(text: text, limits: .live)
        precondition(document.problems.isEmpty, "\(document.problems)")
        return document.regions[0]
    }

    static let circle = region(#"{"radius":10}"#)
    static let named = region(#"{"radius":10,"name":"Kiosk","dwellAfter":30}"#)
    static let wider = region(#"{"radius":20}"#)
    static let buffered = region(#"{"radius":10,"exitBuffer":5}"#)
    static let beacon = region(
        #"{"beacon":{"uuid":"F7826DA6-4FA2-4E98-8024-BC5B71E0893E"}}"#, geometry: "null")

    @Test(
        "the kind of change, from the retained definition and the new one",
        arguments: [
            (nil, circle, "new"),
            (.some(nil), circle, "new"),  // a retained payload the evaluator refuses
            (circle, circle, "unchanged"),
            (circle, named, "changed (properties only)"),
            (circle, wider, "changed (shape)"),
            (circle, buffered, "changed (shape)"),
            (circle, beacon, "changed (geographic ↔ beacon)"),
            (circle, nil, "deleted"),
        ] as [(Region??, Region?, String)])
    func kinds(old: Region??, new: Region?, expected: String) {
        #expect(RegionDryRun.kind(old: old, new: new).rawValue == expected)
    }

    static let rules: [NotificationRule] = [
        #"{"id":"bye","on":"exit","regions":"r","channels":["app"],"body":"x"}"#,
        #"{"id":"hi-ann","on":"enter","regions":"*","subjects":"ann","channels":["app"],"body":"x"}"#,
        #"{"id":"hi-all","on":["enter","dwell"],"regions":"r*","channels":["app"],"body":"x"}"#,
        #"{"id":"other","on":"enter","regions":"q","channels":["app"],"body":"x"}"#,
    ].map { text in
        try! RuleParser.parse(rule: JSONParser.parse(Array(text.utf8)), channels: ["app"], place: "test").get()
    }

    @Test("a changed shape: who may exit or enter, and the rules their transitions match")
    func changedShape() {
        let dryRun = RegionDryRun(
            venue: "v", states: ["r": ["ann": "outside", "bob": "inside", "cy": "unknown", "dee": "unmonitored"]],
            current: ["r": Self.circle], rules: Self.rules)
        let lines = dryRun.report(id: "r", new: Self.wider, at: Date(timeIntervalSince1970: 1_780_000_000))
        #expect(lines[0] == "region 'r': changed (shape)")
        #expect(lines.contains { $0.hasPrefix("  ann: outside now; may enter") && $0.hasSuffix(": hi-all, hi-ann") })
        #expect(lines.contains { $0.hasPrefix("  bob: inside now; may exit") && $0.hasSuffix("on its exit: bye") })
        #expect(!lines.contains { $0.contains("cy:") || $0.contains("dee:") }, "no evidence, no transition")
        #expect(lines.last == "  rules for an enter of this region (subject constraints apply): hi-all, hi-ann")
    }

    @Test("a delete or a geographic ↔ beacon swap: unmonitored at once, no event, no rule")
    func unmonitored() {
        let dryRun = RegionDryRun(
            venue: "v", states: ["r": ["ann": "inside", "dee": "unmonitored"]], current: ["r": Self.circle],
            rules: Self.rules)
        for new in [nil, Self.beacon] {
            let lines = dryRun.report(id: "r", new: new, at: Date(timeIntervalSince1970: 1_780_000_000))
            #expect(lines.contains("  ann: inside → unmonitored now (no exit event; no rule fires)"))
            #expect(!lines.contains { $0.contains("dee") })
            #expect(!lines.contains { $0.contains("bye") })
        }
    }
}
