import Foundation
import PerimeterCore
import PerimeterTestSupport

/// A small venue: two rooms, a café (a circle) and a beacon region with one placed beacon,
/// around the Paris sample museum.
enum DashboardFixtures {
    static let regionsText = """
        {"type": "FeatureCollection", "features": [
          {"type": "Feature", "id": "gallery-1", "properties": {"name": "Gallery 1"}, "geometry": {"type": "Polygon", "coordinates": [[[2.334833, 48.8602604], [2.3359266, 48.8602604], [2.3359266, 48.8609799], [2.334833, 48.8609799], [2.334833, 48.8602604]]]}},
          {"type": "Feature", "id": "gallery-2", "properties": {"name": "Gallery 2"}, "geometry": {"type": "Polygon", "coordinates": [[[2.3364734, 48.8602604], [2.337567, 48.8602604], [2.337567, 48.8609799], [2.3364734, 48.8609799], [2.3364734, 48.8602604]]]}},
          {"type": "Feature", "id": "cafe", "properties": {"name": "Café", "radius": 12}, "geometry": {"type": "Point", "coordinates": [2.3362, 48.8604403]}},
          {"type": "Feature", "id": "gallery-1-beacons", "properties": {"name": "Gallery 1 beacons", "beacon": {"uuid": "F7826DA6-4FA2-4E98-8024-BC5B71E0893E", "major": 1}, "beacons": [{"lat": 48.8605, "lon": 2.3352, "radius": 6}]}, "geometry": null}
        ]}
        """

    static var regions: [Region] { RegionParser.parse(text: regionsText).regions }

    static func regionsFile() throws -> String {
        let directory = TestScratch.root.appendingPathComponent(
            "perimeter-dash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("regions.geojson").path
        try regionsText.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// An enter event payload as the evaluator publishes it, with the fix behind it.
    static func enter(_ subject: String, _ region: String, lat: Double, lon: Double) -> String {
        #"{"id":"0123456789abcdef0123456789abcdef","event":"enter","venue":"test","region":"\#(region)","subject":"\#(subject)","t":"2026-12-01T00:10:59.000Z","seq":1,"source":"gps","fix":{"t":"2026-12-01T00:10:56.000Z","lat":\#(lat),"lon":\#(lon),"acc":5}}"#
    }
}
