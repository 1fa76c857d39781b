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
        // Woken by the broker's end (a pidfd, no polling) or by the group's stop, whichever
        // comes first; it looked every 200 ms.
        let stopped = await withTaskGroup(of: Bool.self) { group in
            group.addTask { [broker] in
                await broker.exited()
                return false
            }
            group.addTask {
                // Until cancelled: one sleep, no wake-ups.
                while (try? await Task.sleep(for: .seconds(86_400))) != nil {}
                return true
            }
            let stopped = await group.next() ?? true
            // Ends the other child: a stop ends the process (and so its wait), an exit ends the
            // sleep.
            if stopped { await broker.stop() } else { group.cancelAll() }
            return stopped
        }
        if !stopped {
            throw ServiceGroupError(service: name, message: "mosquitto exited unexpectedly; its log: \(broker.logPath)")
        }
    }
}
