import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

/// `perimeter agent`: an edge agent publishing a source's observations (gpsd, a recorded
/// track, the venue simulator, a BLE radio) on the venue's topics, with a retained status and
/// last will, a distance filter and desired accuracy, batching, and store-and-forward in
/// SQLite while the broker is unreachable.
public struct AgentService: Service {
    public static let version = "0.1.0"

    public let configuration: AgentConfiguration
    public let source: any AgentSource
    public let logger: Logger
    /// When the source ends (a replay's last point, the simulator's last tick): how long to
    /// wait for the outbox to empty before stopping.
    public var drainTimeout: Duration = .seconds(30)
    /// How long to wait for the first connection before going on with the broker away
    /// (observations then queue in the outbox while the client keeps trying).
    public var connectTimeout: Duration = .seconds(5)
    public var name: String { "agent" }
    /// Where the agent's time comes from (queueing times, the status's `t`).
    public let clock: any TimeSource

    public init(
        configuration: AgentConfiguration, source: any AgentSource, logger: Logger,
        clock: any TimeSource = SystemTimeSource()
    ) {
        var configuration = configuration
        // `perimeter agent --venue config/campus` publishes on campus's topics: a simulated venue
        // names itself, unless agent.venue says otherwise.
        if configuration.venueIsDefault, let simulator = source as? SimulatorSource {
            configuration.venue = simulator.venue.name
        }
        self.configuration = configuration
        self.source = source
        self.logger = logger
        self.clock = clock
    }

    /// The source the configuration names.
    public static func makeSource(
        _ configuration: AgentConfiguration, logger: Logger,
        progress: (@Sendable (Int, Int) -> Void)? = nil, clock: any TimeSource = SystemTimeSource()
    ) throws -> any AgentSource {
        switch configuration.source {
        case .gpsd:
            return GPSDSource(
                host: configuration.gpsd.host, port: configuration.gpsd.port, logger: logger, clock: clock)
        case .replay:
            var source = try ReplaySource(
                path: configuration.replay.file ?? "-", format: configuration.replay.format,
                subject: configuration.subject, speed: configuration.replay.speed,
                interval: configuration.replay.interval, logger: logger, progress: progress)
            if !configuration.replay.originalTimes { source.dating = .sent { clock.now } }
            return source
        case .simulator:
            let venue = try SimulatorSource.loadVenue(configuration.simulator.venuePath ?? "")
            return SimulatorSource(
                venue: venue, seed: configuration.simulator.seed, visitors: configuration.simulator.visitors,
                speed: configuration.simulator.speed, ticks: configuration.simulator.ticks, clock: clock)
        case .hci:
            return HCISource(device: configuration.hciDevice, logger: logger, clock: clock)
        }
    }

    public func run() async throws {
        let publisher = try AgentPublisher(configuration: configuration, logger: logger, clock: clock)
        do {
            try await publisher.client.connect(timeout: connectTimeout)
        } catch let error as MQTTError {
            // Refused (credentials, ACL) is a configuration error; unreachable is what the
            // outbox is for: observations queue up and the client keeps reconnecting.
            if case .connectionRefused = error.kind { throw error }
            logger.warning(
                "broker unreachable; queueing observations until it is back", metadata: ["error": "\(error)"])
        }
        let source = self.source
        let logger = self.logger
        let drainTimeout = self.drainTimeout
        var failure: (any Error)?
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await publisher.runSender() }
                group.addTask { await publisher.runStatus() }
                group.addTask {
                    try await source.run { messages in try await publisher.submit(messages) }
                    logger.info("source ended; sending what is queued", metadata: ["source": .string(source.name)])
                    if await !publisher.drain(timeout: drainTimeout) {
                        let pending = await publisher.pending
                        logger.warning(
                            "outbox not empty at the end: kept for the next run",
                            metadata: ["outbox.pending": "\(pending)"])
                    }
                    throw SourceFinished()
                }
                defer { group.cancelAll() }
                try await group.next()
            }
        } catch is SourceFinished {
        } catch is CancellationError {
        } catch {
            // A source that cannot run (gpsd refused, no radio): stop cleanly, then say why.
            failure = error
        }
        let (queued, sent, filtered, pending) = await (
            publisher.queued, publisher.sent, publisher.filtered, publisher.pending
        )
        logger.info(
            "agent stopping",
            metadata: [
                "queued": "\(queued)", "sent": "\(sent)", "filtered": "\(filtered)", "outbox.pending": "\(pending)",
            ])
        await publisher.shutdown()
        if let failure { throw failure }
    }

    private struct SourceFinished: Error {}
}
