// libFuzzer target: the evaluator's configuration reader — ConfigReader over a file's contents,
// `--set` overrides and PERIMETER_* variables, then EvaluatorConfiguration.read.
// Input: the configuration file; after a NUL byte, `key=value` override lines; after a second
// NUL, `NAME=value` environment lines.
// fuzz-sources: Sources/PerimeterMQTT/*.swift Sources/PerimeterKit/ConfigReader.swift Sources/PerimeterKit/ConfigReader+Common.swift Sources/PerimeterKit/ConfigError.swift Sources/PerimeterKit/LogSettings.swift Sources/PerimeterKit/Logger.swift Sources/PerimeterKit/BrokerSettings.swift Sources/PerimeterEvaluator/EvaluatorConfiguration.swift
// fuzz-flags: -I Sources/CMosquitto -lmosquitto
import Foundation

private func lines(_ bytes: ArraySlice<UInt8>) -> [String] {
    String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let parts = bytes.split(separator: 0, maxSplits: 2, omittingEmptySubsequences: false)
    let file = parts[0]
    let overrides = parts.count > 1 ? lines(parts[1]) : []
    var environment: [String: String] = [:]
    for line in parts.count > 2 ? lines(parts[2]) : [] {
        guard let equals = line.firstIndex(of: "=") else { continue }
        environment[String(line[..<equals])] = String(line[line.index(after: equals)...])
    }
    let reader: ConfigReader
    do {
        reader = try ConfigReader(contents: file, origin: "fuzz.json", environment: environment, overrides: overrides)
    } catch {
        _ = error.description
        return 0
    }
    let configuration: EvaluatorConfiguration
    do {
        configuration = try EvaluatorConfiguration.read(reader)
    } catch let error as ConfigError {
        // Every problem names its key.
        for problem in error.problems where problem.key.isEmpty { fatalError("a problem without its key: \(problem)") }
        _ = error.description
        return 0
    } catch {
        fatalError("EvaluatorConfiguration.read threw something other than ConfigError: \(error)")
    }
    // What was accepted is what the evaluator can run with.
    if configuration.venues.isEmpty { fatalError("accepted with no venue") }
    for venue in configuration.venues {
        let id = venue.settings.id
        if id.isEmpty || id.contains("/") || id.contains("+") || id.contains("#") {
            fatalError("accepted venue id '\(id)' is not one topic level")
        }
        for gateway in venue.settings.gateways {
            if let position = gateway.position, abs(position.lat) > 90 || abs(position.lon) > 180 {
                fatalError("accepted gateway '\(gateway.id)' off the globe: \(position)")
            }
        }
    }
    if !(64...16_777_216).contains(configuration.limits.maxPayloadBytes) { fatalError("maxPayloadBytes out of range") }
    if configuration.prefix.isEmpty || configuration.prefix.hasSuffix("/") { fatalError("bad prefix accepted") }
    // Secrets are redacted in what is logged.
    let metadata = reader.effectiveMetadata
    if let password = configuration.broker.password, !password.isEmpty,
        let logged = metadata["broker.password"], "\(logged)" != "***"
    {
        fatalError("broker.password logged as \(logged)")
    }
    return 0
}
