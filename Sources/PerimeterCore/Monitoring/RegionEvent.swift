import Foundation

/// Where a subject stands with respect to a region.
public enum MembershipState: String, Sendable, Hashable, Codable, CaseIterable {
    /// No evidence yet, or the evidence went stale (never assumed to be outside).
    case unknown
    case inside
    case outside
    /// The region is not being monitored (outside its schedule, or removed).
    case unmonitored
}

/// Something the evaluator publishes: a transition (`enter`, `exit`, `dwell`) or a state change.
public struct RegionEvent: Sendable, Hashable, Codable {
    public enum Kind: String, Sendable, Hashable, Codable {
        case enter, exit, dwell, state
    }

    public var kind: Kind
    public var region: String
    public var subject: String
    /// Event time: when the transition happened by the evidence (a delayed enter is confirmed
    /// at the moment the delay ran out; a crossing at the interpolated boundary time).
    public var t: Date
    /// Per (subject, region) count of transitions published, starting at 1. For a state event:
    /// the count so far (0 before the first transition), so that whoever takes the subject
    /// over from the retained state goes on counting (docs/scale.md, "Handover").
    public var seq: Int
    /// Deterministic id of a transition (empty for state events): the same inputs always give
    /// the same id, so replicas and restarts make duplicates that consumers can drop.
    public var id: String
    /// For state events: the new state.
    public var state: MembershipState?
    /// For state events: why (`stale`, `schedule`, `regionRemoved`, `agentOffline` …).
    public var reason: String?
    public var source: String
    /// The fix behind the event, when there is one.
    public var fix: Fix?
    /// For beacon regions: the concrete beacon behind the region's (possibly wildcard) constraint.
    public var refinement: BeaconIdentity?
    /// True for the enter/exit pair inferred between two sparse fixes.
    public var interpolated: Bool
    /// True when the privacy gate held the event back (provisional always) and delivers it
    /// late, after an upgrade to always; `t` stays the original time.
    public var held: Bool = false
    /// For an `unknown` state: whether the subject was last known inside or outside (an
    /// unknown spell is not an exit: coming back inside is the same stay). Whoever takes the
    /// subject over from the retained state keeps the stay too (docs/scale.md, "Handover").
    public var lastKnown: MembershipState?

    public init(
        kind: Kind, region: String, subject: String, t: Date, seq: Int = 0, id: String = "",
        state: MembershipState? = nil,
        reason: String? = nil, source: String = "gps", fix: Fix? = nil, refinement: BeaconIdentity? = nil,
        interpolated: Bool = false, lastKnown: MembershipState? = nil
    ) {
        self.kind = kind
        self.region = region
        self.subject = subject
        self.t = t
        self.seq = seq
        self.id = id
        self.state = state
        self.reason = reason
        self.source = source
        self.fix = fix
        self.refinement = refinement
        self.interpolated = interpolated
        self.lastKnown = lastKnown
    }

    /// A state event: `subject` is now `state` for `region`.
    static func state(
        region: String, subject: String, state: MembershipState, at t: Date, reason: String?, seq: Int = 0,
        lastKnown: MembershipState? = nil
    ) -> RegionEvent {
        RegionEvent(
            kind: .state, region: region, subject: subject, t: t, seq: seq, state: state, reason: reason,
            lastKnown: lastKnown)
    }

    /// The id of transition number `seq` of `kind` for (venue, region, subject).
    public static func makeID(venue: String, region: String, subject: String, kind: Kind, seq: Int) -> String {
        Hex.encode(
            SHA256.hash(idMessage(venue: venue, region: region, subject: subject, kind: kind, seq: seq)).prefix(16))
    }

    /// The same id through another SHA-256 implementation (libcrypto's, injected by a service):
    /// byte-identical to ``makeID(venue:region:subject:kind:seq:)``.
    /// - Parameter epoch: the venue's erasure count when the (subject, region) membership began;
    ///   0 (not hashed) for memberships older than any erasure. A subject erased and seen again
    ///   counts from seq 1 again (nothing about it was kept), and the epoch keeps its new ids
    ///   apart from the old ones.
    public static func makeID(
        venue: String, region: String, subject: String, kind: Kind, seq: Int, epoch: Int = 0,
        hasher: some SHA256Hashing
    ) -> String {
        Hex.encode(
            hasher.sha256(
                idMessage(venue: venue, region: region, subject: subject, kind: kind, seq: seq, epoch: epoch)
            ).prefix(16))
    }

    /// What an id hashes: the parts, each followed by a NUL, in one contiguous message hashed in
    /// one pass (ids are made for every transition). The epoch is a part only when non-zero.
    private static func idMessage(
        venue: String, region: String, subject: String, kind: Kind, seq: Int, epoch: Int = 0
    ) -> [UInt8] {
        var message: [UInt8] = []
        message.reserveCapacity(venue.utf8.count + region.utf8.count + subject.utf8.count + 32)
        var parts = [venue, region, subject, kind.rawValue, String(seq)]
        if epoch != 0 { parts.append("erasure-epoch:\(epoch)") }
        for part in parts {
            message.append(contentsOf: part.utf8)
            message.append(0)
        }
        return message
    }

    /// The event's payload as published on its topic (DESIGN.md §4, topics.md), written straight
    /// to text, with `venue` after `event` (for a state, last) when one is given. Building the
    /// payload as an object, copying it with the venue and serializing it was a sixth of the
    /// evaluator's processing (`bench pipeline`). RegionEventPayloadTests pins the members.
    public func publishedText(venue: String?) -> String {
        var out = ""
        out.reserveCapacity(kind == .state ? 160 : 320)
        func member(_ name: String, first: Bool = false) {
            out += first ? "{\"" : ",\""
            out += name
            out += "\":"
        }
        func string(_ name: String, _ value: String, first: Bool = false) {
            member(name, first: first)
            JSONValue.writeString(value, to: &out)
        }
        if kind == .state {
            string("state", state?.rawValue ?? "unknown", first: true)
            string("region", region)
            string("subject", subject)
            string("t", Timestamp.format(t))
            if seq > 0 {
                member("seq")
                JSONValue.writeNumber(Double(seq), to: &out)
            }
            if let reason { string("reason", reason) }
            if let lastKnown { string("lastKnown", lastKnown.rawValue) }
            if let venue { string("venue", venue) }
            out += "}"
            return out
        }
        string("id", id, first: true)
        string("event", kind.rawValue)
        if let venue { string("venue", venue) }
        string("region", region)
        string("subject", subject)
        string("t", Timestamp.format(t))
        member("seq")
        JSONValue.writeNumber(Double(seq), to: &out)
        string("source", source)
        if interpolated {
            member("interpolated")
            out += "true"
        }
        if let refinement {
            member("refinement")
            JSONValue.object(refinement.json).write(to: &out)
        }
        if held {
            member("held")
            out += "true"
        }
        if let fix {
            member("fix")
            string("t", Timestamp.format(fix.t), first: true)
            member("lat")
            JSONValue.writeNumber(fix.position.lat, to: &out)
            member("lon")
            JSONValue.writeNumber(fix.position.lon, to: &out)
            if let accuracy = fix.accuracy {
                member("acc")
                JSONValue.writeNumber(accuracy, to: &out)
            }
            if let floor = fix.floor {
                member("floor")
                JSONValue.writeNumber(Double(floor), to: &out)
            }
            out += "}"
        }
        out += "}"
        return out
    }

    /// The event as the JSON payload of its topic, without the venue (the text read back).
    public var payload: JSONValue {
        (try? JSONParser.parse(publishedText(venue: nil))) ?? .null
    }
}
