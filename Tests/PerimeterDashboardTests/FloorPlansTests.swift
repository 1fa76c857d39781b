import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Testing

@testable import PerimeterDashboard

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Floor plans: image type by its bytes, bounded, georeferenced, kept on disk")
struct FloorPlansTests {
    /// The first bytes of a PNG of `width` × `height` (signature and IHDR).
    static func png(_ width: UInt32, _ height: UInt32) -> [UInt8] {
        func be(_ value: UInt32) -> [UInt8] { [24, 16, 8, 0].map { UInt8((value >> $0) & 0xFF) } }
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + be(13) + Array("IHDR".utf8) + be(width) + be(height)
            + [8, 6, 0, 0, 0] + [0, 0, 0, 0]
    }

    /// A JPEG's SOI, an APP0 segment, then SOF0 with `width` × `height`.
    static func jpeg(_ width: Int, _ height: Int) -> [UInt8] {
        [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0x4A, 0x46]
            + [
                0xFF, 0xC0, 0x00, 0x11, 0x08, UInt8(height >> 8), UInt8(height & 0xFF), UInt8(width >> 8),
                UInt8(width & 0xFF),
            ]
            + [UInt8](repeating: 0, count: 12)
    }

    @Test(
        "The type and size come from the bytes",
        arguments: [
            (png(800, 600), "image/png 800×600"), (jpeg(1024, 768), "image/jpeg 1024×768"),
            (Array("GIF89a....".utf8), "none"), (Array("<svg xmlns=\"http://www.w3.org/2000/svg\"/>".utf8), "none"),
            ([0x89, 0x50, 0x4E, 0x47], "none"), ([0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x01, 0, 0, 0, 0, 0, 0], "none"),
        ])
    func inspect(bytes: [UInt8], expected: String) {
        let found = FloorPlans.inspect(bytes).map { "\($0.type) \($0.width)×\($0.height)" } ?? "none"
        #expect(found == expected)
    }

    @Test(
        "Control points: two or three x,y,lon,lat",
        arguments: [
            ("0,0,2.3348,48.8610;800,0,2.3376,48.8610", "2"), ("0,0,2.33,48.86;1,0,2.34,48.86;0,1,2.33,48.87", "3"),
            ("0,0,2.33,48.86", "give two or three control points (x,y,lon,lat;…), got 1"),
            ("0,0,2.33;1,1,2.34,48.86", "control point '0,0,2.33': expected x,y,lon,lat (pixels, then degrees)"),
            ("0,0,200,48;1,1,2.34,48.86", "control point '0,0,200,48': expected x,y,lon,lat (pixels, then degrees)"),
        ])
    func points(text: String, expected: String) {
        do {
            #expect(String(try FloorPlans.points(text).count) == expected)
        } catch {
            #expect(error.description == expected)
        }
    }

