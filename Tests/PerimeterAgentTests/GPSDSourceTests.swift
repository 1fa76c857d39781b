import Foundation
import PerimeterAgent
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Synchronization
import Testing

/// Debian's real gpsd, fed a real receiver's NMEA capture over TCP; the agent's gpsd source
/// must produce exactly the fixes gpsd's own test suite expects (the `.chk` files).
@Suite("gpsd source against a real gpsd")
struct GPSDSourceTests {
    @Test(
        "real captures through gpsd give the fixes gpsd's test suite expects",
        arguments: ["bu353s4.log", "haicom-305N.log"])
    func capture(_ name: String) async throws {
        guard let gpsd = Subprocess.find("gpsd") else {
            Issue.record("gpsd is not installed: apt-get install gpsd (scripts/setup.sh installs it)")
            return
        }
        let expected = try Fixtures.gpsdFixes(name)
        #expect(expected.count > 10)
        let lines = Lines(data: try Data(contentsOf: URL(fileURLWithPath: try Fixtures.path("nmea/\(name)"))))
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        let feeder = try NMEAFeeder(lines: lines)
        let port = try MosquittoBroker.freeLoopbackPort()
        // -N foreground, -n read the device without waiting for a client, -b read-only (never
        // configure the receiver), -S our own port; the device is the feeder.
        let daemon = try ChildProcess(gpsd, ["-N", "-n", "-b", "-S", "\(port)", "tcp://127.0.0.1:\(feeder.port)"])
        let collected = Collected()
        let log = InMemoryLogHandler()
        let source = GPSDSource(host: "127.0.0.1", port: port, logger: log.logger())
        var task: Task<Void, any Error>?
        do {
            try await waitUntil("gpsd listening on \(port)", timeout: .seconds(60)) {
                // (a gpsd that could not start is not waited for)
                MosquittoBroker.accepts(port: port) || !daemon.subprocess.isRunning
            }
            #expect(daemon.subprocess.isRunning, "gpsd ended: \(daemon.output)")
            task = Task { try await source.run { collected.add($0) } }
            // Feed the capture once gpsd has acknowledged the watch (its WATCH report).
            try await waitUntil("gpsd to acknowledge ?WATCH", timeout: .seconds(60)) {
                !log.records(containing: "streaming reports").isEmpty
            }
            feeder.start()
            // Until as many fixes as the capture holds have arrived: a wrong or extra fix among
            // them makes the comparison below fail (no fixed wait for "nothing more": the
            // comparison is of what arrived up to the expected count).
            try await waitUntil("\(expected.count) fixes from gpsd", timeout: .seconds(60)) {
                collected.readings.count >= expected.count
            }
        } catch {
            Issue.record("\(error); gpsd said: \(daemon.output)")
        }
        task?.cancel()
        _ = try? await task?.value
        daemon.kill(SIGTERM)
        feeder.stop()
        let got = collected.readings
        #expect(got.count == expected.count)
        for (reading, want) in zip(got, expected) {
            #expect(reading == want)
        }
    }

