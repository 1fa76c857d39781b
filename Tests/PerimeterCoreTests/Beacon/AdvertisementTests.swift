import PerimeterCore
import Testing

// MARK: - Building adverts

/// One AD structure: length byte, type, data.
private func structure(_ type: UInt8, _ data: [UInt8]) -> [UInt8] { [UInt8(data.count + 1), type] + data }
private func bigEndian16(_ value: UInt16) -> [UInt8] { [UInt8(value >> 8), UInt8(value & 0xFF)] }
private func ascii(_ text: String) -> [UInt8] { Array(text.utf8) }

private let flags = structure(0x01, [0x06])
private let uuid = [UInt8](0x10...0x1F)
private let namespace = [UInt8](0xA0...0xA9)
private let instance = [UInt8](0xB0...0xB5)

private func iBeacon(uuid: [UInt8] = uuid, major: UInt16 = 1, minor: UInt16 = 2, power: Int8 = -59) -> [UInt8] {
    structure(
        0xFF, [0x4C, 0x00, 0x02, 0x15] + uuid + bigEndian16(major) + bigEndian16(minor) + [UInt8(bitPattern: power)])
}
private func eddystone(_ frame: [UInt8]) -> [UInt8] { structure(0x16, [0xAA, 0xFE] + frame) }
private let uidFrame: [UInt8] = [0x00, 0xE3] + namespace + instance
private let urlFrame: [UInt8] = [0x10, 0xF8, 0x03] + ascii("ex") + [0x07]
private let tlmFrame: [UInt8] = [0x20, 0x00, 0x0B, 0xB8, 0x19, 0x80, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x64]

private let iBeaconAdvert = Advertisement.beacon(
    BeaconAdvert(identity: .iBeacon(uuid: BeaconPrefix(bytes: uuid), major: 1, minor: 2), advertisedPower: -59))
private let uidAdvert = Advertisement.beacon(
    BeaconAdvert(
        identity: .eddystone(namespace: BeaconPrefix(bytes: namespace), instance: 0xB0B1_B2B3_B4B5),
        advertisedPower: -29))

private func decoded(_ bytes: [UInt8]) -> Result<Advertisement, AdvertisementError> {
    Result { () throws(AdvertisementError) in try AdvertisementDecoder.decode(bytes) }
}
private func decoded(hex: some StringProtocol) -> Result<Advertisement, AdvertisementError> {
    Result { () throws(AdvertisementError) in try AdvertisementDecoder.decode(hex: hex) }
}
private func failure(_ offset: Int, _ message: String) -> Result<Advertisement, AdvertisementError> {
    .failure(AdvertisementError(offset: offset, message: message))
}

struct AdvertCase: Sendable, CustomTestStringConvertible {
    var name: String
    var bytes: [UInt8]
    var expected: Result<Advertisement, AdvertisementError>
    var testDescription: String { name }

    init(_ name: String, _ bytes: [UInt8], _ expected: Result<Advertisement, AdvertisementError>) {
        self.name = name
        self.bytes = bytes
        self.expected = expected
    }
    init(_ name: String, _ bytes: [UInt8], _ expected: Advertisement) {
        self.init(name, bytes, .success(expected))
    }
}

@Suite("BLE advertising data")
struct AdvertisementTests {
    // MARK: Real vectors

    @Test("every real vector decodes as its 'expect' says")
    func vectors() throws {
        let document = try JSONValue(parsing: Fixtures.text("ble/vectors.json"))
        let vectors = try #require(document["vectors"]?.arrayValue)
        #expect(vectors.count == 10)
        for vector in vectors {
            let name = vector["name"]?.stringValue ?? "?"
            let hex = try #require(vector["hex"]?.stringValue, "\(name)")
            let printed = AdvertisementDecoder.json(decoded(hex: hex))
            let object = try #require(printed.objectValue, "\(name)")
            switch vector["expect"] {
            case .null?:
                let expected: JSONValue = ["type": .null]
                #expect(printed == expected, "\(name)")
            case .string("error")?:
                let message = object["error"]?.stringValue
                #expect(message != nil, "\(name): \(printed.serialized())")
            case .object(let expected)?:
                let keys = Set(object.keys)
                #expect(keys == Set(expected.keys), "\(name): \(printed.serialized())")
                for (key, value) in expected {
                    let got = object[key]
                    #expect(got == value, "\(name): \(key)")
                }
            default:
                Issue.record("\(name): unexpected 'expect' \(String(describing: vector["expect"]))")
            }
        }
    }

