import Foundation
import PerimeterNet

/// A TCP connection read line by line, with a blocking socket on its own thread (the agent
/// reads one socket; a thread per source is simpler than an event loop). The connection is
/// PerimeterNet's ``TCPConnection``, without read timeouts: gpsd may be quiet for long.
final class SocketLines: Sendable {
    private let connection: TCPConnection

    /// Connects to `host:port` (numeric or resolvable host) within 10 s.
    /// - Throws: ``AgentSourceError`` naming the endpoint and the system's reason.
    init(host: String, port: Int) throws {
        do {
            connection = try TCPConnection(host: host, port: port, connectTimeout: 10, ioTimeout: nil)
        } catch {
            throw AgentSourceError("\(error)")  // names the endpoint and the reason
        }
    }

    func write(_ text: String) throws {
        try connection.write(text)
    }

    /// Lines as they arrive, until the peer closes or ``close()`` is called.
    func lines() -> AsyncThrowingStream<String, any Error> {
        AsyncThrowingStream { continuation in
            let connection = self.connection
            let thread = Thread {
                var buffer: [UInt8] = []
                while let chunk = try? connection.read(limit: 65536), !chunk.isEmpty {
                    buffer.append(contentsOf: chunk)
                    while let newline = buffer.firstIndex(of: 0x0A) {
                        var line = buffer[..<newline]
                        if line.last == 0x0D { line = line.dropLast() }
                        continuation.yield(String(decoding: line, as: UTF8.self))
                        buffer.removeSubrange(...newline)
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in connection.shutdown() }
            thread.start()
        }
    }

    func close() {
        connection.shutdown()
    }
}
