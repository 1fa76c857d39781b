import Foundation

/// Tunables of the beacon half of the evaluator, per venue.
public struct BeaconParameters: Sendable, Hashable {
    /// Venue name, part of every event id.
    public var venue: String
    /// The SHA-256 event ids are made with.
    public var idHasher = EventIDHasher()
    /// A subject stays inside a beacon region while a matching beacon was heard this recently
    /// (Core Location: 30 s).
    public var beaconExitTimeout: TimeInterval
    /// When true (the default), an exit needs evidence: a report about the subject at or after
    /// the timeout that does not hear the region (scanners publish reports, empty ones too,
    /// while they scan). A subject that falls silent goes `unknown` after `staleAfter` instead.
    /// When false, the timeout alone exits.
    public var exitNeedsObservation: Bool
    /// With no report about a subject for this long, its states become `unknown`.
    public var staleAfter: TimeInterval
    public var smoothing: RSSISmoothing
    public var distanceModel: DistanceModel
    public var calibration: BeaconCalibration
    /// Ranging reports for a subject come about this often: a report is due once this much
    /// time, less a tenth of it (the jitter of the ticks that ask), has passed since the last.
    public var rangingInterval: TimeInterval
    /// Gateway mode: how far back the sightings of a tag count for its position.
    public var centroidWindow: TimeInterval

    public init(
        venue: String = "default", beaconExitTimeout: TimeInterval = 30, exitNeedsObservation: Bool = true,
        staleAfter: TimeInterval = 300, smoothing: RSSISmoothing = .sinceLastReport,
        distanceModel: DistanceModel = .logDistance(exponent: 2), calibration: BeaconCalibration = BeaconCalibration(),
        rangingInterval: TimeInterval = 1, centroidWindow: TimeInterval = 10
    ) {
        self.venue = venue
        self.beaconExitTimeout = beaconExitTimeout
        self.exitNeedsObservation = exitNeedsObservation
        self.staleAfter = staleAfter
        self.smoothing = smoothing
        self.distanceModel = distanceModel
        self.calibration = calibration
        self.rangingInterval = rangingInterval
        self.centroidWindow = centroidWindow
    }
}

/// One beacon heard once.
public struct BeaconSighting: Sendable, Hashable {
    public var identity: BeaconIdentity
    /// dBm as the receiver reported it (before its calibration).
    public var rssi: Double
    /// Expected RSSI at 1 m from the advert, when it carried one.
    public var tx1m: Double?

    public init(identity: BeaconIdentity, rssi: Double, tx1m: Double? = nil) {
        self.identity = identity
        self.rssi = rssi
        self.tx1m = tx1m
    }
}

/// What one agent heard in one scan: one `obs/{agent}/ble` message. An empty list is a report
/// too (the scanner was listening and heard nothing), and is what lets an exit be confirmed.
public struct BeaconReport: Sendable, Hashable {
    public var agent: String
    /// Scanner mode: whose scan this is (default: the agent). Ignored for registered gateways,
    /// whose sightings are each about the tag heard.
    public var subject: String?
    public var t: Date
    public var sightings: [BeaconSighting]

    public init(agent: String, subject: String? = nil, t: Date, sightings: [BeaconSighting]) {
        self.agent = agent
        self.subject = subject
        self.t = t
        self.sightings = sightings
    }
}

/// Why a beacon report was not used.
public enum BeaconRejection: Error, Sendable, Hashable, CustomStringConvertible {
    case emptySubject
    case rssiNotFinite(BeaconIdentity)
    case rssiOutOfRange(Double)
    case outOfOrder(t: Date, last: Date)

    public var description: String {
        switch self {
        case .emptySubject: "the subject is empty"
        case .rssiNotFinite(let identity): "rssi of \(identity.canonical) is not a finite number"
        case .rssiOutOfRange(let value): "rssi \(value) dBm out of range [-127, 20]"
        case .outOfOrder(let t, let last):
            "out of order: t \(Timestamp.format(t)) is older than the last report processed (\(Timestamp.format(last)))"
        }
    }

    public var code: String {
        switch self {
        case .emptySubject: "emptySubject"
        case .rssiNotFinite: "rssiNotFinite"
        case .rssiOutOfRange: "rssiOutOfRange"
        case .outOfOrder: "outOfOrder"
        }
    }
}

