import Foundation
import PerimeterCore
import Testing

@testable import PerimeterCLI

/// The synthetic workload of `bench pipeline` and `bench scale`, checked with the pure evaluator
/// (the oracle the benches use): how many reports change something.
@Suite("Bench workload")
struct BenchWorkloadTests {
    @Test(
        "a transition every N reports: each subject changes sides once per N rounds, evenly, and the last report of a run of N rounds is one",
        arguments: [1, 5, 10])
    func transitionEvery(_ every: Int) {
        let subjects = 40
        let workload = BenchPipelineWorkload(
            subjects: subjects, circles: 8, beaconRegions: 4, blePercent: 20, interval: 2,
            origin: Date(timeIntervalSince1970: 1_700_000_000), transitionEvery: every)
        var oracle = BenchPipelineOracle(
            settings: VenueSettings(
                id: BenchPipelineWorkload.venue, beaconExitTimeout: BenchPipelineCommand.beaconExitTimeout,
                privacy: .open),
            regionsGeoJSON: workload.regionsGeoJSON)
        // Warm-up (round 0), then 2N rounds.
        let warm = oracle.expect(workload.messages(0..<subjects), first: 0)
        let rounds = 2 * every
        let run = workload.messages(subjects..<(subjects * (1 + rounds)))
        let events = oracle.expect(run, first: subjects)
        #expect(oracle.rejected == 0)
        #expect(!warm.isEmpty)
        // Every subject changes sides twice in 2N rounds: one enter or exit each time.
        #expect(events.count == 2 * subjects, "\(events.count) events")
        // Spread over the rounds: each round has about 1/N of the transitions.
        let perRound = Dictionary(grouping: events.values) { ($0 - subjects) / subjects }.mapValues(\.count)
        #expect(perRound.count == min(rounds, 2 * every), "transitions in \(perRound.count) rounds of \(rounds)")
        #expect(perRound.values.allSatisfy { $0 <= 2 * subjects / every + 1 }, "\(perRound)")
        // The run's last report (the last subject in the last round) makes an event.
        #expect(events.values.contains(subjects * (1 + rounds) - 1))
    }
}
