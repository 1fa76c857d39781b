#!/usr/bin/env python3
"""Regenerate the time-zone sample and the shapely parity fixture (test tooling only).

    python bench/python/make_parity_fixture.py /path/to/timezones.geojson \
        [--out Tests/PerimeterCoreTests/Fixtures]

timezones.geojson is the output of /work/shared/data/tz/export_timezones.py run with
timezonefinder==9.0.0 and timezonefinder-data==3.2026.3.post1 (data version 2026c).

Writes, under --out:
  tz/tz-sample.geojson    a few real zones, features copied verbatim from the export
  parity/regions.geojson  the same zones + synthetic polygons, one FeatureCollection
  parity/points.csv       id,lat,lon
  parity/expected.csv     id,regions  (sorted ids of regions that shapely says the
                          point intersects, joined with ";", empty when none)
and prints a per-zone / per-category summary (used for the READMEs).

Deterministic: fixed seed (numpy PCG64), fixed region list, floats written with
Python's shortest round-trip repr. Every point is at least MIN_EDGE_DIST (1e-7 degrees,
planar lon/lat distance as shapely measures it) from every region's boundary, so the
expected answers do not depend on boundary rules or on floating-point robustness, and
no point is a polygon vertex.
"""
import argparse
import csv
import json
import math
import os
import sys

import numpy as np
import shapely
from shapely.geometry import shape

SEED = 20260301
MIN_EDGE_DIST = 1e-7

# Real zones, chosen for size (all small) and for what they exercise:
TZ_ZONES = {
    "Pacific/Fiji": "antimeridian-split (pieces at +180 and -180)",
    "Pacific/Funafuti": "antimeridian-split",
    "America/Adak": "antimeridian-split (Aleutians)",
    "Antarctica/McMurdo": "one ring spanning lon -180..180 with edges on lon +-180 and lat -90 (contains the South Pole)",
    "America/Havana": "hole: Guantanamo Bay (America/New_York, not in the sample)",
    "Asia/Dubai": "hole: Madha (Asia/Muscat); Nahwa inside Madha is Dubai again (counter-enclave)",
    "Asia/Muscat": "hole: Nahwa (Asia/Dubai) inside the Madha enclave",
}

# Synthetic parity regions: planar lon/lat rings, RFC 7946 style (first == last added
# below). Mostly counter-clockwise exteriors; syn-star is deliberately clockwise.


def box(x0, y0, x1, y1):
    return [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]


def circle(cx, cy, r, n, start=0.0):
    return [(cx + r * math.cos(start + 2 * math.pi * k / n), cy + r * math.sin(start + 2 * math.pi * k / n))
            for k in range(n)]


def cw(ring):
    return list(reversed(ring))


def star(cx, cy, r_out, r_in, points):
    ring = []
    for k in range(2 * points):
        r = r_out if k % 2 == 0 else r_in
        a = math.pi * k / points
        ring.append((cx + r * math.cos(a) / math.cos(math.radians(cy)), cy + r * math.sin(a)))
    return ring


def comb(x0, y0, teeth, tooth_w, gap, base_h, tooth_h):
    ring = [(x0, y0)]
    width = teeth * tooth_w + (teeth - 1) * gap
    ring.append((x0 + width, y0))
    x = x0 + width
    # walk back along the top, tooth by tooth
    for t in range(teeth):
        ring.append((x, y0 + base_h + tooth_h))
        ring.append((x - tooth_w, y0 + base_h + tooth_h))
        x -= tooth_w
        if t < teeth - 1:
            ring.append((x, y0 + base_h))
            ring.append((x - gap, y0 + base_h))
            x -= gap
    return ring


