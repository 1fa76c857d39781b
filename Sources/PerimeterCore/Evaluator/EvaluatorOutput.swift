import Foundation

/// Something the evaluator publishes.
public enum EvaluatorOutput: Sendable, Hashable {
    /// A transition (`enter`, `exit`, `dwell`) or a state change.
    case event(RegionEvent)
    /// How many subjects are inside a region now.
    case occupancy(region: String, count: Int, t: Date)
    /// The beacons of a beacon region a subject hears, nearest first.
    case ranging(RangingReport)
    /// A subject's place changed (nil: it has none any more).
    case place(subject: String, PlaceAnswer?, t: Date)
    /// An OwnTracks-shaped transition for an OwnTracks subject.
    case ownTracksTransition(user: String, device: String, payload: JSONValue)
    /// The privacy gate's diagnostics for a subject changed (retained).
    case diagnostics(subject: String, JSONValue)
    /// Ask the subject once to upgrade to always (it has held events).
    case prompt(subject: String)
    /// Ask the subject for temporary full accuracy on behalf of a session with a purpose.
    case fullAccuracyRequest(subject: String, session: String, purpose: String)
    /// The gate changed a subject's authorization (allow once reverted): republished, retained.
    case authorization(subject: String, AuthorizationRecord)
    /// An observation dropped at ingest by the privacy gate: nothing is published, and the
    /// service does not keep the message.
    case privacyDrop(subject: String, reason: String)
    /// The first observation dropped of a subject that has no authorization record: the service
    /// logs it (its diagnostics say `authorizationRecordMissing`); nothing is published for it.
    case unrecordedSubject(subject: String, reason: String)
    /// A subject was erased: every retained topic about it is cleared (its states in
    /// `regions`, place, diagnostics, authorization, preferences), then the request is answered.
    case erased(subject: String, regions: [String])
    /// The answer to `admin/show/{subject}`.
    case shown(subject: String, JSONValue)
    /// A transition withheld from consumers that may still reach the subject's own device
    /// (privacy rule 10): published on `self/{event}/{region}/{subject}`, which only the
    /// notifier's account may read.
    case selfNotification(RegionEvent)
    /// A region an OwnTracks waypoint became, as a GeoJSON Feature (retained on
    /// `waypoints/{region}`); nil when it was deleted (the retained topic is cleared).
    case waypoint(region: String, JSONValue?)
    /// A Home Assistant discovery config (retained on `topic`, outside the venue's tree); nil
    /// removes the entity (the retained config is cleared). See ``HomeAssistantDiscovery``.
    case discovery(topic: String, config: JSONValue?)
    /// A visit's arrival or departure (`visit/{subject}`; VenueEvaluator+LocationServices).
    case visit(VisitEvent)
    /// A live position for one consumer, or the end of its stream (`live/{consumer}/{subject}`).
    case live(LiveUpdate)
}

/// One MQTT message to publish, as the core describes it (the service maps it to the client).
public struct OutboundMessage: Sendable, Hashable {
    public var topic: String
    public var payload: [UInt8]
    public var qos: Int
    public var retain: Bool
    /// MQTT 5 message expiry in seconds.
    public var expiry: UInt32?
    /// The transition's deterministic id (consumers drop duplicates by it); nil for state-like messages.
    public var eventID: String?

    public init(
        topic: String, payload: [UInt8], qos: Int, retain: Bool, expiry: UInt32? = nil, eventID: String? = nil
    ) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.expiry = expiry
        self.eventID = eventID
    }

    public var payloadString: String { String(decoding: payload, as: UTF8.self) }
}

extension EvaluatorOutput {
    /// The message for this output (topics.md is the contract):
    /// transitions at QoS 1; state, occupancy and place retained at QoS 1; ranging at QoS 0
    /// with a 5 s expiry; OwnTracks transitions at QoS 1 on `owntracks/{user}/{device}/event`.
    /// Every message for this output (most have one; a drop none; an erasure one per cleared topic).
    public func messages(topics: Topics) -> [OutboundMessage] {
        switch self {
        case .erased(let subject, let regions):
            var cleared = regions.sorted().map { topics.state(region: $0, subject: subject) }
            cleared += [
                topics.place(subject: subject), topics.diagnostics(subject: subject),
                topics.authorization(subject: subject), topics.preferences(subject: subject),
            ]
            let answer: JSONValue = [
                "subject": .string(subject), "cleared": .array(cleared.map(JSONValue.string)),
            ]
            return cleared.map { OutboundMessage(topic: $0, payload: [], qos: 1, retain: true) } + [
                OutboundMessage(
                    topic: topics.admin("erased", subject: subject), payload: Array(answer.serialized().utf8), qos: 1,
                    retain: false)
            ]
        case .shown(let subject, let document):
            return [
                OutboundMessage(
                    topic: topics.admin("shown", subject: subject), payload: Array(document.serialized().utf8), qos: 1,
                    retain: false)
            ]
        default:
            return message(topics: topics).map { [$0] } ?? []
        }
    }

