import Foundation
import PerimeterKit
import PerimeterTestSupport
import Synchronization
import Testing

/// Records starts and stops into a shared journal.
struct RecordingService: Service {
    let name: String
    let journal: Journal
    /// Fails once every service of the group has started (`started` of them).
    var failOnceStarted: Int?
    /// Returns once every service of the group has started (`started` of them).
    var finishOnceStarted: Int?

    func run() async throws {
        journal.add("start \(name)")
        defer { journal.add("stop \(name)") }
        if let failOnceStarted {
            try await waitUntil("\(failOnceStarted) services started") { journal.started >= failOnceStarted }
            throw ServiceGroupError(service: name, message: "broken")
        }
        if let finishOnceStarted {
            try await waitUntil("\(finishOnceStarted) services started") { journal.started >= finishOnceStarted }
            return
        }
        // Runs until cancelled: a stream that never yields ends when the task is cancelled.
        let never = AsyncStream<Never> { _ in }
        for await _ in never {}
        // Shutting down takes a while (other tasks run meanwhile); the next service must wait
        // for it, or its stop would be recorded first.
        for _ in 0..<1_000 { await Task.yield() }
    }
}

final class Journal: Sendable {
    private let entries = Mutex<[String]>([])
    func add(_ entry: String) { entries.withLock { $0.append(entry) } }
    var all: [String] { entries.withLock { $0 } }
    var started: Int { entries.withLock { $0.count { $0.hasPrefix("start ") } } }
}

@Suite("Service group")
struct ServiceGroupTests {
    @Test("a finished service stops the others in reverse start order, one at a time")
    func reverseOrder() async throws {
        let journal = Journal()
        let group = ServiceGroup(
            services: [
                RecordingService(name: "broker", journal: journal),
                RecordingService(name: "evaluator", journal: journal),
                RecordingService(name: "timer", journal: journal, finishOnceStarted: 3),
            ], logger: .discarding(), handlesSignals: false)
        let outcome = try await group.run()
        #expect(outcome == .serviceFinished("timer"))
        let stops = journal.all.filter { $0.hasPrefix("stop") }
        #expect(stops == ["stop timer", "stop evaluator", "stop broker"])
    }

    @Test("a failing service stops the group and its error comes out")
    func failure() async throws {
        let journal = Journal()
        let group = ServiceGroup(
            services: [
                RecordingService(name: "a", journal: journal),
                RecordingService(name: "b", journal: journal, failOnceStarted: 2),
            ],
            logger: .discarding(), handlesSignals: false)
        await #expect(throws: ServiceGroupError.self) { try await group.run() }
        #expect(journal.all.last == "stop a")
    }

    @Test("cancelling the caller shuts the group down")
    func cancellation() async throws {
        let journal = Journal()
        let task = Task {
            try await ServiceGroup(
                services: [RecordingService(name: "a", journal: journal)], logger: .discarding(), handlesSignals: false
            ).run()
        }
        try await waitUntil("service a started") { journal.all.contains("start a") }
        task.cancel()
        #expect(try await task.value == .cancelled)
        #expect(journal.all == ["start a", "stop a"])
    }
}

@Suite("Subprocesses and the private broker")
struct SubprocessTests {
    @Test("exit status and signals are reported")
    func termination() async throws {
        let exiting = try Subprocess.spawn("/bin/sh", ["-c", "exit 3"])
        #expect(await exiting.wait() == .exited(3))
        let sleeping = try Subprocess.spawn("/bin/sleep", ["30"])
        sleeping.signal(SIGKILL)
        #expect(await sleeping.wait() == .signalled(SIGKILL))
    }

    @Test(
        "a timed wait says nil while the child runs and its end once it ends; every waiter hears it, also after a poll reaped it"
    )
    func timedWait() async throws {
        let child = try Subprocess.spawn("/bin/sleep", ["30"])
        // `sleep 30` cannot have ended within 50 ms: nil is the only right answer.
        #expect(await child.wait(timeout: .milliseconds(50)) == nil)
        #expect(child.isRunning)
        // Several waiters at once (each with its own pidfd), woken by the end, not by their timeouts.
        async let first = child.wait(timeout: .seconds(60))
        async let second = child.wait(timeout: .seconds(60))
        child.signal(SIGTERM)
        #expect(await first == .signalled(SIGTERM))
        #expect(await second == .signalled(SIGTERM))
        // Reaped already: a later wait answers at once from what was kept.
        #expect(await child.wait(timeout: .seconds(60)) == .signalled(SIGTERM))
        let quick = try Subprocess.spawn("/bin/sh", ["-c", "exit 4"])
        try await waitUntil("the shell was reaped by a poll") { quick.poll() != nil }
        #expect(await quick.wait(timeout: .seconds(60)) == .exited(4))
    }

    @Test("end(within:) kills a child still running past its grace and reaps it; one that ends in time is not killed")
    func endWithin() async throws {
        let sleeping = try Subprocess.spawn("/bin/sleep", ["30"])
        let (termination, killed) = await sleeping.end(within: .milliseconds(50))
        #expect(killed && termination == .signalled(SIGKILL))
        #expect(!sleeping.isRunning)
        let quick = try Subprocess.spawn("/bin/sh", ["-c", "exit 3"])
        let ended = await quick.end(within: .seconds(60))
        #expect(!ended.killed && ended.termination == .exited(3))
    }

    @Test("a child started from a Dispatch thread still honours SIGTERM (clean signal mask)")
    func cleanSignalMask() async throws {
        let child = try await Task.detached { try Subprocess.spawn("/bin/sleep", ["30"]) }.value
        child.signal(SIGTERM)
        let outcome = await child.wait(timeout: .seconds(5))
        if outcome == nil { child.signal(SIGKILL) }
        #expect(outcome == .signalled(SIGTERM))
    }

    @Test("the private mosquitto starts on a free port, restarts on the same port, and stops")
    func broker() async throws {
        let broker = try await TestBroker.start()
        let port = broker.port
        #expect(MosquittoBroker.accepts(port: port))
        try await broker.restart()
        #expect(broker.port == port && MosquittoBroker.accepts(port: port))
        await broker.stop()
        #expect(broker.pid == nil)
        #expect(broker.log.contains("mosquitto version"))
    }

    @Test("the embedded broker's service: a broker that dies fails it, naming its log; a stop stops the broker")
    func brokerService() async throws {
        let logs = InMemoryLogHandler()
        let dying = try await TestBroker.start()
        let pid = try #require(dying.pid)
        let watched = Task { try await BrokerService(broker: dying, logger: logs.logger()).run() }
        try await waitUntil("the service running") { !logs.records(containing: "embedded mosquitto running").isEmpty }
        kill(pid, SIGKILL)
        let failure = await #expect(throws: ServiceGroupError.self) { try await watched.value }
        #expect("\(failure.map { "\($0)" } ?? "")".contains("mosquitto exited unexpectedly; its log: \(dying.logPath)"))

        let kept = try await TestBroker.start()
        let service = Task { try await BrokerService(broker: kept, logger: logs.logger()).run() }
        try await waitUntil("the second service running") {
            logs.records(containing: "embedded mosquitto running").count == 2
        }
        service.cancel()
        try await service.value
        #expect(kept.pid == nil, "stopped with the service")
        #expect(!MosquittoBroker.accepts(port: kept.port))
    }
}
