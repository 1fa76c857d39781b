import Foundation

/// What the privacy gate adds to or changes in the evaluator's outputs.
public enum PrivacyOutput: Sendable, Hashable {
    /// An event consumers may have (held ones come with `held: true` and their original time).
    case deliver(RegionEvent)
    /// The subject's retained `diagnostics/{s}` changed.
    case diagnostics(subject: String, JSONValue)
    /// Ask the subject, once ever, to upgrade to always (`subjects/{s}/prompt`).
    case prompt(subject: String)
    /// Ask the subject (reduced accuracy) for temporary full accuracy on behalf of a session
    /// that declared a purpose (`subjects/{s}/prompt`).
    case fullAccuracyRequest(subject: String, session: String, purpose: String)
    /// The gate changed the subject's record (allow once reverting): republish it, retained.
    case authorization(subject: String, AuthorizationRecord)
    /// The subject may no longer be observed: forget it, its states read `unmonitored`.
    case unmonitor(subject: String, reason: String)
    /// A transition consumers may not have (withheld or held) that the subject's own device may
    /// still be notified of (rule 10): for the notifier only, on `self/…`.
    case notifySelf(RegionEvent)
}

/// The Core Location authorization model on the server, between the engines and everything
/// that leaves the evaluator (DESIGN.md §5). Pure: time comes from events and ticks.
///
/// - notDetermined, denied, restricted: observations are dropped at ingest (``admits(_:)``);
///   the subject's states read `unmonitored`.
/// - In use = foreground, or a background session the subject started, or within
///   `inUseGrace` after leaving the foreground.
/// - whenInUse: events are delivered only if the subject was in use at the event's time
///   (else not delivered, not held); ranging only while in use.
/// - always: delivered at any time (as far as the sessions ask for).
/// - provisionalAlways: in-use events are delivered; the others are held, one per (subject,
///   region), newest wins, dropped after `heldMaxAge`; an upgrade to always delivers them
///   (`held: true`, original time), whenInUse discards them; the upgrade prompt goes out once
///   per subject, the first time it is in use while it has held events.
/// - Allow once (temporary whenInUse) reverts to notDetermined when the subject stops being
///   in use (after the grace).
/// - Reduced accuracy: fixes are snapped to a grid; regions smaller than the grid, beacon
///   regions and ranging give `accuracyLimited` instead of events.
/// - Sessions layer: the requirement is the union of the sessions covering the subject; with
///   none, events are withheld (`serviceSessionRequired`).
/// - The retained picture follows access: a withheld state change is kept and delivered when
///   the subject's access widens (only states, no made-up transitions); a live event drops the
///   held one of the same region, which it supersedes.
public struct PrivacyGate: Sendable {
    public let settings: PrivacySettings
    private var state = State()

    /// Everything the gate remembers (snapshotted with the evaluator).
    public struct State: Sendable, Codable {
        var records = SubjectTable<AuthorizationRecord>()
        var usage = SubjectTable<UsageMarks>()
        var sessions: [String: ServiceSession] = [:]
        var held: [String: [RegionEvent]] = [:]
        var prompted: Set<String> = []
        /// Allow-once subjects that have been in use since their grant.
        var usedSinceGrant: Set<String> = []
        /// Per subject, the diagnostics last published (their fingerprint: only change matters).
        var diagnostics = SubjectTable<Fingerprint>()
        var counters: [String: Int] = [:]
        /// The latest time the gate has seen, for "now" questions outside ticks.
        var now: Date = .distantPast
        /// Per subject and region, the latest state change consumers were not given: the retained
        /// `state/{region}/{subject}` still shows the one before it. Delivered as soon as the
        /// subject's access widens (``resynchronize(_:at:)``). Absent from older snapshots.
        var withheldStates: [String: [String: WithheldState]]? = nil
        /// Subjects without an authorization record whose observations were dropped, told once
        /// (a diagnostic and a log line); bounded by ``PrivacyGate/unrecordedLimit``.
        var unrecorded: Set<String>? = nil
    }

