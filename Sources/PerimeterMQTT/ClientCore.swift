import CMosquitto
import Dispatch
import Foundation
import Synchronization

/// The state shared between the Swift API, the network-loop thread and libmosquitto's callbacks.
///
/// libmosquitto gets an unretained pointer to this object as its `obj`; the object owns the
/// `mosquitto` handle and destroys it in `deinit`, so the pointer is valid for as long as any
/// callback can run.
///
/// - Important: `@unchecked Sendable` because it holds the C handle. The handle is used from
///   the loop thread (`mosquitto_loop`, connect) and from callers' threads only through the
///   calls libmosquitto makes thread-safe in threaded mode (`mosquitto_threaded_set`):
///   publish, subscribe, unsubscribe and disconnect. All Swift state is behind `state`.
final class ClientCore: @unchecked Sendable {
    let configuration: MQTTConfiguration
    let handle: OpaquePointer
    let state = Mutex(State())
    let inbound: AsyncStream<MQTTMessage>.Continuation
    /// Called on the network thread for every message, before it is queued for the consumer.
    let onReceive: (@Sendable (MQTTMessage) -> Void)?
    /// Called on the network thread after a burst of reads, before their acknowledgements are
    /// written (see ``MQTTClient/init(_:onReceive:onBurstEnd:)``). With it the client runs its
    /// own loop (``runBurst()``), woken through `wakePipe` when another thread queues a packet.
    let onBurstEnd: (@Sendable () -> Void)?
    /// A pipe (read end, write end) that cuts the burst loop's poll short (nil without
    /// `onBurstEnd`); both ends non-blocking.
    private let wakePipe: (read: Int32, write: Int32)?
    let dropped = Atomic<Int>(0)
    let received = Atomic<Int>(0)
    /// Signalled to cut a backoff sleep short when stopping.
    let wake = DispatchSemaphore(value: 0)
    private let isV5: Bool
    /// The configuration's endpoints, first to last; the loop goes round them.
    let endpoints: [MQTTConfiguration.Endpoint]

    /// What a caller waits for after sending.
    enum Pending {
        /// The acknowledgement of this packet id.
        case packet(Int32)
        /// A subscription made while offline: the resubscription on the next connection.
        case offlineSubscribe(String)
        /// Nothing (an unsubscribe while offline: forgetting the filter was enough).
        case nothing
    }

    /// What a packet id (mid) is waiting for.
    enum Waiter {
        /// Callers awaiting the acknowledgement; the value is the reason code or granted QoS.
        case callers([CheckedContinuation<Int32, any Error>], topic: String)
        /// A QoS 0 publish: libmosquitto reports it as sent; nobody waits.
        case ignore
        /// A resubscription made by the client itself after reconnecting.
        case restore(filter: String)
    }

    struct State {
        var connection: ConnectionState = .idle
        var loopStarted = false
        var stopRequested = false
        var loopExited = false
        var attempts = 0
        /// Which of `endpoints` the loop is connected to or trying next.
        var endpointIndex = 0
        var lastError: MQTTError?
        /// Subscriptions in the order they were made, with whether the broker confirmed them
        /// on the current session.
        var subscriptions: [(filter: String, qos: QoS, confirmed: Bool)] = []
        var waiters: [Int32: Waiter] = [:]
        /// Acknowledgements that arrived before the caller registered for them.
        var early: [Int32: Int32] = [:]
        /// Subscribe callers whose SUBACK was lost with the connection; the resubscription on
        /// the next connection completes them.
        var orphanedSubscribes: [String: [CheckedContinuation<Int32, any Error>]] = [:]
        var connectWaiters: [UInt64: CheckedContinuation<Void, any Error>] = [:]
        var exitWaiters: [CheckedContinuation<Void, Never>] = []
        var stateWatchers: [UInt64: AsyncStream<ConnectionState>.Continuation] = [:]
        var nextToken: UInt64 = 0

