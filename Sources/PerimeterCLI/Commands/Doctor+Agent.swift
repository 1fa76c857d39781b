import Foundation
import PerimeterAgent
import PerimeterCore
import PerimeterNet

extension DoctorCommand {
    /// An edge agent: its outbox database, its source (gpsd answering with a device, the
    /// Bluetooth controller present, the replay or simulator file readable), its broker account.
    func checkAgent(_ scope: Scope, _ brokers: BrokerChecks) async {
        guard let configuration = read(AgentConfiguration.self, scope) else { return }
        scope.ok(
            "configuration: valid (agent \(configuration.agent), venue \(configuration.venue), source \(configuration.source.rawValue))"
        )
        Self.checkDatabase(configuration.databasePath, scope, creator: "the agent")
        switch configuration.source {
        case .gpsd: await checkGPSD(host: configuration.gpsd.host, port: configuration.gpsd.port, scope)
        case .hci: checkHCI(configuration.hciDevice, scope)
        case .replay: checkReadable("replay.file", configuration.replay.file, scope)
        case .simulator: checkReadable("simulator.venue", configuration.simulator.venuePath, scope)
        }
        _ = await brokers.connect(configuration.broker, scope)
    }

    /// gpsd greets every client with its VERSION; `?DEVICES;` lists the receivers it reads.
    private func checkGPSD(host: String, port: Int, _ scope: Scope) async {
        let where_ = "gpsd \(host):\(port)"
        do {
            let (release, devices): (String, Int?) = try await Blocking.run { () throws -> (String, Int?) in
                let connection = try TCPConnection(host: host, port: port, connectTimeout: 5, ioTimeout: 5)
                defer { connection.close() }
                var text = ""
                func line(containing marker: String) throws -> String? {
                    // An interval, not a wall time: a clock step must not cut it short or stretch it.
                    let deadline = ContinuousClock.now + .seconds(5)
                    while ContinuousClock.now < deadline {
                        // gpsd ends lines with CRLF, one Character in Swift: split on newlines, not on "\n".
                        if let found = text.split(whereSeparator: \.isNewline).first(where: { $0.contains(marker) }) {
                            return String(found)
                        }
                        let bytes = try connection.read()
                        if bytes.isEmpty { return nil }
                        text += String(decoding: bytes, as: UTF8.self)
                    }
                    return nil
                }
                guard let version = try line(containing: "\"class\":\"VERSION\"") else {
                    throw AgentSourceError("\(host):\(port) answered without gpsd's VERSION greeting")
                }
                let release = (try? JSONParser.parse(version))?["release"]?.stringValue ?? "?"
                try connection.write("?DEVICES;\n")
                let listed = try? line(containing: "\"class\":\"DEVICES\"")
                let devices = listed.flatMap { (try? JSONParser.parse($0))?["devices"]?.arrayValue?.count }
                return (release, devices)
            }
            switch devices {
            case 0?:
                scope.warn("\(where_): gpsd \(release) answers and reads no GPS receiver (gpsd's device list is empty)")
            case let count?:
                scope.ok("\(where_): gpsd \(release) answers, \(count) receiver(s)")
            case nil:
                scope.ok("\(where_): gpsd \(release) answers (its devices not listed)")
            }
        } catch {
            scope.fail("\(where_): \(error); is gpsd running and listening there (gpsd.host, gpsd.port)?")
        }
    }

    /// The controller the raw HCI socket binds to: the kernel lists it in /sys/class/bluetooth.
    private func checkHCI(_ device: Int, _ scope: Scope) {
        let path = "/sys/class/bluetooth/hci\(device)"
        if FileManager.default.fileExists(atPath: path) {
            scope.ok("hci\(device): Bluetooth controller present (\(path)); the agent needs CAP_NET_RAW to read it")
        } else {
            let present = ((try? FileManager.default.contentsOfDirectory(atPath: "/sys/class/bluetooth")) ?? [])
                .filter { $0.hasPrefix("hci") }.sorted()
            scope.fail(
                "hci\(device): no such Bluetooth controller (\(present.isEmpty ? "none on this machine" : "present: \(present.joined(separator: ", "))")); set hci.device or attach the radio"
            )
        }
    }

    private func checkReadable(_ key: String, _ path: String?, _ scope: Scope) {
        guard let path else { return }
        if FileManager.default.isReadableFile(atPath: path) {
            scope.ok("\(key): \(path) readable")
        } else {
            scope.fail("\(key): cannot read \(path)")
        }
    }
}