def synthetic_regions():
    lat_m = 1.0 / 111195.08  # degrees of latitude per metre (sphere R = 6371008.8 m)
    lon_m = lat_m / math.cos(math.radians(48.8566))
    P = "Polygon"
    M = "MultiPolygon"
    regs = [
        # Paris cluster
        ("syn-square", P, [box(2.30, 48.82, 2.40, 48.88)]),
        ("syn-donut", P, [box(2.33, 48.80, 2.45, 48.90), cw(box(2.37, 48.83, 2.41, 48.87))]),
        ("syn-in-donut-hole", P, [box(2.375, 48.835, 2.395, 48.855)]),
        ("syn-star", P, [cw(star(2.25, 48.90, 0.03, 0.012, 8))]),
        ("syn-u", P, [[(2.45, 48.75), (2.55, 48.75), (2.55, 48.85), (2.52, 48.85), (2.52, 48.78),
                       (2.48, 48.78), (2.48, 48.85), (2.45, 48.85)]]),
        ("syn-comb", P, [comb(2.20, 48.70, 8, 0.005, 0.0075, 0.02, 0.04)]),
        ("syn-staircase", P, [[(2.60, 48.60), (2.70, 48.60), (2.70, 48.62), (2.68, 48.62), (2.68, 48.64),
                               (2.66, 48.64), (2.66, 48.66), (2.64, 48.66), (2.64, 48.68), (2.62, 48.68),
                               (2.62, 48.70), (2.61, 48.70), (2.60, 48.70), (2.60, 48.65)]]),
        ("syn-dup-vertices", P, [[(2.00, 48.90), (2.05, 48.90), (2.05, 48.90), (2.10, 48.90), (2.10, 48.95),
                                  (2.10, 48.95), (2.05, 48.97), (2.00, 48.95)]]),
        ("syn-tiny-square", P, [box(2.3522, 48.8566, 2.3522 + 1.0 * lon_m, 48.8566 + 1.0 * lat_m)]),
        ("syn-tiny-triangle", P, [[(2.3530, 48.8570), (2.3530 + 1.2 * lon_m, 48.8570),
                                   (2.3530 + 0.4 * lon_m, 48.8570 + 1.0 * lat_m)]]),
        ("syn-tiny-l", P, [[(2.3540, 48.8575), (2.3540 + 2 * lon_m, 48.8575), (2.3540 + 2 * lon_m, 48.8575 + 0.7 * lat_m),
                            (2.3540 + 0.7 * lon_m, 48.8575 + 0.7 * lat_m), (2.3540 + 0.7 * lon_m, 48.8575 + 2 * lat_m),
                            (2.3540, 48.8575 + 2 * lat_m)]]),
        ("syn-sliver", P, [[(2.26, 48.80), (2.29, 48.80), (2.29, 48.80 + 1.5 * lat_m), (2.26, 48.80 + 1.5 * lat_m)]]),
        ("syn-multi", M, [
            [box(2.10, 48.60, 2.20, 48.70), cw(box(2.13, 48.63, 2.17, 48.67))],
            [box(2.14, 48.64, 2.16, 48.66)],  # island inside the first part's hole
            [[(2.25, 48.60), (2.30, 48.60), (2.275, 48.65)]],
        ]),
        ("syn-many-holes", P, [box(2.50, 48.90, 2.60, 49.00), cw(box(2.51, 48.91, 2.53, 48.93)),
                               cw(box(2.56, 48.91, 2.58, 48.93)), cw([(2.52, 48.96), (2.55, 48.96), (2.535, 48.99)]),
                               cw(circle(2.575, 48.975, 0.01, 12))]),
        # overlapping the real zones
        ("syn-gulf", P, [[(56.20, 25.20), (56.40, 25.20), (56.40, 25.36), (56.30, 25.28), (56.20, 25.36)]]),
        ("syn-cuba-ring", P, [circle(-79.0, 21.5, 8.0, 180), cw(circle(-75.16, 19.92, 0.5, 24))]),
        ("syn-antimeridian", M, [[box(178.0, -18.0, 180.0, -16.0)], [box(-180.0, -18.0, -178.0, -16.0)]]),
        ("syn-south-cap", P, [[(-180.0, -90.0), (180.0, -90.0), (180.0, -80.0), (-180.0, -80.0)]]),
        ("syn-aleutian-concave", P, [[(165.0, 45.0), (180.0, 45.0), (180.0, 60.0), (172.0, 60.0), (172.0, 50.0),
                                      (165.0, 55.0)]]),
        ("syn-large-triangle", P, [[(-120.0, -50.0), (150.0, -40.0), (10.0, 70.0)]]),
    ]
    features = []
    for fid, kind, rings in regs:
        def close(ring):
            ring = [[float(x), float(y)] for x, y in ring]
            return ring + [ring[0]]
        if kind == P:
            coords = [close(r) for r in rings]
        else:
            coords = [[close(r) for r in poly] for poly in rings]
        features.append({"type": "Feature", "id": fid, "properties": {},
                         "geometry": {"type": kind, "coordinates": coords}})
    return features


def polygons_of(geom_json):
    if geom_json["type"] == "Polygon":
        return [geom_json["coordinates"]]
    return geom_json["coordinates"]


