import PerimeterCore
import Testing

@Suite("Agents' message numbers")
struct SequenceWatchTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let numbers: [(String, Int)]
        let outcomes: [SequenceWatch.Outcome]
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "in order", numbers: [("a", 1), ("a", 2), ("a", 3)], outcomes: [.first, .inOrder, .inOrder]),
        Case(
            name: "a gap of three", numbers: [("a", 4), ("a", 5), ("a", 9), ("a", 10)],
            outcomes: [.first, .inOrder, .gap(after: 5, next: 9), .inOrder]),
        Case(
            name: "a redelivery changes nothing", numbers: [("a", 7), ("a", 8), ("a", 7), ("a", 9)],
            outcomes: [.first, .inOrder, .repeated, .inOrder]),
        Case(
            name: "1 again: the agent numbers afresh", numbers: [("a", 40), ("a", 1), ("a", 2)],
            outcomes: [.first, .restarted, .inOrder]),
        Case(
            name: "agents are counted apart", numbers: [("a", 1), ("b", 1), ("a", 2), ("b", 3)],
            outcomes: [.first, .first, .inOrder, .gap(after: 1, next: 3)]),
        Case(
            name: "a huge jump is a renumbering, not loss", numbers: [("a", 1), ("a", 5_000_000), ("a", 5_000_001)],
            outcomes: [.first, .jumped(after: 1, next: 5_000_000), .inOrder]),
    ]

    @Test("outcomes, table", arguments: cases)
    func outcomes(_ test: Case) {
        var watch = SequenceWatch()
        #expect(test.numbers.map { watch.note(agent: $0.0, n: $0.1) } == test.outcomes)
    }

    @Test("missing counts only gaps")
    func missing() {
        #expect(SequenceWatch.Outcome.gap(after: 5, next: 9).missing == 3)
        #expect(SequenceWatch.Outcome.jumped(after: 1, next: 5_000_000).missing == 0)
        #expect(SequenceWatch.Outcome.repeated.missing == 0)
    }

    @Test("bounded: past capacity an agent is forgotten and starts afresh")
    func bounded() {
        var watch = SequenceWatch(capacity: 3)
        for agent in ["a", "b", "c", "d", "e"] { _ = watch.note(agent: agent, n: 10) }
        #expect(watch.count == 3)
        // Whichever were forgotten, a later number from them is a first, never a gap.
        let later = ["a", "b", "c", "d", "e"].map { watch.note(agent: $0, n: 20) }
        #expect(later.allSatisfy { $0 == .first || $0 == .gap(after: 10, next: 20) })
        #expect(later.filter { $0 == .first }.count >= 2)
        #expect(watch.count == 3)
    }
}
