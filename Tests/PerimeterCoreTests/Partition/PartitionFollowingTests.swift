import PerimeterCore
import Testing

@Suite("Following the leases between two looks")
struct PartitionFollowingTests {
    /// (followed, holdings now) → (released, retaken, taken, kept).
    @Test(
        "released, taken, taken again under a new token, kept",
        arguments: [
            // Nothing followed yet: everything held is taken.
            ([:], [0: 5, 3: 7], [], [], [0, 3], []),
            // The same holdings, the same tokens: nothing to do.
            ([0: 5, 3: 7], [0: 5, 3: 7], [], [], [], [0, 3]),
            // One released, one newly taken.
            ([0: 5, 3: 7], [0: 5, 4: 9], [3], [], [4], [0]),
            // Lost and taken again between the looks: the same set, another token.
            ([0: 5, 3: 7], [0: 5, 3: 11], [], [3], [3], [0]),
            // Everything lost and taken again, plus a new one.
            ([0: 5, 3: 7], [0: 12, 3: 13, 1: 14], [], [0, 3], [0, 1, 3], []),
            // Everything released.
            ([0: 5, 3: 7], [:], [0, 3], [], [], []),
        ] as [([Int: UInt64], [Int: UInt64], Set<Int>, Set<Int>, [Int], Set<Int>)])
    func plan(
        followed: [Int: UInt64], holdings: [Int: UInt64], released: Set<Int>, retaken: Set<Int>, taken: [Int],
        kept: Set<Int>
    ) {
        let plan = PartitionFollowing(followed: followed, holdings: holdings)
        #expect(plan.released == released)
        #expect(plan.retaken == retaken)
        #expect(plan.taken == taken)
        #expect(plan.kept == kept)
        #expect(plan.changed == !(released.isEmpty && taken.isEmpty))
    }
}
