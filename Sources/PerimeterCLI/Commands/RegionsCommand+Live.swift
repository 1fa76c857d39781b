import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

/// The options every management command takes: the configuration (any service's file), settings
/// on top of it, and the venue.
private let configHelp = "A service's configuration file (broker, credentials, TLS, topic prefix, venue)."
private let venueHelp = "The venue (when the configuration names several, or none)."

/// `perimeter regions list`: the live regions, from the retained `regions/{id}` topics.
struct RegionsListCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List the live regions (retained regions/{id} topics) of a venue.",
        discussion: """
            Prints one line per region: id, kind (circle, polygon, beacon) and name. A retained
            payload the evaluator would refuse is listed with the reason. With --json, prints
            the regions as one FeatureCollection. Reads the retained picture and waits for a
            marker of its own (on {prefix}/_sys/operator/…) to know the broker sent all of it.
            """)

    @Option(help: configHelp, valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable).", valueName: "key=value")
    var set: [String] = []

    @Option(help: venueHelp, valueName: "id")
    var venue: String?

    @Flag(help: "Print one GeoJSON FeatureCollection instead of lines.")
    var json: Bool

    func run() async throws {
        let settings = try ManagementSettings.read(config: config, overrides: set, venue: venue)
        let session = try await ManagementSession.connect(settings)
        let retained = try await session.retainedCollection("regions")
        await session.close()
        // One reading of the wall clock for the whole listing (a command's "now" is its input).
        let now = Date()
        if json {
            let features = retained.compactMap { try? JSONParser.parse($0.payload) }
            print(JSONValue.object(["type": "FeatureCollection", "features": .array(features)]).serialized())
            return
        }
        var output = LineWriter()
        for (id, payload) in retained {
            let region: Region
            switch LiveRegions.check(payload, id: id, venue: settings.topics.venue, receivedAt: now) {
            case .success(let decoded): region = decoded
            case .failure(let error):
                let reason =
                    error.message.hasPrefix("region '\(id)': ")
                    ? String(error.message.dropFirst("region '\(id)': ".count)) : error.message
                output.write("\(id)\tinvalid\t\(reason) (the evaluator refuses this payload)")
                continue
            }
            let kind =
                switch region.shape {
                case .circle: "circle"
                case .polygons: "polygon"
                case .beacon: "beacon"
                }
            output.write("\(id)\t\(kind)\t\(region.name ?? "")")
        }
        output.flush()
        if retained.isEmpty {
            Output.error("no live region under \(settings.topics.root)/regions/")
        }
    }
}

/// `perimeter regions get ID`: one live region's Feature.
struct RegionsGetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Print a live region's GeoJSON Feature (its retained regions/{id} payload).",
        discussion: "Exits 1 when no region is retained under the id.")

    @Argument(help: "The region id.", valueName: "id")
    var id: String

    @Option(help: configHelp, valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable).", valueName: "key=value")
    var set: [String] = []

    @Option(help: venueHelp, valueName: "id")
    var venue: String?

    func validate() throws {
        if let problem = Topics.idProblem(id) { throw ValidationError("region id: \(problem)") }
    }

    func run() async throws {
        let settings = try ManagementSettings.read(config: config, overrides: set, venue: venue)
        let session = try await ManagementSession.connect(settings)
        let topic = settings.topics.region(id)
        let retained = try await session.retained([topic])
        await session.close()
        guard let payload = retained[topic] else {
            throw ExitCode(1, "no region '\(id)' is retained on \(topic)")
        }
        print(String(decoding: payload, as: UTF8.self))
    }
}

