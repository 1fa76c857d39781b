import Foundation

/// Tunables of the geofence state machine (DESIGN.md §3), per venue.
public struct GeofenceParameters: Sendable, Hashable {
    /// Venue name, part of every event id.
    public var venue: String
    /// The SHA-256 event ids are made with.
    public var idHasher = EventIDHasher()
    /// A fix is inside when `d ≤ −accuracy·kIn`.
    public var kIn: Double
    /// A fix is outside when `d ≥ accuracy·kOut + exitBuffer`.
    public var kOut: Double
    /// With no fix for this long, a subject's states become `unknown`.
    public var staleAfter: TimeInterval
    /// Reject fixes that carry no accuracy (else they count as exact).
    public var requireAccuracy: Bool
    /// Two fixes further apart than this are not joined into a segment for crossing detection.
    public var crossingMaxGap: TimeInterval
    /// A subject's state for a region is first determined (and published) when a fix comes
    /// within this many metres (plus its accuracy) of the region; farther regions are simply
    /// not near, and get no state.
    public var neighbourhood: Double
    /// The venue's time zone, for region schedules.
    public var timeZone: TimeZone

    public init(
        venue: String = "default", kIn: Double = 1, kOut: Double = 1, staleAfter: TimeInterval = 300,
        requireAccuracy: Bool = false, crossingMaxGap: TimeInterval = 900, neighbourhood: Double = 50,
        timeZone: TimeZone = TimeZone(identifier: "UTC")!
    ) {
        self.neighbourhood = neighbourhood
        self.venue = venue
        self.kIn = kIn
        self.kOut = kOut
        self.staleAfter = staleAfter
        self.requireAccuracy = requireAccuracy
        self.crossingMaxGap = crossingMaxGap
        self.timeZone = timeZone
    }
}

/// The per-(subject, region) state machine over a venue's geographic regions.
///
/// Pure: no I/O and no clock. Time comes from the fixes and from ``advance(to:)``, so the same
/// fixes and ticks always give the same events with the same ids, in event-time order for
/// each subject.
///
/// - A fix is *inside* a region when its signed distance `d ≤ −acc·kIn`, *outside* when
///   `d ≥ acc·kOut + exitBuffer`, otherwise ambiguous: the state does not change.
/// - A change is confirmed after the region's `enterDelay` / `exitDelay` (at the moment the
///   delay runs out); a contrary fix before then cancels it.
/// - `enter` fires when the subject is confirmed inside and was last known outside (or was
///   never known); `exit` only when it was last known inside: going stale is not an exit, and
///   coming back in after a stale spell is the same stay.
/// - Two fixes both outside whose segment runs through a region give an interpolated enter
///   and exit (a sparse tracker crossing a small fence).
/// - `dwell` fires once per stay, `dwellAfter` seconds after entering.
public struct GeofenceEngine: Sendable {
    public let parameters: GeofenceParameters
    public private(set) var index: GeofenceIndex
    private var subjects = SubjectTable<Track>()
    /// Sequence numbers of removed regions' memberships, by region then subject, so that a
    /// region removed and added again never reuses an event id.
    private var retired: [String: [String: Int]] = [:]
    /// How many subjects were erased: memberships begun since carry it in their ids.
    private var erasures = 0
    /// Subjects taken over from their retained states (``adopt(subject:region:state:seq:since:lastKnown:now:)``)
    /// and not observed since, with when: they go stale `staleAfter` after that, not after
    /// their states' time (their old holder had not marked them stale, so it had observed them
    /// more recently than their states say).
    private var adoptedAt: [String: Date] = [:]
    /// The largest `exitBuffer` of any region, so candidate searches reach far enough.
    private var maxExitBuffer: Double
    private let calendar: Calendar