    @Test("the truncated iBeacon vector names the structure, the claimed and the remaining bytes")
    func truncatedIBeaconMessage() {
        let result = decoded(hex: "0201061aff4c000215414141414141414141414141")
        #expect(result == failure(3, "iBeacon structure: length byte says 26 bytes, only 17 follow"))
        let printed = AdvertisementDecoder.json(result).serialized()
        #expect(printed == #"{"error":"at byte 3: iBeacon structure: length byte says 26 bytes, only 17 follow"}"#)
    }

    @Test("JSON of an iBeacon vector is printed in field order, power last")
    func jsonOrder() {
        let printed = AdvertisementDecoder.json(
            decoded(hex: "0201061aff4c0002154141414141414141414141414141414100010001f8")
        )
        .serialized()
        #expect(
            printed
                == #"{"type":"ibeacon","uuid":"41414141-4141-4141-4141-414141414141","major":1,"minor":1,"tx":-8}"#)
    }

    @Test("beacontools' TLM packet's telemetry")
    func tlmVector() {
        let result = decoded(hex: "0201060303aafe1116aafe20000b1813000000146700002ac4e4")
        let expected = EddystoneTelemetry(
            version: 0, batteryMillivolts: 2840, temperature: 19, advertisingCount: 5223, uptimeDeciseconds: 10948)
        #expect(result == .success(.eddystoneTelemetry(expected)))
    }

    // MARK: Hand-built adverts