/// `perimeter regions put FILE|-`: validate, then publish each Feature on its retained topic.
struct RegionsPutCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "put", abstract: "Validate regions and publish them on their retained regions/{id} topics.",
        discussion: """
            The file holds one GeoJSON Feature or a FeatureCollection; each Feature's id (or
            --id for a single Feature) names its topic. Every Feature is checked first with the
            evaluator's own decoder and a live region's bounds; if any has a problem, each is
            printed naming the region, the feature and the problem, nothing is published and
            the command exits 1.

            --dry-run publishes nothing and says what publishing would do: for each region,
            whether it is new or what changed against the retained definition (or against
            the venue's regions file, when the configuration names it and nothing is
            retained), each subject's retained state in it and the transition it may make,
            and the notification rules (live rules/{id} topics, and the venue's rules file
            when the configuration names one) that would fire. The evaluator does not publish positions, so for a changed
            shape the dry run names who MAY enter or exit (decided at each subject's next
            observation), not who will.
            """)

    @Argument(help: "GeoJSON Feature or FeatureCollection ('-' for standard input).", valueName: "file")
    var file: String

    @Option(help: "The region id, for a single Feature without one.", valueName: "id")
    var id: String?

    @Flag(help: "Publish nothing; say which subjects would change state and which rules would fire.")
    var dryRun: Bool

    @Option(help: configHelp, valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable).", valueName: "key=value")
    var set: [String] = []

    @Option(help: venueHelp, valueName: "id")
    var venue: String?

    func run() async throws {
        let settings = try ManagementSettings.read(config: config, overrides: set, venue: venue)
        let data = try InputFiles.read(file)
        let now = Date()
        let (changes, problems) = LiveRegions.read(
            data, venue: settings.topics.venue, maxPayloadBytes: settings.maxPayloadBytes, id: id, receivedAt: now)
        if !problems.isEmpty {
            for problem in problems { Output.error("\(file): \(problem)") }
            throw ExitCode(1, "\(file): \(problems.count) problem(s); nothing published")
        }
        let session = try await ManagementSession.connect(settings)
        if dryRun {
            for line in try await dryRunReport(changes, session: session, now: now) { print(line) }
            await session.close()
            return
        }
        let properties =
            settings.broker.protocolVersion == .v5 ? MQTTProperties(contentType: LiveRegions.contentType) : .none
        for change in changes {
            let topic = settings.topics.region(change.id)
            try await session.publishRetained(topic, change.payload, properties: properties)
            print("published \(topic)")
        }
        await session.close()
    }

    private func dryRunReport(
        _ changes: [LiveRegions.Change], session: ManagementSession, now: Date
    ) async throws -> [String] {
        let topics = session.topics
        let regionTopics = changes.map { topics.region($0.id) }
        let stateFilters = changes.map { "\(topics.root)/state/\(Topics.level($0.id))/+" }
        let retained = try await session.retained(regionTopics + stateFilters + ["\(topics.root)/rules/+"])
        var current: [String: Region?] = [:]
        var states: [String: [String: String]] = [:]
        for change in changes {
            if let payload = retained[topics.region(change.id)] {
                current[change.id] = LiveRegions.decode(payload, id: change.id, venue: topics.venue, receivedAt: now)
            }
            let prefix = "\(topics.root)/state/\(Topics.level(change.id))/"
            for (topic, payload) in retained where topic.hasPrefix(prefix) {
                let subject = Topics.decodeLevel(String(topic.dropFirst(prefix.count)))
                if let state = (try? JSONParser.parse(payload))?["state"]?.stringValue {
                    states[change.id, default: [:]][subject] = state
                }
            }
        }
        var lines = ["dry run: nothing published"]
        // A region of the evaluator's regions file has no retained topic unless something
        // published it: the file says what the evaluator holds.
        if let path = session.settings.regionsPath, changes.contains(where: { current[$0.id] == nil }) {
            let fileRegions = try InputFiles.usableRegions(path, skipInvalid: true)
            for change in changes where current[change.id] == nil {
                if let region = fileRegions.first(where: { $0.id == change.id }) {
                    current[change.id] = region
                    lines.append("region '\(change.id)': not retained; compared with \(path)")
                }
            }
        }
        var rules: [NotificationRule] = []
        let rulesPrefix = "\(topics.root)/rules/"
        for (topic, payload) in retained.sorted(by: { $0.key < $1.key }) where topic.hasPrefix(rulesPrefix) {
            if let value = try? JSONParser.parse(payload),
                case .success(let rule) = LiveRules.parse(value, channels: session.settings.channels, place: topic)
            {
                rules.append(rule)
            }
        }
        if let path = session.settings.rulesPath {
            let fileRules = try LiveRules.file(path, channels: session.settings.channels)
            let live = Set(rules.map(\.id))
            rules += fileRules.filter { !live.contains($0.id) }
            lines.append("rules: \(rules.count - fileRules.count) live, \(fileRules.count) from \(path)")
        } else {
            lines.append(
                "rules: \(rules.count) live (the configuration names no rules file: the notifier's file rules "
                    + "are not judged)")
        }
        lines.append(
            "(rules are matched by transition, region and subject; repeats, cooldown, schedule and quiet hours "
                + "are judged by the notifier when it happens)")
        let dryRun = RegionDryRun(venue: topics.venue, states: states, current: current, rules: rules)
        for change in changes { lines += dryRun.report(id: change.id, new: change.region, at: now) }
        return lines
    }
}

/// `perimeter regions delete ID`: the empty retained payload on `regions/{id}`.
struct RegionsDeleteCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete", abstract: "Delete a live region (an empty retained payload on regions/{id}).",
        discussion: """
            The evaluator then sets each subject's state in the region to 'unmonitored' (no exit
            event, so no notification rule fires) and its occupancy to 0. Exits 1 when no region
            is retained under the id (a region of the evaluator's regions file is removed by
            editing the file and reloading). --dry-run names the subjects whose state would
            change and publishes nothing.
            """)

    @Argument(help: "The region id.", valueName: "id")
    var id: String

    @Flag(help: "Publish nothing; say which subjects' states would change.")
    var dryRun: Bool

    @Option(help: configHelp, valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable).", valueName: "key=value")
    var set: [String] = []

    @Option(help: venueHelp, valueName: "id")
    var venue: String?

    func validate() throws {
        if let problem = Topics.idProblem(id) { throw ValidationError("region id: \(problem)") }
    }

    func run() async throws {
        let settings = try ManagementSettings.read(config: config, overrides: set, venue: venue)
        let session = try await ManagementSession.connect(settings)
        let topics = settings.topics
        let topic = topics.region(id)
        let statePrefix = "\(topics.root)/state/\(Topics.level(id))/"
        let retained = try await session.retained([topic, statePrefix + "+"])
        guard let payload = retained[topic] else {
            await session.close()
            throw ExitCode(
                1,
                "no region '\(id)' is retained on \(topic); nothing to delete (a region of the evaluator's "
                    + "regions file is removed by editing the file)")
        }
        if dryRun {
            let now = Date()
            var states: [String: String] = [:]
            for (stateTopic, payload) in retained where stateTopic.hasPrefix(statePrefix) {
                if let state = (try? JSONParser.parse(payload))?["state"]?.stringValue {
                    states[Topics.decodeLevel(String(stateTopic.dropFirst(statePrefix.count)))] = state
                }
            }
            let report = RegionDryRun(
                venue: topics.venue, states: [id: states],
                current: [id: LiveRegions.decode(payload, id: id, venue: topics.venue, receivedAt: now)], rules: [])
            print("dry run: nothing published")
            for line in report.report(id: id, new: nil, at: now) { print(line) }
            await session.close()
            return
        }
        try await session.publishRetained(topic, [])
        await session.close()
        print("deleted \(topic)")
    }
}
