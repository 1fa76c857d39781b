import CCurl
import Foundation

/// One easy handle for one transfer: the only place that touches libcurl's C API. Callers
/// (``HTTPClient``, ``SMTPClient``) set options through typed helpers, run ``perform()`` on a
/// thread of their own, and read what the callbacks collected.
///
/// The callbacks are `@convention(c)` functions; each gets this transfer's ``Collector`` back
/// as its `userdata` (an unretained pointer, valid because the transfer holds the collector for
/// as long as the handle's options point at it: a reuse resets them before it lets go).
///
/// - Important: one thread at a time. A transfer is used once and dropped, or started over
///   with ``reuse(context:maxBodyBytes:maxHeaderBytes:)``, which keeps the handle's open
///   connections and TLS sessions for the next request (``HTTPClient/Connections``).
final class CurlTransfer {
    private let handle: UnsafeMutableRawPointer  // CURL *, an opaque void pointer in curl.h
    private var collector: Collector
    private var lists: [UnsafeMutablePointer<curl_slist>] = []
    /// curl writes its words for a failure here; it keeps the pointer, so the buffer is
    /// allocated once (an array's storage may move) and freed with the handle.
    private let errorBuffer: UnsafeMutablePointer<CChar>
    private var describe: () -> String
    /// The request as it appears in errors, worked out when one is thrown (redacting a URL for
    /// every request that succeeds was a per cent of a webhook's cost).
    var context: String { describe() }

    /// What the callbacks collected, and the bounds they enforce.
    final class Collector {
        var body: [UInt8] = []
        var headerLines: [[UInt8]] = []
        var headerBytes = 0
        let maxBodyBytes: Int
        let maxHeaderBytes: Int
        /// Set by a callback that stopped the transfer, so the error says why.
        var abortReason: String?
        var upload: [UInt8] = []
        var uploadOffset = 0

        init(maxBodyBytes: Int, maxHeaderBytes: Int) {
            self.maxBodyBytes = maxBodyBytes
            self.maxHeaderBytes = maxHeaderBytes
        }
    }

    /// libcurl's global state, set up once before the first handle (curl_global_init is not
    /// thread-safe; a static let is initialised once, atomically).
    private static let global: CURLcode = curl_global_init(3)  // CURL_GLOBAL_ALL: SSL | WIN32

    /// - Parameters:
    ///   - context: the request as it appears in errors (no query, no credentials).
    init(context: @escaping @autoclosure () -> String, maxBodyBytes: Int, maxHeaderBytes: Int) throws(CurlError) {
        describe = context
        guard Self.global == CURLE_OK else {
            throw CurlError(
                .transfer, code: Int(Self.global.rawValue), function: "curl_global_init", context: context(),
                detail: String(cString: curl_easy_strerror(Self.global)))
        }
        guard let handle = curl_easy_init() else {
            throw CurlError(
                .transfer, code: -1, function: "curl_easy_init", context: context(), detail: "curl_easy_init failed")
        }
        self.handle = handle
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        collector = Collector(maxBodyBytes: maxBodyBytes, maxHeaderBytes: maxHeaderBytes)
        try setUp()
    }

