import Foundation

/// A webhook signing secret: `whsec_` followed by base64 (the Standard Webhooks form; the key
/// is the decoded bytes), or any other text of at least 16 characters (the key is its UTF-8
/// bytes — a receiver using a Standard Webhooks library is given `whsec_` + base64 of it).
public struct WebhookSecret: Sendable, Hashable {
    public let key: [UInt8]

    /// - Throws: ``WebhookSecret/Problem`` saying what is wrong with the text (never echoing it).
    public init(_ text: String) throws(Problem) {
        if text.hasPrefix("whsec_") {
            guard let data = Data(base64Encoded: String(text.dropFirst(6))) else {
                throw Problem("a whsec_ secret must be base64 after the prefix")
            }
            guard (24...64).contains(data.count) else {
                throw Problem("a whsec_ secret must decode to 24 to 64 bytes, not \(data.count)")
            }
            key = Array(data)
        } else {
            guard text.count >= 16 else {
                throw Problem("a signing secret of at least 16 characters (or whsec_ and base64) is required")
            }
            key = Array(text.utf8)
        }
    }

    public struct Problem: Error, Sendable, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }
}

/// The Standard Webhooks scheme (standardwebhooks.com, spec 1.0.0): `webhook-id`,
/// `webhook-timestamp` and `webhook-signature: v1,<base64 HMAC-SHA256 of id.timestamp.body>`.
/// The HMAC itself is libcrypto's (PerimeterNet); these are the pieces around it.
public enum StandardWebhooks {
    /// The notification's stable id as `webhook-id`: its idempotency key, with `%` and `.`
    /// escaped (`%25`, `%2E`) — the spec wants no `.` in the id, which separates the signed
    /// parts. Keys are ASCII without `%` or `.` in the usual case, and then unchanged.
    public static func webhookID(key: String) -> String {
        guard key.contains(where: { $0 == "." || $0 == "%" }) else { return key }
        return key.replacingOccurrences(of: "%", with: "%25").replacingOccurrences(of: ".", with: "%2E")
    }

    /// `{id}.{timestamp}.{body}`, the bytes signed.
    public static func signedContent(id: String, timestamp: Int64, body: [UInt8]) -> [UInt8] {
        Array("\(id).\(timestamp).".utf8) + body
    }

    /// `v1,<base64 of mac>`.
    public static func signatureHeader(mac: [UInt8]) -> String {
        "v1," + Data(mac).base64EncodedString()
    }
}
