import PerimeterCore
import Synchronization

/// Wakes the deliverer: rung when the outbox gained rows or a delivery finished. A ring with
/// nobody waiting is kept (once) for the next wait.
///
/// Waiting is a select of "rung" against "this much time passed on the clock", both children
/// of one task group: whichever ends first cancels the other, and a cancelled wait neither
/// rings nor consumes anything. (The doorbell this replaces started a ticker task per wait that
/// rang even when cancelled, so every wait left the bell rung for the next one and an idle
/// notifier spun on a core.)
///
/// - Important: one waiter at a time (the deliverer's loop).
final class Doorbell: Sendable {
    private struct State {
        var rung = false
        var waiter: (id: UInt64, continuation: CheckedContinuation<Void, Never>)?
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    func ring() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.rung = true
                return nil
            }
            state.waiter = nil
            return waiter.continuation
        }
        waiter?.resume()
    }

    /// Returns after a ring, after `timeout` of `clock`'s time (nil: no timeout), or when the
    /// calling task is cancelled, whichever comes first.
    func wait(timeout: Duration?, on clock: any TimeSource) async {
        if state.withLock({ state in
            defer { state.rung = false }
            return state.rung
        }) {
            return
        }
        guard let timeout else { return await rung() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.rung() }
            group.addTask { try? await clock.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Returns after a ring, or at once when cancelled (without taking a ring).
    private func rung() async {
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.rung {
                        state.rung = false
                        return true
                    }
                    // Cancelled before this point: the handler below found no waiter to resume.
                    if Task.isCancelled { return true }
                    state.waiter = (id, continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard let waiter = state.waiter, waiter.id == id else { return nil }
                state.waiter = nil
                return waiter.continuation
            }
            waiter?.resume()
        }
    }
}