    /// A subject's history as far as the state machine needs it.
    struct Track: Sendable, Codable {
        var lastFix: Fix?
        var lastTime: Date?
        /// The latest event time published for the subject (interpolated events never go before it).
        var lastEmitted: Date?
        var stale = false
        /// One or two entries for nearly every subject: a small map, not a hash table (~120 B less).
        var memberships = SmallMap<Membership>()
    }

    public init(regions: [Region], parameters: GeofenceParameters = GeofenceParameters()) {
        self.parameters = parameters
        index = GeofenceIndex(regions.filter(\.isGeographic))
        maxExitBuffer = regions.reduce(0) { max($0, $1.exitBuffer) }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = parameters.timeZone
        self.calendar = calendar
    }

    /// What a restart needs besides the regions: every subject's track and the sequence numbers
    /// of removed regions. Restoring it into an engine built on the same regions continues
    /// exactly where this one stands.
    public struct Snapshot: Sendable, Codable {
        var subjects: SubjectTable<Track>
        var retired: [String: [String: Int]]
        /// Absent from snapshots written before erasure epochs.
        var erasures: Int? = nil
        /// Absent from snapshots written before beacon handovers.
        var adoptedAt: [String: Date]? = nil
    }

    public var snapshot: Snapshot {
        Snapshot(subjects: subjects, retired: retired, erasures: erasures, adoptedAt: adoptedAt)
    }

    public mutating func restore(_ snapshot: Snapshot) {
        subjects = snapshot.subjects
        retired = snapshot.retired
        erasures = snapshot.erasures ?? 0
        adoptedAt = snapshot.adoptedAt ?? [:]
    }

    /// Erases a subject: its track and every sequence number it had (nothing naming it is
    /// kept); the next memberships anyone begins carry the new erasure count in their ids.
    public mutating func erase(subject: String, at t: Date) -> [RegionEvent] {
        let events = forget(subject: subject, at: t, reason: "erased")
        for region in retired.keys.sorted() {
            retired[region]?[subject] = nil
            if retired[region]?.isEmpty == true { retired[region] = nil }
        }
        erasures += 1
        return events
    }

    /// The confirmed state of `subject` for `region` (`unknown` when never evaluated).
    public func state(subject: String, region: String) -> MembershipState {
        subjects[subject]?.memberships[region]?.state ?? .unknown
    }

    /// Subjects the engine has seen.
    public var subjectCount: Int { subjects.count }

    // MARK: - Fixes

    /// Checks a fix without using it.
    public func validate(_ fix: Fix) -> FixRejection? {
        let point = fix.position
        if fix.subject.isEmpty { return .emptySubject }
        if !point.lat.isFinite || !point.lon.isFinite { return .notFinite(latitude: point.lat, longitude: point.lon) }
        if abs(point.lat) > 90 { return .latitudeOutOfRange(point.lat) }
        if abs(point.lon) > 180 { return .longitudeOutOfRange(point.lon) }
        if let accuracy = fix.accuracy {
            if !accuracy.isFinite { return .accuracyNotFinite }
            if accuracy < 0 { return .negativeAccuracy(accuracy) }
        } else if parameters.requireAccuracy {
            return .accuracyRequired
        }
        if let last = subjects[fix.subject]?.lastTime, fix.t < last { return .outOfOrder(t: fix.t, last: last) }
        return nil
    }

