import Foundation
import PerimeterDashboard
import PerimeterKit

/// `perimeter up --dashboard HOST:PORT`: the live dashboard as one more service of the group.
extension UpCommand {
    static func hostPort(_ text: String) -> (host: String, port: Int)? {
        let parts = text.split(separator: ":")
        guard parts.count == 2, let port = Int(parts[1]), (0...65535).contains(port) else { return nil }
        return (String(parts[0]), port)
    }

    func dashboardService(
        _ address: String, broker: BrokerSettings, settings: Settings, logger: Logger
    ) throws
        -> DashboardService
    {
        var dashboardBroker = broker
        dashboardBroker.clientID = "\(broker.clientID)-dashboard"
        // A password for this run only, never stored: the printed link signs the first browser in
        // (once), and the password opens it from any other.
        let password = DashboardAuth.randomToken().prefix(20)
        let configuration = DashboardConfiguration(
            broker: dashboardBroker, prefix: settings.prefix, venue: settings.venue, regionsPath: settings.regionsPath,
            http: Self.hostPort(address) ?? ("127.0.0.1", 8080),
            timeZone: TimeZone(identifier: settings.venueFile.timeZone) ?? TimeZone(identifier: "UTC")!,
            password: String(password), log: settings.log)
        return try DashboardService(configuration: configuration, logger: logger) { address in
            FileHandle.standardError.write(
                Data(
                    """
                    perimeter up: dashboard password for this run: \(password)
                    perimeter up: dashboard at \(address.oneTimeLoginURL())

                    """.utf8))
        }
    }
}
