import Foundation
import Synchronization

/// Runs blocking network work on at most `size` threads of its own, kept for the next piece of
/// work instead of one new thread each (``Blocking/run(_:)``): the notifier's webhook and mail
/// deliveries, `notifier.concurrency` at a time. Work beyond `size` waits its turn, first come
/// first served. Idle threads sleep (no polling) and end at ``stop()``. Also the
/// process's pool for ``Blocking/run(_:)``.
///
/// Sendable as checked by the compiler: everything that changes is in one `Mutex`, and an
/// idle thread sleeps on a semaphore of its own, which whoever hands it work signals after
/// leaving the lock (a semaphore counts, so a signal given before the wait is not lost).
public final class BlockingPool: Sendable {
    public let size: Int
    private let name: String
    private let state = Mutex(State())

    private struct State {
        var jobs: [@Sendable () -> Void] = []
        /// Index of the next job in `jobs` (taken jobs are dropped in bulk, not one by one).
        var next = 0
        /// Threads started and not yet ended: every one will look at the queue again (one
        /// leaves the count, under the lock, only when it found the queue empty after a stop).
        var threads = 0
        /// The semaphores of the threads waiting for work, the latest last (woken first: its
        /// stack and caches are warm).
        var idle: [DispatchSemaphore] = []
        var running = 0
        var stopped = false
        var finishWaiters: [CheckedContinuation<Void, Never>] = []

        var isDrained: Bool { running == 0 && next == jobs.count }

        /// The next queued job, if any.
        mutating func take() -> (@Sendable () -> Void)? {
            guard next < jobs.count else { return nil }
            let job = jobs[next]
            next += 1
            if next == jobs.count || next >= 1024 {
                jobs.removeFirst(next)
                next = 0
            }
            return job
        }
    }

    /// - Parameters:
    ///   - size: the most threads running work at once (at least 1).
    ///   - name: the threads' name, for debuggers and `top -H`.
    public init(size: Int, name: String) {
        self.size = max(1, size)
        self.name = name
    }

    /// Threads started and not yet ended.
    public var threadCount: Int { state.withLock { $0.threads } }

    /// Runs `work` on one of the pool's threads and returns its result.
    public func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            execute { continuation.resume(with: Result { try work() }) }
        }
    }

    /// Queues `job` for one of the pool's threads and returns at once; the job reports what it
    /// did itself (no task waits for it: a caller that keeps many jobs going saves the hand-over
    /// to a task and back for each). After ``stop()`` it still runs on a thread of the pool,
    /// started for it if none is left, which ends once nothing is queued.
    public func execute(_ job: @escaping @Sendable () -> Void) {
        enum Then { case wake(DispatchSemaphore), start, nothing }
        let then = state.withLock { state -> Then in
            state.jobs.append(job)
            if let sleeper = state.idle.popLast() { return .wake(sleeper) }
            guard state.threads < size else { return .nothing }  // a running thread takes it next
            state.threads += 1
            return .start
        }
        switch then {
        case .wake(let sleeper): sleeper.signal()
        case .start:
            let thread = Thread { [self] in work() }
            thread.name = name
            thread.start()
        case .nothing: break
        }
    }

    private func work() {
        let wakeUp = DispatchSemaphore(value: 0)
        var finished = false
        while true {
            enum Next { case run(@Sendable () -> Void), sleep, end }
            let (next, waiters) = state.withLock { state -> (Next, [CheckedContinuation<Void, Never>]) in
                if finished {
                    state.running -= 1
                    finished = false
                }
                var waiters: [CheckedContinuation<Void, Never>] = []
                if state.isDrained && !state.finishWaiters.isEmpty { swap(&waiters, &state.finishWaiters) }
                if let job = state.take() {
                    state.running += 1
                    return (.run(job), waiters)
                }
                if state.stopped {
                    state.threads -= 1
                    return (.end, waiters)
                }
                state.idle.append(wakeUp)
                return (.sleep, waiters)
            }
            waiters.forEach { $0.resume() }
            switch next {
            case .run(let job):
                job()
                finished = true
            case .sleep: wakeUp.wait()
            case .end: return
            }
        }
    }

    /// Waits until every job queued so far has run (at a stop, so that what they report is
    /// recorded).
    public func finish() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let drained = state.withLock { state in
                if state.isDrained { return true }
                state.finishWaiters.append(continuation)
                return false
            }
            if drained { continuation.resume() }
        }
    }

    /// Lets the threads end once the work queued so far is done (work queued later starts a
    /// thread again, which ends the same way). Returns without waiting for them.
    public func stop() {
        let sleepers = state.withLock { state in
            state.stopped = true
            defer { state.idle = [] }
            return state.idle
        }
        sleepers.forEach { $0.signal() }
    }
}
