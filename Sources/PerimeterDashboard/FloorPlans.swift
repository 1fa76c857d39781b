import Foundation
import PerimeterCore
import Synchronization

/// Uploaded floor plan images, one per floor, each georeferenced by two or three control
/// points (a pixel of the image and the place it shows), kept in `dashboard.floorPlans`: for
/// floor N the image `floor-N.png` or `floor-N.jpg` and its points `floor-N.json`
/// (`{"type", "width", "height", "points": [{"x", "y", "lon", "lat"}]}`). Files are written to
/// a temporary name and renamed, so a crash leaves the old plan or the new one.
///
/// Bounded: at most ``maxBytes`` per image, ``maxFloors`` floors, floors −10…200 (the region
/// schema's range), 16,384 pixels a side; the type is read from the image's first bytes (PNG
/// or JPEG), never from a file name or a header the client sends.
final class FloorPlans: Sendable {
    static let maxBytes = 2 * 1024 * 1024
    static let maxFloors = 32
    static let floors = -10...200

    struct ControlPoint: Sendable, Equatable {
        var x: Double
        var y: Double
        var geo: GeoPoint
    }

    struct Plan: Sendable, Equatable {
        var floor: Int
        var type: String
        var width: Int
        var height: Int
        var points: [ControlPoint]
    }

    struct Problem: Error, CustomStringConvertible, Equatable {
        var description: String
    }

    let directory: String
    private let plans = Mutex<[Int: Plan]>([:])
    /// Bumped by every upload: the service redraws the state when it changes.
    private let changes = Atomic<Int>(0)
    /// Rings at every upload (the service's one reader; rings while it is busy are one).
    let uploaded: AsyncStream<Void>
    private let upload: AsyncStream<Void>.Continuation

    /// Reads the plans already in `directory` (creating it when missing); a plan whose files
    /// do not read back is skipped.
    init(directory: String) throws {
        self.directory = directory
        (uploaded, upload) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var found: [Int: Plan] = [:]
        for floor in Self.floors {
            guard let data = FileManager.default.contents(atPath: metadataPath(floor)),
                let json = try? JSONParser.parse(Array(data)), let plan = Self.plan(floor: floor, json)
            else { continue }
            found[floor] = plan
        }
        plans.withLock { $0 = found }
    }

    var version: Int { changes.load(ordering: .relaxed) }
    var all: [Plan] { plans.withLock { $0.values.sorted { $0.floor < $1.floor } } }

    func metadataPath(_ floor: Int) -> String { "\(directory)/floor-\(floor).json" }
    func imagePath(_ floor: Int, type: String) -> String {
        "\(directory)/floor-\(floor).\(type == "image/png" ? "png" : "jpg")"
    }

    /// The image of a floor's plan and its type.
    func image(floor: Int) -> (type: String, bytes: [UInt8])? {
        guard let plan = plans.withLock({ $0[floor] }),
            let data = FileManager.default.contents(atPath: imagePath(floor, type: plan.type))
        else { return nil }
        return (plan.type, Array(data))
    }

    /// The type and size of an image, from its bytes: PNG (signature, then IHDR) or JPEG (SOI,
    /// then the first start-of-frame segment). nil for anything else.
    static func inspect(_ bytes: [UInt8]) -> (type: String, width: Int, height: Int)? {
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        func be(_ at: Int, _ count: Int) -> Int {
            (at..<at + count).reduce(0) { $0 << 8 | Int(bytes[$1]) }
        }
        if bytes.count >= 24, Array(bytes.prefix(8)) == png, Array(bytes[12..<16]) == Array("IHDR".utf8) {
            return ("image/png", be(16, 4), be(20, 4))
        }
        guard bytes.count >= 4, bytes[0] == 0xFF, bytes[1] == 0xD8, bytes[2] == 0xFF else { return nil }
        var index = 2
        while index + 9 < bytes.count {
            guard bytes[index] == 0xFF else { return nil }
            let marker = bytes[index + 1]
            if marker == 0xFF {
                index += 1
                continue
            }
            let length = be(index + 2, 2)
            // SOF0…SOF15 but DHT (C4), JPG (C8) and DAC (CC) carry the frame's size.
            if (0xC0...0xCF).contains(marker) && ![0xC4, 0xC8, 0xCC].contains(marker) {
                return ("image/jpeg", be(index + 7, 2), be(index + 5, 2))
            }
            guard length >= 2 else { return nil }
            index += 2 + length
        }
        return nil
    }

