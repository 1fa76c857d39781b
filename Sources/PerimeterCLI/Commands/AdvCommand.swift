import Foundation
import PerimeterCore

/// `perimeter adv …`: raw BLE advertising data.
struct AdvCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "adv", abstract: "Work with raw BLE advertising data.",
        subcommands: [AdvDecodeCommand.self])
}

/// `perimeter adv decode [HEX…]`: the beacon frame each advert carries, one JSON object per line.
struct AdvDecodeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "decode", abstract: "Decode hex advertising data into beacon identities, as JSON lines.",
        discussion: """
            Each input is advertising data as a scanner reports it (AD structures: length,
            type, data), in hex, either case, optionally with a 0x prefix. With no arguments,
            reads one per line from standard input (blank lines are skipped).

            Prints one compact JSON object per input, in order:
              {"type":"ibeacon","uuid":…,"major":…,"minor":…,"tx":…}
              {"type":"eddystone-uid","namespace":…,"instance":…,"tx0m":…}
              {"type":"altbeacon","id1":…,"id2":…,"id3":…,"tx":…}
              {"type":"eddystone-url","url":…,"tx0m":…}
              {"type":null}             no beacon identity (Eddystone-TLM included)
              {"error":"at byte N: …"}  malformed; the others are still decoded, exit status 1
            """)

    @Argument(help: "Advertising data in hex; standard input, one per line, when absent.", valueName: "hex")
    var hex: [String]

    func run() async throws {
        var output = LineWriter()
        var errors = 0
        var count = 0
        func decode(_ text: some StringProtocol) {
            let result = Result { () throws(AdvertisementError) in try AdvertisementDecoder.decode(hex: text) }
            if case .failure = result { errors += 1 }
            count += 1
            output.write(AdvertisementDecoder.json(result).serialized())
        }
        if hex.isEmpty {
            for line in Lines(data: try InputFiles.read(nil)) where !line.allSatisfy(\.isWhitespace) {
                decode(line)
            }
        } else {
            for text in hex { decode(text) }
        }
        output.flush()
        if errors > 0 { throw ExitCode(1, "adv decode: \(errors) of \(count) advert(s) malformed") }
    }
}
