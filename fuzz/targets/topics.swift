// libFuzzer target: InboundDecoder.route(topic:prefix:venues:) and Topics.level/decodeLevel.
// Input: UTF-8 text (invalid sequences repaired). Lines: topic, prefix (optional).
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)

    // The whole input as a topic, under the usual prefix and under one taken from the input.
    let venues: Set<String> = ["museum", "fuzz", ""]
    _ = InboundDecoder.route(topic: text, prefix: "perimeter/v1", venues: venues)
    let lines = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
    if lines.count == 2 {
        _ = InboundDecoder.route(topic: String(lines[0]), prefix: String(lines[1]), venues: venues)
        _ = InboundDecoder.route(topic: String(lines[1]), prefix: String(lines[0]), venues: [String(lines[0])])
    }

    // decodeLevel of arbitrary text must not trap.
    _ = Topics.decodeLevel(text)

    // decodeLevel is the inverse of level, for every id.
    let level = Topics.level(text)
    check(Topics.decodeLevel(level) == text, "decodeLevel(level(x)) != x", text, level)
    // level(x) is one topic level: no raw separator or wildcard byte.
    check(!level.utf8.contains(where: { $0 == 0x2F || $0 == 0x2B || $0 == 0x23 }), "level(x) holds / + or #", text, level)
    // A topic Topics writes routes back to the same id.
    if !text.isEmpty {
        let route = InboundDecoder.route(
            topic: Topics(venue: "museum").gps(agent: text), prefix: "perimeter/v1", venues: ["museum"])
        check(route == .gps(venue: "museum", agent: text), "route(gps(agent: x)) != .gps(x)", text, level)
    }
    return 0
}

/// A property check that crashes with its message kept in -O builds (fatalError keeps it; a
/// precondition's message is dropped by -O).
private func check(_ condition: Bool, _ what: String, _ x: String, _ level: String) {
    if !condition {
        fatalError("\(what): x = \(Array(x.utf8)) (\(x.debugDescription)), level(x) = \(level.debugDescription)")
    }
}
