/// Decodes raw BLE advertising data (the AD structures of the Core Specification, Vol 3
/// Part C §11: `[length][type][length − 1 bytes]`…) into the beacon frame it carries.
///
/// Reads iBeacon and AltBeacon (manufacturer data, type 0xFF) and Eddystone UID, URL and TLM
/// (service data, type 0x16, UUID 0xFEAA). Other AD structures are skipped; a zero length byte
/// ends the data (padding). The byte decoder allocates nothing for iBeacon, AltBeacon and
/// Eddystone-UID, so a scanner can decode every advert it hears.
///
/// A structure whose length byte runs past the end of the data is an error when the bytes
/// present already identify a beacon frame; otherwise it is a trailing fragment and decoding
/// stops there, keeping what came before (as controllers and BlueZ's `eir_parse` do).
public enum AdvertisementDecoder {
    /// Decodes advertising data.
    /// - Throws: ``AdvertisementError`` naming the byte offset of a malformed beacon frame.
    public static func decode(_ bytes: UnsafeBufferPointer<UInt8>) throws(AdvertisementError) -> Advertisement {
        var found = Advertisement.noIdentity
        var offset = 0
        while offset < bytes.count {
            let length = Int(bytes[offset])
            if length == 0 { break }
            let end = offset + 1 + length
            guard end <= bytes.count else {
                let data = min(offset + 2, bytes.count)..<bytes.count
                if offset + 1 < bytes.count, let frame = Frame(bytes, type: bytes[offset + 1], data: data) {
                    throw AdvertisementError(
                        offset: offset,
                        message: "\(frame.name) structure: length byte says \(length) bytes, only "
                            + "\(bytes.count - offset - 1) follow")
                }
                break
            }
            let heard = try structure(bytes, at: offset, data: offset + 2..<end)
            if heard.precedence > found.precedence { found = heard }
            offset = end
        }
        return found
    }

    /// Decodes advertising data.
    /// - Throws: ``AdvertisementError`` naming the byte offset of a malformed beacon frame.
    public static func decode(_ bytes: [UInt8]) throws(AdvertisementError) -> Advertisement {
        try bytes.withUnsafeBufferPointer { buffer in Result { () throws(AdvertisementError) in try decode(buffer) } }
            .get()
    }

    /// Decodes advertising data written as hex text: either case, optional surrounding
    /// whitespace, an optional `0x` prefix. Empty text is empty data (no identity).
    /// - Throws: ``AdvertisementError`` whose offset is the character offset in `text` of a
    ///   non-hex digit or of an odd length's unpaired last digit, or the byte offset in the
    ///   decoded data of a malformed beacon frame.
    public static func decode(hex text: some StringProtocol) throws(AdvertisementError) -> Advertisement {
        let result =
            text.utf8.withContiguousStorageIfAvailable { decode(hexUTF8: $0) }
            ?? Array(text.utf8).withUnsafeBufferPointer { decode(hexUTF8: $0) }
        switch result {
        case .success(let advertisement): return advertisement
        case .failure(.notHexDigit(let utf8Offset)):
            let bad = character(in: text, utf8Offset: utf8Offset)
            throw AdvertisementError(
                offset: bad.offset, message: "hex text: \(quoted(bad.character)) is not a hex digit")
        case .failure(.oddLength(let utf8Offset, let digits)):
            throw AdvertisementError(
                offset: character(in: text, utf8Offset: utf8Offset).offset,
                message: "hex text: odd number of hex digits (\(digits)), the last one has no pair")
        case .failure(.data(let error)): throw error
        }
    }

    /// The JSON `perimeter adv decode` prints for one input:
    /// `{"type":"ibeacon","uuid":…,"major":…,"minor":…,"tx":…}`,
    /// `{"type":"eddystone-uid","namespace":…,"instance":…,"tx0m":…}`,
    /// `{"type":"altbeacon","id1":…,"id2":…,"id3":…,"tx":…}`, `{"type":"eddystone-url","url":…,"tx0m":…}`,
    /// `{"type":null}` when there is no identity (telemetry included), `{"error":…}` when malformed.
    public static func json(_ result: Result<Advertisement, AdvertisementError>) -> JSONValue {
        switch result {
        case .failure(let error):
            return ["error": .string(error.description)]
        case .success(.beacon(let advert)):
            var object = advert.identity.json
            object[advert.identity.format == .eddystone ? "tx0m" : "tx"] = .number(Double(advert.advertisedPower))
            return .object(object)
        case .success(.eddystoneURL(let url, let tx0m)):
            return ["type": "eddystone-url", "url": .string(url), "tx0m": .number(Double(tx0m))]
        case .success(.eddystoneTelemetry), .success(.noIdentity):
            return ["type": .null]
        }
    }

    // MARK: - Frames

    /// A beacon frame recognised from its first bytes, before its size is checked.
    private enum Frame {
        case iBeacon, altBeacon, eddystone

