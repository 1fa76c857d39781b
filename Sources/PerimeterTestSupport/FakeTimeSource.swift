import Foundation
import PerimeterCore
import Synchronization

/// A clock that moves only when a test says so.
public final class FakeTimeSource: TimeSource {
    private let current: Mutex<Date>

    public init(_ start: Date = Date(timeIntervalSince1970: 1_780_000_000)) {
        current = Mutex(start)
    }

    public var now: Date { current.withLock { $0 } }

    public func advance(by seconds: TimeInterval) {
        current.withLock { $0 += seconds }
    }

    public func set(_ date: Date) {
        current.withLock { $0 = date }
    }
}