    static let adverts: [AdvertCase] = [
        AdvertCase("empty data", [], .noIdentity),
        AdvertCase("iBeacon", flags + iBeacon(), iBeaconAdvert),
        AdvertCase(
            "AltBeacon with Radius Networks' company id",
            flags + structure(0xFF, [0x18, 0x01, 0xBE, 0xAC] + uuid + [0x01, 0x02, 0x03, 0x04, 0xC5, 0x00]),
            .beacon(
                BeaconAdvert(
                    identity: .altBeacon(id1: BeaconPrefix(bytes: uuid), id2: 0x0102, id3: 0x0304),
                    advertisedPower: -59))),
        AdvertCase("Eddystone-UID without the reserved bytes", flags + eddystone(uidFrame), uidAdvert),
        AdvertCase("Eddystone-UID with the reserved bytes", flags + eddystone(uidFrame + [0, 0]), uidAdvert),
        AdvertCase(
            "scheme 0", eddystone([0x10, 0xF8, 0x00] + ascii("a")), .eddystoneURL(url: "http://www.a", tx0m: -8)),
        AdvertCase(
            "scheme 1", eddystone([0x10, 0xF8, 0x01] + ascii("a")), .eddystoneURL(url: "https://www.a", tx0m: -8)),
        AdvertCase("scheme 2", eddystone([0x10, 0xF8, 0x02] + ascii("a")), .eddystoneURL(url: "http://a", tx0m: -8)),
        AdvertCase("scheme 3", eddystone([0x10, 0x7F, 0x03] + ascii("a")), .eddystoneURL(url: "https://a", tx0m: 127)),
        AdvertCase(
            "URL expansion codes 0x00 to 0x0d and the printable ASCII edges",
            eddystone([0x10, 0xEC, 0x02, 0x21] + Array(0x00...0x0D) + [0x7E]),
            .eddystoneURL(
                url: "http://!.com/.org/.edu/.net/.info/.biz/.gov/.com.org.edu.net.info.biz.gov~", tx0m: -20)),
        AdvertCase(
            "Eddystone-TLM", flags + eddystone(tlmFrame),
            .eddystoneTelemetry(
                EddystoneTelemetry(
                    version: 0, batteryMillivolts: 3000, temperature: 25.5, advertisingCount: 256,
                    uptimeDeciseconds: 100))),
        AdvertCase(
            "Eddystone-TLM without battery or temperature sensor",
            eddystone([0x20, 0x00, 0x00, 0x00, 0x80, 0x00] + [UInt8](repeating: 0xFF, count: 8)),
            .eddystoneTelemetry(
                EddystoneTelemetry(
                    version: 0, batteryMillivolts: nil, temperature: nil, advertisingCount: .max,
                    uptimeDeciseconds: .max))),
        AdvertCase(
            "Eddystone-TLM below zero",
            eddystone([0x20, 0x00, 0x0C, 0xE4, 0xFF, 0x80] + [UInt8](repeating: 0, count: 8)),
            .eddystoneTelemetry(
                EddystoneTelemetry(
                    version: 0, batteryMillivolts: 3300, temperature: -0.5, advertisingCount: 0, uptimeDeciseconds: 0))),
        AdvertCase(
            "encrypted Eddystone-TLM (version 1) has nothing to read",
            eddystone([0x20, 0x01] + [UInt8](repeating: 0x5A, count: 16)), .noIdentity),
        AdvertCase("Eddystone-EID frame", flags + eddystone([0x30, 0xF0, 1, 2, 3, 4, 5, 6, 7, 8]), .noIdentity),
        AdvertCase(
            "Apple data of another type (Nearby, 0x10)",
            flags + structure(0xFF, [0x4C, 0x00, 0x10, 0x05, 0x01, 0x18, 0x44, 0x00, 0x00]), .noIdentity),
        AdvertCase(
            "Apple type 0x02 whose second byte is not 0x15",
            structure(0xFF, [0x4C, 0x00, 0x02, 0x16] + uuid + [0, 1, 0, 2, 0xC5]), .noIdentity),
        AdvertCase("a zero length byte ends the data", flags + [0x00] + iBeacon(), .noIdentity),
        AdvertCase("padding after the beacon", iBeacon() + [0, 0, 0, 0], iBeaconAdvert),
        AdvertCase("other AD types are skipped", structure(0x09, ascii("tag")) + iBeacon(), iBeaconAdvert),
        AdvertCase(
            "a trailing fragment that is not a beacon frame stops decoding", iBeacon() + [0x1F, 0xFF, 0x99, 0x04],
            iBeaconAdvert),
        AdvertCase("a lone length byte at the end", iBeacon() + [0x05], iBeaconAdvert),
        AdvertCase(
            "a beacon identity wins over URL and telemetry",
            eddystone(tlmFrame) + eddystone(urlFrame) + eddystone(uidFrame), uidAdvert),
        AdvertCase(
            "a URL wins over telemetry", eddystone(tlmFrame) + eddystone(urlFrame),
            .eddystoneURL(url: "https://ex.com", tx0m: -8)),
        AdvertCase("the first beacon wins", iBeacon() + eddystone(uidFrame), iBeaconAdvert),
        // Errors.
        AdvertCase(
            "truncated Eddystone-UID", flags + [0x17, 0x16, 0xAA, 0xFE, 0x00, 0xE3] + namespace,
            failure(3, "Eddystone structure: length byte says 23 bytes, only 15 follow")),
        AdvertCase(
            "truncated AltBeacon", [0x1B, 0xFF, 0x18, 0x01, 0xBE, 0xAC, 0x01, 0x02],
            failure(0, "AltBeacon structure: length byte says 27 bytes, only 7 follow")),
        AdvertCase(
            "an error after a beacon still fails the packet", iBeacon() + [0x17, 0x16, 0xAA, 0xFE, 0x00],
            failure(27, "Eddystone structure: length byte says 23 bytes, only 4 follow")),
        AdvertCase(
            "Eddystone-UID frame of 19 bytes", flags + eddystone(uidFrame + [0]),
            failure(3, "Eddystone-UID structure: frame is 19 bytes after aa fe, expected 18 or 20")),
        AdvertCase(
            "Eddystone-UID frame of 17 bytes", eddystone(Array(uidFrame.dropLast())),
            failure(0, "Eddystone-UID structure: frame is 17 bytes after aa fe, expected 18 or 20")),
        AdvertCase(
            "iBeacon structure without its power byte",
            structure(0xFF, [0x4C, 0x00, 0x02, 0x15] + uuid + [0, 1, 0, 2]),
            failure(0, "iBeacon structure: length byte says 25 bytes, an iBeacon needs 26")),
        AdvertCase(
            "AltBeacon structure without its reserved byte",
            structure(0xFF, [0x18, 0x01, 0xBE, 0xAC] + uuid + [0, 1, 0, 2, 0xC5]),
            failure(0, "AltBeacon structure: length byte says 26 bytes, an AltBeacon needs 27")),
        AdvertCase(
            "Eddystone-TLM frame of 4 bytes", eddystone([0x20, 0x00, 0x0B, 0xB8]),
            failure(0, "Eddystone-TLM structure: frame is 4 bytes after aa fe, expected 14")),
        AdvertCase(
            "Eddystone service data without a frame type", structure(0x16, [0xAA, 0xFE]),
            failure(0, "Eddystone structure: no frame type after aa fe")),
        AdvertCase(
            "Eddystone-URL without a scheme", eddystone([0x10, 0xF8]),
            failure(0, "Eddystone-URL structure: frame is 2 bytes after aa fe, needs at least 3")),
        AdvertCase(
            "a space in a URL", flags + eddystone([0x10, 0xF8, 0x03] + ascii("ab") + [0x20] + ascii("c")),
            failure(12, "Eddystone-URL byte 0x20 is neither printable ASCII nor an expansion code")),
        AdvertCase(
            "URL byte 0x0e, just past the expansion codes", eddystone([0x10, 0xF8, 0x02, 0x0E]),
            failure(7, "Eddystone-URL byte 0x0e is neither printable ASCII nor an expansion code")),
        AdvertCase(
            "URL byte 0x7f", eddystone([0x10, 0xF8, 0x02, 0x61, 0x7F]),
            failure(8, "Eddystone-URL byte 0x7f is neither printable ASCII nor an expansion code")),
        AdvertCase(
            "URL scheme 4", eddystone([0x10, 0xF8, 0x04, 0x61]), failure(6, "Eddystone-URL scheme 0x04 is not 0 to 3")),
    ]

