import Synchronization

/// Turns at writing one SQLite file for the tasks of one process that write it, first come
/// first served, waiting without blocking a thread.
///
/// Left to SQLite's busy handler (which polls for the lock), a writer that commits back to
/// back wins every race: the notifier's deliverer, polling every millisecond while the
/// processing loop committed batch after batch, delivered nothing for seconds during a burst
/// of events (`bench notifier`). With turns, a writer waits at most for those that asked
/// before it.
///
/// - Important: keep each turn short (one transaction): every other writer waits for it.
public final class WriteTurns: Sendable {
    private struct State {
        var held = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    public init() {}

    /// Runs `body` (a write transaction) in its turn.
    public func run<T>(_ body: () throws -> T) async rethrows -> T {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                guard state.held else {
                    state.held = true
                    return true
                }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
        defer {
            // Straight to the next in line (still held), so that nobody who comes later goes first.
            let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard !state.waiting.isEmpty else {
                    state.held = false
                    return nil
                }
                return state.waiting.removeFirst()
            }
            next?.resume()
        }
        return try body()
    }
}
