import Foundation
import PerimeterCore
import PerimeterTestSupport
import Testing

@Suite("The manual clock: sleepers wake when the test moves time, never before")
struct ManualClockTests {
    @Test(
        "advance wakes exactly the sleepers whose deadline has come",
        arguments: [
            (sleeps: [1.0, 2.0, 3.0], advance: 0.5, woken: 0),
            (sleeps: [1.0, 2.0, 3.0], advance: 1.0, woken: 1),
            (sleeps: [1.0, 2.0, 3.0], advance: 2.5, woken: 2),
            (sleeps: [1.0, 2.0, 3.0], advance: 10, woken: 3),
        ])
    func wakesDue(sleeps: [Double], advance: Double, woken: Int) async throws {
        let clock = ManualClock()
        let start = clock.now
        let tasks = sleeps.map { seconds in Task { try await clock.sleep(seconds: seconds) } }
        try await clock.waitForSleepers(sleeps.count)
        clock.advance(by: advance)
        #expect(clock.now == start.addingTimeInterval(advance))
        // The woken ones leave the clock at once; the rest are still sleeping on it.
        #expect(clock.sleeperCount == sleeps.count - woken)
        for task in tasks { task.cancel() }
        for (task, seconds) in zip(tasks, sleeps) {
            let result = await task.result
            if seconds <= advance { #expect(throws: Never.self) { try result.get() } }
        }
    }

    @Test("a cancelled sleeper throws CancellationError and leaves the clock")
    func cancellation() async throws {
        let clock = ManualClock()
        let task = Task { try await clock.sleep(seconds: 60) }
        try await clock.waitForSleepers(1)
        task.cancel()
        await #expect(throws: CancellationError.self) { try await task.value }
        #expect(clock.sleeperCount == 0)
    }

    @Test("a zero or negative sleep returns at once")
    func immediate() async throws {
        let clock = ManualClock()
        try await clock.sleep(seconds: 0)
        try await clock.sleep(seconds: -5)
        #expect(clock.sleeperCount == 0)
    }
}
