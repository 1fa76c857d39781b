import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// An HTTP server failure: the C function, the address, and why.
public struct HTTPServerError: Error, CustomStringConvertible {
    public var function: String
    public var address: String
    public var reason: String

    public var description: String { "HTTP server on \(address): \(function): \(reason)" }

    static func system(_ function: String, address: String) -> HTTPServerError {
        HTTPServerError(function: function, address: address, reason: String(cString: strerror(errno)))
    }
}
