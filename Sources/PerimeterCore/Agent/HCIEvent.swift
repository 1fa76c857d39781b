/// LE advertising reports read from HCI event packets (Bluetooth Core Specification Vol 4
/// Part E §7.7.65.2 and §7.7.65.13), as a raw HCI socket delivers them.
///
/// A packet may start with the H4 packet-type byte 0x04 (an HCI event; what a raw socket and
/// `hcidump -R` show) or directly with the event code. Only LE Meta events (0x3E) with the
/// LE Advertising Report (0x02) or LE Extended Advertising Report (0x0D) sub-event carry
/// adverts; any other event parses to no adverts. Reports are laid out one after another
/// (event type, address type, address, data length, data, RSSI), as the Linux kernel and
/// BlueZ read them.
public enum HCIEvent {
    /// One advert heard: the sender's address, its AD structures and the RSSI.
    public struct Report: Sendable, Hashable {
        /// `AA:BB:CC:DD:EE:FF`, most significant byte first (HCI sends it little-endian).
        public var address: String
        public var addressType: UInt8
        public var eventType: UInt16
        public var data: [UInt8]
        /// dBm; nil when the controller says 127 (not available).
        public var rssi: Int?

        public init(address: String, addressType: UInt8, eventType: UInt16, data: [UInt8], rssi: Int?) {
            self.address = address
            self.addressType = addressType
            self.eventType = eventType
            self.data = data
            self.rssi = rssi
        }
    }

    public struct Error: Swift.Error, Sendable, Hashable, CustomStringConvertible {
        public var offset: Int
        public var message: String
        public var description: String { "HCI event byte \(offset): \(message)" }
    }

    static let packetTypeEvent: UInt8 = 0x04
    static let leMetaEvent: UInt8 = 0x3E
    static let advertisingReport: UInt8 = 0x02
    static let extendedAdvertisingReport: UInt8 = 0x0D

    /// The adverts in one HCI event packet.
    /// - Throws: ``Error`` with the byte offset when the packet is shorter than its lengths say.
    public static func reports(_ packet: [UInt8]) throws(Error) -> [Report] {
        var reader = Reader(bytes: packet)
        if packet.first == packetTypeEvent { reader.offset = 1 }
        let code = try reader.byte("event code")
        let length = Int(try reader.byte("parameter length"))
        guard reader.remaining >= length else {
            throw Error(
                offset: reader.offset, message: "parameter length \(length), only \(reader.remaining) bytes follow")
        }
        guard code == leMetaEvent, length > 0 else { return [] }
        reader.end = reader.offset + length
        let subevent = try reader.byte("sub-event")
        switch subevent {
        case advertisingReport: return try legacy(&reader)
        case extendedAdvertisingReport: return try extended(&reader)
        default: return []
        }
    }

    private static func legacy(_ reader: inout Reader) throws(Error) -> [Report] {
        let count = Int(try reader.byte("number of reports"))
        var reports: [Report] = []
        for index in 0..<count {
            let eventType = UInt16(try reader.byte("report \(index) event type"))
            let addressType = try reader.byte("report \(index) address type")
            let address = try reader.address("report \(index) address")
            let dataLength = Int(try reader.byte("report \(index) data length"))
            guard dataLength <= 31 else {
                throw Error(offset: reader.offset - 1, message: "report \(index): data length \(dataLength) over 31")
            }
            let data = try reader.bytes(dataLength, "report \(index) data")
            let rssi = Int8(bitPattern: try reader.byte("report \(index) RSSI"))
            reports.append(
                Report(
                    address: address, addressType: addressType, eventType: eventType, data: data,
                    rssi: rssi == 127 ? nil : Int(rssi)))
        }
        return reports
    }

    private static func extended(_ reader: inout Reader) throws(Error) -> [Report] {
        let count = Int(try reader.byte("number of reports"))
        var reports: [Report] = []
        for index in 0..<count {
            let low = try reader.byte("report \(index) event type")
            let high = try reader.byte("report \(index) event type")
            let addressType = try reader.byte("report \(index) address type")
            let address = try reader.address("report \(index) address")
            // primary PHY, secondary PHY, SID, TX power
            _ = try reader.bytes(4, "report \(index) PHYs, SID and TX power")
            let rssi = Int8(bitPattern: try reader.byte("report \(index) RSSI"))
            // periodic advertising interval (2), direct address type (1), direct address (6)
            _ = try reader.bytes(9, "report \(index) interval and direct address")
            let dataLength = Int(try reader.byte("report \(index) data length"))
            let data = try reader.bytes(dataLength, "report \(index) data")
            reports.append(
                Report(
                    address: address, addressType: addressType, eventType: UInt16(high) << 8 | UInt16(low),
                    data: data, rssi: rssi == 127 ? nil : Int(rssi)))
        }
        return reports
    }

    private struct Reader {
        let bytes: [UInt8]
        var offset = 0
        var end: Int

        init(bytes: [UInt8]) {
            self.bytes = bytes
            self.end = bytes.count
        }

        var remaining: Int { end - offset }

        mutating func byte(_ what: String) throws(Error) -> UInt8 {
            guard offset < end else { throw Error(offset: offset, message: "\(what) missing (packet too short)") }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func bytes(_ count: Int, _ what: String) throws(Error) -> [UInt8] {
            guard offset + count <= end else {
                throw Error(offset: offset, message: "\(what): \(count) bytes needed, \(end - offset) left")
            }
            defer { offset += count }
            return Array(bytes[offset..<offset + count])
        }

        mutating func address(_ what: String) throws(Error) -> String {
            let raw = try bytes(6, what)
            return raw.reversed().map { Hex.encode([$0]).uppercased() }.joined(separator: ":")
        }
    }
}
