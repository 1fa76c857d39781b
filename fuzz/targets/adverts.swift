// libFuzzer target: AdvertisementDecoder on raw bytes and on the bytes as hex text.
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let buffer = UnsafeBufferPointer(start: data, count: size)
    let raw = Array(buffer)
    let fromBuffer = Result { () throws(AdvertisementError) in try AdvertisementDecoder.decode(buffer) }
    let fromArray = Result { () throws(AdvertisementError) in try AdvertisementDecoder.decode(raw) }
    _ = AdvertisementDecoder.json(fromBuffer)
    _ = AdvertisementDecoder.json(fromArray)

    // The bytes as text (any bytes: invalid UTF-8 is repaired by String(decoding:)).
    let text = String(decoding: raw, as: UTF8.self)
    _ = AdvertisementDecoder.json(Result { () throws(AdvertisementError) in try AdvertisementDecoder.decode(hex: text) })
    // A Substring (non-contiguous-storage path differs) and a bridged-looking copy.
    if let space = text.firstIndex(of: " ") {
        _ = AdvertisementDecoder.json(
            Result { () throws(AdvertisementError) in try AdvertisementDecoder.decode(hex: text[space...]) })
    }

    // The bytes written as hex must decode exactly as the bytes do.
    let hex = raw.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
    let fromHex = Result { () throws(AdvertisementError) in try AdvertisementDecoder.decode(hex: hex) }
    switch (fromBuffer, fromHex) {
    case (.success(let a), .success(let b)):
        if a != b { fatalError("bytes and their hex decode differently: \(hex)") }
    case (.failure, .failure): break
    default: fatalError("bytes and their hex disagree on success: \(hex)")
    }
    return 0
}
