import Foundation

/// Which partitions an evaluator should hold, from who is alive and who holds what (docs/scale.md,
/// "Leases"). Pure: the lease keeper reads the members and holders from the store each round
/// and acts on the plan; every write it makes is a compare-and-set, so two evaluators that see
/// different views for a moment cannot both hold a partition, they only converge later.
///
/// The wanted layout is balanced and sticky (``layout(members:holders:count:seniority:)``): every member
/// wants `P / M` or one more partitions, and a live member keeps what it holds up to that
/// share. So a member's death moves only its partitions, and a member's arrival only the
/// others' surplus, to it: no partition passes between two members that were both there before
/// (a layout computed from the members alone, `n → members[n mod M]`, made the two survivors
/// of a `kill -9` among three swap partitions as well: four handovers instead of two). A member
/// takes the partitions it wants that are free (never held, released, or expired because their
/// holder died), and releases the ones it holds that the layout gives another (scale-out); it
/// takes nothing else, so a partition whose wanted holder is alive waits for it rather than
/// flapping between two.
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

    /// The member that should hold each partition, from the live members and who holds what now.
    ///
    /// Every member's share is `count / M`, and `count mod M` of them get one more: those holding
    /// the most now (ties by name), so that a layout already balanced stays as it is. Each member
    /// keeps up to its share of what it holds: those it has held longest (lowest `seniority`,
    /// the token it took them with), else the lowest-numbered. Every other partition goes to the
    /// member furthest below its share (ties by name): first the free ones and those of holders
    /// no longer live, in order, then those beyond a holder's share. So who is given a free
    /// partition depends only on the counts, which every member sees alike, not on which
    /// partitions a member over its share keeps (only it knows how long it held each); the
    /// partitions it gives up are assigned again once they are free. Once in place, a layout is
    /// its own layout: stable.
    /// - Parameters:
    ///   - members: the live members (order and repeats do not matter).
    ///   - holders: partition → holder, for partitions held now (free ones are absent).
    ///   - seniority: for partitions held, how long they have been (lower: longer); those
    ///     without one count as the newest.
    /// - Returns: partition → member for every partition, empty when there is no member.
    public static func layout(
        members: [String], holders: [Int: String], count: Int, seniority: [Int: UInt64] = [:]
    ) -> [Int: String] {
        let live = Set(members)
        let members = live.sorted()
        guard !members.isEmpty, count > 0 else { return [:] }
        var holding: [String: [Int]] = [:]
        for (partition, holder) in holders where (0..<count).contains(partition) {
            holding[holder, default: []].append(partition)
        }
        let base = count / members.count
        // Most held first, then by name.
        let byHolding = members.sorted { lhs, rhs in
            let (left, right) = (holding[lhs]?.count ?? 0, holding[rhs]?.count ?? 0)
            return left != right ? left > right : lhs < rhs
        }
        let larger = Set(byHolding.prefix(count % members.count))
        var share: [String: Int] = [:]
        for member in members { share[member] = base + (larger.contains(member) ? 1 : 0) }
        var layout: [Int: String] = [:]
        var assigned: [String: Int] = [:]
        for member in members {
            let longestHeld = (holding[member] ?? []).sorted {
                (seniority[$0] ?? .max, $0) < (seniority[$1] ?? .max, $1)
            }
            for partition in longestHeld.prefix(share[member]!) {
                layout[partition] = member
                assigned[member, default: 0] += 1
            }
        }
        let rest = (0..<count).filter { layout[$0] == nil }
        let surplus = rest.filter { holders[$0].map(live.contains) ?? false }
        for partition in rest.filter({ !(holders[$0].map(live.contains) ?? false) }) + surplus {
            // Every partition finds a member below its share: the shares add up to `count`.
            let member = members.filter { assigned[$0, default: 0] < share[$0]! }.min {
                (assigned[$0, default: 0], $0) < (assigned[$1, default: 0], $1)
            }!
            layout[partition] = member
            assigned[member, default: 0] += 1
        }
        return layout
    }

    /// Whether `held` (member → the partitions it holds) is a settled layout of `count`
    /// partitions over those members: every partition held by one of them, and the layout as
    /// it is (nothing left to take or give up).
    public static func isSettled(_ held: [String: Set<Int>], count: Int) -> Bool {
        var holders: [Int: String] = [:]
        for (member, partitions) in held {
            for partition in partitions {
                guard holders.updateValue(member, forKey: partition) == nil else { return false }
            }
        }
        return holders.count == count && Set(holders.keys) == Set(0..<count)
            && layout(members: Array(held.keys), holders: holders, count: count) == holders
    }

    /// - Parameters:
    ///   - me: this evaluator (counted as a member even if its membership key is not seen yet).
    ///   - members: the live members the store lists.
    ///   - holders: partition → holder, for partitions held now (free ones are absent).
    ///   - count: the number of partitions.
    ///   - seniority: the tokens `me` took its partitions with (it keeps those held longest).
    public static func plan(
        me: String, members: [String], holders: [Int: String], count: Int, seniority: [Int: UInt64] = [:]
    ) -> Plan {
        let wanted = layout(members: members + [me], holders: holders, count: count, seniority: seniority)
        var plan = Plan()
        for partition in 0..<count {
            let want = wanted[partition]
            switch holders[partition] {
            case nil where want == me: plan.acquire.append(partition)
            case me? where want != me: plan.release.append(partition)
            default: break
            }
        }
        return plan
    }
}
