import Foundation
import PerimeterCore

/// The venue simulator as a source: visitors' records first, then one tick of readings every
/// interval (divided by `speed`), times starting now.
public struct SimulatorSource: AgentSource {
    public let venue: VenueFile
    public let seed: UInt64?
    public let visitors: Int?
    public let speed: Double
    public let ticks: Int?
    /// Where the simulation's start time comes from, and what it paces ticks on.
    public let clock: any TimeSource
    public var name: String { "simulator" }

    public init(
        venue: VenueFile, seed: UInt64? = nil, visitors: Int? = nil, speed: Double = 1, ticks: Int? = nil,
        clock: any TimeSource = SystemTimeSource()
    ) {
        self.clock = clock
        self.venue = venue
        self.seed = seed
        self.visitors = visitors
        self.speed = speed
        self.ticks = ticks
    }

    /// Reads and checks a venue file (or `venue.json` in a venue directory).
    /// - Throws: ``AgentSourceError`` naming the file and every problem.
    public static func loadVenue(_ path: String) throws -> VenueFile {
        var isDirectory: ObjCBool = false
        var path = path
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            path = URL(fileURLWithPath: path).appendingPathComponent("venue.json").path
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw AgentSourceError("venue file \(path): cannot read")
        }
        do {
            return try VenueFile.parse(try JSONValue(parsing: data))
        } catch {
            throw AgentSourceError("venue file \(path): \(error)")
        }
    }

    public func run(emit: @Sendable ([AgentMessage]) async throws -> Void) async throws {
        let start = clock.now
        let simulation = VenueSimulation(venue: venue, start: start, seed: seed, visitors: visitors)
        try await emit(simulation.initialMessages())
        var tick = 0
        while !Task.isCancelled {
            if let ticks, tick >= ticks { return }
            try await emit(simulation.messages(tick: tick))
            tick += 1
            // Paced against the start, so time spent emitting does not add up as drift.
            let due = start.addingTimeInterval(Double(tick) * simulation.interval / speed)
            try await clock.sleep(seconds: due.timeIntervalSince(clock.now))
        }
    }
}
