import Foundation

/// Where "now" comes from, and how a service waits for a later moment.
///
/// Time is an input (STYLE.md): services and engines never read the system clock or sleep on
/// their own. Production passes ``SystemTimeSource``; tests pass a manual clock
/// (`ManualClock` in PerimeterTestSupport) that moves only when the test advances it, so a
/// delay, grace period, cooldown, backoff or staleness rule is checked in microseconds and
/// never flakes on a loaded machine.
public protocol TimeSource: Sendable {
    /// The current wall-clock time.
    var now: Date { get }

    /// Suspends until this clock has moved on by `duration`.
    /// - Throws: `CancellationError` when the calling task is cancelled first.
    func sleep(for duration: Duration) async throws
}

extension TimeSource {
    /// Suspends for `seconds` (clamped to ≥ 0) of this clock's time.
    public func sleep(seconds: Double) async throws {
        // A year is the longest wait any rule needs; NaN and negatives mean "now".
        let bounded = seconds.isNaN ? 0 : min(max(0, seconds), 366 * 86_400)
        try await sleep(for: .nanoseconds(Int64((bounded * 1e9).rounded(.up))))
    }
}

/// The system's wall clock; sleeping is `Task.sleep`.
public struct SystemTimeSource: TimeSource {
    public init() {}
    public var now: Date { Date() }
    public func sleep(for duration: Duration) async throws { try await Task.sleep(for: duration) }
}
