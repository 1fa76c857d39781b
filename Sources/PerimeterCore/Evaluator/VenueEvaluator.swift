import Foundation

/// One venue's settings, as the evaluator's configuration gives them.
public struct VenueSettings: Sendable {
    public var id: String
    public var timeZone: TimeZone
    /// Default locale of the venue's notifications (recipients may choose their own).
    public var locale: String
    /// ISO 4217 code of the venue's prices.
    public var currency: String
    public var geofence: GeofenceParameters
    public var beacons: BeaconParameters
    public var gateways: [Gateway]
    /// The privacy gate's settings (defaults: people notDetermined, no sessions: nothing flows
    /// until subjects authorize and consumers declare sessions).
    public var privacy: PrivacySettings
    /// Who may report whom, and how far in the future an observation may be dated.
    public var trust = TrustPolicy()
    /// Home Assistant MQTT discovery (`venues.{id}.homeAssistant`); nil: off.
    public var homeAssistant: HomeAssistantSettings?
    /// Visits and the live location stream (`venues.{id}.visits`, `venues.{id}.live`).
    public var locationServices = LocationServiceSettings()

    public init(
        id: String, timeZone: TimeZone = TimeZone(identifier: "UTC")!, locale: String = "en_US",
        currency: String = "USD", staleAfter: TimeInterval = 300, pathLossExponent: Double = 2,
        beaconExitTimeout: TimeInterval = 30, gateways: [Gateway] = [], privacy: PrivacySettings = PrivacySettings()
    ) {
        self.id = id
        self.timeZone = timeZone
        self.locale = locale
        self.currency = currency
        geofence = GeofenceParameters(venue: id, staleAfter: staleAfter, timeZone: timeZone)
        beacons = BeaconParameters(
            venue: id, beaconExitTimeout: beaconExitTimeout, staleAfter: staleAfter,
            distanceModel: .logDistance(exponent: pathLossExponent))
        self.gateways = gateways
        self.privacy = privacy
    }
}

/// A venue's whole evaluation, pure: the geofence and beacon engines, occupancy, places, agent
/// liveness and the OwnTracks adapter's transitions. No I/O and no clock: inputs and ticks
/// carry their time, so the same inputs always give the same outputs (the service journals
/// its inputs and replays them after a crash).
public struct VenueEvaluator: Sendable {
    public let settings: VenueSettings
    public private(set) var geofences: GeofenceEngine
    public private(set) var beacons: BeaconEngine
    private var regions: [String: Region] = [:]
    /// Subjects inside each region (occupancy).
    private var inside: [String: Set<String>] = [:]
    /// Geographic place regions each subject is inside.
    private var gpsPlaces: [String: IDSet] = [:]
    private var places: [String: PlaceAnswer] = [:]
    private var preferences: [String: SubjectPreferences] = [:]
    /// Which agents observe each subject, and the reverse.
    private var observers = SubjectTable<IDSet>()
    private var observed = SubjectTable<IDSet>()
    /// Agents whose status (or last will) says offline, since when.
    private var offline: [String: Date] = [:]
    /// Subjects a gateway located (a room place), and when they were last heard.
    private var located: [String: Date] = [:]
    /// What each agent that announced `caps` can observe (agents that did not say are not limited).
    private var capabilities: [String: Set<String>] = [:]
    /// The ids the venue's regions file defines: the file wins for them (``reload(_:previous:at:)``).
    public private(set) var fileRegionIDs: Set<String> = []
    /// The privacy gate between the engines and every output about a subject.
    public private(set) var privacy: PrivacyGate
    /// The privacy topics' latest records, as received.
    public private(set) var authorization = SubjectTable<JSONText>()
    public private(set) var usage = SubjectTable<JSONText>()
    public private(set) var sessions: [String: JSONValue] = [:]
    /// Subjects with a Home Assistant `device_tracker` config out (VenueEvaluator+HomeAssistant).
    var homeAssistantTrackers: Set<String> = []
    /// Visits and live streams (VenueEvaluator+LocationServices).
    var locationServices: LocationServices

    public init(settings: VenueSettings, regions: [Region]) {
        self.settings = settings
        geofences = GeofenceEngine(regions: regions, parameters: settings.geofence)
        beacons = BeaconEngine(regions: regions, gateways: settings.gateways, parameters: settings.beacons)
        privacy = PrivacyGate(settings: settings.privacy)
        locationServices = LocationServices(venue: settings.id, settings: settings.locationServices)
        for region in regions { self.regions[region.id] = region }
    }

    /// The whole evaluation state, for a restart that does not replay the journal from its start.
    public struct Snapshot: Sendable, Codable {
        var regions: [Region]
        var geofences: GeofenceEngine.Snapshot
        var beacons: BeaconEngine.Snapshot
        var inside: [String: Set<String>]
        var gpsPlaces: [String: IDSet]
        var places: [String: PlaceAnswer]
        var preferences: [String: SubjectPreferences]
        var observers: SubjectTable<IDSet>
        var observed: SubjectTable<IDSet>
        var offline: [String: Date]
        var authorization: SubjectTable<JSONText>
        var usage: SubjectTable<JSONText>
        var sessions: [String: JSONValue]
        var privacy: PrivacyGate.State
        /// Absent from snapshots written before Home Assistant discovery.
        var homeAssistantTrackers: Set<String>? = nil
        /// Absent from snapshots written before visits.
        var locationServices: LocationServices.State? = nil
        /// Absent from snapshots written before room places expired.
        var located: [String: Date]? = nil
        /// Absent from snapshots written before capabilities were enforced.
        var capabilities: [String: Set<String>]? = nil
        /// Absent from snapshots written before the file's precedence (the service sets it).
        var fileRegionIDs: Set<String>? = nil
    }

