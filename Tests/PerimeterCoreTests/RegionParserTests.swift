import PerimeterCore
import Testing

/// One Feature per case, wrapped in a FeatureCollection.
func collection(_ features: String...) -> String {
    "{\"type\":\"FeatureCollection\",\"features\":[\(features.joined(separator: ","))]}"
}

let square = "[[[0,0],[1,0],[1,1],[0,1],[0,0]]]"

@Suite("GeoJSON regions: reading and validation")
struct RegionParserTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var json: String
        /// Every expected problem's text must contain this.
        var expected: [String]
        var testDescription: String { name }
    }

    static let invalid: [Case] = [
        Case(
            name: "unclosed ring",
            json: collection(
                #"{"type":"Feature","id":"a","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}}"#),
            expected: [
                "region 'a' (feature 0): ring 0 is not closed: the first position [0.0, 0.0] differs from the last [0.0, 1.0]"
            ]),
        Case(
            name: "fewer than 4 positions",
            json: collection(
                #"{"type":"Feature","id":"b","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[0,0]]]}}"#),
            expected: ["region 'b' (feature 0): ring 0 has 3 positions; a linear ring needs at least 4"]),
        Case(
            name: "self-intersection names the vertex",
            json: collection(
                #"{"type":"Feature","id":"bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[2,2],[2,0],[0,2],[0,0]]]}}"#
            ),
            expected: [
                "region 'bowtie' (feature 0): ring 0 self-intersects at vertex 1: edges 0–1 and 2–3 meet at [1.0, 1.0]"
            ]),
        Case(
            name: "spike folding back",
            json: collection(
                #"{"type":"Feature","id":"spike","geometry":{"type":"Polygon","coordinates":[[[0,0],[2,0],[3,0],[2,0],[2,2],[0,2],[0,0]]]}}"#
            ),
            expected: ["region 'spike' (feature 0): ring 0 folds back on itself at vertex 2"]),
        Case(
            name: "hole outside its shell",
            json: collection(
                #"{"type":"Feature","id":"h","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]],[[5,5],[6,5],[6,6],[5,6],[5,5]]]}}"#
            ),
            expected: [
                "region 'h' (feature 0): ring 1 (a hole) lies outside its exterior ring: vertex 0 [5.0, 5.0] is outside"
            ]),
        Case(
            name: "longitude out of range",
            json: collection(
                #"{"type":"Feature","id":"lon","geometry":{"type":"Polygon","coordinates":[[[0,0],[181,0],[1,1],[0,0]]]}}"#
            ),
            expected: ["region 'lon' (feature 0): ring 0 position 1: longitude 181.0 out of range [-180, 180]"]),
        Case(
            name: "latitude out of range",
            json: collection(
                #"{"type":"Feature","id":"lat","properties":{"radius":5},"geometry":{"type":"Point","coordinates":[0,-90.5]}}"#
            ),
            expected: ["region 'lat' (feature 0): geometry.coordinates: latitude -90.5 out of range [-90, 90]"]),
        Case(
            name: "infinite number",
            json: collection(
                #"{"type":"Feature","id":"inf","properties":{"radius":5},"geometry":{"type":"Point","coordinates":[1e400,0]}}"#
            ),
            // JSON has no infinity: the parser refuses the number, naming it.
            expected: ["number '1e400' is out of range"]),
        Case(
            name: "zero radius",
            json: collection(
                #"{"type":"Feature","id":"r0","properties":{"radius":0},"geometry":{"type":"Point","coordinates":[0,0]}}"#
            ),
            expected: [
                "region 'r0' (feature 0): properties.radius must be a finite number greater than 0 and at most 50000 (m), got 0"
            ]),
        Case(
            name: "negative radius",
            json: collection(
                #"{"type":"Feature","id":"r-","properties":{"radius":-3},"geometry":{"type":"Point","coordinates":[0,0]}}"#
            ),
            expected: [
                "region 'r-' (feature 0): properties.radius must be a finite number greater than 0 and at most 50000 (m), got -3"
            ]),
        Case(
            name: "circle without radius",
            json: collection(#"{"type":"Feature","id":"nr","geometry":{"type":"Point","coordinates":[0,0]}}"#),
            expected: ["region 'nr' (feature 0): a circle (Point geometry) needs properties.radius in metres"]),
        Case(
            name: "duplicate ids",
            json: collection(
                #"{"type":"Feature","id":"d","geometry":{"type":"Polygon","coordinates":\#(square)}}"#,
                #"{"type":"Feature","id":"d","geometry":{"type":"Polygon","coordinates":\#(square)}}"#),
            expected: ["region 'd' (feature 1): duplicate id: feature 0 has the same id"]),
        Case(
            name: "unknown geometry type",
            json: collection(
                #"{"type":"Feature","id":"line","geometry":{"type":"LineString","coordinates":[[0,0],[1,1]]}}"#),
            expected: ["region 'line' (feature 0): unsupported geometry type 'LineString'"]),
        Case(
            name: "wrongly typed property",
            json: collection(
                #"{"type":"Feature","id":"p","properties":{"dwellAfter":"soon","notifyOnExit":"no"},"geometry":{"type":"Polygon","coordinates":\#(square)}}"#
            ),
            expected: [
                "properties.notifyOnExit must be true or false, got \"no\"",
                "properties.dwellAfter must be a number, got a string",
            ]),
        Case(
            name: "bad schedule",
            json: collection(
                #"{"type":"Feature","id":"s","properties":{"schedule":[{"days":["mon","funday"],"start":"9am","end":"17:00"}]},"geometry":{"type":"Polygon","coordinates":\#(square)}}"#
            ),
            expected: [
                "properties.schedule[0].days: unknown day \"funday\"",
                "properties.schedule[0].start must be a time \"HH:MM\"",
            ]),
        Case(
            name: "null geometry without beacon", json: collection(#"{"type":"Feature","id":"n","geometry":null}"#),
            expected: ["region 'n' (feature 0): geometry is null and there is no properties.beacon object"]),
        Case(
            name: "empty id",
            json: collection(#"{"type":"Feature","id":"","geometry":{"type":"Polygon","coordinates":\#(square)}}"#),
            expected: ["the id is empty"]),
        Case(
            name: "not GeoJSON at all", json: #"{"type":"Topology"}"#,
            expected: ["unsupported GeoJSON type 'Topology'"]),
        Case(
            name: "not JSON", json: #"{"type": "FeatureCollection", "features": [}"#,
            expected: ["not JSON: line 1, column 44: unexpected '}': expected a value"]),
    ]

    @Test("every problem is reported, naming the region and the place", arguments: invalid)
    func invalidInput(_ testCase: Case) {
        let document = RegionParser.parse(text: testCase.json)
        #expect(!document.isValid)
        #expect(document.regions.isEmpty, "a region with problems is not usable")
        for expected in testCase.expected {
            #expect(
                document.problems.contains { $0.description.contains(expected) },
                "missing: \(expected) in \(document.problems)")
        }
    }

    @Test("all problems of a file are listed, not just the first")
    func everyProblemListed() {
        let document = RegionParser.parse(
            text: collection(
                #"{"type":"Feature","id":"ok","geometry":{"type":"Polygon","coordinates":\#(square)}}"#,
                #"{"type":"Feature","id":"bad1","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[0,0]]]}}"#,
                #"{"type":"Feature","id":"bad2","properties":{"radius":-1},"geometry":{"type":"Point","coordinates":[0,0]}}"#
            ))
        #expect(document.problems.count == 2)
        #expect(document.regions.map(\.id) == ["ok"])
    }

    @Test("properties become typed fields; ids from the Feature or properties.id")
    func typedProperties() throws {
        let document = RegionParser.parse(
            text: collection(
                #"{"type":"Feature","id":"hall","properties":{"name":"Hall","notifyOnEntry":false,"dwellAfter":60,"enterDelay":5,"exitDelay":10,"exitBuffer":15,"minAccuracy":30,"floor":2,"schedule":[{"days":["sat","sun"],"start":"10:00","end":"18:00"}],"custom":{"x":1}},"geometry":{"type":"Polygon","coordinates":\#(square)}}"#,
                #"{"type":"Feature","properties":{"id":"cafe","radius":12.5},"geometry":{"type":"Point","coordinates":[2.35,48.85]}}"#,
                #"{"type":"Feature","id":"b1","properties":{"beacon":{"uuid":"F7826DA6-4FA2-4E98-8024-BC5B71E0893E","major":1}},"geometry":null}"#
            ))
        #expect(document.isValid, "\(document.problems)")
        let hall = try #require(document.regions.first { $0.id == "hall" })
        #expect(hall.name == "Hall")
        #expect(!hall.notifyOnEntry && hall.notifyOnExit)
        #expect(hall.dwellAfter == 60 && hall.enterDelay == 5 && hall.exitDelay == 10 && hall.exitBuffer == 15)
        #expect(hall.minAccuracy == 30 && hall.floor == 2)
        #expect(hall.schedule == WeeklySchedule(windows: [.init(days: [.sat, .sun], start: 600, end: 1080)]))
        let cafe = try #require(document.regions.first { $0.id == "cafe" })
        #expect(cafe.shape == .circle(center: GeoPoint(lon: 2.35, lat: 48.85), radius: 12.5))
        #expect(!cafe.idInFeature)
        let beacon = try #require(document.regions.first { $0.id == "b1" })
        #expect(!beacon.isGeographic)
    }

    @Test("export is lossless: the same Feature comes back, bit for bit")
    func losslessExport() throws {
        let text = collection(
            #"{"type":"Feature","id":"hall","properties":{"name":"Hall","z":[1,2],"notifyOnExit":false,"dwellAfter":60.5},"geometry":{"type":"Polygon","coordinates":[[[2.123456789012,48.1],[2.2,48.1],[2.2,48.2],[2.123456789012,48.1]]]}}"#,
            #"{"type":"Feature","properties":{"id":"cafe","radius":12.5},"geometry":{"type":"Point","coordinates":[2.35,48.85]}}"#,
            #"{"type":"Feature","id":"multi","properties":{},"geometry":{"type":"MultiPolygon","coordinates":[\#(square)]}}"#,
            #"{"type":"Feature","id":"b1","properties":{"beacon":{"uuid":"F7826DA6-4FA2-4E98-8024-BC5B71E0893E","major":1}},"geometry":null}"#
        )
        let original = try JSONValue(parsing: text)
        let document = RegionParser.parse(original)
        #expect(document.isValid)
        let exported = RegionExporter.featureCollection(document.regions)
        #expect(exported == original)
        // And through text again.
        #expect(RegionParser.parse(text: exported.serialized()).regions == document.regions)
    }

    @Test("real time-zone polygons (holes, antimeridian splits) are valid and export unchanged")
    func realTimeZones() throws {
        let document = RegionParser.parse(bytes: try Fixtures.data("tz/tz-sample.geojson"))
        #expect(document.isValid, "\(document.problems.prefix(5))")
        #expect(document.regions.count == 7)
        let original = try JSONValue(parsing: try Fixtures.data("tz/tz-sample.geojson"))
        let same = RegionExporter.featureCollection(document.regions)["features"] == original["features"]
        #expect(same, "the exported features differ from the fixture's")
    }
}

/// Files drawn in geojson.io: no ids, marker Points without a radius.
@Suite("GeoJSON drawn in editors")
struct DrawnGeoJSONTests {
    static let drawn = """
        {"type":"FeatureCollection","defaultRadius":20,"features":[
          {"type":"Feature","properties":{"name":"Café Nord","marker-color":"#7e7e7e"},
           "geometry":{"type":"Point","coordinates":[2.3362,48.8604]}},
          {"type":"Feature","properties":{"stroke":"#555555"},
           "geometry":{"type":"Polygon","coordinates":[[[2.33,48.86],[2.34,48.86],[2.34,48.87],[2.33,48.86]]]}},
          {"type":"Feature","properties":{"name":"Hall","radius":35},
           "geometry":{"type":"Point","coordinates":[2.335,48.861]}}
        ]}
        """

    @Test("ids are derived (from the name, else the geometry), stably, and said; Points take the file's defaultRadius")
    func derived() throws {
        let document = RegionParser.parse(text: Self.drawn)
        #expect(document.problems.isEmpty, "\(document.problems)")
        let ids = document.regions.map(\.id)
        #expect(ids.count == 3)
        #expect(ids[0] == "café-nord")
        #expect(ids[1].hasPrefix("feature-") && ids[1].count == "feature-".count + 8, "\(ids[1])")
        #expect(ids[2] == "hall")
        #expect(RegionParser.parse(text: Self.drawn).regions.map(\.id) == ids, "the same file, the same ids")
        let warnings = document.warnings.map(\.description)
        #expect(
            warnings.contains { $0.contains("no id: using 'café-nord', derived from properties.name") }, "\(warnings)")
        #expect(warnings.contains { $0.contains("derived from its geometry") })
        #expect(warnings.contains { $0.contains("the file's defaultRadius, 20.0 m") })
        guard case .circle(_, let radius) = document.regions[0].shape else {
            Issue.record("a circle expected")
            return
        }
        #expect(radius == 20)
        guard case .circle(_, let own) = document.regions[2].shape else {
            Issue.record("a circle expected")
            return
        }
        #expect(own == 35, "a Point's own radius wins")
    }

    @Test(
        "without the file's consent a radius-less Point is refused; a bad defaultRadius and a repeated name are errors",
        arguments: [
            (
                #"{"type":"FeatureCollection","features":[{"type":"Feature","properties":{"name":"Kiosk"},"geometry":{"type":"Point","coordinates":[2.3,48.8]}}]}"#,
                "needs properties.radius in metres (or the FeatureCollection's \"defaultRadius\")"
            ),
            (
                #"{"type":"FeatureCollection","defaultRadius":-5,"features":[]}"#,
                "defaultRadius must be a number of metres"
            ),
            (
                #"{"type":"FeatureCollection","defaultRadius":10,"features":[{"type":"Feature","properties":{"name":"Kiosk"},"geometry":{"type":"Point","coordinates":[2.3,48.8]}},{"type":"Feature","properties":{"name":"kiosk"},"geometry":{"type":"Point","coordinates":[2.4,48.8]}}]}"#,
                "duplicate id"
            ),
        ] as [(String, String)])
    func refused(_ text: String, _ problem: String) {
        let problems = RegionParser.parse(text: text).problems.map(\.description)
        #expect(problems.contains { $0.contains(problem) }, "\(problems)")
    }
}
