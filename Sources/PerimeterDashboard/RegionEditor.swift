import Foundation
import PerimeterCore
import PerimeterKit
import Synchronization

/// The server side of the page's region editor: checks a drawn region with the evaluator's own
/// decoder (``LiveRegions``, the code path of `perimeter regions put`) and publishes it on its
/// retained `regions/{id}` topic, as that command does. There is no second validator: what
/// the page shows as a problem is what the evaluator would refuse, word for word.
struct RegionEditor: Sendable {
    let venue: String
    let prefix: String
    /// Bounded like the evaluator's `evaluator.maxPayloadBytes` default.
    let maxPayloadBytes: Int
    let clock: any TimeSource
    /// Publishes a retained message at QoS 1 with the region content type; returns once the
    /// broker acknowledged it, throws when it refused it.
    let publish: @Sendable (_ topic: String, _ payload: [UInt8]) async throws -> Void

    /// The answer to a check or a publish: `{"ok": true, "id", "topic"}` or
    /// `{"ok": false, "problems": [...]}`.
    struct Outcome {
        var status: Int
        var json: JSONValue
    }

    func topic(_ id: String) -> String { "\(prefix)/\(venue)/regions/\(Topics.level(id))" }

    /// Checks one Feature (the request body); publishes it when `publishing` and it is valid.
    func handle(body: [UInt8], publishing: Bool) -> Outcome {
        let (changes, problems) = LiveRegions.read(
            Data(body), venue: venue, maxPayloadBytes: maxPayloadBytes, receivedAt: clock.now)
        guard problems.isEmpty, changes.count == 1, let change = changes.first else {
            let list = problems.isEmpty ? ["send one GeoJSON Feature"] : problems
            return Outcome(status: 422, json: ["ok": false, "problems": .array(list.map { .string($0) })])
        }
        let topic = topic(change.id)
        guard publishing else {
            return Outcome(status: 200, json: ["ok": true, "id": .string(change.id), "topic": .string(topic)])
        }
        // The HTTP callback is synchronous: wait here (on one of the server's threads) for the
        // broker's acknowledgement, at most 10 s, so that the page hears a refusal.
        let result = Mutex<String??>(nil)
        let done = DispatchSemaphore(value: 0)
        let publish = publish
        let payload = change.payload
        let publishing = Task {
            do {
                try await publish(topic, payload)
                result.withLock { $0 = .some(nil) }
            } catch {
                result.withLock { $0 = .some("the broker refused \(topic): \(error)") }
            }
            done.signal()
        }
        if done.wait(timeout: .now() + 10) == .timedOut {
            // Not left behind: the publish is given up (the page says so) and the task ends.
            publishing.cancel()
            return Outcome(
                status: 504,
                json: ["ok": false, "problems": ["no acknowledgement from the broker within 10 s: is it connected?"]])
        }
        if let failure = result.withLock({ $0 }) ?? nil {
            return Outcome(status: 502, json: ["ok": false, "problems": [.string(failure)]])
        }
        return Outcome(
            status: 200, json: ["ok": true, "id": .string(change.id), "topic": .string(topic), "published": true])
    }
}
