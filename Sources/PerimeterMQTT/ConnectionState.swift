/// Where the client's connection to the broker stands.
public enum ConnectionState: Sendable, Equatable, CustomStringConvertible {
    /// Created; `connect()` not called yet.
    case idle
    /// The first connection attempt is under way.
    case connecting
    /// CONNACK accepted. `sessionPresent` is true when the broker resumed a stored session.
    case connected(sessionPresent: Bool)
    /// The connection failed or was lost; the next attempt follows after a backoff.
    case reconnecting(attempt: Int, lastError: String)
    /// Shut down by `disconnect()`; the client will not connect again.
    case closed

    public var isConnected: Bool {
        if case .connected = self { return true }
        return false
    }

    public var description: String {
        switch self {
        case .idle: "idle"
        case .connecting: "connecting"
        case .connected(let sessionPresent): sessionPresent ? "connected (session resumed)" : "connected"
        case .reconnecting(let attempt, let lastError): "reconnecting (attempt \(attempt)): \(lastError)"
        case .closed: "closed"
        }
    }
}
