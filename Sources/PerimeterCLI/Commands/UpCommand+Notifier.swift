import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterNotifier

/// `perimeter up`: the notifier on the venue's `rules.json`, delivering over MQTT only
/// (`notifications/app/{subject}` for the visitors' phones, `notifications/staff/{subject}`
/// for staff), so that a newcomer sees notifications without a webhook or a mail relay.
extension UpCommand {
    func notifierService(
        venueDirectory: URL, broker: BrokerSettings, settings: Settings, state: URL, logger: Logger
    ) throws -> NotifierService? {
        let rules = venueDirectory.appendingPathComponent("rules.json").path
        guard FileManager.default.fileExists(atPath: rules) else { return nil }
        var notifierBroker = broker
        notifierBroker.clientID = "\(broker.clientID)-notifier"
        let venue = settings.venueFile
        let configuration = NotifierConfiguration(
            broker: notifierBroker, prefix: settings.prefix,
            databasePath: state.appendingPathComponent("notifier.sqlite").path,
            venues: [
                .init(
                    id: settings.venue,
                    conventions: VenueConventions(
                        timeZone: TimeZone(identifier: venue.timeZone) ?? .gmt, locale: venue.locale,
                        currency: venue.currency),
                    rulesPath: rules, regionsPath: settings.regionsPath)
            ],
            channels: ["app": .mqtt(topic: nil), "staff": .mqtt(topic: nil)], log: settings.log)
        return NotifierService(configuration: configuration, logger: logger)
    }
}