/// One beacon in a ranging report (CLBeacon).
public struct RangedBeacon: Sendable, Hashable, Codable {
    public var identity: BeaconIdentity
    public var proximity: Proximity
    /// Estimated metres; −1 when unknown.
    public var accuracy: Double
    /// Smoothed, calibrated dBm; 0 when unknown (as CLBeacon).
    public var rssi: Double
    public var lastSeen: Date

    public var json: JSONValue {
        var object = identity.json
        object["proximity"] = .string(proximity.rawValue)
        object["accuracy"] = .number(accuracy < 0 ? -1 : (accuracy * 100).rounded() / 100)
        object["rssi"] = .number((rssi * 10).rounded() / 10)
        object["lastSeen"] = .string(Timestamp.format(lastSeen))
        return .object(object)
    }
}

/// The beacons of one beacon region a subject hears, nearest first (unknown last).
public struct RangingReport: Sendable, Hashable {
    public var region: String
    public var subject: String
    public var t: Date
    public var beacons: [RangedBeacon]

    public var payload: JSONValue {
        [
            "t": .string(Timestamp.format(t)), "region": .string(region), "subject": .string(subject),
            "beacons": .array(beacons.map(\.json)),
        ]
    }
}

/// What one report changed.
public struct BeaconUpdate: Sendable {
    /// Beacon-region states and transitions, in event-time order per subject.
    public var events: [RegionEvent] = []
    /// Gateway mode: where every tag the report heard is now.
    public var locations: [TagLocation] = []
}

/// The beacon half of the evaluator: beacon-region state per (subject, region) on the same state
/// model and event shape as geofences, ranging, and gateway-mode tag positions.
///
/// Pure: no I/O and no clock; time comes from reports and ``advance(to:)``.
///
/// - **Scanner mode** (a phone hears fixed beacons; the subject is the phone): a subject is
///   inside a beacon region while a matching beacon, at or above the region's `minRssi`, was
///   heard within `beaconExitTimeout`; the exit is dated when that timeout ran out. The
///   `refinement` of an event is the beacon behind it; the region's state keeps the strongest.
/// - **Gateway mode** (registered gateways hear tags; each tag is a subject named by its
///   canonical identity): a tag's position is the RSSI-weighted centroid (weights in linear
///   power, `10^(rssi/10)`) of the gateways that heard it within `centroidWindow`, and its room
///   is the strongest gateway's zone.
public struct BeaconEngine: Sendable {
    public let parameters: BeaconParameters
    public private(set) var matcher: BeaconMatcher
    /// Gateway mode: registered gateways and the tags they hear.
    public private(set) var locator: GatewayLocator
    private var scanners: [ScannerSubject] = []
    private var scannerByID: [String: Int] = [:]
    /// Bumped when regions change, so that cached matches are recomputed.
    private var generation = 0
    /// Sequence numbers of removed regions' memberships (region → subject → seq): a region
    /// removed and added again never reuses an event id.
    private var retired: [String: [String: Int]] = [:]
    /// How many subjects were erased: memberships begun since carry it in their ids.
    private var erasures = 0
    /// Scanner subjects taken over from their retained states and not reported since, with
    /// when: their staleness counts from then, not from their states' time (their old holder
    /// had not marked them stale, so it had heard from them more recently than that).
    private var adoptedAt: [String: Double] = [:]

    struct HeardBeacon: Sendable, Codable {
        var identity: BeaconIdentity
        var slots: [Int32]
        var generation: Int
        var lastSeen: Double
        var tx1m: Double?
        var samples = RSSISamples()
    }

    struct RegionState: Sendable, Codable {
        var slot: Int32
        var membership = Membership()
        /// Last time a qualifying sighting was heard; ``sinceAdoption`` until the first report
        /// after a handover.
        var lastMatch = -Double.infinity
        /// An adopted `inside` whose last sighting is not known: the next report's time is
        /// taken for it (never earlier than the old holder's, so no exit falls due sooner).
        static let sinceAdoption = Double.infinity
        /// The strongest matching beacon of the current stay, with its rssi.
        var strongest: BeaconIdentity?
        var strongestRSSI = -Double.infinity
        var strongestAt = -Double.infinity

