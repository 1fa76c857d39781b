import Foundation
import PerimeterCore
import PerimeterKit

#if canImport(Glibc)
    import Glibc
#endif

/// BLE advertising reports from a Linux Bluetooth controller through a raw HCI socket
/// (what `hcidump` reads): each LE advertising report becomes a raw advert (`mac`, `data`,
/// `rssi`) in one scan per second, for the evaluator to decode (gateway topology).
///
/// The socket is bound to `hci{device}` with an event filter for LE Meta events. Scanning
/// itself must be enabled on the controller (e.g. `btmgmt find -l` or `hcitool lescan
/// --duplicates`); this source only listens. Needs `CAP_NET_RAW` (or root) and a radio.
public struct HCISource: AgentSource {
    public let device: Int
    public let logger: Logger
    /// What each scan is dated by and when a one-second window closes.
    public let clock: any TimeSource
    public var name: String { "hci" }

    public init(device: Int, logger: Logger, clock: any TimeSource = SystemTimeSource()) {
        self.clock = clock
        self.device = device
        self.logger = logger
    }

    // From <bluetooth/hci.h>: the constants BlueZ's headers define (not installed here).
    static let afBluetooth: Int32 = 31
    static let btprotoHCI: Int32 = 1
    static let solHCI: Int32 = 0
    static let hciFilter: Int32 = 2

    /// `struct sockaddr_hci { sa_family_t hci_family; unsigned short hci_dev, hci_channel; }`
    struct SockaddrHCI {
        var family: UInt16
        var device: UInt16
        var channel: UInt16
    }

    /// `struct hci_filter { uint32_t type_mask; uint32_t event_mask[2]; uint16_t opcode; }`
    struct HCIFilter {
        var typeMask: UInt32
        var eventMask: (UInt32, UInt32)
        var opcode: UInt16
    }

    public func run(emit: @Sendable ([AgentMessage]) async throws -> Void) async throws {
        let fd = socket(Self.afBluetooth, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), Self.btprotoHCI)
        guard fd >= 0 else {
            throw AgentSourceError(
                "hci\(device): cannot open a raw HCI socket: \(String(cString: strerror(errno))) "
                    + "(needs a Bluetooth controller and CAP_NET_RAW)")
        }
        defer { close(fd) }
        // Only HCI events (packet type 4), only LE Meta (0x3E).
        var filter = HCIFilter(typeMask: 1 << 4, eventMask: (0, 1 << (0x3E - 32)), opcode: 0)
        guard setsockopt(fd, Self.solHCI, Self.hciFilter, &filter, socklen_t(MemoryLayout<HCIFilter>.size)) == 0 else {
            throw AgentSourceError("hci\(device): cannot set the event filter: \(String(cString: strerror(errno)))")
        }
        var address = SockaddrHCI(family: UInt16(Self.afBluetooth), device: UInt16(device), channel: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<SockaddrHCI>.size))
            }
        }
        guard bound == 0 else {
            throw AgentSourceError("hci\(device): cannot bind: \(String(cString: strerror(errno)))")
        }
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        logger.info("listening for LE advertising reports", metadata: ["hci": "hci\(device)"])
        var buffer = [UInt8](repeating: 0, count: 1024)
        var adverts: [AdvertReading] = []
        var windowStart = clock.now
        while !Task.isCancelled {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n > 0 {
                do {
                    for report in try HCIEvent.reports(Array(buffer[0..<n])) {
                        guard let rssi = report.rssi else { continue }
                        adverts.append(.raw(mac: report.address, data: report.data, rssi: rssi))
                    }
                } catch {
                    logger.debug("HCI event skipped", metadata: ["error": "\(error)"])
                }
            } else if n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
                throw AgentSourceError("hci\(device): read failed: \(String(cString: strerror(errno)))")
            }
            let now = clock.now
            if now.timeIntervalSince(windowStart) >= 1 {
                // At most 256 adverts per message (the evaluator's limit); the strongest first.
                let strongest = adverts.sorted { rssi($0) > rssi($1) }.prefix(256)
                try await emit([.ble(agent: nil, BLEScan(t: now, adverts: Array(strongest)))])
                adverts.removeAll()
                windowStart = now
            }
            await Task.yield()
        }
    }

    private func rssi(_ advert: AdvertReading) -> Int {
        switch advert {
        case .iBeacon(_, _, _, let rssi, _), .raw(_, _, let rssi): rssi
        }
    }
}
