import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterMQTT

/// `perimeter bench restart`: how long an evaluator that was `kill -9`ed takes to be ready
/// again with many subjects, and what each subject costs in memory — against an evaluator with
/// the same regions and no subjects, started in the same run.
struct BenchRestartCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restart", abstract: "Ready-again time after kill -9 and memory per subject, vs no subjects.",
        discussion: """
            Phases (one private Mosquitto, the synthetic venue of 'bench pipeline'):
              empty      an evaluator with the regions and no subjects: start → online, RSS.
              seed       one observation per subject written straight into a second evaluator's
                         journal (the regions file first), the processed cursor at its end: the
                         database an evaluator leaves when it was killed before its snapshot.
              rebuild    that evaluator starts: it rebuilds its state from the journal, takes a
                         snapshot, comes online. Start → online, RSS (memory per subject against
                         the empty one).
              restart    kill -9, start again: the state comes from the snapshot. Start → online
                         (the target: under 10 s with 1,000,000 subjects), RSS.
            "Online" is the evaluator's retained {"online":true}, published once it has its
            state, is connected and subscribed.
            """)

    @Option(help: "Tracked subjects.", valueName: "n")
    var subjects: Int = 1_000_000

    @Option(help: "Circle regions (20 m) the subjects are spread over.", valueName: "n")
    var regions: Int = 100

    @Option(help: "Share of subjects that report BLE scans instead of GPS fixes, in %.", valueName: "pct")
    var blePercent: Int = 20

    @Option(help: "Give up when an evaluator is not online after this many seconds.", valueName: "s")
    var timeout: Double = 900

    @Flag(
        help:
            "Leave out the authorization record and in-use state every subject otherwise has (the privacy gate's per-subject state, which the memory target counts)."
    )
    var noConsent: Bool

    @Option(
        help: "Times to kill -9 and restart from the snapshot (each timed; the median is reported).", valueName: "n")
    var restarts: Int = 1

    @Flag(help: "Keep the temporary directory (config, journal, logs) and print its path.")
    var keep: Bool

    mutating func validate() throws {
        guard (1...10_000_000).contains(subjects) else { throw ValidationError("--subjects must be 1…10,000,000") }
        guard (1...100_000).contains(regions) else { throw ValidationError("--regions must be 1…100,000") }
        guard (0...100).contains(blePercent) else { throw ValidationError("--ble-percent must be 0…100") }
        guard timeout > 0, timeout.isFinite else { throw ValidationError("--timeout must be a positive number") }
        guard (1...20).contains(restarts) else { throw ValidationError("--restarts must be 1…20") }
    }

    func run() async throws {
        #if DEBUG
            Output.error("warning: this is a debug build; build with 'swift build -c release' for real figures")
        #endif
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "perimeter-bench-restart-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer {
            if keep {
                Output.error("kept \(directory.path)")
            } else {
                try? FileManager.default.removeItem(at: directory)
            }
        }
        // Event times a little in the past: the evaluator refuses times ahead of its clock.
        let origin = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 3_600).rounded(.down))
        let workload = BenchPipelineWorkload(
            subjects: subjects, circles: regions, beaconRegions: 10, blePercent: blePercent, interval: 2,
            origin: origin)
        let regionsPath = directory.appendingPathComponent("regions.geojson").path
        try workload.regionsGeoJSON.write(toFile: regionsPath, atomically: true, encoding: .utf8)
        let broker = try await MosquittoBroker.start()
        defer { broker.kill() }
        let endpoint = (host: "127.0.0.1", port: broker.port)
        let limit = Duration.seconds(timeout)
        print(
            "perimeter bench restart: \(subjects) subjects (\(workload.bleSubjects) BLE), \(regions) circles + 10 beacon regions, broker 127.0.0.1:\(broker.port), \(ProcessInfo.processInfo.activeProcessorCount) cores"
        )

        // Empty: the same regions on a venue of its own, no subjects.
        let emptyWatch = try await EvaluatorWatch.connect(endpoint: endpoint, instance: "empty")
        let empty = try await Self.startMeasured(emptyWatch, timeout: limit) {
            try EvaluatorProcess.start(
                directory: directory, regionsPath: regionsPath, port: broker.port, instance: "empty",
                venues: ["empty"])
        }
        _ = await empty.process.stopGracefully()
        await emptyWatch.client.disconnect()
        print("empty:    \(empty)")
        let emptyKB = empty.residentKB

        // Seed: the journal of an evaluator killed before it took any snapshot.
        let seedStarted = ContinuousClock.now
        let databasePath = directory.appendingPathComponent("evaluator-bench.sqlite").path
        try Self.seed(databasePath: databasePath, regionsPath: regionsPath, workload: workload, consent: !noConsent)
        print(
            "seed:     \(subjects) observations\(noConsent ? "" : ", authorization records and usage states") journalled in \(Self.format(Self.seconds(ContinuousClock.now - seedStarted))) s"
        )

        // Rebuild: from the journal, then a snapshot (whatever the number of subjects).
        let settings: JSONObject = ["snapshotEvery": .number(Double(min(subjects, 50_000)))]
        let start = {
            try EvaluatorProcess.start(
                directory: directory, regionsPath: regionsPath, port: broker.port, evaluatorSettings: settings)
        }
        let watch = try await EvaluatorWatch.connect(endpoint: endpoint)
        let rebuild = try await Self.startMeasured(watch, timeout: limit, start)
        defer { rebuild.process.stop() }
        print("rebuild:  \(rebuild) (journal replayed, snapshot taken)")

        // Restart: kill -9, then from the snapshot (which the restart restores before anything).
        rebuild.process.stop()
        let snapshotSeq = try EvaluatorStore(path: databasePath).loadSnapshot()?.seq
        guard let snapshotSeq, snapshotSeq > Int64(subjects) else {
            throw ExitCode(1, "the rebuilt evaluator took no snapshot of its \(subjects) subjects")
        }
        var times: [Double] = []
        var restart: Started?
        for round in 1...restarts {
            if let previous = restart { previous.process.stop() }
            let offline = try await waitForCondition(timeout: .seconds(60)) {
                watch.latestStatus?.contains("\"online\":false") == true
            }
            guard offline else { throw ExitCode(1, "the killed evaluator's last will never arrived") }
            let started = try await Self.startMeasured(watch, timeout: limit, start)
            restart = started
            times.append(started.seconds)
            print(
                "restart:  \(started) (from the snapshot at journal row \(snapshotSeq))\(restarts > 1 ? ", \(round) of \(restarts)" : "")"
            )
        }
        guard let restart else { return }
        defer { restart.process.stop() }
        await watch.client.disconnect()
        let (emptySeconds, restartSeconds, restartKB, rebuildKB) = (
            empty.seconds, times.sorted()[times.count / 2], restart.residentKB, rebuild.residentKB
        )

        let perSubject = Double(restartKB - emptyKB) * 1024 / Double(subjects)
        let perSubjectRebuilt = Double(rebuildKB - emptyKB) * 1024 / Double(subjects)
        print("")
        print("results")
        print(
            "  restart after kill -9: \(Self.format(restartSeconds)) s\(restarts > 1 ? " (median of \(times.map { Self.format($0) }.joined(separator: ", ")))" : "") with \(subjects) subjects = \(Self.format(restartSeconds / max(emptySeconds, 0.001)))× an evaluator with none (\(Self.format(emptySeconds)) s); target < 10 s"
        )
        print(
            "  memory: \(Self.rate(perSubject)) B/subject after restart, \(Self.rate(perSubjectRebuilt)) B/subject after the rebuild (RSS minus the empty evaluator's); target < 1,000"
        )
        print("  database: \(Self.megabytes(restart.process.journalBytes() / 1024)) MB (snapshot and journal)")
    }

    /// An evaluator started and online: how long that took and its memory then.
    struct Started: CustomStringConvertible {
        let process: EvaluatorProcess
        let seconds: Double
        let residentKB: Int
        let highWaterKB: Int

        var description: String {
            "online \(format(seconds)) s after start, RSS \(megabytes(residentKB)) MB (high water \(megabytes(highWaterKB)) MB)"
        }
    }

    /// Starts an evaluator and times it until `watch` sees it online.
    static func startMeasured(
        _ watch: EvaluatorWatch, timeout: Duration, _ start: () throws -> EvaluatorProcess
    ) async throws -> Started {
        let started = ContinuousClock.now
        let process = try start()
        do {
            try await watch.waitOnline(process, timeout: timeout)
        } catch {
            process.stop()
            throw error
        }
        return Started(
            process: process, seconds: seconds(ContinuousClock.now - started), residentKB: process.residentKB(),
            highWaterKB: process.residentKB(peak: true))
    }

    /// Writes the regions file's row and one observation per subject into the evaluator's
    /// journal, in one transaction, and moves the processed cursor to the end: what an
    /// evaluator killed before its first snapshot leaves.
    static func seed(
        databasePath: String, regionsPath: String, workload: BenchPipelineWorkload, consent: Bool
    ) throws {
        let store = try EvaluatorStore(path: databasePath)
        let regions = try Array(Data(contentsOf: URL(fileURLWithPath: regionsPath)))
        let received = workload.origin
        var last: Int64 = 0
        try store.database.transaction {
            try store.journal(
                .regionsFile, topic: BenchPipelineWorkload.venue, payload: regions, received: received)
            for k in 0..<workload.subjects {
                for (topic, payload) in consent ? workload.consent(k) : [] {
                    last = try store.journal(topic: topic, payload: payload, received: received)
                }
                let (topic, payload) = workload.message(k)
                last = try store.journal(topic: topic, payload: payload, received: received)
            }
        }
        _ = try store.commit(seq: last, messages: [], now: received)
    }

    static func seconds(_ duration: Duration) -> Double { BenchMQTTCommand.seconds(duration) }
    static func format(_ value: Double) -> String { BenchPipelineCommand.format(value) }
    static func rate(_ value: Double) -> String { BenchPipelineCommand.rate(value) }
    static func megabytes(_ kilobytes: Int) -> String { BenchPipelineCommand.megabytes(kilobytes) }
}
