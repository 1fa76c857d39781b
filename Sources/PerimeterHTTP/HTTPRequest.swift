/// One HTTP request as libmicrohttpd parsed it: method, path (percent-decoded, without the
/// query), query arguments, headers, cookies, the body of a POST, and the client's address.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path, percent-decoded by libmicrohttpd, without `?query`.
    public var path: String
    /// `HTTP/1.1` or `HTTP/1.0`.
    public var version: String
    /// Query arguments, decoded; the last of a repeated name wins.
    public var query: [String: String]
    /// Header names in lower case; a repeated header's values joined with ", ".
    public var headers: [String: String]
    /// Cookies by name, as the `Cookie` header(s) carried them.
    public var cookies: [String: String]
    /// The body (POST only), at most the server's ``HTTPServer/Limits/requestBodyBytes``.
    public var body: [UInt8]
    /// The client's address as text, e.g. `127.0.0.1`.
    public var client: String

    public init(
        method: String = "GET", path: String, version: String = "HTTP/1.1", query: [String: String] = [:],
        headers: [String: String] = [:], cookies: [String: String] = [:], body: [UInt8] = [], client: String = ""
    ) {
        self.method = method
        self.path = path
        self.version = version
        self.query = query
        self.headers = headers
        self.cookies = cookies
        self.body = body
        self.client = client
    }

    /// A header's value by name (any case).
    public func header(_ name: String) -> String? { headers[name.lowercased()] }

    /// The body as `application/x-www-form-urlencoded` fields (the last of a repeated name wins).
    public var form: [String: String] {
        var fields: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = Self.formDecode(parts[0]) else { continue }
            fields[name] = parts.count > 1 ? Self.formDecode(parts[1]) ?? "" : ""
        }
        return fields
    }

    /// The host part of a `Host` header or an `Origin`'s authority, lower case, without the
    /// port: `Example.org:8080` → `example.org`, `[::1]:80` → `[::1]`.
    public static func hostName(_ authority: String) -> String {
        let text = authority.lowercased()
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") { return String(text[...close]) }
        return String(text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
    }

    /// The host named by an `Origin` header (`http://host:port`), nil for `null` or garbage.
    public static func originHost(_ origin: String) -> String? {
        guard let scheme = origin.range(of: "://"), origin[..<scheme.lowerBound].allSatisfy(\.isLetter) else {
            return nil
        }
        let authority = origin[scheme.upperBound...].prefix { $0 != "/" }
        return authority.isEmpty ? nil : hostName(String(authority))
    }

    /// `path` when it is a path on this server (`/…`), else `/`: never another site (`//evil`,
    /// `/\evil`, a scheme) and never a line break, so it is safe in a `Location` header.
    public static func localPath(_ path: String?) -> String {
        guard let path, path.hasPrefix("/"), !path.hasPrefix("//"), !path.hasPrefix("/\\"),
            !path.unicodeScalars.contains(where: {
                $0.properties.generalCategory == .control || $0 == "\u{2028}" || $0 == "\u{2029}"
            })
        else { return "/" }
        return path
    }

    /// `+` as space, then percent-decoding; nil for a malformed escape or invalid UTF-8.
    static func formDecode(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var input = Array(text.utf8)[...]
        while let byte = input.popFirst() {
            switch byte {
            case UInt8(ascii: "+"): bytes.append(UInt8(ascii: " "))
            case UInt8(ascii: "%"):
                guard input.count >= 2, let high = hex(input.removeFirst()), let low = hex(input.removeFirst()) else {
                    return nil
                }
                bytes.append(high << 4 | low)
            default: bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hex(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