        mutating func token() -> UInt64 {
            nextToken += 1
            return nextToken
        }

        /// Sets the connection state and returns the watchers to notify (outside the lock).
        mutating func set(_ connection: ConnectionState) -> [AsyncStream<ConnectionState>.Continuation] {
            guard self.connection != connection else { return [] }
            self.connection = connection
            return Array(stateWatchers.values)
        }
    }

    init(
        configuration: MQTTConfiguration, inbound: AsyncStream<MQTTMessage>.Continuation,
        onReceive: (@Sendable (MQTTMessage) -> Void)? = nil, onBurstEnd: (@Sendable () -> Void)? = nil
    ) throws(MQTTError) {
        self.configuration = configuration
        self.inbound = inbound
        self.onReceive = onReceive
        self.onBurstEnd = onBurstEnd
        if onBurstEnd != nil {
            var fds: [Int32] = [-1, -1]
            guard pipe(&fds) == 0 else {
                throw MQTTError(
                    .library(Int32(MOSQ_ERR_ERRNO.rawValue)), operation: "pipe",
                    reason: String(cString: strerror(errno)))
            }
            for fd in fds {
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            }
            wakePipe = (fds[0], fds[1])
        } else {
            wakePipe = nil
        }
        self.isV5 = configuration.protocolVersion == .v5
        self.endpoints = configuration.endpoints
        let persistent = !configuration.cleanStart
        if persistent && configuration.clientID.isEmpty {
            throw MQTTError(
                .invalidArgument, operation: "mosquitto_new",
                reason: "a persistent session (clean start off) needs a client id")
        }
        guard
            let handle = mosquitto_new(
                configuration.clientID.isEmpty ? nil : configuration.clientID,
                configuration.cleanStart, nil)
        else {
            throw MQTTError(
                .library(Int32(MOSQ_ERR_NOMEM.rawValue)), operation: "mosquitto_new",
                reason: String(cString: strerror(errno)), context: "client id '\(configuration.clientID)'")
        }
        self.handle = handle
        // From here on `deinit` destroys the handle, also when a setting below throws.
        mosquitto_user_data_set(handle, Unmanaged.passUnretained(self).toOpaque())
        try configure()
    }

    deinit {
        mosquitto_destroy(handle)
        if let wakePipe {
            close(wakePipe.read)
            close(wakePipe.write)
        }
    }

    /// The endpoint connected to, or being tried next.
    var currentEndpoint: MQTTConfiguration.Endpoint {
        endpoints[state.withLock { $0.endpointIndex } % endpoints.count]
    }

    static func from(_ obj: UnsafeMutableRawPointer?) -> ClientCore {
        Unmanaged<ClientCore>.fromOpaque(obj!).takeUnretainedValue()
    }

