import Foundation

/// A small HTTP/1.1 client for webhooks: one request per connection (`Connection: close`),
/// http and https, a deadline for the whole exchange, bodies by length, chunked, or to the end.
public enum HTTPClient {
    public struct Response: Sendable {
        public var status: Int
        /// Header names lowercased.
        public var headers: [String: String]
        public var body: [UInt8]
    }

    /// POSTs `body` to `url`.
    /// - Throws: ``NetError`` when the exchange fails (no response).
    public static func post(
        _ url: URL, headers: [(String, String)], body: [UInt8], timeout: Double, tls: TCPConnection.TLS = .init()
    ) throws -> Response {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", let host = url.host else {
            throw NetError(.protocolError, "not an http(s) URL: \(url)")
        }
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        let connection = try TCPConnection(host: host, port: port, timeout: timeout)
        defer { connection.close() }
        if scheme == "https" { try connection.startTLS(tls) }
        var path = url.path.isEmpty ? "/" : url.path
        if let query = url.query { path += "?" + query }
        var head = "POST \(path) HTTP/1.1\r\nHost: \(host)\(url.port.map { ":\($0)" } ?? "")\r\n"
        head += "Content-Length: \(body.count)\r\nConnection: close\r\n"
        for (name, value) in headers {
            // Header values come from configuration and ids validated as plain ASCII; refuse
            // anything that could split the header block all the same.
            guard !name.contains(where: \.isNewline), !value.contains(where: \.isNewline) else {
                throw NetError(.protocolError, "header \(name) holds a line break")
            }
            head += "\(name): \(value)\r\n"
        }
        head += "\r\n"
        try connection.write(Array(head.utf8) + body)
        var received: [UInt8] = []
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let chunk = try connection.read()
            if chunk.isEmpty { break }
            received += chunk
            if let response = try? parse(received, complete: false) { return response }
            if Date() > deadline {
                throw NetError(.timeout, "no complete response from \(host):\(port) in \(timeout) s")
            }
            if received.count > 4 << 20 { break }
        }
        return try parse(received, complete: true)
    }

    /// Parses a response; with `complete: false` throws until the whole body is there.
    static func parse(_ bytes: [UInt8], complete: Bool) throws -> Response {
        let separator: [UInt8] = [13, 10, 13, 10]
        guard let end = bytes.firstRange(of: separator) else {
            throw NetError(.protocolError, "response without a complete header (\(bytes.count) bytes)")
        }
        let head = String(decoding: bytes[..<end.lowerBound], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ", maxSplits: 2)
        guard statusLine.count >= 2, statusLine[0].hasPrefix("HTTP/"), let status = Int(statusLine[1]) else {
            throw NetError(.protocolError, "not an HTTP status line: \(lines.first ?? head.prefix(80).description)")
        }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(
                in: .whitespaces)
        }
        var body = Array(bytes[end.upperBound...])
        if headers["transfer-encoding"]?.lowercased().contains("chunked") == true {
            body = try dechunk(body)
        } else if let length = headers["content-length"].flatMap(Int.init) {
            guard body.count >= length else { throw NetError(.protocolError, "body shorter than its Content-Length") }
            body = Array(body.prefix(length))
        } else if !complete {
            throw NetError(.protocolError, "body runs to the end of the stream")
        }
        return Response(status: status, headers: headers, body: body)
    }

    static func dechunk(_ bytes: [UInt8]) throws -> [UInt8] {
        var out: [UInt8] = []
        var index = 0
        while true {
            guard let lineEnd = bytes[index...].firstRange(of: [13, 10]) else {
                throw NetError(.protocolError, "incomplete chunk")
            }
            let sizeText = String(decoding: bytes[index..<lineEnd.lowerBound], as: UTF8.self)
            guard let size = Int(sizeText.split(separator: ";")[0].trimmingCharacters(in: .whitespaces), radix: 16)
            else { throw NetError(.protocolError, "bad chunk size '\(sizeText)'") }
            index = lineEnd.upperBound
            if size == 0 { return out }
            guard bytes.count >= index + size + 2 else { throw NetError(.protocolError, "incomplete chunk") }
            out += bytes[index..<index + size]
            index += size + 2
        }
    }
}
