import Foundation
import PerimeterCore
import PerimeterKit
import Synchronization

/// Fans Server-Sent Events out to the page's open streams and keeps what a newly connected
/// page needs first.
///
/// Each stream keeps only what its page has not seen yet, coalesced: the latest state (a new
/// one replaces an unsent one), the latest map, and at most ``maxPendingFeed`` feed lines. A
/// page that falls further behind is resynchronized: its next frames are the whole current
/// picture (map if it changed, the feed as one `feed-reset`, the state), never a backlog. The
/// server asks a stream for bytes only when its client can take them, so a slow reader costs
/// one such picture at most; one that stops reading is dropped by the server's idle timeout.
///
/// Measured on the issue-18 probe: four slow readers took the previous design (a queue of up
/// to 1,000 full-state frames per stream) from 96 MB to 1.2 GB in two minutes.
final class EventBroadcaster: Sendable {
    /// Feed lines one stream may hold back before it is resynchronized instead.
    let maxPendingFeed: Int

    /// One open stream: what its page has not seen yet.
    final class Client: HTTPStreamSource {
        struct Pending {
            var stream: HTTPStream?
            /// Send the whole picture next (a new page, or one that fell too far behind).
            var resync = true
            /// Nothing sent yet: the picture includes the map if it changed since the page was served.
            var fresh = true
            var map: String?
            var state: String?
            var feed: [(seq: UInt64, line: String)] = []
            /// Feed lines up to this number are in the page already.
            var feedSent: UInt64 = 0
            var keepAlive = false
            var resyncs = 0
        }
        let pending = Mutex(Pending())
        let broadcaster: EventBroadcaster

        init(_ broadcaster: EventBroadcaster) { self.broadcaster = broadcaster }

        func start(_ stream: HTTPStream) {
            pending.withLock { $0.stream = stream }
            broadcaster.add(self)
        }

        func stop() {
            broadcaster.remove(self)
            pending.withLock { $0.stream = nil }
        }

        /// Updates what is pending with `change` and wakes the stream.
        func update(_ change: (inout Pending) -> Void) {
            let stream = pending.withLock { pending -> HTTPStream? in
                change(&pending)
                return pending.stream
            }
            stream?.wake()
        }

        func push(feed line: String, seq: UInt64, limit: Int) {
            update { pending in
                guard !pending.resync, seq > pending.feedSent else { return }
                pending.feed.append((seq, line))
                if pending.feed.count > limit {
                    // Too far behind: the whole feed, once, instead of a growing backlog.
                    pending.feed = []
                    pending.resync = true
                    pending.resyncs += 1
                }
            }
        }

        /// Bytes held for this page now (what a slow reader costs), before they are written.
        var heldBytes: Int {
            pending.withLock { pending in
                (pending.map?.utf8.count ?? 0) + (pending.state?.utf8.count ?? 0)
                    + pending.feed.reduce(0) { $0 + $1.line.utf8.count }
            }
        }

        var resyncCount: Int { pending.withLock { $0.resyncs } }

        func next() -> HTTPStreamChunk {
            var text = ""
            pending.withLock { pending in
                if pending.resync {
                    // Lock order: a client's lock, then the broadcaster's (never the reverse).
                    let picture = broadcaster.picture(first: pending.fresh)
                    if !pending.fresh, let map = pending.map { text += EventBroadcaster.frame(event: "map", data: map) }
                    text += picture.text
                    pending.feedSent = picture.feedSeq
                    pending.resync = false
                    pending.fresh = false
                    pending.map = nil
                    pending.state = nil
                    pending.feed = []
                } else {
                    if let map = pending.map { text += EventBroadcaster.frame(event: "map", data: map) }
                    for (seq, line) in pending.feed where seq > pending.feedSent {
                        text += EventBroadcaster.frame(event: "feed", data: line)
                        pending.feedSent = seq
                    }
                    if let state = pending.state { text += EventBroadcaster.frame(event: "state", data: state) }
                    pending.map = nil
                    pending.state = nil
                    pending.feed = []
                }
                if text.isEmpty && pending.keepAlive { text = ": keep-alive\n\n" }
                pending.keepAlive = false
            }
            return text.isEmpty ? .later : .bytes(Array(text.utf8))
        }
    }