        /// A qualifying sighting: keeps the strongest beacon of the stay current.
        mutating func heard(_ identity: BeaconIdentity, rssi: Double, at t: Double, timeout: Double) {
            if strongest == nil || strongest == identity || rssi >= strongestRSSI || strongestAt + timeout < t {
                strongest = identity
                strongestRSSI = rssi
                strongestAt = t
            }
            lastMatch = t
        }
    }

    struct ScannerSubject: Sendable, Codable {
        var id: String
        var beacons: [HeardBeacon] = []
        var regions: [RegionState] = []
        var lastReport = -Double.infinity
        var lastRanging = -Double.infinity
        var stale = false
        var closest: Closest?

        struct Closest: Sendable, Codable {
            var region: Int32
            var beacon: RangedBeacon
        }
    }

    public init(regions: [Region], gateways: [Gateway] = [], parameters: BeaconParameters = BeaconParameters()) {
        self.parameters = parameters
        matcher = BeaconMatcher(regions)
        locator = GatewayLocator(gateways: gateways, parameters: parameters)
    }

    /// Adds or moves a gateway.
    public mutating func register(_ gateway: Gateway) { locator.register(gateway) }

    /// Everything a restart needs: the regions by slot, every scanner subject, the gateways and
    /// tags, the retired sequence numbers.
    public struct Snapshot: Sendable, Codable {
        var regions: [Region?]
        var scanners: [ScannerSubject]
        var generation: Int
        var retired: [String: [String: Int]]
        var locator: GatewayLocator.Snapshot
        /// Absent from snapshots written before erasure epochs.
        var erasures: Int? = nil
        /// Absent from snapshots written before beacon handovers.
        var adoptedAt: [String: Double]? = nil
    }

    public var snapshot: Snapshot {
        Snapshot(
            regions: matcher.slotted, scanners: scanners, generation: generation, retired: retired,
            locator: locator.snapshot, erasures: erasures, adoptedAt: adoptedAt)
    }

    /// An engine exactly where the snapshotted one stood.
    public init(restoring snapshot: Snapshot, parameters: BeaconParameters) {
        self.parameters = parameters
        matcher = BeaconMatcher(slotted: snapshot.regions)
        scanners = snapshot.scanners
        for (index, scanner) in scanners.enumerated() { scannerByID[scanner.id] = index }
        generation = snapshot.generation
        retired = snapshot.retired
        erasures = snapshot.erasures ?? 0
        adoptedAt = snapshot.adoptedAt ?? [:]
        locator = GatewayLocator(restoring: snapshot.locator, parameters: parameters)
    }

    public func isGateway(_ agent: String) -> Bool { locator.isGateway(agent) }

    /// Gateway-mode sightings already named by tag (adapters such as ESPresense).
    public mutating func process(tags report: TagReport) -> Result<[TagLocation], BeaconRejection> {
        for sighting in report.sightings {
            if !sighting.rssi.isFinite || sighting.rssi < -127 || sighting.rssi > 20 {
                return .failure(.rssiOutOfRange(sighting.rssi))
            }
            if sighting.subject.isEmpty { return .failure(.emptySubject) }
        }
        return .success(locator.process(report))
    }

    /// Subjects tracked in scanner mode, and tags in gateway mode.
    public var subjectCount: Int { scanners.count }
    public var tagCount: Int { locator.tagCount }

    /// Gateway-mode tags heard (their subjects), in no particular order.
    public var tagSubjects: [String] { locator.tagSubjects }

    /// Forgets a gateway-mode tag's sightings (its partition moved to another evaluator: a
    /// centroid made later of old sightings and the next holder's would be neither's).
    public mutating func forget(tag subject: String) { locator.forget(tag: subject) }

    /// The confirmed state of `subject` for beacon region `region`.
    public func state(subject: String, region: String) -> MembershipState {
        guard let index = scannerByID[subject], let slot = matcher.slot(of: region),
            let state = scanners[index].regions.first(where: { $0.slot == Int32(slot) })
        else { return .unknown }
        return state.membership.state
    }

    // MARK: - Reports

    /// Checks a report without using it.
    public func validate(_ report: BeaconReport) -> BeaconRejection? {
        validate(report, gateway: gateway(of: report.agent), scanner: scannerIndex(of: report))
    }