    @Test("hand-built adverts", arguments: adverts)
    func advert(_ advert: AdvertCase) {
        let result = decoded(advert.bytes)
        #expect(result == advert.expected)
    }

    @Test("the hex path decodes the same as the byte path", arguments: adverts)
    func hexMatchesBytes(_ advert: AdvertCase) {
        let viaHex = decoded(hex: Hex.encode(advert.bytes))
        #expect(viaHex == advert.expected)
    }

    static let hexTexts: [(String, Result<Advertisement, AdvertisementError>)] = [
        ("", .success(.noIdentity)),
        (" \t\r\n", .success(.noIdentity)),
        ("0x", .success(.noIdentity)),
        ("  0X" + Hex.encode(flags + iBeacon()).uppercased() + "\r\n", .success(iBeaconAdvert)),
        ("0x" + Hex.encode(iBeacon()), .success(iBeaconAdvert)),
        ("0201061", failure(6, "hex text: odd number of hex digits (7), the last one has no pair")),
        (" 0x020106a ", failure(9, "hex text: odd number of hex digits (7), the last one has no pair")),
        ("  0x0201g6", failure(8, "hex text: 'g' is not a hex digit")),
        ("0x02 01", failure(4, "hex text: U+0020 is not a hex digit")),
        ("02ü1", failure(2, "hex text: 'ü' is not a hex digit")),
        // "\r\n" is one character and two UTF-8 bytes: the offset counts characters.
        ("\r\n02g1", failure(3, "hex text: 'g' is not a hex digit")),
        ("0g1", failure(1, "hex text: 'g' is not a hex digit")),
        ("xx", failure(0, "hex text: 'x' is not a hex digit")),
    ]