    @Test("A plan is kept on disk and read back by a new store; refusals name the problem")
    func persistence() throws {
        let directory = TestScratch.root.appendingPathComponent("plans-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let map = VenueMap(title: "test", regions: DashboardFixtures.regions)
        let projection = SVGMapRenderer(width: 960, height: 640, margin: 40).projection(for: map)
        let store = try FloorPlans(directory: directory)
        let points = try FloorPlans.points("0,0,2.334833,48.8609799;800,0,2.337567,48.8609799")
        let plan = try store.save(floor: 1, image: Self.png(800, 600), points: points, projection: projection)
        #expect(plan.type == "image/png" && plan.width == 800 && store.version == 1)
        let again = try FloorPlans(directory: directory)
        #expect(again.all == [plan], "read back from \(directory)")
        #expect(again.image(floor: 1)?.bytes == Self.png(800, 600))
        // The plan's corners land on the galleries' corners: a similarity, y down.
        let transform = try FloorPlans.transform(plan, projection: projection)
        let left = projection.point(GeoPoint(lon: 2.334833, lat: 48.8609799))
        let mapped = transform.apply(.init(0, 0))
        #expect(abs(mapped.x - left.x) < 1e-6 && abs(mapped.y - left.y) < 1e-6)

        let refusals: [(Int, [UInt8], String)] = [
            (1, Array("GIF89a".utf8), "not a PNG or JPEG image (by its first bytes)"),
            (500, Self.png(10, 10), "floor 500: expected -10…200"),
            (2, Self.png(0, 10), "image of 0×10 pixels: each side must be 1…16384"),
            (2, Self.png(10, 10) + [UInt8](repeating: 0, count: FloorPlans.maxBytes), "the image is"),
        ]
        for (floor, bytes, message) in refusals {
            do {
                _ = try store.save(floor: floor, image: bytes, points: points, projection: projection)
                Issue.record("accepted \(message)")
            } catch {
                #expect(error.description.hasPrefix(message), "\(error)")
            }
        }
        let same = try FloorPlans.points("5,5,2.3350,48.8605;5,5,2.3360,48.8606")
        #expect(throws: FloorPlans.Problem(description: "control points: the two control points are at the same pixel"))
        {
            try store.save(floor: 2, image: Self.png(10, 10), points: same, projection: projection)
        }
        #expect(store.all.map(\.floor) == [1], "nothing refused was kept")
    }
}

@Suite("Floor plans through the dashboard: upload, state, image served; refused without a session")
struct FloorPlanRouteTests {
    /// A POST with a binary body over a plain socket: the status line and the body.
    static func post(port: Int, path: String, cookie: String?, type: String, body: [UInt8]) throws -> (Int, String) {
        let fd = try connectLoopback(port: port)
        defer { close(fd) }
        var head = [
            "POST \(path) HTTP/1.0", "Host: 127.0.0.1", "Content-Type: \(type)", "Content-Length: \(body.count)",
        ]
        if let cookie { head.append("Cookie: \(cookie)") }
        _ = sendAll(fd, Array((head + ["", ""]).joined(separator: "\r\n").utf8) + body)
        let response = readHTTPResponse(fd)
        return (response.status, response.body)
    }

    @Test("Upload a PNG for floor 1: kept in dashboard.floorPlans, in the state with its matrix, served back")
    func upload() async throws {
        let broker = try await TestBroker.start()
        let directory = TestScratch.root.appendingPathComponent("plans-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let configuration = DashboardConfiguration(
            broker: BrokerSettings(port: broker.port, clientID: "dashboard-plans"), venue: "test",
            regionsPath: try DashboardFixtures.regionsFile(), http: ("127.0.0.1", 0), floorPlansPath: directory,
            password: testPassword)
        let (running, port, _) = try await startDashboard(configuration)
        let cookie = try signIn(port: port)
        let png = FloorPlansTests.png(800, 600) + [UInt8](repeating: 7, count: 100)
        let points = "0,0,2.334833,48.8609799;800,0,2.337567,48.8609799".addingPercentEncoding(
            withAllowedCharacters: .alphanumerics)!
        let refused = try Self.post(
            port: port, path: "/api/floors/1/plan?points=\(points)", cookie: nil, type: "image/png", body: png)
        #expect(refused.0 == 401, "no session: \(refused)")
        let gif = try Self.post(
            port: port, path: "/api/floors/1/plan?points=\(points)", cookie: cookie, type: "image/png",
            body: Array("GIF89a-------------------------".utf8))
        #expect(gif.0 == 422 && gif.1.contains("not a PNG or JPEG image"), "\(gif)")
        let saved = try Self.post(
            port: port, path: "/api/floors/1/plan?points=\(points)", cookie: cookie, type: "image/png", body: png)
        #expect(saved.0 == 200 && saved.1.contains(#""floor":1"#), "\(saved)")
        #expect(FileManager.default.fileExists(atPath: "\(directory)/floor-1.png"))
        #expect(FileManager.default.fileExists(atPath: "\(directory)/floor-1.json"))
        let image = try authenticatedGet(port: port, path: "/floors/1/plan", cookie: cookie)
        #expect(image.status == 200 && image.header("Content-Type") == "image/png")
        let stream = try EventStreamReader(port: port, cookie: cookie)
        try await stream.waitFor("a state naming floor 1's plan") { $0.contains(#""href":"/floors/1/plan""#) }
        stream.close()
        running.cancel()
        _ = try? await running.value
        await broker.stop()
    }
}