    private func validate(_ report: BeaconReport, gateway: Int?, scanner: Int?) -> BeaconRejection? {
        for sighting in report.sightings {
            if !sighting.rssi.isFinite { return .rssiNotFinite(sighting.identity) }
            if sighting.rssi < -127 || sighting.rssi > 20 { return .rssiOutOfRange(sighting.rssi) }
        }
        if gateway != nil { return nil }
        if (report.subject ?? report.agent).isEmpty { return .emptySubject }
        if let scanner, report.t.timeIntervalSinceReferenceDate < scanners[scanner].lastReport {
            return .outOfOrder(t: report.t, last: Date(timeIntervalSinceReferenceDate: scanners[scanner].lastReport))
        }
        return nil
    }

    private func gateway(of agent: String) -> Int? { locator.index(of: agent) }

    private func scannerIndex(of report: BeaconReport) -> Int? { scannerByID[report.subject ?? report.agent] }

    /// Runs one report: beacon-region transitions for a scanner, positions for a gateway's tags.
    public mutating func process(_ report: BeaconReport) -> Result<BeaconUpdate, BeaconRejection> {
        let gateway = gateway(of: report.agent)
        let scanner = gateway == nil ? scannerIndex(of: report) : nil
        if let rejection = validate(report, gateway: gateway, scanner: scanner) { return .failure(rejection) }
        if gateway != nil {
            let tags = TagReport(
                gateway: report.agent, t: report.t,
                sightings: report.sightings.map {
                    TagSighting(subject: $0.identity.canonical, identity: $0.identity, rssi: $0.rssi, tx1m: $0.tx1m)
                })
            return .success(BeaconUpdate(locations: locator.process(tags)))
        }
        return .success(BeaconUpdate(events: processScanner(report, index: scanner)))
    }

    private mutating func processScanner(_ report: BeaconReport, index known: Int?) -> [RegionEvent] {
        let subject = report.subject ?? report.agent
        let index: Int
        if let existing = known {
            index = existing
        } else {
            index = scanners.count
            scannerByID[subject] = index
            scanners.append(ScannerSubject(id: subject))
        }
        let t = report.t.timeIntervalSinceReferenceDate
        let timeout = parameters.beaconExitTimeout
        var events: [RegionEvent] = []
        scanners[index].lastReport = t
        scanners[index].stale = false
        if !adoptedAt.isEmpty { adoptedAt[subject] = nil }
        for stateIndex in scanners[index].regions.indices
        where scanners[index].regions[stateIndex].lastMatch == RegionState.sinceAdoption {
            scanners[index].regions[stateIndex].lastMatch = t
        }
        for sighting in report.sightings {
            let rssi = parameters.calibration.adjusted(rssi: sighting.rssi, agent: report.agent)
            let beacon = heard(sighting, rssi: rssi, at: t, subject: index)
            for slotNumber in scanners[index].beacons[beacon].slots.indices {
                let slot = scanners[index].beacons[beacon].slots[slotNumber]
                guard rssi >= matcher.rssiFloors[Int(slot)] else { continue }
                let stateIndex = regionState(slot, subject: index)
                let firstThisReport = scanners[index].regions[stateIndex].lastMatch != t
                scanners[index].regions[stateIndex].heard(sighting.identity, rssi: rssi, at: t, timeout: timeout)
                // Already inside with nothing pending: nothing to decide.
                guard firstThisReport, !scanners[index].regions[stateIndex].membership.isSettledInside else { continue }
                events += scanners[index].regions[stateIndex].membership.observe(
                    .inside, at: report.t, evidence: Evidence(source: "ble", refinement: sighting.identity),
                    context(slot: slot, subject: subject))
            }
        }
        events += settle(subject: index, observedUntil: t, now: t)
        return events.isEmpty ? events : events.sortedForPublishing()
    }

    private func context(slot: Int32, subject: String) -> MembershipContext {
        MembershipContext(
            venue: parameters.venue, region: matcher.regions[Int(slot)]!.region, subject: subject,
            hasher: parameters.idHasher)
    }

