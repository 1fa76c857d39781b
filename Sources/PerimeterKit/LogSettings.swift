/// The `log.*` settings: level and line format, from config, `PERIMETER_LOG_LEVEL` or flags.
public struct LogSettings: Sendable, Hashable {
    public enum LevelSetting: String, CaseIterable, Sendable {
        case trace, debug, info, notice, warning, error, critical
        var level: Logger.Level { Logger.Level(name: rawValue)! }
    }

    public var level: Logger.Level
    public var format: StreamLogHandler.Format

    public init(level: Logger.Level = .info, format: StreamLogHandler.Format = .logfmt) {
        self.level = level
        self.format = format
    }

    public static func read(from reader: ConfigReader) -> LogSettings {
        LogSettings(
            level: reader.choice("log.level", default: LevelSetting.info).level,
            format: reader.choice("log.format", default: StreamLogHandler.Format.logfmt))
    }

    /// A logger writing to standard error with these settings.
    public func makeLogger(label: String) -> Logger {
        Logger(label: label, level: level, handler: StreamLogHandler(format: format))
    }
}
