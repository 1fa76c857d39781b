import Foundation
import PerimeterCore
import PerimeterKit

/// Writes a rendered map as SVG, or as PNG through Debian's `rsvg-convert` (librsvg2-bin).
enum MapWriter {
    /// Writes `svg` to `path`: PNG when the name ends in `.png`, else SVG.
    static func write(_ svg: String, to path: String) async throws {
        if URL(fileURLWithPath: path).pathExtension.lowercased() == "png" {
            try await writePNG(svg, to: path)
        } else {
            do {
                try svg.write(toFile: path, atomically: true, encoding: .utf8)
            } catch {
                throw ExitCode(1, "cannot write \(path): \(error.localizedDescription)")
            }
        }
    }

    static func writePNG(_ svg: String, to path: String) async throws {
        guard let converter = Subprocess.find("rsvg-convert") else {
            throw ExitCode(
                1,
                "\(path): PNG output needs rsvg-convert (Debian package librsvg2-bin: apt-get install librsvg2-bin); or write .svg"
            )
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "perimeter-render-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("map.svg").path
        let errors = directory.appendingPathComponent("errors").path
        try svg.write(toFile: input, atomically: true, encoding: .utf8)
        let child = try Subprocess.spawn(
            converter, ["--format=png", "--output=\(path)", input], stdout: .null, stderr: .file(errors, append: false))
        let status = await child.wait()
        guard status == .exited(0) else {
            let reason = (try? String(contentsOfFile: errors, encoding: .utf8))?.trimmingCharacters(
                in: .whitespacesAndNewlines)
            throw ExitCode(1, "\(path): rsvg-convert \(status): \(reason ?? "")")
        }
    }
}
