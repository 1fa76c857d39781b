import Foundation
import PerimeterKit
import PerimeterTestSupport
import Synchronization
import Testing

@Suite("Intake gate")
struct IntakeGateTests {
    enum Step: Sendable, CustomStringConvertible {
        case journalled(Int64, at: Double)
        case processed(Int64, at: Double)

        var description: String {
            switch self {
            case .journalled(let seq, let at): "journalled \(seq) at \(at)"
            case .processed(let seq, let at): "processed \(seq) at \(at)"
            }
        }
    }

    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let steps: [Step]
        let holding: Bool
        /// The lag reported at t = 100 for a processing lag of 1 s.
        let lag: Double
        var testDescription: String { name }
    }

    // High water 100, low water 75.
    static let cases: [Case] = [
        Case(name: "below high water: open", steps: [.journalled(99, at: 10)], holding: false, lag: 1),
        Case(name: "at high water: held, episode from then", steps: [.journalled(100, at: 10)], holding: true, lag: 90),
        Case(
            name: "processed to 76 behind: still held", steps: [.journalled(150, at: 10), .processed(74, at: 20)],
            holding: true, lag: 90),
        Case(
            name: "processed to low water: open, episode goes on (backlog above a quarter of low water)",
            steps: [.journalled(150, at: 10), .processed(75, at: 20)], holding: false, lag: 90),
        Case(
            name: "backlog down to a quarter of low water: the episode ends",
            steps: [.journalled(150, at: 10), .processed(132, at: 20)], holding: false, lag: 1),
        Case(
            name: "held again in the same episode: dated from its first hold",
            steps: [.journalled(150, at: 10), .processed(75, at: 20), .journalled(180, at: 30)], holding: true,
            lag: 90),
        Case(
            name: "a new episode after one ended",
            steps: [.journalled(150, at: 10), .processed(150, at: 20), .journalled(260, at: 50)], holding: true,
            lag: 50),
        Case(
            name: "a restart: everything before the cursor processed",
            steps: [.processed(1_000_000, at: 0), .journalled(1_000_050, at: 10)], holding: false, lag: 1),
    ]

    @Test("holding and lag, table", arguments: cases)
    func table(_ test: Case) {
        let gate = IntakeGate(highWater: 100)
        for step in test.steps {
            switch step {
            case .journalled(let seq, let at): gate.journalled(through: seq, now: Date(timeIntervalSince1970: at))
            case .processed(let seq, let at): gate.processed(through: seq, now: Date(timeIntervalSince1970: at))
            }
        }
        #expect(gate.isHolding == test.holding)
        #expect(gate.lag(processing: 1, now: Date(timeIntervalSince1970: 100)) == test.lag)
    }

    @Test("the network thread waits while held and goes as soon as processing brings the backlog down")
    func waits() async throws {
        let gate = IntakeGate(highWater: 100)
        let now = Date(timeIntervalSince1970: 0)
        #expect(!gate.waitForRoom(slice: .seconds(60)), "open: no wait")
        gate.journalled(through: 100, now: now)
        let released = Atomic<Bool>(false)
        let thread = Thread {
            gate.waitForRoom(slice: .seconds(60))
            released.store(true, ordering: .releasing)
        }
        thread.start()
        // Still held after the waiter registered: a processed row that leaves 76 behind.
        gate.processed(through: 24, now: now)
        #expect(gate.isHolding)
        gate.processed(through: 25, now: now)
        try await waitUntil("the waiter released", timeout: .seconds(30), every: .milliseconds(1)) {
            released.load(ordering: .acquiring)
        }
        #expect(!gate.isHolding)
    }

    @Test("a slice ends the wait when nothing is processed; openForever lets every wait go")
    func slices() {
        let gate = IntakeGate(highWater: 10)
        gate.journalled(through: 10, now: Date(timeIntervalSince1970: 0))
        #expect(gate.waitForRoom(slice: .milliseconds(5)), "held: it waited one slice")
        gate.openForever()
        #expect(!gate.waitForRoom(slice: .seconds(60)))
    }
}