    private func configure() throws(MQTTError) {
        let config = configuration
        try MQTTError.check(mosquitto_threaded_set(handle, true), "mosquitto_threaded_set")
        try MQTTError.check(
            mosquitto_int_option(
                handle, MOSQ_OPT_PROTOCOL_VERSION,
                isV5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311),
            "mosquitto_int_option", context: "protocol version \(config.protocolVersion)")
        try MQTTError.check(
            mosquitto_int_option(handle, MOSQ_OPT_SEND_MAXIMUM, Int32(clamping: max(1, config.maxInflight))),
            "mosquitto_int_option", context: "send maximum \(config.maxInflight)")
        // How many QoS 1/2 messages the broker may have in flight towards us. libmosquitto's
        // default of 20 is small for a service catching up, and mosquitto 2.0 miscounts inbound
        // QoS 2 flows against it under load, which makes libmosquitto drop the connection.
        if isV5 {
            try MQTTError.check(
                mosquitto_int_option(handle, MOSQ_OPT_RECEIVE_MAXIMUM, Int32(clamping: max(1, config.receiveMaximum))),
                "mosquitto_int_option", context: "receive maximum \(config.receiveMaximum)")
        }
        // Events are small and latency matters more than packing packets.
        try MQTTError.check(mosquitto_int_option(handle, MOSQ_OPT_TCP_NODELAY, 1), "mosquitto_int_option")
        if config.username != nil || config.password != nil {
            try MQTTError.check(
                mosquitto_username_pw_set(handle, config.username, config.password), "mosquitto_username_pw_set",
                context: "user '\(config.username ?? "")'")
        }
        if let tls = config.tls {
            try MQTTError.check(
                mosquitto_tls_set(handle, tls.caFile, tls.caPath, tls.certificateFile, tls.keyFile, nil),
                "mosquitto_tls_set", context: "ca \(tls.caFile ?? tls.caPath ?? "-")")
            if tls.insecure {
                try MQTTError.check(mosquitto_tls_insecure_set(handle, true), "mosquitto_tls_insecure_set")
            }
        }
        if let will = config.will {
            try MQTTTopic.validateName(will.topic)
            let properties = isV5 ? try will.properties.makeCList("mosquitto_will_set_v5") : nil
            let rc = will.payload.withUnsafeBytes {
                mosquitto_will_set_v5(
                    handle, will.topic, Int32($0.count), $0.baseAddress, will.qos.rawValue, will.retain, properties)
            }
            if rc != Int32(MOSQ_ERR_SUCCESS.rawValue) {
                // On success libmosquitto owns the property list; on failure it is still ours.
                var owned = properties
                mosquitto_property_free_all(&owned)
                throw MQTTError.library(rc, "mosquitto_will_set_v5", context: "will topic '\(will.topic)'")
            }
        }
        installCallbacks()
    }

    // MARK: - Operations from callers

    func sendPublish(
        _ topic: String, payload: [UInt8], qos: QoS, retain: Bool, properties: MQTTProperties
    ) throws(MQTTError) -> Int32 {
        if state.withLock({ $0.stopRequested }) {
            throw MQTTError(.closed, operation: "mosquitto_publish_v5", reason: "the client is closed", context: topic)
        }
        var mid: Int32 = 0
        let rc = try (isV5 ? properties : .none).withCList("mosquitto_publish_v5") { list in
            payload.withUnsafeBytes {
                mosquitto_publish_v5(
                    handle, &mid, topic, Int32(clamping: $0.count), $0.baseAddress, qos.rawValue, retain, list)
            }
        }
        // At QoS ≥ 1 libmosquitto queues the message before trying to write it, and NO_CONN only
        // says the write has to wait: the message (with `mid`) is sent after the next connect,
        // to whichever broker that is. The caller waits for its acknowledgement as usual.
        if !(qos > .atMostOnce && rc == Int32(MOSQ_ERR_NO_CONN.rawValue)) {
            try MQTTError.check(rc, "mosquitto_publish_v5", context: "topic '\(topic)', \(payload.count) bytes")
        }
        wakeLoop()
        if qos == .atMostOnce {
            state.withLock { state in
                if state.early.removeValue(forKey: mid) == nil { state.waiters[mid] = .ignore }
            }
        }
        return mid
    }

    func sendSubscribe(_ filter: String, qos: QoS) throws(MQTTError) -> Pending {
        let connected = try state.withLock { state throws(MQTTError) in
            if state.stopRequested {
                throw MQTTError(.closed, operation: "mosquitto_subscribe_v5", reason: "the client is closed")
            }
            state.subscriptions.removeAll { $0.filter == filter }
            state.subscriptions.append((filter, qos, false))
            return state.connection.isConnected
        }
        var mid: Int32 = 0
        let rc = mosquitto_subscribe_v5(handle, &mid, filter, qos.rawValue, 0, nil)
        wakeLoop()
        if rc == Int32(MOSQ_ERR_NO_CONN.rawValue) || (!connected && rc != Int32(MOSQ_ERR_SUCCESS.rawValue)) {
            // Not connected: the filter is remembered and sent on the next connection.
            return .offlineSubscribe(filter)
        }
        try MQTTError.check(rc, "mosquitto_subscribe_v5", context: "filter '\(filter)'")
        return .packet(mid)
    }

