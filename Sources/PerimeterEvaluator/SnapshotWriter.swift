import Dispatch
import Foundation
import Synchronization

/// The evaluator's periodic snapshot, written off the processing path by a child service of
/// the evaluator's task group.
///
/// At most one snapshot is in flight: ``offer(_:)`` refuses another until it has landed, and
/// the caller tries again later. Encoding and writing are blocking work (about 0.3 s at 4,000
/// subjects, which was the p99 of `bench scale` when they ran inline), so they run on a queue
/// of this writer's own while ``run()`` awaits them: the cooperative pool is not held, and
/// nothing outlives the service (the group waits for ``run()``, which waits for the write). A
/// crash before a snapshot lands leaves the previous snapshot and the journal after it.
final class SnapshotWriter: Sendable {
    struct Job: Sendable {
        let snapshot: EvaluatorRuntime.Snapshot
        /// The journal row the snapshot holds the state after.
        let seq: Int64
        let now: Date
    }

    private struct State {
        var busy = false
        var finished = false
        /// A job was handed over but the writer stopped before writing it.
        var unwritten = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let jobs: AsyncStream<Job>
    private let submit: AsyncStream<Job>.Continuation
    private let state = Mutex(State())
    private let queue = DispatchQueue(label: "perimeter.evaluator.snapshot", qos: .utility)
    private let write: @Sendable (Job) -> Void

    /// `write` does the blocking work and reports its own failures (the journal is kept then).
    init(write: @escaping @Sendable (Job) -> Void) {
        (jobs, submit) = AsyncStream.makeStream(of: Job.self, bufferingPolicy: .unbounded)
        self.write = write
    }

    /// Hands `job` over; false while another is in flight or once the writer has stopped.
    func offer(_ job: Job) -> Bool {
        let accepted = state.withLock { state in
            guard !state.busy, !state.finished else { return false }
            state.busy = true
            return true
        }
        if accepted { submit.yield(job) }
        return accepted
    }

    /// Whether the writer stopped with a job it had accepted and not written (the shutdown
    /// snapshot then covers it).
    var lostAJob: Bool { state.withLock { $0.unwritten } }

    /// Returns once no snapshot is in flight (at once when the writer has stopped).
    func idle() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state in
                guard state.busy, !state.finished else { return true }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// The child service: writes each job handed over, until cancelled.
    func run() async {
        for await job in jobs {
            await withCheckedContinuation { continuation in
                queue.async { [write] in
                    write(job)
                    continuation.resume()
                }
            }
            let waiting = state.withLock { state in
                state.busy = false
                defer { state.waiting = [] }
                return state.waiting
            }
            for continuation in waiting { continuation.resume() }
            if Task.isCancelled { break }
        }
        submit.finish()
        let waiting = state.withLock { state in
            state.unwritten = state.busy
            state.busy = false
            state.finished = true
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }
}
