import Foundation
import PerimeterCore
import PerimeterKit

/// Reads fixes from gpsd's JSON socket: sends `?WATCH={"enable":true,"json":true}` and maps
/// each TPV report with a 2D/3D fix and a time to a GPS reading (``GPSDReport``). Reports
/// without a fix (mode < 2) or without a time are counted, not published. When gpsd goes away
/// (or sends a line longer than ``maxLineBytes``) the source reconnects after
/// ``reconnectDelay`` on its clock.
public struct GPSDSource: AgentSource {
    public let host: String
    public let port: Int
    public let logger: Logger
    /// Stop when gpsd closes the connection instead of reconnecting (tests, one-shot runs).
    public var stopAtEnd = false
    public var name: String { "gpsd" }
    public let clock: any TimeSource
    /// The wait before connecting again.
    public static let reconnectDelay: Duration = .seconds(3)
    /// The longest line read from gpsd (its reports are a few kilobytes).
    public static let maxLineBytes = 65_536

    public init(
        host: String, port: Int, logger: Logger, stopAtEnd: Bool = false, clock: any TimeSource = SystemTimeSource()
    ) {
        self.host = host
        self.port = port
        self.logger = logger
        self.stopAtEnd = stopAtEnd
        self.clock = clock
    }

    public func run(emit: @Sendable ([AgentMessage]) async throws -> Void) async throws {
        var noFix = 0
        var otherClasses: Set<String> = []
        while !Task.isCancelled {
            do {
                let connection = try SocketLines(host: host, port: port, maxLineBytes: Self.maxLineBytes)
                try connection.write(GPSDReport.watchCommand)
                logger.info("gpsd connected", metadata: ["gpsd": .string("\(host):\(port)")])
                for try await line in connection.lines() {
                    if line.isEmpty { continue }
                    do {
                        switch try GPSDReport.interpret(line) {
                        case .fix(let reading): try await emit([.gps(agent: nil, reading)])
                        case .noFix, .noTime:
                            noFix += 1
                            if noFix == 1 {
                                logger.debug("gpsd reports without a fix or a time: counted, not published")
                            }
                        case .other("WATCH"): logger.debug("gpsd is streaming reports")
                        case .other(let kind):
                            // The first of each class is said (DEVICES, DEVICE, SKY, …; at most
                            // 16 classes): when no fix comes, the log shows how far gpsd got.
                            let kind = String(kind.prefix(40))
                            if otherClasses.count < 16, otherClasses.insert(kind).inserted {
                                logger.debug(
                                    "gpsd sent a report of a class without fixes", metadata: ["class": .string(kind)])
                            }
                        }
                    } catch let error as GPSDReport.Error {
                        logger.warning(
                            "gpsd report skipped",
                            metadata: ["error": "\(error)", "line": .string(String(line.prefix(200)))])
                    }
                }
                connection.close()
                logger.info("gpsd closed the connection", metadata: ["reports.noFix": "\(noFix)"])
            } catch let error as AgentSourceError {
                // Not reachable, or dropped for what it sent (the error says which).
                logger.warning(
                    "gpsd unavailable; connecting again",
                    metadata: ["error": "\(error)", "in": "\(Self.reconnectDelay)"])
            }
            if stopAtEnd { return }
            try await clock.sleep(for: Self.reconnectDelay)
        }
    }
}
