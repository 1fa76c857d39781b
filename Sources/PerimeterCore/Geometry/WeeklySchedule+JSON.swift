extension WeeklySchedule {
    /// Reads a schedule: an array of weekly windows `{days?, start, end}` (days default to the
    /// whole week; `"HH:MM"` times; an end before the start runs overnight). Regions and
    /// notification rules share it.
    ///
    /// - Parameters:
    ///   - value: the JSON value.
    ///   - place: where it is, for the problems (`properties.schedule`, `rules[2].schedule`).
    /// - Returns: the schedule (of the usable windows; nil when `value` is not an array) and
    ///   every problem, each naming its window.
    public static func parse(_ value: JSONValue, place: String) -> (WeeklySchedule?, [String]) {
        guard case .array(let windows) = value else {
            return (nil, ["\(place) must be an array of weekly windows, got \(value.typeName)"])
        }
        var problems: [String] = []
        var result: [Window] = []
        for (index, window) in windows.enumerated() {
            let place = "\(place)[\(index)]"
            guard case .object(let object) = window else {
                problems.append("\(place) must be an object {days, start, end}")
                continue
            }
            var days: Set<Weekday> = []
            switch object["days"] {
            case nil, .null?:
                days = Set(Weekday.allCases)
            case .array(let names)?:
                for name in names {
                    if let day = name.stringValue.flatMap(Weekday.init(name:)) {
                        days.insert(day)
                    } else {
                        problems.append(
                            "\(place).days: unknown day \(name.serialized()); use mon, tue, wed, thu, fri, sat, sun")
                    }
                }
            case let other?:
                problems.append("\(place).days must be an array of day names, got \(other.typeName)")
            }
            let start = object["start"]?.stringValue.flatMap(minutes)
            let end = object["end"]?.stringValue.flatMap(minutes)
            if start == nil || start == 1440 {
                problems.append(
                    "\(place).start must be a time \"HH:MM\" before 24:00, got \(object["start"]?.serialized() ?? "nothing")"
                )
            }
            if end == nil {
                problems.append(
                    "\(place).end must be a time \"HH:MM\" up to 24:00, got \(object["end"]?.serialized() ?? "nothing")"
                )
            }
            if let start, let end, start == end {
                problems.append("\(place): start and end are both \(clock(start)); the window is empty")
            }
            if let start, let end, start < 1440 { result.append(Window(days: days, start: start, end: end)) }
        }
        return (WeeklySchedule(windows: result), problems)
    }
}
