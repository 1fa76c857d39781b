/// Keeps a started ``MosquittoBroker`` for the life of a ``ServiceGroup`` and stops it
/// (SIGTERM, so it saves its state) when the group shuts down. Started first, it stops last.
public struct BrokerService: Service {
    public let broker: MosquittoBroker
    public let logger: Logger
    public var name: String { "broker" }

    public init(broker: MosquittoBroker, logger: Logger) {
        self.broker = broker
        self.logger = logger
    }

    public func run() async throws {
        logger.info(
            "embedded mosquitto running",
            metadata: ["broker.port": "\(broker.port)", "broker.dir": .string(broker.directory.path)])
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(200))
            if broker.pid == nil {
                throw ServiceGroupError(
                    service: name, message: "mosquitto exited unexpectedly; its log: \(broker.logPath)")
            }
        }
        await broker.stop()
    }
}