def fmt(v: float) -> str:
    return repr(float(v))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export", help="timezones.geojson from export_timezones.py")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                  "Tests", "PerimeterCoreTests", "Fixtures"))
    args = ap.parse_args()
    out = os.path.normpath(args.out)

    with open(args.export, "rb") as f:
        export_text = f.read().decode("utf-8")
    export = json.loads(export_text)
    by_id = {f["id"]: f for f in export["features"]}
    missing = [z for z in TZ_ZONES if z not in by_id]
    if missing:
        sys.exit(f"zones missing from export: {missing}")
    # keep the export's order; copy features verbatim (json round-trips the text exactly)
    tz_features = [f for f in export["features"] if f["id"] in TZ_ZONES]
    for f in tz_features:
        if json.dumps(f, separators=(",", ":")) not in export_text:
            sys.exit(f"{f['id']}: re-serialised feature differs from the export text")

    os.makedirs(os.path.join(out, "tz"), exist_ok=True)
    os.makedirs(os.path.join(out, "parity"), exist_ok=True)
    with open(os.path.join(out, "tz", "tz-sample.geojson"), "w", newline="\n") as f:
        json.dump({"type": "FeatureCollection", "features": tz_features}, f, separators=(",", ":"))
        f.write("\n")

    print("tz sample:")
    print("| zone | polygons | holes | vertices | antimeridian-split | note |")
    print("|---|---|---|---|---|---|")
    for f in tz_features:
        polys = f["geometry"]["coordinates"]
        v = sum(len(r) for p in polys for r in p)
        h = sum(len(p) - 1 for p in polys)
        west = any(c[0] == -180.0 for p in polys for c in p[0])
        east = any(c[0] == 180.0 for p in polys for c in p[0])
        split = west and east and len(polys) > 1
        print(f"| {f['id']} | {len(polys)} | {h} | {v} | {'yes' if split else 'no'} | {TZ_ZONES[f['id']]} |")

    syn = synthetic_regions()
    regions = tz_features + syn
    with open(os.path.join(out, "parity", "regions.geojson"), "w", newline="\n") as f:
        f.write('{"type":"FeatureCollection","features":[\n')
        f.write(",\n".join(json.dumps(x, separators=(",", ":")) for x in regions))
        f.write("\n]}\n")

    ids = [r["id"] for r in regions]
    assert len(set(ids)) == len(ids)
    geoms = np.array([shape(r["geometry"]) for r in regions], dtype=object)
    for i, g in zip(ids, geoms):
        if not g.is_valid:
            sys.exit(f"{i}: invalid geometry: {shapely.is_valid_reason(g)}")
    boundaries = shapely.boundary(geoms)
    btree = shapely.STRtree(boundaries)

    rng = np.random.default_rng(SEED)
    # Each category: a generator of candidate (lon, lat) arrays; candidates closer than
    # MIN_EDGE_DIST to any boundary (or off the globe) are dropped, then the first
    # `count` survivors kept, so the result depends only on the seed and the regions.
    def accept(lon, lat):
        ok = (lon >= -180.0) & (lon <= 180.0) & (lat >= -90.0) & (lat <= 90.0)
        pts = shapely.points(lon, lat)
        near = btree.query(pts, predicate="dwithin", distance=MIN_EDGE_DIST)[0]
        ok[np.unique(near)] = False
        return lon[ok], lat[ok]

    def take(gen, count):
        lons, lats = [], []
        n = 0
        while n < count:
            lon, lat = accept(*gen(count))
            lons.append(lon)
            lats.append(lat)
            n += len(lon)
        return np.concatenate(lons)[:count], np.concatenate(lats)[:count]

    categories = []

    # A: uniform in the bbox of every polygon (each part of a multipolygon)
    # B: uniform in the bbox of every hole
    parts, holes = [], []
    for r in regions:
        for poly in polygons_of(r["geometry"]):
            parts.append((r["id"], poly[0]))
            holes.extend((r["id"], h) for h in poly[1:])

    def in_bbox(ring):
        a = np.asarray(ring)
        x0, y0 = a.min(axis=0)
        x1, y1 = a.max(axis=0)
        return lambda n: (rng.uniform(x0, x1, n), rng.uniform(y0, y1, n))

    for name, rings, per in (("bbox-of-polygon", parts, 20), ("bbox-of-hole", holes, 20)):
        lo, la = [], []
        for _, ring in rings:
            x, y = take(in_bbox(ring), per)
            lo.append(x)
            la.append(y)
        categories.append((name, np.concatenate(lo), np.concatenate(la)))

    # C: near an edge: a random edge of a random ring of a random region (regions
    # equally likely), a point on it (t in [0.05, 0.95]) pushed sideways by 2e-7..1e-4
    # degrees, either side.
    all_rings = [[np.asarray(ring) for poly in polygons_of(r["geometry"]) for ring in poly] for r in regions]

    def near_edge(n):
        lon, lat = np.empty(n), np.empty(n)
        for k in range(n):
            rings = all_rings[rng.integers(len(all_rings))]
            ring = rings[rng.integers(len(rings))]
            while True:
                e = rng.integers(len(ring) - 1)
                (x0, y0), (x1, y1) = ring[e], ring[e + 1]
                length = math.hypot(x1 - x0, y1 - y0)
                if length > 0:
                    break
            t = rng.uniform(0.05, 0.95)
            d = 10.0 ** rng.uniform(math.log10(2e-7), -4.0) * (1 if rng.random() < 0.5 else -1)
            lon[k] = x0 + t * (x1 - x0) - d * (y1 - y0) / length
            lat[k] = y0 + t * (y1 - y0) + d * (x1 - x0) / length
        return lon, lat

    categories.append(("near-edge", *take(near_edge, 1000)))

    # D: aligned with a vertex: same latitude as a vertex (a horizontal ray from the
    # point passes exactly through it) or same longitude, 1e-6..1e-2 degrees away.
    def vertex_aligned(n):
        lon, lat = np.empty(n), np.empty(n)
        for k in range(n):
            rings = all_rings[rng.integers(len(all_rings))]
            ring = rings[rng.integers(len(rings))]
            x, y = ring[rng.integers(len(ring) - 1)]
            d = 10.0 ** rng.uniform(-6.0, -2.0) * (1 if rng.random() < 0.5 else -1)
            if rng.random() < 0.5:
                lon[k], lat[k] = x + d, y
            else:
                lon[k], lat[k] = x, y + d
        return lon, lat

    categories.append(("vertex-aligned", *take(vertex_aligned, 300)))

    # E: uniform over the globe
    categories.append(("globe", *take(lambda n: (rng.uniform(-180, 180, n), rng.uniform(-90, 90, n)), 300)))

    lon = np.concatenate([c[1] for c in categories])
    lat = np.concatenate([c[2] for c in categories])
    pts = shapely.points(lon, lat)
    # Expected answers: shapely intersects, checked two ways.
    tree = shapely.STRtree(geoms)
    pairs = tree.query(pts, predicate="intersects")
    check = np.array([[p, g] for g, geom in enumerate(geoms)
                      for p in np.flatnonzero(shapely.contains_xy(geom, lon, lat))]).T
    a = set(map(tuple, pairs.T.tolist()))
    b = set(map(tuple, check.T.tolist()))
    if a != b:
        sys.exit(f"shapely intersects and contains_xy disagree on {len(a ^ b)} pairs")
    dmin = shapely.distance(pts[:, None], boundaries[None, :]).min()
    assert dmin >= MIN_EDGE_DIST, dmin
    hits = [[] for _ in range(len(lon))]
    for p, g in sorted(a):
        hits[p].append(ids[g])

    with open(os.path.join(out, "parity", "points.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "lat", "lon"])
        for i in range(len(lon)):
            w.writerow([i, fmt(lat[i]), fmt(lon[i])])
    with open(os.path.join(out, "parity", "expected.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "regions"])
        for i, h in enumerate(hits):
            w.writerow([i, ";".join(sorted(h))])

    print(f"\nregions: {len(regions)} ({len(tz_features)} tz + {len(syn)} synthetic)")
    print(f"points: {len(lon)}, min distance to any boundary {dmin:.3g} deg")
    start = 0
    for name, x, _ in categories:
        print(f"  ids {start}..{start + len(x) - 1}: {name} ({len(x)})")
        start += len(x)
    counts = np.bincount([len(h) for h in hits])
    print("  regions per point:", {k: int(v) for k, v in enumerate(counts)})
    per_region = {i: 0 for i in ids}
    for h in hits:
        for i in h:
            per_region[i] += 1
    print("  points per region:", per_region)


if __name__ == "__main__":
    main()