    /// Runs one fix through every region it could affect.
    /// - Returns: the events, in event-time order, or why the fix was rejected (nothing changes then).
    public mutating func process(_ fix: Fix) -> Result<[RegionEvent], FixRejection> {
        if let rejection = validate(fix) { return .failure(rejection) }
        var events = advance(subject: fix.subject, to: fix.t)
        var track = subjects[fix.subject] ?? Track()
        let accuracy = fix.accuracy ?? 0
        let margin = accuracy * max(parameters.kIn, parameters.kOut)

        // Regions the fix may be inside or near, and every region the subject has a state for.
        var candidates: [String: PreparedRegion] = [:]
        for region in index.regions(near: fix.position, meters: margin + maxExitBuffer + parameters.neighbourhood) {
            candidates[region.id] = region
        }
        for id in track.memberships.keys where candidates[id] == nil {
            if let region = index[id] { candidates[id] = region }
        }
        // Regions a straight line from the previous fix could have run through.
        var segmentRegions: Set<String> = []
        if let previous = track.lastFix, fix.t.timeIntervalSince(previous.t) <= parameters.crossingMaxGap,
            previous.position != fix.position
        {
            for region in index.regions(alongSegment: previous.position, fix.position)
            where candidates[region.id] == nil {
                candidates[region.id] = region
                segmentRegions.insert(region.id)
            }
        }

        for id in candidates.keys.sorted() {
            let region = candidates[id]!
            guard region.region.applies(to: fix.subject) else { continue }
            var membership = track.memberships[id] ?? Membership(seq: retired[id]?[fix.subject] ?? 0, epoch: erasures)
            let isNew = track.memberships[id] == nil
            let context = context(region.region, fix.subject)
            if let schedule = region.region.schedule, !schedule.isActive(at: fix.t, calendar: calendar) {
                if membership.state != .unmonitored {
                    events.append(membership.setUnmonitored(at: fix.t, reason: "schedule", context))
                    track.memberships[id] = membership
                }
                continue
            }
            if membership.state == .unmonitored {
                membership.state = .unknown
                events.append(
                    .state(
                        region: id, subject: fix.subject, state: .unknown, at: fix.t, reason: "schedule",
                        seq: membership.seq))
            }
            // Only on the line from the last fix, far from the fix itself: a crossing or nothing.
            let onlyOnSegment = segmentRegions.contains(id)
            let classification: MembershipState? =
                onlyOnSegment ? .outside : classify(fix, accuracy: accuracy, in: region)
            var crossed: [RegionEvent] = []
            if classification == .outside, membership.state == .outside || isNew, membership.pending == nil,
                let previous = track.lastFix
            {
                crossed = crossing(
                    from: previous, to: fix, region: region, notBefore: track.lastEmitted, membership: &membership)
                events += crossed
            }
            if onlyOnSegment && crossed.isEmpty { continue }
            if let classification {
                events += membership.observe(classification, at: fix.t, evidence: Evidence(fix: fix), context)
            }
            // Keep far-away regions out of the subject's table until they matter.
            if !isNew || membership.state != .unknown || membership.pending != nil {
                track.memberships[id] = membership
            }
        }
        track.lastFix = fix
        track.lastTime = fix.t
        track.stale = false
        if !adoptedAt.isEmpty { adoptedAt[fix.subject] = nil }
        let sorted = events.sortedForPublishing()
        if let last = sorted.last { track.lastEmitted = max(track.lastEmitted ?? last.t, last.t) }
        subjects[fix.subject] = track
        return .success(sorted)
    }

    /// inside / outside / nil (ambiguous, or not judged) for one fix and region.
    private func classify(_ fix: Fix, accuracy: Double, in region: PreparedRegion) -> MembershipState? {
        if let required = region.region.minAccuracy {
            guard let reported = fix.accuracy, reported <= required else { return nil }
        }
        if let floor = fix.floor, let regionFloor = region.region.floor, floor != regionFloor { return .outside }
        let inside = accuracy * parameters.kIn
        let outside = accuracy * parameters.kOut + region.region.exitBuffer
        let distance = region.signedDistance(fix.position, limit: max(inside, outside) + 1)
        if distance <= -inside { return .inside }
        if distance >= outside { return .outside }
        return nil
    }

