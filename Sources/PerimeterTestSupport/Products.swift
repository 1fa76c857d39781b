import Foundation
import PerimeterKit
import Synchronization

/// Where SwiftPM put the built executables (`perimeter`, `perimeter-testpeer`) for this test run.
public enum Products {
    /// The directory holding the running test binary, which SwiftPM shares with the executables.
    public static var directory: URL {
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var directory = executable.deletingLastPathComponent()
        // The test runner may live inside an .xctest bundle directory.
        while directory.pathExtension == "xctest" || directory.lastPathComponent == "Contents"
            || directory.lastPathComponent == "MacOS"
        {
            directory = directory.deletingLastPathComponent()
        }
        return directory
    }

    /// The path of a built executable; fails the test run loudly when it is missing.
    public static func executable(_ name: String) -> String {
        let path = directory.appendingPathComponent(name).path
        precondition(
            FileManager.default.isExecutableFile(atPath: path),
            "\(name) is not built next to the tests (looked for \(path)); run `swift build` first")
        return path
    }
}

/// A child process started by a test, with its output captured through a pipe.
public final class ChildProcess: Sendable {
    public let subprocess: Subprocess
    private let reader: FileHandle

    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        stdin: Subprocess.Stream = .null
    ) throws {
        let pipe = Pipe()
        subprocess = try Subprocess.spawn(
            executable, arguments,
            environment: environment.map { ProcessInfo.processInfo.environment.merging($0) { $1 } }, stdin: stdin,
            stdout: .descriptor(pipe.fileHandleForWriting.fileDescriptor),
            stderr: .descriptor(pipe.fileHandleForWriting.fileDescriptor))
        try pipe.fileHandleForWriting.close()
        reader = pipe.fileHandleForReading
        let flags = fcntl(reader.fileDescriptor, F_GETFL)
        _ = fcntl(reader.fileDescriptor, F_SETFL, flags | O_NONBLOCK)
    }

    private let collected = Mutex("")

    /// Everything read so far, plus whatever is waiting in the pipe.
    public var output: String {
        drain()
        return collected.withLock { $0 }
    }

    private func drain() {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(reader.fileDescriptor, &buffer, buffer.count)
            guard count > 0 else { return }
            collected.withLock { $0 += String(decoding: buffer[0..<count], as: UTF8.self) }
        }
    }

    /// Reads output until a line contains `marker` (e.g. "ready"), or fails after `timeout`.
    @discardableResult
    public func waitForLine(containing marker: String, timeout: Duration = .seconds(30)) async throws -> String {
        func printed() -> String? {
            output.split(separator: "\n").first(where: { $0.contains(marker) }).map(String.init)
        }
        let line: String? = try await waitForValue(timeout: timeout, every: .milliseconds(10)) {
            if let line = printed() { return line }
            // Exited: what it wrote just before exiting is in the pipe still.
            if let termination = subprocess.poll() {
                if let line = printed() { return line }
                throw ChildFailure(message: "exited (\(termination)) before printing '\(marker)': \(output)")
            }
            return nil
        }
        guard let line else {
            throw TimeoutError(what: "'\(marker)' from \(subprocess.executable): \(output)", timeout: timeout)
        }
        return line
    }

    public func kill(_ signal: Int32 = SIGKILL) {
        subprocess.signal(signal)
        subprocess.waitBlocking()
    }

    /// Waits for exit, reading its output meanwhile (a child blocked on a full pipe never exits);
    /// returns how it ended and everything it wrote. Cancelled (a timeout gave up on it), it kills
    /// the child rather than leave it running after the test.
    public func finish() async -> (termination: Subprocess.Termination, output: String) {
        while true {
            drain()
            if let termination = subprocess.poll() { return (termination, output) }
            if Task.isCancelled {
                kill(SIGKILL)
                return (subprocess.poll() ?? .signalled(SIGKILL), output)
            }
            // Sleep, not a clock: polls a child process's end and output; it ends on the end.
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}

public struct ChildFailure: Error, CustomStringConvertible {
    public var message: String
    public init(message: String) { self.message = message }
    public var description: String { message }
}

/// Runs a built product (by default `perimeter`) with arguments and optional standard input;
/// returns how it ended and what it wrote to standard output and standard error.
public func runProduct(
    _ arguments: [String], product: String = "perimeter", stdin: String? = nil, timeout: Duration = .seconds(60)
) async throws -> (status: Subprocess.Termination, stdout: String, stderr: String) {
    let directory = TestScratch.root.appendingPathComponent("perimeter-run-\(UUID().uuidString)")
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
        Products.executable(product), arguments, stdin: input, stdout: .file(out, append: false),
        stderr: .file(err, append: false))
    // A wait on the child is not cancellable (it has not ended): past the timeout the child is
    // killed, so a hung command fails the test instead of holding it.
    let (status, killed) = await child.end(within: timeout)
    if killed { throw TimeoutError(what: "\(product) \(arguments.joined(separator: " "))", timeout: timeout) }
    return (
        status, (try? String(contentsOfFile: out, encoding: .utf8)) ?? "",
        (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
    )
}

/// Connects to 127.0.0.1:`port`, sends `GET path HTTP/1.0` with `headers` (lines without the
/// CRLF) and returns the socket, close-on-exec (or a process another test starts meanwhile keeps
/// the connection open). With `readTimeout`, a read gives up after it (for streams).
public func sendHTTPGet(
    port: Int, path: String, headers: [String] = [], readTimeout: Duration? = nil
) throws
    -> Int32
{
    let fd = try connectLoopback(port: port, readTimeout: readTimeout)
    let request = Array(
        (["GET \(path) HTTP/1.0", "Host: 127.0.0.1"] + headers + ["", ""]).joined(separator: "\r\n").utf8)
    sendAll(fd, request)
    return fd
}

/// A plain GET to 127.0.0.1:`port`, read to the end: the status and the body.
public func httpGet(port: Int, path: String) throws -> (status: Int, body: String) {
    let fd = try sendHTTPGet(port: port, path: path)
    defer { close(fd) }
    return readHTTPResponse(fd)
}

/// Reads an HTTP/1.0 response from `fd` to the end of the stream: the status and the body.
public func readHTTPResponse(_ fd: Int32) -> (status: Int, body: String) {
    var response: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = recv(fd, &buffer, buffer.count, 0)
        if count <= 0 { break }
        response += buffer[0..<count]
    }
    let text = String(decoding: response, as: UTF8.self)
    let status = text.split(separator: " ", maxSplits: 2).dropFirst().first.flatMap { Int($0) } ?? 0
    let body = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
    return (status, body)
}

/// The pids whose parent is `pid` (from /proc). Read with readdir, entry by entry: on a busy
/// machine processes come and go during the scan, and a listing that fails as a whole on one
/// vanished entry would say "no children" when there are some.
public func childProcesses(of pid: pid_t) -> [pid_t] {
    guard let directory = opendir("/proc") else { return [] }
    defer { closedir(directory) }
    var children: [pid_t] = []
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        guard let child = pid_t(name),
            let status = try? String(contentsOfFile: "/proc/\(name)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("PPid:") }),
            pid_t(line.dropFirst(5).trimmingCharacters(in: .whitespaces)) == pid
        else { continue }
        children.append(child)
    }
    return children
}

/// Every file under `directory` with its size and modification time: what "unchanged" means.
public func directorySnapshot(_ directory: URL) -> [String: String] {
    var files: [String: String] = [:]
    let enumerator = FileManager.default.enumerator(atPath: directory.path)
    while let name = enumerator?.nextObject() as? String {
        let attributes = try? FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(name).path)
        let size = (attributes?[.size] as? NSNumber)?.intValue ?? -1
        let modified = (attributes?[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0
        files[name] = "\(size) \(modified)"
    }
    return files
}
