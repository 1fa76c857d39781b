import Foundation
import PerimeterKit
import PerimeterTestSupport
import Testing

/// `deploy/systemd/`: each unit's exposure as `systemd-analyze security` rates it (offline, on
/// the unit file itself) stays below the bounds — 2.0 for the evaluator, notifier and
/// dashboard, 3.0 for the agent, which keeps raw HCI sockets. A missing systemd-analyze fails
/// (scripts/setup.sh installs systemd), never skips.
@Suite("systemd units stay hardened")
struct HardenedUnitsTests {
    static let units = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("deploy/systemd")

    /// The "Overall exposure level for X: 1.1 OK" figure.
    static func exposure(path: String) async throws -> (Double?, String) {
        guard let analyze = Subprocess.find("systemd-analyze") else {
            throw ChildFailure(
                message: "systemd-analyze is not installed: apt-get install -y systemd (scripts/setup.sh)")
        }
        let child = try ChildProcess(
            analyze, ["security", "--offline=true", "--no-pager", path])
        let result = await child.finish()
        guard let line = result.output.split(separator: "\n").first(where: { $0.contains("Overall exposure level") }),
            let figure = line.split(separator: ":").last?.split(separator: " ").first
        else { return (nil, result.output) }
        return (Double(figure), result.output)
    }

    @Test(
        "exposure below the bound",
        arguments: [
            ("perimeter-evaluator.service", 2.0), ("perimeter-notifier.service", 2.0),
            ("perimeter-dashboard.service", 2.0), ("perimeter-agent.service", 3.0),
        ])
    func hardened(unit: String, bound: Double) async throws {
        let (exposure, output) = try await Self.exposure(path: Self.units.appendingPathComponent(unit).path)
        let figure = try #require(exposure, "no exposure figure for \(unit): \(output.suffix(2000))")
        #expect(figure < bound, "\(unit): \(figure), bound \(bound)")
    }

    @Test("an unhardened unit rates high (the check can fail)")
    func unhardened() async throws {
        let path = try temporaryFile(
            "plain.service", "[Unit]\nDescription=plain\n[Service]\nExecStart=/usr/bin/true\n")
        let (exposure, output) = try await Self.exposure(path: path)
        let figure = try #require(exposure, "no exposure figure: \(output.suffix(2000))")
        #expect(figure > 3.0, "\(output.suffix(500))")
    }
}