    func message(topics: Topics) -> OutboundMessage? {
        switch self {
        case .event(let event):
            return OutboundMessage(
                topic: topics.topic(for: event), payload: Array(event.publishedText(venue: topics.venue).utf8), qos: 1,
                retain: event.kind == .state, eventID: event.kind == .state ? nil : event.id)
        case .selfNotification(let event):
            guard var outbound = EvaluatorOutput.event(event).message(topics: topics) else { return nil }
            outbound.topic = topics.selfEvent(event.kind, region: event.region, subject: event.subject)
            return outbound
        case .occupancy(let region, let count, let t):
            let payload: JSONValue = ["count": .number(Double(count)), "t": .string(Timestamp.format(t))]
            return OutboundMessage(
                topic: topics.occupancy(region: region), payload: Array(payload.serialized().utf8), qos: 1, retain: true
            )
        case .ranging(let report):
            return OutboundMessage(
                topic: topics.ranging(region: report.region, subject: report.subject),
                payload: Array(report.payload.serialized().utf8), qos: 0, retain: false, expiry: 5)
        case .place(let subject, let answer, let t):
            var payload = answer?.payload.objectValue ?? JSONObject([("place", .null), ("source", .null)])
            payload["t"] = .string(Timestamp.format(t))
            return OutboundMessage(
                topic: topics.place(subject: subject), payload: Array(JSONValue.object(payload).serialized().utf8),
                qos: 1, retain: true)
        case .ownTracksTransition(let user, let device, let payload):
            return OutboundMessage(
                topic: "owntracks/\(Topics.level(user))/\(Topics.level(device))/event",
                payload: Array(payload.serialized().utf8), qos: 1, retain: false)
        case .diagnostics(let subject, let payload):
            return OutboundMessage(
                topic: topics.diagnostics(subject: subject), payload: Array(payload.serialized().utf8), qos: 1,
                retain: true)
        case .prompt(let subject):
            let payload: JSONValue = ["request": "always", "reason": "heldEvents"]
            return OutboundMessage(
                topic: topics.prompt(subject: subject), payload: Array(payload.serialized().utf8), qos: 1, retain: false
            )
        case .fullAccuracyRequest(let subject, let session, let purpose):
            let payload: JSONValue = [
                "request": "temporaryFullAccuracy", "session": .string(session), "purpose": .string(purpose),
            ]
            return OutboundMessage(
                topic: topics.prompt(subject: subject), payload: Array(payload.serialized().utf8), qos: 1, retain: false
            )
        case .authorization(let subject, let record):
            return OutboundMessage(
                topic: topics.authorization(subject: subject), payload: Array(record.json.serialized().utf8), qos: 1,
                retain: true)
        case .waypoint(let region, let feature):
            return OutboundMessage(
                topic: topics.waypoint(region), payload: feature.map { Array($0.serialized().utf8) } ?? [], qos: 1,
                retain: true)
        case .discovery(let topic, let config):
            return OutboundMessage(
                topic: topic, payload: config.map { Array($0.serialized().utf8) } ?? [], qos: 1, retain: true)
        case .visit(let visit):
            var payload = JSONObject()
            for (key, value) in visit.payload.objectValue ?? JSONObject() {
                payload[key] = value
                if key == "event" { payload["venue"] = .string(topics.venue) }
            }
            return OutboundMessage(
                topic: topics.visit(subject: visit.subject),
                payload: Array(JSONValue.object(payload).serialized().utf8),
                qos: 1, retain: false, eventID: visit.id)
        case .live(.position(let consumer, let fix, let reduced)):
            var payload = JSONObject()
            payload["subject"] = .string(fix.subject)
            payload["t"] = .string(Timestamp.format(fix.t))
            payload["lat"] = .number(fix.position.lat)
            payload["lon"] = .number(fix.position.lon)
            if let accuracy = fix.accuracy { payload["acc"] = .number(accuracy) }
            if let floor = fix.floor { payload["floor"] = .number(Double(floor)) }
            payload["accuracy"] = .string(reduced ? "reduced" : "full")
            payload["source"] = .string(fix.source)
            return OutboundMessage(
                topic: topics.live(consumer: consumer, subject: fix.subject),
                payload: Array(JSONValue.object(payload).serialized().utf8), qos: 0, retain: false, expiry: 5)
        case .live(.stopped(let consumer, let subject, let reason, let t)):
            let payload: JSONValue = [
                "subject": .string(subject), "t": .string(Timestamp.format(t)), "stopped": true,
                "reason": .string(reason),
            ]
            return OutboundMessage(
                topic: topics.live(consumer: consumer, subject: subject), payload: Array(payload.serialized().utf8),
                qos: 1, retain: false)
        case .privacyDrop, .unrecordedSubject, .erased, .shown:
            return nil
        }
    }
}
