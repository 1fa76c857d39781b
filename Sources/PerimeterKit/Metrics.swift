import Foundation
import Synchronization

/// Counters, gauges and histograms with labels, written in the Prometheus text format
/// (version 0.0.4) for a service's `/metrics`. Thread-safe: services update it from their
/// work, the HTTP listener reads it.
public final class Metrics: Sendable {
    public enum Kind: String, Sendable { case counter, gauge, histogram }

    struct Family: Sendable {
        var kind: Kind
        var help: String
        var buckets: [Double]
        /// Label set → value, or histogram state. Keyed by the labels themselves: their text
        /// (sorted, escaped `name="value"` pairs) is built only for the exposition, not on every
        /// counted message (it was 3–4% of the evaluator's processing, `perf`, bench pipeline).
        var values: [[String: String]: Double] = [:]
        var histograms: [[String: String]: Histogram] = [:]
    }

    struct Histogram: Sendable {
        var counts: [Int]
        var sum = 0.0
        var count = 0
    }

    private let families = Mutex<[String: Family]>([:])

    public init() {}

    /// Declares a series family (once; later declarations are ignored).
    public func declare(_ name: String, _ kind: Kind, help: String, buckets: [Double] = []) {
        families.withLock { families in
            if families[name] == nil { families[name] = Family(kind: kind, help: help, buckets: buckets.sorted()) }
        }
    }

    /// Adds to a counter (or a gauge).
    public func add(_ name: String, _ value: Double = 1, labels: [String: String] = [:]) {
        families.withLock { $0[name]?.values[labels, default: 0] += value }
    }

    /// Adds counts gathered on a hot path, under one lock, and empties them.
    public func add(_ counts: inout Counts) {
        guard !counts.isEmpty else { return }
        families.withLock { families in
            for (series, value) in counts.series {
                var labels: [String: String] = [:]
                for label in [series.first, series.second].compactMap({ $0 }) { labels[label.key] = label.value }
                families[series.name]?.values[labels, default: 0] += value
            }
        }
        counts.series.removeAll(keepingCapacity: true)
    }

    /// Counts made on a hot path, added to the metrics in one go (``Metrics/add(_:)-(Counts)``):
    /// per counted message, a series of at most two labels hashed once, instead of a label
    /// dictionary built, hashed and looked up under the lock. Per journal row that was ~2% of
    /// the evaluator's processing (`perf`, `bench pipeline --transition-every 10`).
    public struct Counts: Sendable {
        struct Label: Hashable, Sendable {
            var key: String
            var value: String
        }

        struct Series: Hashable, Sendable {
            var name: String
            var first: Label?
            var second: Label?
        }

        fileprivate(set) var series: [Series: Double] = [:]

        public init() {}

        public var isEmpty: Bool { series.isEmpty }

        /// Counts `value` in the counter `name`, labelled `first` (and `second`): (name, value).
        public mutating func add(
            _ name: String, _ first: (String, String), _ second: (String, String)? = nil, by value: Double = 1
        ) {
            let key = Series(
                name: name, first: Label(key: first.0, value: first.1),
                second: second.map { Label(key: $0.0, value: $0.1) })
            series[key, default: 0] += value
        }
    }

    /// Sets a gauge.
    public func set(_ name: String, _ value: Double, labels: [String: String] = [:]) {
        families.withLock { $0[name]?.values[labels] = value }
    }

    /// Records one observation in a histogram.
    public func observe(_ name: String, _ value: Double, labels: [String: String] = [:]) {
        let key = labels
        families.withLock { families in
            guard var family = families[name], family.kind == .histogram else { return }
            var histogram =
                family.histograms[key] ?? Histogram(counts: Array(repeating: 0, count: family.buckets.count))
            for (index, bound) in family.buckets.enumerated() where value <= bound { histogram.counts[index] += 1 }
            histogram.sum += value
            histogram.count += 1
            family.histograms[key] = histogram
            families[name] = family
        }
    }

    /// The current value of a counter or gauge series (for tests and health checks).
    public func value(_ name: String, labels: [String: String] = [:]) -> Double? {
        families.withLock { $0[name]?.values[labels] }
    }

    /// Everything, in the Prometheus text exposition format.
    public func exposition() -> String {
        let snapshot = families.withLock { $0 }
        var text = ""
        for name in snapshot.keys.sorted() {
            let family = snapshot[name]!
            text += "# HELP \(name) \(family.help)\n# TYPE \(name) \(family.kind.rawValue)\n"
            switch family.kind {
            case .counter, .gauge:
                for (key, value) in family.values.map({ (Self.labelText($0.key), $0.value) }).sorted(by: { $0.0 < $1.0 }
                ) {
                    text += "\(name)\(key.isEmpty ? "" : "{\(key)}") \(Self.number(value))\n"
                }
            case .histogram:
                for (key, histogram) in family.histograms.map({ (Self.labelText($0.key), $0.value) }).sorted(by: {
                    $0.0 < $1.0
                }) {
                    let prefix = key.isEmpty ? "" : key + ","
                    for (index, bound) in family.buckets.enumerated() {
                        text += "\(name)_bucket{\(prefix)le=\"\(Self.number(bound))\"} \(histogram.counts[index])\n"
                    }
                    text += "\(name)_bucket{\(prefix)le=\"+Inf\"} \(histogram.count)\n"
                    text += "\(name)_sum\(key.isEmpty ? "" : "{\(key)}") \(Self.number(histogram.sum))\n"
                    text += "\(name)_count\(key.isEmpty ? "" : "{\(key)}") \(histogram.count)\n"
                }
            }
        }
        return text
    }

    static func labelText(_ labels: [String: String]) -> String {
        // On every counted message: label values almost never need escaping, and Foundation's
        // replacingOccurrences was 8% of the evaluator's processing time (perf, bench pipeline).
        labels.sorted { $0.key < $1.key }.map { key, value in
            guard value.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\"") || $0 == 10 })
            else { return "\(key)=\"\(value)\"" }
            var escaped = ""
            for scalar in value.unicodeScalars {
                switch scalar {
                case "\\": escaped += "\\\\"
                case "\"": escaped += "\\\""
                case "\n": escaped += "\\n"
                default: escaped.unicodeScalars.append(scalar)
                }
            }
            return "\(key)=\"\(escaped)\""
        }.joined(separator: ",")
    }

    static func number(_ value: Double) -> String {
        if value == value.rounded() && abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}

/// A count a part of a service's pipeline keeps (the journal's losses, the intake's holds) and
/// the service's `/metrics` shows as one counter: declared once, brought up to date as served.
public protocol CountedInMetrics {
    static var counterName: String { get }
    static var counterHelp: String { get }
    var counterValue: Int { get }
}

extension CountedInMetrics {
    public static func declareMetrics(in metrics: Metrics) {
        metrics.declare(counterName, .counter, help: counterHelp)
    }

    /// Brings `/metrics` up to date (called as it is served).
    public func updateMetrics(_ metrics: Metrics) {
        metrics.set(Self.counterName, Double(counterValue))
    }
}