    /// Finds or adds the beacon in the subject's list, and records the sample.
    private mutating func heard(_ sighting: BeaconSighting, rssi: Double, at t: Double, subject: Int) -> Int {
        var position = -1
        for candidate in scanners[subject].beacons.indices
        where scanners[subject].beacons[candidate].identity == sighting.identity {
            position = candidate
            break
        }
        if position < 0 {
            position = scanners[subject].beacons.count
            scanners[subject].beacons.append(
                HeardBeacon(
                    identity: sighting.identity, slots: slots(for: sighting.identity), generation: generation,
                    lastSeen: t))
        } else if scanners[subject].beacons[position].generation != generation {
            scanners[subject].beacons[position].slots = slots(for: sighting.identity)
            scanners[subject].beacons[position].generation = generation
        }
        scanners[subject].beacons[position].lastSeen = t
        if let tx1m = sighting.tx1m { scanners[subject].beacons[position].tx1m = tx1m }
        scanners[subject].beacons[position].samples.add(rssi, at: t, smoothing: parameters.smoothing)
        return position
    }

    private func slots(for identity: BeaconIdentity) -> [Int32] {
        var result: [Int32] = []
        matcher.forEachMatch(identity) { result.append(Int32($0)) }
        return result
    }

    private mutating func regionState(_ slot: Int32, subject: Int) -> Int {
        if let found = scanners[subject].regions.firstIndex(where: { $0.slot == slot }) { return found }
        var state = RegionState(slot: slot)
        let seq = matcher.regionID(slot: Int(slot)).flatMap { retired[$0]?[scanners[subject].id] } ?? 0
        state.membership = Membership(seq: seq, epoch: erasures)
        scanners[subject].regions.append(state)
        return scanners[subject].regions.count - 1
    }

    /// Exits whose timeout ran out by `observedUntil` (the latest evidence about the subject),
    /// and delays and dwells that fall due by `now`. Regions heard at `now` are not exited.
    private mutating func settle(subject index: Int, observedUntil: Double, now: Double) -> [RegionEvent] {
        var events: [RegionEvent] = []
        let subject = scanners[index].id
        let timeout = parameters.beaconExitTimeout
        for stateIndex in scanners[index].regions.indices {
            let slot = scanners[index].regions[stateIndex].slot
            let lastMatch = scanners[index].regions[stateIndex].lastMatch
            let expiry = lastMatch + timeout
            let exits =
                lastMatch != now && expiry <= observedUntil
                && (scanners[index].regions[stateIndex].membership.heading == .inside
                    || scanners[index].regions[stateIndex].membership.state == .inside)
            let timer = scanners[index].regions[stateIndex].membership.awaitsTimer(
                hasDwell: matcher.hasDwell[Int(slot)])
            guard exits || timer, matcher.regions[Int(slot)] != nil else { continue }
            let context = context(slot: slot, subject: subject)
            if exits {
                let at = Date(timeIntervalSinceReferenceDate: expiry)
                let strongest = scanners[index].regions[stateIndex].strongest
                events += scanners[index].regions[stateIndex].membership.confirmDue(by: at, context)
                events += scanners[index].regions[stateIndex].membership.observe(
                    .outside, at: at, evidence: Evidence(source: "ble", refinement: strongest), context)
                scanners[index].regions[stateIndex].strongest = nil
                scanners[index].regions[stateIndex].strongestRSSI = -.infinity
            }
            events += scanners[index].regions[stateIndex].membership.confirmDue(
                by: Date(timeIntervalSinceReferenceDate: now), context)
        }
        return events
    }

    // MARK: - Time

    /// Confirms exits, delays and dwells that fall due by `now` and moves subjects with no
    /// report for `staleAfter` to `unknown`. Call it periodically.
    public mutating func advance(to now: Date) -> [RegionEvent] {
        let time = now.timeIntervalSinceReferenceDate
        var events: [RegionEvent] = []
        for index in scanners.indices.sorted(by: { scanners[$0].id < scanners[$1].id }) {
            let subject = scanners[index]
            guard !subject.regions.isEmpty else { continue }
            let adopted = adoptedAt.isEmpty ? nil : adoptedAt[subject.id]
            let staleAt = max(subject.lastReport, adopted ?? -.infinity) + parameters.staleAfter
            let horizon = min(time, staleAt)
            let observed = parameters.exitNeedsObservation ? min(subject.lastReport, horizon) : horizon
            var subjectEvents = settle(subject: index, observedUntil: observed, now: horizon)
            if staleAt <= time, !subject.stale {
                scanners[index].stale = true
                subjectEvents += markUnknown(
                    index: index, at: Date(timeIntervalSinceReferenceDate: staleAt), reason: "stale")
            }
            events += subjectEvents.sortedForPublishing()
        }
        return events
    }

