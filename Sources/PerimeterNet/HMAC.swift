import COpenSSL

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
