import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP connection read line by line, with a blocking socket on its own thread (the agent
/// reads one socket; a thread per source is simpler than an event loop).
///
/// - Important: `@unchecked Sendable`: the file descriptor is written only by ``close()``
///   and read by the reading thread; closing it ends a blocked `read` with an error.
final class SocketLines: @unchecked Sendable {
    private let descriptor: Int32

    /// Connects to `host:port` (numeric or resolvable host).
    /// - Throws: ``AgentSourceError`` naming the endpoint and the system's reason.
    init(host: String, port: Int) throws {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &result)
        guard rc == 0, let first = result else {
            throw AgentSourceError("\(host):\(port): cannot resolve: \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(result) }
        var lastError = "no address"
        var address: UnsafeMutablePointer<addrinfo>? = first
        while let info = address {
            let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype, info.pointee.ai_protocol)
            if fd >= 0 {
                if connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 {
                    descriptor = fd
                    return
                }
                lastError = String(cString: strerror(errno))
                Glibc.close(fd)
            }
            address = info.pointee.ai_next
        }
        throw AgentSourceError("\(host):\(port): cannot connect: \(lastError)")
    }

    func write(_ text: String) throws {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes {
                Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if n <= 0 { throw AgentSourceError("write failed: \(String(cString: strerror(errno)))") }
            offset += n
        }
    }

    /// Lines as they arrive, until the peer closes or ``close()`` is called.
    func lines() -> AsyncThrowingStream<String, any Error> {
        AsyncThrowingStream { continuation in
            let thread = Thread { [self] in
                var buffer: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 65536)
                while true {
                    let n = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                    if n <= 0 { break }
                    buffer.append(contentsOf: chunk[0..<n])
                    while let newline = buffer.firstIndex(of: 0x0A) {
                        var line = buffer[..<newline]
                        if line.last == 0x0D { line = line.dropLast() }
                        continuation.yield(String(decoding: line, as: UTF8.self))
                        buffer.removeSubrange(...newline)
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { [self] _ in shutdown(descriptor, Int32(SHUT_RDWR)) }
            thread.start()
        }
    }

    func close() {
        shutdown(descriptor, Int32(SHUT_RDWR))
    }

    deinit {
        Glibc.close(descriptor)
    }
}
