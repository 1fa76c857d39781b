import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A blocking plain TCP connection with timeouts: the agent's gpsd socket. (Webhooks and mail
/// go through libcurl: ``HTTPClient``, ``SMTPClient``.) Blocking calls belong on a thread of
/// their own (``Blocking/run(_:)``), never on the cooperative pool.
///
/// - Important: one owner at a time; not for concurrent use.
public final class TCPConnection: @unchecked Sendable {
    // @unchecked: the socket is used by one thread at a time (the owner's); shutdown() from
    // another thread only ends the stream.
    private var fd: Int32
    public let host: String
    public let port: Int

    /// Connects within `timeout` seconds; later reads and writes time out after `timeout` too.
    public convenience init(host: String, port: Int, timeout: Double) throws {
        try self.init(host: host, port: port, connectTimeout: timeout, ioTimeout: timeout)
    }

    /// Connects within `connectTimeout` seconds; reads and writes time out after `ioTimeout`
    /// (nil: never, for a stream that may be quiet for long, like gpsd's reports).
    public init(host: String, port: Int, connectTimeout timeout: Double, ioTimeout: Double?) throws {
        self.host = host
        self.port = port
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let first = list else {
            throw NetError(.resolve, "cannot resolve \(host): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(list) }
        var lastError = "no address"
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        var connected: Int32 = -1
        while let info = cursor {
            cursor = info.pointee.ai_next
            let socket = Glibc.socket(info.pointee.ai_family, info.pointee.ai_socktype, info.pointee.ai_protocol)
            if socket < 0 { continue }
            if Self.connect(socket, info.pointee.ai_addr, info.pointee.ai_addrlen, timeout: timeout, error: &lastError)
            {
                connected = socket
                break
            }
            Glibc.close(socket)
        }
        guard connected >= 0 else { throw NetError(.connect, "cannot connect to \(host):\(port): \(lastError)") }
        fd = connected
        if let ioTimeout {
            var interval = timeval(
                tv_sec: Int(ioTimeout), tv_usec: Int((ioTimeout - ioTimeout.rounded(.down)) * 1_000_000))
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &interval, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &interval, socklen_t(MemoryLayout<timeval>.size))
        }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        // Linux has no SO_NOSIGPIPE: writes pass MSG_NOSIGNAL instead.
    }

    private static func connect(
        _ socket: Int32, _ address: UnsafeMutablePointer<sockaddr>?, _ length: socklen_t, timeout: Double,
        error: inout String
    ) -> Bool {
        let flags = fcntl(socket, F_GETFL, 0)
        _ = fcntl(socket, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(socket, F_SETFL, flags) }
        if Glibc.connect(socket, address, length) == 0 { return true }
        guard errno == EINPROGRESS else {
            error = String(cString: strerror(errno))
            return false
        }
        var poller = pollfd(fd: socket, events: Int16(POLLOUT), revents: 0)
        let ready = poll(&poller, 1, Int32(timeout * 1000))
        if ready == 0 {
            error = "timed out after \(timeout) s"
            return false
        }
        var status: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(socket, SOL_SOCKET, SO_ERROR, &status, &size)
        if ready < 0 || status != 0 {
            error = String(cString: strerror(status != 0 ? status : errno))
            return false
        }
        return true
    }

    deinit { close() }

    public func close() {
        if fd >= 0 {
            Glibc.close(fd)
            fd = -1
        }
    }

    /// Ends the connection both ways without closing the descriptor, so that a read blocked on
    /// another thread returns (end of stream) instead of racing a close.
    public func shutdown() {
        if fd >= 0 { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }
    }

    /// Writes every byte.
    public func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written: Int = bytes.withUnsafeBufferPointer { buffer in
                let start = buffer.baseAddress! + offset
                return Glibc.send(fd, start, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if written <= 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK {
                    throw NetError(.timeout, "writing to \(host):\(port) timed out")
                }
                throw NetError(.io, "writing to \(host):\(port) failed: \(String(cString: strerror(errno)))")
            }
            offset += written
        }
    }

    public func write(_ text: String) throws { try write(Array(text.utf8)) }

    /// Reads what is there (at most `limit` bytes); empty at the end of the stream.
    public func read(limit: Int = 16_384) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: limit)
        let count: Int = buffer.withUnsafeMutableBufferPointer { pointer in
            return Glibc.recv(fd, pointer.baseAddress, limit, 0)
        }
        if count < 0 {
            if errno == EAGAIN || errno == EWOULDBLOCK {
                throw NetError(.timeout, "reading from \(host):\(port) timed out")
            }
            throw NetError(.io, "reading from \(host):\(port) failed: \(String(cString: strerror(errno)))")
        }
        return Array(buffer.prefix(max(0, count)))
    }
}

/// Runs blocking network work off the threads Swift concurrency runs tasks on, so that a slow
/// peer never holds one of those few: on a pool of the process's (threads kept for the next
/// call and asleep while idle, not one new thread per call), at most `pool.size` at once.
public enum Blocking {
    static let pool = BlockingPool(size: 64, name: "blocking")

    public static func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await pool.run(work)
    }
}