    func sendUnsubscribe(_ filter: String) throws(MQTTError) -> Pending {
        try state.withLock { state throws(MQTTError) in
            if state.stopRequested {
                throw MQTTError(.closed, operation: "mosquitto_unsubscribe_v5", reason: "the client is closed")
            }
            state.subscriptions.removeAll { $0.filter == filter }
        }
        var mid: Int32 = 0
        let rc = mosquitto_unsubscribe_v5(handle, &mid, filter, nil)
        wakeLoop()
        // Not connected: forgetting the filter is enough, since it is only restored from our list
        // (a resumed session that still holds it is unsubscribed on the next connection).
        if rc == Int32(MOSQ_ERR_NO_CONN.rawValue) { return .nothing }
        try MQTTError.check(rc, "mosquitto_unsubscribe_v5", context: "filter '\(filter)'")
        return .packet(mid)
    }

    /// Waits for what `pending` names; returns the granted QoS (subscribe) or reason code.
    /// - Throws: `.publishRefused` for a reason code ≥ 0x80, `.closed` when the client closes first.
    @discardableResult
    func awaitCompletion(_ pending: Pending, topic: String) async throws -> QoS {
        let code: Int32 = try await withCheckedThrowingContinuation { continuation in
            let early: Int32? = state.withLock { state in
                if state.loopExited { return Int32.min }
                switch pending {
                case .nothing:
                    return 0
                case .packet(let mid):
                    if let code = state.early.removeValue(forKey: mid) { return code }
                    state.waiters[mid] = .callers([continuation], topic: topic)
                case .offlineSubscribe(let filter):
                    if let subscription = state.subscriptions.first(where: { $0.filter == filter }),
                        subscription.confirmed
                    {
                        return subscription.qos.rawValue
                    }
                    // The connection may have come back meanwhile and resubscribed already.
                    if let (mid, waiter) = state.waiters.first(where: { $0.value.filter == filter }) {
                        state.waiters[mid] = waiter.adding(continuation)
                    } else {
                        state.orphanedSubscribes[filter, default: []].append(continuation)
                    }
                }
                return nil
            }
            if let early {
                if early == Int32.min {
                    continuation.resume(
                        throwing: MQTTError(
                            .closed, operation: "acknowledgement", reason: "the client is closed",
                            context: topic))
                } else {
                    continuation.resume(returning: early)
                }
            }
        }
        if code >= 0x80 {
            throw MQTTError(
                .publishRefused(code), operation: "acknowledgement", reason: MQTTError.reasonText(code),
                context: topic)
        }
        return QoS(rawValue: min(code, 2)) ?? .atMostOnce
    }

    // MARK: - Connection lifecycle

    func startLoop() {
        let start = state.withLock { state -> Bool in
            guard !state.loopStarted, !state.stopRequested else { return false }
            state.loopStarted = true
            return true
        }
        guard start else { return }
        let watchers = state.withLock { $0.set(.connecting) }
        watchers.forEach { $0.yield(.connecting) }
        let thread = Thread { [self] in runLoop() }
        thread.name = "mqtt-\(configuration.clientID)"
        thread.start()
    }