    /// The enter/exit pair for a straight run through `region` between two outside fixes.
    private func crossing(
        from previous: Fix, to fix: Fix, region: PreparedRegion, notBefore: Date?, membership: inout Membership
    ) -> [RegionEvent] {
        let gap = fix.t.timeIntervalSince(previous.t)
        guard gap <= parameters.crossingMaxGap, gap > 0,
            let span = region.crossing(from: previous.position, to: fix.position)
        else { return [] }
        // The stretch between entry and exit must lie inside by the fixes' accuracy, not graze the edge.
        let middleFraction = (span.enter + span.exit) / 2
        let end = PreparedPolygon.nearestCopy(of: fix.position, to: previous.position)
        var middle = GeoPoint(
            lon: previous.position.lon + (end.lon - previous.position.lon) * middleFraction,
            lat: previous.position.lat + (end.lat - previous.position.lat) * middleFraction)
        if middle.lon > 180 { middle.lon -= 360 }
        if middle.lon < -180 { middle.lon += 360 }
        let accuracy = max(previous.accuracy ?? 0, fix.accuracy ?? 0)
        guard region.signedDistance(middle, limit: accuracy * parameters.kIn + 1) <= -accuracy * parameters.kIn
        else { return [] }
        // Events already published for the subject (by a tick) may be later than the
        // interpolated times; keep the subject's events in order.
        let floor = notBefore ?? previous.t
        let enterTime = max(previous.t.addingTimeInterval(gap * span.enter), floor)
        let exitTime = max(previous.t.addingTimeInterval(gap * span.exit), floor)
        // A stay shorter than the enter delay would not have been confirmed.
        guard exitTime.timeIntervalSince(enterTime) >= region.region.enterDelay else { return [] }
        let context = context(region.region, fix.subject)
        let evidence = Evidence(source: fix.source)
        var events = membership.confirm(.inside, at: enterTime, evidence: evidence, context, interpolated: true)
        events += membership.dwellIfDue(now: exitTime, context)
        events += membership.confirm(.outside, at: exitTime, evidence: evidence, context, interpolated: true)
        return events.map { event in
            var event = event
            event.source = fix.source
            return event
        }
    }

    // MARK: - Time

    /// Confirms delayed transitions and dwells that fall due by `now`, moves subjects without a
    /// fix for `staleAfter` to `unknown`, and applies region schedules. Call it periodically
    /// (services) or before each fix (replay does, through ``process(_:)``).
    public mutating func advance(to now: Date) -> [RegionEvent] {
        // Most subjects have nothing that can fall due: settled states, no delay or dwell
        // pending, not about to go stale. Only the others are advanced, in subject order as
        // before: a tick costs one scan, not a sort and a rewrite of every track (at 30,000
        // subjects each tick took 0.6 s, most of an idle evaluator's CPU).
        var due: [String] = []
        for (subject, track) in subjects where mayHaveSomethingDue(subject, track, at: now) { due.append(subject) }
        var events: [RegionEvent] = []
        for subject in due.sorted() {
            events += advance(subject: subject, to: now)
        }
        return events
    }

    /// False only when ``advance(subject:to:)`` would change nothing for this track at `now`:
    /// it is already stale or not yet due to be, and no membership has a pending change, a dwell
    /// still to fire or a schedule to follow.
    private func mayHaveSomethingDue(_ subject: String, _ track: Track, at now: Date) -> Bool {
        if !track.stale, let last = staleFrom(subject, track), last.addingTimeInterval(parameters.staleAfter) <= now {
            return true
        }
        for (id, membership) in track.memberships {
            if membership.pending != nil { return true }
            guard let region = index[id]?.region else { continue }
            if region.schedule != nil && membership.state != .unmonitored { return true }
            if region.dwellAfter != nil && membership.state == .inside && !membership.dwellFired
                && membership.enteredAt != nil
            {
                return true
            }
        }
        return false
    }

