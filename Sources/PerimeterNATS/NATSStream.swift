import CNats
import Foundation
import Synchronization

/// A message read from a JetStream stream: its subject, payload, the time the stream stored it
/// and its sequence in the stream.
public struct NATSStreamMessage: Sendable {
    public var subject: String
    public var payload: [UInt8]
    /// When the stream stored it (the server's clock); nil for a message without JetStream's
    /// metadata.
    public var stored: Date?
    public var sequence: UInt64
}

extension NATSConnection {
    /// Makes sure the stream `name` exists, capturing `subjects`, keeping messages `maxAge`,
    /// replicated `replicas` times (file storage). An existing stream is used as it is.
    public func ensureStream(name: String, subjects: [String], maxAge: Duration, replicas: Int) throws(NATSError) {
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var code = jsErrCode(rawValue: 0)
        if js_GetStreamInfo(&info, jetStream, name, nil, &code) == NATS_OK {
            if let info { jsStreamInfo_Destroy(info) }
            return
        }
        var config = jsStreamConfig()
        try NATSError.check(jsStreamConfig_Init(&config), "jsStreamConfig_Init", context: name)
        var pointers: [UnsafePointer<CChar>?] = subjects.map { UnsafePointer(strdup($0)) }
        defer { pointers.forEach { free(UnsafeMutableRawPointer(mutating: $0)) } }
        let status = name.withCString { text -> natsStatus in
            pointers.withUnsafeMutableBufferPointer { buffer -> natsStatus in
                config.Name = text
                config.Subjects = buffer.baseAddress
                config.SubjectsLen = Int32(buffer.count)
                config.MaxAge =
                    maxAge.components.seconds * 1_000_000_000 + maxAge.components.attoseconds / 1_000_000_000
                config.Storage = js_FileStorage
                config.Replicas = Int64(replicas)
                return js_AddStream(&info, jetStream, &config, nil, &code)
            }
        }
        if let info { jsStreamInfo_Destroy(info) }
        // Two evaluators creating it at once: the second finds it made.
        if code == JSStreamNameExistErr { return }
        try NATSError.check(status, "js_AddStream", context: name)
    }

    /// Removes every message of the stream `name` (the stream stays). Tests use it to put what
    /// was published so far out of reach of a read back, as age would.
    public func purgeStream(name: String) throws(NATSError) {
        var code = jsErrCode(rawValue: 0)
        try NATSError.check(js_PurgeStream(jetStream, name, nil, &code), "js_PurgeStream", context: name)
    }

    /// Reads the stream's messages on `subject` (wildcards allowed) stored from `start` on, then
    /// every new one as it is stored, in order, through an ordered consumer (no acknowledgements;
    /// the client recreates the consumer after a gap). `handler` is called on the client's
    /// thread, one message at a time.
    public func follow(
        subject: String, from start: Date, handler: @escaping @Sendable (NATSStreamMessage) -> Void
    ) throws(NATSError) -> NATSStreamFollower {
        try follow(subject: subject, start: .time(start), handler: handler)
    }

    /// ``follow(subject:from:handler:)`` from the first message after stream sequence
    /// `sequence` (where a read back with ``reader(subject:from:)`` ended).
    public func follow(
        subject: String, after sequence: UInt64, handler: @escaping @Sendable (NATSStreamMessage) -> Void
    ) throws(NATSError) -> NATSStreamFollower {
        try follow(subject: subject, start: .sequence(sequence + 1), handler: handler)
    }

    private enum Start {
        case time(Date)
        case sequence(UInt64)
    }

