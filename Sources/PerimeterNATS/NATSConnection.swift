import CNats
import Foundation

/// A connection to a NATS cluster (its client port, not MQTT), for JetStream key-value.
///
/// - Important: `@unchecked Sendable` because it holds C handles: the C client locks its
///   connection and JetStream context internally, so calls from several threads are safe;
///   the handles are destroyed once, in ``close()`` (or deinit), after which calls throw.
public final class NATSConnection: @unchecked Sendable {
    private var connection: OpaquePointer?
    var jetStream: OpaquePointer?
    public let servers: [String]

    /// Connects to the first server of `servers` that answers (`nats://host:port`), reconnecting
    /// to any of them for as long as the connection lives.
    /// - Parameters:
    ///   - timeout: for the connect and for every JetStream request (a KV read or write).
    /// - Throws: ``NATSError`` naming the servers when none answers.
    public init(servers: [String], timeout: Duration = .seconds(2)) throws(NATSError) {
        self.servers = servers
        let context = servers.joined(separator: ",")
        var options: OpaquePointer?
        try NATSError.check(natsOptions_Create(&options), "natsOptions_Create", context: context)
        defer { natsOptions_Destroy(options) }
        let milliseconds = Int64(
            timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        var pointers = servers.map { strdup($0) }
        defer { pointers.forEach { free($0) } }
        let status = pointers.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) {
                natsOptions_SetServers(options, $0, Int32(buffer.count))
            }
        }
        try NATSError.check(status, "natsOptions_SetServers", context: context)
        try NATSError.check(natsOptions_SetTimeout(options, milliseconds), "natsOptions_SetTimeout", context: context)
        try NATSError.check(natsOptions_SetMaxReconnect(options, -1), "natsOptions_SetMaxReconnect", context: context)
        try NATSError.check(
            natsOptions_SetReconnectWait(options, 100), "natsOptions_SetReconnectWait", context: context)
        try NATSError.check(natsConnection_Connect(&connection, options), "natsConnection_Connect", context: context)
        var jsOptions = jsOptions()
        try NATSError.check(jsOptions_Init(&jsOptions), "jsOptions_Init", context: context)
        jsOptions.Wait = milliseconds
        let status2 = natsConnection_JetStream(&jetStream, connection, &jsOptions)
        if status2 != NATS_OK {
            natsConnection_Destroy(connection)
            connection = nil
            try NATSError.check(status2, "natsConnection_JetStream", context: context)
        }
    }

    /// The key-value bucket `bucket` if it exists (nil when it does not): for readers that must
    /// not create it.
    public func existingKeyValue(bucket: String) throws(NATSError) -> NATSKeyValue? {
        var store: OpaquePointer?
        let status = bucket.withCString { js_KeyValue(&store, jetStream, $0) }
        if status == NATS_OK, let store { return NATSKeyValue(store: store, bucket: bucket, owner: self) }
        if status == NATS_NOT_FOUND { return nil }
        try NATSError.check(status, "js_KeyValue", context: bucket)
        return nil
    }

    /// The key-value bucket `bucket`, created when missing with `ttl` (how long a key lives after
    /// its last write) and `replicas`; an existing bucket is used as it is.
    public func keyValue(bucket: String, ttl: Duration, replicas: Int) throws(NATSError) -> NATSKeyValue {
        var store: OpaquePointer?
        let found = bucket.withCString { js_KeyValue(&store, jetStream, $0) }
        if found == NATS_OK, let store { return NATSKeyValue(store: store, bucket: bucket, owner: self) }
        var config = kvConfig()
        try NATSError.check(kvConfig_Init(&config), "kvConfig_Init", context: bucket)
        let status = bucket.withCString { name -> natsStatus in
            config.Bucket = name
            config.History = 1
            config.Replicas = Int32(replicas)
            // The stream's max age, in nanoseconds (the server refuses less than 100 ms).
            config.TTL = ttl.components.seconds * 1_000_000_000 + ttl.components.attoseconds / 1_000_000_000
            return js_CreateKeyValue(&store, jetStream, &config)
        }
        try NATSError.check(status, "js_CreateKeyValue", context: bucket)
        guard let store else {
            throw NATSError(code: -1, function: "js_CreateKeyValue", context: bucket, text: "no store")
        }
        return NATSKeyValue(store: store, bucket: bucket, owner: self)
    }

    /// The subjects of `stream` that hold messages and match `filter`, in one stream-info
    /// request (no watcher: it answers even while the subjects are being written).
    func subjects(stream: String, filter: String) throws(NATSError) -> [String] {
        var options = jsOptions()
        try NATSError.check(jsOptions_Init(&options), "jsOptions_Init", context: stream)
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var code = jsErrCode(rawValue: 0)
        let status = filter.withCString { text -> natsStatus in
            options.Stream.Info.SubjectsFilter = text
            return js_GetStreamInfo(&info, jetStream, stream, &options, &code)
        }
        try NATSError.check(status, "js_GetStreamInfo", context: "\(stream) subjects \(filter)")
        guard let info else { return [] }
        defer { jsStreamInfo_Destroy(info) }
        guard let subjects = info.pointee.State.Subjects else { return [] }
        return (0..<Int(subjects.pointee.Count)).compactMap { index in
            subjects.pointee.List[index].Subject.map { String(cString: $0) }
        }
    }

    /// Closes the connection; stores taken from it must not be used afterwards.
    public func close() {
        if let jetStream { jsCtx_Destroy(jetStream) }
        if let connection { natsConnection_Destroy(connection) }
        jetStream = nil
        connection = nil
    }

    deinit { close() }
}