    /// Control points from `x,y,lon,lat;x,y,lon,lat[;…]` (two or three).
    static func points(_ text: String) throws(Problem) -> [ControlPoint] {
        var result: [ControlPoint] = []
        for part in text.split(separator: ";") {
            let numbers = part.split(separator: ",").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) }
            guard numbers.count == 4, numbers.allSatisfy(\.isFinite), (-180...180).contains(numbers[2]),
                (-90...90).contains(numbers[3])
            else {
                throw Problem(description: "control point '\(part)': expected x,y,lon,lat (pixels, then degrees)")
            }
            result.append(ControlPoint(x: numbers[0], y: numbers[1], geo: GeoPoint(lon: numbers[2], lat: numbers[3])))
        }
        guard (2...3).contains(result.count) else {
            throw Problem(description: "give two or three control points (x,y,lon,lat;…), got \(result.count)")
        }
        return result
    }

    /// Checks and keeps a floor's plan: the image by its bytes, the points by the transform
    /// they fix (in the venue's picture plane, where a plan drawn to scale is a similarity).
    func save(floor: Int, image: [UInt8], points: [ControlPoint], projection: MapProjection) throws(Problem) -> Plan {
        guard Self.floors.contains(floor) else { throw Problem(description: "floor \(floor): expected -10…200") }
        guard image.count <= Self.maxBytes else {
            throw Problem(description: "the image is \(image.count) bytes; at most \(Self.maxBytes)")
        }
        guard let (type, width, height) = Self.inspect(image) else {
            throw Problem(description: "not a PNG or JPEG image (by its first bytes)")
        }
        guard (1...16_384).contains(width), (1...16_384).contains(height) else {
            throw Problem(description: "image of \(width)×\(height) pixels: each side must be 1…16384")
        }
        let plan = Plan(floor: floor, type: type, width: width, height: height, points: points)
        _ = try Self.transform(plan, projection: projection)
        let count = plans.withLock { $0[floor] == nil ? $0.count + 1 : $0.count }
        guard count <= Self.maxFloors else { throw Problem(description: "at most \(Self.maxFloors) floor plans") }
        do {
            for old in ["image/png", "image/jpeg"] where old != type {
                try? FileManager.default.removeItem(atPath: imagePath(floor, type: old))
            }
            try Data(image).write(to: URL(fileURLWithPath: imagePath(floor, type: type)), options: .atomic)
            try Data(Self.json(plan).serialized().utf8).write(
                to: URL(fileURLWithPath: metadataPath(floor)), options: .atomic)
        } catch {
            throw Problem(description: "could not write the plan into \(directory): \(error)")
        }
        plans.withLock { $0[floor] = plan }
        changes.add(1, ordering: .relaxed)
        upload.yield()
        return plan
    }

    /// Image pixels → picture coordinates: the control points' places projected, then fitted.
    static func transform(_ plan: Plan, projection: MapProjection) throws(Problem) -> PlaneTransform {
        do {
            return try PlaneTransform.fitting(
                from: plan.points.map { PlaneTransform.Point($0.x, $0.y) },
                to: plan.points.map {
                    let p = projection.point($0.geo)
                    return PlaneTransform.Point(p.x, p.y)
                })
        } catch {
            throw Problem(description: "control points: \(error.description)")
        }
    }

    static func json(_ plan: Plan) -> JSONValue {
        [
            "type": .string(plan.type), "width": .number(Double(plan.width)), "height": .number(Double(plan.height)),
            "points": .array(
                plan.points.map {
                    ["x": .number($0.x), "y": .number($0.y), "lon": .number($0.geo.lon), "lat": .number($0.geo.lat)]
                }),
        ]
    }

    static func plan(floor: Int, _ json: JSONValue) -> Plan? {
        guard let type = json["type"]?.stringValue, ["image/png", "image/jpeg"].contains(type),
            let width = json["width"]?.intValue, let height = json["height"]?.intValue,
            case .array(let list)? = json["points"]
        else { return nil }
        let points = list.compactMap { point -> ControlPoint? in
            guard let x = point["x"]?.doubleValue, let y = point["y"]?.doubleValue,
                let lon = point["lon"]?.doubleValue, let lat = point["lat"]?.doubleValue
            else { return nil }
            return ControlPoint(x: x, y: y, geo: GeoPoint(lon: lon, lat: lat))
        }
        guard (2...3).contains(points.count) else { return nil }
        return Plan(floor: floor, type: type, width: width, height: height, points: points)
    }
}
