// libFuzzer target: the edge agent's parsers of outside input. The bytes as NMEA text (each
// line through NMEASentence.parse, sentences through NMEAFixAssembler), as gpsd JSON lines
// (GPSDReport.interpret), and as an HCI event packet (HCIEvent.reports, then
// AdvertisementDecoder on each report's data).
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let raw = Array(UnsafeBufferPointer(start: data, count: size))
    var assembler = NMEAFixAssembler()
    for line in Lines(data: Data(raw)) {
        if let sentence = try? NMEASentence.parse(line), let reading = assembler.add(sentence) {
            if !reading.position.isValid { fatalError("NMEA gave a position off the globe: \(reading.position)") }
            _ = reading.payload.serialized()
        }
        if case .fix(let reading)? = try? GPSDReport.interpret(String(line)) {
            if !reading.position.isValid { fatalError("TPV gave a position off the globe: \(reading.position)") }
            _ = reading.payload.serialized()
        }
    }
    _ = assembler.finish()
    if let reports = try? HCIEvent.reports(raw) {
        for report in reports {
            if report.data.count > 255 { fatalError("report data longer than its length byte allows") }
            _ = try? AdvertisementDecoder.decode(report.data)
        }
    }
    return 0
}
