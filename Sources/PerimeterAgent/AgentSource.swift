import PerimeterCore

/// Where an agent's observations come from: gpsd, a recorded track, the venue simulator, a
/// BLE radio. `run` emits messages in order until the source ends or the task is cancelled.
public protocol AgentSource: Sendable {
    var name: String { get }
    /// - Parameter emit: hands over the messages observed together (one GPS cycle, one tick).
    func run(emit: @Sendable ([AgentMessage]) async throws -> Void) async throws
}

/// An error a source reports with what it was reading.
public struct AgentSourceError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
