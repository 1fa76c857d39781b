import Foundation

/// Which partitions an evaluator should hold, from who is alive and who holds what (docs/scale.md,
/// "Leases"). Pure: the lease keeper reads the members and holders from the store each round
/// and acts on the plan; every write it makes is a compare-and-set, so two evaluators that see
/// different views for a moment cannot both hold a partition, they only converge later.
///
/// The wanted layout is partition `n` → `members[n % members.count]` (members sorted): every
/// evaluator computes the same one from the same view. A member takes the partitions it wants
/// that are free (never held, released, or expired because their holder died), and releases
/// the ones it holds that another live member wants (scale-out); it takes nothing else, so a
/// partition whose wanted holder is alive waits for it rather than flapping between two.
public enum PartitionAssignment {
    public struct Plan: Sendable, Hashable {
        /// Free partitions to take.
        public var acquire: [Int]
        /// Held partitions to give up (another live member wants them).
        public var release: [Int]

        public init(acquire: [Int] = [], release: [Int] = []) {
            self.acquire = acquire
            self.release = release
        }
    }

    /// The member that should hold `partition`.
    public static func wanted(_ partition: Int, members: [String]) -> String? {
        let sorted = Set(members).sorted()
        return sorted.isEmpty ? nil : sorted[partition % sorted.count]
    }

    /// - Parameters:
    ///   - me: this evaluator (counted as a member even if its membership key is not seen yet).
    ///   - members: the live members the store lists.
    ///   - holders: partition → holder, for partitions held now (free ones are absent).
    ///   - count: the number of partitions.
    public static func plan(me: String, members: [String], holders: [Int: String], count: Int) -> Plan {
        let all = Array(Set(members).union([me]))
        var plan = Plan()
        for partition in 0..<count {
            let want = wanted(partition, members: all)
            switch holders[partition] {
            case nil where want == me: plan.acquire.append(partition)
            case me? where want != me: plan.release.append(partition)
            default: break
            }
        }
        return plan
    }
}