    /// Moves every beacon-region state of `subject` to unknown (its agent went offline). No
    /// exit is invented; the next report decides.
    public mutating func markUnknown(subject: String, at t: Date, reason: String) -> [RegionEvent] {
        guard let index = scannerByID[subject] else { return [] }
        return markUnknown(index: index, at: t, reason: reason)
    }

    /// Forgets a subject: its beacons and states go (each state reads `unmonitored`); its
    /// sequence numbers are kept, so ids are never reused.
    /// Scanner subjects whose last report is dated after `t`, sorted.
    public func subjects(reportedAfter t: Date) -> [String] {
        let time = t.timeIntervalSinceReferenceDate
        return scanners.filter { $0.lastReport > time }.map(\.id).sorted()
    }

    /// Forgets `subject` (``forget(subject:at:reason:)``) and its report times, so that its
    /// next report is not refused as out of order behind a time that lay in the future.
    public mutating func reset(subject: String, at t: Date, reason: String) -> [RegionEvent] {
        let events = forget(subject: subject, at: t, reason: reason)
        if let index = scannerByID[subject] {
            scanners[index].lastReport = -Double.infinity
            scanners[index].lastRanging = -Double.infinity
        }
        return events
    }

    /// Erases a subject: its scanner entry goes entirely (reports, ranging times, beacons), and
    /// every sequence number it had; the next memberships anyone begins carry the new erasure
    /// count in their ids. Gateway-mode tags named by it go too.
    public mutating func erase(subject: String, at t: Date) -> [RegionEvent] {
        let events = forget(subject: subject, at: t, reason: "erased")
        if let index = scannerByID.removeValue(forKey: subject) {
            scanners.remove(at: index)
            for (position, scanner) in scanners.enumerated() where position >= index {
                scannerByID[scanner.id] = position
            }
        }
        for region in retired.keys.sorted() {
            retired[region]?[subject] = nil
            if retired[region]?.isEmpty == true { retired[region] = nil }
        }
        locator.forget(tag: subject)
        erasures += 1
        return events
    }

    public mutating func forget(subject: String, at t: Date, reason: String) -> [RegionEvent] {
        adoptedAt[subject] = nil
        guard let index = scannerByID[subject] else { return [] }
        var events: [RegionEvent] = []
        for state in scanners[index].regions {
            guard let id = matcher.regionID(slot: Int(state.slot)) else { continue }
            retired[id, default: [:]][subject] = state.membership.seq
            events.append(
                .state(
                    region: id, subject: subject, state: .unmonitored, at: t, reason: reason,
                    seq: state.membership.seq))
        }
        scanners[index].regions = []
        scanners[index].beacons = []
        scanners[index].closest = nil
        return events.sorted { $0.region < $1.region }
    }

    private mutating func markUnknown(index: Int, at t: Date, reason: String) -> [RegionEvent] {
        var events: [RegionEvent] = []
        let subject = scanners[index].id
        for stateIndex in scanners[index].regions.indices {
            let slot = Int(scanners[index].regions[stateIndex].slot)
            guard let region = matcher.regions[slot] else { continue }
            let context = MembershipContext(
                venue: parameters.venue, region: region.region, subject: subject, hasher: parameters.idHasher)
            if let event = scanners[index].regions[stateIndex].membership.makeUnknown(at: t, reason: reason, context) {
                events.append(event)
            }
        }
        return events.sorted { $0.region < $1.region }
    }

    // MARK: - Handover

