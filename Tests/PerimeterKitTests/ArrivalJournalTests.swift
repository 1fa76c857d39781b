import Foundation
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Synchronization
import Testing

@Suite("Arrival journal")
struct ArrivalJournalTests {
    struct Refused: Error {}

    /// A write that fails its first `failures` calls and remembers the batches it wrote.
    final class FlakyWrite: Sendable {
        let failures: Int
        let calls = Atomic<Int>(0)
        let batches = Mutex<[[String]]>([])
        init(failures: Int = 0) { self.failures = failures }
        func callAsFunction(_ messages: [MQTTMessage]) throws {
            if calls.add(1, ordering: .relaxed).newValue <= failures { throw Refused() }
            batches.withLock { $0.append(messages.map(\.topic)) }
        }
    }

    static func message(_ n: Int) -> MQTTMessage {
        MQTTMessage(topic: "perimeter/v1/test/obs/a/gps/\(n)", payload: Array("{}".utf8))
    }

    @Test("a burst is written in one call, in order, at flush; a burst past maxBatch is written in parts of maxBatch")
    func groupCommit() {
        let write = FlakyWrite()
        let journal = ArrivalJournal(logger: Logger(label: "test", level: .error, handler: InMemoryLogHandler())) {
            try write($0)
        }
        for n in 0..<3 { journal.append(Self.message(n)) }
        #expect(write.calls.load(ordering: .relaxed) == 0, "nothing is written before the burst ends")
        journal.flush()
        journal.flush()
        #expect(write.batches.withLock { $0 } == [(0..<3).map { Self.message($0).topic }])
        let big = ArrivalJournal.maxBatch * 2 + 5
        for n in 0..<big { journal.append(Self.message(n)) }
        journal.flush()
        let sizes = write.batches.withLock { $0.map(\.count) }
        #expect(sizes == [3, ArrivalJournal.maxBatch, ArrivalJournal.maxBatch, 5])
        #expect(write.batches.withLock { $0.dropFirst().flatMap { $0 } } == (0..<big).map { Self.message($0).topic })
        #expect(journal.written.load(ordering: .relaxed) == 3 + big)
    }

    @Test(
        "a failed write is tried again: written once it succeeds, lost (counted, logged) once the retries run out",
        arguments: [
            // (failures before success, retries allowed, attempts made, written, lost): a burst
            // of three messages, written or lost together.
            (0, 2, 1, 3, 0), (1, 2, 2, 3, 0), (2, 2, 3, 3, 0), (3, 2, 3, 0, 3), (5, 0, 1, 0, 3),
        ])
    func retries(_ row: (failures: Int, retries: Int, attempts: Int, written: Int, lost: Int)) {
        let logs = InMemoryLogHandler()
        let write = FlakyWrite(failures: row.failures)
        let journal = ArrivalJournal(
            logger: Logger(label: "test", level: .trace, handler: logs),
            retryDelays: Array(repeating: .milliseconds(1), count: row.retries)
        ) { try write($0) }
        for n in 0..<3 { journal.append(Self.message(n)) }
        journal.flush()
        #expect(write.calls.load(ordering: .relaxed) == row.attempts)
        #expect(journal.written.load(ordering: .relaxed) == row.written)
        #expect(journal.lost == row.lost)
        let messages = logs.records.map(\.message)
        #expect(messages.contains("journal write failed: messages lost") == (row.lost > 0))
        #expect(messages.contains("journal write succeeded after retrying") == (row.written > 0 && row.failures > 0))
        // What /metrics and /healthz say of it.
        let metrics = Metrics()
        ArrivalJournal.declareMetrics(in: metrics)
        journal.updateMetrics(metrics)
        #expect(metrics.value("perimeter_journal_lost_total") == Double(row.lost))
        #expect((journal.degradation != nil) == (row.lost > 0), "\(journal.degradation ?? "none")")
    }

    @Test("the processor's turn runs while a retry waits: the wait is outside the turn")
    func retryWaitLeavesTheTurn() async throws {
        let write = FlakyWrite(failures: 1)
        // The retry's wait, held until the test lets it go: no race with a real delay.
        let pausing = Atomic<Bool>(false)
        let go = DispatchSemaphore(value: 0)
        let journal = ArrivalJournal(
            logger: Logger(label: "test", level: .error, handler: InMemoryLogHandler()),
            retryDelays: [.seconds(2)],
            pause: { _ in
                pausing.store(true, ordering: .releasing)
                go.wait()
            }
        ) { try write($0) }
        // The network thread's part, on a thread of its own (it blocks while it waits).
        Thread {
            journal.append(Self.message(1))
            journal.flush()
        }.start()
        try await waitUntil(
            "the first attempt failed and its retry waits", timeout: .seconds(60), every: .milliseconds(1)
        ) {
            pausing.load(ordering: .acquiring)
        }
        let ran = journal.withProcessorTurn { journal.written.load(ordering: .relaxed) }
        #expect(ran == 0, "the processor's turn came before the retry")
        #expect(write.calls.load(ordering: .relaxed) == 1)
        go.signal()
        try await waitUntil("the retry written", timeout: .seconds(60), every: .milliseconds(5)) {
            journal.written.load(ordering: .relaxed) == 1
        }
        #expect(write.calls.load(ordering: .relaxed) == 2)
    }
}