    /// Sets the ids of the regions file (a restore from a snapshot written before they were kept).
    public mutating func noteFileRegions(_ ids: Set<String>) { fileRegionIDs = ids }

    /// JSON for snapshots: times as seconds, the engines' ±∞ sentinels ("never") as text.
    public static func snapshotEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
        return encoder
    }

    public static func snapshotDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(
            positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
        return decoder
    }

    public var snapshot: Snapshot {
        Snapshot(
            regions: regions.values.sorted { $0.id < $1.id }, geofences: geofences.snapshot,
            beacons: beacons.snapshot, inside: inside, gpsPlaces: gpsPlaces, places: places, preferences: preferences,
            observers: observers, observed: observed, offline: offline, authorization: authorization, usage: usage,
            sessions: sessions, privacy: privacy.snapshot, homeAssistantTrackers: homeAssistantTrackers,
            locationServices: locationServices.snapshot, located: located, capabilities: capabilities,
            fileRegionIDs: fileRegionIDs)
    }

    /// An evaluator exactly where the snapshotted one stood (settings may have changed since).
    public init(settings: VenueSettings, restoring snapshot: Snapshot) {
        self.settings = settings
        geofences = GeofenceEngine(regions: snapshot.regions, parameters: settings.geofence)
        geofences.restore(snapshot.geofences)
        beacons = BeaconEngine(restoring: snapshot.beacons, parameters: settings.beacons)
        for gateway in settings.gateways { beacons.register(gateway) }
        privacy = PrivacyGate(settings: settings.privacy, restoring: snapshot.privacy)
        locationServices = LocationServices(
            venue: settings.id, settings: settings.locationServices, restoring: snapshot.locationServices)
        for region in snapshot.regions { regions[region.id] = region }
        inside = snapshot.inside
        gpsPlaces = snapshot.gpsPlaces
        places = snapshot.places
        preferences = snapshot.preferences
        observers = snapshot.observers
        observed = snapshot.observed
        offline = snapshot.offline
        authorization = snapshot.authorization
        usage = snapshot.usage
        sessions = snapshot.sessions
        homeAssistantTrackers = snapshot.homeAssistantTrackers ?? []
        located = snapshot.located ?? [:]
        capabilities = snapshot.capabilities ?? [:]
        fileRegionIDs = snapshot.fileRegionIDs ?? []
    }

    public var regionCount: Int { regions.count }
    /// Every region, in no particular order.
    var allRegions: Dictionary<String, Region>.Values { regions.values }
    /// Subjects with a place answer (published or not).
    var placedSubjects: Set<String> { Set(places.keys) }
    public func region(_ id: String) -> Region? { regions[id] }

    /// Subjects inside `region` now.
    public func occupants(of region: String) -> Set<String> { inside[region] ?? [] }

    /// The ids of the venue's regions, sorted.
    public var regionIDs: [String] { regions.keys.sorted() }

    public func place(of subject: String) -> PlaceAnswer? { places[subject] }

    /// The confirmed state of a subject for a region, from whichever engine holds it.
    public func state(subject: String, region: String) -> MembershipState {
        guard let known = regions[region] else { return .unmonitored }
        return known.isGeographic
            ? geofences.state(subject: subject, region: region) : beacons.state(subject: subject, region: region)
    }

    // MARK: - Inputs

    /// Applies one decoded input. `agent` is the agent whose topic carried it (nil for
    /// regions and privacy records); `receivedAt` dates inputs without a time of their own.
    public mutating func handle(
        _ input: Inbound, agent: String?, receivedAt: Date
    ) -> Result<
        [EvaluatorOutput], InboundError
    > {
        let result = handleInput(input, agent: agent, receivedAt: receivedAt)
        guard case .success(var outputs) = result else { return result }
        outputs += followLocationServices(after: input, at: receivedAt)
        guard settings.homeAssistant != nil else { return .success(Self.coalescingOccupancy(outputs)) }
        return .success(Self.coalescingOccupancy(outputs + followHomeAssistant(outputs, after: input)))
    }

    /// One occupancy per region, the last: a retained count. Several changes within one input or
    /// tick (a region deleted with 200 people inside, many subjects going stale at once) would
    /// otherwise publish every intermediate count, 199 messages counting down to 0.
    static func coalescingOccupancy(_ outputs: [EvaluatorOutput]) -> [EvaluatorOutput] {
        var last: [String: Int] = [:]
        var count = 0
        for (index, output) in outputs.enumerated() {
            guard case .occupancy(let region, _, _) = output else { continue }
            last[region] = index
            count += 1
        }
        guard count > last.count else { return outputs }
        return outputs.enumerated().compactMap { index, output in
            if case .occupancy(let region, _, _) = output, last[region] != index { return nil }
            return output
        }
    }

    private mutating func handleInput(
        _ input: Inbound, agent: String?, receivedAt: Date
    ) -> Result<
        [EvaluatorOutput], InboundError
    > {
        if let refusal = settings.trust.refusal(of: input, agent: agent, receivedAt: receivedAt) {
            return .failure(refusal)
        }
        if let refusal = capabilityRefusal(of: input, agent: agent) { return .failure(refusal) }
        switch input {
        case .fix(var fix):
            if let drop = dropped(fix.subject) { return .success([drop] + toldUnrecorded(fix.subject, at: receivedAt)) }
            fix = privacy.coarsen(fix)
            switch geofences.process(fix) {
            case .failure(let rejection): return .failure(InboundError(code: rejection.code, "\(rejection)"))
            case .success(let events):
                noteObserved(fix.subject, by: agent)
                var outputs = publish(events)
                outputs += updatePlace(of: fix.subject, at: fix.t)
                return .success(outputs)
            }
        case .beacons(var report):
            if beacons.isGateway(report.agent) {
                let kept = report.sightings.filter { dropped($0.identity.canonical) == nil }
                if kept.isEmpty && !report.sightings.isEmpty {
                    return .success([.privacyDrop(subject: report.agent, reason: "tags")])
                }
                report.sightings = kept
            } else if let drop = dropped(report.subject ?? report.agent) {
                return .success([drop] + toldUnrecorded(report.subject ?? report.agent, at: receivedAt))
            }
            switch beacons.process(report) {
            case .failure(let rejection): return .failure(InboundError(code: rejection.code, "\(rejection)"))
            case .success(let update):
                var outputs = publish(update.events)
                if update.locations.isEmpty {
                    noteObserved(report.subject ?? report.agent, by: report.agent)
                    outputs += updatePlace(of: report.subject ?? report.agent, at: report.t)
                }
                outputs += locate(update.locations, by: report.agent)
                return .success(outputs)
            }
        case .tags(var report):
            let kept = report.sightings.filter { dropped($0.subject) == nil }
            if kept.isEmpty && !report.sightings.isEmpty {
                return .success([.privacyDrop(subject: report.gateway, reason: "tags")])
            }
            report.sightings = kept
            switch beacons.process(tags: report) {
            case .failure(let rejection): return .failure(InboundError(code: rejection.code, "\(rejection)"))
            case .success(let locations): return .success(locate(locations, by: report.gateway))
            }
        case .agentStatus(let status):
            if status.online {
                offline[status.agent] = nil
                capabilities[status.agent] = status.capabilities.map(Set.init)
                return .success([])
            }
            guard offline[status.agent] == nil else { return .success([]) }
            offline[status.agent] = status.t ?? receivedAt
            return .success(agentWentOffline(status.agent, at: receivedAt))
        case .regionUpsert(let region) where agent != nil:
            // Only the OwnTracks adapter turns an agent's message into a region: a waypoint.
            guard let user = agent.flatMap(InboundDecoder.ownTracksDevice(of:))?.user,
                let scoped = settings.trust.waypoint(region, user: user)
            else {
                return .failure(
                    InboundError(
                        code: "waypoint",
                        "waypoint '\(region.id)' is not turned into a region (adapters.ownTracksWaypoints: \(settings.trust.waypoints.rawValue)\(region.isGeographic ? "" : "; beacon waypoints are ranged on the phone"))"
                    ))
            }
            if let old = regions[scoped.id], old.properties["owntracks"]?["user"]?.stringValue != user {
                return .failure(
                    InboundError(
                        code: "waypoint", "region '\(scoped.id)' exists and is not this user's waypoint; not replaced"))
            }
            return .success(upsert(scoped, at: receivedAt) + [.waypoint(region: scoped.id, scoped.feature)])
        case .regionUpsert(let region):
            if fileRegionIDs.contains(region.id) {
                // The same definition as the file's (perimeter up publishes its file) changes nothing.
                guard let current = regions[region.id], Self.sameDefinition(current, region) else {
                    return .failure(Self.fileRegionRefusal(region.id, "changed"))
                }
                return .success([])
            }
            return .success(upsert(region, at: receivedAt))
        case .regionRemove(let id):
            if fileRegionIDs.contains(id) { return .failure(Self.fileRegionRefusal(id, "deleted")) }
            return .success(remove(regionID: id, at: receivedAt))
        case .preferences(let subject, let choices):
            preferences[subject] = choices
            return .success(updatePlace(of: subject, at: receivedAt))
        case .authorization(let subject, let record):
            authorization[subject] = record.map(JSONText.init)
            let gated = privacy.apply(
                authorization: record.flatMap(AuthorizationRecord.init(json:)), subject: subject, at: receivedAt)
            return .success(apply(gated, at: receivedAt))
        case .usage(let subject, let record):
            usage[subject] = JSONText(record)
            let gated = privacy.apply(
                usage: record["inUse"]?.boolValue ?? false, background: record["background"]?.boolValue ?? false,
                subject: subject, at: receivedAt)
            return .success(apply(gated, at: receivedAt))
        case .session(let consumer, let session, let record):
            sessions["\(consumer)/\(session)"] = record
            let gated = privacy.apply(
                session: record.flatMap(ServiceSession.init(json:)), key: "\(consumer)/\(session)", at: receivedAt)
            return .success(apply(gated, at: receivedAt))
        case .admin(let command, let subject):
            return .success(command == "erase" ? erase(subject, at: receivedAt) : [show(subject, at: receivedAt)])
        }
    }

    /// Forgets a subject everywhere in the evaluation (`perimeter subjects erase`): its states,
    /// place, preferences, privacy records, held events; occupancy drops it. The service then
    /// clears its retained topics and its rows.
    public mutating func erase(_ subject: String, at t: Date) -> [EvaluatorOutput] {
        var events = geofences.erase(subject: subject, at: t)
        events += beacons.erase(subject: subject, at: t)
        var outputs: [EvaluatorOutput] = []
        for region in inside.keys.sorted() where inside[region]!.remove(subject) != nil {
            outputs.append(.occupancy(region: region, count: inside[region]!.count, t: t))
        }
        places[subject] = nil
        gpsPlaces[subject] = nil
        located[subject] = nil
        preferences[subject] = nil
        authorization[subject] = nil
        usage[subject] = nil
        for agent in observers.removeValue(forKey: subject) ?? [] { observed[agent]?.remove(subject) }
        // The subject may be an agent too (a phone is both): what it observed and its status go.
        for other in observed.removeValue(forKey: subject) ?? [] { observers[other]?.remove(subject) }
        offline[subject] = nil
        capabilities[subject] = nil
        privacy.erase(subject)
        locationServices.erase(subject: subject)
        outputs.append(.erased(subject: subject, regions: Array(Set(events.map(\.region))).sorted()))
        return outputs
    }

    /// Resets subjects whose last observation is dated after `limit` (written before future
    /// dates were refused): the engines forget them (`unmonitored`, reason `clockRepair`), so
    /// that their genuine observations are no longer refused as out of order.
    /// - Returns: the subjects reset.
    public mutating func resetTracks(datedAfter limit: Date, at t: Date) -> [String] {
        let subjects = Set(geofences.subjects(observedAfter: limit) + beacons.subjects(reportedAfter: limit))
        for subject in subjects.sorted() {
            _ = geofences.forget(subject: subject, at: t, reason: "clockRepair")
            _ = beacons.reset(subject: subject, at: t, reason: "clockRepair")
        }
        return subjects.sorted()
    }

    /// Lets go of subjects another evaluator now serves (their partition moved, docs/scale.md):
    /// the engines forget their tracks, occupancy, places and visits drop them, and nothing is
    /// published (their new holder publishes for them). Venue-wide records (privacy, sessions,
    /// preferences, agents) are kept: every evaluator of the venue has them. Their sequence
    /// numbers are kept too, as ``GeofenceEngine/forget(subject:at:reason:)`` keeps them.
    /// - Returns: the subjects dropped, sorted.
    public mutating func dropSubjects(at t: Date, where leaving: (String) -> Bool) -> [String] {
        var known = Set(geofences.subjects(observedAfter: .distantPast))
        known.formUnion(beacons.subjects(reportedAfter: .distantPast))
        for members in inside.values { known.formUnion(members) }
        known.formUnion(places.keys)
        known.formUnion(located.keys)
        known.formUnion(beacons.tagSubjects)
        let dropped = known.filter(leaving).sorted()
        for subject in dropped {
            _ = geofences.forget(subject: subject, at: t, reason: "moved")
            _ = beacons.forget(subject: subject, at: t, reason: "moved")
            beacons.forget(tag: subject)
            for region in inside.keys { inside[region]!.remove(subject) }
            places[subject] = nil
            gpsPlaces[subject] = nil
            located[subject] = nil
            locationServices.erase(subject: subject)
        }
        return dropped
    }

    /// One subject's retained state for a region, as a handover reads it (docs/scale.md).
    public struct AdoptedState: Sendable, Hashable {
        public var region: String
        public var subject: String
        public var state: MembershipState
        public var seq: Int
        public var t: Date
        /// For `unknown`: inside or outside, as last known (the stay goes on when it comes back).
        public var lastKnown: MembershipState?

        public init(
            region: String, subject: String, state: MembershipState, seq: Int, t: Date,
            lastKnown: MembershipState? = nil
        ) {
            self.region = region
            self.subject = subject
            self.state = state
            self.seq = seq
            self.t = t
            self.lastKnown = lastKnown
        }

        /// Reads a retained `state/{region}/{subject}` payload; nil when it is not one.
        public init?(payload: [UInt8]) {
            guard let json = try? JSONParser.parse(payload), let region = json["region"]?.stringValue,
                let subject = json["subject"]?.stringValue,
                let state = json["state"]?.stringValue.flatMap(MembershipState.init(rawValue:)),
                let t = json["t"]?.stringValue.flatMap(Timestamp.parse)
            else { return nil }
            let seq = json["seq"]?.intValue ?? 0
            guard seq >= 0 else { return nil }
            let lastKnown = json["lastKnown"]?.stringValue.flatMap(MembershipState.init(rawValue:))
            self.init(
                region: region, subject: subject, state: state, seq: seq, t: t,
                lastKnown: state == .unknown && (lastKnown == .inside || lastKnown == .outside) ? lastKnown : nil)
        }

        public var json: JSONValue {
            var object: JSONObject = [
                "region": .string(region), "subject": .string(subject), "state": .string(state.rawValue),
                "seq": .number(Double(seq)), "t": .string(Timestamp.format(t)),
            ]
            if let lastKnown { object["lastKnown"] = .string(lastKnown.rawValue) }
            return .object(object)
        }
    }

    /// Takes subjects over from their retained states (a partition moved here, docs/scale.md,
    /// "Handover"): each membership as its engine's `adopt` says
    /// (``GeofenceEngine/adopt(subject:region:state:seq:since:lastKnown:now:)``,
    /// ``BeaconEngine/adopt(subject:region:state:seq:since:lastKnown:now:)``), and occupancy and places
    /// from them. `now` is when they are taken over (a dwell due by then counts as fired).
    /// - Returns: the occupancy of every region whose count changed.
    public mutating func adopt(_ states: [AdoptedState], now: Date) -> [EvaluatorOutput] {
        var changed: Set<String> = []
        for item in states {
            guard let region = regions[item.region] else { continue }
            if region.isGeographic {
                geofences.adopt(
                    subject: item.subject, region: item.region, state: item.state, seq: item.seq, since: item.t,
                    lastKnown: item.lastKnown, now: now)
            } else {
                beacons.adopt(
                    subject: item.subject, region: item.region, state: item.state, seq: item.seq, since: item.t,
                    lastKnown: item.lastKnown, now: now)
            }
            let inside = item.state == .inside
            let moved =
                inside
                ? self.inside[item.region, default: []].insert(item.subject).inserted
                : self.inside[item.region]?.remove(item.subject) != nil
            if moved { changed.insert(item.region) }
            if region.isGeographic && Self.isPlace(region) {
                if inside {
                    gpsPlaces[item.subject, default: []].insert(item.region)
                } else {
                    gpsPlaces[item.subject]?.remove(item.region)
                }
            }
        }
        return changed.sorted().map { .occupancy(region: $0, count: inside[$0]?.count ?? 0, t: now) }
    }

    /// Whether a rejected message's payload and detailed reason may go on the dead-letter
    /// topic, which consumers may read: only when every subject the message could be about is
    /// one the privacy gate lets through. A refused subject's observation, one whose payload
    /// cannot be read but names a subject, and a registered gateway's scan (its tags are
    /// people) are reported without payload and values. Other topics (regions, privacy
    /// records) carry no location and show in full.
    public func deadLetterShowsDetail(route: InboundRoute, payload: [UInt8]) -> Bool {
        var subjects: [String] = []
        switch route {
        case .gps(_, let agent), .status(_, let agent): subjects = [agent]
        case .ble(_, let agent):
            if beacons.isGateway(agent) { return false }
            subjects = [agent]
        case .ownTracks(let user, let device): subjects = [InboundDecoder.ownTracksSubject(user: user, device: device)]
        case .espresense(let device, _):
            subjects = [InboundDecoder.espresenseBeacon(device)?.canonical ?? "espresense:\(device)"]
        default: return true
        }
        if let json = try? JSONParser.parse(payload) {
            if let named = json["subject"]?.stringValue { subjects.append(named) }
        } else if payload.count > 64 * 1024 || String(decoding: payload, as: UTF8.self).contains("subject") {
            return false
        }
        return subjects.allSatisfy { privacy.refusal(of: $0) == nil }
    }

    /// Everything the evaluator holds about a subject (`perimeter subjects show`).
    public func show(_ subject: String, at t: Date) -> EvaluatorOutput {
        var states = JSONObject()
        for id in regions.keys.sorted() {
            let state = state(subject: subject, region: id)
            if state != .unknown { states[id] = .string(state.rawValue) }
        }
        let sessions = privacy.sessionKeys(covering: subject)
        let document: JSONValue = [
            "subject": .string(subject), "t": .string(Timestamp.format(t)),
            "status": .string(privacy.status(of: subject).rawValue),
            "authorization": authorization[subject]?.value ?? .null, "usage": usage[subject]?.value ?? .null,
            "inUse": .bool(privacy.isInUse(subject, at: t)),
            "sessions": .array(sessions.declared.map(JSONValue.string)),
            "defaultSessionCovers": .bool(sessions.byDefault),
            "states": .object(states), "place": places[subject]?.payload ?? .null,
            "preferences": preferences[subject].map { preferences in
                [
                    "defaultPlace": preferences.defaultPlace.map(JSONValue.string) ?? .null,
                    "locale": preferences.locale.map(JSONValue.string) ?? .null,
                ]
            } ?? .null,
            "held": .array(privacy.heldEvents(of: subject).map(\.payload)),
            "diagnostics": privacy.diagnostics(of: subject, at: t),
            "visit": shownVisit(of: subject, at: t), "temporaryFullAccuracy": shownGrant(of: subject),
        ]
        return .shown(subject: subject, document)
    }

    /// The visit under way, as `subjects show` prints it: its arrival, centre and accuracy so
    /// far, and whether its arrival may be published now (``visitAllowed(_:at:)``); null when
    /// the subject is not in a visit.
    private func shownVisit(of subject: String, at t: Date) -> JSONValue {
        guard let visit = currentVisit(of: subject) else { return .null }
        return [
            "arrival": .string(Timestamp.format(visit.arrival)), "lat": .number(visit.centre.lat),
            "lon": .number(visit.centre.lon), "acc": .number((visit.accuracy * 10).rounded() / 10),
            "fixes": .number(Double(visit.fixes)), "published": .bool(visitAllowed(subject, at: t)),
        ]
    }

    /// The temporary full-accuracy grant in force: the session it was granted to, its purpose,
    /// and until when — the grant has no clock of its own; it ends with that session.
    private func shownGrant(of subject: String) -> JSONValue {
        guard let grant = privacy.temporaryFullAccuracyGrant(of: subject) else { return .null }
        return [
            "session": .string(grant.session), "purpose": .string(grant.purpose),
            // Not a time: it lasts while the session exists, covers the subject and asks for it.
            "until": "sessionEnd",
        ]
    }

    /// The drop of an observation the privacy gate refuses (counted; nothing is kept).
    private mutating func dropped(_ subject: String) -> EvaluatorOutput? {
        guard let reason = privacy.refusal(of: subject) else { return nil }
        privacy.noteDropped(reason)
        return .privacyDrop(subject: subject, reason: reason)
    }

    /// The first drop of a subject without an authorization record is not silent: its
    /// diagnostics (`authorizationRecordMissing`) and a line in the service's log. (Not for the
    /// tags a gateway hears: those are anyone's beacons, and each would leave a retained topic.)
    private mutating func toldUnrecorded(_ subject: String, at t: Date) -> [EvaluatorOutput] {
        guard let told = privacy.noteUnrecorded(subject, at: t) else { return [] }
        return [.unrecordedSubject(subject: subject, reason: privacy.refusal(of: subject) ?? "")] + apply(told, at: t)
    }

    /// What the privacy gate decided, as outputs. A subject it no longer allows is forgotten
    /// by the engines: its states read `unmonitored`, its place goes.
    private mutating func apply(_ gated: [PrivacyOutput], at t: Date) -> [EvaluatorOutput] {
        var outputs: [EvaluatorOutput] = []
        for output in gated {
            switch output {
            case .deliver(let event): outputs.append(.event(event))
            case .notifySelf(let event): outputs.append(.selfNotification(event))
            case .diagnostics(let subject, let value): outputs.append(.diagnostics(subject: subject, value))
            case .prompt(let subject): outputs.append(.prompt(subject: subject))
            case .fullAccuracyRequest(let subject, let session, let purpose):
                outputs.append(.fullAccuracyRequest(subject: subject, session: session, purpose: purpose))
            case .authorization(let subject, let record):
                authorization[subject] = JSONText(record.json)
                outputs.append(.authorization(subject: subject, record))
            case .unmonitor(let subject, let reason):
                var events = geofences.forget(subject: subject, at: t, reason: reason)
                events += beacons.forget(subject: subject, at: t, reason: reason)
                outputs += publish(events, gated: false)
                gpsPlaces[subject] = nil
                // What the location said is gone; the subject's default place, if any, stays.
                let had = places.removeValue(forKey: subject) != nil
                let replaced = updatePlace(of: subject, at: t)
                outputs += replaced.isEmpty && had ? [.place(subject: subject, nil, t: t)] : replaced
            }
        }
        return outputs
    }

    /// Whether events of a region need full accuracy: beacon regions, and regions smaller than
    /// the reduced-accuracy grid.
    private func isPrecise(_ regionID: String) -> Bool {
        guard let region = regions[regionID] else { return true }
        let grid = settings.privacy.reducedAccuracyMeters
        switch region.shape {
        case .beacon: return true
        case .circle(_, let radius): return 2 * radius < grid
        case .polygons(let polygons):
            let points = polygons.flatMap { $0.first ?? [] }
            guard let south = points.map(\.lat).min(), let north = points.map(\.lat).max(),
                let west = points.map(\.lon).min(), let east = points.map(\.lon).max()
            else { return true }
            return Geodesy.distance(GeoPoint(lon: west, lat: south), GeoPoint(lon: east, lat: north)) < grid
        }
    }

    /// Why an agent's observation is refused by the capabilities it announced: a fix needs
    /// `gps`, a BLE scan `ble-scan` (Core Location's `isMonitoringAvailable(for:)`).
    private func capabilityRefusal(of input: Inbound, agent: String?) -> InboundError? {
        guard let agent, let announced = capabilities[agent] else { return nil }
        let needed: String
        switch input {
        case .fix: needed = "gps"
        case .beacons, .tags: needed = "ble-scan"
        default: return nil
        }
        guard !announced.contains(needed) else { return nil }
        return InboundError(
            code: "capability",
            "agent '\(agent)' announced caps [\(announced.sorted().joined(separator: ", "))] on its status; this observation needs '\(needed)' (not used)"
        )
    }

    /// Subjects whose every observing agent announced capabilities without `ranging`
    /// (Core Location's `isRangingAvailable()` false): they get no ranging and no beacon place.
    private func unranged() -> Set<String> {
        var subjects: Set<String> = []
        for (agent, caps) in capabilities where !caps.contains("ranging") {
            for subject in observed[agent] ?? [] {
                let agents = observers[subject] ?? []
                if agents.allSatisfy({ capabilities[$0].map { !$0.contains("ranging") } ?? false }) {
                    subjects.insert(subject)
                }
            }
        }
        return subjects
    }

    /// An agent's last will (or offline status, or OwnTracks `lwt`): every subject whose
    /// observing agents are now all offline goes `unknown` at once (`agentOffline`), without an
    /// exit; a room place a gateway gave it goes too (nothing live says where it is).
    private mutating func agentWentOffline(_ agent: String, at t: Date) -> [EvaluatorOutput] {
        var outputs: [EvaluatorOutput] = []
        for subject in (observed[agent] ?? []).sorted() {
            guard let agents = observers[subject], agents.allSatisfy({ offline[$0] != nil }) else { continue }
            var events = geofences.markUnknown(subject: subject, at: t, reason: "agentOffline")
            events += beacons.markUnknown(subject: subject, at: t, reason: "agentOffline")
            outputs += publish(events.sortedForPublishing())
            if located.removeValue(forKey: subject) != nil { outputs += dropRoomPlace(of: subject, at: t) }
        }
        return outputs
    }

    /// Forgets a gateway's room place of a subject no longer heard; its default place, if any, answers.
    private mutating func dropRoomPlace(of subject: String, at t: Date) -> [EvaluatorOutput] {
        guard places[subject]?.source == .beacon else { return [] }
        places[subject] = nil
        let replaced = updatePlace(of: subject, at: t)
        return replaced.isEmpty ? [.place(subject: subject, nil, t: t)] : replaced
    }

    /// Room places of gateway-located subjects (ESPresense, BLE gateways) not heard for
    /// `staleAfter` expire, on the venue's clock.
    private mutating func expireRoomPlaces(now: Date) -> [EvaluatorOutput] {
        guard !located.isEmpty else { return [] }
        let limit = now.addingTimeInterval(-settings.geofence.staleAfter)
        let expired = located.filter { $0.value <= limit }.map(\.key).sorted()
        var outputs: [EvaluatorOutput] = []
        for subject in expired {
            located[subject] = nil
            outputs += dropRoomPlace(of: subject, at: now)
        }
        return outputs
    }

    /// Gateway-mode positions go to the geofences; rooms become places.
    private mutating func locate(_ locations: [TagLocation], by gateway: String) -> [EvaluatorOutput] {
        var outputs: [EvaluatorOutput] = []
        for location in locations {
            noteObserved(location.subject, by: gateway)
            located[location.subject] = max(located[location.subject] ?? location.t, location.t)
            if let fix = location.fix, case .success(let events) = geofences.process(fix) {
                outputs += publish(events)
            }
            let answer = PlaceAnswer(place: location.room, source: .beacon)
            if places[location.subject] != answer {
                places[location.subject] = answer
                if privacy.allows(location.subject, at: location.t, precise: true) {
                    outputs.append(.place(subject: location.subject, answer, t: location.t))
                }
            }
        }
        return outputs
    }

    private mutating func noteObserved(_ subject: String, by agent: String?) {
        guard let agent else { return }
        // An observation says its agent is running (OwnTracks apps send no online status after
        // their last will; their next location is the news).
        if offline[agent] != nil { offline[agent] = nil }
        if observers[subject, default: []].insert(agent) {
            observed[agent, default: []].insert(subject)
        }
    }

    // MARK: - Time

    /// Delays, dwells, exits and staleness that fall due by `now`, ranging reports, room places
    /// that expired. (A subject whose agents all went offline goes `unknown` when the last will
    /// arrives, not here.)
    public mutating func tick(now: Date) -> [EvaluatorOutput] {
        var outputs = publish(geofences.advance(to: now))
        outputs += publish(beacons.advance(to: now))
        var ranged: Set<String> = []
        var reports: [RangingReport] = []
        let unranged = capabilities.isEmpty ? [] : unranged()
        beacons.rangeDue(at: now, skipping: unranged) { report in
            reports.append(report)
            ranged.insert(report.subject)
        }
        outputs += reports.filter { privacy.allowsRanging($0.subject, at: $0.t) }.map(EvaluatorOutput.ranging)
        for subject in ranged.sorted() { outputs += updatePlace(of: subject, at: now) }
        outputs += expireRoomPlaces(now: now)
        outputs += apply(privacy.tick(now: now), at: now)
        outputs += tickLocationServices(now: now, after: outputs)
        if settings.homeAssistant != nil { outputs += followHomeAssistant(outputs, after: nil) }
        return Self.coalescingOccupancy(outputs)
    }

    // MARK: - Regions

    /// Adds or changes a region without a restart. A changed geographic region re-decides the
    /// subjects that have a state for it against their last fix (a shrink gives exits and the
    /// occupancy at once); a new one waits for each subject's next observation.
    /// A new region's occupancy is published at once (0, or whoever the evaluator already
    /// counts in it), so that a consumer sees 0 for a region nobody has entered, not nothing.
    public mutating func upsert(_ region: Region, at t: Date) -> [EvaluatorOutput] {
        var outputs: [EvaluatorOutput] = []
        if let old = regions[region.id], old.isGeographic != region.isGeographic {
            outputs = remove(regionID: region.id, at: t)
        }
        let isNew = regions[region.id] == nil
        let changed = regions[region.id] != region
        regions[region.id] = region
        if region.isGeographic { geofences.upsert(region) } else { beacons.upsert(region) }
        // A changed shape re-decides at once the subjects with a state for it, against their
        // last fix: a region shrunk away from someone gives the exit and occupancy now.
        if region.isGeographic && !isNew && changed {
            let events = geofences.reevaluate(regionID: region.id, at: t)
            outputs += publish(events)
            for subject in Set(events.map(\.subject)).sorted() { outputs += updatePlace(of: subject, at: t) }
        }
        if isNew { outputs.append(.occupancy(region: region.id, count: inside[region.id]?.count ?? 0, t: t)) }
        return Self.coalescingOccupancy(outputs + homeAssistantConfigs(of: region))
    }

    /// Removes a region: its subjects get `unmonitored` (not exit), its occupancy goes to 0.
    public mutating func remove(regionID: String, at t: Date) -> [EvaluatorOutput] {
        guard let removed = regions.removeValue(forKey: regionID) else { return [] }
        var outputs = homeAssistantRemoval(of: regionID)
        outputs += publish(geofences.remove(regionID: regionID, at: t))
        if removed.properties["owntracks"] != nil { outputs.append(.waypoint(region: regionID, nil)) }
        outputs += publish(beacons.remove(regionID: regionID, at: t))
        inside[regionID] = nil
        let counted = outputs.contains { output in
            if case .occupancy(regionID, _, _) = output { return true }
            return false
        }
        if !counted { outputs.append(.occupancy(region: regionID, count: 0, t: t)) }
        for subject in gpsPlaces.keys { gpsPlaces[subject]?.remove(regionID) }
        // Nobody's place may name a region that no longer exists.
        for (subject, answer) in places.sorted(by: { $0.key < $1.key }) where answer.place == regionID {
            places[subject] = nil
            let replaced = updatePlace(of: subject, at: t)
            outputs += replaced.isEmpty ? [.place(subject: subject, nil, t: t)] : replaced
        }
        return Self.coalescingOccupancy(outputs)
    }

    /// Whether two definitions of a region monitor the same way: whether the Feature carried its
    /// id, and the beacons' drawing positions (`properties.beacons`, which `perimeter up` adds
    /// from the venue file), do not count.
    static func sameDefinition(_ left: Region, _ right: Region) -> Bool {
        var left = left
        var right = right
        left.idInFeature = right.idInFeature
        left.properties["beacons"] = nil
        right.properties["beacons"] = nil
        return left == right
    }

    /// Why a `regions/{id}` message about a region of the regions file is refused: the file
    /// wins for the ids it defines (topics.md, "Regions file and topics").
    static func fileRegionRefusal(_ id: String, _ what: String) -> InboundError {
        InboundError(
            code: "region",
            "region '\(id)' is defined in the venue's regions file, which wins for its ids: not \(what) over MQTT (edit the file and send SIGHUP, or remove it from the file first)"
        )
    }

    /// Applies a (re-)read regions file (start, SIGHUP): changed and new regions are upserted,
    /// missing ones removed. The file wins for the ids it defines: they replace a region of the
    /// same id that came over MQTT, and MQTT messages about them are refused from then on.
    /// Regions that came from the retained topic under other ids are the caller's to keep.
    public mutating func reload(_ fileRegions: [Region], previous: Set<String>, at t: Date) -> [EvaluatorOutput] {
        var outputs: [EvaluatorOutput] = []
        let ids = Set(fileRegions.map(\.id))
        fileRegionIDs = ids
        for id in previous.subtracting(ids).sorted() { outputs += remove(regionID: id, at: t) }
        for region in fileRegions where regions[region.id] != region { outputs += upsert(region, at: t) }
        return Self.coalescingOccupancy(outputs)
    }

    // MARK: - Outputs

    /// Events with what they imply: occupancy changes and the OwnTracks adapter's transitions.
    private mutating func publish(_ events: [RegionEvent], gated: Bool = true) -> [EvaluatorOutput] {
        var outputs: [EvaluatorOutput] = []
        for var event in events {
            if event.reason == "stale", let agents = observers[event.subject], !agents.isEmpty,
                agents.allSatisfy({ offline[$0] != nil })
            {
                event.reason = "agentOffline"
            }
            if gated {
                outputs += apply(privacy.gate(event, precise: isPrecise(event.region)), at: event.t)
            } else {
                outputs.append(.event(event))
            }
            switch event.kind {
            case .state:
                let now = event.state == .inside
                let changed =
                    now
                    ? inside[event.region, default: []].insert(event.subject).inserted
                    : inside[event.region]?.remove(event.subject) != nil
                if changed {
                    outputs.append(
                        .occupancy(region: event.region, count: inside[event.region]?.count ?? 0, t: event.t))
                }
                if let region = regions[event.region], region.isGeographic, Self.isPlace(region) {
                    if now {
                        gpsPlaces[event.subject, default: []].insert(event.region)
                    } else {
                        gpsPlaces[event.subject]?.remove(event.region)
                    }
                }
            case .enter, .exit:
                if let transition = ownTracksTransition(event) { outputs.append(transition) }
            case .dwell:
                break
            }
        }
        return outputs
    }

    /// A geographic region is a place when its properties say so (`"place": true`); every
    /// beacon region is one.
    static func isPlace(_ region: Region) -> Bool {
        if !region.isGeographic { return true }
        switch region.properties["place"] {
        case .bool(true)?, .string?: return true
        default: return false
        }
    }

    /// The Caffè Macs rule for one subject; an output when its place changed.
    private mutating func updatePlace(of subject: String, at t: Date) -> [EvaluatorOutput] {
        let nearest = beacons.closestBeacon(of: subject).map {
            NearestBeacon(place: $0.region, proximity: $0.beacon.proximity)
        }
        // Where the gate keeps the subject's location from deciding (denied, not in use), the
        // place is the subject's own choice: it says nothing about where the person is.
        let evidence = PlaceEvidence(
            nearestBeacon: nearest, beaconsLive: nearest != nil, gpsPlace: gpsPlaces[subject]?.sorted().first,
            defaultPlace: preferences[subject]?.defaultPlace, authorized: privacy.allows(subject, at: t, precise: false)
        )
        let answer = PlaceRule.resolve(previous: places[subject], evidence: evidence)
        guard answer != places[subject] else { return [] }
        places[subject] = answer
        let ownChoice = answer == nil || answer?.source == .default
        guard ownChoice || privacy.allows(subject, at: t, precise: answer?.source == .beacon) else { return [] }
        return [.place(subject: subject, answer, t: t)]
    }

    /// `owntracks/{user}/{device}/event` for subjects the OwnTracks adapter named.
    private func ownTracksTransition(_ event: RegionEvent) -> EvaluatorOutput? {
        guard let (user, device) = InboundDecoder.ownTracksDevice(of: event.subject), let region = regions[event.region]
        else { return nil }
        let waypoint = region.properties["owntracks"]?.objectValue
        var payload = JSONObject()
        payload["_type"] = "transition"
        payload["event"] = .string(event.kind == .enter ? "enter" : "leave")
        payload["rid"] = .string(waypoint?["rid"]?.stringValue ?? region.id)
        payload["desc"] = .string(region.name ?? region.id)
        switch region.shape {
        case .beacon: payload["t"] = "b"
        case .circle, .polygons: payload["t"] = "c"
        }
        payload["tst"] = .number(event.t.timeIntervalSince1970.rounded(.down))
        payload["wtst"] = waypoint?["tst"] ?? .number(0)
        if let fix = event.fix {
            payload["acc"] = .number(fix.accuracy ?? 0)
            payload["lat"] = .number(fix.position.lat)
            payload["lon"] = .number(fix.position.lon)
        }
        return .ownTracksTransition(user: user, device: device, payload: .object(payload))
    }
}