    private mutating func advance(subject: String, to now: Date) -> [RegionEvent] {
        guard var track = subjects[subject] else { return [] }
        var events: [RegionEvent] = []
        let staleAt = staleFrom(subject, track).map { $0.addingTimeInterval(parameters.staleAfter) }
        let horizon = staleAt.map { min($0, now) } ?? now
        for id in track.memberships.keys.sorted() {
            guard var membership = track.memberships[id], let region = index[id]?.region else { continue }
            let context = context(region, subject)
            events += membership.confirmDue(by: horizon, context)
            if let schedule = region.schedule, membership.state != .unmonitored,
                !schedule.isActive(at: now, calendar: calendar)
            {
                events.append(membership.setUnmonitored(at: now, reason: "schedule", context))
            }
            track.memberships[id] = membership
        }
        if let staleAt, staleAt <= now, !track.stale {
            track.stale = true
            events += makeUnknown(&track, subject: subject, at: staleAt, reason: "stale")
        }
        let sorted = events.sortedForPublishing()
        if let last = sorted.last { track.lastEmitted = max(track.lastEmitted ?? last.t, last.t) }
        subjects[subject] = track
        return sorted
    }

    private func makeUnknown(_ track: inout Track, subject: String, at t: Date, reason: String) -> [RegionEvent] {
        var events: [RegionEvent] = []
        for id in track.memberships.keys.sorted() {
            guard let region = index[id]?.region else { continue }
            if let event = track.memberships[id]!.makeUnknown(at: t, reason: reason, context(region, subject)) {
                events.append(event)
            }
        }
        return events
    }

    private func context(_ region: Region, _ subject: String) -> MembershipContext {
        MembershipContext(venue: parameters.venue, region: region, subject: subject, hasher: parameters.idHasher)
    }

    /// Moves every state of `subject` to unknown (e.g. its agent's last will said it went
    /// offline). No exit is invented; the next fix decides.
    public mutating func markUnknown(subject: String, at t: Date, reason: String) -> [RegionEvent] {
        guard var track = subjects[subject] else { return [] }
        let events = makeUnknown(&track, subject: subject, at: t, reason: reason)
        subjects[subject] = track
        return events
    }

    /// Forgets a subject (it may no longer be observed, or is erased): every state it had
    /// reads `unmonitored`. Sequence numbers are kept, so ids are never reused.
    /// Subjects whose last fix is dated after `t`, sorted (a clock that ran ahead, repaired at start).
    public func subjects(observedAfter t: Date) -> [String] {
        subjects.filter { ($0.value.lastTime ?? .distantPast) > t }.map(\.key).sorted()
    }

    /// What the subject's staleness counts from: its last observation, or its takeover when later.
    private func staleFrom(_ subject: String, _ track: Track) -> Date? {
        guard !adoptedAt.isEmpty, let adopted = adoptedAt[subject] else { return track.lastTime }
        return max(track.lastTime ?? adopted, adopted)
    }

    public mutating func forget(subject: String, at t: Date, reason: String) -> [RegionEvent] {
        adoptedAt[subject] = nil
        guard let track = subjects.removeValue(forKey: subject) else { return [] }
        var events: [RegionEvent] = []
        for id in track.memberships.keys.sorted() {
            retired[id, default: [:]][subject] = track.memberships[id]!.seq
            events.append(
                .state(
                    region: id, subject: subject, state: .unmonitored, at: t, reason: reason,
                    seq: track.memberships[id]!.seq))
        }
        return events
    }

