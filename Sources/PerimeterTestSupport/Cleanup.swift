import Synchronization

/// Stops what a test started, in reverse order, also when the test fails half-way (a thrown
/// error would otherwise leave brokers, proxies and evaluators running).
public final class Cleanup: Sendable {
    private let steps = Mutex<[@Sendable () async -> Void]>([])

    public init() {}

    public func add(_ step: @escaping @Sendable () async -> Void) { steps.withLock { $0.append(step) } }

    /// Runs `body`, then every registered step, whether `body` threw or not.
    public static func around(_ body: (Cleanup) async throws -> Void) async throws {
        let cleanup = Cleanup()
        do {
            try await body(cleanup)
        } catch {
            await cleanup.run()
            throw error
        }
        await cleanup.run()
    }

    private func run() async {
        let steps = self.steps.withLock { steps in
            defer { steps = [] }
            return steps
        }
        for step in steps.reversed() { await step() }
    }
}
