import Foundation
import PerimeterKit
import PerimeterTestSupport

/// Runs the built `perimeter` with arguments (and optional standard input); returns how it
/// ended and what it wrote to standard output and standard error.
func perimeter(
    _ arguments: [String], stdin: String? = nil, timeout: Duration = .seconds(60)
) async throws
    -> (status: Subprocess.Termination, stdout: String, stderr: String)
{
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("perimeter-cli-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let out = directory.appendingPathComponent("out").path
    let err = directory.appendingPathComponent("err").path
    var input: Subprocess.Stream = .null
    if let stdin {
        let path = directory.appendingPathComponent("in").path
        try stdin.write(toFile: path, atomically: true, encoding: .utf8)
        input = .input(path)
    }
    let child = try Subprocess.spawn(
        Products.executable("perimeter"), arguments, stdin: input, stdout: .file(out, append: false),
        stderr: .file(err, append: false))
    let status = try await withTimeout(timeout, "perimeter \(arguments.joined(separator: " "))") { await child.wait() }
    return (
        status, (try? String(contentsOfFile: out, encoding: .utf8)) ?? "",
        (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
    )
}

/// A file in a fresh temporary directory.
func temporaryFile(_ name: String, _ contents: String) throws -> String {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("perimeter-cli-\(UUID().uuidString)")
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
}
