import Foundation

/// Visits (`CLVisit`): stays found in a subject's fixes, with no region, published on
/// `visit/{subject}` (topics.md).
///
/// Privacy: the detector sees the fixes the gate lets in, as the gate lets them in (coarsened
/// for reduced accuracy; with the default grid those are coarser than `maxAccuracy`, so a
/// reduced-accuracy subject has no visits). Like Core Location, which delivers visits only with
/// always authorization, a visit's arrival or departure goes out only when the subject's status
/// is `always` and the gate would deliver an event of the subject at that moment (a session
/// covers it; a `whenInUse` session only while in use). Otherwise it is withheld, not held. A
/// subject that stops being allowed is forgotten (no departure is published).
///
/// The live location stream (`CLLocationUpdate.liveUpdates`): a consumer that declared a session
/// with `"live": true` gets each covered subject's fixes on `live/{consumer}/{subject}` as they
/// arrive, coarsened for reduced accuracy, at most one per `live.minInterval`, while the gate
/// would deliver an event of the subject under that consumer's own sessions. When that stops
/// (the session ends or stops covering the subject, the authorization narrows, the subject is
/// no longer in use) the stream gets one `stopped` message with the reason.
extension VenueEvaluator {
    /// What an input means for visits and live streams, after the engines and the gate had it.
    mutating func followLocationServices(after input: Inbound, at receivedAt: Date) -> [EvaluatorOutput] {
        switch input {
        case .fix(let fix):
            // Dropped at ingest (privacy) or refused: the engines never had it.
            guard privacy.refusal(of: fix.subject) == nil else { return [] }
            let coarse = privacy.coarsen(fix)
            let visits = locationServices.visits.process(coarse)
            var outputs = allowedVisits(visits)
            let gate = privacy
            let updates = locationServices.live.offer(
                fix, snapped: privacy.choseReducedAccuracy(fix.subject) ? privacy.snap(fix) : nil,
                grant: privacy.temporaryFullAccuracyGrant(of: fix.subject).map(\.session)
            ) { level in
                Self.liveRefusal(gate, fix.subject, level: level, at: fix.t)
            }
            outputs += updates.map(EvaluatorOutput.live)
            return outputs
        case .authorization(let subject, _):
            if privacy.refusal(of: subject) != nil { locationServices.forget(subject: subject) }
            return reviewLive(at: receivedAt)
        case .session(let consumer, let session, let record):
            locationServices.live.apply(
                session: record.flatMap(ServiceSession.init(json:)), live: record?["live"]?.boolValue == true,
                consumer: consumer, key: session)
            return reviewLive(at: receivedAt)
        case .usage:
            return reviewLive(at: receivedAt)
        default:
            return []
        }
    }

    /// Visits the clock ends; subjects whose allow-once grant reverted this tick are forgotten.
    mutating func tickLocationServices(now: Date, after outputs: [EvaluatorOutput]) -> [EvaluatorOutput] {
        for case .authorization(let subject, _) in outputs where privacy.refusal(of: subject) != nil {
            locationServices.forget(subject: subject)
        }
        let visits = locationServices.visits.advance(to: now)
        return allowedVisits(visits) + reviewLive(at: now)
    }

    /// Stops the live streams that may no longer run (a session ended, the gate narrowed).
    private mutating func reviewLive(at t: Date) -> [EvaluatorOutput] {
        guard locationServices.live.openCount > 0 else { return [] }
        let gate = privacy
        let updates = locationServices.live.review(at: t) { subject, level in
            Self.liveRefusal(gate, subject, level: level, at: t)
        }
        return updates.map(EvaluatorOutput.live)
    }

    /// Why a consumer whose own live sessions covering `subject` reach `level` may not have its
    /// positions at `t` (nil: it may): the privacy gate's rules for events, for that consumer
    /// alone. Reduced accuracy does not stop the stream: the positions are coarsened.
    static func liveRefusal(
        _ privacy: PrivacyGate, _ subject: String, level: ServiceSession.Level, at t: Date
    ) -> String? {
        if let refusal = privacy.refusal(of: subject) { return refusal }
        let inUse = privacy.isInUse(subject, at: t)
        switch privacy.status(of: subject) {
        case .always: return level == .always || inUse ? nil : "insufficientlyInUse"
        default: return inUse ? nil : "insufficientlyInUse"
        }
    }

    /// Core Location delivers visits only to apps with always authorization.
    /// The visits that may be published, as outputs. A loop, not `filter` with a closure: a
    /// closure calling a method of `self` from a mutating method copied the whole evaluator
    /// for every visit (retaining and releasing each of its tables).
    private func allowedVisits(_ visits: [VisitEvent]) -> [EvaluatorOutput] {
        var outputs: [EvaluatorOutput] = []
        for visit in visits where visitAllowed(visit.subject, at: visit.t) { outputs.append(.visit(visit)) }
        return outputs
    }

    func visitAllowed(_ subject: String, at t: Date) -> Bool {
        privacy.status(of: subject) == .always && privacy.allows(subject, at: t)
    }

    /// What the live streams did since the last call (the service's metrics); starts a new tally.
    public mutating func takeLiveTally() -> LiveStreams.Tally { locationServices.live.takeTally() }

    /// The visit under way for a subject, if any (whether or not it may be published).
    public func currentVisit(of subject: String) -> VisitEvent? { locationServices.visits.currentVisit(of: subject) }
}
