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
        let configuration = DashboardConfiguration(
            broker: dashboardBroker, prefix: settings.prefix, venue: settings.venue, regionsPath: settings.regionsPath,
            http: Self.hostPort(address) ?? ("127.0.0.1", 8080), log: settings.log)
        return try DashboardService(configuration: configuration, logger: logger) { url in
            FileHandle.standardError.write(Data("perimeter up: dashboard at \(url)\n".utf8))
        }
    }
}
