import PerimeterCore
import Testing

/// HCI event packets as `hcidump -R` printed them from a real scan: an iBeacon and an
/// Eddystone-UID (quoted in github.com/wolfspyre/PyBTSteward, EddyStone.md, from a BlueZ host).
@Suite("HCI LE advertising reports")
struct HCIEventTests {
    static let iBeacon =
        "04 3E 2A 02 01 03 00 EC F8 00 EE F3 0C 1E 02 01 04 1A FF 4C 00 02 15 8D EE FB B9 F7 38 42 97 80 40 96 66 8B B4 42 81 13 88 0F 4E C1 BB"
    static let eddystone =
        "04 3E 29 02 01 00 01 F5 53 E0 AA 15 E5 1D 02 01 06 03 03 AA FE 15 16 AA FE 00 DF ED D1 EB EA C0 4E 5D EF A0 17 E5 15 AA E0 53 F5 CB"

    static func bytes(_ text: String) -> [UInt8] {
        text.split(separator: " ").map { UInt8($0, radix: 16)! }
    }

    @Test("an iBeacon report: address, RSSI, and AD data the advert decoder reads")
    func iBeaconReport() throws {
        let reports = try HCIEvent.reports(Self.bytes(Self.iBeacon))
        #expect(reports.count == 1)
        let report = try #require(reports.first)
        #expect(report.address == "0C:F3:EE:00:F8:EC")
        #expect(report.eventType == 3)
        #expect(report.rssi == -69)
        #expect(report.data.count == 30)
        let advert = try #require(try AdvertisementDecoder.decode(report.data).beacon)
        #expect(
            advert.identity
                == .iBeacon(uuid: BeaconPrefix(uuid: "8DEEFBB9-F738-4297-8040-96668BB44281")!, major: 5000, minor: 3918)
        )
        #expect(advert.advertisedPower == -63)
    }

    @Test("an Eddystone-UID report")
    func eddystoneReport() throws {
        let report = try #require(try HCIEvent.reports(Self.bytes(Self.eddystone)).first)
        #expect(report.address == "E5:15:AA:E0:53:F5")
        #expect(report.addressType == 1)
        #expect(report.rssi == -53)
        let advert = try #require(try AdvertisementDecoder.decode(report.data).beacon)
        #expect(advert.identity.canonical == "eddystone-uid:edd1ebeac04e5defa017:e515aae053f5")
    }

    @Test("without the H4 packet-type byte, the same report")
    func withoutPacketType() throws {
        let reports = try HCIEvent.reports(Array(Self.bytes(Self.iBeacon).dropFirst()))
        #expect(reports.first?.rssi == -69)
    }

    @Test("two reports in one event are read one after another")
    func twoReports() throws {
        // The iBeacon report body twice, with the count and parameter length adjusted.
        let body = Array(Self.bytes(Self.iBeacon)[5...])
        let packet: [UInt8] = [0x04, 0x3E, UInt8(2 + 2 * body.count), 0x02, 0x02] + body + body
        let reports = try HCIEvent.reports(packet)
        #expect(reports.count == 2)
        #expect(reports.map(\.rssi) == [-69, -69])
    }

    @Test("an extended advertising report (LE Meta 0x0D)")
    func extended() throws {
        let data = Self.bytes(Self.iBeacon)[14..<44]
        var packet: [UInt8] = [0x3E, 0, 0x0D, 0x01, 0x13, 0x00, 0x00, 0xEC, 0xF8, 0x00, 0xEE, 0xF3, 0x0C]
        packet += [0x01, 0x00, 0xFF, 0x7F, 0xB5, 0x00, 0x00, 0x00, 0, 0, 0, 0, 0, 0, UInt8(data.count)]
        packet += data
        packet[1] = UInt8(packet.count - 2)
        let report = try #require(try HCIEvent.reports(packet).first)
        #expect(report.address == "0C:F3:EE:00:F8:EC")
        #expect(report.rssi == -75)
        #expect(report.eventType == 0x13)
        #expect(report.data == Array(data))
    }

    static let malformed: [(hex: String, message: String)] = [
        ("04 3E 2A 02 01 03 00 EC F8", "parameter length 42"),
        ("04 3E 0A 02 01 03 00 EC F8 00 EE F3 0C", "data length missing"),
        ("04 3E 0C 02 01 03 00 EC F8 00 EE F3 0C 05 02", "report 0 data: 5 bytes needed"),
        ("04 3E 0B 02 01 03 00 EC F8 00 EE F3 0C 20", "over 31"),
        ("04", "event code missing"),
    ]

    @Test("truncated packets are errors with the byte offset", arguments: malformed)
    func truncated(_ example: (hex: String, message: String)) {
        #expect {
            try HCIEvent.reports(Self.bytes(example.hex))
        } throws: { error in
            "\(error)".contains(example.message)
        }
    }

    @Test("other events carry no adverts")
    func otherEvents() throws {
        // Command Complete (0x0E) and an LE Connection Complete (sub-event 0x01).
        #expect(try HCIEvent.reports(Self.bytes("04 0E 04 01 0C 20 00")).isEmpty)
        #expect(try HCIEvent.reports(Self.bytes("04 3E 02 01 00")).isEmpty)
    }
}