    /// How many subjects without a record the gate tells about (each a retained diagnostics topic).
    public static let unrecordedLimit = 10_000

    /// A state change withheld from consumers, and whether its region needs full accuracy.
    struct WithheldState: Sendable, Codable {
        var event: RegionEvent
        var precise: Bool
    }

    struct UsageMark: Sendable, Codable {
        var t: Date
        var inUse: Bool
        var background: Bool
        var active: Bool { inUse || background }
    }

    public init(settings: PrivacySettings) { self.settings = settings }

    public init(settings: PrivacySettings, restoring state: State) {
        self.settings = settings
        self.state = state
    }

    public var snapshot: State { state }

    /// Counters: drops at ingest by reason, withheld by reason, held, superseded, expired, discarded.
    public var counters: [String: Int] { state.counters }

    // MARK: - Questions

    /// The subject's status: its record, else the venue's default (assets: `assetStatus`).
    public func status(of subject: String) -> AuthorizationStatus {
        if let record = state.records[subject] { return record.status }
        if !settings.assets.isEmpty, let identity = BeaconIdentity(canonical: subject),
            settings.assets.contains(where: { $0.matches(identity) })
        {
            return settings.assetStatus
        }
        return settings.defaultStatus
    }

    /// Reduced accuracy now: the subject chose it and no temporary full-accuracy grant is in force.
    public func isReduced(_ subject: String) -> Bool {
        guard let record = state.records[subject], record.reducedAccuracy else { return false }
        return !hasTemporaryFullAccuracy(subject)
    }

    /// Whether a temporary full-accuracy grant is in force: the session it names exists, covers
    /// the subject and still declares a `fullAccuracyPurpose`.
    public func hasTemporaryFullAccuracy(_ subject: String) -> Bool {
        temporaryFullAccuracyGrant(of: subject) != nil
    }

    /// The temporary full-accuracy grant in force for `subject`, if any: the session it was
    /// granted to (`{consumer}/{session}`) and that session's purpose. It lasts as long as the
    /// session exists, covers the subject and declares the purpose; it has no time of its own.
    public func temporaryFullAccuracyGrant(of subject: String) -> (session: String, purpose: String)? {
        guard let record = state.records[subject], record.reducedAccuracy, let key = record.temporaryFullAccuracy,
            let session = state.sessions[key], session.covers(subject), let purpose = session.fullAccuracyPurpose
        else { return nil }
        return (key, purpose)
    }

    /// Whether observations of `subject` may be used; nil when yes, else the reason it is dropped.
    public func refusal(of subject: String) -> String? {
        switch status(of: subject) {
        case .notDetermined: "authorizationNotDetermined"
        case .denied: "authorizationDenied"
        case .restricted: "authorizationRestricted"
        case .whenInUse, .always, .provisionalAlways: nil
        }
    }

    /// Counts an observation dropped at ingest.
    public mutating func noteDropped(_ reason: String) { state.counters["dropped.\(reason)", default: 0] += 1 }

    /// An observation of `subject` was dropped and the subject has no authorization record:
    /// the first time, its diagnostics say so (`authorizationRecordMissing`) — nothing is
    /// dropped silently. Returns nil when this subject was told about already (or the bound is reached).
    public mutating func noteUnrecorded(_ subject: String, at t: Date) -> [PrivacyOutput]? {
        guard state.records[subject] == nil else { return nil }
        var unrecorded = state.unrecorded ?? []
        guard unrecorded.count < Self.unrecordedLimit, unrecorded.insert(subject).inserted else { return nil }
        state.unrecorded = unrecorded
        state.now = max(state.now, t)
        return refreshDiagnostics(subject, at: t)
    }

    /// In use at `t`: foreground or a background session, or within the grace after leaving.
    public func isInUse(_ subject: String, at t: Date) -> Bool {
        guard let marks = state.usage[subject] else { return false }
        guard let index = marks.lastIndex(where: { $0.t <= t }) else { return false }
        if marks[index].active { return true }
        // Not in use since marks[index].t: still within the grace if it had been in use just before.
        if index > 0, marks[index - 1].active { return t.timeIntervalSince(marks[index].t) <= settings.inUseGrace }
        return false
    }

