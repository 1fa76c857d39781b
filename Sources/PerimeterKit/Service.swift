/// A long-running part of a process: a broker, an evaluator, a notifier, an agent.
///
/// `run()` does the work and returns when the work is done or the task is cancelled; a
/// ``ServiceGroup`` cancels services one at a time, in reverse start order, to shut down.
public protocol Service: Sendable {
    /// A short name for logs ("evaluator").
    var name: String { get }
    /// Runs until finished or cancelled. Throwing stops the whole group.
    func run() async throws
}
