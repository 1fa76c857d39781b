import Foundation

/// Draws a ``VenueMap`` as a standalone SVG document: regions (polygons with holes drawn with
/// `fill-rule="evenodd"`, circles drawn geodesically, beacon regions around their known beacons),
/// gateways, a track, event markers, labels, a scale bar and a north arrow.
///
/// The output is stable for the same input (no dates, no random ids), so it can be compared.
/// Elements carry ids and `data-` attributes (`region-{id}`, `data-region`) for the dashboard's
/// script to shade regions by live occupancy.
public struct SVGMapRenderer: Sendable {
    public var width: Double
    public var height: Double
    public var margin: Double

    public init(width: Double = 960, height: Double = 720, margin: Double = 48) {
        self.width = width
        self.height = height
        self.margin = margin
    }

    /// The projection this renderer uses for `map`.
    public func projection(for map: VenueMap) -> MapProjection {
        MapProjection(fitting: map.extentPoints, width: width, height: height, margin: margin)
    }

    static let palette = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f"]

    public func render(_ map: VenueMap) -> String {
        let projection = projection(for: map)
        var svg = ""
        svg +=
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Self.number(width))\" height=\"\(Self.number(height))\" viewBox=\"0 0 \(Self.number(width)) \(Self.number(height))\" font-family=\"DejaVu Sans, sans-serif\" font-size=\"12\">\n"
        svg += "<rect id=\"background\" x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#fbfaf7\"/>\n"
        if let title = map.title {
            svg +=
                "<text id=\"title\" x=\"16\" y=\"24\" font-size=\"16\" font-weight=\"bold\">\(Self.escape(title))</text>\n"
        }
        svg += "<g id=\"regions\">\n"
        var labels = ""
        for (index, region) in map.regions.enumerated() {
            let rings = VenueMap.rings(of: region)
            guard !rings.isEmpty else { continue }
            let colour = Self.palette[index % Self.palette.count]
            let kind: String
            switch region.shape {
            case .circle: kind = "circle"
            case .polygons: kind = "polygon"
            case .beacon: kind = "beacon"
            }
            let dash = kind == "beacon" ? " stroke-dasharray=\"4 3\"" : ""
            svg +=
                "<path id=\"region-\(Self.escape(region.id))\" class=\"region \(kind)\" data-region=\"\(Self.escape(region.id))\" fill=\"\(colour)\" fill-opacity=\"0.18\" stroke=\"\(colour)\" stroke-width=\"1.5\"\(dash) fill-rule=\"evenodd\" d=\"\(path(rings, projection))\"/>\n"
            let anchor = labelAnchor(rings[0], projection)
            let text = region.name ?? region.id
            labels +=
                "<text class=\"label\" data-region=\"\(Self.escape(region.id))\" x=\"\(Self.number(anchor.x))\" y=\"\(Self.number(anchor.y))\" text-anchor=\"middle\" fill=\"#333\">\(Self.escape(text))</text>\n"
        }
        svg += "</g>\n"
        if !map.gateways.isEmpty {
            svg += "<g id=\"gateways\">\n"
            for gateway in map.gateways {
                let p = projection.point(gateway.position)
                svg +=
                    "<rect class=\"gateway\" data-gateway=\"\(Self.escape(gateway.id))\" x=\"\(Self.number(p.x - 5))\" y=\"\(Self.number(p.y - 5))\" width=\"10\" height=\"10\" fill=\"#222\"/>\n"
                svg +=
                    "<text class=\"gateway-label\" x=\"\(Self.number(p.x + 8))\" y=\"\(Self.number(p.y + 4))\" font-size=\"10\" fill=\"#222\">\(Self.escape(gateway.id))</text>\n"
            }
            svg += "</g>\n"
        }
        if map.track.count > 0 {
            let points = map.track.map { projection.point($0) }
            let list = points.map { "\(Self.number($0.x)),\(Self.number($0.y))" }.joined(separator: " ")
            svg +=
                "<polyline id=\"track\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" stroke-linejoin=\"round\" points=\"\(list)\"/>\n"
            let start = points[0]
            svg +=
                "<circle id=\"track-start\" cx=\"\(Self.number(start.x))\" cy=\"\(Self.number(start.y))\" r=\"4\" fill=\"#d62728\"/>\n"
        }
        if !map.events.isEmpty {
            svg += "<g id=\"events\">\n"
            for event in map.events {
                let p = projection.point(event.position)
                let colour = ["enter": "#2ca02c", "exit": "#d62728", "dwell": "#1f77b4"][event.kind] ?? "#7f7f7f"
                let letter = ["enter": "E", "exit": "X", "dwell": "D"][event.kind] ?? "?"
                svg +=
                    "<g class=\"event \(Self.escape(event.kind))\" data-region=\"\(Self.escape(event.region))\"><circle cx=\"\(Self.number(p.x))\" cy=\"\(Self.number(p.y))\" r=\"7\" fill=\"\(colour)\" stroke=\"#fff\" stroke-width=\"1.5\"/><text x=\"\(Self.number(p.x))\" y=\"\(Self.number(p.y + 3.5))\" text-anchor=\"middle\" font-size=\"9\" fill=\"#fff\">\(letter)</text><title>\(Self.escape("\(event.kind) \(event.region)"))</title></g>\n"
            }
            svg += "</g>\n"
        }
        svg += "<g id=\"labels\">\n" + labels + "</g>\n"
        svg += scaleBar(projection)
        svg += northArrow()
        svg += "</svg>\n"
        return svg
    }

    /// One path for all rings: each ring a subpath `M … Z`.
    func path(_ rings: [[GeoPoint]], _ projection: MapProjection) -> String {
        rings.map { ring in
            var points = ring
            if points.count > 1, points.first == points.last { points.removeLast() }
            let steps = points.enumerated().map { index, point in
                let p = projection.point(point)
                return "\(index == 0 ? "M" : "L")\(Self.number(p.x)) \(Self.number(p.y))"
            }
            return steps.joined(separator: " ") + " Z"
        }.joined(separator: " ")
    }

    /// The boxes the region names take on the picture (12-unit text centred on each anchor):
    /// what other labels must not cover.
    public func regionLabelBoxes(for map: VenueMap) -> [LabelPlacement.Box] {
        let projection = projection(for: map)
        let measure = LabelPlacement(bounds: .init(x: 0, y: 0, width: width, height: height), fontSize: 12)
        return map.regions.compactMap { region in
            guard let ring = VenueMap.rings(of: region).first else { return nil }
            let anchor = labelAnchor(ring, projection)
            let width = measure.width(of: region.name ?? region.id)
            // The anchor is the baseline: the ascent is about 0.93 em above it, the descent 0.24 below.
            return LabelPlacement.Box(x: anchor.x - width / 2, y: anchor.y - 12, width: width, height: 15)
        }
    }

    /// The centre of a ring's box in the picture (good enough for the convex rooms of a venue).
    func labelAnchor(_ ring: [GeoPoint], _ projection: MapProjection) -> (x: Double, y: Double) {
        let points = ring.map { projection.point($0) }
        let xs = points.map(\.x)
        let ys = points.map(\.y)
        return (((xs.min() ?? 0) + (xs.max() ?? 0)) / 2, ((ys.min() ?? 0) + (ys.max() ?? 0)) / 2 + 4)
    }

    func scaleBar(_ projection: MapProjection) -> String {
        let metres = projection.scaleBarMetres(maxPixels: width / 4)
        let length = metres * projection.scale
        let x = 16.0
        let y = height - 20
        let label = metres >= 1000 ? "\(Self.number(metres / 1000)) km" : "\(Self.number(metres)) m"
        return
            "<g id=\"scale-bar\" data-metres=\"\(Self.number(metres))\" data-pixels=\"\(Self.number(length))\"><rect x=\"\(Self.number(x))\" y=\"\(Self.number(y - 6))\" width=\"\(Self.number(length))\" height=\"6\" fill=\"#333\"/><text x=\"\(Self.number(x + length / 2))\" y=\"\(Self.number(y - 10))\" text-anchor=\"middle\">\(label)</text></g>\n"
    }

    func northArrow() -> String {
        let x = width - 32
        let y = 24.0
        return
            "<g id=\"north-arrow\"><path d=\"M\(Self.number(x)) \(Self.number(y)) L\(Self.number(x + 8)) \(Self.number(y + 24)) L\(Self.number(x)) \(Self.number(y + 18)) L\(Self.number(x - 8)) \(Self.number(y + 24)) Z\" fill=\"#333\"/><text x=\"\(Self.number(x))\" y=\"\(Self.number(y + 38))\" text-anchor=\"middle\" font-weight=\"bold\">N</text></g>\n"
    }

    /// Text made safe for SVG character data and attribute values.
    public static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default:
                // XML 1.0 allows no control characters but tab, newline and carriage return.
                if character.value < 0x20 && character != "\t" && character != "\n" && character != "\r" {
                    out += "\u{FFFD}"
                } else {
                    out.unicodeScalars.append(character)
                }
            }
        }
        return out
    }

    /// A coordinate with at most two decimals, without a trailing ".0".
    static func number(_ value: Double) -> String {
        let rounded = (value * 100).rounded() / 100
        if rounded == rounded.rounded() && abs(rounded) < 1e15 { return String(Int(rounded)) }
        return String(rounded)
    }
}
