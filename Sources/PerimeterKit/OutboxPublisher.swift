import PerimeterMQTT
import Synchronization

/// Publishes committed outbox rows in order with pipelined acknowledgements and a bound on
/// what is unacknowledged: the pipeline's last stage, shared by the services' outboxes.
///
/// The owner commits rows, hands them to ``send(_:)`` and goes on processing at once; this
/// publisher's ``run()`` (a child service of the owner) collects the broker's PUBACKs in the
/// order the rows were sent, and ``takeAcknowledged()`` gives the owner what to mark as sent
/// in its next transaction. Awaiting each batch's round trip before processing the next one
/// was what made the evaluator collapse under overload: its PUBACKs queued behind thousands
/// of inbound messages on the same connection while nothing was processed.
///
/// Memory stays bounded whatever the broker does: ``send(_:)`` waits while more than
/// `maxUnacknowledged` messages are out (libmosquitto keeps each until it is acknowledged).
///
/// - Important: one owner calls ``send(_:)`` and ``takeAcknowledged()``; ``run()`` runs in
///   one child task. A refusal by the broker (its ACL; MQTT 5 reason ≥ 0x80) is final for
///   that row: it is reported in ``Acknowledged/refused`` and never resent.
public final class OutboxPublisher: Sendable {
    /// One outbox row: its number in the owner's outbox and the message.
    public struct Row: Sendable {
        public var number: Int64
        public var message: MQTTMessage
        public init(number: Int64, message: MQTTMessage) {
            self.number = number
            self.message = message
        }
    }

    /// What the broker has confirmed since the owner last asked, in send order.
    public struct Acknowledged: Sendable {
        public var sent: [Int64] = []
        public var refused: [(number: Int64, topic: String, error: MQTTError)] = []
        /// Per batch confirmed, from its send to its last acknowledgement (for a histogram).
        public var roundTrips: [Duration] = []
        /// Rows the gate held back (their owner may not publish them now): never sent.
        public var fenced: [Int64] = []
        public var isEmpty: Bool { sent.isEmpty && refused.isEmpty && fenced.isEmpty }
        public init() {}
    }

    private struct Batch: Sendable {
        var rows: [Row]
        var receipt: MQTTClient.Receipt
        var sentAt: ContinuousClock.Instant
    }

    private struct State {
        var batches: [Batch] = []
        var unacknowledged = 0
        var acknowledged = Acknowledged()
        var batchWaiter: CheckedContinuation<Void, Never>?
        var roomWaiters: [CheckedContinuation<Void, Never>] = []
        var drainWaiters: [CheckedContinuation<Void, Never>] = []
        var finished = false
    }

    private let client: MQTTClient
    private let maxUnacknowledged: Int
    private let state = Mutex(State())
    private let onAcknowledged: @Sendable () -> Void
    private let gate: Gate?

    /// Asked about every batch right before it is handed to the client: for each message, the
    /// message to send (it may be rewritten: a fencing token added), or nil to hold it back
    /// (reported in ``Acknowledged/fenced``, never sent). One answer per message, in order. It
    /// may wait (a lease being renewed late): sending waits with it.
    public typealias Gate = @Sendable ([MQTTMessage]) async -> [MQTTMessage?]

    /// - Parameters:
    ///   - maxUnacknowledged: messages out at most before ``send(_:)`` waits.
    ///   - gate: see ``Gate``; nil sends everything as it is.
    ///   - onAcknowledged: called (from ``run()``'s task) after each batch is confirmed, so an
    ///     idle owner can wake to record it.
    public init(
        client: MQTTClient, maxUnacknowledged: Int = 20_000, gate: Gate? = nil,
        onAcknowledged: @escaping @Sendable () -> Void = {}
    ) {
        self.client = client
        self.maxUnacknowledged = max(1, maxUnacknowledged)
        self.gate = gate
        self.onAcknowledged = onAcknowledged
    }

    /// Messages published and not yet acknowledged.
    public var unacknowledged: Int { state.withLock { $0.unacknowledged } }

