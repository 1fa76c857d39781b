import Foundation
import PerimeterCore
import Synchronization

/// Fans Server-Sent Events out to the page's open connections, each served on a thread of its
/// own by the HTTP server, and keeps what a newly connected page needs first.
///
/// - Important: ``serve(_:)`` blocks its (HTTP server) thread until the client goes away.
final class EventBroadcaster: Sendable {
    /// One open connection's queue of frames.
    final class Client: Sendable {
        let queue = Mutex<[String]>([])
        let signal = DispatchSemaphore(value: 0)

        func push(_ frame: String) {
            let overflow = queue.withLock { queue -> Bool in
                queue.append(frame)
                // A page that cannot keep up gets the newest state on its next turn; don't hoard.
                if queue.count > 1000 {
                    queue.removeFirst(queue.count - 1000)
                    return true
                }
                return false
            }
            if !overflow { signal.signal() }
        }
    }

    struct Shared {
        var clients: [ObjectIdentifier: Client] = [:]
        var state = "{}"
        var feed: [String] = []
        /// The map as drawn now, and whether it changed since the page was first served.
        var svg = ""
        var mapChanged = false
    }

    private let shared = Mutex(Shared())
    /// Seconds between keep-alive comments (which also notice a page that went away).
    let heartbeat: Double

    init(heartbeat: Double = 10) { self.heartbeat = heartbeat }

    static func frame(event: String, data: String) -> String {
        // `data` is one line of JSON: serialized JSON holds no raw newline.
        "event: \(event)\ndata: \(data)\n\n"
    }

    var clientCount: Int { shared.withLock { $0.clients.count } }

    /// The map as drawn now.
    var svg: String {
        get { shared.withLock { $0.svg } }
    }

    /// Sets the map first served (no event).
    func start(svg: String) { shared.withLock { $0.svg = svg } }

    /// A new map (the regions changed): every page redraws it.
    func publish(map svg: String) {
        let data = JSONValue.string(svg).serialized()
        let clients = shared.withLock { shared in
            shared.svg = svg
            shared.mapChanged = true
            return Array(shared.clients.values)
        }
        for client in clients { client.push(Self.frame(event: "map", data: data)) }
    }

    func publish(state: String) {
        let clients = shared.withLock { shared in
            shared.state = state
            return Array(shared.clients.values)
        }
        for client in clients { client.push(Self.frame(event: "state", data: state)) }
    }

    func publish(feed line: String) {
        let clients = shared.withLock { shared in
            shared.feed.append(line)
            if shared.feed.count > 100 { shared.feed.removeFirst(shared.feed.count - 100) }
            return Array(shared.clients.values)
        }
        for client in clients { client.push(Self.frame(event: "feed", data: line)) }
    }

    /// Replaces the whole feed (a subject was hidden) and tells every page.
    func reset(feed lines: [String]) {
        let data = "[" + lines.joined(separator: ",") + "]"
        let clients = shared.withLock { shared in
            shared.feed = lines
            return Array(shared.clients.values)
        }
        for client in clients { client.push(Self.frame(event: "feed-reset", data: data)) }
    }

    /// Wakes every connection so that it notices the server stopping.
    func wakeAll() {
        for client in shared.withLock({ Array($0.clients.values) }) { client.signal.signal() }
    }

    /// Streams to one page until it goes away or the server stops.
    func serve(_ writer: HTTPStreamWriting) {
        let client = Client()
        let first = shared.withLock { shared -> String in
            shared.clients[ObjectIdentifier(client)] = client
            // A page served before the map changed would otherwise keep the old one.
            let map = shared.mapChanged ? Self.frame(event: "map", data: JSONValue.string(shared.svg).serialized()) : ""
            return map + Self.frame(event: "feed-reset", data: "[" + shared.feed.joined(separator: ",") + "]")
                + Self.frame(event: "state", data: shared.state)
        }
        defer { _ = shared.withLock { $0.clients.removeValue(forKey: ObjectIdentifier(client)) } }
        guard writer.write("retry: 1000\n\n" + first) else { return }
        while writer.isOpen {
            let woke = client.signal.wait(timeout: .now() + heartbeat) == .success
            let frames = client.queue.withLock { queue -> [String] in
                defer { queue.removeAll() }
                return queue
            }
            if !frames.isEmpty {
                guard writer.write(frames.joined()) else { return }
            } else if !woke {
                guard writer.write(": keep-alive\n\n") else { return }
            }
        }
    }
}

/// What ``EventBroadcaster/serve(_:)`` needs of a connection (the HTTP server's stream writer).
protocol HTTPStreamWriting {
    var isOpen: Bool { get }
    func write(_ text: String) -> Bool
}