    @Test("hex text", arguments: hexTexts)
    func hex(text: String, expected: Result<Advertisement, AdvertisementError>) {
        let result = decoded(hex: text)
        #expect(result == expected)
        let fromSubstring = decoded(hex: ("[" + text + "]").dropFirst().dropLast())
        #expect(fromSubstring == expected)
    }

    @Test("tx1m: advertised power at 1 m, Eddystone's 0 m power less 41 dB")
    func tx1m() {
        #expect(iBeaconAdvert.beacon?.tx1m == -59)
        #expect(uidAdvert.beacon?.tx1m == -70)
        #expect(Advertisement.eddystoneURL(url: "https://a", tx0m: -8).beacon == nil)
    }

    @Test("JSON shapes")
    func json() {
        let url = AdvertisementDecoder.json(.success(.eddystoneURL(url: "https://a", tx0m: -8))).serialized()
        #expect(url == #"{"type":"eddystone-url","url":"https://a","tx0m":-8}"#)
        let uid = AdvertisementDecoder.json(.success(uidAdvert)).serialized()
        #expect(
            uid == #"{"type":"eddystone-uid","namespace":"a0a1a2a3a4a5a6a7a8a9","instance":"b0b1b2b3b4b5","tx0m":-29}"#)
        let telemetry = AdvertisementDecoder.json(decoded(eddystone(tlmFrame))).serialized()
        #expect(telemetry == #"{"type":null}"#)
    }

    // MARK: Fuzzing

    @Test("200,000 random byte strings, half with a beacon frame's first bytes planted: decoded or a located error")
    func randomBytes() {
        // Random bytes alone almost never look like a beacon frame; planting a frame's first
        // bytes (under a random length byte, followed by random bytes) reaches the frame decoders.
        let heads: [[UInt8]] = [[0xFF, 0x4C, 0x00, 0x02, 0x15], [0xFF, 0x18, 0x01, 0xBE, 0xAC], [0x16, 0xAA, 0xFE]]
        var random = SplitMix64(seed: 0xB1E_ADF0)
        var outcomes = [0, 0, 0]  // no beacon, beacon, error
        var misplaced: [UInt8]?
        for _ in 0..<200_000 {
            let count = Int(random.next() % 63)
            var bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            if random.next() % 2 == 0 {
                let head = heads[Int(random.next() % 3)] + [UInt8(random.next() % 4) << 4]
                let at = Int(random.next() % UInt64(count + 1))
                bytes.replaceSubrange(at..<min(at + head.count + 1, count), with: [UInt8(random.next() % 32)] + head)
            }
            switch decoded(bytes) {
            case .success(.beacon): outcomes[1] += 1
            case .success: outcomes[0] += 1
            case .failure(let error):
                outcomes[2] += 1
                if !(0..<bytes.count).contains(error.offset) { misplaced = misplaced ?? bytes }
            }
        }
        #expect(misplaced == nil, "error offset outside the data for \(Hex.encode(misplaced ?? []))")
        #expect(outcomes.allSatisfy { $0 > 100 }, "\(outcomes)")
    }

