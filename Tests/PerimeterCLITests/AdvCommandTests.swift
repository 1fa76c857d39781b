import Foundation
import PerimeterKit
import Testing

@Suite("perimeter adv decode")
struct AdvCommandTests {
    static let iBeacon = "0201061aff4c0002154141414141414141414141414141414100010001f8"
    static let iBeaconJSON =
        #"{"type":"ibeacon","uuid":"41414141-4141-4141-4141-414141414141","major":1,"minor":1,"tx":-8}"#
    static let url = "0303aafe1316aafe10f8036769746875620063697472757a"
    static let urlJSON = #"{"type":"eddystone-url","url":"https://github.com/citruz","tx0m":-8}"#
    static let tlm = "0201060303aafe1116aafe20000b1813000000146700002ac4e4"
    static let truncated = "0201061aff4c000215414141414141414141414141"
    static let truncatedJSON =
        #"{"error":"at byte 3: iBeacon structure: length byte says 26 bytes, only 17 follow"}"#

    @Test("arguments: one JSON line per advert, in order; exit 0 when all decode")
    func arguments() async throws {
        let result = try await perimeter(["adv", "decode", Self.iBeacon, "0X" + Self.url.uppercased(), Self.tlm])
        #expect(result.status == .exited(0))
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines == [Substring(Self.iBeaconJSON), Substring(Self.urlJSON), #"{"type":null}"#, ""])
        #expect(result.stderr.isEmpty)
    }

    @Test("arguments: a malformed advert prints its error in place, the rest still decode, exit 1")
    func argumentsWithError() async throws {
        let result = try await perimeter(["adv", "decode", Self.truncated, Self.iBeacon, "02016"])
        #expect(result.status == .exited(1))
        let lines = result.stdout.split(separator: "\n").map(String.init)
        let oddLength = #"{"error":"at byte 4: hex text: odd number of hex digits (5), the last one has no pair"}"#
        #expect(lines == [Self.truncatedJSON, Self.iBeaconJSON, oddLength])
        #expect(result.stderr.contains("2 of 3 advert(s) malformed"), "\(result.stderr)")
    }

    @Test("standard input: one advert per line, blank lines skipped, CRLF accepted")
    func standardInput() async throws {
        let input = "\(Self.iBeacon)\n\n   \n  \(Self.url)  \r\n\(Self.tlm)\n"
        let result = try await perimeter(["adv", "decode"], stdin: input)
        #expect(result.status == .exited(0))
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines == [Self.iBeaconJSON, Self.urlJSON, #"{"type":null}"#])
    }

    @Test("standard input: exit 1 when any line is malformed, every line still printed")
    func standardInputWithError() async throws {
        let result = try await perimeter(["adv", "decode"], stdin: "\(Self.iBeacon)\n\(Self.truncated)\n\(Self.url)\n")
        #expect(result.status == .exited(1))
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines == [Self.iBeaconJSON, Self.truncatedJSON, Self.urlJSON])
    }

    @Test("empty standard input prints nothing and exits 0")
    func emptyInput() async throws {
        let result = try await perimeter(["adv", "decode"], stdin: "")
        #expect(result.status == .exited(0))
        #expect(result.stdout.isEmpty)
    }
}
