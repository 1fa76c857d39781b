import Foundation
import Synchronization

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
        case finished(index: Int, error: (any Error)?)
        case stopped(index: Int, inTime: Bool)
        case signal(Int32)
        case cancelled
    }

    /// Runs until a stop condition; returns why it stopped. Throws the first service failure
    /// (its own error, wrapped in ``ServiceGroupError``) after everything has shut down.
    ///
    /// Every service runs as a child of one task group: nothing outlives `run()`. Each child
    /// waits on a stop switch of its own, so the group can stop them one at a time, newest first.
    @discardableResult
    public func run() async throws -> Outcome {
        let (events, sink) = AsyncStream.makeStream(of: Event.self)
        let switches = services.map { _ in StopSwitch() }
        let (outcome, failure): (Outcome, (any Error)?) = await withTaskGroup(of: Void.self) { group in
            for (index, service) in services.enumerated() {
                logger.info("starting", metadata: ["service": .string(service.name)])
                let stop = switches[index]
                group.addTask {
                    let error = await stop.run { try await service.run() }
                    sink.yield(.finished(index: index, error: error))
                }
            }
            if handlesSignals {
                group.addTask {
                    for await number in Signals.termination() {
                        sink.yield(.signal(number))
                        return
                    }
                }
            }
            var iterator = events.makeAsyncIterator()
            let first = await withTaskCancellationHandler {
                await iterator.next() ?? .cancelled
            } onCancel: {
                sink.yield(.cancelled)
            }
            let (outcome, failure) = describe(first)
            var finished: Set<Int> = []
            if case .finished(let index, _) = first { finished.insert(index) }
            // Newest first, each within the deadline; one that overruns is left behind and the
            // group moves on (its task is cancelled and awaited when the group ends).
            for index in services.indices.reversed() where !finished.contains(index) {
                switches[index].stop()
                let deadline = Task {
                    try? await Task.sleep(for: shutdownTimeout)
                    sink.yield(.stopped(index: index, inTime: false))
                }
                waiting: while let event = await iterator.next() {
                    switch event {
                    case .finished(let done, _):
                        finished.insert(done)
                        if done == index {
                            logger.info("stopped", metadata: ["service": .string(services[index].name)])
                            break waiting
                        }
                    case .stopped(let late, false) where late == index:
                        logger.warning(
                            "did not stop within \(shutdownTimeout); leaving it",
                            metadata: ["service": .string(services[index].name)])
                        break waiting
                    default: continue
                    }
                }
                deadline.cancel()
            }
            group.cancelAll()
            return (outcome, failure)
        }
        sink.finish()
        if case .serviceFailed(let name, let message) = outcome {
            throw ServiceGroupError(service: name, message: message, underlying: failure)
        }
        return outcome
    }

    /// Why the group stops, from the first event, and the failing service's own error.
    private func describe(_ first: Event) -> (Outcome, (any Error)?) {
        switch first {
        case .signal(let number):
            logger.notice("shutting down", metadata: ["signal": .string(Signals.name(number))])
            return (.signal(number), nil)
        case .finished(let index, let error):
            let name = services[index].name
            if let error {
                logger.error(
                    "service failed; shutting down", metadata: ["service": .string(name), "error": "\(error)"])
                return (.serviceFailed(name, "\(error)"), error)
            }
            logger.info("service finished; shutting down", metadata: ["service": .string(name)])
            return (.serviceFinished(name), nil)
        case .cancelled, .stopped:
            return (.cancelled, nil)
        }
    }
}

/// One child's stop switch: ``run(_:)`` runs the body in a task group of its own and cancels
/// it when ``stop()`` is called (before or during the run). Structured: the body never
/// outlives `run`.
final class StopSwitch: Sendable {
    private let state = Mutex<(stopped: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    func stop() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.stopped = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Runs `body` until it returns or the switch is stopped; returns its error, if any.
    func run(_ body: @escaping @Sendable () async throws -> Void) async -> (any Error)? {
        enum Finish: Sendable {
            case body((any Error)?)
            case stop
        }
        return await withTaskGroup(of: Finish.self) { group in
            group.addTask {
                do {
                    try await body()
                    return .body(nil)
                } catch {
                    return .body(error)
                }
            }
            group.addTask {
                await self.waitForStop()
                return .stop
            }
            // Either the body ends (the stop waiter is then released) or the switch is thrown
            // (the body is cancelled); either way the body's own result is what comes out.
            var result: (any Error)?
            for await finish in group {
                switch finish {
                case .body(let error):
                    result = error
                    stop()
                case .stop:
                    group.cancelAll()
                }
            }
            return result
        }
    }

    private func waitForStop() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = state.withLock { state -> Bool in
                    if state.stopped { return true }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            stop()
        }
    }
}

/// A service of the group failed.
public struct ServiceGroupError: Error, CustomStringConvertible, Sendable {
    public var service: String
    public var message: String
    /// The service's own error, as it threw it.
    public var underlying: (any Error)?
    public init(service: String, message: String, underlying: (any Error)? = nil) {
        self.service = service
        self.message = message
        self.underlying = underlying
    }
    public var description: String { "\(service): \(message)" }
}
