// libFuzzer target: JSONParser.parse and the serialized() round trip.
// Built together with Sources/PerimeterCore (same module); see fuzz/README.md.
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    guard let value = try? JSONParser.parse(bytes) else { return 0 }
    for sorted in [false, true] {
        let text = value.serialized(sortedKeys: sorted)
        let again: JSONValue
        do {
            again = try JSONParser.parse(text)
        } catch {
            fatalError("serialized JSON does not parse: \(error)\ntext: \(text)")
        }
        check(again == value, "round trip changed the value:\n  first:  \(value)\n  second: \(again)\n  text: \(text)")
        // Serializing again gives the same text (the serializer is a function of the value).
        check(again.serialized(sortedKeys: sorted) == text, "serialization is not stable: \(text)")
    }
    return 0
}

/// A property check whose message survives -O (a precondition's is dropped).
private func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}
