import Foundation
import PerimeterCore
import PerimeterKit
import Synchronization

/// A clock that moves only when a test says so (the shape of swift-clocks' `TestClock` and
/// swift-nio's `EmbeddedEventLoop.advanceTime(by:)`).
///
/// A service given this clock sleeps until the test calls ``advance(by:)``; ``waitForSleepers(_:timeout:)``
/// lets the test see that the service has reached its wait (so "nothing happened before the
/// deadline" is a fact, not a guess after a fixed sleep).
public final class ManualClock: TimeSource {
    private struct Sleeper {
        var id: UInt64
        var deadline: Date
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now: Date
        var sleepers: [Sleeper] = []
        var cancelled: Set<UInt64> = []
        var nextID: UInt64 = 0
    }

    private let state: Mutex<State>

    public init(_ start: Date = Date(timeIntervalSince1970: 1_780_000_000)) {
        state = Mutex(State(now: start))
    }

    public var now: Date { state.withLock { $0.now } }

    /// Tasks sleeping on this clock now.
    public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    public func sleep(for duration: Duration) async throws {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome = state.withLock { state -> Result<Void, any Error>? in
                    if state.cancelled.remove(id) != nil { return .failure(CancellationError()) }
                    let deadline = state.now.addingTimeInterval(seconds)
                    if seconds <= 0 { return .success(()) }
                    state.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> Sleeper? in
                if let index = state.sleepers.firstIndex(where: { $0.id == id }) {
                    return state.sleepers.remove(at: index)
                }
                state.cancelled.insert(id)
                return nil
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the clock on and wakes, in deadline order, every sleeper whose time has come.
    public func advance(by seconds: TimeInterval) {
        let due = state.withLock { state -> [Sleeper] in
            state.now += seconds
            let now = state.now
            let due = state.sleepers.filter { $0.deadline <= now }.sorted { $0.deadline < $1.deadline }
            state.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    /// Sets the wall time without waking anyone (a clock step, as NTP might make).
    public func set(_ date: Date) {
        state.withLock { $0.now = date }
    }

    /// Waits (in real time, up to `timeout`) until at least `count` tasks sleep on this clock:
    /// the point where a service has done everything it can do before the clock moves.
    @discardableResult
    public func waitForSleepers(_ count: Int = 1, timeout: Duration = .seconds(30)) async throws -> Bool {
        try await waitForCondition(timeout: timeout, every: .milliseconds(1)) { self.sleeperCount >= count }
    }
}
