import Foundation

/// Runs services together and shuts them down gracefully, in reverse start order.
///
/// Services start in the order given. The group stops when a termination signal arrives
/// (if `handlesSignals`), when any service throws, when any service returns, or when the
/// calling task is cancelled. Stopping cancels the last-started service first and waits for it
/// (up to `shutdownTimeout`) before cancelling the one before it, so that, for example, an
/// evaluator drains before the broker it talks to goes away.
public struct ServiceGroup: Sendable {
    public let services: [any Service]
    public let logger: Logger
    public let handlesSignals: Bool
    public let shutdownTimeout: Duration

    public init(
        services: [any Service], logger: Logger, handlesSignals: Bool = true,
        shutdownTimeout: Duration = .seconds(10)
    ) {
        self.services = services
        self.logger = logger
        self.handlesSignals = handlesSignals
        self.shutdownTimeout = shutdownTimeout
    }

    /// Why the group stopped.
    public enum Outcome: Sendable, Equatable {
        case signal(Int32)
        case serviceFinished(String)
        case serviceFailed(String, String)
        case cancelled
    }

    private enum Event: Sendable {
        case finished(index: Int, error: String?)
        case signal(Int32)
        case cancelled
    }

    /// Runs until a stop condition; returns why it stopped. Throws the first service failure
    /// after everything has shut down.
    @discardableResult
    public func run() async throws -> Outcome {
        let (events, sink) = AsyncStream.makeStream(of: Event.self)
        var tasks: [Task<Void, Never>] = []
        for (index, service) in services.enumerated() {
            logger.info("starting", metadata: ["service": .string(service.name)])
            tasks.append(
                Task {
                    do {
                        try await service.run()
                        sink.yield(.finished(index: index, error: nil))
                    } catch {
                        sink.yield(.finished(index: index, error: "\(error)"))
                    }
                })
        }
        let signalTask = Task {
            guard handlesSignals else { return }
            for await number in Signals.termination() {
                sink.yield(.signal(number))
                return
            }
        }
        let first = await withTaskCancellationHandler {
            var iterator = events.makeAsyncIterator()
            return await iterator.next() ?? .cancelled
        } onCancel: {
            sink.yield(.cancelled)
        }
        signalTask.cancel()

        let outcome: Outcome
        switch first {
        case .signal(let number):
            logger.notice("shutting down", metadata: ["signal": .string(Signals.name(number))])
            outcome = .signal(number)
        case .finished(let index, let error):
            let name = services[index].name
            if let error {
                logger.error(
                    "service failed; shutting down", metadata: ["service": .string(name), "error": .string(error)])
                outcome = .serviceFailed(name, error)
            } else {
                logger.info("service finished; shutting down", metadata: ["service": .string(name)])
                outcome = .serviceFinished(name)
            }
        case .cancelled:
            outcome = .cancelled
        }

        for (index, task) in tasks.enumerated().reversed() {
            task.cancel()
            let finished = await Self.wait(for: task, timeout: shutdownTimeout)
            if finished {
                logger.info("stopped", metadata: ["service": .string(services[index].name)])
            } else {
                logger.warning(
                    "did not stop within \(shutdownTimeout); leaving it",
                    metadata: ["service": .string(services[index].name)])
            }
        }
        sink.finish()
        if case .serviceFailed(let name, let error) = outcome {
            throw ServiceGroupError(service: name, message: error)
        }
        return outcome
    }

    /// Waits for `task` or the timeout, whichever comes first (a task that ignores cancellation
    /// must not hold the shutdown of the others hostage).
    private static func wait(for task: Task<Void, Never>, timeout: Duration) async -> Bool {
        let (results, sink) = AsyncStream.makeStream(of: Bool.self)
        let waiter = Task {
            await task.value
            sink.yield(true)
        }
        let timer = Task {
            try? await Task.sleep(for: timeout)
            sink.yield(false)
        }
        var iterator = results.makeAsyncIterator()
        let finished = await iterator.next() ?? false
        timer.cancel()
        if !finished { waiter.cancel() }
        sink.finish()
        return finished
    }
}

/// A service of the group failed.
public struct ServiceGroupError: Error, CustomStringConvertible, Sendable {
    public var service: String
    public var message: String
    public init(service: String, message: String) {
        self.service = service
        self.message = message
    }
    public var description: String { "\(service): \(message)" }
}
