import Foundation
import Testing

@testable import PerimeterCore

/// What the privacy gate keeps of published diagnostics: a fingerprint that is the same in every
/// process (a restart must not republish every subject's diagnostics).
@Suite("Diagnostics fingerprint")
struct FingerprintTests {
    struct Holder: Codable, Equatable { var fingerprint: Fingerprint }

    @Test("the same in every process, and blind to member order")
    func stable() {
        // FNV-1a 64 of {"a":1,"b":"x"}, computed independently (Python).
        #expect(Fingerprint(["b": "x", "a": 1]).value == 0xcfcc_937b_86ef_6c1d)
        #expect(Fingerprint(["a": 1, "b": "x"]) == Fingerprint(["b": "x", "a": 1]))
        #expect(Fingerprint(["a": 1, "b": "x"]) != Fingerprint(["a": 1, "b": "y"]))
    }

    @Test("written as 16 hex digits and read back; a snapshot holding the document is hashed")
    func codable() throws {
        let holder = Holder(fingerprint: Fingerprint(["status": "always", "n": 7]))
        let data = try VenueEvaluator.snapshotEncoder().encode(holder)
        #expect(String(decoding: data, as: UTF8.self).contains(#""fingerprint":""#))
        #expect(try VenueEvaluator.snapshotDecoder().decode(Holder.self, from: data) == holder)
        let small = Holder(fingerprint: Fingerprint(value: 5))
        let smallData = try VenueEvaluator.snapshotEncoder().encode(small)
        #expect(String(decoding: smallData, as: UTF8.self) == #"{"fingerprint":"0000000000000005"}"#)
        #expect(try VenueEvaluator.snapshotDecoder().decode(Holder.self, from: smallData) == small)
        let older = #"{"fingerprint":"{\"n\":7,\"status\":\"always\"}"}"#
        #expect(try VenueEvaluator.snapshotDecoder().decode(Holder.self, from: Data(older.utf8)) == holder)
    }

    @Test(
        "the diagnostics' fingerprint from their facts equals the fingerprint of the document they make",
        arguments: [
            PrivacyGate.DiagnosticFacts(
                status: .always, reduced: false, temporaryFullAccuracy: false, inUse: false, requestInProgress: false,
                recordMissing: false, level: .always, wantsFull: false, covered: true, held: 0),
            PrivacyGate.DiagnosticFacts(
                status: .whenInUse, reduced: true, temporaryFullAccuracy: false, inUse: true, requestInProgress: false,
                recordMissing: false, level: .whenInUse, wantsFull: true, covered: true, held: 3),
            PrivacyGate.DiagnosticFacts(
                status: .notDetermined, reduced: false, temporaryFullAccuracy: false, inUse: false,
                requestInProgress: true, recordMissing: true, level: nil, wantsFull: false, covered: false, held: 12),
            PrivacyGate.DiagnosticFacts(
                status: .provisionalAlways, reduced: true, temporaryFullAccuracy: true, inUse: false,
                requestInProgress: true, recordMissing: false, level: .always, wantsFull: true, covered: true,
                held: 1),
            PrivacyGate.DiagnosticFacts(
                status: .denied, reduced: false, temporaryFullAccuracy: false, inUse: false, requestInProgress: false,
                recordMissing: false, level: nil, wantsFull: false, covered: false, held: 0),
            PrivacyGate.DiagnosticFacts(
                status: .restricted, reduced: false, temporaryFullAccuracy: false, inUse: true,
                requestInProgress: false, recordMissing: false, level: .whenInUse, wantsFull: false, covered: true,
                held: 1000),
        ])
    func diagnosticFacts(_ facts: PrivacyGate.DiagnosticFacts) {
        #expect(facts.fingerprint == Fingerprint(facts.document))
        #expect(facts.document.objectValue?.count == 15)
    }
}
