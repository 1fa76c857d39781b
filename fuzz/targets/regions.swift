// libFuzzer target: RegionParser.parse(bytes:), then GeofenceEngine and RegionExporter on what it accepts.
import Foundation

private func points(of region: Region) -> [GeoPoint] {
    switch region.shape {
    case .circle(let center, _): return [center]
    case .polygons(let polygons):
        var points: [GeoPoint] = []
        for polygon in polygons.prefix(2) {
            for ring in polygon.prefix(2) {
                points += ring.prefix(3)
            }
        }
        return points
    case .beacon: return []
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let document = RegionParser.parse(bytes: bytes)
    for problem in document.problems { _ = problem.description }
    guard !document.regions.isEmpty else { return 0 }

    // All regions in one engine, and each region alone.
    var engine = GeofenceEngine(regions: document.regions)
    let start = Date(timeIntervalSince1970: 1_767_268_800)
    var fixes: [GeoPoint] = [GeoPoint(lon: 0, lat: 0), GeoPoint(lon: 179.9999, lat: 0), GeoPoint(lon: -180, lat: 89.9)]
    for region in document.regions.prefix(8) { fixes += points(of: region) }
    for (index, point) in fixes.prefix(24).enumerated() {
        let t = start.addingTimeInterval(Double(index) * 15)
        _ = engine.process(Fix(subject: "s1", t: t, position: point, accuracy: 5))
        _ = engine.process(Fix(subject: "s2", t: t, position: point, accuracy: Double(index) * 100, floor: index % 3 - 1))
    }
    _ = engine.advance(to: start.addingTimeInterval(86_400))
    for region in document.regions.prefix(8) {
        var single = GeofenceEngine(regions: [region])
        for (index, point) in points(of: region).enumerated() {
            _ = single.process(Fix(subject: "s", t: start.addingTimeInterval(Double(index)), position: point, accuracy: 1))
        }
        _ = single.remove(regionID: region.id, at: start.addingTimeInterval(100))
    }

    let exported = RegionExporter.featureCollection(document.regions)
    _ = exported.serialized()
    return 0
}