    /// Starts the handle over for another request: every option back to curl's default (the
    /// lists freed after, since curl does not copy them), a fresh collector, the callbacks set
    /// again. What `curl_easy_reset` keeps is the point: the handle's open connections and TLS
    /// sessions, so a request to the same receiver skips the TCP and TLS set-up.
    func reuse(
        context: @escaping @autoclosure () -> String, maxBodyBytes: Int, maxHeaderBytes: Int
    ) throws(CurlError) {
        curl_easy_reset(handle)
        for list in lists { curl_slist_free_all(list) }
        lists.removeAll()
        describe = context
        errorBuffer.update(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        collector = Collector(maxBodyBytes: maxBodyBytes, maxHeaderBytes: maxHeaderBytes)
        try setUp()
    }

    /// The options every request has: the error buffer, no signals, the callbacks and their
    /// collector.
    private func setUp() throws(CurlError) {
        let pointer = Unmanaged.passUnretained(collector).toOpaque()
        try check(perimeter_curl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer), CURLOPT_ERRORBUFFER)
        try set(CURLOPT_NOSIGNAL, 1)  // many transfers on many threads: no SIGALRM for timeouts
        try check(perimeter_curl_setopt_write(handle, CURLOPT_WRITEFUNCTION, writeBody), CURLOPT_WRITEFUNCTION)
        try check(perimeter_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, pointer), CURLOPT_WRITEDATA)
        try check(perimeter_curl_setopt_write(handle, CURLOPT_HEADERFUNCTION, writeHeader), CURLOPT_HEADERFUNCTION)
        try check(perimeter_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, pointer), CURLOPT_HEADERDATA)
    }

    deinit {
        curl_easy_cleanup(handle)
        for list in lists { curl_slist_free_all(list) }
        errorBuffer.deallocate()
    }

    var collected: Collector { collector }

    func set(_ option: CURLoption, _ value: Int) throws(CurlError) {
        try check(perimeter_curl_setopt_long(handle, option, value), option)
    }

    /// Sets a string option; curl copies the string.
    func set(_ option: CURLoption, _ value: String) throws(CurlError) {
        try check(value.withCString { perimeter_curl_setopt_pointer(handle, option, $0) }, option)
    }

    /// A `…_MS` option from seconds.
    func set(_ option: CURLoption, seconds: Double) throws(CurlError) {
        try set(option, Int((seconds * 1000).rounded(.up)))
    }

    /// A `curl_off_t` option (`…_LARGE`).
    func set(_ option: CURLoption, offset: Int) throws(CurlError) {
        try check(perimeter_curl_setopt_off(handle, option, curl_off_t(offset)), option)
    }

    /// A pointer option; for data curl copies (`CURLOPT_COPYPOSTFIELDS`).
    func set(_ option: CURLoption, pointer: UnsafeRawPointer?) throws(CurlError) {
        try check(perimeter_curl_setopt_pointer(handle, option, pointer), option)
    }

    /// Sets a list option (headers, recipients); the list lives as long as the transfer.
    func set(_ option: CURLoption, list items: [String]) throws(CurlError) {
        var list: UnsafeMutablePointer<curl_slist>?
        for item in items {
            guard let appended = curl_slist_append(list, item) else {
                if let list { curl_slist_free_all(list) }
                throw CurlError(
                    .transfer, code: -1, function: "curl_slist_append", context: context, detail: "out of memory")
            }
            list = appended
        }
        guard let list else { return }
        lists.append(list)
        try check(perimeter_curl_setopt_pointer(handle, option, list), option)
    }

    /// Sends `bytes` as the upload (SMTP's DATA) through the read callback.
    func upload(_ bytes: [UInt8]) throws(CurlError) {
        collector.upload = bytes
        try set(CURLOPT_UPLOAD, 1)
        try check(perimeter_curl_setopt_read(handle, CURLOPT_READFUNCTION, readUpload), CURLOPT_READFUNCTION)
        try check(
            perimeter_curl_setopt_pointer(handle, CURLOPT_READDATA, Unmanaged.passUnretained(collector).toOpaque()),
            CURLOPT_READDATA)
    }

    /// Runs the transfer (blocking).
    /// - Throws: ``CurlError`` naming the request, with curl's reason or the callback's.
    func perform() throws(CurlError) {
        let code = curl_easy_perform(handle)
        guard code != CURLE_OK else { return }
        // curl's specific words (the error buffer) after its general ones for the code.
        let general = String(cString: curl_easy_strerror(code))
        errorBuffer[Int(CURL_ERROR_SIZE)] = 0  // curl NUL-terminates; this makes sure
        let specific = String(cString: errorBuffer)
        var detail =
            collector.abortReason ?? (specific.isEmpty || specific == general ? general : "\(general): \(specific)")
        // curl says only "Out of memory" when one header line exceeds its own limit (100 KiB,
        // CURL_MAX_HTTP_HEADER) before our header callback sees the line.
        let oversizedHeader = code == CURLE_OUT_OF_MEMORY && !collector.headerLines.isEmpty
        if oversizedHeader { detail += ": the answer's headers are too large (a line over curl's 100 KiB limit)" }
        let kind: CurlError.Kind
        switch code {
        case CURLE_OPERATION_TIMEDOUT: kind = .timeout
        case CURLE_WRITE_ERROR where collector.abortReason != nil: kind = .tooLarge
        case CURLE_OUT_OF_MEMORY where oversizedHeader: kind = .tooLarge
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE,
            CURLE_USE_SSL_FAILED, CURLE_SSL_CERTPROBLEM:
            kind = .tls
        default: kind = .transfer
        }
        throw CurlError(
            kind, code: Int(code.rawValue), function: "curl_easy_perform", context: context, detail: detail,
            responseCode: responseCode)
    }

    /// The last response code: the HTTP status, or the last SMTP reply code.
    var responseCode: Int {
        var code = 0
        _ = perimeter_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &code)
        return code
    }

    /// Connections curl opened for the last transfer (0 when it reused a kept one).
    var connectionsOpened: Int {
        var count = 0
        _ = perimeter_curl_getinfo_long(handle, CURLINFO_NUM_CONNECTS, &count)
        return count
    }

    /// Whether the connection this handle keeps from its last request, if any, is quiet:
    /// nothing to read on it and no end. An idle HTTP/1.1 connection has nothing to say;
    /// bytes on it are an answer nobody asked for (a receiver's wrong length, or a forged
    /// answer), which libcurl 7.88 would read as the next request's answer.
    var keptConnectionIsQuiet: Bool {
        var socket = CURL_SOCKET_BAD
        guard perimeter_curl_getinfo_socket(handle, CURLINFO_ACTIVESOCKET, &socket) == CURLE_OK,
            socket != CURL_SOCKET_BAD
        else { return true }  // none kept: the next request connects
        var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        return poll(&descriptor, 1, 0) == 0
    }

    /// `CURLOPT_URL` for errors, from curl's own table of options.
    private static func name(_ option: CURLoption) -> String {
        curl_easy_option_by_id(option).flatMap { $0.pointee.name }.map { "CURLOPT_" + String(cString: $0) }
            ?? "option \(option.rawValue)"
    }

    /// Names the option only when it failed: looking it up in curl's table (a scan) and building
    /// the text for every option set was a few per cent of a webhook's cost (`bench notifier`).
    private func check(_ code: CURLcode, _ option: CURLoption) throws(CurlError) {
        guard code != CURLE_OK else { return }
        throw CurlError(
            .transfer, code: Int(code.rawValue), function: "curl_easy_setopt(\(Self.name(option)))", context: context,
            detail: String(cString: curl_easy_strerror(code)))
    }
}

