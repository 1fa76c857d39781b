/// What an evaluator's processor does when it looks at its leases again (docs/scale.md,
/// "Handover"). Between two looks a partition may have been released, taken, or lost and taken
/// again: a new token. What was processed for it in between was held back by the gate, never
/// to be sent, so a partition taken again is followed afresh, as one taken (from the retained
/// states and its stream), not carried on as if its outputs had gone out. Pure.
public struct PartitionFollowing: Sendable, Hashable {
    /// Followed, and no longer held: its stream stops, its subjects are dropped.
    public var released: Set<Int>
    /// Followed, and held now under another token: lost and taken again meanwhile.
    public var retaken: Set<Int>
    /// To take over, in order: the partitions newly held and those taken again.
    public var taken: [Int]
    /// Held before and now under the same token: carried on.
    public var kept: Set<Int>

    /// - Parameters:
    ///   - followed: the partitions followed since the last look, with their tokens.
    ///   - holdings: what the lease keeper holds now, with the tokens.
    public init(followed: [Int: UInt64], holdings: [Int: UInt64]) {
        let released = Set(followed.keys.filter { holdings[$0] == nil })
        let retaken = Set(followed.keys.filter { holdings[$0] != nil && holdings[$0] != followed[$0] })
        let kept = Set(followed.keys).subtracting(released).subtracting(retaken)
        self.released = released
        self.retaken = retaken
        self.kept = kept
        taken = holdings.keys.filter { !kept.contains($0) }.sorted()
    }

    /// Whether anything is to be journalled: a partition released or taken.
    public var changed: Bool { !released.isEmpty || !taken.isEmpty }
}
