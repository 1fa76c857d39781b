import Foundation
import PerimeterEvaluator
import PerimeterTestSupport
import Testing

/// The evaluator's SQLite file on its own: snapshots written by two connections (the processing
/// task and the background snapshot thread) can never put an older state over a newer one.
@Suite("Evaluator store")
struct EvaluatorStoreTests {
    @Test("a snapshot older than the stored one is not written, and the journal it covers stays dropped")
    func olderSnapshotRefused() throws {
        let directory = TestScratch.root
            .appendingPathComponent("perimeter-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("evaluator.sqlite").path

        let processing = try EvaluatorStore(path: path)
        let background = try EvaluatorStore(path: path)
        var seqs: [Int64] = []
        for index in 0..<6 {
            seqs.append(try processing.journal(topic: "obs/\(index)", payload: [UInt8(index)], received: Date()))
        }
        try background.saveSnapshot(seq: seqs[3], data: Array("newer".utf8), now: Date())
        try processing.saveSnapshot(seq: seqs[1], data: Array("older".utf8), now: Date())

        let stored = try #require(try processing.loadSnapshot())
        #expect(stored.seq == seqs[3])
        #expect(stored.data == Array("newer".utf8))
        // Rows up to the snapshot are gone; the two after it are what a restart replays.
        #expect(try processing.inbox(after: 0).map(\.seq) == Array(seqs[4...]))

        try processing.saveSnapshot(seq: seqs[5], data: Array("newest".utf8), now: Date())
        #expect(try background.loadSnapshot()?.seq == seqs[5])
        #expect(try background.inbox(after: 0).isEmpty)
    }
}