    private func follow(
        subject: String, start: Start, handler: @escaping @Sendable (NATSStreamMessage) -> Void
    ) throws(NATSError) -> NATSStreamFollower {
        let box = NATSStreamFollower.Box(handler: handler)
        let closure = Unmanaged.passRetained(box).toOpaque()
        var options = jsSubOptions()
        try NATSError.check(jsSubOptions_Init(&options), "jsSubOptions_Init", context: subject)
        options.Ordered = true
        switch start {
        case .time(let date):
            options.Config.DeliverPolicy = js_DeliverByStartTime
            options.Config.OptStartTime = Int64(date.timeIntervalSince1970 * 1_000_000_000)
        case .sequence(let sequence):
            options.Config.DeliverPolicy = js_DeliverByStartSequence
            options.Config.OptStartSeq = sequence
        }
        var subscription: OpaquePointer?
        var code = jsErrCode(rawValue: 0)
        let status = js_Subscribe(
            &subscription, jetStream, subject, NATSStreamFollower.onMessage, closure, nil, &options, &code)
        guard status == NATS_OK, let subscription else {
            Unmanaged<NATSStreamFollower.Box>.fromOpaque(closure).release()
            try NATSError.check(status, "js_Subscribe", context: subject)
            throw NATSError(code: -1, function: "js_Subscribe", context: subject, text: "no subscription")
        }
        // The box lives until the client says no callback will come any more.
        natsSubscription_SetOnCompleteCB(subscription, NATSStreamFollower.onComplete, closure)
        return NATSStreamFollower(subscription: subscription, owner: self)
    }
}

extension NATSConnection {
    /// A read back of the stream's messages on `subject` (wildcards allowed) stored from `start`
    /// on, up to those stored when asked (``NATSStreamReader/readToEnd()``), through an
    /// ephemeral pull consumer without acknowledgements, deleted by ``NATSStreamReader/close()``.
    public func reader(subject: String, from start: Date) throws(NATSError) -> NATSStreamReader {
        var options = jsSubOptions()
        try NATSError.check(jsSubOptions_Init(&options), "jsSubOptions_Init", context: subject)
        options.Config.DeliverPolicy = js_DeliverByStartTime
        options.Config.OptStartTime = Int64(start.timeIntervalSince1970 * 1_000_000_000)
        options.Config.AckPolicy = js_AckNone
        var subscription: OpaquePointer?
        var code = jsErrCode(rawValue: 0)
        let status = js_PullSubscribe(&subscription, jetStream, subject, nil, nil, &options, &code)
        guard status == NATS_OK, let subscription else {
            try NATSError.check(status, "js_PullSubscribe", context: subject)
            throw NATSError(code: -1, function: "js_PullSubscribe", context: subject, text: "no subscription")
        }
        return NATSStreamReader(subscription: subscription, subject: subject, owner: self)
    }
}

/// A read back of a stream (``NATSConnection/reader(subject:from:)``).
///
/// - Important: `@unchecked Sendable`: the C subscription is locked by the client; it is used
///   by one caller at a time and destroyed once, by ``close()``.
public final class NATSStreamReader: @unchecked Sendable {
    private let subscription: Mutex<Int>
    private let subject: String
    private let owner: NATSConnection

    init(subscription: OpaquePointer, subject: String, owner: NATSConnection) {
        self.subscription = Mutex(Int(bitPattern: UnsafeRawPointer(subscription)))
        self.subject = subject
        self.owner = owner
    }

    /// The messages not read yet, up to the last one stored when the consumer is asked how many
    /// it has pending, in order; empty when there is none. Later calls return what was stored
    /// since.
    /// - Throws: ``NATSError`` when the consumer cannot be asked or a fetch fails.
    public func readToEnd(batch: Int = 256) throws(NATSError) -> [NATSStreamMessage] {
        guard let subscription = OpaquePointer(bitPattern: self.subscription.withLock { $0 }) else {
            throw NATSError(code: -1, function: "readToEnd", context: subject, text: "reader closed")
        }
        var messages: [NATSStreamMessage] = []
        var code = jsErrCode(rawValue: 0)
        while true {
            var info: UnsafeMutablePointer<jsConsumerInfo>?
            try NATSError.check(
                natsSubscription_GetConsumerInfo(&info, subscription, nil, &code), "natsSubscription_GetConsumerInfo",
                context: subject)
            let pending = info?.pointee.NumPending ?? 0
            if let info { jsConsumerInfo_Destroy(info) }
            if pending == 0 { return messages }
            var request = jsFetchRequest()
            try NATSError.check(jsFetchRequest_Init(&request), "jsFetchRequest_Init", context: subject)
            request.Batch = Int32(min(UInt64(batch), pending))
            request.NoWait = true
            request.Expires = 5_000_000_000
            var list = natsMsgList()
            let status = natsSubscription_FetchRequest(&list, subscription, &request)
            defer { natsMsgList_Destroy(&list) }
            // Pending a moment ago, gone now (aged out of the stream): nothing more to read.
            if status == NATS_TIMEOUT && list.Count == 0 { return messages }
            try NATSError.check(status, "natsSubscription_FetchRequest", context: subject)
            var last: UInt64 = 1
            for index in 0..<Int(list.Count) {
                guard let message = list.Msgs[index] else { continue }
                let read = NATSStreamFollower.read(message)
                messages.append(read.message)
                last = read.pending
            }
            // The last message fetched says how many the consumer still has: none, the end.
            if list.Count > 0 && last == 0 { return messages }
        }
    }

