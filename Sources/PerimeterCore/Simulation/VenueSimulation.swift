import Foundation

/// Visitors walking through a venue, as pure functions of a seed and a time: what their
/// phones (or the venue's gateways) would publish.
///
/// Each visitor walks one of the venue's paths there and back, again and again, at a walking
/// speed drawn from ``SimulatorSettings/speed``, pausing at each waypoint, starting at a random
/// point of its round. Everything random comes from SplitMix64 seeded by (seed, visitor, tick),
/// so ``messages(tick:)`` gives the same messages for the same seed and tick on every machine,
/// in whatever order ticks are asked for.
public struct VenueSimulation: Sendable {
    public typealias Message = AgentMessage

    /// One visitor's fixed choices.
    public struct Visitor: Sendable, Hashable {
        public var subject: String
        /// The phone (scanner topology) that publishes for it.
        public var agent: String
        public var speed: Double
        public var status: String
        public var locale: String
        public var defaultPlace: String?
        /// The tag it carries (gateway topology): minor = visitor number.
        public var tagMinor: Int
        /// Legs of its round: from, to, seconds walking, seconds paused at the end.
        var legs: [(from: GeoPoint, to: GeoPoint, walk: Double, pause: Double)]
        var roundSeconds: Double
        /// Where in its round it is at tick 0, seconds.
        var phase: Double

        public static func == (left: Visitor, right: Visitor) -> Bool {
            left.subject == right.subject && left.speed == right.speed && left.phase == right.phase
                && left.status == right.status
        }
        public func hash(into hasher: inout Hasher) { hasher.combine(subject) }
    }

    public let venue: VenueFile
    public let start: Date
    public let visitors: [Visitor]
    private let settings: SimulatorSettings

    /// - Parameters:
    ///   - start: the time of tick 0; tick `n` is `start + n × interval`.
    ///   - seed: overrides the venue's seed.
    public init(venue: VenueFile, start: Date, seed: UInt64? = nil, visitors count: Int? = nil) {
        self.venue = venue
        self.start = start
        var settings = venue.simulator
        if let seed { settings.seed = seed }
        if let count { settings.visitors = count }
        self.settings = settings
        var visitors: [Visitor] = []
        let statuses = settings.authorization.filter { $0.share > 0 }
        let totalShare = statuses.reduce(0) { $0 + $1.share }
        for index in 0..<(settings.paths.isEmpty ? 0 : settings.visitors) {
            var random = Self.generator(settings.seed, stream: UInt64(index), tick: UInt64.max)
            let path = settings.paths[Int(random.next() % UInt64(settings.paths.count))].compactMap {
                settings.waypoints[$0]
            }
            let speed = random.uniform(settings.speed.lowerBound, settings.speed.upperBound + 1e-12)
            // There and back: a, b, c, b, a …
            let round = path + path.dropFirst().dropLast().reversed() + [path[0]]
            var legs: [(GeoPoint, GeoPoint, Double, Double)] = []
            for (from, to) in zip(round, round.dropFirst()) {
                let pause = random.uniform(settings.pause.lowerBound, settings.pause.upperBound + 1e-12)
                legs.append((from, to, Geodesy.distance(from, to) / speed, pause))
            }
            let roundSeconds = legs.reduce(0) { $0 + $1.2 + $1.3 }
            var pick = random.uniform(0, totalShare)
            var status = statuses.last?.status ?? "always"
            for candidate in statuses {
                if pick < candidate.share {
                    status = candidate.status
                    break
                }
                pick -= candidate.share
            }
            let locale =
                settings.locales.isEmpty ? venue.locale : settings.locales[index % settings.locales.count]
            let place =
                settings.defaultPlaces.isEmpty || random.next() % 2 == 0
                ? nil : settings.defaultPlaces[Int(random.next() % UInt64(settings.defaultPlaces.count))]
            // In gateway topology the evaluator knows a visitor only by its tag's identity, so
            // that is the subject its records are about.
            let tag = BeaconPrefix(uuid: settings.tagUUID).map {
                BeaconIdentity.iBeacon(uuid: $0, major: 100, minor: UInt16(truncatingIfNeeded: index + 1)).canonical
            }
            let subject = settings.topology == .gateway ? tag ?? "visitor-\(index + 1)" : "visitor-\(index + 1)"
            visitors.append(
                Visitor(
                    subject: subject, agent: "phone-\(index + 1)", speed: speed, status: status,
                    locale: locale, defaultPlace: place, tagMinor: index + 1,
                    legs: legs.map { (from: $0.0, to: $0.1, walk: $0.2, pause: $0.3) }, roundSeconds: roundSeconds,
                    phase: random.uniform(0, max(roundSeconds, 1))))
        }
        self.visitors = visitors
    }

