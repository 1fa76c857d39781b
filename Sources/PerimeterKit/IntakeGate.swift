import Dispatch
import Foundation
import Synchronization

/// Holds a service's network thread back while its journal's backlog (rows journalled and not
/// processed) is at or above `highWater`, until processing brings it down to `lowWater`.
///
/// Without it an evaluator offered more than it can process journalled everything as fast as
/// it arrived: the network thread took CPU from the processor on a small machine (offered 4×
/// its peak, it processed 0.45× of peak, `bench pipeline`) and the journal grew without bound.
/// Held back, the network thread writes no acknowledgements, so the broker stops at the
/// connection's receive maximum and keeps the rest in the session's queue (bounded by its
/// `max_queued_messages` / `max_queued_bytes`; whatever it drops past them is counted, see
/// ``SequenceWatch``).
///
/// While intake is held, the processing lag alone (arrival in the journal to processing)
/// understates the delay: messages also wait at the broker. So the gate keeps when the current
/// episode of holding began (it ends once the backlog is down to a quarter of `lowWater`), and
/// ``lag(processing:now:)`` reports at least its age.
///
/// Time is an input: episodes are dated by the `now` the callers pass (the service's clock);
/// only the network thread's wait itself is a real-time wait, bounded by its `slice`.
public final class IntakeGate: Sendable {
    public let highWater: Int64
    public let lowWater: Int64

    private struct State {
        var journalled: Int64 = 0
        var processed: Int64 = 0
        var holding = false
        var episodeStart: Date?
        var open = false
        var waiters: [DispatchSemaphore] = []
        var backlog: Int64 { max(0, journalled - processed) }
    }

    private let state = Mutex(State())
    private let holds = Atomic<Int>(0)

    /// - Parameter highWater: the backlog at which intake is held (rows).
    /// - Parameter lowWater: the backlog at which it resumes; `highWater * 3 / 4` by default.
    public init(highWater: Int, lowWater: Int? = nil) {
        self.highWater = Int64(max(1, highWater))
        self.lowWater = Int64(min(max(0, lowWater ?? highWater * 3 / 4), max(1, highWater) - 1))
    }

    /// The newest row journalled (network thread, after each commit).
    public func journalled(through seq: Int64, now: Date) {
        state.withLock { state in
            state.journalled = max(state.journalled, seq)
            if !state.holding && state.backlog >= highWater {
                state.holding = true
                holds.add(1, ordering: .relaxed)
                if state.episodeStart == nil { state.episodeStart = now }
            }
        }
    }

    /// The newest row processed (processor, after each commit). Releases the network thread
    /// once the backlog is down to `lowWater`.
    public func processed(through seq: Int64, now: Date) {
        let released = state.withLock { state -> [DispatchSemaphore] in
            state.processed = max(state.processed, seq)
            if state.backlog * 4 <= lowWater { state.episodeStart = nil }
            guard state.holding, state.backlog <= lowWater else { return [] }
            state.holding = false
            defer { state.waiters = [] }
            return state.waiters
        }
        released.forEach { $0.signal() }
    }

    /// How many times intake was held.
    public var timesHeld: Int { holds.load(ordering: .relaxed) }

    /// Whether intake is held now.
    public var isHolding: Bool { state.withLock { $0.holding && !$0.open } }

    /// Rows journalled and not processed.
    public var backlog: Int64 { state.withLock { $0.backlog } }

    /// The delay to report: the processing lag, or the age of the current holding episode when
    /// that is more (messages waited at the broker meanwhile).
    public func lag(processing: TimeInterval, now: Date) -> TimeInterval {
        guard let start = state.withLock({ $0.episodeStart }) else { return processing }
        return max(processing, now.timeIntervalSince(start))
    }

    /// Waits on the network thread while intake is held, at most `slice` (so that the client's
    /// loop still writes its acknowledgements and keep-alives); returns whether it waited.
    @discardableResult
    public func waitForRoom(slice: Duration = .seconds(1)) -> Bool {
        let semaphore = DispatchSemaphore(value: 0)
        let wait = state.withLock { state -> Bool in
            guard state.holding && !state.open else { return false }
            state.waiters.append(semaphore)
            return true
        }
        guard wait else { return false }
        let nanoseconds = slice.components.seconds * 1_000_000_000 + slice.components.attoseconds / 1_000_000_000
        if semaphore.wait(timeout: .now() + .nanoseconds(Int(clamping: nanoseconds))) == .timedOut {
            state.withLock { $0.waiters.removeAll { $0 === semaphore } }
        }
        return true
    }

    /// Lets the network thread go for good (the service is stopping: nothing processes any more).
    public func openForever() {
        let released = state.withLock { state -> [DispatchSemaphore] in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        released.forEach { $0.signal() }
    }
}

/// What a service's `/metrics` says of its intake.
extension IntakeGate: CountedInMetrics {
    public static let counterName = "perimeter_intake_holds_total"
    public static let counterHelp =
        "Times the service stopped reading arrivals because its journal backlog reached its bound."
    public var counterValue: Int { timesHeld }
}
