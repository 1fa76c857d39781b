import CMicroHTTPD
import Synchronization

/// What a streaming response's source gives when the connection can take more.
public enum HTTPStreamChunk: Sendable, Equatable {
    /// Bytes to send (any length: what does not fit now is sent on the next turns).
    case bytes([UInt8])
    /// Nothing now: the connection waits, using no thread, until ``HTTPStream/wake()``.
    case later
    /// The response is complete: the connection ends.
    case end
}

/// The producer of a streaming response (e.g. Server-Sent Events). The server pulls from it
/// only when the client's connection can take more, so a slow client leaves the bytes with
/// the source, which decides how much to keep (e.g. only the latest state).
///
/// - Important: ``next()`` runs on one of the server's threads and must not block. It is never
///   called concurrently for one stream; ``start(_:)`` and ``stop()`` are each called once.
public protocol HTTPStreamSource: AnyObject, Sendable {
    /// The response starts: keep `stream` to wake it when there is something new.
    func start(_ stream: HTTPStream)
    /// The next bytes, ``HTTPStreamChunk/later`` or ``HTTPStreamChunk/end``.
    func next() -> HTTPStreamChunk
    /// The connection ended (client gone, timed out, response complete or server stopping).
    func stop()
}

/// One open streaming response, as its source sees it: wakes the connection when the source
/// has something new, and says whether it is still open.
///
/// The connection is suspended in libmicrohttpd (no thread, no timeout) while its source has
/// nothing; ``wake()`` resumes it. A stream that is woken but cannot write (the client stopped
/// reading) times out after the server's ``HTTPServer/Limits/idleTimeoutSeconds``.
public final class HTTPStream: @unchecked Sendable {
    // @unchecked: `connection` is a libmicrohttpd handle, valid until the response is freed;
    // it is used only under `state`'s lock while `closed` is false (see wake()).
    private let connection: OpaquePointer
    let source: any HTTPStreamSource
    /// The server, until the stream is freed (it then forgets the stream).
    let server: HTTPServer
    private struct State {
        var suspended = false
        /// A wake arrived while the source was being asked: ask again instead of suspending.
        var woken = false
        var closed = false
        var stopping = false
    }
    private let state = Mutex(State())
    /// Bytes the source gave that did not fit into the last buffer.
    private let leftover = Mutex<(bytes: [UInt8], offset: Int)>(([], 0))

    init(connection: OpaquePointer, source: any HTTPStreamSource, server: HTTPServer) {
        self.connection = connection
        self.source = source
        self.server = server
    }

    /// False once the connection has ended or the server is stopping.
    public var isOpen: Bool { state.withLock { !$0.closed && !$0.stopping } }

    /// There is something new: the server asks the source again soon. Any thread, any time.
    public func wake() {
        let resume = state.withLock { state -> Bool in
            if state.closed { return false }
            if state.suspended {
                state.suspended = false
                return true
            }
            state.woken = true
            return false
        }
        // Outside the lock: only a suspended connection is resumed, and a suspended connection
        // is neither processed nor closed by libmicrohttpd until it is resumed.
        if resume { MHD_resume_connection(connection) }
    }

    /// The server is stopping: the next turn ends the response.
    func finish() {
        state.withLock { $0.stopping = true }
        wake()
    }

    func closed() {
        let first = state.withLock { state -> Bool in
            defer { state.closed = true }
            return !state.closed
        }
        if first { source.stop() }
    }

    /// libmicrohttpd's content reader: fills `buffer` with up to `max` bytes; 0 after suspending
    /// the connection, -1 at the end of the stream.
    func read(into buffer: UnsafeMutablePointer<CChar>, max: Int) -> Int {
        while true {
            let copied = leftover.withLock { leftover -> Int in
                let count = min(max, leftover.bytes.count - leftover.offset)
                guard count > 0 else { return 0 }
                leftover.bytes.withUnsafeBufferPointer { bytes in
                    UnsafeMutableRawPointer(buffer).copyMemory(
                        from: bytes.baseAddress! + leftover.offset, byteCount: count)
                }
                leftover.offset += count
                if leftover.offset == leftover.bytes.count { leftover = ([], 0) }
                return count
            }
            if copied > 0 { return copied }
            if state.withLock({ $0.stopping }) { return HTTPServer.endOfStream }
            switch source.next() {
            case .bytes(let bytes):
                leftover.withLock { $0 = (bytes, 0) }
            case .end:
                return HTTPServer.endOfStream
            case .later:
                let suspended = state.withLock { state -> Bool in
                    if state.woken || state.stopping {
                        state.woken = false
                        return false
                    }
                    state.suspended = true
                    // The only safe place to suspend is this callback (microhttpd.h).
                    MHD_suspend_connection(connection)
                    return true
                }
                if suspended { return 0 }
            }
        }
    }

    /// Bytes taken from the source and not yet handed to libmicrohttpd.
    var pendingBytes: Int { leftover.withLock { $0.bytes.count - $0.offset } }
}