    public var interval: Double { settings.interval }
    public var topology: SimulatorSettings.Topology { settings.topology }

    /// The time of a tick.
    public func time(of tick: Int) -> Date { start.addingTimeInterval(Double(tick) * settings.interval) }

    /// The records visitors publish once, before walking: authorization and preferences
    /// (retained), and the usage of those whose status makes it matter.
    public func initialMessages() -> [Message] {
        var messages: [Message] = []
        for visitor in visitors {
            // Authorization first: until it arrives the venue's default status applies.
            messages.append(.authorization(subject: visitor.subject, status: visitor.status, accuracy: "full"))
            if visitor.status == "whenInUse" || visitor.status == "provisionalAlways" {
                messages.append(.usage(subject: visitor.subject, inUse: inUse(visitor, tick: 0)))
            }
            messages.append(
                .preferences(subject: visitor.subject, locale: visitor.locale, defaultPlace: visitor.defaultPlace))
        }
        return messages
    }

    /// The true position of a visitor at a time (no noise).
    public func position(of visitor: Visitor, at seconds: Double) -> GeoPoint {
        guard visitor.roundSeconds > 0 else { return visitor.legs.first?.from ?? GeoPoint(lon: 0, lat: 0) }
        var remaining = (seconds + visitor.phase).truncatingRemainder(dividingBy: visitor.roundSeconds)
        for leg in visitor.legs {
            if remaining < leg.walk {
                let fraction = leg.walk > 0 ? remaining / leg.walk : 1
                let bearing = Geodesy.bearing(leg.from, leg.to)
                return Geodesy.destination(
                    leg.from, bearing: bearing, distance: Geodesy.distance(leg.from, leg.to) * fraction)
            }
            remaining -= leg.walk
            if remaining < leg.pause { return leg.to }
            remaining -= leg.pause
        }
        return visitor.legs.last?.to ?? GeoPoint(lon: 0, lat: 0)
    }

    /// Whether a when-in-use visitor has the app open: sessions of 20–60 s, 30–90 s apart.
    public func inUse(_ visitor: Visitor, tick: Int) -> Bool {
        let seconds = Double(tick) * settings.interval
        var random = Self.generator(settings.seed, stream: 0xA5A5_0000 + UInt64(visitor.tagMinor), tick: 0)
        var t = -random.uniform(0, 60)
        var open = random.next() % 2 == 0
        while true {
            let length = open ? random.uniform(20, 60) : random.uniform(30, 90)
            if seconds < t + length { return open }
            t += length
            open.toggle()
        }
    }

