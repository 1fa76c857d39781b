import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterTestSupport
import Testing

/// The snapshot as the evaluator process writes and reads it in its database.
@Suite("Evaluator snapshot file", .serialized)
struct SnapshotFileTests {
    @Test(
        "kill -9 after a periodic snapshot: it is binary and the restart restores it; damaged, the start stops naming the file and byte"
    )
    func binarySnapshotAndDamage() async throws {
        let (regions, points) = try EvaluatorServiceTests.trackVenue()
        let harness = try await EvaluatorHarness(regions: regions, evaluator: ["snapshotEvery": 10])
        let path = harness.directory.appendingPathComponent("evaluator.sqlite").path
        try await harness.startEvaluator()
        for point in points.prefix(40) {
            try await harness.publish(harness.topics.gps(agent: "car"), EvaluatorServiceTests.fix(point))
        }
        _ = try await harness.waitFor("a periodic snapshot", timeout: .seconds(60)) { _ in
            harness.evaluatorOutput.contains("background=true")
        }
        harness.killEvaluator()
        let store = try EvaluatorStore(path: path)
        let written = try #require(try store.loadSnapshot())
        #expect(BinaryFormat.isBinary(written.data), "the snapshot starts \(written.data.prefix(8))")

        try await harness.startEvaluator()
        #expect(harness.evaluatorOutput.contains("state restored from a snapshot"))
        #expect(harness.evaluatorOutput.contains("format=binary"), "\(harness.evaluatorOutput.suffix(2000))")
        harness.killEvaluator()

        var damaged = try #require(try store.loadSnapshot()).data
        damaged[damaged.count / 2] ^= 0x40
        _ = try store.database.run("UPDATE snapshot SET data = ? WHERE id = 1", damaged)
        do {
            try await harness.startEvaluator()
            Issue.record("an evaluator started on a damaged snapshot")
        } catch {
            let said = "\(error)"
            #expect(said.contains("the state snapshot in \(path): byte "), "\(said.suffix(2000))")
            #expect(said.contains("checksum mismatch"), "\(said.suffix(2000))")
            #expect(!said.contains("Fatal error"), "\(said.suffix(2000))")
        }
        await harness.stop()
    }
}