    /// Publishes `rows` in order without waiting for their acknowledgements; first waits while
    /// the bound of unacknowledged messages is reached.
    /// - Throws: ``MQTTError`` when the client refuses to queue a message (closed, invalid topic).
    public func send(_ rows: [Row]) async throws {
        guard !rows.isEmpty else { return }
        while state.withLock({ $0.unacknowledged >= maxUnacknowledged && !$0.finished }) {
            await withCheckedContinuation { continuation in
                let now = state.withLock { state -> Bool in
                    if state.unacknowledged < maxUnacknowledged || state.finished { return true }
                    state.roomWaiters.append(continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        }
        var rows = rows
        if let gate {
            // Right before the hand-over: a lease lost while the rows waited for room counts.
            var kept: [Row] = []
            var fenced: [Int64] = []
            kept.reserveCapacity(rows.count)
            for (var row, answer) in zip(rows, await gate(rows.map(\.message))) {
                if let message = answer {
                    row.message = message
                    kept.append(row)
                } else {
                    fenced.append(row.number)
                }
            }
            if !fenced.isEmpty { state.withLock { $0.acknowledged.fenced += fenced } }
            rows = kept
            guard !rows.isEmpty else {
                onAcknowledged()
                return
            }
        }
        let receipt = try client.send(batch: rows.map(\.message))
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.batches.append(Batch(rows: rows, receipt: receipt, sentAt: .now))
            state.unacknowledged += rows.count
            defer { state.batchWaiter = nil }
            return state.batchWaiter
        }
        waiter?.resume()
    }

    /// What was confirmed since the last call (and forgets it).
    public func takeAcknowledged() -> Acknowledged {
        state.withLock { state in
            defer { state.acknowledged = Acknowledged() }
            return state.acknowledged
        }
    }

    /// Waits until everything sent so far is acknowledged (shutdown, a takeover, tests).
    public func drain() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.unacknowledged == 0 || state.finished { return true }
                state.drainWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Collects acknowledgements in send order until cancelled or the client closes. Costs
    /// nothing while nothing is in flight (it waits for the next batch, no polling).
    public func run() async {
        defer { finish() }
        while !Task.isCancelled {
            guard let batch = await nextBatch() else { return }
            var confirmed = Acknowledged()
            do {
                let outcomes = try await client.acknowledgements(batch.receipt)
                var outcome = outcomes.makeIterator()
                for row in batch.rows where row.message.qos > .atMostOnce {
                    if let error = outcome.next() ?? nil {
                        confirmed.refused.append((row.number, row.message.topic, error))
                    } else {
                        confirmed.sent.append(row.number)
                    }
                }
                // QoS 0 rows are done once handed over.
                confirmed.sent += batch.rows.filter { $0.message.qos == .atMostOnce }.map(\.number)
                confirmed.roundTrips.append(ContinuousClock.now - batch.sentAt)
            } catch {
                return  // closed: unacknowledged rows stay unsent in the outbox, for the next run
            }
            let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.batches.removeFirst()
                state.unacknowledged -= batch.rows.count
                state.acknowledged.sent += confirmed.sent
                state.acknowledged.refused += confirmed.refused
                state.acknowledged.roundTrips += confirmed.roundTrips
                var waiters = state.unacknowledged < maxUnacknowledged ? state.roomWaiters : []
                if state.unacknowledged < maxUnacknowledged { state.roomWaiters = [] }
                if state.unacknowledged == 0 {
                    waiters += state.drainWaiters
                    state.drainWaiters = []
                }
                return waiters
            }
            waiters.forEach { $0.resume() }
            onAcknowledged()
        }
    }

    /// The oldest batch not yet confirmed; nil when cancelled.
    private func nextBatch() async -> Batch? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if !state.batches.isEmpty || state.finished { return true }
                    state.batchWaiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
            return state.withLock { $0.finished ? nil : $0.batches.first }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                state.finished = true
                defer { state.batchWaiter = nil }
                return state.batchWaiter
            }
            waiter?.resume()
        }
    }

    private func finish() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.finished = true
            defer {
                state.roomWaiters = []
                state.drainWaiters = []
            }
            return state.roomWaiters + state.drainWaiters
        }
        waiters.forEach { $0.resume() }
    }
}
