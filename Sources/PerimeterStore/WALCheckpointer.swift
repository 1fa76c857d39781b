import Dispatch
import Synchronization

/// Checkpoints one WAL database on a queue of its own, for the connections that leave their
/// checkpoints to it (``Database/leaveCheckpoints(to:)``): their commits only append to the
/// WAL, and the two `fdatasync`s of a checkpoint no longer stall the thread that happened to
/// commit past the limit.
///
/// A commit that leaves the WAL at ``pages`` frames or more asks for a checkpoint; asks made
/// while one is pending are one ask. ``run()`` is a child service: it checkpoints (passive,
/// on its own connection, so writers go on meanwhile) each time it is asked, until cancelled.
///
/// ```swift
/// let checkpointer = WALCheckpointer(path: path)
/// store.database.leaveCheckpoints(to: checkpointer)
/// group.addTask { await checkpointer.run() }
/// ```
public final class WALCheckpointer: Sendable {
    public let path: String
    /// The WAL's size, in pages, from which a commit asks for a checkpoint (SQLite's own
    /// automatic checkpoint starts at 1,000).
    public let pages: Int
    /// From this size on, the committing connection checkpoints itself, as SQLite would: the
    /// bound on the WAL when this checkpointer is behind, not yet running, or stopped.
    ///
    /// Under sustained writes it is also what lets the WAL start over: a passive checkpoint
    /// that runs beside the writers finds new frames appended by the time it is done, and the
    /// WAL restarts only when a transaction begins with every frame copied back, which in
    /// practice is right after a checkpoint made inside a commit. The writers' own checkpoints
    /// then come once every few limits instead of at each, and copy only what this
    /// checkpointer has not (the WAL grew to 48 MB in `bench pipeline` with the bound at
    /// 16 × `pages`).
    public let writerTakesOverAt: Int

    private let asks: AsyncStream<Void>
    private let ask: AsyncStream<Void>.Continuation
    private let pending = Atomic<Bool>(false)
    private let running = Atomic<Bool>(false)
    private let done = Atomic<Int>(0)
    private let queue = DispatchQueue(label: "perimeter.store.checkpoint", qos: .utility)
    private let failed: @Sendable (StoreError) -> Void

    /// - Parameter failed: told of a checkpoint that failed (the next ask tries again, and
    ///   writers take over past ``writerTakesOverAt``).
    /// - Parameter writerTakesOverAt: nil for 4 × `pages`.
    public init(
        path: String, pages: Int = 1000, writerTakesOverAt: Int? = nil,
        failed: @escaping @Sendable (StoreError) -> Void = { _ in }
    ) {
        precondition(pages > 0, "WALCheckpointer: pages must be positive")
        self.path = path
        self.pages = pages
        self.writerTakesOverAt = max(pages, writerTakesOverAt ?? pages * 4)
        self.failed = failed
        (asks, ask) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// How many checkpoints this checkpointer has run.
    public var checkpoints: Int { done.load(ordering: .relaxed) }

    /// Whether every ask so far has been served: none waits and no checkpoint is running. The
    /// last ask comes from a commit, so once idle, the WAL holds nothing that commits before
    /// that moment wrote and no checkpoint copied back (with no reader in the way).
    public var isIdle: Bool { !pending.load(ordering: .acquiring) && !running.load(ordering: .acquiring) }

    /// Asks for a checkpoint; callable from any thread (SQLite's WAL hook, after a commit).
    func request() {
        if !pending.exchange(true, ordering: .acquiringAndReleasing) { ask.yield() }
    }

    /// The child service: checkpoints when asked, until cancelled.
    public func run() async {
        await withTaskCancellationHandler {
            // The connection lives on the queue alone: opened at the first checkpoint, closed
            // by the last job.
            let connection = Mutex<Database?>(nil)
            for await _ in asks {
                running.store(true, ordering: .releasing)
                pending.store(false, ordering: .releasing)
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    queue.async { [self] in
                        connection.withLock { database in
                            do throws(StoreError) {
                                if database == nil { database = try Database(path: path) }
                                try database!.checkpoint()
                                done.add(1, ordering: .relaxed)
                            } catch {
                                database = nil
                                failed(error)
                            }
                        }
                        continuation.resume()
                    }
                }
                running.store(false, ordering: .releasing)
                if Task.isCancelled { break }
            }
            connection.withLock { $0 = nil }
        } onCancel: {
            ask.finish()
        }
    }
}
