import CSQLite
import Dispatch
import Synchronization

/// Checkpoints a database's WAL off the connections that commit to it.
///
/// SQLite's default has the connection whose commit takes the WAL past 1,000 pages copy the
/// WAL into the database there and then, with two fsyncs: on this machine's disk 10–300 ms
/// under load, and in a service that commit is the evaluator's processor or the network
/// thread journalling arrivals, so every event in flight waited for it (`strace` during
/// `bench pipeline`'s latency phase: 2–3 such checkpoints a second on the processor's
/// threads). A connection opened with ``Database/Options/checkpointInBackground`` hands the
/// work to this instead: its commits only report the WAL's size, and a passive checkpoint
/// (which never blocks writers or waits for readers, as the automatic one) runs on a
/// background queue, through a connection of its own opened for the purpose. Requests made
/// while one is queued are merged into it.
///
/// A passive checkpoint cannot let the WAL start over while writers keep appending (it
/// copies what was there when it began). Writes that never pause would grow the file
/// without bound, so past `restartPages` the checkpoint is a RESTART one: it holds new
/// writers back until it has copied everything and readers have moved on, and the next
/// commit writes the WAL from its start again. That stall is the price of a bounded file,
/// paid only under sustained writing.
public final class WALCheckpointer: Sendable {
    /// One queue for the process: checkpoints are background work, one at a time is enough.
    private static let queue = DispatchQueue(label: "perimeter.wal-checkpoint", qos: .utility)

    private let path: String
    /// WAL pages after a commit that ask for a passive checkpoint (SQLite's automatic threshold).
    public let pages: Int32
    /// WAL pages after a commit that ask for a RESTART checkpoint.
    public let restartPages: Int32
    private let queued = Atomic<Bool>(false)
    /// The largest WAL size reported since the last checkpoint began.
    private let largest = Atomic<Int>(0)
    /// Checkpoints run, restarts among them, and those that could not open the file or failed.
    public let completed = Atomic<Int>(0)
    public let restarts = Atomic<Int>(0)
    public let failed = Atomic<Int>(0)

    public init(path: String, pages: Int32 = 1000) {
        self.path = path
        self.pages = max(1, pages)
        restartPages = self.pages * 8
    }

    /// Called after a commit with the WAL's size in pages: asks for a checkpoint soon when it
    /// is past the threshold (one already queued covers this request); returns at once.
    public func committed(walPages: Int32) {
        guard walPages >= pages else { return }
        largest.max(Int(walPages), ordering: .relaxed)
        guard queued.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
            return
        }
        Self.queue.async { [self] in
            queued.store(false, ordering: .releasing)
            checkpoint(restart: largest.exchange(0, ordering: .relaxed) >= Int(restartPages))
        }
    }

    /// Returns once every checkpoint asked for so far has run (for tests).
    public func drain() { Self.queue.sync {} }

    private func checkpoint(restart: Bool) {
        var connection: OpaquePointer?
        let rc = sqlite3_open_v2(path, &connection, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nil)
        defer { sqlite3_close_v2(connection) }
        guard rc == SQLITE_OK, let connection else {
            failed.add(1, ordering: .relaxed)
            return
        }
        // A RESTART checkpoint waits for the writer and readers of the moment (they are short).
        sqlite3_busy_timeout(connection, 5000)
        // As a statement: a connection reads the file (and finds it is in WAL mode) only when
        // it prepares one; the C call on a fresh connection returns at once, having done nothing.
        let sql = restart ? "PRAGMA wal_checkpoint(RESTART)" : "PRAGMA wal_checkpoint(PASSIVE)"
        if sqlite3_exec(connection, sql, nil, nil, nil) == SQLITE_OK {
            completed.add(1, ordering: .relaxed)
            if restart { restarts.add(1, ordering: .relaxed) }
        } else {
            failed.add(1, ordering: .relaxed)
        }
    }
}