        /// Recognises the frame from the structure's type and the data bytes present (which may
        /// be fewer than the length byte claims).
        init?(_ bytes: UnsafeBufferPointer<UInt8>, type: UInt8, data: Range<Int>) {
            let start = data.lowerBound
            switch type {
            case 0xFF where data.count >= 4:
                // Company id (little-endian), then the beacon code.
                if bytes[start] == 0x4C, bytes[start + 1] == 0x00, bytes[start + 2] == 0x02, bytes[start + 3] == 0x15 {
                    self = .iBeacon
                } else if bytes[start + 2] == 0xBE, bytes[start + 3] == 0xAC {
                    self = .altBeacon
                } else {
                    return nil
                }
            case 0x16 where data.count >= 2 && bytes[start] == 0xAA && bytes[start + 1] == 0xFE:
                self = .eddystone
            default:
                return nil
            }
        }

        var name: String {
            switch self {
            case .iBeacon: "iBeacon"
            case .altBeacon: "AltBeacon"
            case .eddystone: "Eddystone"
            }
        }
    }

    /// One complete AD structure: `offset` is its length byte, `data` follows its type byte.
    private static func structure(
        _ bytes: UnsafeBufferPointer<UInt8>, at offset: Int, data: Range<Int>
    ) throws(AdvertisementError) -> Advertisement {
        guard let frame = Frame(bytes, type: bytes[offset + 1], data: data) else { return .noIdentity }
        let start = data.lowerBound
        let length = data.count + 1
        switch frame {
        case .iBeacon:
            // 4c 00 02 15, uuid (16), major (2), minor (2), measured power: 26 with the type byte.
            guard length >= 26 else {
                throw AdvertisementError(
                    offset: offset, message: "iBeacon structure: length byte says \(length) bytes, an iBeacon needs 26")
            }
            let identity = BeaconIdentity.iBeacon(
                uuid: prefix(bytes, start + 4), major: UInt16(bigEndian(bytes, start + 20, count: 2)),
                minor: UInt16(bigEndian(bytes, start + 22, count: 2)))
            return .beacon(BeaconAdvert(identity: identity, advertisedPower: power(bytes[start + 24])))
        case .altBeacon:
            // Company id (2), be ac, id1 (16), id2 (2), id3 (2), reference RSSI, reserved: 27 with the type byte.
            guard length >= 27 else {
                throw AdvertisementError(
                    offset: offset,
                    message: "AltBeacon structure: length byte says \(length) bytes, an AltBeacon needs 27")
            }
            let identity = BeaconIdentity.altBeacon(
                id1: prefix(bytes, start + 4), id2: UInt16(bigEndian(bytes, start + 20, count: 2)),
                id3: UInt16(bigEndian(bytes, start + 22, count: 2)))
            return .beacon(BeaconAdvert(identity: identity, advertisedPower: power(bytes[start + 24])))
        case .eddystone:
            return try eddystone(bytes, at: offset, frame: start + 2..<data.upperBound)
        }
    }

    /// An Eddystone frame: `frame` starts at the frame type byte, after aa fe.
    private static func eddystone(
        _ bytes: UnsafeBufferPointer<UInt8>, at offset: Int, frame: Range<Int>
    ) throws(AdvertisementError) -> Advertisement {
        let start = frame.lowerBound
        guard !frame.isEmpty else {
            throw AdvertisementError(offset: offset, message: "Eddystone structure: no frame type after aa fe")
        }
        switch bytes[start] {
        case 0x00:
            // Frame type, ranging power, namespace (10), instance (6), 2 reserved bytes many beacons leave out.
            guard frame.count == 18 || frame.count == 20 else {
                throw AdvertisementError(
                    offset: offset,
                    message: "Eddystone-UID structure: frame is \(frame.count) bytes after aa fe, expected 18 or 20")
            }
            let namespace = BeaconPrefix(
                high: bigEndian(bytes, start + 2, count: 8), low: bigEndian(bytes, start + 10, count: 2) << 48)
            let identity = BeaconIdentity.eddystone(
                namespace: namespace, instance: bigEndian(bytes, start + 12, count: 6))
            return .beacon(BeaconAdvert(identity: identity, advertisedPower: power(bytes[start + 1])))
        case 0x10:
            return try eddystoneURL(bytes, at: offset, frame: frame)
        case 0x20:
            // Version 1 is encrypted (ETLM) and other versions are undefined: nothing to read.
            if frame.count >= 2 && bytes[start + 1] != 0 { return .noIdentity }
            guard frame.count == 14 else {
                throw AdvertisementError(
                    offset: offset,
                    message: "Eddystone-TLM structure: frame is \(frame.count) bytes after aa fe, expected 14")
            }
            let battery = Int(bigEndian(bytes, start + 2, count: 2))
            let temperature = Int16(bitPattern: UInt16(bigEndian(bytes, start + 4, count: 2)))
            return .eddystoneTelemetry(
                EddystoneTelemetry(
                    version: 0, batteryMillivolts: battery == 0 ? nil : battery,
                    temperature: temperature == Int16.min ? nil : Double(temperature) / 256,
                    advertisingCount: UInt32(bigEndian(bytes, start + 6, count: 4)),
                    uptimeDeciseconds: UInt32(bigEndian(bytes, start + 10, count: 4))))
        default:
            // EID (0x30) and later frame types carry no identity we can match.
            return .noIdentity
        }
    }