/// The body, kept up to the cap; past it the transfer stops (returning less than was given
/// makes curl fail with CURLE_WRITE_ERROR) and the reason is recorded.
private let writeBody: curl_write_callback = { data, size, count, userdata in
    let collector = Unmanaged<CurlTransfer.Collector>.fromOpaque(userdata!).takeUnretainedValue()
    let length = size * count
    guard collector.body.count + length <= collector.maxBodyBytes else {
        collector.abortReason = "the response body is larger than \(collector.maxBodyBytes) bytes; stopped reading"
        return 0
    }
    if length > 0, let data { collector.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: length)) }
    return length
}

/// Header lines as they come (a status line starts each response's block: an interim 100
/// response's lines are dropped), up to a cap on their total size.
private let writeHeader: curl_write_callback = { data, size, count, userdata in
    let collector = Unmanaged<CurlTransfer.Collector>.fromOpaque(userdata!).takeUnretainedValue()
    let length = size * count
    collector.headerBytes += length
    guard collector.headerBytes <= collector.maxHeaderBytes else {
        collector.abortReason =
            "the response headers are larger than \(collector.maxHeaderBytes) bytes; stopped reading"
        return 0
    }
    guard length > 0, let data else { return length }
    let line = Array(UnsafeRawBufferPointer(start: data, count: length))
    if line.starts(with: Array("HTTP/".utf8)) { collector.headerLines.removeAll() }
    collector.headerLines.append(line)
    return length
}

/// The upload, in the pieces curl asks for.
private let readUpload: curl_read_callback = { buffer, size, count, userdata in
    let collector = Unmanaged<CurlTransfer.Collector>.fromOpaque(userdata!).takeUnretainedValue()
    let room = size * count
    let take = min(room, collector.upload.count - collector.uploadOffset)
    guard take > 0, let buffer else { return 0 }
    collector.upload.withUnsafeBytes { source in
        UnsafeMutableRawPointer(buffer).copyMemory(
            from: source.baseAddress! + collector.uploadOffset, byteCount: take)
    }
    collector.uploadOffset += take
    return take
}
