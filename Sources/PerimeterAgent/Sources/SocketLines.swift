import Foundation
import PerimeterNet

/// A TCP connection read line by line, with a blocking socket on its own thread (the agent
/// reads one socket; a thread per source is simpler than an event loop). The connection is
/// PerimeterNet's ``TCPConnection``, without read timeouts: gpsd may be quiet for long.
///
/// A line is at most ``maxLineBytes`` long: a peer that sends more without a line end ends the
/// stream with an error naming it, so what a broken or hostile peer sends never grows the
/// buffer past that (gpsd's reports are a few kilobytes).
final class SocketLines: Sendable {
    private let connection: TCPConnection
    private let endpoint: String
    let maxLineBytes: Int

    /// Connects to `host:port` (numeric or resolvable host) within 10 s.
    /// - Throws: ``AgentSourceError`` naming the endpoint and the system's reason.
    init(host: String, port: Int, maxLineBytes: Int = 65_536) throws {
        endpoint = "\(host):\(port)"
        self.maxLineBytes = maxLineBytes
        do {
            connection = try TCPConnection(host: host, port: port, connectTimeout: 10, ioTimeout: nil)
        } catch {
            throw AgentSourceError("\(error)")  // names the endpoint and the reason
        }
    }

    func write(_ text: String) throws {
        try connection.write(text)
    }

    /// Lines as they arrive, until the peer closes or ``close()`` is called; an
    /// ``AgentSourceError`` ends them when a line would pass ``maxLineBytes``.
    func lines() -> AsyncThrowingStream<String, any Error> {
        AsyncThrowingStream { continuation in
            let (connection, endpoint, limit) = (self.connection, self.endpoint, self.maxLineBytes)
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
                    if buffer.count > limit {
                        connection.shutdown()
                        continuation.finish(
                            throwing: AgentSourceError(
                                "\(endpoint) sent \(buffer.count) bytes without a line end (a line is at most \(limit)); disconnected"
                            ))
                        return
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
