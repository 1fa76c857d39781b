import Foundation
import PerimeterCore
import PerimeterKit
import Synchronization

/// What the dashboard answers, request by request: the Host check, the login, the page, its
/// files and stream, and the headers every answer carries.
///
/// Only `/healthz` (and the login form with its stylesheet) answer without a session; every
/// request, `/healthz` included, must name an allowed host, which closes DNS rebinding (a page
/// on `attacker.example` resolving to this address still sends `Host: attacker.example`).
struct DashboardRoutes: Sendable {
    let title: String
    /// The venue's time zone (IANA id): the page shows every time in it.
    let timeZone: String
    let broadcaster: EventBroadcaster
    let auth: DashboardAuth
    /// Host names (no port, lower case; IPv6 in brackets) this dashboard answers to.
    let allowedHosts: Set<String>
    /// The region editor's checks and publishing (`/api/regions/check|publish`).
    let regions: RegionEditor?
    /// Uploaded floor plans (`/api/floors/{n}/plan`, `/floors/{n}/plan`); nil without `dashboard.floorPlans`.
    var floorPlans: FloorPlans? = nil
    /// The map's projection now (a plan's control points are fitted in its picture plane).
    var projection: @Sendable () -> MapProjection? = { nil }
    /// A region's Feature as the map holds it now (`/api/regions/{id}`), for the editor.
    var feature: @Sendable (String) -> JSONValue? = { _ in nil }
    /// `/healthz`: healthy or not, and the text to say.
    let health: @Sendable () -> (healthy: Bool, text: String)

