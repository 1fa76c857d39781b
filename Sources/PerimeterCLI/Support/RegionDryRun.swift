import Foundation
import PerimeterCore

/// What publishing a region would do, from what a management command can read over MQTT: the
/// retained definition, the retained `state/{region}/{subject}` of each subject, and the rules
/// (live `rules/{id}` topics and the venue's rules file when the configuration names it).
///
/// What it cannot know: subjects' positions. The evaluator publishes states, places and events,
/// never positions (a fix is a subject's location; it stays in the evaluator, and topics.md
/// keeps it off retained topics). A changed shape therefore says which subjects *may* enter or
/// exit — decided by the evaluator at each one's next observation — not which will.
///
/// What it knows exactly (VenueEvaluator.upsert/remove): a new region or one of the same kind
/// whose shape changed changes no state when it is published; a region that turns from
/// geographic to beacon (or back) sets every subject's state to `unmonitored` at once, with no
/// exit event, so no rule fires for it.
struct RegionDryRun {
    var venue: String
    /// Retained states of the regions concerned: region → subject → state.
    var states: [String: [String: String]]
    /// Retained definitions: region → decoded region (nil: the payload is not a valid region).
    var current: [String: Region?]
    var rules: [NotificationRule]

    enum Kind: String {
        case new, unchanged, propertiesChanged = "changed (properties only)", shapeChanged = "changed (shape)"
        case kindChanged = "changed (geographic ↔ beacon)"
        case deleted
    }

    static func kind(old: Region??, new: Region?) -> Kind {
        guard let new else { return .deleted }
        guard let old, let old else { return .new }
        if old == new { return .unchanged }
        if old.isGeographic != new.isGeographic { return .kindChanged }
        if old.shape != new.shape || old.exitBuffer != new.exitBuffer || old.minAccuracy != new.minAccuracy {
            return .shapeChanged
        }
        return .propertiesChanged
    }

    /// The report's lines for putting `new` under `id` (nil: deleting it), the rules matched as
    /// of `now`.
    func report(id: String, new: Region?, at now: Date) -> [String] {
        let kind = Self.kind(old: current[id], new: new)
        var lines = ["region '\(id)': \(kind.rawValue)"]
        let subjects = (states[id] ?? [:]).sorted { $0.key < $1.key }
        func rules(_ event: RegionEvent.Kind, subject: String) -> String {
            let probe = NotifiedEvent(
                id: "dry-run", kind: event, venue: venue, region: id, subject: subject, t: now)
            let matching = self.rules.filter { $0.matches(probe) }.map(\.id).sorted()
            return matching.isEmpty
                ? "no rule fires on its \(event.rawValue)"
                : "rules that would fire on its \(event.rawValue): \(matching.joined(separator: ", "))"
        }
        switch kind {
        case .unchanged:
            lines.append("  the retained definition is the same: no subject changes state")
        case .propertiesChanged:
            lines.append(
                "  the shape, exit buffer and accuracy floor are the same: no subject changes state "
                    + "(delays, dwell and schedule apply from the next observation)")
        case .deleted, .kindChanged:
            let active = subjects.filter { $0.value != "unmonitored" }
            if active.isEmpty { lines.append("  no subject has a state in this region") }
            for (subject, state) in active {
                lines.append("  \(subject): \(state) → unmonitored now (no exit event; no rule fires)")
            }
            if kind == .kindChanged {
                lines.append("  then each subject's state follows its next observation against the new region")
            }
        case .new, .shapeChanged:
            let known = subjects.filter { $0.value == "inside" || $0.value == "outside" }
            lines.append(
                "  no state changes when it is published; each subject is judged against the new shape at its "
                    + "next observation")
            lines.append(
                "  positions are not published over MQTT, so who is inside the new shape cannot be known here")
            for (subject, state) in known {
                let event: RegionEvent.Kind = state == "inside" ? .exit : .enter
                lines.append(
                    "  \(subject): \(state) now; may \(event.rawValue) if the new shape says so — "
                        + rules(event, subject: subject))
            }
            let anyone = self.rules.filter { rule in
                rule.events.contains(.enter) && rule.regions.contains { $0.matches(id) }
            }.map(\.id).sorted()
            lines.append(
                anyone.isEmpty
                    ? "  no rule fires on an enter of this region"
                    : "  rules for an enter of this region (subject constraints apply): \(anyone.joined(separator: ", "))"
            )
        }
        return lines
    }
}
