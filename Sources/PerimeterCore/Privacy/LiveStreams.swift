import Foundation

/// Settings of the live location stream (`venues.{id}.live`).
public struct LiveParameters: Sendable, Hashable, Codable {
    /// The shortest time between two positions of one subject to one consumer, seconds (by
    /// the fixes' times); a fix sooner than this after the last one sent is skipped.
    public var minInterval: TimeInterval = 1

    public init(minInterval: TimeInterval = 1) {
        self.minInterval = minInterval
    }
}

/// What the live stream publishes (`live/{consumer}/{subject}`).
public enum LiveUpdate: Sendable, Hashable {
    /// A subject's position for one consumer, as the gate lets it out (`reduced`: snapped).
    case position(consumer: String, Fix, reduced: Bool)
    /// The consumer's stream of a subject stopped: its session ended or no longer covers the
    /// subject (`sessionEnded`), or the subject's authorization narrowed (the gate's reason).
    case stopped(consumer: String, subject: String, reason: String, t: Date)
}

/// The live location stream (`CLLocationUpdate.liveUpdates`), pure: each consumer that declared
/// a session with `"live": true` gets the positions of the subjects it covers, as they arrive,
/// rate-limited; the gate decides per consumer (its own sessions, not the union of everyone's).
///
/// A stream is *open* from the first position sent until it stops; a stop is published once,
/// with its reason, and the next allowed fix opens it again. Memory: one time per open stream.
public struct LiveStreams: Sendable {
    public let parameters: LiveParameters
    private var state = State()

    /// What became of the fixes offered and the streams stopped since the last
    /// ``takeTally()``: the service's metrics (`perimeter_live_updates_total`,
    /// `perimeter_live_stops_total`). Not snapshotted: counters restart with the process.
    public struct Tally: Sendable, Hashable {
        /// By result, one per consumer a fix was for: `published` (full accuracy), `coarsened`
        /// (reduced accuracy, snapped), `rate_limited` (sooner than `minInterval` after the last
        /// one sent), `refused` (the gate would not let it out to that consumer); and
        /// `no_session`, once per fix that no consumer's live session covers.
        public var updates: [String: Int] = [:]
        /// Streams stopped, by reason (`sessionEnded`, `insufficientlyInUse`, the gate's refusals).
        public var stops: [String: Int] = [:]

        public var isEmpty: Bool { updates.isEmpty && stops.isEmpty }

        public init(updates: [String: Int] = [:], stops: [String: Int] = [:]) {
            self.updates = updates
            self.stops = stops
        }
    }

    private var tally = Tally()

    /// The tally since the last call, which starts a new one.
    public mutating func takeTally() -> Tally {
        defer { tally = Tally() }
        return tally
    }

    /// A consumer's live session.
    struct Session: Sendable, Codable, Hashable {
        var consumer: String
        var subjects: Set<String>?
        var level: ServiceSession.Level

        func covers(_ subject: String) -> Bool { subjects?.contains(subject) ?? true }
    }

    /// What the streams remember (snapshotted with the evaluator).
    public struct State: Sendable, Codable, Hashable {
        /// Live sessions by `consumer NUL session` (ids may hold `/`).
        var sessions: [String: Session] = [:]
        /// Open streams: consumer → subject → the time of the last position sent.
        var open: [String: [String: Date]] = [:]
    }

    public init(parameters: LiveParameters = LiveParameters()) { self.parameters = parameters }

    public init(parameters: LiveParameters, restoring state: State) {
        self.parameters = parameters
        self.state = state
    }

    public var snapshot: State { state }

    /// Open streams, for tests and statistics.
    public var openCount: Int { state.open.values.reduce(0) { $0 + $1.count } }

    /// `sessions/{consumer}/{session}`: a live session when `session` is set and asks for it
    /// (`"live": true`); otherwise (nil, or not live) the key stops being one.
    public mutating func apply(session: ServiceSession?, live: Bool, consumer: String, key: String) {
        let id = "\(consumer)\u{0}\(key)"
        if let session, live {
            state.sessions[id] = Session(consumer: consumer, subjects: session.subjects, level: session.level)
        } else {
            state.sessions[id] = nil
        }
    }

