import Foundation
import PerimeterCore
import PerimeterKit

/// Replays a recorded track (GPX, CSV, JSON lines or NMEA) as live GPS readings, paced by the
/// gaps between them divided by `speed` (0: no pacing), dated as ``dating`` says.
public struct ReplaySource: AgentSource {
    public let path: String
    public let records: [TrackReader.Record]
    public let speed: Double
    public let logger: Logger
    public let progress: (@Sendable (Int, Int) -> Void)?
    /// How the source waits between points (tests record the waits instead of timing them).
    public var sleep: @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) }

    /// What time a reading carries.
    public enum Dating: Sendable {
        /// The track's own time (a dry run, or an evaluator told to accept it).
        case original
        /// When it is sent, on this clock: the evaluator's venue time is its own clock and it
        /// refuses readings dated ahead of it, so a live replay is dated as it happens (at a
        /// speed above 1 the track's durations shrink by that factor).
        case sent(@Sendable () -> Date)
    }
    public var dating: Dating = .original
    public var name: String { "replay" }

    /// Reads the whole file up front, so that a bad file fails before anything is published.
    /// - Throws: ``AgentSourceError`` naming the file when it cannot be read or parsed at all.
    public init(
        path: String, format: TrackReader.Format? = nil, subject: String? = nil, speed: Double = 1,
        interval: Double? = nil, logger: Logger, progress: (@Sendable (Int, Int) -> Void)? = nil
    ) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw AgentSourceError("replay.file \(path): cannot read")
        }
        let reader = TrackReader(subject: subject ?? "", interval: interval)
        do {
            records = try reader.read(
                data, format: format ?? TrackReader.guessFormat(path: path, data: data), name: path)
        } catch {
            throw AgentSourceError("replay.file \(path): \(error)")
        }
        self.path = path
        self.speed = speed
        self.logger = logger
        self.progress = progress
    }

    public func run(emit: @Sendable ([AgentMessage]) async throws -> Void) async throws {
        var previous: Date?
        var skipped = 0
        for (index, record) in records.enumerated() {
            progress?(index + 1, records.count)
            switch record.fix {
            case .failure(let error):
                skipped += 1
                logger.warning("track record skipped", metadata: ["at": .string(record.location), "error": "\(error)"])
            case .success(let fix):
                if let previous, speed > 0 {
                    let gap = fix.t.timeIntervalSince(previous) / speed
                    if gap > 0 { try await sleep(.milliseconds(Int((gap * 1000).rounded()))) }
                }
                previous = fix.t
                var reading = GPSReading(fix)
                if case .sent(let now) = dating { reading.t = now() }
                // The track reader needs a subject; an empty one means "the agent's own".
                if fix.subject.isEmpty { reading.subject = nil }
                try await emit([.gps(agent: nil, reading)])
            }
        }
        if skipped > 0 {
            logger.warning("\(path): \(skipped) of \(records.count) record(s) skipped")
        }
    }
}
