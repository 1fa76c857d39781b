import Foundation

/// Runs blocking network work on at most `size` threads of its own, kept for the next piece of
/// work instead of one new thread each (``Blocking/run(_:)``): the notifier's webhook and mail
/// deliveries, `notifier.concurrency` at a time. Work beyond `size` waits its turn, first come
/// first served. Idle threads sleep on a condition (no polling) and end at ``stop()``. Also the
/// process's pool for ``Blocking/run(_:)``.
///
/// - Important: `@unchecked Sendable`: every stored property but `size` is used only under
///   `condition`.
public final class BlockingPool: @unchecked Sendable {
    public let size: Int
    private let name: String
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    /// Index of the next job in `jobs` (taken jobs are dropped in bulk, not one by one).
    private var next = 0
    private var threads = 0
    private var idle = 0
    private var running = 0
    private var stopped = false
    private var finishWaiters: [CheckedContinuation<Void, Never>] = []

    /// - Parameters:
    ///   - size: the most threads running work at once (at least 1).
    ///   - name: the threads' name, for debuggers and `top -H`.
    public init(size: Int, name: String) {
        self.size = max(1, size)
        self.name = name
    }

    /// Threads started and not yet ended.
    public var threadCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return threads
    }

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
        condition.lock()
        // `threads` counts every thread that will look at the queue again (one leaves the
        // count, under the lock, only when it found the queue empty after a stop).
        jobs.append(job)
        let start = idle == 0 && threads < size
        if start { threads += 1 } else { condition.signal() }
        condition.unlock()
        if start {
            let thread = Thread { [self] in work() }
            thread.name = name
            thread.start()
        }
    }

    private func work() {
        condition.lock()
        while true {
            while next == jobs.count && !stopped {
                idle += 1
                condition.wait()
                idle -= 1
            }
            guard next < jobs.count else { break }  // stopped, nothing left
            let job = jobs[next]
            next += 1
            if next == jobs.count || next >= 1024 {
                jobs.removeFirst(next)
                next = 0
            }
            running += 1
            condition.unlock()
            job()
            condition.lock()
            running -= 1
            if running == 0 && next == jobs.count && !finishWaiters.isEmpty {
                let waiters = finishWaiters
                finishWaiters = []
                condition.unlock()
                waiters.forEach { $0.resume() }
                condition.lock()
            }
        }
        threads -= 1
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until every job queued so far has run (at a stop, so that what they report is
    /// recorded).
    public func finish() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            condition.lock()
            if running == 0 && next == jobs.count {
                condition.unlock()
                continuation.resume()
                return
            }
            finishWaiters.append(continuation)
            condition.unlock()
        }
    }

    /// Lets the threads end once the work queued so far is done (work queued later starts a
    /// thread again, which ends the same way). Returns without waiting for them.
    public func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }
}
