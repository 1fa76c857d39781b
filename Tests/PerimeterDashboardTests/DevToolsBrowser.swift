import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
/// it reads commands on its descriptor 3 and answers on 4, each message JSON ending in a NUL),
/// so that a test can click and type like a user: real mouse events on the map, not a script
/// calling the page's functions.
final class DevToolsBrowser: Sendable {
    private let child: Subprocess
    private let commands: Int32
    private let answers: Int32
    /// Answers by command id, filled by the reading thread.
    final class Answers: Sendable { let byID = Mutex<[Int: JSONValue]>([:]) }
    private let received = Answers()
    private let nextID = Mutex(0)
    private let session: Mutex<String?> = Mutex(nil)

    init(profile: String) throws {
        guard let executable = Chromium.executable else {
            throw ChildFailure(message: "chromium is missing: apt-get install chromium")
        }
        var toChrome: [Int32] = [0, 0]
        var fromChrome: [Int32] = [0, 0]
        guard pipe(&toChrome) == 0, pipe(&fromChrome) == 0 else { throw ChildFailure(message: "pipe failed") }
        // Well above 4, so that moving them onto the child's 3 and 4 never clobbers one another.
        let childRead = fcntl(toChrome[0], F_DUPFD_CLOEXEC, 20)
        let childWrite = fcntl(fromChrome[1], F_DUPFD_CLOEXEC, 20)
        for fd in [toChrome[0], fromChrome[1]] { Glibc.close(fd) }
        _ = fcntl(toChrome[1], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fromChrome[0], F_SETFD, FD_CLOEXEC)
        commands = toChrome[1]
        answers = fromChrome[0]
        child = try Subprocess.spawn(
            executable,
            [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                "--remote-debugging-pipe", "--window-size=1400,1000", "--user-data-dir=\(profile)", "about:blank",
            ], stdout: .null, stderr: .null, descriptors: [(childRead, 3), (childWrite, 4)])
        Glibc.close(childRead)
        Glibc.close(childWrite)
        let answers = answers
        let received = received
        let reader = Thread {
            var buffer: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = read(answers, &chunk, chunk.count)
                if count <= 0 { break }
                buffer += chunk[0..<count]
                while let end = buffer.firstIndex(of: 0) {
                    let message = Array(buffer[..<end])
                    buffer.removeFirst(end + 1)
                    if let value = try? JSONParser.parse(message), let id = value["id"]?.intValue {
                        received.byID.withLock { $0[id] = value }
                    }
                }
            }
        }
        reader.start()
    }

    /// Sends one command and waits (up to 30 s) for its answer's `result`.
    @discardableResult
    func send(_ method: String, _ params: JSONObject = [:], inPage: Bool = true) async throws -> JSONValue {
        let id = nextID.withLock { id in
            id += 1
            return id
        }
        var message: JSONObject = ["id": .number(Double(id)), "method": .string(method), "params": .object(params)]
        if inPage, let session = session.withLock({ $0 }) { message["sessionId"] = .string(session) }
        var bytes = Array(JSONValue.object(message).serialized().utf8)
        bytes.append(0)
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { write(commands, $0.baseAddress, $0.count) }
            guard count > 0 else { throw ChildFailure(message: "chromium's pipe closed") }
            sent += count
        }
        let answer: JSONValue? = try await waitForValue(timeout: .seconds(30)) {
            received.byID.withLock { $0.removeValue(forKey: id) }
        }
        guard let answer else { throw ChildFailure(message: "no answer to \(method) within 30 s") }
        if let error = answer["error"] { throw ChildFailure(message: "\(method): \(error.serialized())") }
        return answer["result"] ?? .null
    }

    /// Attaches to the first page and opens `url` in it.
    func open(_ url: String) async throws {
        let targets = try await send("Target.getTargets", inPage: false)
        guard case .array(let list)? = targets["targetInfos"],
            let page = list.first(where: { $0["type"]?.stringValue == "page" })?["targetId"]
        else { throw ChildFailure(message: "no page in \(targets.serialized())") }
        let attached = try await send("Target.attachToTarget", ["targetId": page, "flatten": true], inPage: false)
        session.withLock { $0 = attached["sessionId"]?.stringValue }
        try await send("Page.enable")
        try await send("Page.navigate", ["url": .string(url)])
    }

    /// The value of a JavaScript expression in the page.
    func evaluate(_ expression: String) async throws -> JSONValue {
        let result = try await send(
            "Runtime.evaluate", ["expression": .string(expression), "returnByValue": true, "awaitPromise": true])
        if let exception = result["exceptionDetails"] {
            throw ChildFailure(message: "\(expression): \(exception.serialized())")
        }
        return result["result"]?["value"] ?? .null
    }

    /// Waits until `expression` is true in the page (60 s; the page may load slowly on a busy machine).
    func waitFor(_ expression: String, _ what: String) async throws {
        var last = ""
        try await waitUntil(what, timeout: .seconds(60), every: .milliseconds(100), context: { "last: \(last)" }) {
            do {
                return try await evaluate(expression).boolValue == true
            } catch {
                last = "\(error)"
                return false
            }
        }
    }

    /// A left click at viewport coordinates, as a mouse makes it.
    func click(x: Double, y: Double) async throws {
        for type in ["mouseMoved", "mousePressed", "mouseReleased"] {
            try await send(
                "Input.dispatchMouseEvent",
                ["type": .string(type), "x": .number(x), "y": .number(y), "button": "left", "clickCount": 1])
        }
    }

    /// Types `text` into the focused field, key by key.
    func type(_ text: String) async throws {
        try await send("Input.insertText", ["text": .string(text)])
    }

    func close() async {
        _ = try? await send("Browser.close", inPage: false)
        Glibc.close(commands)
        if await withTaskGroup(
            of: Bool.self,
            body: { group in
                group.addTask {
                    _ = await self.child.wait(); return true
                }
                group.addTask {
                    // Sleep, not a clock: the grace given to a browser process to exit before it is killed.
                    try? await Task.sleep(for: .seconds(10)); return false
                }
                let first = await group.next() ?? false
                group.cancelAll()
                return first
            }) == false
        {
            child.signal(SIGKILL)
            _ = await child.wait()
        }
        Glibc.close(answers)
    }
}
