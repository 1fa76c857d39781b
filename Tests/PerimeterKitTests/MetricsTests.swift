import Foundation
import PerimeterKit
import PerimeterTestSupport
import Testing

@Suite("Metrics and the HTTP listener")
struct MetricsTests {
    @Test("Prometheus text format: help, type, labelled counters, gauges, cumulative histogram buckets")
    func exposition() {
        let metrics = Metrics()
        metrics.declare("perimeter_events_total", .counter, help: "Events.")
        metrics.declare("perimeter_outbox_pending", .gauge, help: "Pending.")
        metrics.declare("perimeter_latency_seconds", .histogram, help: "Latency.", buckets: [0.01, 0.1])
        metrics.add("perimeter_events_total", labels: ["venue": "museum", "event": "enter"])
        metrics.add("perimeter_events_total", 2, labels: ["venue": "museum", "event": "enter"])
        metrics.set("perimeter_outbox_pending", 7)
        for value in [0.005, 0.05, 0.5] { metrics.observe("perimeter_latency_seconds", value) }
        let text = metrics.exposition()
        #expect(text.contains("# TYPE perimeter_events_total counter\n"))
        #expect(text.contains(#"perimeter_events_total{event="enter",venue="museum"} 3"#))
        #expect(text.contains("perimeter_outbox_pending 7\n"))
        #expect(text.contains(#"perimeter_latency_seconds_bucket{le="0.01"} 1"#))
        #expect(text.contains(#"perimeter_latency_seconds_bucket{le="0.1"} 2"#))
        #expect(text.contains(#"perimeter_latency_seconds_bucket{le="+Inf"} 3"#))
        #expect(text.contains("perimeter_latency_seconds_count 3\n"))
        #expect(text.contains("perimeter_latency_seconds_sum 0.555"))
    }

    @Test("counts gathered on a hot path land in the same series as direct adds, once added, and are emptied")
    func counts() {
        let metrics = Metrics()
        metrics.declare("perimeter_events_total", .counter, help: "Events.")
        metrics.declare("perimeter_observations_total", .counter, help: "Observations.")
        metrics.add("perimeter_events_total", labels: ["venue": "museum", "event": "enter"])
        var counts = Metrics.Counts()
        counts.add("perimeter_events_total", ("venue", "museum"), ("event", "enter"))
        counts.add("perimeter_events_total", ("venue", "museum"), ("event", "enter"), by: 2)
        counts.add("perimeter_events_total", ("venue", "museum"), ("event", "exit"))
        counts.add("perimeter_observations_total", ("venue", "museum"))
        counts.add("perimeter_undeclared_total", ("venue", "museum"))
        // Not in the metrics until added.
        #expect(metrics.value("perimeter_events_total", labels: ["venue": "museum", "event": "enter"]) == 1)
        #expect(metrics.value("perimeter_events_total", labels: ["venue": "museum", "event": "exit"]) == nil)
        metrics.add(&counts)
        #expect(counts.isEmpty)
        #expect(metrics.value("perimeter_events_total", labels: ["venue": "museum", "event": "enter"]) == 4)
        #expect(metrics.value("perimeter_events_total", labels: ["venue": "museum", "event": "exit"]) == 1)
        #expect(metrics.value("perimeter_observations_total", labels: ["venue": "museum"]) == 1)
        #expect(!metrics.exposition().contains("perimeter_undeclared_total"))
        // Added again, empty: nothing changes.
        metrics.add(&counts)
        #expect(metrics.value("perimeter_events_total", labels: ["venue": "museum", "event": "enter"]) == 4)
    }

    @Test("the listener answers GET on loopback; unknown paths 404; garbage 400")
    func listener() throws {
        let server = try HTTPServer(port: 0) { path in
            path == "/metrics" ? HTTPServer.Response(body: "ok\n") : HTTPServer.Response(status: 404, body: "no\n")
        }
        server.start()
        defer { server.stop() }
        let good = try httpGet(port: server.port, path: "/metrics")
        #expect(good.status == 200)
        #expect(good.body == "ok\n")
        #expect(try httpGet(port: server.port, path: "/nope").status == 404)
        #expect(try httpGet(port: server.port, path: "").status == 400)
    }
}