    /// Takes a scanner subject's membership of a beacon region over as another evaluator left
    /// it, from its retained `state` (docs/scale.md, "Handover"), as
    /// ``GeofenceEngine/adopt(subject:region:state:seq:since:lastKnown:now:)`` does for
    /// geographic regions: the state, the transitions counted so far (the next one has the id
    /// the other would have given it), when the stay began (a dwell counts as fired when it was
    /// due by `now`), an `unknown` state's `lastKnown` (the stay goes on); the state's `t` becomes the subject's last report time (older reports replayed
    /// after it are refused as out of order: the state covers them). Publishes nothing. An
    /// unknown region, or an `unmonitored` state, is ignored.
    ///
    /// The last sighting is not in the retained picture: an adopted `inside` counts as heard at
    /// the subject's next report (``RegionState/sinceAdoption``). Reports are processed in the
    /// order they were stored, older ones refused, so the old holder's last sighting was no
    /// later than that: the exit timeout never runs out before it would have on the old holder,
    /// and no exit is invented. One that was due before that report comes `beaconExitTimeout`
    /// after it instead, with the same id. The subject goes stale `staleAfter` after `now` at the
    /// earliest (its old holder had not marked it so).
    public mutating func adopt(
        subject: String, region id: String, state: MembershipState, seq: Int, since t: Date,
        lastKnown: MembershipState? = nil, now: Date
    ) {
        guard state != .unmonitored, let slot = matcher.slot(of: id), let region = matcher.regions[slot]?.region
        else { return }
        let index: Int
        if let existing = scannerByID[subject] {
            index = existing
        } else {
            index = scanners.count
            scannerByID[subject] = index
            scanners.append(ScannerSubject(id: subject))
        }
        var adopted = RegionState(slot: Int32(slot))
        adopted.membership = Membership(seq: max(seq, retired[id]?[subject] ?? 0), epoch: erasures)
        adopted.membership.state = state
        adopted.membership.lastKnown = state == .unknown ? lastKnown : state
        if state == .inside {
            adopted.membership.enteredAt = t
            adopted.membership.insideSince = t
            adopted.membership.dwellFired = region.dwellAfter.map { t.addingTimeInterval($0) <= now } ?? false
            adopted.lastMatch = RegionState.sinceAdoption
        } else if state == .unknown && lastKnown == .inside {
            // When the stay began is not retained: no dwell is made for it (none invented).
            adopted.membership.dwellFired = true
        }
        if let existing = scanners[index].regions.firstIndex(where: { $0.slot == Int32(slot) }) {
            scanners[index].regions[existing] = adopted
        } else {
            scanners[index].regions.append(adopted)
        }
        scanners[index].lastReport = max(scanners[index].lastReport, t.timeIntervalSinceReferenceDate)
        scanners[index].stale = false
        let taken = now.timeIntervalSinceReferenceDate
        adoptedAt[subject] = max(adoptedAt[subject] ?? taken, taken)
    }

    // MARK: - Ranging

    /// Ranging reports due at `now`: for every subject inside a beacon region whose last report
    /// is about `rangingInterval` old and whose scanner sent a scan within five intervals, one
    /// report per region it is inside, listing the
    /// region's beacons heard within `beaconExitTimeout`, nearest first, unknown last. Taking a
    /// report starts the next "since the last report" window.
    public mutating func ranging(at now: Date) -> [RangingReport] {
        var reports: [RangingReport] = []
        rangeDue(at: now) { reports.append($0) }
        return reports
    }

    /// ``ranging(at:)`` without collecting: `body` gets each report.
    /// - Parameter skipping: subjects that get no ranging (their agents cannot range).
    public mutating func rangeDue(at now: Date, skipping: Set<String> = [], _ body: (RangingReport) -> Void) {
        let time = now.timeIntervalSinceReferenceDate
        for index in scanners.indices {
            // The ticks asking are about an interval apart, never exactly: with no tolerance,
            // every tick a little under a second after the last report skipped a whole second.
            guard time - scanners[index].lastRanging >= parameters.rangingInterval * 0.9,
                // A scanner silent this long is not ranging: no more empty reports every second.
                time - scanners[index].lastReport <= Self.silentAfter(parameters.rangingInterval),
                skipping.isEmpty || !skipping.contains(scanners[index].id),
                scanners[index].regions.contains(where: { $0.membership.state == .inside })
            else { continue }
            rangeSubject(index, at: time, body)
        }
    }

    /// How long a scanner may send no scan and still be ranged: five ranging intervals.
    static func silentAfter(_ rangingInterval: TimeInterval) -> TimeInterval { 5 * rangingInterval }