    func waitUntilConnected(timeout: Duration) async throws {
        let token = state.withLock { $0.token() }
        let timer = Task { [weak self] in
            try await Task.sleep(for: timeout)
            self?.failConnectWaiter(token, timeout: timeout)
        }
        defer { timer.cancel() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome: Result<Void, any Error>? = state.withLock { state in
                    switch state.connection {
                    case .connected: return .success(())
                    case .closed:
                        return .failure(MQTTError(.closed, operation: "connect", reason: "the client is closed"))
                    default:
                        if Task.isCancelled { return .failure(CancellationError()) }
                        state.connectWaiters[token] = continuation
                        return nil
                    }
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: { [weak self] in
            let waiter = self?.state.withLock { $0.connectWaiters.removeValue(forKey: token) }
            waiter?.resume(throwing: CancellationError())
        }
    }

    private func failConnectWaiter(_ token: UInt64, timeout: Duration) {
        let (waiter, last) = state.withLock { ($0.connectWaiters.removeValue(forKey: token), $0.lastError) }
        waiter?.resume(
            throwing: MQTTError(
                .timeout, operation: "connect",
                reason: "no connection within \(timeout)" + (last.map { "; last failure: \($0)" } ?? ""),
                context: configuration.endpoint))
    }

    func watchStates() -> AsyncStream<ConnectionState> {
        let (stream, continuation) = AsyncStream.makeStream(of: ConnectionState.self)
        let (token, current) = state.withLock { state in
            let token = state.token()
            if state.connection != .closed { state.stateWatchers[token] = continuation }
            return (token, state.connection)
        }
        continuation.yield(current)
        if current == .closed { continuation.finish() }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.stateWatchers.removeValue(forKey: token) }
        }
        return stream
    }

    /// Asks the loop to close the connection gracefully and exit. Idempotent.
    func requestStop() {
        let running = state.withLock { state -> Bool in
            let first = !state.stopRequested
            state.stopRequested = true
            return first && state.loopStarted
        }
        if running {
            // Queues a DISCONNECT (reason 0: normal, so no will) that the loop writes before exiting.
            if isV5 {
                _ = mosquitto_disconnect_v5(handle, 0, nil)
            } else {
                _ = mosquitto_disconnect(handle)
            }
            wakeLoop()
            wake.signal()
        } else {
            finishIfNeverStarted()
        }
    }

    private func finishIfNeverStarted() {
        let finish = state.withLock { state -> Bool in
            guard !state.loopStarted, !state.loopExited else { return false }
            state.loopExited = true
            return true
        }
        if finish { closeEverything() }
    }

    func waitForLoopExit() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                if state.loopExited { return true }
                state.exitWaiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// The network loop: connect, run `mosquitto_loop`, back off and reconnect, until stopped.
    private func runLoop() {
        var socketOpen = false
        var stopDeadline: ContinuousClock.Instant?
        while true {
            let stopping = state.withLock { $0.stopRequested }
            if stopping {
                let deadline = stopDeadline ?? .now + .seconds(2)
                stopDeadline = deadline
                if !socketOpen || ContinuousClock.now > deadline { break }
            }
            if !socketOpen {
                let rc = connectSocket()
                if rc == Int32(MOSQ_ERR_SUCCESS.rawValue) {
                    socketOpen = true
                } else {
                    connectionFailed(
                        MQTTError.library(rc, "mosquitto_connect_bind_v5", context: currentEndpoint.description))
                    continue
                }
            }
            let rc = onBurstEnd == nil ? mosquitto_loop(handle, 500, 1) : runBurst()
            if rc != Int32(MOSQ_ERR_SUCCESS.rawValue) {
                socketOpen = false
                if state.withLock({ $0.stopRequested }) { break }
                let error =
                    state.withLock { $0.lastError }.flatMap { error -> MQTTError? in
                        if case .connectionRefused = error.kind { return error }
                        return nil
                    } ?? MQTTError.library(rc, "mosquitto_loop", context: currentEndpoint.description)
                connectionFailed(error)
            }
        }
        state.withLock { $0.loopExited = true }
        closeEverything()
    }

    /// Packets read at most before `onBurstEnd` runs and the acknowledgements go out: bounds
    /// how long the first arrival of a burst waits for its journal commit.
    static let maxBurst = 256