    /// The sessions covering a subject (declared and default).
    func sessions(covering subject: String) -> [ServiceSession] {
        (state.sessions.sorted { $0.key < $1.key }.map(\.value) + settings.defaultSessions).filter {
            $0.covers(subject)
        }
    }

    /// A fix as the subject allows it to be used: snapped to the reduced-accuracy grid (cell
    /// centres), its accuracy raised to the grid size.
    public func coarsen(_ fix: Fix) -> Fix {
        isReduced(fix.subject) ? snap(fix) : fix
    }

    /// Whether the subject's record says `reduced`, whatever temporary grant is in force.
    public func choseReducedAccuracy(_ subject: String) -> Bool {
        state.records[subject]?.reducedAccuracy == true
    }

    /// The fix as reduced accuracy lets it out: the centre of its `reducedAccuracyMeters` grid
    /// cell, its accuracy raised to the cell's size.
    public func snap(_ fix: Fix) -> Fix {
        let meters = settings.reducedAccuracyMeters
        let metresPerDegree = 111_320.0
        let latStep = meters / metresPerDegree
        var lat = ((fix.position.lat / latStep).rounded(.down) + 0.5) * latStep
        lat = min(90, max(-90, lat))
        let lonStep = min(360, meters / (metresPerDegree * max(0.01, cos(lat * .pi / 180))))
        var lon = ((fix.position.lon / lonStep).rounded(.down) + 0.5) * lonStep
        lon = min(180, max(-180, lon))
        var coarse = fix
        coarse.position = GeoPoint(lon: lon, lat: lat)
        coarse.accuracy = max(fix.accuracy ?? 0, meters)
        return coarse
    }

    // MARK: - Events

    /// Why an event of `subject` at `t` cannot go to consumers now, and whether it is held.
    enum Verdict: Equatable {
        case deliver
        case hold
        case withhold(String)
    }

    func verdict(subject: String, at t: Date, precise: Bool, canHold: Bool) -> Verdict {
        let status = status(of: subject)
        if let refusal = refusal(of: subject) { return .withhold(refusal) }
        let covering = sessions(covering: subject)
        guard let level = covering.map(\.level).max() else { return .withhold("serviceSessionRequired") }
        if precise && isReduced(subject) { return .withhold("accuracyLimited") }
        let inUse = isInUse(subject, at: t)
        switch status {
        case .always:
            return level == .always || inUse ? .deliver : .withhold("insufficientlyInUse")
        case .whenInUse:
            return inUse ? .deliver : .withhold("insufficientlyInUse")
        case .provisionalAlways:
            if inUse { return .deliver }
            return canHold && level == .always ? .hold : .withhold("insufficientlyInUse")
        case .notDetermined, .denied, .restricted:
            return .withhold("authorization")
        }
    }

