import Synchronization

/// What wakes a service's processing loop: control events, each of which counts (a tick, a
/// reload, a lease change), and "there is work" (an arrival was journalled, an acknowledgement
/// came back), which is coalesced: at most one such wake waits at a time. So the stream stays
/// small under any load, and a burst of arrivals can never push a control event out of it.
///
/// The loop calls ``tookWork()`` when it takes a `.work` wake, before it drains: work signalled
/// while it drains wakes it once more.
public final class Wakes<Control: Sendable>: Sendable {
    public enum Wake: Sendable {
        case work
        case control(Control)
    }

    public let stream: AsyncStream<Wake>
    private let continuation: AsyncStream<Wake>.Continuation
    private let workPending = Atomic<Bool>(false)

    public init() {
        (stream, continuation) = AsyncStream.makeStream(of: Wake.self, bufferingPolicy: .unbounded)
    }

    /// There is work; callable from any thread (the MQTT network thread journals arrivals).
    public func work() {
        if !workPending.exchange(true, ordering: .acquiringAndReleasing) { continuation.yield(.work) }
    }

    public func send(_ control: Control) { continuation.yield(.control(control)) }

    /// The loop took the pending `.work` wake.
    public func tookWork() { workPending.store(false, ordering: .releasing) }
}
