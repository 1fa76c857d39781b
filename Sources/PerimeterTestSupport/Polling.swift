import PerimeterKit

/// Waits until `condition` holds, asking every `interval`; throws a `TimeoutError` naming `what`
/// (and whatever `context` says then) when it has not held within `timeout`.
public func waitUntil(
    _ what: String, timeout: Duration = .seconds(30), every interval: Duration = .milliseconds(20),
    context: () -> String = { "" }, _ condition: () async throws -> Bool
) async throws {
    if try await waitForCondition(timeout: timeout, every: interval, condition) { return }
    let said = context()
    throw TimeoutError(what: said.isEmpty ? what : "\(what); \(said)", timeout: timeout)
}
