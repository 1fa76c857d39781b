import PerimeterCore

/// The dashboard's one page and its login form. The map is inline SVG; the style and the
/// script are served by the dashboard itself (`/dashboard.css`, `/dashboard.js`) so that the
/// Content-Security-Policy can forbid every inline script and style. Nothing is fetched from
/// anywhere but this dashboard, so it works offline and tells no third party who is where.
enum DashboardPage {
    /// What a page may load and do: only this dashboard's own files and stream, no inline
    /// script or style (the map's SVG uses presentation attributes, which CSP allows), no
    /// framing, forms only to this dashboard.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        + "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

    /// The login form; `message` (plain text) says why it is shown again.
    static func login(title: String, next: String, message: String?) -> String {
        let error = message.map { "<p class=\"error\" id=\"login-error\">\(SVGMapRenderer.escape($0))</p>\n" } ?? ""
        return """
            <!DOCTYPE html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(SVGMapRenderer.escape(title)) — sign in</title>
            <link rel="stylesheet" href="/dashboard.css">
            </head>
            <body class="login">
            <form id="login" method="post" action="/login">
            <h1>\(SVGMapRenderer.escape(title))</h1>
            \(error)<label for="password">Password</label>
            <input id="password" name="password" type="password" autocomplete="current-password" autofocus required>
            <input name="next" type="hidden" value="\(SVGMapRenderer.escape(next))">
            <button type="submit">Sign in</button>
            </form>
            </body>
            </html>

            """
    }

    /// The page; `timeZone` (an IANA id) is the venue's: the script shows every time in it.
    static func html(title: String, svg: String, timeZone: String) -> String {
        """
        <!DOCTYPE html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>\(SVGMapRenderer.escape(title))</title>
        <link rel="stylesheet" href="/dashboard.css">
        </head>
        <body data-time-zone="\(SVGMapRenderer.escape(timeZone))">
        <header><h1>\(SVGMapRenderer.escape(title))</h1><span id="connection" class="off">connecting…</span>
        <span id="time-zone">times in \(SVGMapRenderer.escape(timeZone))</span></header>
        <main>
        <section id="map">
        \(svg)
        </section>
        <aside>
        <section><h2>Occupancy</h2><table id="occupancy"><tbody></tbody></table>
        <ol id="occupancy-changes" hidden></ol></section>
        <section><h2>Counters</h2><dl id="counters">
        <dt>events</dt><dd id="count-events">0</dd><dt>notifications</dt><dd id="count-notifications">0</dd>
        <dt>held events</dt><dd id="count-held">0</dd><dt>dead letters</dt><dd id="count-deadletters">0</dd>
        <dt>full-accuracy grants</dt><dd id="count-grants">0</dd></dl>
        <ul id="grants"></ul></section>
        <section><h2>Services</h2><ul id="services"></ul></section>
        <section><h2>Ranging</h2><select id="subject-select"><option value="">(choose a subject)</option></select>
        <ol id="ranging"></ol></section>
        <section><h2>Live feed</h2><ol id="feed" reversed></ol></section>
        <section id="floors"><h2>Floor plans</h2>
        <label>floor <select id="floor-select"><option value="">(none)</option></select></label>
        <form id="plan-form">
        <label>floor <input id="plan-floor" inputmode="numeric" value="0"></label>
        <label>image (PNG or JPEG, at most 2 MB) <input id="plan-file" type="file" accept="image/png,image/jpeg"></label>
        <label class="wide">control points: x,y,lon,lat;x,y,lon,lat[;…] (pixels of the image, then the place they show) <input id="plan-points" autocomplete="off"></label>
        <div class="tools"><button type="button" id="plan-upload">Upload</button></div>
        <ul id="plan-problems"></ul>
        </form></section>
        <section id="editor"><h2>Region editor</h2>
        <div class="tools"><button type="button" id="draw-circle">Draw circle</button>
        <button type="button" id="draw-polygon">Draw polygon</button>
        <button type="button" id="draw-finish" disabled>Close polygon</button>
        <button type="button" id="draw-clear">Clear</button></div>
        <p id="draw-hint">Draw a circle (click its centre, then its edge) or a polygon (click its corners, then close it) on the map.</p>
        <form id="region-form">
        <label>id <input id="region-id" autocomplete="off" placeholder="e.g. kiosk"></label>
        <label>name <input id="region-name" autocomplete="off"></label>
        <label>radius (m) <input id="region-radius" inputmode="decimal"></label>
        <label>enter delay (s) <input id="region-enterDelay" inputmode="decimal"></label>
        <label>exit delay (s) <input id="region-exitDelay" inputmode="decimal"></label>
        <label>dwell after (s) <input id="region-dwellAfter" inputmode="decimal"></label>
        <label>min accuracy (m) <input id="region-minAccuracy" inputmode="decimal"></label>
        <label>exit buffer (m) <input id="region-exitBuffer" inputmode="decimal"></label>
        <label>floor <input id="region-floor" inputmode="numeric"></label>
        <label class="wide">schedule <input id="region-schedule" autocomplete="off" placeholder='[{"days":["mon","tue"],"start":"09:00","end":"18:00"}]'></label>
        <div class="tools"><button type="button" id="region-check">Check</button>
        <button type="button" id="region-publish">Publish</button></div>
        <ul id="region-problems"></ul><p id="region-result"></p>
        </form></section>
        </aside>
        </main>
        <form id="logout" method="post" action="/logout"><button type="submit">Sign out</button></form>
        <script src="/dashboard.js"></script>
        </body>
        </html>

        """
    }

