import Foundation
import PerimeterCore
import Testing

@Suite("Floor plan georeference: similarity from two points, affine from three")
struct PlaneTransformTests {
    typealias P = PlaneTransform.Point

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var from: [P]
        var to: [P]
        /// A further point and where it must land.
        var probe: P
        var expected: P
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(
            name: "two points, identity", from: [P(0, 0), P(10, 0)], to: [P(0, 0), P(10, 0)], probe: P(3, 7),
            expected: P(3, 7)),
        Case(
            name: "two points, moved", from: [P(0, 0), P(10, 0)], to: [P(5, -2), P(15, -2)], probe: P(3, 7),
            expected: P(8, 5)),
        Case(
            name: "two points, scaled ×2", from: [P(0, 0), P(10, 0)], to: [P(0, 0), P(20, 0)], probe: P(3, 7),
            expected: P(6, 14)),
        Case(
            name: "two points, turned 90° (y down: x axis onto y axis)", from: [P(0, 0), P(10, 0)],
            to: [P(0, 0), P(0, 10)],
            probe: P(0, 10), expected: P(-10, 0)),
        Case(
            name: "two points, turned, scaled and moved", from: [P(100, 100), P(200, 100)], to: [P(10, 10), P(10, 60)],
            probe: P(100, 200), expected: P(-40, 10)),
        Case(
            name: "three points, stretched in x only", from: [P(0, 0), P(10, 0), P(0, 10)],
            to: [P(0, 0), P(30, 0), P(0, 10)],
            probe: P(5, 5), expected: P(15, 5)),
        Case(
            name: "three points, sheared", from: [P(0, 0), P(10, 0), P(0, 10)], to: [P(1, 1), P(11, 1), P(6, 11)],
            probe: P(10, 10), expected: P(16, 11)),
        Case(
            name: "three points, mirrored (a plan scanned face down)", from: [P(0, 0), P(10, 0), P(0, 10)],
            to: [P(0, 0), P(-10, 0), P(0, 10)], probe: P(4, 4), expected: P(-4, 4)),
    ]

    @Test(arguments: cases)
    func fits(_ example: Case) throws {
        let transform = try PlaneTransform.fitting(from: example.from, to: example.to)
        for (source, target) in zip(example.from, example.to) {
            let mapped = transform.apply(source)
            #expect(abs(mapped.x - target.x) < 1e-9 && abs(mapped.y - target.y) < 1e-9, "\(source) → \(mapped)")
        }
        let probe = transform.apply(example.probe)
        #expect(abs(probe.x - example.expected.x) < 1e-9 && abs(probe.y - example.expected.y) < 1e-9, "\(probe)")
        let back = try #require(transform.inverse).apply(probe)
        #expect(abs(back.x - example.probe.x) < 1e-9 && abs(back.y - example.probe.y) < 1e-9, "inverse: \(back)")
    }

    struct Refusal: Sendable, CustomTestStringConvertible {
        var name: String
        var from: [P]
        var to: [P]
        var message: String
        var testDescription: String { name }
    }

    static let refusals: [Refusal] = [
        Refusal(name: "one point", from: [P(0, 0)], to: [P(0, 0)], message: "give two or three control points, got 1"),
        Refusal(
            name: "four points", from: [P(0, 0), P(1, 0), P(0, 1), P(1, 1)], to: [P(0, 0), P(1, 0), P(0, 1), P(1, 1)],
            message: "give two or three control points, got 4"),
        Refusal(
            name: "two at one pixel", from: [P(5, 5), P(5, 5)], to: [P(0, 0), P(1, 1)],
            message: "the two control points are at the same pixel"),
        Refusal(
            name: "two at one place", from: [P(0, 0), P(5, 5)], to: [P(1, 1), P(1, 1)],
            message: "the two control points are at the same place"),
        Refusal(
            name: "three on a line", from: [P(0, 0), P(5, 5), P(10, 10)], to: [P(0, 0), P(1, 0), P(0, 1)],
            message: "the three control points lie on one line (pixels)"),
        Refusal(
            name: "three places on a line", from: [P(0, 0), P(10, 0), P(0, 10)], to: [P(0, 0), P(1, 1), P(2, 2)],
            message: "the three control points lie on one line (places)"),
        Refusal(
            name: "counts differ", from: [P(0, 0), P(1, 0)], to: [P(0, 0)],
            message: "2 source points but 1 target points"),
    ]

    @Test(arguments: refusals)
    func refuses(_ example: Refusal) {
        #expect(throws: PlaneTransform.Problem(description: example.message)) {
            try PlaneTransform.fitting(from: example.from, to: example.to)
        }
    }

    @Test("Composition: image → places → picture is one matrix")
    func composes() throws {
        let first = try PlaneTransform.fitting(from: [P(0, 0), P(10, 0)], to: [P(0, 0), P(0, 10)])
        let second = PlaneTransform(a: 2, b: 0, c: 0, d: 2, e: 5, f: 5)
        let both = second.after(first)
        let p = P(3, 4)
        #expect(both.apply(p) == second.apply(first.apply(p)))
        #expect(PlaneTransform(a: 1, b: 2, c: 2, d: 4, e: 0, f: 0).inverse == nil, "a flattening map has no inverse")
    }
}
