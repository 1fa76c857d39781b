import Foundation

/// Where "now" comes from. The core never reads the system clock itself: services pass the
/// system's, tests a fake one, replay the observations' own times.
public protocol TimeSource: Sendable {
    var now: Date { get }
}

/// The system's wall clock.
public struct SystemTimeSource: TimeSource {
    public init() {}
    public var now: Date { Date() }
}