    @Test("the same captures replayed by Debian's gpsfake (gpsd-clients) give the same fixes")
    func gpsfake() async throws {
        guard let gpsfake = Subprocess.find("gpsfake") else {
            Issue.record("gpsfake is not installed: apt-get install gpsd-clients (scripts/setup.sh installs it)")
            return
        }
        for name in ["bu353s4.log", "haicom-305N.log"] {
            let expected = try Fixtures.gpsdFixes(name)
            let port = try MosquittoBroker.freeLoopbackPort()
            // -1 once through, -n gpsd reads without waiting for a client, -c a pause between
            // sentences, -i a line on gpsfake's standard input before each sentence: the capture
            // is fed only once our watch is acknowledged (fed freely, it could all pass before a
            // starved test connected). gpsd is found on PATH (/usr/sbin).
            let path = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin") + ":/usr/sbin:/sbin"
            let steps = Pipe()
            // WRITE_PAD and -W: gpsfake's own pacing and patience, raised for a loaded machine
            // (it gives up with "Test timed out: maybe increase WRITE_PAD").
            let fake = try ChildProcess(
                gpsfake,
                [
                    "-1", "-n", "-q", "-i", "-c", "0.02", "-W", "240", "-P", "\(port)",
                    try Fixtures.path("nmea/\(name)"),
                ],
                environment: ["PATH": path, "WRITE_PAD": "0.005"],
                stdin: .descriptor(steps.fileHandleForReading.fileDescriptor))
            try steps.fileHandleForReading.close()
            defer { try? steps.fileHandleForWriting.close() }
            let sentences = try String(contentsOfFile: try Fixtures.path("nmea/\(name)"), encoding: .utf8)
                .split(separator: "\n").count
            let collected = Collected()
            let log = InMemoryLogHandler()
            let source = GPSDSource(host: "127.0.0.1", port: port, logger: log.logger())
            var task: Task<Void, any Error>?
            var daemons: [pid_t] = []
            do {
                try await waitUntil("gpsfake's gpsd listening on \(port)", timeout: .seconds(60)) {
                    MosquittoBroker.accepts(port: port)
                }
                daemons = childProcesses(of: fake.subprocess.pid)
                task = Task { try await source.run { collected.add($0) } }
                try await waitUntil("gpsd acknowledging our watch", timeout: .seconds(60)) {
                    !log.records(containing: "gpsd is streaming reports").isEmpty
                }
                // One line per sentence, and some to spare (an end of input would stop gpsfake).
                try steps.fileHandleForWriting.write(contentsOf: Data(repeating: 10, count: sentences + 64))
                // Until the last fix has arrived (the capture is fed once). Reading gpsfake's
                // output meanwhile keeps its echo of each sentence from filling the pipe.
                try await waitUntil("the last fix through gpsfake", timeout: .seconds(180)) {
                    _ = fake.output
                    return collected.readings.last == expected.last
                }
            } catch {
                let said = log.records.map { "\($0.level) \($0.message) \($0.metadata)" }.joined(separator: "; ")
                Issue.record("\(name): \(error); the source said: \(said); gpsfake said: \(fake.output.suffix(3000))")
            }
            task?.cancel()
            _ = try? await task?.value
            // gpsfake stays up after its one pass and ignores SIGTERM and SIGINT: kill it and
            // the gpsd it started.
            for daemon in daemons { kill(daemon, SIGKILL) }
            fake.kill(SIGKILL)
            let got = collected.readings
            #expect(
                got == expected, "\(name): \(got.count) fixes of \(expected.count), or they differ from gpsd's .chk")
        }
    }
}

@Suite("gpsd source against a hostile gpsd")
struct GPSDHostileTests {
    /// A stand-in for gpsd on loopback (a real gpsd cannot be made to misbehave): it answers
    /// connection n with `replies[n]` and keeps the connection open.
    final class FakeGPSD: Sendable {
        let port: Int
        private let listener: Int32
        final class Count: Sendable { let value = Atomic<Int>(0) }
        private let connections = Count()
        /// Connections accepted so far.
        var accepted: Int { connections.value.load(ordering: .acquiring) }

        init(replies: [[UInt8]]) throws {
            let (fd, port) = try listenOnLoopback("fake gpsd")
            self.port = port
            listener = fd
            let connections = self.connections
            let thread = Thread {
                for reply in replies {
                    let client = accept(fd, nil, nil)
                    guard client >= 0 else { return }
                    connections.value.add(1, ordering: .releasing)
                    Thread {
                        _ = reply.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                        var byte: UInt8 = 0
                        while recv(client, &byte, 1, 0) > 0 {}  // until the source hangs up
                        close(client)
                    }.start()
                }
            }
            thread.start()
        }

        func stop() {
            shutdown(listener, Int32(SHUT_RDWR))
            close(listener)
        }
    }

    @Test(
        "a line with no end past 64 KiB drops the connection with an error naming it; the source reconnects after 3 s of its clock"
    )
    func endlessLine() async throws {
        let fix =
            #"{"class":"TPV","device":"/dev/ttyUSB0","mode":3,"time":"2026-12-04T05:00:00.000Z","lat":45.81,"lon":15.98,"alt":120.0,"epx":3.1,"epy":3.4}"#
        let gpsd = try FakeGPSD(replies: [
            Array(repeating: UInt8(ascii: "x"), count: 200_000), Array((fix + "\r\n").utf8),
        ])
        defer { gpsd.stop() }
        let clock = ManualClock(Date())
        let log = InMemoryLogHandler()
        let collected = Collected()
        let source = GPSDSource(host: "127.0.0.1", port: gpsd.port, logger: log.logger(), clock: clock)
        let task = Task { try await source.run { collected.add($0) } }
        defer { task.cancel() }
        try await waitUntil("the endless line refused") { !log.records(containing: "gpsd unavailable").isEmpty }
        let said = log.records(containing: "gpsd unavailable").map { "\($0.metadata)" }.joined()
        #expect(said.contains("without a line end (a line is at most 65536)"), "\(said)")
        #expect(gpsd.accepted == 1)
        // The wait before connecting again is on the source's clock.
        #expect(try await clock.waitForSleepers(1))
        clock.advance(by: 3)
        try await waitUntil("the fix from the second connection") { collected.readings.count == 1 }
        #expect(gpsd.accepted == 2)
        #expect(collected.readings.first?.position.lat == 45.81)
    }
}
