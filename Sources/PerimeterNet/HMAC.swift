import COpenSSL
import PerimeterCore

/// HMAC-SHA256 through OpenSSL's libcrypto: the webhook signature.
public enum HMACSHA256 {
    public static func mac(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        key.withUnsafeBufferPointer { keyBuffer in
            message.withUnsafeBufferPointer { messageBuffer in
                _ = HMAC(
                    EVP_sha256(), keyBuffer.baseAddress, Int32(key.count), messageBuffer.baseAddress, message.count,
                    &out, &length)
            }
        }
        return Array(out.prefix(Int(length)))
    }

}

/// SHA-256 through libcrypto (EVP), for services to hand to the pure core's hashing seam.
public struct LibcryptoSHA256: SHA256Hashing {
    public init() {}

    public func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = bytes.withUnsafeBufferPointer { input in
            EVP_Digest(input.baseAddress, input.count, &digest, &length, EVP_sha256(), nil)
        }
        // EVP_Digest fails only without memory for its context: the pure implementation answers.
        return ok == 1 && length == 32 ? digest : SHA256.hash(bytes)
    }
}
