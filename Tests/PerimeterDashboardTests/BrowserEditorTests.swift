import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

@Suite("Dashboard region editor in a real browser (headless Chromium over DevTools)")
struct BrowserEditorTests {
    /// Viewport coordinates of a place on the map, as the page draws it.
    static func screen(_ lon: Double, _ lat: Double) -> String {
        """
        (() => {
          document.getElementById("map").scrollIntoView();  // typing in the form scrolls the map away
          const m = state.toGeo, det = m[0] * m[3] - m[1] * m[2], dx = \(lon) - m[4], dy = \(lat) - m[5];
          const x = (m[3] * dx - m[2] * dy) / det, y = (-m[1] * dx + m[0] * dy) / det;
          const c = document.querySelector("#map svg").getScreenCTM();
          return [c.a * x + c.c * y + c.e, c.b * x + c.d * y + c.f];
        })()
        """
    }

    func click(_ browser: DevToolsBrowser, lon: Double, lat: Double) async throws {
        let point = try await browser.evaluate(Self.screen(lon, lat))
        guard case .array(let xy) = point, xy.count == 2, let x = xy[0].doubleValue, let y = xy[1].doubleValue else {
            throw ChildFailure(message: "no screen point for \(lon), \(lat): \(point.serialized())")
        }
        try await browser.click(x: x, y: y)
    }

    /// Focuses a field of the editor and types into it, replacing what it held.
    func fill(_ browser: DevToolsBrowser, _ field: String, _ text: String) async throws {
        _ = try await browser.evaluate(
            "(() => { const i = document.getElementById('region-\(field)'); i.value = ''; i.focus(); return true; })()")
        try await browser.type(text)
    }

    @Test(
        "A floor plan uploaded is drawn under the regions with a floor selector; draw a circle, see a refused delay inline, fix it, publish; a visitor walking in gets an enter; click it to edit, rename, publish again"
    )
    func drawPublishEnter() async throws {
        #expect(Chromium.executable != nil, "chromium is missing: apt-get install chromium")
        let plans = TestScratch.root.appendingPathComponent("plans-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: plans) }
        let harness = try await BrowserHarness.start(dashboard: [("floorPlans", .string(plans))])
        let browser = try DevToolsBrowser(profile: harness.profile)
        let watcher = try await harness.broker.connectedClient("watcher")
        do {
            _ = try await watcher.subscribe("perimeter/v1/test/regions/kiosk-new", qos: .atLeastOnce)
            try await browser.open(BrowserTests.link(harness.signInLink, next: "/", fragment: ""))
            try await browser.waitFor(
                "document.getElementById('connection')?.className === 'on' && typeof state === 'object' && state !== null && !!state.toGeo",
                "the page signed in and streaming")

            // A plan for floor 1, its top corners on the galleries' north corners.
            let cookie = try signIn(port: harness.port, password: "browser-test-password")
            let points = "0,0,2.334833,48.8609799;800,0,2.337567,48.8609799".addingPercentEncoding(
                withAllowedCharacters: .alphanumerics)!
            let upload = try FloorPlanRouteTests.post(
                port: harness.port, path: "/api/floors/1/plan?points=\(points)", cookie: cookie, type: "image/png",
                body: FloorPlansTests.png(800, 600))
            #expect(upload.0 == 200, "\(upload)")
            try await browser.waitFor(
                "!!document.querySelector('#floorplan image[data-floor=\"1\"]')", "the plan drawn for floor 1")
            let layout = try await browser.evaluate(
                """
                (() => { const plan = document.getElementById('floorplan'), regions = document.getElementById('regions');
                  return [!!(plan.compareDocumentPosition(regions) & Node.DOCUMENT_POSITION_FOLLOWING),
                    document.getElementById('floor-select').value,
                    plan.querySelector('image').getAttribute('transform').startsWith('matrix(')]; })()
                """)
            #expect(
                layout == [true, "1", true],
                "under the regions, floor 1 chosen, placed by its matrix: \(layout.serialized())")

            // A circle north of the café, in the corridor between the galleries: its centre, then its edge 9 m north.
            _ = try await browser.evaluate("document.getElementById('draw-circle').click(), true")
            try await click(browser, lon: 2.3362, lat: 48.8608)
            try await click(browser, lon: 2.3362, lat: 48.8608 + 9 / 111_195.0)
            try await browser.waitFor(
                "document.getElementById('region-radius').value !== ''", "the radius from the drawing")
            let radius = try await browser.evaluate("Number(document.getElementById('region-radius').value)")
            #expect(abs((radius.doubleValue ?? 0) - 9) < 1, "radius drawn: \(radius.serialized())")

            try await fill(browser, "id", "kiosk-new")
            try await fill(browser, "name", "New kiosk")
            try await fill(browser, "enterDelay", "soon")
            try await fill(browser, "schedule", "[{\"start\":\"00:00\",\"end\":\"24:00\"}]")
            _ = try await browser.evaluate("document.getElementById('region-check').click(), true")
            try await browser.waitFor(
                "document.querySelectorAll('#region-problems li').length > 0", "the problems shown inline")
            let problems = try await browser.evaluate("document.getElementById('region-problems').textContent")
            #expect(problems.stringValue?.contains("properties.enterDelay") == true, "\(problems.serialized())")
            let marked = try await browser.evaluate(
                "document.getElementById('region-enterDelay').getAttribute('aria-invalid')")
            #expect(marked.stringValue == "true", "the refused field is marked")

            try await fill(browser, "enterDelay", "0")
            _ = try await browser.evaluate("document.getElementById('region-publish').click(), true")
            try await browser.waitFor(
                "document.getElementById('region-result').textContent.startsWith('published on perimeter/v1/test/regions/kiosk-new')",
                "published")
            // The broker holds it retained, as `perimeter regions put` leaves it.
            let retained = try await nextMessages(watcher, count: 1).first
            let payload = retained.map { String(decoding: $0.payload, as: UTF8.self) } ?? ""
            #expect(
                payload.contains("\"id\":\"kiosk-new\"") && payload.contains("\"name\":\"New kiosk\""), "\(payload)")
            // The page redraws the map with the new region (it came back on regions/+).
            try await browser.waitFor("!!document.getElementById('region-kiosk-new')", "the new region drawn")

            // A visitor walks into it: the evaluator sends an enter and the page shows it.
            try await harness.fix("visitor-77", lat: 48.8608, lon: 2.3362)
            try await browser.waitFor(
                "document.getElementById('feed').textContent.includes('visitor-77 enter New kiosk')",
                "the enter for the new region in the feed")

            // Editing: a click on the new region loads it (id, settings, shape); renamed and published again, it replaces it.
            _ = try await browser.evaluate(
                "document.getElementById('draw-clear').click(), document.getElementById('region-id').value = '', true")
            try await click(browser, lon: 2.3362 + 3 / 73_000.0, lat: 48.8608)
            try await browser.waitFor(
                "document.getElementById('region-id').value === 'kiosk-new' && document.getElementById('region-name').value === 'New kiosk' && Math.abs(Number(document.getElementById('region-radius').value) - 9) < 1",
                "the region loaded into the editor")
            try await fill(browser, "name", "Kiosk (moved desk)")
            _ = try await browser.evaluate("document.getElementById('region-publish').click(), true")
            try await browser.waitFor(
                "document.querySelector('#labels text[data-region=\"kiosk-new\"]')?.textContent === 'Kiosk (moved desk)'",
                "the region replaced, its new name on the map")
        } catch {
            Issue.record("\(error); \(harness.logs)")
        }
        await browser.close()
        await watcher.disconnect()
        await harness.stop()
    }
}