    /// The highest level of the consumer's live sessions covering the subject; nil when none does.
    public func level(consumer: String, subject: String) -> ServiceSession.Level? {
        state.sessions.values.filter { $0.consumer == consumer && $0.covers(subject) }.map(\.level).max()
    }

    /// The consumers with a live session covering `subject`, in id order.
    func consumers(covering subject: String) -> [String] {
        Set(state.sessions.values.filter { $0.covers(subject) }.map(\.consumer)).sorted()
    }

    /// One fix, as the subject's accuracy lets it out. `snapped` is the reduced-accuracy form
    /// (nil when the subject chose full accuracy): each consumer gets that, except the consumer
    /// whose session holds a temporary full-accuracy grant in force (`grant`, the
    /// `consumer/session` of the subject's record), which gets `fix` — the grant is that
    /// consumer's, as `requestTemporaryFullAccuracy` is one app's, and the stream is per
    /// consumer. `refusal` answers, for a consumer's level, why the gate would not let the fix
    /// out now (nil: it would).
    public mutating func offer(
        _ fix: Fix, snapped: Fix? = nil, grant: String? = nil, refusal: (ServiceSession.Level) -> String?
    ) -> [LiveUpdate] {
        var updates: [LiveUpdate] = []
        let consumers = consumers(covering: fix.subject)
        if consumers.isEmpty { tally.updates["no_session", default: 0] += 1 }
        for consumer in consumers {
            guard let level = level(consumer: consumer, subject: fix.subject) else { continue }
            if let reason = refusal(level) {
                tally.updates["refused", default: 0] += 1
                updates += stop(consumer: consumer, subject: fix.subject, reason: reason, at: fix.t)
                continue
            }
            if let last = state.open[consumer]?[fix.subject], fix.t.timeIntervalSince(last) < parameters.minInterval {
                tally.updates["rate_limited", default: 0] += 1
                continue
            }
            state.open[consumer, default: [:]][fix.subject] = fix.t
            let reduced = snapped != nil && !(grant?.hasPrefix(consumer + "/") ?? false)
            tally.updates[reduced ? "coarsened" : "published", default: 0] += 1
            updates.append(.position(consumer: consumer, reduced ? snapped ?? fix : fix, reduced: reduced))
        }
        return updates
    }

    /// Stops the open streams that may no longer run at `t`: no live session of the consumer
    /// covers the subject (`sessionEnded`), or `refusal(subject, level)` gives a reason.
    public mutating func review(at t: Date, refusal: (String, ServiceSession.Level) -> String?) -> [LiveUpdate] {
        var updates: [LiveUpdate] = []
        for consumer in state.open.keys.sorted() {
            for subject in (state.open[consumer] ?? [:]).keys.sorted() {
                guard let level = level(consumer: consumer, subject: subject) else {
                    updates += stop(consumer: consumer, subject: subject, reason: "sessionEnded", at: t)
                    continue
                }
                if let reason = refusal(subject, level) {
                    updates += stop(consumer: consumer, subject: subject, reason: reason, at: t)
                }
            }
        }
        return updates
    }

    /// Forgets a subject's streams without a stop (erasure: nothing more is said about it).
    public mutating func forget(subject: String) {
        for consumer in state.open.keys.sorted() {
            state.open[consumer]?[subject] = nil
            if state.open[consumer]?.isEmpty == true { state.open[consumer] = nil }
        }
    }

    private mutating func stop(consumer: String, subject: String, reason: String, at t: Date) -> [LiveUpdate] {
        guard state.open[consumer]?.removeValue(forKey: subject) != nil else { return [] }
        if state.open[consumer]?.isEmpty == true { state.open[consumer] = nil }
        tally.stops[reason, default: 0] += 1
        return [.stopped(consumer: consumer, subject: subject, reason: reason, t: t)]
    }
}
