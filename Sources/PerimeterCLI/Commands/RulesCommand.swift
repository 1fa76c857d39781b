import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

/// `perimeter rules …`: the notification rules of a running deployment — live `rules/{id}`
/// topics, and the venue's rules file when the configuration names it.
struct RulesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rules", abstract: "List, get, put and delete a deployment's live notification rules.",
        discussion: """
            Live rules are retained rules/{id} messages the notifier merges with the venue's
            rules file. Ids are one namespace and the file wins: a live rule may not take the id
            of a rule of the file (the notifier refuses it on deadletter/notifier, and 'rules
            put' refuses it when the configuration names the file); a file that gains a live
            rule's id shadows it. An empty retained payload deletes a live rule and what it
            remembered (cooldowns, 'repeats: false').
            """,
        subcommands: [RulesListCommand.self, RulesGetCommand.self, RulesPutCommand.self, RulesDeleteCommand.self])
}

private let configHelp =
    "A service's configuration file (broker, credentials, TLS, topic prefix, venue; the notifier's names the channels and the rules file)."
private let venueHelp = "The venue (when the configuration names several, or none)."

/// `perimeter rules list`.
struct RulesListCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List the venue's rules: live ones (rules/{id}) and the rules file's.",
        discussion: """
            One line per rule: id, where it comes from ('live' or 'file'), transitions, region
            patterns and channels. A live rule the notifier would refuse is listed as 'invalid'
            with the problem.
            """)

    @Option(help: configHelp, valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable).", valueName: "key=value")
    var set: [String] = []

    @Option(help: venueHelp, valueName: "id")
    var venue: String?

    func run() async throws {
        let settings = try ManagementSettings.read(config: config, overrides: set, venue: venue)
        let fileRules = try settings.rulesPath.map { try LiveRules.file($0, channels: settings.channels) } ?? []
        let session = try await ManagementSession.connect(settings)
        let live = try await LiveRules.retained(session)
        await session.close()
        var output = LineWriter()
        func line(_ rule: NotificationRule, _ source: String) -> String {
            let events = rule.events.map(\.rawValue).sorted().joined(separator: ",")
            let regions =
                rule.source["regions"].map { value in
                    value.arrayValue?.compactMap(\.stringValue).joined(separator: ",") ?? value.stringValue ?? ""
                } ?? ""
            return "\(rule.id)\t\(source)\t\(events)\t\(regions)\t\(rule.channels.joined(separator: ","))"
        }
        for (id, source) in live {
            switch LiveRules.parse(source, channels: settings.channels, place: "rule '\(id)'") {
            case .success(let rule): output.write(line(rule, "live"))
            case .failure(let error): output.write("\(id)\tinvalid\t\(error.description)")
            }
        }
        for rule in fileRules { output.write(line(rule, "file")) }
        output.flush()
        if live.isEmpty && fileRules.isEmpty { Output.error("no rule for venue '\(settings.topics.venue)'") }
    }
}

/// `perimeter rules get ID`.
struct RulesGetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Print a rule: its retained rules/{id} payload, or its entry in the rules file.",
        discussion: "Exits 1 when the venue has no rule with the id.")

    @Argument(help: "The rule id.", valueName: "id")
    var id: String

    @Option(help: configHelp, valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable).", valueName: "key=value")
    var set: [String] = []

    @Option(help: venueHelp, valueName: "id")
    var venue: String?

    func validate() throws {
        if let problem = RuleParser.idProblem(id) { throw ValidationError("rule id \(problem)") }
    }

    func run() async throws {
        let settings = try ManagementSettings.read(config: config, overrides: set, venue: venue)
        let session = try await ManagementSession.connect(settings)
        let topic = "\(settings.topics.root)/rules/\(Topics.level(id))"
        let retained = try await session.retained([topic])
        await session.close()
        if let payload = retained[topic] {
            print(String(decoding: payload, as: UTF8.self))
            return
        }
        if let path = settings.rulesPath,
            let rule = try LiveRules.file(path, channels: settings.channels).first(where: { $0.id == id })
        {
            Output.error("rule '\(id)' is in the rules file \(path) (not a live rule)")
            print(rule.source.serialized())
            return
        }
        throw ExitCode(1, "no rule '\(id)': nothing is retained on \(topic)")
    }
}

