import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Testing

@Suite("Dashboard legibility in a real browser (headless Chromium)")
struct BrowserLegibilityTests {
    /// The numbers of every `<tag …>` of `dom` whose opening text contains `marker`, by attribute.
    static func boxes(_ dom: String, after marker: String) -> [LabelPlacement.Box] {
        dom.components(separatedBy: marker).dropFirst().compactMap { chunk in
            guard let rect = chunk.range(of: "<rect ")?.upperBound,
                let end = chunk[rect...].firstIndex(of: ">")
            else { return nil }
            let attributes = String(chunk[rect..<end])
            func number(_ name: String) -> Double? {
                guard let start = attributes.range(of: "\(name)=\"")?.upperBound,
                    let stop = attributes[start...].firstIndex(of: "\"")
                else { return nil }
                return Double(attributes[start..<stop])
            }
            guard let x = number(" x") ?? number("x"), let y = number("y"), let w = number("width"),
                let h = number("height")
            else { return nil }
            return LabelPlacement.Box(x: x, y: y, width: w, height: h)
        }
    }

    @Test("A crowded hall: labels never overlap (crowds counted), times in the venue's zone, named; screenshots")
    func crowdedHall() async throws {
        #expect(Chromium.executable != nil, "chromium is missing: apt-get install chromium")
        let harness = try await BrowserHarness.start()
        do {
            // 30 visitors on a grid across Gallery 1, three in Gallery 2; the page is opened once
            // the evaluator has published their enters (a new page gets the whole feed and the
            // state), so its held seconds only cover drawing, not a loaded machine's processing.
            let observer = try await harness.broker.connectedClient("enters-\(UUID().uuidString.prefix(6))")
            let enters = Inbox(observer)
            defer {
                enters.stop()
                Task { await observer.disconnect() }
            }
            try await observer.subscribe("perimeter/v1/test/enter/+/+", qos: .atLeastOnce)
            for index in 0..<30 {
                let lat = 48.86030 + Double(index / 6) * 0.00011
                let lon = 2.33490 + Double(index % 6) * 0.00018
                try await harness.fix("visitor-\(index + 1)", lat: lat, lon: lon)
            }
            for index in 31...33 { try await harness.fix("visitor-\(index)", lat: 48.8606, lon: 2.3370) }
            try await enters.waitFor("an enter for each of the 33 visitors", timeout: .seconds(120)) {
                Set($0.compactMap { $0.topic.split(separator: "/").last }).count == 33
            }
            let page = BrowserTests.link(harness.signInLink, next: "/snapshot/12", fragment: "visitor-1")
            let dom = try await Chromium.run(["--dump-dom", page], profile: harness.profile)

            #expect(dom.contains("times in Europe/Paris (CET)"), "the page names the venue's zone")
            // A feed line's time is the event's `t` in Paris, not the browser's zone (UTC here).
            let parts = dom.components(separatedBy: "<li class=\"enter\" title=\"").dropFirst()
            #expect(parts.count >= 30, "enters in the feed: \(parts.count)")
            let paris = DateFormatter()
            paris.timeZone = TimeZone(identifier: "Europe/Paris")
            paris.dateFormat = "HH:mm:ss"
            if let first = parts.first, let close = first.firstIndex(of: "\""),
                let t = Timestamp.parse(String(first[..<close]))
            {
                let shown = first[first.index(after: close)...].dropFirst().prefix(8)
                #expect(String(shown) == paris.string(from: t), "feed time \(shown) for \(t)")
            } else {
                Issue.record("no enter line with its time: \(dom.suffix(3000))")
            }

            let subjects = dom.components(separatedBy: "class=\"subject\" data-subject=").count - 1
            #expect(subjects == 33, "subjects drawn: \(subjects)")
            let labels = Self.boxes(dom, after: "class=\"subject-label\"")
            let clusters = Self.boxes(dom, after: "class=\"cluster\"")
            let counted = dom.components(separatedBy: "data-count=\"").dropFirst().compactMap {
                Int($0.prefix { $0.isNumber })
            }
            #expect(labels.count + counted.reduce(0, +) == subjects, "each subject labelled or counted once")
            let all = labels + clusters
            for (i, a) in all.enumerated() {
                for b in all[(i + 1)...] { #expect(!a.overlaps(b), "label \(a) overlaps \(b)") }
            }

            // The screenshots in docs/: the page at a desktop and a narrow width.
            for (name, size) in [("dashboard-1400.png", "1400,1000"), ("dashboard-800.png", "800,1000")] {
                let shot = harness.directory.appendingPathComponent(name).path
                _ = try await Chromium.run(
                    ["--hide-scrollbars", "--window-size=\(size)", "--screenshot=\(shot)", "\(harness.url)snapshot/2"],
                    profile: harness.profile)
                let png = try Data(contentsOf: URL(fileURLWithPath: shot))
                #expect(Array(png.prefix(4)) == [0x89, 0x50, 0x4E, 0x47])
                #expect(png.count > 10_000, "a real picture: \(png.count) bytes")
                if let images = ProcessInfo.processInfo.environment["PERIMETER_DOCS_IMAGES"] {
                    let target = URL(fileURLWithPath: images).appendingPathComponent(name)
                    try? FileManager.default.removeItem(at: target)
                    try FileManager.default.copyItem(at: URL(fileURLWithPath: shot), to: target)
                }
            }
        } catch {
            Issue.record("\(error); \(harness.logs)")
        }
        await harness.stop()
    }
}

/// Waits for the dashboard's /healthz to satisfy `condition` (60 s: Chromium may start slowly).
func waitForHealth(port: Int, _ condition: (String) -> Bool) async throws {
    var last = ""
    try await waitUntil(
        "dashboard health", timeout: .seconds(60), every: .milliseconds(50), context: { "last: \(last)" }
    ) {
        guard let answer = try? httpGet(port: port, path: "/healthz") else { return false }
        last = "\(answer.status) \(answer.body)"
        return condition(answer.body)
    }
}