    static let css = """
        body { font: 14px/1.4 "DejaVu Sans", sans-serif; margin: 0; background: #f4f2ee; color: #222; }
        header { display: flex; flex-wrap: wrap; align-items: center; gap: 4px 1em; padding: 8px 120px 8px 16px; background: #2f3b4c; color: #fff; }
        #time-zone { font-size: 12px; color: #dde; }
        header h1 { font-size: 18px; margin: 0; }
        #connection { font-size: 12px; padding: 2px 8px; border-radius: 8px; background: #a33; }
        #connection.on { background: #2a7; }
        main { display: flex; gap: 12px; padding: 12px; align-items: flex-start; }
        #map { flex: 0 0 auto; background: #fff; box-shadow: 0 1px 3px #0003; }
        #map svg { display: block; width: 100%; max-width: 62vw; height: auto; }
        aside { flex: 1 1 auto; display: grid; gap: 8px; min-width: 280px; }
        aside > section { min-width: 0; overflow-wrap: anywhere; }
        @media (max-width: 1000px) {
          main { flex-direction: column; align-items: stretch; }
          #map svg { max-width: 100%; }
          aside { min-width: 0; }
        }
        aside section { background: #fff; padding: 6px 10px; box-shadow: 0 1px 3px #0002; }
        h2 { font-size: 13px; text-transform: uppercase; letter-spacing: .05em; margin: 2px 0 6px; color: #555; }
        table { border-collapse: collapse; width: 100%; }
        td { padding: 1px 4px; border-bottom: 1px solid #eee; }
        td.count { text-align: right; font-weight: bold; }
        dl { display: grid; grid-template-columns: auto auto; margin: 0; }
        dd { margin: 0; font-weight: bold; text-align: right; }
        ul, ol { margin: 0; padding-left: 18px; }
        /* Room for a three-digit number left of each line: the feed's numbers count down from 100. */
        #feed, #occupancy-changes { padding-left: 4.5ch; }
        #feed { max-height: 220px; overflow: auto; font-size: 12px; font-variant-numeric: tabular-nums; }
        #feed li.enter { color: #1b7a1b; } #feed li.exit { color: #b02020; } #feed li.dwell { color: #1f5fa0; }
        #feed li.deadletter { color: #8a5a00; } #feed li.notification { color: #6a2a8a; } #feed li.visit { color: #3a6b6b; }
        .online::before { content: "● "; color: #2a7; } .offline::before { content: "● "; color: #a33; }
        .subject circle { fill: #d62728; stroke: #fff; stroke-width: 2; }
        .subject.coarse circle { fill: #d62728; fill-opacity: .12; stroke: #d62728; stroke-dasharray: 6 4; }
        .subject-label text, .cluster text { font-size: 11px; fill: #000; }
        .subject-label rect, .cluster rect { fill: #fff; fill-opacity: .85; }
        .subject-label line, .cluster line { stroke: #555; stroke-width: 1; }
        .cluster circle { fill: #fff; stroke: #d62728; stroke-width: 2; }
        .cluster text { font-weight: bold; }
        #plan-form { display: grid; gap: 4px; font-size: 12px; margin-top: 4px; }
        #plan-problems { color: #b02020; }
        #editor .tools { display: flex; flex-wrap: wrap; gap: 4px; margin: 4px 0; }
        #region-form { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 4px 8px; font-size: 12px; }
        #region-form label { display: grid; }
        #region-form .wide, #region-form .tools, #region-problems, #region-result { grid-column: 1 / -1; }
        #region-form input.invalid { border: 2px solid #b02020; background: #fff0f0; }
        #region-problems { color: #b02020; }
        #draw-hint { font-size: 12px; color: #555; margin: 2px 0; }
        #draft path, #draft circle.edge { fill: #d6272833; stroke: #d62728; stroke-width: 2; stroke-dasharray: 5 3; }
        #draft circle.vertex { fill: #d62728; }
        #map.drawing svg { cursor: crosshair; }
        #logout { position: fixed; top: 8px; right: 16px; margin: 0; }
        body.login { display: flex; justify-content: center; align-items: center; min-height: 100vh; }
        #login { display: grid; gap: 8px; background: #fff; padding: 24px 32px; box-shadow: 0 1px 3px #0003; min-width: 260px; }
        #login h1 { font-size: 18px; margin: 0 0 8px; }
        #login .error { color: #b02020; margin: 0; }
        """

