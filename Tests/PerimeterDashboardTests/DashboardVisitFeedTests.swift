import Foundation
import PerimeterCore
import PerimeterDashboard
import Testing

@Suite("Dashboard model: visits in the feed")
struct DashboardVisitFeedTests {
    static let arrival =
        #"{"id":"f3381792bead9f6fc4a01fe473fc2324","event":"arrival","venue":"test","subject":"ann","arrival":"2010-08-05T14:30:27.000Z","departure":null,"lat":45.76976706784,"lon":14.35638808612,"acc":58.6,"fixes":25,"seq":1,"t":"2010-08-05T14:40:44.000Z","source":"gps"}"#

    @Test(
        "a visit is a feed line: where for a full-accuracy subject, not where for a reduced one, nothing for a denied one",
        arguments: [
            (#"{"status":"always","accuracy":"full"}"#, true, true),
            (#"{"status":"always","accuracy":"reduced"}"#, true, false),
            (#"{"status":"denied"}"#, false, false),
        ])
    func feed(record: String, shown: Bool, located: Bool) throws {
        var model = DashboardModelTests.model()
        #expect(model.subscriptions.contains("perimeter/v1/test/visit/+"))
        _ = DashboardModelTests.apply(&model, "subjects/ann/authorization", record)
        let changes = DashboardModelTests.apply(&model, "visit/ann", Self.arrival)
        #expect(changes.count == (shown ? 1 : 0))
        #expect(model.feedLines.count == (shown ? 1 : 0))
        guard let line = model.feedLines.first else { return }
        let item = try JSONValue(parsing: line)
        #expect(item["kind"]?.stringValue == "visit" && item["event"]?.stringValue == "arrival")
        #expect(item["arrival"]?.stringValue == "2010-08-05T14:30:27.000Z")
        #expect((item["lat"]?.doubleValue != nil) == located)
    }
}
