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
extension VenueEvaluator {
    /// What an input means for visits, after the engines and the gate had it.
    mutating func followLocationServices(
        after input: Inbound, _ outputs: [EvaluatorOutput], at receivedAt: Date
    ) -> [EvaluatorOutput] {
        switch input {
        case .fix(let fix):
            // Dropped at ingest (privacy) or refused: the engines never had it.
            guard privacy.refusal(of: fix.subject) == nil else { return [] }
            let visits = locationServices.visits.process(privacy.coarsen(fix))
            return visits.filter { visitAllowed($0.subject, at: $0.t) }.map(EvaluatorOutput.visit)
        case .authorization(let subject, _):
            if privacy.refusal(of: subject) != nil { locationServices.forget(subject: subject) }
            return []
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
        return visits.filter { visitAllowed($0.subject, at: $0.t) }.map(EvaluatorOutput.visit)
    }

    /// Core Location delivers visits only to apps with always authorization.
    func visitAllowed(_ subject: String, at t: Date) -> Bool {
        privacy.status(of: subject) == .always && privacy.allows(subject, at: t)
    }

    /// The visit under way for a subject, if any (whether or not it may be published).
    public func currentVisit(of subject: String) -> VisitEvent? { locationServices.visits.currentVisit(of: subject) }
}