    /// Everything published at `tick`: each visitor's GPS reading and BLE scan (scanner
    /// topology) or each gateway's scan of the tags it hears (gateway topology), and usage
    /// changes of when-in-use visitors.
    public func messages(tick: Int) -> [Message] {
        let t = time(of: tick)
        let seconds = Double(tick) * settings.interval
        var messages: [Message] = []
        var gatewayHeard: [[AdvertReading]] = Array(repeating: [], count: venue.gateways.count)
        for (index, visitor) in visitors.enumerated() {
            var random = Self.generator(settings.seed, stream: UInt64(index), tick: UInt64(tick))
            let truth = position(of: visitor, at: seconds)
            if (visitor.status == "whenInUse" || visitor.status == "provisionalAlways") && tick > 0
                && inUse(visitor, tick: tick) != inUse(visitor, tick: tick - 1)
            {
                messages.append(.usage(subject: visitor.subject, inUse: inUse(visitor, tick: tick)))
            }
            switch settings.topology {
            case .scanner:
                let accuracy = random.uniform(settings.gpsAccuracy.lowerBound, settings.gpsAccuracy.upperBound + 1e-12)
                // The reported accuracy is a ~68 % radius: the error's per-axis sigma is about acc / 1.5.
                let error = Self.gaussian(&random) * accuracy / 1.5
                let measured = Geodesy.destination(
                    truth, bearing: random.uniform(0, 360), distance: abs(error))
                messages.append(
                    .gps(
                        agent: visitor.agent,
                        GPSReading(
                            subject: visitor.subject, t: t, position: measured, accuracy: accuracy.rounded(),
                            speed: visitor.speed)))
                var adverts: [AdvertReading] = []
                for beacon in venue.beacons {
                    guard
                        let rssi = heard(
                            tx: Double(beacon.tx), distance: Geodesy.distance(truth, beacon.position), &random)
                    else { continue }
                    adverts.append(
                        .iBeacon(uuid: beacon.uuid, major: beacon.major, minor: beacon.minor, rssi: rssi, tx: beacon.tx)
                    )
                }
                messages.append(.ble(agent: visitor.agent, BLEScan(subject: visitor.subject, t: t, adverts: adverts)))
            case .gateway:
                for (g, gateway) in venue.gateways.enumerated() {
                    guard let position = gateway.position,
                        let rssi = heard(tx: -59, distance: Geodesy.distance(truth, position), &random)
                    else { continue }
                    gatewayHeard[g].append(
                        .iBeacon(uuid: settings.tagUUID, major: 100, minor: visitor.tagMinor, rssi: rssi, tx: -59))
                }
            }
        }
        if settings.topology == .gateway {
            for (g, gateway) in venue.gateways.enumerated() {
                messages.append(.ble(agent: gateway.id, BLEScan(t: t, adverts: gatewayHeard[g])))
            }
        }
        return messages
    }

    /// The RSSI heard at `distance` from a transmitter with `tx` dBm at 1 m: the log-distance
    /// path-loss model (the evaluator's ``DistanceModel`` inverted) plus Gaussian noise; nil
    /// when the advert is dropped or below the receiver's sensitivity.
    func heard(tx: Double, distance: Double, _ random: inout SplitMix64) -> Int? {
        let mean = Self.expectedRSSI(tx: tx, distance: distance, exponent: venue.pathLossExponent)
        let rssi = mean + Self.gaussian(&random) * settings.rssiNoise
        let dropped = random.uniform(0, 1) < settings.dropout
        guard !dropped, rssi >= settings.sensitivity else { return nil }
        return Int(min(rssi, -1).rounded())
    }

    /// `tx − 10·n·log10(d)`, with distances under 10 cm taken as 10 cm.
    public static func expectedRSSI(tx: Double, distance: Double, exponent: Double) -> Double {
        tx - 10 * exponent * log10(max(distance, 0.1))
    }

    static func generator(_ seed: UInt64, stream: UInt64, tick: UInt64) -> SplitMix64 {
        var mixer = SplitMix64(seed: seed ^ (stream &* 0xD1B5_4A32_D192_ED03) ^ (tick &* 0x8CB9_2BA7_2F3D_8DD7))
        return SplitMix64(seed: mixer.next())
    }

    /// A standard normal deviate (Box–Muller).
    static func gaussian(_ random: inout SplitMix64) -> Double {
        let u1 = max(random.uniform(0, 1), 1e-12)
        let u2 = random.uniform(0, 1)
        return (-2 * log(u1)).squareRoot() * cos(2 * .pi * u2)
    }
}
