import Foundation
import PerimeterCore

/// Reading the files commands are given, with errors that name them.
enum InputFiles {
    struct Failure: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    /// The bytes of `path`, or of standard input for nil or "-".
    static func read(_ path: String?) throws -> Data {
        if path == nil || path == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
        guard let data = FileManager.default.contents(atPath: path!) else {
            let reason = FileManager.default.fileExists(atPath: path!) ? "cannot be read" : "does not exist"
            throw Failure(message: "\(path!) \(reason)")
        }
        return data
    }

    /// Regions from a GeoJSON file, with the problems found in it.
    static func regions(_ path: String, limits: RegionParser.Limits = .file) throws -> RegionDocument {
        let data = try read(path)
        return data.withUnsafeBytes { RegionParser.parse(bytes: $0.bindMemory(to: UInt8.self), limits: limits) }
    }

    /// Reads regions and refuses a file with problems unless `skipInvalid`, printing each
    /// problem on standard error.
    static func usableRegions(_ path: String, skipInvalid: Bool) throws -> [Region] {
        let document = try regions(path)
        for warning in document.warnings { Output.error("\(path): warning: \(warning)") }
        for problem in document.problems { Output.error("\(path): \(problem)") }
        if !document.problems.isEmpty && !skipInvalid {
            throw ExitCode(
                1,
                "\(path): \(document.problems.count) problem(s); fix them (see 'perimeter regions validate') or pass --skip-invalid"
            )
        }
        return document.regions
    }
}

/// Buffered standard output and unbuffered standard error.
enum Output {
    static func error(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}

/// Collects output lines and writes them in large chunks (a million-line CSV should not
/// cost a million system calls).
struct LineWriter {
    private var buffer: [UInt8] = []
    private let handle: FileHandle

    init(_ handle: FileHandle = .standardOutput) {
        self.handle = handle
        buffer.reserveCapacity(1 << 16)
    }

    mutating func write(_ line: String) {
        buffer.append(contentsOf: line.utf8)
        buffer.append(0x0A)
        if buffer.count >= 1 << 16 { flush() }
    }

    mutating func flush() {
        guard !buffer.isEmpty else { return }
        handle.write(Data(buffer))
        buffer.removeAll(keepingCapacity: true)
    }

    /// Like ``flush()``, but a closed reader (`perimeter up | head`) is an error to handle
    /// rather than a trap: a long-running command then stops what it started.
    mutating func flushChecked() throws {
        guard !buffer.isEmpty else { return }
        defer { buffer.removeAll(keepingCapacity: true) }
        try handle.write(contentsOf: buffer)
    }
}
