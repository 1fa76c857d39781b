import Foundation
import PerimeterCore

/// Notification rules as the management commands read and check them: with the notifier's own
/// parser (``RuleParser``), against the venue's channels when the configuration names them.
enum LiveRules {
    /// One rule. Without known channels (a configuration with no `channels` section) the rule's
    /// channel names are taken as they are: the notifier still checks them when it loads the rule.
    static func parse(_ value: JSONValue, channels: Set<String>?, place: String) -> Result<NotificationRule, RuleError>
    {
        let named = Set((value["channels"]?.arrayValue ?? []).compactMap(\.stringValue))
        return RuleParser.parse(rule: value, channels: channels ?? named, place: place)
    }

    /// The rules of a venue's rules file, as the notifier reads it at start.
    static func file(_ path: String, channels: Set<String>?) throws -> [NotificationRule] {
        let data = try InputFiles.read(path)
        let document: JSONValue
        do { document = try JSONParser.parse(Array(data)) } catch {
            throw ExitCode(1, "\(path): not JSON: \(error)")
        }
        var rules: [NotificationRule] = []
        var problems: [String] = []
        guard let list = document["rules"]?.arrayValue ?? document.arrayValue else {
            throw ExitCode(1, "\(path): a rules document is {\"rules\": [ … ]} or an array of rules")
        }
        for (index, item) in list.enumerated() {
            switch parse(item, channels: channels, place: "rules[\(index)]") {
            case .success(let rule): rules.append(rule)
            case .failure(let error): problems.append(error.description)
            }
        }
        if !problems.isEmpty { throw ExitCode(1, "\(path): \(problems.joined(separator: "; "))") }
        return rules
    }

    /// The live rules of the retained `rules/{id}` topics (ones that do not parse are left out
    /// and named on standard error: the notifier refused them too).
    static func retained(_ session: ManagementSession) async throws -> [(id: String, source: JSONValue)] {
        try await session.retainedCollection("rules").compactMap { id, payload in
            guard let value = try? JSONParser.parse(payload) else {
                Output.error("warning: rules/\(id) holds a payload that is not JSON")
                return nil
            }
            return (id, value)
        }
    }
}
