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

    init(_ document: JSONValue) {
        var hash = Hasher()
        hash.add(document.serialized(sortedKeys: true))
        self = hash.fingerprint
    }

    /// FNV-1a 64 over text given piece by piece (the pieces of a document's text with sorted keys
    /// give the document's fingerprint).
    struct Hasher {
        private var value: UInt64 = 0xcbf2_9ce4_8422_2325

        mutating func add(_ text: String) {
            // Over the string's contiguous bytes: iterating `utf8` went through the generic
            // collection witnesses, 1–2 % of the evaluator's CPU at peak (`perf`).
            var text = text
            value = text.withUTF8 { bytes in
                var value = self.value
                for byte in bytes {
                    value ^= UInt64(byte)
                    value &*= 0x0000_0100_0000_01b3
                }
                return value
            }
        }

        var fingerprint: Fingerprint { Fingerprint(value: value) }
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
