import Foundation
import PerimeterCore
import PerimeterNet
import Testing

/// Event ids are what consumers deduplicate by: whichever SHA-256 makes them, they must not
/// change by a byte.
@Suite("SHA-256: the pure core's and libcrypto's agree")
struct SHA256ImplementationsTests {
    @Test("digests agree on every length around the block boundaries and on 5,000 random inputs")
    func digests() {
        var generator = SystemRandomNumberGenerator()
        var inputs: [[UInt8]] = (0...300).map { length in (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31) } }
        for _ in 0..<5_000 {
            let length = Int.random(in: 0...2_000, using: &generator)
            inputs.append((0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) })
        }
        let pure = PureSHA256()
        let libcrypto = LibcryptoSHA256()
        var mismatches: [Int] = []
        for input in inputs where pure.sha256(input) != libcrypto.sha256(input) { mismatches.append(input.count) }
        #expect(mismatches.isEmpty, "lengths that differ: \(mismatches.prefix(20))")
        // A known answer, so that both cannot be wrong the same way.
        #expect(
            Hex.encode(libcrypto.sha256(Array("abc".utf8)))
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test("event ids are byte-identical whichever implementation makes them")
    func eventIDs() {
        let names = ["", "a", "museum", "café-nord", "日本語", String(repeating: "x", count: 70), "a/b+c#d", "\u{0}"]
        let kinds: [RegionEvent.Kind] = [.enter, .exit, .dwell]
        var compared = 0
        for venue in names.prefix(4) {
            for region in names {
                for subject in names {
                    for kind in kinds {
                        for seq in [0, 1, 42, Int.max] {
                            let expected = RegionEvent.makeID(
                                venue: venue, region: region, subject: subject, kind: kind, seq: seq)
                            let through = RegionEvent.makeID(
                                venue: venue, region: region, subject: subject, kind: kind, seq: seq,
                                hasher: LibcryptoSHA256())
                            #expect(expected == through, "\(venue) \(region) \(subject) \(kind) \(seq)")
                            compared += 1
                        }
                    }
                }
            }
        }
        #expect(compared == 4 * 8 * 8 * 3 * 4)
    }
}