    /// Deletes the consumer; the reader cannot be used afterwards.
    public func close() {
        unsubscribeOnce(subscription)
    }

    deinit { close() }
}

/// A running ordered read of a stream (``NATSConnection/follow(subject:from:handler:)``).
///
/// - Important: `@unchecked Sendable`: the C subscription is locked by the client; ``stop()``
///   destroys it once.
public final class NATSStreamFollower: @unchecked Sendable {
    final class Box: Sendable {
        let handler: @Sendable (NATSStreamMessage) -> Void
        init(handler: @escaping @Sendable (NATSStreamMessage) -> Void) { self.handler = handler }
    }

    /// The C subscription's address (0 once stopped).
    private let subscription: Mutex<Int>
    private let owner: NATSConnection

    init(subscription: OpaquePointer, owner: NATSConnection) {
        self.subscription = Mutex(Int(bitPattern: UnsafeRawPointer(subscription)))
        self.owner = owner
    }

    static let onMessage:
        @convention(c) (OpaquePointer?, OpaquePointer?, OpaquePointer?, UnsafeMutableRawPointer?) ->
            Void = { _, _, message, closure in
                guard let message, let closure else { return }
                defer { natsMsg_Destroy(message) }
                let box = Unmanaged<Box>.fromOpaque(closure).takeUnretainedValue()
                box.handler(read(message).message)
            }

    /// A C message as ours, with the count of messages its consumer had pending after it
    /// (0 without JetStream metadata). The message stays the caller's to destroy.
    static func read(_ message: OpaquePointer) -> (message: NATSStreamMessage, pending: UInt64) {
        let subject = natsMsg_GetSubject(message).map { String(cString: $0) } ?? ""
        let length = Int(natsMsg_GetDataLength(message))
        var payload: [UInt8] = []
        if length > 0, let data = natsMsg_GetData(message) {
            payload = data.withMemoryRebound(to: UInt8.self, capacity: length) {
                Array(UnsafeBufferPointer(start: $0, count: length))
            }
        }
        var meta: UnsafeMutablePointer<jsMsgMetaData>?
        var stored: Date?
        var sequence: UInt64 = 0
        var pending: UInt64 = 0
        if natsMsg_GetMetaData(&meta, message) == NATS_OK, let meta {
            stored = Date(timeIntervalSince1970: Double(meta.pointee.Timestamp) / 1_000_000_000)
            sequence = meta.pointee.Sequence.Stream
            pending = meta.pointee.NumPending
            jsMsgMetaData_Destroy(meta)
        }
        return (NATSStreamMessage(subject: subject, payload: payload, stored: stored, sequence: sequence), pending)
    }

    static let onComplete: @convention(c) (UnsafeMutableRawPointer?) -> Void = { closure in
        guard let closure else { return }
        Unmanaged<Box>.fromOpaque(closure).release()
    }

    /// Stops reading (the consumer is deleted); no handler call starts after it returns
    /// except one already running.
    public func stop() {
        unsubscribeOnce(subscription)
    }

    deinit { stop() }
}

/// Unsubscribes and destroys the subscription whose address `subscription` holds, once: the
/// address is taken out under the lock, so a second call (or `deinit` after a stop) does nothing.
private func unsubscribeOnce(_ subscription: borrowing Mutex<Int>) {
    let address = subscription.withLock { value in
        defer { value = 0 }
        return value
    }
    guard let subscription = OpaquePointer(bitPattern: address) else { return }
    natsSubscription_Unsubscribe(subscription)
    natsSubscription_Destroy(subscription)
}
