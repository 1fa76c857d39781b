import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// An HTTP response as a test reads it off the socket: status, headers (in order), body.
public struct HTTPExchange: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: String

    /// The first header named `name` (any case).
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// Every header named `name` (any case), e.g. each `Set-Cookie`.
    public func headers(named name: String) -> [String] {
        headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
    }

    /// Parses a whole HTTP/1.x response (Content-Length or read to the end; no chunked bodies).
    public init(parsing text: String) {
        let split = text.range(of: "\r\n\r\n")
        let head = split.map { String(text[..<$0.lowerBound]) } ?? text
        body = split.map { String(text[$0.upperBound...]) } ?? ""
        let lines = head.components(separatedBy: "\r\n")
        status = lines.first?.split(separator: " ", maxSplits: 2).dropFirst().first.flatMap { Int($0) } ?? 0
        headers = lines.dropFirst().compactMap { line in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
    }
}

/// Calls `body` with `host`:`port` as an IPv4 socket address and its length (bind, connect).
private func withIPv4Address(
    _ host: String, port: Int, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32
) -> Int32 {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = UInt16(port).bigEndian
    address.sin_addr.s_addr = inet_addr(host)
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
}

/// Opens a TCP connection to 127.0.0.1:`port`, from the loopback address `source` when given
/// (any of 127.0.0.0/8 works on Linux: several "clients" on one machine, for per-IP limits).
public func connectLoopback(port: Int, from source: String? = nil, readTimeout: Duration? = nil) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw ChildFailure(message: "socket failed") }
    if let source {
        guard withIPv4Address(source, port: 0, { bind(fd, $0, $1) }) == 0 else {
            close(fd)
            throw ChildFailure(message: "cannot bind to \(source): \(String(cString: strerror(errno)))")
        }
    }
    guard withIPv4Address("127.0.0.1", port: port, { connect(fd, $0, $1) }) == 0 else {
        close(fd)
        throw ChildFailure(message: "nothing listens on 127.0.0.1:\(port)")
    }
    if let readTimeout {
        let (seconds, attoseconds) = readTimeout.components
        var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }
    return fd
}

/// Sends all of `bytes`; false when the peer has gone.
@discardableResult
public func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var sent = 0
    while sent < bytes.count {
        let count = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if count <= 0 { return false }
        sent += count
    }
    return true
}

/// Reads until the peer closes or `timeout` passes (then whatever came).
public func readToEnd(_ fd: Int32, timeout: Duration = .seconds(30)) -> String {
    var timeoutValue = timeval(tv_sec: 0, tv_usec: 100_000)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeoutValue, socklen_t(MemoryLayout<timeval>.size))
    var response: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        let count = recv(fd, &buffer, buffer.count, 0)
        if count == 0 { break }
        if count > 0 { response += buffer[0..<count] }
        if count < 0 && errno != EAGAIN && errno != EWOULDBLOCK { break }
    }
    return String(decoding: response, as: UTF8.self)
}

/// One HTTP/1.1 request on a connection of its own (`Connection: close`), read to the end.
/// - Parameters:
///   - host: the `Host` header; nil sends none.
///   - headers: more header lines, e.g. `"Cookie: a=b"`.
///   - body: sent with its Content-Length (form-encoded unless a Content-Type is among `headers`).
///   - source: the loopback address to connect from.
public func httpRequest(
    port: Int, method: String = "GET", path: String, host: String? = "127.0.0.1", headers: [String] = [],
    body: String? = nil, from source: String? = nil, timeout: Duration = .seconds(30)
) throws -> HTTPExchange {
    let fd = try connectLoopback(port: port, from: source)
    defer { close(fd) }
    var lines = ["\(method) \(path) HTTP/1.1"]
    if let host { lines.append("Host: \(host)") }
    lines += headers
    lines.append("Connection: close")
    if let body {
        if !headers.contains(where: { $0.lowercased().hasPrefix("content-type:") }) {
            lines.append("Content-Type: application/x-www-form-urlencoded")
        }
        lines.append("Content-Length: \(body.utf8.count)")
    }
    sendAll(fd, Array((lines.joined(separator: "\r\n") + "\r\n\r\n" + (body ?? "")).utf8))
    return HTTPExchange(parsing: readToEnd(fd, timeout: timeout))
}
