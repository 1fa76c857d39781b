import Foundation
import PerimeterKit
import PerimeterTestSupport

/// Runs the built `perimeter` with arguments (and optional standard input).
func perimeter(
    _ arguments: [String], stdin: String? = nil, timeout: Duration = .seconds(60)
) async throws
    -> (status: Subprocess.Termination, stdout: String, stderr: String)
{
    try await runProduct(arguments, stdin: stdin, timeout: timeout)
}

/// A file in a fresh temporary directory.
func temporaryFile(_ name: String, _ contents: String) throws -> String {
    let directory = TestScratch.root.appendingPathComponent("perimeter-cli-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let path = directory.appendingPathComponent(name).path
    try contents.write(toFile: path, atomically: true, encoding: .utf8)
    return path
}

enum CLIFixtures {
    static func path(_ name: String) -> String {
        Bundle.module.url(forResource: "Fixtures", withExtension: nil)!.appendingPathComponent(name).path
    }

    /// The repository's sample venue, found from this source file's location.
    static var museum: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("config/venues/museum.geojson").path
    }

    /// A sample venue directory of the repository (`config/museum`, `config/campus`).
    static func venue(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/\(name)").path
    }
}
