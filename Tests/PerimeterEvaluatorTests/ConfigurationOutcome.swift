import PerimeterEvaluator
import PerimeterKit
import Testing

/// Reads an evaluator configuration for venue `museum` with `settings` and checks what
/// `describe` makes of it against `expected`; a refusal is `refused …` and matches when the
/// error contains what follows the word.
func expectConfiguration(
    _ settings: [String], _ expected: String, describe: (EvaluatorConfiguration) -> String,
    sourceLocation: SourceLocation = #_sourceLocation
) throws {
    let reader = try ConfigReader(environment: [:], overrides: ["venues.museum.timeZone=UTC"] + settings)
    let outcome: String
    do {
        outcome = describe(try EvaluatorConfiguration.read(reader))
    } catch {
        outcome = "refused \(error)"
    }
    if expected.hasPrefix("refused ") {
        #expect(
            outcome.hasPrefix("refused") && outcome.contains(expected.dropFirst(8)), "\(outcome)",
            sourceLocation: sourceLocation)
    } else {
        #expect(outcome == expected, sourceLocation: sourceLocation)
    }
}
