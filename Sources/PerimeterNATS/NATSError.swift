import CNats

/// A failed call into the NATS C client: the function, what it was called on, the library's
/// status and its last error text (the server's answer, e.g. "wrong last sequence: 12").
public struct NATSError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The C client's `natsStatus`.
    public var code: Int
    public var function: String
    public var context: String
    public var text: String

    public var description: String { "\(function) (\(context)): \(text)" }

    public init(code: Int, function: String, context: String, text: String) {
        self.code = code
        self.function = function
        self.context = context
        self.text = text
    }

    /// Whether the key or bucket was not there.
    public var isNotFound: Bool { code == Int(NATS_NOT_FOUND.rawValue) }

    /// Whether the store refused the write because the key was not at the expected revision
    /// (or, for a create, already held a value).
    public var isConflict: Bool { text.contains("wrong last sequence") || text.contains("key exists") }

    /// Turns a status into nothing (`NATS_OK`) or a ``NATSError``.
    static func check(_ status: natsStatus, _ function: String, context: String) throws(NATSError) {
        guard status != NATS_OK else { return }
        var last = NATS_OK
        let detail = nats_GetLastError(&last).map { String(cString: $0) } ?? ""
        let base = String(cString: natsStatus_GetText(status))
        throw NATSError(
            code: Int(status.rawValue), function: function, context: context,
            text: detail.isEmpty || detail == base ? base : "\(base): \(detail)")
    }
}