    struct Shared {
        var clients: [ObjectIdentifier: Client] = [:]
        var state = "{}"
        var feed: [(seq: UInt64, line: String)] = []
        var feedSeq: UInt64 = 0
        /// The map as drawn now, and whether it changed since the page was first served.
        var svg = ""
        var mapChanged = false
    }

    private let shared = Mutex(Shared())

    init(maxPendingFeed: Int = 32) { self.maxPendingFeed = maxPendingFeed }

    static func frame(event: String, data: String) -> String {
        // `data` is one line of JSON: serialized JSON holds no raw newline.
        "event: \(event)\ndata: \(data)\n\n"
    }

    var clientCount: Int { shared.withLock { $0.clients.count } }

    /// The largest number of bytes any one stream holds back now, and the resyncs so far.
    var backlog: (largest: Int, resyncs: Int) {
        let clients = shared.withLock { Array($0.clients.values) }
        return (clients.map(\.heldBytes).max() ?? 0, clients.reduce(0) { $0 + $1.resyncCount })
    }

    /// The map as drawn now.
    var svg: String { shared.withLock { $0.svg } }

    /// Sets the map first served (no event).
    func start(svg: String) { shared.withLock { $0.svg = svg } }

    /// A new stream for one page.
    func client() -> Client { Client(self) }

    fileprivate func add(_ client: Client) { shared.withLock { $0.clients[ObjectIdentifier(client)] = client } }
    fileprivate func remove(_ client: Client) {
        _ = shared.withLock { $0.clients.removeValue(forKey: ObjectIdentifier(client)) }
    }

    /// The frames that bring a page up to date whatever it missed: the whole feed and the
    /// state; for a page's `first` frames also the reconnect delay and the map if it changed
    /// since the page was served.
    fileprivate func picture(first: Bool) -> (text: String, feedSeq: UInt64) {
        shared.withLock { shared in
            let map =
                first && shared.mapChanged
                ? Self.frame(event: "map", data: JSONValue.string(shared.svg).serialized()) : ""
            let feed = "[" + shared.feed.map(\.line).joined(separator: ",") + "]"
            return (
                (first ? "retry: 1000\n\n" : "") + map + Self.frame(event: "feed-reset", data: feed)
                    + Self.frame(event: "state", data: shared.state), shared.feedSeq
            )
        }
    }

    /// A new map (the regions changed): every page redraws it.
    func publish(map svg: String) {
        let data = JSONValue.string(svg).serialized()
        let clients = shared.withLock { shared in
            shared.svg = svg
            shared.mapChanged = true
            return Array(shared.clients.values)
        }
        for client in clients { client.update { $0.map = data } }
    }

    func publish(state: String) {
        let clients = shared.withLock { shared in
            shared.state = state
            return Array(shared.clients.values)
        }
        // One string shared by every stream (copy-on-write): a state costs its size once.
        for client in clients { client.update { $0.state = state } }
    }

    func publish(feed line: String) {
        let (clients, seq) = shared.withLock { shared in
            shared.feedSeq += 1
            shared.feed.append((shared.feedSeq, line))
            if shared.feed.count > 100 { shared.feed.removeFirst(shared.feed.count - 100) }
            return (Array(shared.clients.values), shared.feedSeq)
        }
        for client in clients { client.push(feed: line, seq: seq, limit: maxPendingFeed) }
    }

    /// Replaces the whole feed (a subject was hidden) and tells every page.
    func reset(feed lines: [String]) {
        let clients = shared.withLock { shared in
            shared.feed = lines.map { line in
                shared.feedSeq += 1
                return (shared.feedSeq, line)
            }
            return Array(shared.clients.values)
        }
        // The whole picture again: it carries the feed as one feed-reset.
        for client in clients { client.update { $0.resync = true } }
    }

    /// A keep-alive comment to every page with nothing else to send (it also finds pages whose
    /// client went away: a suspended connection notices only when written to).
    func keepAlive() {
        for client in shared.withLock({ Array($0.clients.values) }) { client.update { $0.keepAlive = true } }
    }
}
