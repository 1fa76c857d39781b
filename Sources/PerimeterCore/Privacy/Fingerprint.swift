/// What the gate keeps of a subject's last published diagnostics: enough to tell whether they
/// changed, not the document itself.
///
/// A 64-bit FNV-1a hash of the document's text with sorted keys, the same in every process, so
/// a restarted evaluator does not republish every subject's diagnostics. Keeping the documents
/// (twelve members each) cost over a kilobyte per subject in memory and most of the snapshot
/// (`bench restart`). Snapshots that hold the documents are still read (each is hashed).
struct Fingerprint: Sendable, Hashable, Codable {
    let value: UInt64

    init(value: UInt64) { self.value = value }

    init(_ document: JSONValue) { self.init(text: document.serialized(sortedKeys: true)) }

    /// The hash of a document's text (with sorted keys, as ``init(_:)`` serializes it).
    init(text: String) {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        value = hash
    }

    /// Written as 16 hex digits: JSON numbers beyond 2^53 are not read back exactly everywhere.
    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let text = try? container.decode(String.self), text.utf8.count == 16,
            let value = UInt64(text, radix: 16)
        {
            self = Fingerprint(value: value)
        } else {
            self = Fingerprint(try container.decode(JSONValue.self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        let digits = String(value, radix: 16)
        try container.encode(String(repeating: "0", count: 16 - digits.utf8.count) + digits)
    }
}