    @Test("200,000 mutations of the real vectors: decoded or a located error, the hex path agreeing")
    func mutatedVectors() throws {
        let document = try JSONValue(parsing: Fixtures.text("ble/vectors.json"))
        let vectors = try #require(document["vectors"]?.arrayValue).compactMap { $0["hex"]?.stringValue }
            .compactMap { Hex.decode(Array($0.utf8)) }
        var random = SplitMix64(seed: 0x5EED)
        var outcomes: [String: Int] = [:]
        var problem: String?
        for _ in 0..<200_000 {
            var bytes = vectors[Int(random.next() % UInt64(vectors.count))]
            for _ in 0...(random.next() % 3) { mutate(&bytes, &random) }
            let result = decoded(bytes)
            switch result {
            case .success(.beacon): outcomes["beacon", default: 0] += 1
            case .success(.eddystoneURL): outcomes["url", default: 0] += 1
            case .success(.eddystoneTelemetry): outcomes["telemetry", default: 0] += 1
            case .success(.noIdentity): outcomes["none", default: 0] += 1
            case .failure(let error):
                outcomes["error", default: 0] += 1
                if !(0..<bytes.count).contains(error.offset) { problem = problem ?? "offset: \(Hex.encode(bytes))" }
            }
            if decoded(hex: Hex.encode(bytes)) != result { problem = problem ?? "hex path: \(Hex.encode(bytes))" }
        }
        #expect(problem == nil)
        // Mutations leave some packets whole and break others: every outcome should be seen.
        for outcome in ["beacon", "url", "telemetry", "none", "error"] {
            #expect(outcomes[outcome, default: 0] > 100, "\(outcome): \(outcomes)")
        }
    }

    @Test("50,000 iBeacon frames with random identity fields decode to those fields")
    func mutatedIBeacons() {
        var random = SplitMix64(seed: 0x1BEAC0)
        var wrong: [UInt8]?
        for _ in 0..<50_000 {
            let uuid = (0..<16).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let major = UInt16(truncatingIfNeeded: random.next())
            let minor = UInt16(truncatingIfNeeded: random.next())
            let power = Int8(truncatingIfNeeded: random.next())
            // Sometimes other structures around it, sometimes padding after it.
            var bytes = random.next() % 2 == 0 ? flags : []
            bytes += iBeacon(uuid: uuid, major: major, minor: minor, power: power)
            if random.next() % 2 == 0 { bytes += [0, 0, 0] }
            let expected = Advertisement.beacon(
                BeaconAdvert(
                    identity: .iBeacon(uuid: BeaconPrefix(bytes: uuid), major: major, minor: minor),
                    advertisedPower: Int(power)))
            if decoded(bytes) != .success(expected) { wrong = wrong ?? bytes }
        }
        #expect(wrong == nil, "\(Hex.encode(wrong ?? []))")
    }

    /// One random change: a flipped bit, a random byte, a truncation, a length byte off by a
    /// little or set at random, a byte dropped or inserted.
    private func mutate(_ bytes: inout [UInt8], _ random: inout SplitMix64) {
        guard !bytes.isEmpty else { return }
        let index = Int(random.next() % UInt64(bytes.count))
        switch random.next() % 6 {
        case 0: bytes[index] ^= 1 << UInt8(random.next() % 8)
        case 1: bytes[index] = UInt8(truncatingIfNeeded: random.next())
        case 2: bytes.removeLast(bytes.count - index)
        case 3:
            // A structure's length byte: walk the structures and pick one.
            var starts: [Int] = []
            var offset = 0
            while offset < bytes.count && bytes[offset] != 0 {
                starts.append(offset)
                offset += 1 + Int(bytes[offset])
            }
            guard let start = starts.randomElement(using: &random) else { return }
            let change = random.next() % 2 == 0 ? Int(random.next() % 5) - 2 : Int(random.next() % 256)
            bytes[start] = UInt8(truncatingIfNeeded: random.next() % 2 == 0 ? Int(bytes[start]) + change : change)
        case 4: bytes.remove(at: index)
        default: bytes.insert(UInt8(truncatingIfNeeded: random.next()), at: index)
        }
    }
}