    /// One turn of the loop for a client with `onBurstEnd`, in place of `mosquitto_loop`:
    /// reads every packet already waiting (up to ``maxBurst``), runs `onBurstEnd`, and only then
    /// writes. libmosquitto queues the PUBACK of a QoS 1 message while reading it (this is a
    /// threaded client: packets are written only by the loop), so a journal committed in
    /// `onBurstEnd` holds every message of the burst before the broker hears it was received:
    /// `kill -9` before the commit leaves them unacknowledged, and the broker sends them again.
    /// `mosquitto_loop` reads one packet per turn and writes in the same turn.
    private func runBurst() -> Int32 {
        let success = Int32(MOSQ_ERR_SUCCESS.rawValue)
        let socket = mosquitto_socket(handle)
        guard socket >= 0 else { return Int32(MOSQ_ERR_NO_CONN.rawValue) }
        var fds = [
            pollfd(fd: socket, events: Int16(POLLIN) | (mosquitto_want_write(handle) ? Int16(POLLOUT) : 0), revents: 0),
            pollfd(fd: wakePipe?.read ?? -1, events: Int16(POLLIN), revents: 0),
        ]
        let ready = poll(&fds, nfds_t(fds.count), 500)
        if ready < 0 { return errno == EINTR ? success : Int32(MOSQ_ERR_ERRNO.rawValue) }
        if fds[1].revents & Int16(POLLIN) != 0, let wakePipe {
            var drained = [UInt8](repeating: 0, count: 64)
            while read(wakePipe.read, &drained, drained.count) == drained.count {}
        }
        if fds[0].revents & (Int16(POLLIN) | Int16(POLLHUP) | Int16(POLLERR)) != 0 {
            var reads = 0
            repeat {
                let rc = mosquitto_loop_read(handle, 1)
                reads += 1
                guard rc == success, mosquitto_socket(handle) >= 0 else {
                    // The connection is gone: what was read is still journalled (its PUBACKs
                    // were never written, so the broker sends it again: a duplicate at worst).
                    onBurstEnd?()
                    return rc == success ? Int32(MOSQ_ERR_NO_CONN.rawValue) : rc
                }
            } while reads < Self.maxBurst && Self.readable(socket)
            onBurstEnd?()
        }
        if mosquitto_want_write(handle) {
            let rc = mosquitto_loop_write(handle, 1)
            if rc != success { return rc }
        }
        return mosquitto_loop_misc(handle)
    }

    /// Whether `socket` has bytes to read now.
    private static func readable(_ socket: Int32) -> Bool {
        var fd = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        return poll(&fd, 1, 0) > 0 && fd.revents & Int16(POLLIN) != 0
    }

    /// Cuts the burst loop's poll short: another thread queued a packet for it to write.
    private func wakeLoop() {
        guard let wakePipe else { return }
        var byte: UInt8 = 1
        // A full pipe already wakes the loop: a failed write loses nothing.
        _ = write(wakePipe.write, &byte, 1)
    }