    /// Headers on every answer: no sniffing (the server adds it), no framing, no referrer
    /// (a login link's token must not leak through it), the CSP.
    static let securityHeaders: [(name: String, value: String)] = [
        ("Content-Security-Policy", DashboardPage.contentSecurityPolicy), ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "no-referrer"),
    ]

    /// The default allow-list: loopback names and the listening address.
    static func defaultHosts(listening host: String) -> [String] {
        var hosts = ["localhost", "127.0.0.1", "[::1]"]
        if host != "0.0.0.0" && !hosts.contains(host) { hosts.append(host) }
        return hosts
    }

    func respond(_ request: HTTPRequest) -> HTTPServer.Response {
        var response = route(request)
        response.headers += Self.securityHeaders
        if response.stream == nil { response.headers.append(("Cache-Control", "no-store")) }
        return response
    }

    /// The floor of `{prefix}{n}/plan`, nil for another path.
    static func floor(_ path: String, prefix: String) -> Int? {
        guard path.hasPrefix(prefix), path.hasSuffix("/plan") else { return nil }
        return Int(path.dropFirst(prefix.count).dropLast("/plan".count))
    }

    /// Where to go after login: a path on this dashboard, never another site.
    static func safeNext(_ next: String?) -> String { HTTPRequest.localPath(next) }

    private func plain(
        _ status: Int, _ text: String, headers: [(name: String, value: String)] = []
    )
        -> HTTPServer.Response
    {
        HTTPServer.Response(status: status, body: text, headers: headers)
    }

    private func loginForm(
        status: Int, next: String, message: String?, headers: [(name: String, value: String)] = []
    )
        -> HTTPServer.Response
    {
        HTTPServer.Response(
            status: status, contentType: "text/html; charset=utf-8",
            body: DashboardPage.login(title: title, next: next, message: message), headers: headers)
    }

    private func redirect(_ location: String, cookie: String? = nil) -> HTTPServer.Response {
        var headers: [(name: String, value: String)] = [("Location", location)]
        if let cookie { headers.append(("Set-Cookie", cookie)) }
        return plain(303, "see \(location)\n", headers: headers)
    }

    /// A form posted from another site (a browser says so in `Origin` / `Sec-Fetch-Site`).
    private func crossSite(_ request: HTTPRequest) -> Bool {
        if request.header("sec-fetch-site") == "cross-site" { return true }
        guard let origin = request.header("origin") else { return false }
        // "null" (a sandboxed or file page) or garbage is another site too.
        guard let host = HTTPRequest.originHost(origin) else { return true }
        return !allowedHosts.contains(host)
    }

    private func route(_ request: HTTPRequest) -> HTTPServer.Response {
        guard let host = request.header("host"), allowedHosts.contains(HTTPRequest.hostName(host)) else {
            return plain(
                421,
                "this dashboard does not answer to host '\(request.header("host") ?? "")'; "
                    + "add it to dashboard.allowedHosts if it is yours\n")
        }
        let reading = request.method == "GET" || request.method == "HEAD"
        switch (request.method, request.path) {
        case (_, "/healthz") where reading:
            let (healthy, text) = health()
            return plain(healthy ? 200 : 503, text)
        case (_, "/dashboard.css") where reading:
            return HTTPServer.Response(contentType: "text/css; charset=utf-8", body: DashboardPage.css)
        case (_, "/dashboard.js") where reading:
            return HTTPServer.Response(contentType: "text/javascript; charset=utf-8", body: DashboardPage.script)
        case (_, "/login") where reading:
            let next = Self.safeNext(request.query["next"])
            guard let token = request.query["token"] else {
                return loginForm(status: 200, next: next, message: nil)
            }
            guard let session = auth.redeem(loginToken: token) else {
                return loginForm(
                    status: 401, next: next,
                    message: "This sign-in link was used already or has expired: enter the password.")
            }
            return redirect(next, cookie: auth.cookie(for: session))
        case ("POST", "/login"):
            let form = request.form
            let next = Self.safeNext(form["next"])
            if crossSite(request) { return plain(403, "a sign-in from another site is refused\n") }
            switch auth.login(password: form["password"] ?? "", client: request.client) {
            case .session(let session):
                return redirect(next, cookie: auth.cookie(for: session))
            case .wrongPassword:
                return loginForm(status: 401, next: next, message: "Wrong password.")
            case .throttled(let seconds):
                return loginForm(
                    status: 429, next: next, message: "Too many wrong passwords: try again in \(seconds) s.",
                    headers: [("Retry-After", "\(seconds)")])
            }
        case ("POST", "/logout"):
            if crossSite(request) { return plain(403, "a sign-out from another site is refused\n") }
            auth.end(session: request.cookies[DashboardAuth.cookieName])
            return redirect("/login", cookie: auth.clearingCookie)
        default:
            break
        }
        guard auth.isValid(session: request.cookies[DashboardAuth.cookieName]) else {
            // A page is sent to the login form and back; anything else is just refused.
            let isPage = request.path == "/" || request.path == "/index.html" || request.path.hasPrefix("/snapshot/")
            if reading && isPage {
                let next = request.path.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "/"
                return redirect("/login?next=\(next)")
            }
            return plain(401, "sign in first: /login\n")
        }
        if request.method == "POST", request.path == "/api/regions/check" || request.path == "/api/regions/publish" {
            // JSON only: a form on another site cannot send it without the browser asking first.
            if crossSite(request) { return plain(403, "a region from another site is refused\n") }
            guard request.header("content-type")?.hasPrefix("application/json") == true else {
                return plain(415, "send the region as application/json\n")
            }
            guard let regions else { return plain(404, "no region editor here\n") }
            let outcome = regions.handle(body: request.body, publishing: request.path.hasSuffix("/publish"))
            return HTTPServer.Response(
                status: outcome.status, contentType: "application/json", body: outcome.json.serialized())
        }
        if request.method == "POST", let floor = Self.floor(request.path, prefix: "/api/floors/") {
            if crossSite(request) { return plain(403, "a floor plan from another site is refused\n") }
            // Only a script sends a body of another type: a form on another site cannot.
            let type = request.header("content-type") ?? ""
            if ["application/x-www-form-urlencoded", "multipart/form-data", "text/plain"].contains(
                where: type.hasPrefix)
            {
                return plain(415, "send the image as the body (application/octet-stream or its image type)\n")
            }
            guard let floorPlans, let projection = projection() else {
                return plain(404, "no floor plans here: set dashboard.floorPlans (a directory)\n")
            }
            do {
                let points = try FloorPlans.points(request.query["points"] ?? "")
                let plan = try floorPlans.save(
                    floor: floor, image: request.body, points: points, projection: projection)
                return HTTPServer.Response(
                    contentType: "application/json",
                    body: JSONValue.object(["ok": true, "floor": .number(Double(plan.floor))]).serialized())
            } catch {
                return HTTPServer.Response(
                    status: 422, contentType: "application/json",
                    body: JSONValue.object(["ok": false, "problems": [.string(error.description)]]).serialized())
            }
        }
        guard reading else { return plain(405, "only GET\n", headers: [("Allow", "GET, HEAD")]) }
        if request.path.hasPrefix("/api/regions/") {
            let id = String(request.path.dropFirst("/api/regions/".count)).removingPercentEncoding ?? ""
            guard let feature = feature(id) else { return plain(404, "no region '\(id)' on the map\n") }
            return HTTPServer.Response(contentType: "application/geo+json", body: feature.serialized())
        }
        if let floor = Self.floor(request.path, prefix: "/floors/") {
            guard let image = floorPlans?.image(floor: floor) else { return plain(404, "no plan for floor \(floor)\n") }
            var response = HTTPServer.Response(contentType: image.type, body: "")
            response.bytes = image.bytes
            return response
        }
        switch request.path {
        case "/", "/index.html":
            return HTTPServer.Response(
                contentType: "text/html; charset=utf-8",
                body: DashboardPage.html(title: title, svg: broadcaster.svg, timeZone: timeZone))
        case "/map.svg":
            return HTTPServer.Response(contentType: "image/svg+xml", body: broadcaster.svg)
        case "/events":
            return .stream(broadcaster.client())
        case let path where path.hasPrefix("/snapshot/"):
            guard let seconds = Double(path.dropFirst("/snapshot/".count)), seconds >= 0, seconds <= 60 else {
                return plain(404, "try /snapshot/SECONDS (0 to 60)\n")
            }
            let page = DashboardPage.html(title: title, svg: broadcaster.svg, timeZone: timeZone)
            return .stream(contentType: "text/html; charset=utf-8", HeldPage(page, seconds: seconds))
        default:
            return plain(404, "try /\n")
        }
    }
}

