/// SHA-256 (FIPS 180-4) in plain Swift, for deterministic event ids in the pure core.
///
/// Services that sign with HMAC use OpenSSL; ids only need a stable, well-spread hash that
/// every replica computes the same way.
public struct SHA256 {
    private var state: [UInt32] = [
        0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19,
    ]
    private var buffer: [UInt8] = []
    private var length: UInt64 = 0

    private static let k: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]

    public init() { buffer.reserveCapacity(128) }

    public mutating func update(_ bytes: some Sequence<UInt8>) {
        let done: Void? = bytes.withContiguousStorageIfAvailable { update(contiguous: $0) }
        if done != nil { return }
        for byte in bytes {
            buffer.append(byte)
            length &+= 1
            if buffer.count == 64 {
                compress(block: 0)
                buffer.removeAll(keepingCapacity: true)
            }
        }
    }

    public mutating func update(_ text: String) {
        var text = text
        text.withUTF8 { update(contiguous: $0) }
    }

    /// Appends whole runs at once (event ids hash short strings many times a second).
    private mutating func update(contiguous bytes: UnsafeBufferPointer<UInt8>) {
        var offset = 0
        length &+= UInt64(bytes.count)
        while offset < bytes.count {
            let take = min(64 - buffer.count, bytes.count - offset)
            buffer.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[offset..<offset + take]))
            offset += take
            if buffer.count == 64 {
                compress(block: 0)
                buffer.removeAll(keepingCapacity: true)
            }
        }
    }

    public mutating func finalize() -> [UInt8] {
        let bitLength = length &* 8
        buffer.append(0x80)
        let padded = (buffer.count + 8 + 63) / 64 * 64
        buffer.append(contentsOf: repeatElement(0, count: padded - 8 - buffer.count))
        withUnsafeBytes(of: bitLength.bigEndian) { buffer.append(contentsOf: $0) }
        for start in stride(from: 0, to: buffer.count, by: 64) { compress(block: start) }
        buffer.removeAll()
        var digest = [UInt8](repeating: 0, count: 32)
        for (index, word) in state.enumerated() {
            digest[index * 4] = UInt8(truncatingIfNeeded: word >> 24)
            digest[index * 4 + 1] = UInt8(truncatingIfNeeded: word >> 16)
            digest[index * 4 + 2] = UInt8(truncatingIfNeeded: word >> 8)
            digest[index * 4 + 3] = UInt8(truncatingIfNeeded: word)
        }
        return digest
    }

    public static func hash(_ bytes: some Sequence<UInt8>) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(bytes)
        return hasher.finalize()
    }

    /// Compresses the 64 bytes of `buffer` from `start` into the state.
    private mutating func compress(block start: Int) {
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { w in
            buffer.withUnsafeBufferPointer { bytes in
                for i in 0..<16 {
                    let at = start + i * 4
                    w[i] =
                        UInt32(bytes[at]) << 24 | UInt32(bytes[at + 1]) << 16 | UInt32(bytes[at + 2]) << 8
                        | UInt32(bytes[at + 3])
                }
            }
            compress(schedule: w)
        }
    }

    private mutating func compress(schedule w: UnsafeMutableBufferPointer<UInt32>) {
        for i in 16..<64 {
            let s0 = rotate(w[i - 15], 7) ^ rotate(w[i - 15], 18) ^ (w[i - 15] >> 3)
            let s1 = rotate(w[i - 2], 17) ^ rotate(w[i - 2], 19) ^ (w[i - 2] >> 10)
            w[i] = w[i - 16] &+ s0 &+ w[i - 7] &+ s1
        }
        var a = state[0]
        var b = state[1]
        var c = state[2]
        var d = state[3]
        var e = state[4]
        var f = state[5]
        var g = state[6]
        var h = state[7]
        for i in 0..<64 {
            let s1 = rotate(e, 6) ^ rotate(e, 11) ^ rotate(e, 25)
            let choose = (e & f) ^ (~e & g)
            let t1 = h &+ s1 &+ choose &+ Self.k[i] &+ w[i]
            let s0 = rotate(a, 2) ^ rotate(a, 13) ^ rotate(a, 22)
            let majority = (a & b) ^ (a & c) ^ (b & c)
            let t2 = s0 &+ majority
            h = g
            g = f
            f = e
            e = d &+ t1
            d = c
            c = b
            b = a
            a = t1 &+ t2
        }
        state[0] &+= a
        state[1] &+= b
        state[2] &+= c
        state[3] &+= d
        state[4] &+= e
        state[5] &+= f
        state[6] &+= g
        state[7] &+= h
    }

    @inline(__always)
    private func rotate(_ value: UInt32, _ count: UInt32) -> UInt32 { (value >> count) | (value << (32 - count)) }
}

/// A SHA-256 implementation, so that the pure core can hash without C while a service may hand
/// it libcrypto's (`LibcryptoSHA256` in PerimeterNet). Every implementation gives the same
/// digest: event ids made with either are byte-identical (tested on many inputs).
/// The SHA-256 that event ids are made with, as an engine parameter: the pure one by default,
/// libcrypto's where a service injects it (ids are byte-identical either way). Parameters that
/// differ only in the implementation are equal.
public struct EventIDHasher: Sendable, Hashable {
    public let implementation: any SHA256Hashing

    public init(_ implementation: any SHA256Hashing = PureSHA256()) { self.implementation = implementation }

    public static func == (left: EventIDHasher, right: EventIDHasher) -> Bool { true }
    public func hash(into hasher: inout Hasher) {}
}

public protocol SHA256Hashing: Sendable {
    /// The 32-byte digest of `bytes`.
    func sha256(_ bytes: [UInt8]) -> [UInt8]
}

/// The pure-Swift ``SHA256``: the default everywhere.
public struct PureSHA256: SHA256Hashing {
    public init() {}
    public func sha256(_ bytes: [UInt8]) -> [UInt8] { SHA256.hash(bytes) }
}