    private mutating func rangeSubject(_ index: Int, at time: Double, _ body: (RangingReport) -> Void) {
        let now = Date(timeIntervalSinceReferenceDate: time)
        let cutoff = time - parameters.beaconExitTimeout
        // Forget beacons no longer heard; measure the rest once for every region.
        let keep = max(parameters.beaconExitTimeout, parameters.smoothing.window ?? 0)
        scanners[index].beacons.removeAll { $0.lastSeen < time - keep }
        var ranged: [(beacon: RangedBeacon, index: Int)] = []
        for beaconIndex in scanners[index].beacons.indices
        where scanners[index].beacons[beaconIndex].lastSeen >= cutoff {
            let identity = scanners[index].beacons[beaconIndex].identity
            let lastSeen = scanners[index].beacons[beaconIndex].lastSeen
            let rssi = scanners[index].beacons[beaconIndex].samples.value(at: time, smoothing: parameters.smoothing)
            let tx1m = parameters.calibration.tx1m(
                for: identity, advertised: scanners[index].beacons[beaconIndex].tx1m)
            let accuracy = rssi.map { parameters.distanceModel.distance(rssi: $0, tx1m: tx1m) } ?? -1
            let beacon = RangedBeacon(
                identity: identity, proximity: Proximity(accuracy: accuracy), accuracy: accuracy, rssi: rssi ?? 0,
                lastSeen: Date(timeIntervalSinceReferenceDate: lastSeen))
            ranged.append((beacon, beaconIndex))
        }
        for beaconIndex in scanners[index].beacons.indices {
            scanners[index].beacons[beaconIndex].samples.reportTaken()
        }
        ranged.sort { Self.nearerFirst($0.beacon, $1.beacon) }
        scanners[index].lastRanging = time
        var closest: (region: Int32, beacon: RangedBeacon)?
        let subject = scanners[index].id
        for stateIndex in scanners[index].regions.indices
        where scanners[index].regions[stateIndex].membership.state == .inside {
            let slot = scanners[index].regions[stateIndex].slot
            guard let regionID = matcher.regionID(slot: Int(slot)) else { continue }
            var beacons: [RangedBeacon] = []
            for entry in ranged where scanners[index].beacons[entry.index].slots.contains(slot) {
                beacons.append(entry.beacon)
            }
            if let nearest = beacons.first {
                if closest == nil || Self.nearerFirst(nearest, closest!.beacon)
                    || (nearest == closest!.beacon
                        && matcher.specificity(slot: Int(slot)) > matcher.specificity(slot: Int(closest!.region)))
                {
                    closest = (slot, nearest)
                }
            }
            body(RangingReport(region: regionID, subject: subject, t: now, beacons: beacons))
        }
        scanners[index].closest = closest.map { ScannerSubject.Closest(region: $0.region, beacon: $0.beacon) }
    }

    static func nearerFirst(_ left: RangedBeacon, _ right: RangedBeacon) -> Bool {
        let leftUnknown = left.accuracy < 0
        let rightUnknown = right.accuracy < 0
        if leftUnknown != rightUnknown { return rightUnknown }
        if !leftUnknown && left.accuracy != right.accuracy { return left.accuracy < right.accuracy }
        if leftUnknown && left.lastSeen != right.lastSeen { return left.lastSeen > right.lastSeen }
        return left.identity < right.identity
    }

    /// The subject's nearest ranged beacon at its last ranging report (its proximity `unknown`
    /// when none was heard in that report's window), and the beacon region it was reported
    /// for (the most specific one when several share the beacon).
    public func closestBeacon(of subject: String) -> (region: String, beacon: RangedBeacon)? {
        guard let index = scannerByID[subject], let closest = scanners[index].closest,
            let region = matcher.regions[Int(closest.region)]
        else { return nil }
        return (region.id, closest.beacon)
    }

    // MARK: - Regions

    /// Adds or replaces a beacon region (others are ignored). States for it are kept; the next
    /// report re-evaluates them.
    public mutating func upsert(_ region: Region) {
        if matcher.upsert(region) { generation += 1 }
    }

    /// Removes a beacon region; every subject with a state for it gets `unmonitored`.
    public mutating func remove(regionID: String, at t: Date) -> [RegionEvent] {
        guard let slot = matcher.slot(of: regionID), matcher.remove(id: regionID) else { return [] }
        generation += 1
        var events: [RegionEvent] = []
        for index in scanners.indices.sorted(by: { scanners[$0].id < scanners[$1].id }) {
            if let removed = scanners[index].regions.first(where: { $0.slot == Int32(slot) }) {
                retired[regionID, default: [:]][scanners[index].id] = removed.membership.seq
                scanners[index].regions.removeAll { $0.slot == Int32(slot) }
                events.append(
                    .state(
                        region: regionID, subject: scanners[index].id, state: .unmonitored, at: t,
                        reason: "regionRemoved"))
            }
        }
        return events
    }
}
