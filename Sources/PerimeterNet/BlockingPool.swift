import Foundation

/// Runs blocking network work on at most `size` threads of its own, kept for the next piece of
/// work instead of one new thread each (``Blocking/run(_:)``): the notifier's webhook and mail
/// deliveries, `notifier.concurrency` at a time. Work beyond `size` waits its turn, first come
/// first served. Idle threads sleep on a condition (no polling) and end at ``stop()``.
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
    private var stopped = false

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

    /// Runs `work` on one of the pool's threads and returns its result. After ``stop()`` the
    /// work runs on a thread of its own, as ``Blocking/run(_:)`` does.
    public func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            submit { continuation.resume(with: Result { try work() }) }
        }
    }

    private func submit(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        if stopped {
            condition.unlock()
            Thread.detachNewThread(job)
            return
        }
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
            condition.unlock()
            job()
            condition.lock()
        }
        threads -= 1
        condition.broadcast()
        condition.unlock()
    }

    /// Lets the threads end once the work queued so far is done; work run later gets a
    /// thread of its own. Returns without waiting for them.
    public func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }
}