/// `perimeter rules put FILE|-`.
struct RulesPutCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "put", abstract: "Validate rules and publish them on their retained rules/{id} topics.",
        discussion: """
            The file holds one rule object, an array of rules or {"rules": [...]} (the rules
            file's shape). Every rule is checked first with the notifier's own parser: against
            the configuration's channels when it names them (a notifier's configuration does),
            and against the rules file's ids when it names the file. If any rule has a problem,
            each is printed naming the rule and the problem, nothing is published and the
            command exits 1.
            """)

    @Argument(help: "A rule, an array of rules or {\"rules\": [...]} ('-' for standard input).", valueName: "file")
    var file: String

    @Option(help: configHelp, valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable).", valueName: "key=value")
    var set: [String] = []

    @Option(help: venueHelp, valueName: "id")
    var venue: String?

    func run() async throws {
        let settings = try ManagementSettings.read(config: config, overrides: set, venue: venue)
        let data = try InputFiles.read(file)
        let document: JSONValue
        do { document = try JSONParser.parse(Array(data)) } catch {
            throw ExitCode(1, "\(file): not JSON: \(error)")
        }
        let items: [JSONValue]
        switch document {
        case .array(let list): items = list
        case .object(let object) where object["rules"] != nil:
            guard case .array(let list)? = object["rules"] else {
                throw ExitCode(1, "\(file): 'rules' must be an array of rules")
            }
            items = list
        case .object: items = [document]
        default: throw ExitCode(1, "\(file): expected a rule object, an array of rules or {\"rules\": [...]}")
        }
        if items.isEmpty { throw ExitCode(1, "\(file): no rule in the file") }
        let fileIDs = try Set(
            settings.rulesPath.map { try LiveRules.file($0, channels: settings.channels).map(\.id) } ?? [])
        var problems: [String] = []
        var rules: [(id: String, source: JSONValue)] = []
        var seen: Set<String> = []
        for (index, item) in items.enumerated() {
            let place = items.count == 1 ? "the rule" : "rules[\(index)]"
            switch LiveRules.parse(item, channels: settings.channels, place: place) {
            case .failure(let error): problems.append(error.description)
            case .success(let rule):
                if fileIDs.contains(rule.id) {
                    problems.append(
                        "rule '\(rule.id)': the rules file \(settings.rulesPath ?? "") has a rule with this id; "
                            + "use another (the notifier would refuse it)")
                } else if !seen.insert(rule.id).inserted {
                    problems.append("rule '\(rule.id)' (\(place)): the id is used by an earlier rule")
                } else {
                    rules.append((rule.id, item))
                }
            }
        }
        if !problems.isEmpty {
            for problem in problems { Output.error("\(file): \(problem)") }
            throw ExitCode(1, "\(file): \(problems.count) problem(s); nothing published")
        }
        if settings.channels == nil {
            Output.error(
                "note: the configuration names no channels; channel names are checked by the notifier "
                    + "(a rule it refuses goes to deadletter/notifier)")
        }
        let session = try await ManagementSession.connect(settings)
        for (id, source) in rules {
            let topic = "\(settings.topics.root)/rules/\(Topics.level(id))"
            try await session.publishRetained(topic, Array(source.serialized().utf8))
            print("published \(topic)")
        }
        await session.close()
    }
}

/// `perimeter rules delete ID`.
struct RulesDeleteCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete", abstract: "Delete a live rule (an empty retained payload on rules/{id}).",
        discussion: """
            The notifier forgets the rule and what it remembered for it. Exits 1 when no live
            rule is retained under the id (a rule of the rules file is removed by editing the
            file and reloading the notifier with SIGHUP).
            """)

    @Argument(help: "The rule id.", valueName: "id")
    var id: String

    @Option(help: configHelp, valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable).", valueName: "key=value")
    var set: [String] = []

    @Option(help: venueHelp, valueName: "id")
    var venue: String?

    func validate() throws {
        if let problem = RuleParser.idProblem(id) { throw ValidationError("rule id \(problem)") }
    }

    func run() async throws {
        let settings = try ManagementSettings.read(config: config, overrides: set, venue: venue)
        let session = try await ManagementSession.connect(settings)
        let topic = "\(settings.topics.root)/rules/\(Topics.level(id))"
        let retained = try await session.retained([topic])
        guard retained[topic] != nil else {
            await session.close()
            throw ExitCode(
                1,
                "no live rule '\(id)' is retained on \(topic); nothing to delete (a rule of the rules file is "
                    + "removed by editing the file)")
        }
        try await session.publishRetained(topic, [])
        await session.close()
        print("deleted \(topic)")
    }
}