    /// Gates one event. `precise`: the region is a beacon region or smaller than the
    /// reduced-accuracy grid (no event for a subject with reduced accuracy).
    public mutating func gate(_ event: RegionEvent, precise: Bool) -> [PrivacyOutput] {
        state.now = max(state.now, event.t)
        let verdict = verdict(subject: event.subject, at: event.t, precise: precise, canHold: event.kind != .state)
        var outputs: [PrivacyOutput] = []
        if verdict != .deliver, event.kind != .state, allowsSelfNotification(event.subject, precise: precise) {
            outputs.append(.notifySelf(event))
        }
        if event.kind == .state {
            // The retained state must equal what the delivered events imply: a state change
            // consumers may not have now is kept, and delivered when their access widens.
            var withheld = state.withheldStates ?? [:]
            if verdict == .deliver {
                withheld[event.subject]?[event.region] = nil
                if withheld[event.subject]?.isEmpty == true { withheld[event.subject] = nil }
            } else {
                withheld[event.subject, default: [:]][event.region] = WithheldState(event: event, precise: precise)
            }
            state.withheldStates = withheld
        }
        switch verdict {
        case .deliver:
            // A held event of the same region is older than this one and would contradict it if
            // an upgrade delivered it later (a held enter after a live exit): it is dropped.
            if event.kind != .state, let held = state.held[event.subject],
                let index = held.firstIndex(where: { $0.region == event.region })
            {
                var kept = held
                kept.remove(at: index)
                state.held[event.subject] = kept.isEmpty ? nil : kept
                state.counters["superseded", default: 0] += 1
            }
            outputs.append(.deliver(event))
        case .withhold(let reason):
            state.counters["withheld.\(reason)", default: 0] += 1
        case .hold:
            var held = state.held[event.subject] ?? []
            if let index = held.firstIndex(where: { $0.region == event.region }) {
                held.remove(at: index)
                state.counters["superseded", default: 0] += 1
            }
            held.append(event)
            state.held[event.subject] = held
            state.counters["held", default: 0] += 1
            outputs += promptIfDue(event.subject, at: state.now)
        }
        return outputs + refreshDiagnostics(event.subject, at: state.now)
    }

    /// Whether a ranging report of `subject` at `t` may go out: as an event would (so for
    /// whenInUse and provisional subjects only while in use), never with reduced accuracy.
    public func allowsRanging(_ subject: String, at t: Date) -> Bool {
        verdict(subject: subject, at: t, precise: true, canHold: false) == .deliver
    }

    /// Whether something less precise than an event (a place, the subject's own OwnTracks
    /// transitions) may go out at `t`.
    public func allows(_ subject: String, at t: Date, precise: Bool = false) -> Bool {
        verdict(subject: subject, at: t, precise: precise, canHold: false) == .deliver
    }

    /// Rule 10: a location notification to the subject itself (UNLocationNotificationTrigger)
    /// needs only when-in-use authorization and may fire while the subject is not in use; no
    /// session is needed (consumers learn nothing). A precise region still needs full accuracy.
    /// The notifier asks this; the event topics never carry what only this allows.
    public func allowsSelfNotification(_ subject: String, precise: Bool) -> Bool {
        switch status(of: subject) {
        case .whenInUse, .always, .provisionalAlways: !(precise && isReduced(subject))
        case .notDetermined, .denied, .restricted: false
        }
    }

    private mutating func promptIfDue(_ subject: String, at t: Date) -> [PrivacyOutput] {
        guard !(state.held[subject]?.isEmpty ?? true), !state.prompted.contains(subject), isInUse(subject, at: t)
        else { return [] }
        state.prompted.insert(subject)
        return [.prompt(subject: subject)]
    }

    // MARK: - Inputs

    /// A new (or removed) authorization record.
    public mutating func apply(
        authorization record: AuthorizationRecord?, subject: String, at t: Date
    )
        -> [PrivacyOutput]
    {
        state.now = max(state.now, t)
        // The removal of a record the gate never held (as after an erasure, whose clearing of the
        // retained record comes back to the evaluator) changes nothing and publishes nothing:
        // a fresh diagnostics topic would bring the erased subject back.
        if record == nil, !knows(subject) { return [] }
        let before = status(of: subject)
        state.records[subject] = record
        if record != nil { state.unrecorded?.remove(subject) }
        var outputs: [PrivacyOutput] = []
        // A grant to a session that is not (or no longer) asking for full accuracy is void: it
        // is dropped and the record republished without it, so that it cannot come back to life
        // when a session of that name is declared later.
        if var granted = record, granted.temporaryFullAccuracy != nil, !hasTemporaryFullAccuracy(subject) {
            granted.temporaryFullAccuracy = nil
            state.records[subject] = granted
            state.counters["temporaryFullAccuracy.void", default: 0] += 1
            outputs.append(.authorization(subject: subject, granted))
        }
        if record?.temporary != true { state.usedSinceGrant.remove(subject) }
        let after = status(of: subject)
        if before != after {
            if after == .always, let held = state.held.removeValue(forKey: subject) {
                for var event in held.sorted(by: { $0.t < $1.t }) {
                    event.held = true
                    outputs.append(.deliver(event))
                }
            } else if after != .provisionalAlways, let held = state.held.removeValue(forKey: subject) {
                state.counters["discarded", default: 0] += held.count
            }
            if let reason = refusal(of: subject), before.admitsObservations {
                state.withheldStates?[subject] = nil
                outputs.append(.unmonitor(subject: subject, reason: reason))
            }
        }
        outputs += resynchronize(subject, at: t)
        return outputs + refreshDiagnostics(subject, at: t)
    }