    private static let urlSchemes = ["http://www.", "https://www.", "http://", "https://"]
    private static let urlExpansions = [
        ".com/", ".org/", ".edu/", ".net/", ".info/", ".biz/", ".gov/", ".com", ".org", ".edu", ".net", ".info",
        ".biz", ".gov",
    ]

    /// Frame type 0x10, ranging power, scheme prefix, then the encoded URL.
    private static func eddystoneURL(
        _ bytes: UnsafeBufferPointer<UInt8>, at offset: Int, frame: Range<Int>
    ) throws(AdvertisementError) -> Advertisement {
        let start = frame.lowerBound
        guard frame.count >= 3 else {
            throw AdvertisementError(
                offset: offset,
                message: "Eddystone-URL structure: frame is \(frame.count) bytes after aa fe, needs at least 3")
        }
        let scheme = Int(bytes[start + 2])
        guard scheme < urlSchemes.count else {
            throw AdvertisementError(
                offset: start + 2, message: "Eddystone-URL scheme 0x\(Hex.encode([bytes[start + 2]])) is not 0 to 3")
        }
        var url = urlSchemes[scheme]
        for index in start + 3..<frame.upperBound {
            let byte = bytes[index]
            if Int(byte) < urlExpansions.count {
                url += urlExpansions[Int(byte)]
            } else if byte >= 0x21 && byte <= 0x7E {
                url.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                throw AdvertisementError(
                    offset: index,
                    message:
                        "Eddystone-URL byte 0x\(Hex.encode([byte])) is neither printable ASCII nor an expansion code")
            }
        }
        return .eddystoneURL(url: url, tx0m: power(bytes[start + 1]))
    }

    // MARK: - Bytes

    /// `count` (at most 8) bytes from `start` as a big-endian integer.
    @inline(__always)
    private static func bigEndian(_ bytes: UnsafeBufferPointer<UInt8>, _ start: Int, count: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in start..<start + count { value = value << 8 | UInt64(bytes[index]) }
        return value
    }

    /// 16 bytes from `start` as a UUID, without building an array.
    @inline(__always)
    private static func prefix(_ bytes: UnsafeBufferPointer<UInt8>, _ start: Int) -> BeaconPrefix {
        BeaconPrefix(high: bigEndian(bytes, start, count: 8), low: bigEndian(bytes, start + 8, count: 8))
    }

    /// A signed power byte in dBm.
    @inline(__always)
    private static func power(_ byte: UInt8) -> Int { Int(Int8(bitPattern: byte)) }

    // MARK: - Hex text

    /// Offsets in hex text are UTF-8 offsets here, turned into character offsets for the error.
    private enum HexFailure: Error {
        case notHexDigit(utf8Offset: Int)
        case oddLength(utf8Offset: Int, digits: Int)
        case data(AdvertisementError)
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || (byte >= 0x09 && byte <= 0x0D)
    }

    /// Hex text's UTF-8 to bytes in a scratch buffer, then decoded.
    private static func decode(hexUTF8 text: UnsafeBufferPointer<UInt8>) -> Result<Advertisement, HexFailure> {
        var start = 0
        var end = text.count
        while start < end && isSpace(text[start]) { start += 1 }
        while end > start && isSpace(text[end - 1]) { end -= 1 }
        if end - start >= 2 && text[start] == UInt8(ascii: "0") && (text[start + 1] | 0x20) == UInt8(ascii: "x") {
            start += 2
        }
        let digits = end - start
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: max(digits / 2, 1)) { scratch in
            var high: UInt8 = 0
            for index in start..<end {
                guard let value = Hex.nibble(text[index]) else {
                    return .failure(.notHexDigit(utf8Offset: index))
                }
                let position = index - start
                if position % 2 == 0 {
                    high = value
                } else {
                    scratch[position / 2] = high << 4 | value
                }
            }
            guard digits % 2 == 0 else {
                return .failure(.oddLength(utf8Offset: end - 1, digits: digits))
            }
            let bytes = UnsafeBufferPointer(rebasing: scratch[0..<digits / 2])
            return Result { () throws(AdvertisementError) in try decode(bytes) }.mapError { .data($0) }
        }
    }

    /// The character holding UTF-8 byte `utf8Offset` of `text`, and its offset in characters.
    private static func character(in text: some StringProtocol, utf8Offset: Int) -> (offset: Int, character: Character)
    {
        var utf8Position = 0
        var offset = 0
        for character in text {
            utf8Position += character.utf8.count
            if utf8Position > utf8Offset { return (offset, character) }
            offset += 1
        }
        return (offset, " ")
    }

    /// A character for an error message: quoted, or as code points (`U+0020`) when it would not show.
    private static func quoted(_ character: Character) -> String {
        let scalars = character.unicodeScalars
        if scalars.allSatisfy({ !$0.properties.isWhitespace && $0.value >= 0x20 && $0.value != 0x7F }) {
            return "'\(character)'"
        }
        let codes = scalars.map { scalar in
            let hex = String(scalar.value, radix: 16, uppercase: true)
            return "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
        }
        return codes.joined(separator: " ")
    }
}