/// What a partition lease keeper needs of a key-value bucket: ``NATSKeyValue``, or an
/// in-memory double in unit tests. Writes are compare-and-set where named so; reads may be
/// stale (a JetStream bucket answers gets from any replica, which may be behind the leader).
public protocol KeyValueBucket: Sendable {
    func create(_ key: String, _ value: [UInt8]) throws(NATSError) -> UInt64
    func update(_ key: String, _ value: [UInt8], last: UInt64) throws(NATSError) -> UInt64
    func get(_ key: String) throws(NATSError) -> NATSKeyValue.Entry?
    func put(_ key: String, _ value: [UInt8]) throws(NATSError) -> UInt64
    func keys(prefix: String) throws(NATSError) -> [String]
    func delete(_ key: String) throws(NATSError)
}

/// One JetStream key-value bucket.
///
/// - Important: `@unchecked Sendable` for the same reason as ``NATSConnection``; it keeps its
///   connection alive.
public final class NATSKeyValue: KeyValueBucket, @unchecked Sendable {
    private let store: OpaquePointer
    public let bucket: String
    private let owner: NATSConnection

    init(store: OpaquePointer, bucket: String, owner: NATSConnection) {
        self.store = store
        self.bucket = bucket
        self.owner = owner
    }

    deinit { kvStore_Destroy(store) }

    /// A key's current value and revision.
    public struct Entry: Sendable, Hashable {
        public var value: [UInt8]
        public var revision: UInt64

        public init(value: [UInt8], revision: UInt64) {
            self.value = value
            self.revision = revision
        }
    }

    /// Writes `value` under `key` only if the key holds no value; returns the new revision.
    /// - Throws: ``NATSError`` (``NATSError/isConflict`` when the key holds a value).
    public func create(_ key: String, _ value: [UInt8]) throws(NATSError) -> UInt64 {
        var revision: UInt64 = 0
        let status = value.withUnsafeBytes { bytes in
            kvStore_Create(&revision, store, key, bytes.baseAddress, Int32(bytes.count))
        }
        try NATSError.check(status, "kvStore_Create", context: "\(bucket)/\(key)")
        return revision
    }

    /// Writes `value` under `key` only if the key is at revision `last`; returns the new revision.
    /// - Throws: ``NATSError`` (``NATSError/isConflict`` when someone else wrote since, or the
    ///   key expired).
    public func update(_ key: String, _ value: [UInt8], last: UInt64) throws(NATSError) -> UInt64 {
        var revision: UInt64 = 0
        let status = value.withUnsafeBytes { bytes in
            kvStore_Update(&revision, store, key, bytes.baseAddress, Int32(bytes.count), last)
        }
        try NATSError.check(status, "kvStore_Update", context: "\(bucket)/\(key) at revision \(last)")
        return revision
    }

    /// The key's value, nil when it has none (never written, deleted, or expired). The bucket
    /// allows direct gets, so any replica may answer: a replica that is behind may give an
    /// older revision, or nothing for a key it has expired on its own clock while the leader's
    /// newer write has not reached it (nats-server 2.9).
    public func get(_ key: String) throws(NATSError) -> Entry? {
        var entry: OpaquePointer?
        let status = kvStore_Get(&entry, store, key)
        if status == NATS_NOT_FOUND { return nil }
        try NATSError.check(status, "kvStore_Get", context: "\(bucket)/\(key)")
        guard let entry else { return nil }
        defer { kvEntry_Destroy(entry) }
        let count = Int(kvEntry_ValueLen(entry))
        let value: [UInt8] =
            count > 0 ? Array(UnsafeRawBufferPointer(start: kvEntry_Value(entry), count: count)) : []
        return Entry(value: value, revision: kvEntry_Revision(entry))
    }

    /// Writes `value` under `key` whatever it holds; returns the new revision.
    public func put(_ key: String, _ value: [UInt8]) throws(NATSError) -> UInt64 {
        var revision: UInt64 = 0
        let status = value.withUnsafeBytes { bytes in
            kvStore_Put(&revision, store, key, bytes.baseAddress, Int32(bytes.count))
        }
        try NATSError.check(status, "kvStore_Put", context: "\(bucket)/\(key)")
        return revision
    }

    /// The keys under `prefix` (a whole token, e.g. `museum.m.`) that hold a value: deleted and
    /// expired keys are left out. One stream-info request for the subjects, then one read per
    /// key. Not `kvStore_Keys`: its watcher waits for a moment with nothing pending, which a
    /// bucket written every second by several keepers may never give (a suite run under load
    /// hung in it for minutes).
    public func keys(prefix: String) throws(NATSError) -> [String] {
        let subjectPrefix = "$KV.\(bucket)."
        var keys: [String] = []
        for subject in try owner.subjects(stream: "KV_\(bucket)", filter: subjectPrefix + prefix + ">") {
            guard subject.hasPrefix(subjectPrefix) else { continue }
            let key = String(subject.dropFirst(subjectPrefix.count))
            if try get(key) != nil { keys.append(key) }
        }
        return keys.sorted()
    }

    /// Deletes the key (a delete marker): a later ``create(_:_:)`` succeeds.
    public func delete(_ key: String) throws(NATSError) {
        try NATSError.check(kvStore_Delete(store, key), "kvStore_Delete", context: "\(bucket)/\(key)")
    }
}
