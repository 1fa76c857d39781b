import Foundation

/// Weekly time windows in the venue's time zone, e.g. Monday–Friday 09:00–17:30.
///
/// GeoJSON: `"schedule": [{"days": ["mon", "tue", "wed", "thu", "fri"], "start": "09:00", "end": "17:30"}]`.
/// A window whose end is not after its start runs past midnight (`"22:00"`–`"06:00"`), the
/// morning part belonging to the following day. `"start": "00:00", "end": "24:00"` is all day.
public struct WeeklySchedule: Sendable, Hashable, Codable {
    public enum Weekday: Int, Sendable, Hashable, Codable, CaseIterable, Comparable {
        // Foundation's numbering: Sunday = 1.
        case sun = 1, mon, tue, wed, thu, fri, sat

        public static func < (lhs: Weekday, rhs: Weekday) -> Bool { lhs.rawValue < rhs.rawValue }

        public var name: String { "\(self)" }

        public init?(name: String) {
            guard let day = Weekday.allCases.first(where: { $0.name == name.lowercased().prefix(3) && name.count >= 3 })
            else { return nil }
            self = day
        }

        var next: Weekday { Weekday(rawValue: rawValue % 7 + 1)! }
    }

    public struct Window: Sendable, Hashable, Codable {
        public var days: Set<Weekday>
        /// Minutes after midnight, 0…1440.
        public var start: Int
        public var end: Int

        public init(days: Set<Weekday>, start: Int, end: Int) {
            self.days = days
            self.start = start
            self.end = end
        }

        func contains(day: Weekday, minute: Int) -> Bool {
            if start < end { return days.contains(day) && minute >= start && minute < end }
            // Overnight: the evening of a listed day, or the morning after it.
            return (days.contains(day) && minute >= start) || (days.contains(day.previous) && minute < end)
        }
    }

    public var windows: [Window]

    public init(windows: [Window]) { self.windows = windows }

    /// Whether `date` falls in any window, read in `timeZone`.
    public func isActive(at date: Date, in timeZone: TimeZone) -> Bool {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        return isActive(at: date, calendar: calendar)
    }

    /// Whether `date` falls in any window, read with `calendar` (whose time zone is the venue's).
    public func isActive(at date: Date, calendar: Calendar) -> Bool {
        let parts = calendar.dateComponents([.weekday, .hour, .minute], from: date)
        guard let weekday = parts.weekday.flatMap(Weekday.init(rawValue:)) else { return false }
        let minute = (parts.hour ?? 0) * 60 + (parts.minute ?? 0)
        return windows.contains { $0.contains(day: weekday, minute: minute) }
    }

    /// Parses `"HH:MM"` into minutes after midnight; `"24:00"` is allowed as an end.
    public static func minutes(_ text: String) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count == 2, parts[1].count == 2, let hour = Int(parts[0]),
            let minute = Int(parts[1]), (0...24).contains(hour), (0..<60).contains(minute), hour * 60 + minute <= 1440
        else { return nil }
        return hour * 60 + minute
    }

    static func clock(_ minutes: Int) -> String {
        let hour = minutes / 60
        let minute = minutes % 60
        return (hour < 10 ? "0" : "") + "\(hour):" + (minute < 10 ? "0" : "") + "\(minute)"
    }
}

extension WeeklySchedule.Weekday {
    var previous: WeeklySchedule.Weekday { WeeklySchedule.Weekday(rawValue: (rawValue + 5) % 7 + 1)! }
}
