import Foundation

/// Which evaluator publishes a venue (DESIGN.md §8): one active per venue, found through
/// retained lease topics (`{prefix}/_sys/leases/{venue}`) and the evaluators' retained status
/// with its last will (`{prefix}/_sys/evaluator/{instance}/status`). Pure: the service feeds it
/// what the broker says and acts on the answers.
///
/// - Two evaluators configured `active` for one venue: the second refuses to start.
/// - A `standby` processes everything with publishing off and takes over a venue as soon as
///   its holder is offline (its last will) or no one holds it.
/// - An `active` that comes back while a standby it had failed over to holds its venues joins
///   as the standby (the lease says the holder took over).
/// - An active whose venue another live evaluator took over steps down to standby.
public enum LeasePolicy {
    public enum Role: String, Sendable, Hashable, CaseIterable, Codable {
        case active, standby
    }

    /// A venue's lease: who holds it, how it got it.
    public struct Lease: Sendable, Hashable {
        public var instance: String
        /// `standby` when a standby took the venue over from a failed active.
        public var takenOver: Bool
        public var since: Date

        public init(instance: String, takenOver: Bool, since: Date) {
            self.instance = instance
            self.takenOver = takenOver
            self.since = since
        }

        public var json: JSONValue {
            [
                "instance": .string(instance), "takenOver": .bool(takenOver),
                "since": .string(Timestamp.format(since)),
            ]
        }

        public init?(json: JSONValue) {
            guard let instance = json["instance"]?.stringValue, !instance.isEmpty else { return nil }
            self.instance = instance
            takenOver = json["takenOver"]?.boolValue ?? false
            since = json["since"]?.stringValue.flatMap(Timestamp.parse) ?? .distantPast
        }
    }

    /// What the broker says: the leases held and which evaluators are online.
    public struct View: Sendable, Hashable {
        public var leases: [String: Lease]
        public var online: Set<String>

        public init(leases: [String: Lease] = [:], online: Set<String> = []) {
            self.leases = leases
            self.online = online
        }

        /// The live evaluator other than `me` that holds `venue`, if any.
        public func liveHolder(of venue: String, other me: String) -> Lease? {
            guard let lease = leases[venue], lease.instance != me, online.contains(lease.instance) else { return nil }
            return lease
        }
    }

    public enum Start: Sendable, Hashable {
        case active
        case standby
        /// Refused: the problem, said plainly.
        case refuse(String)
    }

    /// How an evaluator starts, from its configured role and what the broker says.
    public static func start(role: Role, me: String, venues: [String], view: View) -> Start {
        let held = venues.sorted().compactMap { venue in view.liveHolder(of: venue, other: me).map { (venue, $0) } }
        switch role {
        case .standby: return .standby
        case .active:
            guard let (venue, lease) = held.first else { return .active }
            if held.allSatisfy({ $0.1.takenOver }) { return .standby }
            return .refuse(
                "venue '\(venue)' is already served by the active evaluator '\(lease.instance)' (lease since \(Timestamp.format(lease.since))); "
                    + "two active evaluators for one venue are refused: set evaluator.role = standby on one of them, or stop the other"
            )
        }
    }

    /// Whether a standby should take its venues over now: every venue's holder is gone (no
    /// lease, or a holder that is offline) or is this evaluator.
    public static func shouldTakeOver(me: String, venues: [String], view: View) -> Bool {
        venues.allSatisfy { view.liveHolder(of: $0, other: me) == nil }
    }

    /// Whether an active should step down: another live evaluator took one of its venues over.
    public static func shouldStepDown(me: String, venues: [String], view: View) -> Bool {
        venues.contains { venue in
            guard let lease = view.liveHolder(of: venue, other: me) else { return false }
            return lease.takenOver
        }
    }
}
