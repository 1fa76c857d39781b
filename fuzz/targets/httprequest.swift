// libFuzzer target: what is left of HTTP request handling in our code once libmicrohttpd has
// parsed the request: form bodies, Host and Origin host names, the `next` path after sign-in.
// Built together with Sources/PerimeterCore and the file below (same module); see fuzz/README.md.
// fuzz-sources: Sources/PerimeterHTTP/HTTPRequest.swift
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    // The bytes as a form body: whatever it decodes to survives encoding and decoding again.
    let fields = HTTPRequest(path: "/", body: bytes).form
    let encoded = fields.map { "\(percentEncoded($0.key))=\(percentEncoded($0.value))" }.joined(separator: "&")
    let again = HTTPRequest(path: "/", body: Array(encoded.utf8)).form
    check(again == fields, "form round trip changed \(fields) into \(again) (via \(encoded))")

    // The bytes as a header value.
    let text = String(decoding: bytes, as: UTF8.self)
    let host = HTTPRequest.hostName(text)
    check(host == host.lowercased(), "host name not lower case: \(host)")
    check(host.hasPrefix("[") || !host.contains(":"), "a port left in the host name: \(host)")
    if let origin = HTTPRequest.originHost(text) {
        check(!origin.contains("/"), "a path in an origin's host: \(origin)")
    }
    let path = HTTPRequest.localPath(text)
    check(path.hasPrefix("/") && !path.hasPrefix("//") && !path.hasPrefix("/\\"), "leaves the site: \(path)")
    check(!path.contains(where: { $0.isNewline }), "a line break in a Location: \(path.debugDescription)")
    check(path == "/" || path == text, "rewrote a path instead of refusing it: \(path)")
    return 0
}

/// Every byte but the unreserved ones as %XX (what a browser's form encoding may send).
private func percentEncoded(_ text: String) -> String {
    var out = ""
    for byte in text.utf8 {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            out.append(Character(UnicodeScalar(byte)))
        default: out += String(format: "%%%02X", byte)
        }
    }
    return out
}

/// A property check whose message survives -O (a precondition's is dropped).
private func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}