    /// `subjects/{s}/usage`: `{inUse, background}`.
    public mutating func apply(usage inUse: Bool, background: Bool, subject: String, at t: Date) -> [PrivacyOutput] {
        state.now = max(state.now, t)
        var marks = state.usage[subject]?.array ?? []
        marks.append(UsageMark(t: t, inUse: inUse, background: background))
        marks.sort { $0.t < $1.t }
        // Keep what in-use questions about held events can still ask.
        let horizon = t.addingTimeInterval(-(settings.heldMaxAge + settings.inUseGrace))
        if let keepFrom = marks.lastIndex(where: { $0.t < horizon }), keepFrom > 0 { marks.removeFirst(keepFrom) }
        state.usage[subject] = UsageMarks(marks)
        if (inUse || background) && state.records[subject]?.temporary == true { state.usedSinceGrant.insert(subject) }
        return promptIfDue(subject, at: t) + resynchronize(subject, at: t) + refreshDiagnostics(subject, at: t)
    }

    /// `sessions/{consumer}/{session}`; nil ends it.
    public mutating func apply(session: ServiceSession?, key: String, at t: Date) -> [PrivacyOutput] {
        state.now = max(state.now, t)
        let previous = state.sessions[key]
        state.sessions[key] = session
        var outputs: [PrivacyOutput] = []
        // Grants to this session end with it (or when it stops asking, or stops covering the subject).
        for (subject, record) in state.records.sorted(by: { $0.key < $1.key })
        where record.temporaryFullAccuracy == key && !hasTemporaryFullAccuracy(subject) {
            var ended = record
            ended.temporaryFullAccuracy = nil
            state.counters["temporaryFullAccuracy.ended", default: 0] += 1
            outputs.append(.authorization(subject: subject, ended))
            outputs += apply(authorization: ended, subject: subject, at: t)
        }
        // A session that newly asks for full accuracy: the subjects it covers that chose reduced
        // accuracy are asked once for a temporary grant (requestTemporaryFullAccuracy).
        if let purpose = session?.fullAccuracyPurpose, previous?.fullAccuracyPurpose != purpose {
            for (subject, record) in state.records.sorted(by: { $0.key < $1.key })
            where record.reducedAccuracy && record.status.admitsObservations && session!.covers(subject)
                && !hasTemporaryFullAccuracy(subject)
            {
                outputs.append(.fullAccuracyRequest(subject: subject, session: key, purpose: purpose))
            }
        }
        for subject in (state.withheldStates ?? [:]).keys.sorted() { outputs += resynchronize(subject, at: t) }
        for subject in knownSubjects { outputs += refreshDiagnostics(subject, at: t) }
        return outputs
    }

    /// Delivers the state changes withheld from consumers that they may have now (a session
    /// declared, the subject in use again, always granted, full accuracy): the retained
    /// `state/{region}/{subject}` then says what the engines know. Only states: no enter or exit
    /// is made up for a transition consumers were not entitled to when it happened (held events
    /// are the provisional case's transitions, delivered before this).
    private mutating func resynchronize(_ subject: String, at t: Date) -> [PrivacyOutput] {
        guard let withheld = state.withheldStates?[subject] else { return [] }
        var outputs: [PrivacyOutput] = []
        var left = withheld
        for region in withheld.keys.sorted() {
            let entry = withheld[region]!
            guard verdict(subject: subject, at: t, precise: entry.precise, canHold: false) == .deliver else { continue }
            left[region] = nil
            state.counters["resynchronized", default: 0] += 1
            outputs.append(.deliver(entry.event))
        }
        state.withheldStates?[subject] = left.isEmpty ? nil : left
        return outputs
    }