    private func connectSocket() -> Int32 {
        var properties: OpaquePointer? = nil
        defer { mosquitto_property_free_all(&properties) }
        if isV5 && !configuration.cleanStart {
            _ = mosquitto_property_add_int32(
                &properties, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), configuration.sessionExpiry)
        }
        if isV5, let maximum = configuration.maximumPacketSize {
            _ = mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_MAXIMUM_PACKET_SIZE.rawValue), maximum)
        }
        // Connecting afresh each time (rather than mosquitto_reconnect) resends the CONNECT
        // properties; mosquitto_reconnect would drop the session expiry and lose the session.
        let endpoint = currentEndpoint
        return mosquitto_connect_bind_v5(
            handle, endpoint.host, Int32(endpoint.port), Int32(configuration.keepAlive), nil, properties)
    }

    /// Records a failed or lost connection, moves on to the next endpoint (round robin) and
    /// sleeps for the backoff (cut short by a stop).
    private func connectionFailed(_ error: MQTTError) {
        let (attempt, watchers, state) = state.withLock { [endpoints] state in
            state.attempts += 1
            state.lastError = error
            state.endpointIndex = (state.endpointIndex + 1) % endpoints.count
            dropConnectionBoundWaiters(&state)
            let next = ConnectionState.reconnecting(attempt: state.attempts, lastError: error.description)
            return (state.attempts, state.set(next), next)
        }
        watchers.forEach { $0.yield(state) }
        let base = configuration.backoff.delay(attempt: attempt)
        let jitter = Double.random(in: 0...max(0, configuration.backoff.jitter))
        let delay = base + base * jitter
        let nanos = delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000
        _ = wake.wait(timeout: .now() + .nanoseconds(Int(clamping: nanos)))
    }

    /// After a connection is lost: QoS 0 packets and subscribe/unsubscribe packets that were not
    /// acknowledged are gone. QoS ≥ 1 publishes stay: libmosquitto resends them with their ids.
    private func dropConnectionBoundWaiters(_ state: inout State) {
        for (mid, waiter) in state.waiters {
            switch waiter {
            case .ignore, .restore:
                state.waiters[mid] = nil
            case .callers(let continuations, let topic):
                if let index = state.subscriptions.firstIndex(where: { $0.filter == topic }),
                    !state.subscriptions[index].confirmed
                {
                    state.waiters[mid] = nil
                    state.orphanedSubscribes[topic, default: []].append(contentsOf: continuations)
                }
            }
        }
        for index in state.subscriptions.indices { state.subscriptions[index].confirmed = false }
    }

    private func closeEverything() {
        let (waiters, orphans, connectWaiters, exitWaiters, watchers) = state.withLock { state in
            let result = (
                Array(state.waiters.values), state.orphanedSubscribes.values.flatMap { $0 },
                Array(state.connectWaiters.values), state.exitWaiters, Array(state.stateWatchers.values)
            )
            state.waiters = [:]
            state.orphanedSubscribes = [:]
            state.connectWaiters = [:]
            state.exitWaiters = []
            state.stateWatchers = [:]
            state.connection = .closed
            return result
        }
        let closed = MQTTError(.closed, operation: "disconnect", reason: "the client was closed before completion")
        for waiter in waiters {
            if case .callers(let continuations, _) = waiter { continuations.forEach { $0.resume(throwing: closed) } }
        }
        orphans.forEach { $0.resume(throwing: closed) }
        connectWaiters.forEach { $0.resume(throwing: closed) }
        inbound.finish()
        for watcher in watchers {
            watcher.yield(.closed)
            watcher.finish()
        }
        exitWaiters.forEach { $0.resume() }
    }

    // MARK: - Callbacks (on the loop thread)

    func onConnect(rc: Int32, flags: Int32) {
        guard rc == 0 else {
            let reason = isV5 ? MQTTError.reasonText(rc) : String(cString: mosquitto_connack_string(rc))
            let error = MQTTError(
                .connectionRefused(rc), operation: "CONNACK", reason: reason, context: currentEndpoint.description)
            let waiters = state.withLock { state in
                state.lastError = error
                defer { state.connectWaiters = [:] }
                return Array(state.connectWaiters.values)
            }
            waiters.forEach { $0.resume(throwing: error) }
            return
        }
        let sessionPresent = (flags & 1) != 0
        let toRestore = state.withLock { state in
            state.attempts = 0
            state.lastError = nil
            // A resumed session still holds every confirmed subscription; a new one holds none.
            return state.subscriptions.filter { !sessionPresent || !$0.confirmed }
        }
        for subscription in toRestore {
            var mid: Int32 = 0
            let rc = mosquitto_subscribe_v5(handle, &mid, subscription.filter, subscription.qos.rawValue, 0, nil)
            guard rc == Int32(MOSQ_ERR_SUCCESS.rawValue) else { continue }
            state.withLock { state in
                // Callers that subscribed while offline complete with this SUBACK.
                if let callers = state.orphanedSubscribes.removeValue(forKey: subscription.filter), !callers.isEmpty {
                    state.waiters[mid] = .callers(callers, topic: subscription.filter)
                } else {
                    state.waiters[mid] = .restore(filter: subscription.filter)
                }
            }
        }
        let (watchers, waiters) = state.withLock { state in
            let watchers = state.set(.connected(sessionPresent: sessionPresent))
            defer { state.connectWaiters = [:] }
            return (watchers, Array(state.connectWaiters.values))
        }
        watchers.forEach { $0.yield(.connected(sessionPresent: sessionPresent)) }
        waiters.forEach { $0.resume() }
    }

    func onAcknowledged(mid: Int32, code: Int32) {
        let waiter: Waiter? = state.withLock { state in
            if let waiter = state.waiters.removeValue(forKey: mid) { return waiter }
            state.early[mid] = code
            return nil
        }
        if case .callers(let continuations, _) = waiter {
            continuations.forEach { $0.resume(returning: code) }
        }
    }

    func onSubscribed(mid: Int32, granted: [Int32]) {
        let code = granted.first ?? 0x80
        state.withLock { state in
            if code < 0x80, let filter = state.waiters[mid]?.filter,
                let index = state.subscriptions.firstIndex(where: { $0.filter == filter })
            {
                state.subscriptions[index].confirmed = true
            }
        }
        onAcknowledged(mid: mid, code: code)
    }

    func onMessage(_ message: UnsafePointer<mosquitto_message>, properties: OpaquePointer?) {
        let raw = message.pointee
        // libmosquitto frees topic and payload when this returns: copy both now.
        let topic = raw.topic.map { String(cString: $0) } ?? ""
        let payload: [UInt8] =
            raw.payloadlen > 0 && raw.payload != nil
            ? Array(UnsafeRawBufferPointer(start: raw.payload, count: Int(raw.payloadlen))) : []
        let received = MQTTMessage(
            topic: topic, payload: payload, qos: QoS(rawValue: raw.qos) ?? .atMostOnce, retain: raw.retain,
            properties: isV5 ? MQTTProperties(cList: properties) : .none)
        onReceive?(received)
        // A service that takes every message in `onReceive` asks for no second copy.
        if configuration.inboundBufferSize == 0 { return }
        switch inbound.yield(received) {
        case .enqueued: self.received.add(1, ordering: .relaxed)
        case .dropped: dropped.add(1, ordering: .relaxed)
        case .terminated: break
        @unknown default: break
        }
    }

    private func installCallbacks() {
        mosquitto_connect_v5_callback_set(handle) { _, obj, rc, flags, _ in
            ClientCore.from(obj).onConnect(rc: rc, flags: flags)
        }
        mosquitto_publish_v5_callback_set(handle) { _, obj, mid, reason, _ in
            ClientCore.from(obj).onAcknowledged(mid: mid, code: reason)
        }
        mosquitto_subscribe_v5_callback_set(handle) { _, obj, mid, count, granted, _ in
            let codes = (0..<Int(count)).map { granted?[$0] ?? 0x80 }
            ClientCore.from(obj).onSubscribed(mid: mid, granted: codes)
        }
        mosquitto_unsubscribe_v5_callback_set(handle) { _, obj, mid, _ in
            ClientCore.from(obj).onAcknowledged(mid: mid, code: 0)
        }
        mosquitto_message_v5_callback_set(handle) { _, obj, message, properties in
            guard let message else { return }
            ClientCore.from(obj).onMessage(message, properties: properties)
        }
    }
}

extension ClientCore.Waiter {
    /// The topic or filter the packet was about.
    var filter: String? {
        switch self {
        case .callers(_, let topic): topic
        case .restore(let filter): filter
        case .ignore: nil
        }
    }

    func adding(_ continuation: CheckedContinuation<Int32, any Error>) -> Self {
        switch self {
        case .callers(let continuations, let topic): .callers(continuations + [continuation], topic: topic)
        case .restore(let filter): .callers([continuation], topic: filter)
        case .ignore: self
        }
    }
}
