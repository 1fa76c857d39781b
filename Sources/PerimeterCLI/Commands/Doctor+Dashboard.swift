import Foundation
import PerimeterCore
import PerimeterDashboard

extension DoctorCommand {
    /// The dashboard: its sign-in is set (the reader refuses a missing, empty or world-readable
    /// password), the hosts it answers to fit where it listens and what is in front of it, the
    /// regions it draws load, its broker account.
    func checkDashboard(_ scope: Scope, _ brokers: BrokerChecks) async {
        guard
            let configuration = read(
                DashboardConfiguration.self, scope, loginKeys: ["dashboard.passwordFile", "dashboard.password"])
        else { return }
        scope.ok(
            "configuration: valid (venue \(configuration.venue), http \(configuration.http.host):\(configuration.http.port))"
        )
        checkLogin(scope)
        checkHosts(configuration, scope)
        if let data = FileManager.default.contents(atPath: configuration.regionsPath) {
            let document = RegionParser.parse(bytes: Array(data))
            if document.problems.isEmpty {
                scope.ok("regions: \(document.regions.count) regions in \(configuration.regionsPath)")
            } else {
                scope.warn(
                    "regions: \(configuration.regionsPath): \(document.problems.map(\.description).joined(separator: "; "))"
                )
            }
        } else {
            scope.fail("regions: cannot read \(configuration.regionsPath) (dashboard.regions or the venue's regions)")
        }
        _ = await brokers.connect(configuration.broker, scope)
    }

    /// Where the password comes from and how well it is kept (the configuration was read: it is set).
    private func checkLogin(_ scope: Scope) {
        guard let reader = try? reader() else { return }
        if let path = reader.optionalString("dashboard.passwordFile") {
            let attributes = try? FileManager.default.attributesOfItem(atPath: path)
            let mode = (attributes?[.posixPermissions] as? NSNumber)?.intValue ?? 0
            let password =
                FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }?
                .split(whereSeparator: \.isNewline).first ?? ""
            let text = "login: password from \(path) (mode \(String(mode, radix: 8)))"
            if mode & 0o040 != 0 {
                scope.warn(text + ": readable by its group; chmod 600 \(path) (systemd: LoadCredential=)")
            } else if password.count < 12 {
                scope.warn(text + ": \(password.count) characters; use 12 or more (openssl rand -base64 18)")
            } else {
                scope.ok(text)
            }
        } else {
            let password = ProcessInfo.processInfo.environment["PERIMETER_DASHBOARD_PASSWORD"] ?? ""
            let text = "login: password from PERIMETER_DASHBOARD_PASSWORD"
            if password.count < 12 {
                scope.warn(text + ": \(password.count) characters; use 12 or more (openssl rand -base64 18)")
            } else {
                scope.ok(text)
            }
        }
    }

    /// Allowed hosts against the listener and `behindTLS`.
    private func checkHosts(_ configuration: DashboardConfiguration, _ scope: Scope) {
        let loopbackNames: Set<String> = ["localhost", "127.0.0.1", "[::1]", "::1"]
        let host = configuration.http.host
        let loopbackListener = loopbackNames.contains(host) || host.hasPrefix("127.")
        let names = configuration.allowedHosts.filter { !loopbackNames.contains($0) && $0 != host }
        var fine = true
        for name in configuration.allowedHosts where name.contains("*") {
            scope.warn(
                "allowed hosts: '\(name)' is compared literally (no wildcards): name each host the browsers use")
            fine = false
        }
        if !loopbackListener && !configuration.behindTLS {
            scope.warn(
                "allowed hosts: listening on \(host) without TLS in front: the password crosses the network in clear; put an HTTPS proxy in front, listen on 127.0.0.1 and set dashboard.behindTLS"
            )
            fine = false
        }
        if configuration.behindTLS && names.isEmpty {
            scope.warn(
                "allowed hosts: behindTLS is set and dashboard.allowedHosts names no host but loopback: the proxy's Host header gets 421; add the name browsers use"
            )
            fine = false
        }
        if fine {
            scope.ok(
                "allowed hosts: \(configuration.allowedHosts.joined(separator: ", "))"
                    + (configuration.behindTLS ? " (behind TLS: Secure cookie)" : ""))
        }
    }
}
