import Foundation
import PerimeterKit
import PerimeterMQTT

/// A private `mosquitto` for one test, on its own free loopback port.
///
/// A missing `mosquitto` makes the test fail with the install command, never skip.
public enum TestBroker {
    public static func start(
        persistence: Bool = false, extraConfiguration: [String] = []
    ) async throws
        -> MosquittoBroker
    {
        try await MosquittoBroker.start(
            MosquittoBroker.Options(persistence: persistence, extraConfiguration: extraConfiguration))
    }
}

extension MosquittoBroker {
    /// A client configuration for this broker with a unique client id.
    public func clientConfiguration(
        _ name: String = "test", protocolVersion: MQTTConfiguration.ProtocolVersion = .v5, cleanStart: Bool = true,
        will: MQTTConfiguration.Will? = nil
    ) -> MQTTConfiguration {
        MQTTConfiguration(
            host: "127.0.0.1", port: port, clientID: "\(name)-\(UUID().uuidString.prefix(8))", keepAlive: 5,
            protocolVersion: protocolVersion, cleanStart: cleanStart, will: will,
            backoff: .init(initial: .milliseconds(50), maximum: .milliseconds(500)))
    }

    /// A connected client.
    public func connectedClient(
        _ name: String = "test", protocolVersion: MQTTConfiguration.ProtocolVersion = .v5
    ) async throws -> MQTTClient {
        let client = try MQTTClient(clientConfiguration(name, protocolVersion: protocolVersion))
        try await client.connect(timeout: .seconds(5))
        return client
    }
}

/// Collects the next `count` messages from a client, or fails after `timeout`.
public func nextMessages(
    _ client: MQTTClient, count: Int, timeout: Duration = .seconds(20)
) async throws
    -> [MQTTMessage]
{
    try await withThrowingTaskGroup(of: [MQTTMessage].self) { group in
        group.addTask {
            var collected: [MQTTMessage] = []
            for await message in client.messages {
                collected.append(message)
                if collected.count == count { break }
            }
            return collected
        }
        group.addTask {
            // Sleep, not a clock: a test's deadline for a real broker's messages; it only ends a wait.
            try await Task.sleep(for: timeout)
            throw TimeoutError(what: "\(count) messages", timeout: timeout)
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

/// A test waited too long.
public struct TimeoutError: Error, CustomStringConvertible {
    public var what: String
    public var timeout: Duration

    public init(what: String, timeout: Duration) {
        self.what = what
        self.timeout = timeout
    }

    public var description: String { "timed out after \(timeout) waiting for \(what)" }
}

/// Runs `operation` with a deadline.
public func withTimeout<T: Sendable>(
    _ timeout: Duration, _ what: String, _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            // Sleep, not a clock: a test's deadline for a real broker's messages; it only ends a wait.
            try await Task.sleep(for: timeout)
            throw TimeoutError(what: what, timeout: timeout)
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}