    static let script = #"""
        "use strict";
        const NS = "http://www.w3.org/2000/svg";
        let layer, names;
        let lastCounts = null;
        let state = null;
        // Every time is shown in the venue's time zone, named in the header.
        const zone = document.body.dataset.timeZone || "UTC";
        const clockFormat = new Intl.DateTimeFormat("en-GB", { timeZone: zone, hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
        const dayFormat = new Intl.DateTimeFormat("en-GB", { timeZone: zone, day: "numeric", month: "short", hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
        function clock(t) { const d = new Date(t); return isNaN(d) ? "" : clockFormat.format(d); }
        function day(t) { const d = new Date(t); return isNaN(d) ? "" : dayFormat.format(d); }
        {
          const short = new Intl.DateTimeFormat("en-GB", { timeZone: zone, timeZoneName: "short" }).formatToParts(new Date())
            .find(p => p.type === "timeZoneName");
          document.getElementById("time-zone").textContent = "times in " + zone + (short && short.value !== zone ? " (" + short.value + ")" : "");
        }

        // Takes the map in the page (again after a "map" event): the subjects' layer and region names.
        function adoptMap() {
          const svg = document.querySelector("#map svg");
          layer = document.createElementNS(NS, "g");
          layer.id = "subjects";
          svg.appendChild(layer);
          names = {};
          document.querySelectorAll("#labels text[data-region]").forEach(t => { names[t.dataset.region] = t.textContent; });
        }
        adoptMap();

        function svgEl(tag, attributes) {
          const el = document.createElementNS(NS, tag);
          for (const [key, value] of Object.entries(attributes)) el.setAttribute(key, value);
          return el;
        }

        // A label in the box the dashboard placed it in (no two boxes overlap): the text is
        // fitted to the box's width, with a leader line when it sits away from its point.
        function labelParts(label, x, y) {
          const parts = [];
          if (label.leader) {
            const lx = Math.max(label.x, Math.min(x, label.x + label.w));
            const ly = Math.max(label.y, Math.min(y, label.y + label.h));
            parts.push(svgEl("line", { x1: x, y1: y, x2: lx, y2: ly }));
          }
          parts.push(svgEl("rect", { x: label.x, y: label.y, width: label.w, height: label.h, rx: 2 }));
          const t = svgEl("text", { x: label.x + 1, y: label.y + label.h * 0.78, textLength: label.w - 2, lengthAdjust: "spacingAndGlyphs" });
          t.textContent = label.text;
          parts.push(t);
          return parts;
        }

        function text(tag, content, cls) {
          const el = document.createElement(tag);
          el.textContent = content;
          if (cls) el.className = cls;
          return el;
        }

        function render(s) {
          state = s;
          const body = document.querySelector("#occupancy tbody");
          body.replaceChildren();
          for (const [region, count] of Object.entries(s.occupancy)) {
            const row = document.createElement("tr");
            row.dataset.region = region;
            row.append(text("td", names[region] || region));
            const cell = text("td", String(count), "count");
            cell.id = "occ-" + region;
            row.append(cell);
            body.append(row);
            const shape = document.getElementById("region-" + region);
            if (shape) {
              shape.setAttribute("fill-opacity", count > 0 ? String(Math.min(0.25 + 0.15 * count, 0.8)) : "0.12");
              shape.dataset.occupancy = String(count);
            }
            if (lastCounts && lastCounts[region] !== undefined && lastCounts[region] !== count) {
              const log = document.getElementById("occupancy-changes");
              log.append(text("li", region + " " + lastCounts[region] + " → " + count));
            }
          }
          lastCounts = Object.assign({}, s.occupancy);
          layer.replaceChildren();
          const labels = [];
          const select = document.getElementById("subject-select");
          const chosen = select.value;
          select.replaceChildren(new Option("(choose a subject)", ""));
          for (const subject of s.subjects) {
            const selected = subject.id === (chosen || wanted);
            if (!subject.coarse) select.append(new Option(subject.id, subject.id, selected, selected));
            if (subject.x === undefined) continue;
            const g = svgEl("g", { "class": subject.coarse ? "subject coarse" : "subject" });
            g.dataset.subject = subject.id;
            g.append(svgEl("circle", { cx: subject.x, cy: subject.y, r: subject.coarse ? subject.r : 6 }));
            layer.append(g);
            if (subject.label) {
              // Labels go above every marker: a later dot must not cover an earlier name.
              const lg = svgEl("g", { "class": "subject-label" });
              lg.dataset.label = subject.id;
              lg.append(...labelParts(subject.label, subject.x, subject.y));
              labels.push(lg);
            }
          }
          // Subjects whose label found no room: one count per crowd, its members in a tooltip.
          (s.clusters || []).forEach((cluster, index) => {
            if (!cluster.label) return;
            const g = svgEl("g", { "class": "cluster" });
            g.dataset.cluster = String(index);
            g.dataset.count = String(cluster.count);
            const title = svgEl("title", {});
            title.textContent = cluster.members.join(", ");
            g.append(title, ...labelParts(cluster.label, cluster.x, cluster.y));
            labels.push(g);
          });
          layer.append(...labels);
          for (const [key, value] of Object.entries(s.counters)) {
            const el = document.getElementById("count-" + key);
            if (el) el.textContent = String(value);
          }
          const services = document.getElementById("services");
          services.replaceChildren();
          for (const service of s.services) {
            services.append(text("li", service.id + (service.t ? " since " + day(service.t) : ""), service.online ? "online" : "offline"));
          }
          const grants = document.getElementById("grants");
          grants.replaceChildren();
          for (const grant of s.grants || []) {
            grants.append(text("li", grant.id + " has temporary full accuracy" + (grant.session ? " for " + grant.session : "")));
          }
          showFloors(s.floors || []);
          showRanging();
        }

        // Floor plans: the chosen floor's image under the regions, placed by its matrix.
        function showFloors(floors) {
          const select = document.getElementById("floor-select");
          const chosen = select.value;
          const known = Array.from(select.options).map(o => o.value).join(",");
          const wantedFloors = [""].concat(floors.map(f => String(f.floor))).join(",");
          if (known !== wantedFloors) {
            select.replaceChildren(new Option("(none)", ""));
            for (const f of floors) select.append(new Option("floor " + f.floor, String(f.floor)));
            select.value = chosen !== "" && floors.some(f => String(f.floor) === chosen) ? chosen : (floors.length ? String(floors[0].floor) : "");
          }
          const svg = document.querySelector("#map svg");
          let g = document.getElementById("floorplan");
          if (!g) {
            g = svgEl("g", { id: "floorplan" });
            svg.insertBefore(g, document.getElementById("regions"));
          }
          const plan = floors.find(f => String(f.floor) === select.value);
          const href = plan ? plan.href + "?v=" + plan.matrix.join(",") : "";
          if (g.dataset.href === href) return;
          g.dataset.href = href;
          g.replaceChildren();
          if (!plan) return;
          const image = svgEl("image", { href: plan.href, width: plan.width, height: plan.height, opacity: 0.6,
            transform: "matrix(" + plan.matrix.join(" ") + ")", preserveAspectRatio: "none" });
          image.dataset.floor = String(plan.floor);
          g.append(image);
        }
        document.getElementById("floor-select").addEventListener("change", () => {
          const g = document.getElementById("floorplan");
          if (g) g.dataset.href = "-";
          if (state) showFloors(state.floors || []);
        });
        document.getElementById("plan-upload").addEventListener("click", async () => {
          const problems = document.getElementById("plan-problems");
          problems.replaceChildren();
          const file = document.getElementById("plan-file").files[0];
          if (!file) { problems.append(text("li", "choose an image first")); return; }
          const floor = document.getElementById("plan-floor").value.trim();
          const points = document.getElementById("plan-points").value.trim();
          let answer;
          try {
            const response = await fetch("/api/floors/" + encodeURIComponent(floor) + "/plan?points=" + encodeURIComponent(points),
              { method: "POST", headers: { "Content-Type": "application/octet-stream" }, body: file });
            answer = response.headers.get("Content-Type") === "application/json" ? await response.json()
              : { ok: false, problems: [response.status + ": " + (await response.text())] };
          } catch (error) {
            answer = { ok: false, problems: ["the dashboard did not answer: " + error] };
          }
          if (answer.ok) { problems.append(text("li", "floor " + answer.floor + " saved")); document.getElementById("floor-select").value = String(answer.floor); return; }
          for (const problem of answer.problems || []) problems.append(text("li", problem));
        });

        function showRanging() {
          const list = document.getElementById("ranging");
          list.replaceChildren();
          const subject = document.getElementById("subject-select").value;
          for (const entry of ((state && state.ranging[subject]) || [])) {
            for (const b of entry.beacons) {
              const id = b.uuid ? b.uuid + " " + b.major + "/" + b.minor : (b.namespace ? b.namespace + " " + b.instance : b.id1);
              // `unknown`: not heard since the last report (accuracy -1, rssi 0 say nothing).
              const heard = b.proximity === "unknown"
                ? "unknown, last heard " + clock(b.lastSeen)
                : b.proximity + ", " + b.accuracy + " m, " + b.rssi + " dBm";
              list.append(text("li", entry.region + ": " + id + " — " + heard));
            }
          }
        }
        document.getElementById("subject-select").addEventListener("change", showRanging);
        // `#subject-id` in the address chooses whose ranging is shown (for links and snapshots).
        const wanted = decodeURIComponent(location.hash.slice(1));

        function feedLine(item) {
          let line;
          switch (item.kind) {
            case "deadletter": line = "dead letter [" + item.component + "] (" + item.code + "): " + item.reason; break;
            case "notification": line = "notification [" + item.channel + "] to " + item.subject + ": " + (item.text || ""); break;
            case "visit": line = item.subject + " visit " + item.event + (item.lat == null ? "" : " at " + Number(item.lat).toFixed(5) + ", " + Number(item.lon).toFixed(5)) + " (since " + String(item.arrival).substring(11, 19) + ")"; break;
            default: line = item.subject + " " + item.kind + " " + (names[item.region] || item.region) + (item.held ? " (held)" : "");
          }
          const li = text("li", (item.t ? clock(item.t) + " " : "") + line, item.kind);
          if (item.t) li.title = item.t;
          return li;
        }

        const events = new EventSource("/events");
        const connection = document.getElementById("connection");
        events.onopen = () => { connection.textContent = "live"; connection.className = "on"; };
        events.onerror = () => { connection.textContent = "reconnecting…"; connection.className = "off"; };
        events.addEventListener("state", e => render(JSON.parse(e.data)));
        events.addEventListener("map", e => {
          // Our own SVG, drawn by the dashboard with every text escaped.
          document.getElementById("map").innerHTML = JSON.parse(e.data);
          adoptMap();
          if (state) render(state);
          drawDraft();
        });
        events.addEventListener("feed", e => {
          const feed = document.getElementById("feed");
          feed.prepend(feedLine(JSON.parse(e.data)));
          while (feed.children.length > 100) feed.lastChild.remove();
        });
        events.addEventListener("feed-reset", e => {
          const feed = document.getElementById("feed");
          feed.replaceChildren(...JSON.parse(e.data).reverse().map(feedLine));
        });

        // --- Region editor: draw on the map, check and publish through the dashboard, which
        // checks with the evaluator's own decoder (the page never judges a region itself).
        const draft = { mode: null, points: [] };
        const degrees = Math.PI / 180;
        function toGeo(p) {
          const m = state && state.toGeo;
          if (!m) return null;
          return [m[0] * p.x + m[2] * p.y + m[4], m[1] * p.x + m[3] * p.y + m[5]];
        }
        function metres(a, b) {
          const dLat = (b[1] - a[1]) * degrees, dLon = (b[0] - a[0]) * degrees;
          const h = Math.sin(dLat / 2) ** 2 + Math.cos(a[1] * degrees) * Math.cos(b[1] * degrees) * Math.sin(dLon / 2) ** 2;
          return 2 * 6371008.8 * Math.asin(Math.min(1, Math.sqrt(h)));
        }
        function pictureDistance(a, b) { return Math.hypot(a.x - b.x, a.y - b.y); }
        function drawDraft() {
          const svg = document.querySelector("#map svg");
          let g = document.getElementById("draft");
          if (!g) { g = svgEl("g", { id: "draft" }); svg.appendChild(g); }
          g.replaceChildren();
          const pts = draft.points;
          if (draft.mode === "circle" && pts.length === 2) {
            g.append(svgEl("circle", { "class": "edge", cx: pts[0].x, cy: pts[0].y, r: pictureDistance(pts[0], pts[1]) }));
          } else if (pts.length > 1) {
            g.append(svgEl("path", { d: "M" + pts.map(p => p.x + " " + p.y).join(" L") + (draft.closed ? " Z" : "") }));
          }
          for (const p of pts) g.append(svgEl("circle", { "class": "vertex", cx: p.x, cy: p.y, r: 3 }));
          document.getElementById("draw-finish").disabled = !(draft.mode === "polygon" && pts.length >= 3 && !draft.closed);
          document.getElementById("map").classList.toggle("drawing", draft.mode !== null && !draft.closed);
        }
        function startDrawing(mode) {
          draft.mode = mode;
          draft.points = [];
          draft.closed = false;
          document.getElementById("draw-hint").textContent = mode === "circle"
            ? "Click the circle's centre, then a point on its edge."
            : "Click each corner; close the polygon when done.";
          drawDraft();
        }
        document.getElementById("draw-circle").addEventListener("click", () => startDrawing("circle"));
        document.getElementById("draw-polygon").addEventListener("click", () => startDrawing("polygon"));
        document.getElementById("draw-finish").addEventListener("click", () => { draft.closed = true; drawDraft(); });
        document.getElementById("draw-clear").addEventListener("click", () => { draft.mode = null; draft.points = []; drawDraft(); });
        document.getElementById("map").addEventListener("click", e => {
          if (!draft.mode || draft.closed) return;
          e.preventDefault();  // a click that draws does not also pick a region to edit
          const svg = document.querySelector("#map svg");
          const pt = svg.createSVGPoint();
          pt.x = e.clientX;
          pt.y = e.clientY;
          const p = pt.matrixTransform(svg.getScreenCTM().inverse());
          draft.points.push({ x: p.x, y: p.y });
          if (draft.mode === "circle" && draft.points.length === 2) {
            draft.closed = true;
            const r = metres(toGeo(draft.points[0]), toGeo(draft.points[1]));
            document.getElementById("region-radius").value = String(Math.round(r * 10) / 10);
          }
          drawDraft();
        });
        // A field's text as JSON: a number when it reads as one, else the text itself, so that
        // the dashboard (the evaluator's decoder) says what is wrong with it.
        function field(name) {
          const raw = document.getElementById("region-" + name).value.trim();
          if (raw === "") return undefined;
          if (name === "schedule") { try { return JSON.parse(raw); } catch (_) { return raw; } }
          if (name === "name") return raw;
          const n = Number(raw);
          return Number.isFinite(n) ? n : raw;
        }
        function feature() {
          const properties = {};
          for (const name of ["name", "enterDelay", "exitDelay", "dwellAfter", "minAccuracy", "exitBuffer", "floor", "schedule"]) {
            const value = field(name);
            if (value !== undefined) properties[name] = value;
          }
          let geometry = null;
          const pts = draft.points.map(toGeo);
          if (draft.mode === "circle" && pts.length >= 1) {
            geometry = { type: "Point", coordinates: pts[0] };
            const radius = field("radius");
            if (radius !== undefined) properties.radius = radius;
          } else if (draft.mode === "polygon" && pts.length >= 1) {
            geometry = { type: "Polygon", coordinates: [pts.concat([pts[0]])] };
          }
          const id = document.getElementById("region-id").value.trim();
          return { type: "Feature", id: id, properties: properties, geometry: geometry };
        }
        async function send(action) {
          const problems = document.getElementById("region-problems");
          const result = document.getElementById("region-result");
          problems.replaceChildren();
          result.textContent = action === "publish" ? "publishing…" : "checking…";
          document.querySelectorAll("#region-form input").forEach(i => { i.classList.remove("invalid"); i.removeAttribute("aria-invalid"); });
          let answer;
          try {
            const response = await fetch("/api/regions/" + action, {
              method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(feature()),
            });
            answer = await response.json();
          } catch (error) {
            answer = { ok: false, problems: ["the dashboard did not answer: " + error] };
          }
          if (answer.ok) {
            result.textContent = answer.published ? "published on " + answer.topic : "valid: publishing puts it on " + answer.topic;
            result.className = "ok";
            return;
          }
          result.textContent = "";
          for (const problem of answer.problems || []) {
            problems.append(text("li", problem));
            // Mark the field the problem names (properties.enterDelay, properties.radius …).
            const named = /properties\.(\w+)/.exec(problem) || (/geometry/.test(problem) ? [null, "geometry"] : null);
            const input = named && document.getElementById("region-" + named[1]);
            if (input) { input.classList.add("invalid"); input.setAttribute("aria-invalid", "true"); }
          }
        }
        // Editing: a click on a region (while not drawing) loads it into the form and the draft;
        // publishing under its id replaces it.
        function toPicture(lonLat) {
          const m = state.toGeo, det = m[0] * m[3] - m[1] * m[2], dx = lonLat[0] - m[4], dy = lonLat[1] - m[5];
          return { x: (m[3] * dx - m[2] * dy) / det, y: (-m[1] * dx + m[0] * dy) / det };
        }
        document.getElementById("map").addEventListener("click", async e => {
          if (e.defaultPrevented || (draft.mode && !draft.closed)) return;
          // The region under the pointer, even below a subject's dot or label.
          const shape = document.elementsFromPoint(e.clientX, e.clientY).find(el => el.matches && el.matches("path.region"));
          if (!shape || !state || !state.toGeo) return;
          const response = await fetch("/api/regions/" + encodeURIComponent(shape.dataset.region));
          if (!response.ok) return;
          const f = await response.json();
          const p = f.properties || {};
          document.getElementById("region-id").value = f.id || shape.dataset.region;
          for (const name of ["name", "radius", "enterDelay", "exitDelay", "dwellAfter", "minAccuracy", "exitBuffer", "floor"]) {
            document.getElementById("region-" + name).value = p[name] === undefined ? "" : String(p[name]);
          }
          document.getElementById("region-schedule").value = p.schedule ? JSON.stringify(p.schedule) : "";
          const g = f.geometry;
          if (g && g.type === "Point") {
            const centre = toPicture(g.coordinates);
            // The edge point due east, at the radius.
            const east = [g.coordinates[0] + (p.radius || 0) / (111320 * Math.cos(g.coordinates[1] * degrees)), g.coordinates[1]];
            draft.mode = "circle";
            draft.points = [centre, toPicture(east)];
            draft.closed = true;
          } else if (g && g.type === "Polygon") {
            draft.mode = "polygon";
            draft.points = g.coordinates[0].slice(0, -1).map(toPicture);
            draft.closed = true;
          } else {
            draft.mode = null;
            draft.points = [];
          }
          document.getElementById("draw-hint").textContent = "Editing " + (f.id || shape.dataset.region) + ": change its settings, or draw it again, then publish.";
          drawDraft();
        });
        document.getElementById("region-check").addEventListener("click", () => send("check"));
        document.getElementById("region-publish").addEventListener("click", () => send("publish"));
        """#
}