/// The page with its last lines held back for `seconds`: the browser runs the page's script
/// and receives live events meanwhile, but the document (and its load event) ends only then,
/// so a headless browser's `--dump-dom` or `--screenshot` captures the page after that long.
final class HeldPage: HTTPStreamSource {
    private let head: [UInt8]
    private let tail: [UInt8]
    private let seconds: Double
    /// 0: head next; 1: tail next once `due`; 2: done.
    private let step = Atomic<Int>(0)
    private let due = Atomic<Bool>(false)
    /// Set when the connection ends: the wait for the tail then does nothing when its time
    /// comes. The wait is Dispatch's, not a task's: a task's sleep needs a thread of the
    /// cooperative pool to resume, and in a process whose pool is busy (the suite runs the
    /// dashboard in its own process beside tests that block their threads) the tail came late
    /// or not at all (a suite run beside two CPU hogs, Dec 3).
    private let stopped = Atomic<Bool>(false)

    init(_ page: String, seconds: Double) {
        let split = page.range(of: "</body>", options: .backwards)?.lowerBound ?? page.endIndex
        head = Array(page[..<split].utf8)
        tail = Array(page[split...].utf8)
        self.seconds = seconds
    }

    func start(_ stream: HTTPStream) {
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(seconds * 1e9))) { [self] in
            guard !stopped.load(ordering: .acquiring) else { return }
            due.store(true, ordering: .releasing)
            stream.wake()
        }
    }

    func next() -> HTTPStreamChunk {
        switch step.load(ordering: .relaxed) {
        case 0:
            step.store(1, ordering: .relaxed)
            return .bytes(head)
        case 1:
            guard due.load(ordering: .acquiring) else { return .later }
            step.store(2, ordering: .relaxed)
            return .bytes(tail)
        default: return .end
        }
    }

    func stop() { stopped.store(true, ordering: .releasing) }
}
