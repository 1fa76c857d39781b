/// Gaps in the numbers agents give their observations (`n`, 1, 2, 3 … per agent, kept across
/// the agent's restarts by its outbox): messages that left an agent and never arrived, because
/// a broker queue limit dropped them or a bridge lost them. The broker's own counter says that
/// something was dropped somewhere; a gap says whose input it was.
///
/// Pure and bounded: at most `capacity` agents are remembered (a new one past that forgets an
/// arbitrary other, whose next message then starts afresh), and a jump of more than `maxGap`
/// is taken as a renumbering, not as that many lost messages, so no peer can inflate the
/// count beyond `maxGap` per message.
public struct SequenceWatch: Sendable {
    /// What one number says about the agent's stream.
    public enum Outcome: Sendable, Hashable {
        /// The first number seen from this agent (since the watch started or forgot it).
        case first
        /// The next number.
        case inOrder
        /// Numbers `after + 1 ..< next` never arrived.
        case gap(after: Int, next: Int)
        /// A number at or below the last one: a redelivery (QoS 1 after a reconnection).
        case repeated
        /// 1 after a higher number: the agent numbers afresh (its outbox was reset).
        case restarted
        /// A jump past `maxGap`: taken as a renumbering, not counted as loss.
        case jumped(after: Int, next: Int)
    }

    public let capacity: Int
    public let maxGap: Int
    private var last: [String: Int] = [:]

    public init(capacity: Int = 100_000, maxGap: Int = 1_000_000) {
        self.capacity = max(1, capacity)
        self.maxGap = max(1, maxGap)
    }

    /// The number of agents remembered.
    public var count: Int { last.count }

    /// Notes number `n` from `agent` and says what it means.
    public mutating func note(agent: String, n: Int) -> Outcome {
        guard let previous = last[agent] else {
            if last.count >= capacity { last.remove(at: last.startIndex) }
            last[agent] = n
            return .first
        }
        if n == previous + 1 {
            last[agent] = n
            return .inOrder
        }
        if n > previous {
            last[agent] = n
            return n - previous - 1 > maxGap ? .jumped(after: previous, next: n) : .gap(after: previous, next: n)
        }
        if n == 1 {
            last[agent] = 1
            return .restarted
        }
        return .repeated
    }
}

extension SequenceWatch.Outcome {
    /// Messages this outcome says were lost.
    public var missing: Int {
        if case .gap(let after, let next) = self { return next - after - 1 }
        return 0
    }
}