    /// Held events expire; allow-once grants that are no longer in use revert; diagnostics
    /// follow the grace window.
    public mutating func tick(now: Date) -> [PrivacyOutput] {
        state.now = max(state.now, now)
        var outputs: [PrivacyOutput] = []
        // Only subjects whose answers time can change: held events that may expire, and usage
        // that may be leaving its grace window (not every subject every second).
        var changing: Set<String> = []
        for subject in state.held.keys.sorted() {
            let fresh = state.held[subject]!.filter { now.timeIntervalSince($0.t) <= settings.heldMaxAge }
            let expired = state.held[subject]!.count - fresh.count
            if expired > 0 {
                state.counters["expired", default: 0] += expired
                state.held[subject] = fresh.isEmpty ? nil : fresh
                changing.insert(subject)
            }
        }
        for (subject, marks) in state.usage {
            if let last = marks.last, now.timeIntervalSince(last.t) <= settings.inUseGrace + 5 {
                changing.insert(subject)
            }
        }
        for subject in state.usedSinceGrant.sorted() where !isInUse(subject, at: now) {
            guard var record = state.records[subject], record.temporary, record.status == .whenInUse else {
                state.usedSinceGrant.remove(subject)
                continue
            }
            record = AuthorizationRecord(status: .notDetermined, reducedAccuracy: record.reducedAccuracy)
            outputs.append(.authorization(subject: subject, record))
            outputs += apply(authorization: record, subject: subject, at: now)
        }
        for subject in changing.sorted() { outputs += refreshDiagnostics(subject, at: now) }
        return outputs
    }

    private var knownSubjects: [String] {
        Array(Set(state.records.keys).union(state.usage.keys).union(state.held.keys).union(state.diagnostics.keys))
            .sorted()
    }

    // MARK: - Diagnostics

    /// The subject's diagnostics (CLServiceSession.Diagnostic, server side).
    public func diagnostics(of subject: String, at t: Date) -> JSONValue {
        diagnosticFacts(of: subject, at: t).document
    }

    /// What a subject's diagnostics are made of (each document member follows from these).
    struct DiagnosticFacts: Equatable {
        var status: AuthorizationStatus
        var reduced: Bool
        var temporaryFullAccuracy: Bool
        var inUse: Bool
        var requestInProgress: Bool
        var recordMissing: Bool
        var level: ServiceSession.Level?
        var wantsFull: Bool
        var covered: Bool
        var held: Int

        /// Not in use while the subject or every session covering it allows only in-use delivery.
        var insufficientlyInUse: Bool {
            (status == .whenInUse || status == .provisionalAlways || level == .whenInUse) && !inUse
        }

        /// The `diagnostics/{subject}` document (topics.md).
        var document: JSONValue {
            var object = JSONObject()
            write { name, value in
                object[name] =
                    switch value {
                    case .flag(let flag): .bool(flag)
                    case .text(let text): .string(text)
                    case .count(let count): .number(Double(count))
                    case .none: .null
                    }
            }
            return .object(object)
        }

        /// `Fingerprint(document)`, hashed as the members are written, without building the
        /// document or its text: the check made at every event (building and serializing the
        /// document each time was a fifth of the evaluator's processing in `bench pipeline`).
        var fingerprint: Fingerprint {
            var hash = Fingerprint.Hasher()
            hash.add("{")
            var first = true
            write { name, value in
                hash.add(first ? "\"" : ",\"")
                first = false
                hash.add(name)
                hash.add("\":")
                switch value {
                case .flag(let flag): hash.add(flag ? "true" : "false")
                // Status, level and accuracy names: nothing in them needs escaping.
                case .text(let text):
                    hash.add("\"")
                    hash.add(text)
                    hash.add("\"")
                case .count(let count): hash.add(String(count))
                case .none: hash.add("null")
                }
            }
            hash.add("}")
            return hash.fingerprint
        }

