/// A failure of a plain TCP connection (``TCPConnection``): what was being done, to which
/// peer, and why.
public struct NetError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable { case resolve, connect, timeout, io }
    public var kind: Kind
    public var description: String
    public init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }
}