    /// Takes a subject's membership of a region over as another evaluator left it, from its
    /// retained `state` (docs/scale.md, "Handover"): the state, the transitions counted so far
    /// (so the next one has the id the other would have given it) and when it began, which
    /// becomes the subject's last observation time (older observations replayed after it are
    /// refused as out of order; newer ones go on from the state; it goes stale `staleAfter`
    /// after `now` at the earliest, as its old holder had not marked it so). An `unknown` state keeps
    /// `lastKnown` (coming back inside after an unknown spell that began inside is the same
    /// stay, without an enter; its dwell counts as fired). What the retained state does not say
    /// starts empty: the last fix, a pending delayed change; a dwell counts as fired when it
    /// was due by `now`. Publishes nothing. An unknown region is ignored.
    public mutating func adopt(
        subject: String, region id: String, state: MembershipState, seq: Int, since t: Date,
        lastKnown: MembershipState? = nil, now: Date
    ) {
        guard let region = index[id]?.region, state != .unmonitored else { return }
        var track = subjects[subject] ?? Track()
        var membership = Membership(seq: max(seq, retired[id]?[subject] ?? 0), epoch: erasures)
        membership.state = state
        membership.lastKnown = state == .unknown ? lastKnown : state
        if state == .inside {
            membership.enteredAt = t
            membership.insideSince = t
            membership.dwellFired = region.dwellAfter.map { t.addingTimeInterval($0) <= now } ?? false
        } else if state == .unknown && lastKnown == .inside {
            // When the stay began is not retained: no dwell is made for it (none invented).
            membership.dwellFired = true
        }
        track.memberships[id] = membership
        track.lastTime = max(track.lastTime ?? t, t)
        track.stale = false
        subjects[subject] = track
        adoptedAt[subject] = max(adoptedAt[subject] ?? now, now)
    }

    // MARK: - Regions

    /// Adds or replaces a region. States for it are kept; ``reevaluate(regionID:at:)`` re-decides them.
    public mutating func upsert(_ region: Region) {
        guard region.isGeographic else { return }
        index.upsert(region)
        maxExitBuffer = max(maxExitBuffer, region.exitBuffer)
    }

    /// Re-decides, against each subject's last fix, the state of every subject that has one
    /// for `regionID` (after the region changed shape): a region shrunk away from a subject
    /// gives its exit now, dated `t`, with `source: "regionChanged"`, instead of waiting for the
    /// subject's next fix. Unknown and unmonitored states, and subjects whose last fix is stale,
    /// stay as they are; delays apply as for a fix.
    public mutating func reevaluate(regionID: String, at t: Date) -> [RegionEvent] {
        guard let region = index[regionID] else { return [] }
        var events: [RegionEvent] = []
        for subject in subjects.keys.sorted() {
            guard var track = subjects[subject], !track.stale, let fix = track.lastFix,
                var membership = track.memberships[regionID],
                membership.state == .inside || membership.state == .outside
            else { continue }
            if let schedule = region.region.schedule, !schedule.isActive(at: t, calendar: calendar) { continue }
            guard region.region.applies(to: subject),
                let classification = classify(fix, accuracy: fix.accuracy ?? 0, in: region),
                classification != membership.heading
            else { continue }
            let at = max(t, track.lastEmitted ?? t)
            let produced = membership.observe(
                classification, at: at, evidence: Evidence(fix: fix, source: "regionChanged"),
                context(region.region, subject))
            track.memberships[regionID] = membership
            if let last = produced.last { track.lastEmitted = max(track.lastEmitted ?? last.t, last.t) }
            subjects[subject] = track
            events += produced
        }
        return events
    }

    /// Removes a region; every subject with a state for it gets `unmonitored`.
    public mutating func remove(regionID: String, at t: Date) -> [RegionEvent] {
        guard index.remove(id: regionID) else { return [] }
        var events: [RegionEvent] = []
        for subject in subjects.keys.sorted() {
            guard let membership = subjects[subject]?.memberships.removeValue(forKey: regionID) else { continue }
            retired[regionID, default: [:]][subject] = membership.seq
            events.append(
                .state(region: regionID, subject: subject, state: .unmonitored, at: t, reason: "regionRemoved"))
        }
        return events
    }
}

extension Array where Element == RegionEvent {
    /// Event-time order; at equal times a region's state comes before its transition, and
    /// regions follow each other by id, so the order is deterministic.
    func sortedForPublishing() -> [RegionEvent] {
        if count < 2 || zip(self, dropFirst()).allSatisfy({ $0.t <= $1.t }) { return self }
        return enumerated().sorted { left, right in
            if left.element.t != right.element.t { return left.element.t < right.element.t }
            return left.offset < right.offset
        }.map(\.element)
    }
}