        enum Member { case flag(Bool), text(String), count(Int), none }

        /// The document's members, in key order (as a document serializes with sorted keys).
        private func write(_ member: (String, Member) -> Void) {
            member("accuracy", .text(reduced ? "reduced" : "full"))
            member("accuracyLimited", .flag(reduced))
            member("alwaysAuthorizationDenied", .flag(level == .always && status == .whenInUse))
            member("authorizationDenied", .flag(status == .denied))
            member("authorizationRecordMissing", .flag(recordMissing))
            member("authorizationRequestInProgress", .flag(requestInProgress))
            member("authorizationRestricted", .flag(status == .restricted))
            member("fullAccuracyDenied", .flag(wantsFull && reduced))
            member("heldEvents", .count(held))
            member("inUse", .flag(inUse))
            member("insufficientlyInUse", .flag(insufficientlyInUse))
            member("serviceSessionRequired", .flag(!covered))
            member("sessionLevel", level.map { .text($0.rawValue) } ?? .none)
            member("status", .text(status.rawValue))
            member("temporaryFullAccuracy", .flag(temporaryFullAccuracy))
        }
    }

    func diagnosticFacts(of subject: String, at t: Date) -> DiagnosticFacts {
        let status = status(of: subject)
        let covering = sessions(covering: subject)
        return DiagnosticFacts(
            status: status, reduced: isReduced(subject), temporaryFullAccuracy: hasTemporaryFullAccuracy(subject),
            inUse: isInUse(subject, at: t),
            requestInProgress: status == .notDetermined
                || (status == .provisionalAlways && state.prompted.contains(subject)),
            recordMissing: state.records[subject] == nil, level: covering.map(\.level).max(),
            wantsFull: covering.contains { $0.fullAccuracyPurpose != nil }, covered: !covering.isEmpty,
            held: state.held[subject]?.count ?? 0)
    }

    /// Publishes the diagnostics when they changed.
    private mutating func refreshDiagnostics(_ subject: String, at t: Date) -> [PrivacyOutput] {
        let facts = diagnosticFacts(of: subject, at: t)
        let fingerprint = facts.fingerprint
        guard state.diagnostics[subject] != fingerprint else { return [] }
        state.diagnostics[subject] = fingerprint
        return [.diagnostics(subject: subject, facts.document)]
    }

    /// The events held for a subject, oldest first.
    public func heldEvents(of subject: String) -> [RegionEvent] { (state.held[subject] ?? []).sorted { $0.t < $1.t } }

    /// The declared sessions covering a subject (`consumer/session`), and whether a default one does.
    public func sessionKeys(covering subject: String) -> (declared: [String], byDefault: Bool) {
        (
            state.sessions.filter { $0.value.covers(subject) }.map(\.key).sorted(),
            settings.defaultSessions.contains { $0.covers(subject) }
        )
    }

    /// Whether the gate holds anything about a subject.
    private func knows(_ subject: String) -> Bool {
        state.records[subject] != nil || state.usage[subject] != nil || state.held[subject] != nil
            || state.diagnostics[subject] != nil
    }

    /// Forgets everything about a subject (erasure).
    public mutating func erase(_ subject: String) {
        state.records[subject] = nil
        state.usage[subject] = nil
        state.held[subject] = nil
        state.prompted.remove(subject)
        state.usedSinceGrant.remove(subject)
        state.diagnostics[subject] = nil
        state.withheldStates?[subject] = nil
        state.unrecorded?.remove(subject)
    }

    /// Forgets the withheld states of a subject the engines forgot (unmonitored: what they say
    /// is published ungated).
    public mutating func forgetStates(of subject: String) { state.withheldStates?[subject] = nil }
}
