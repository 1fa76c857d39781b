import Foundation

/// What a membership decision rests on: the fix or the beacon behind it.
struct Evidence: Sendable, Codable {
    var fix: Fix?
    /// `gps`, `ble`, `ble-gateway`, `timer` …
    var source: String
    /// For beacon regions: the concrete beacon behind a wildcard constraint.
    var refinement: BeaconIdentity?

    init(fix: Fix? = nil, source: String, refinement: BeaconIdentity? = nil) {
        self.fix = fix
        self.source = source
        self.refinement = refinement
    }

    init(fix: Fix) { self.init(fix: fix, source: fix.source) }
}

/// Who the events of one membership are about.
struct MembershipContext {
    var venue: String
    var region: Region
    var subject: String
    var hasher = EventIDHasher()
}

/// One (subject, region) state machine, shared by the geofence and beacon engines: the engines
/// decide whether evidence says inside or outside; this decides what that means.
///
/// - A change is confirmed after the region's `enterDelay` / `exitDelay` (at the moment the
///   delay runs out); contrary evidence before then cancels it.
/// - `enter` fires when the subject is confirmed inside and was last known outside (or was
///   never known); `exit` only when it was last known inside: going unknown is not an exit,
///   and coming back after an unknown spell is the same stay.
/// - `dwell` fires once per stay, `dwellAfter` seconds after entering.
struct Membership: Sendable, Codable {
    var state: MembershipState = .unknown
    /// The last confirmed inside/outside, kept through unknown spells.
    var lastKnown: MembershipState?
    /// A change waiting out its delay, with the evidence that started it.
    var pending: Pending? {
        get { pendingBox?.value }
        set { pendingBox = newValue.map(OutOfLine.init) }
    }
    /// Out of line: the evidence is a fix and a beacon identity (~170 B), and nearly every
    /// membership has nothing pending (`bench restart`: a subject's memberships went from
    /// 552 B to ~250 B).
    private var pendingBox: OutOfLine<Pending>?

    struct Pending: Sendable, Codable {
        var state: MembershipState
        var since: Date
        var evidence: Evidence
    }
    /// Start of the current stay (kept through unknown spells).
    var enteredAt: Date?
    /// When the state last became inside (a dwell is never dated before it).
    var insideSince: Date?
    var dwellFired = false
    var seq = 0
    /// The venue's erasure count when this membership began (nil: 0), part of its event ids.
    var epoch: Int?

    private enum CodingKeys: String, CodingKey {
        case state, lastKnown, pendingBox = "pending", enteredAt, insideSince, dwellFired, seq, epoch
    }

    init(seq: Int = 0, epoch: Int = 0) {
        self.seq = seq
        self.epoch = epoch == 0 ? nil : epoch
    }

    /// Where the state is going: the pending change, else the state.
    var heading: MembershipState { pending?.state ?? state }

    /// Confirmed inside, with nothing pending.
    var isSettledInside: Bool { state == .inside && pending == nil }

    /// Whether time alone can change something: a pending delay, or a dwell not yet fired.
    func awaitsTimer(hasDwell: Bool) -> Bool {
        pending != nil || (state == .inside && !dwellFired && hasDwell)
    }

    /// Applies one decisive observation.
    mutating func observe(
        _ target: MembershipState, at t: Date, evidence: Evidence, _ context: MembershipContext
    ) -> [RegionEvent] {
        if state == target {
            pending = nil
            return []
        }
        let delay = target == .inside ? context.region.enterDelay : context.region.exitDelay
        if delay <= 0 { return confirm(target, at: t, evidence: evidence, context) }
        if let pending, pending.state == target {
            guard t.timeIntervalSince(pending.since) >= delay else { return [] }
            return confirm(target, at: pending.since.addingTimeInterval(delay), evidence: pending.evidence, context)
        }
        pending = Pending(state: target, since: t, evidence: evidence)
        return []
    }

    /// Makes `target` the confirmed state and emits what that means.
    mutating func confirm(
        _ target: MembershipState, at t: Date, evidence: Evidence, _ context: MembershipContext,
        interpolated: Bool = false
    ) -> [RegionEvent] {
        let region = context.region
        var events = [
            RegionEvent.state(
                region: region.id, subject: context.subject, state: target, at: t,
                reason: interpolated ? "crossing" : nil)
        ]
        let previouslyKnown = lastKnown
        state = target
        pending = nil
        lastKnown = target
        if target == .inside {
            insideSince = t
            if previouslyKnown != .inside {
                enteredAt = t
                dwellFired = false
                if region.notifyOnEntry {
                    events.append(transition(.enter, at: t, evidence: evidence, context, interpolated: interpolated))
                }
            }
            events += dwellIfDue(now: t, context)
        } else if target == .outside {
            if previouslyKnown == .inside && region.notifyOnExit {
                events.append(transition(.exit, at: t, evidence: evidence, context, interpolated: interpolated))
            }
            enteredAt = nil
            insideSince = nil
        }
        // The state says how many transitions the membership has counted, this one's included.
        events[0].seq = seq
        return events
    }

    /// Confirms a pending change and a dwell that fall due by `horizon`.
    mutating func confirmDue(by horizon: Date, _ context: MembershipContext) -> [RegionEvent] {
        var events: [RegionEvent] = []
        if let pending {
            let delay = pending.state == .inside ? context.region.enterDelay : context.region.exitDelay
            let due = pending.since.addingTimeInterval(delay)
            if due <= horizon { events += confirm(pending.state, at: due, evidence: pending.evidence, context) }
        }
        return events + dwellIfDue(now: horizon, context)
    }

    mutating func dwellIfDue(now: Date, _ context: MembershipContext) -> [RegionEvent] {
        guard let dwellAfter = context.region.dwellAfter, state == .inside, !dwellFired, let enteredAt else {
            return []
        }
        let due = max(enteredAt.addingTimeInterval(dwellAfter), insideSince ?? enteredAt)
        guard due <= now else { return [] }
        dwellFired = true
        return [transition(.dwell, at: due, evidence: Evidence(source: "timer"), context, interpolated: false)]
    }

    /// inside/outside → unknown (stale evidence, an agent gone offline); nil when already not known.
    mutating func makeUnknown(at t: Date, reason: String, _ context: MembershipContext) -> RegionEvent? {
        guard state == .inside || state == .outside else { return nil }
        state = .unknown
        pending = nil
        return .state(
            region: context.region.id, subject: context.subject, state: .unknown, at: t, reason: reason, seq: seq,
            lastKnown: lastKnown)
    }

    mutating func setUnmonitored(at t: Date, reason: String, _ context: MembershipContext) -> RegionEvent {
        state = .unmonitored
        pending = nil
        return .state(
            region: context.region.id, subject: context.subject, state: .unmonitored, at: t, reason: reason, seq: seq)
    }

    private mutating func transition(
        _ kind: RegionEvent.Kind, at t: Date, evidence: Evidence, _ context: MembershipContext, interpolated: Bool
    ) -> RegionEvent {
        seq += 1
        return RegionEvent(
            kind: kind, region: context.region.id, subject: context.subject, t: t, seq: seq,
            id: RegionEvent.makeID(
                venue: context.venue, region: context.region.id, subject: context.subject, kind: kind, seq: seq,
                epoch: epoch ?? 0, hasher: context.hasher.implementation),
            source: evidence.source, fix: evidence.fix, refinement: evidence.refinement, interpolated: interpolated)
    }
}
