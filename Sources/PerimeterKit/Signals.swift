import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// Termination signals as an async sequence.
public enum Signals {
    /// SIGINT and SIGTERM, as they arrive. While anyone listens, the default action (exit) is off.
    public static func termination() -> AsyncStream<Int32> {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            sources.append(source)
        }
        let box = SourceBox(sources)
        continuation.onTermination = { _ in box.cancel() }
        return stream
    }

    /// `SIGINT` → "SIGINT".
    /// SIGHUP as a stream: services re-read their files on it.
    public static func hangups() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
        signal(SIGHUP, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        source.setEventHandler { continuation.yield() }
        source.resume()
        let box = SourceBox([source])
        continuation.onTermination = { _ in box.cancel() }
        return stream
    }

    public static func name(_ number: Int32) -> String {
        switch number {
        case SIGINT: "SIGINT"
        case SIGTERM: "SIGTERM"
        case SIGKILL: "SIGKILL"
        case SIGHUP: "SIGHUP"
        default: "signal \(number)"
        }
    }
}

/// Holds dispatch sources so that ending the stream cancels them.
/// - Important: `@unchecked Sendable`: the sources are only cancelled, which Dispatch allows from any thread.
private final class SourceBox: @unchecked Sendable {
    let sources: [any DispatchSourceSignal]
    init(_ sources: [any DispatchSourceSignal]) { self.sources = sources }
    func cancel() {
        for source in sources {
            source.cancel()
            signal(Int32(source.handle), SIG_DFL)
        }
    }
}
