/// Asks `probe` every `interval` until it gives a value or `timeout` has passed; nil on timeout.
///
/// `probe` is asked once more after the deadline. On a loaded machine a task may not run for
/// seconds; when it runs again past the deadline, what has arrived meanwhile must still count (a
/// CI run of the test suite once failed waiting for a line that was already in the pipe).
public func waitForValue<T>(
    timeout: Duration, every interval: Duration = .milliseconds(20), _ probe: () async throws -> T?
) async throws -> T? {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if let value = try await probe() { return value }
        try await Task.sleep(for: interval)
    }
    return try await probe()
}

/// Whether `condition` came to hold within `timeout`, asked as ``waitForValue(timeout:every:_:)``
/// asks (once more after the deadline).
public func waitForCondition(
    timeout: Duration, every interval: Duration = .milliseconds(20), _ condition: () async throws -> Bool
) async throws -> Bool {
    try await waitForValue(timeout: timeout, every: interval) { try await condition() ? true : nil } != nil
}
