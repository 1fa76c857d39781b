#!/usr/bin/env python3
"""Baseline for `perimeter bench geo`: how fast do shapely 2 (GEOS) and timezonefinder
answer "which regions contain this point?".

Benchmark tooling only: never imported or run by the product.

    python geo_baseline.py --engine shapely --regions REGIONS.geojson --points POINTS.f64 \
        [--hits-out HITS.txt] [--mode query-predicate|prepared-pairs|points-tree]
    python geo_baseline.py --engine timezonefinder --points POINTS.f64 \
        [--hits-out HITS.txt] [--mode loop|batch] [--no-in-memory]

REGIONS.geojson: FeatureCollection (RFC 7946, lon/lat). Feature id = string `id` or
`properties.id`. Geometry Polygon / MultiPolygon (holes allowed), or Point with
`properties.radius` in metres = geodesic circle, approximated here by the 64 points at
exactly `radius` from the centre on a sphere of radius 6371008.8 m (spherical
destination-point formula, bearings 0, 360/64, ...; longitudes are not wrapped).
Polygons are used as given (planar lon/lat). `geometry: null` features are skipped.

POINTS.f64: raw little-endian float64 pairs (lon, lat), no header.

Timing: `build_seconds` covers building the index (and preparing geometries, in the
modes that prepare); `query_seconds` covers only answering all points, single thread.
GeoJSON parsing and geometry construction are not timed.

shapely modes:
  query-predicate (default)  tree.query(points, predicate="intersects"): STRtree over
                             the regions, one vectorised call. GEOS evaluates
                             intersects(point, region) per bbox candidate, without a
                             prepared region: cheap for small fences, O(vertices) per
                             candidate for big polygons (time zones).
  prepared-pairs             shapely.prepare(regions) at build time (plus warm-up
                             calls: GEOS builds a prepared polygon's point-in-area
                             index lazily, on its second use), then tree.query(points)
                             (bbox candidates) + shapely.intersects(prepared_region,
                             point) over the candidate pairs. Same answers; much
                             faster on big polygons.
  points-tree                spatial-join style: regions prepared (as above) at build
                             time; the query timer covers building an STRtree over
                             the points and tree.query(regions, predicate="intersects")
                             (GEOS prepares each input region). A batch-only trick.
timezonefinder modes:
  loop (default)             tf.timezone_at(lng=, lat=) per point, in a Python loop.
  batch                      tf.timezone_ids_at(lngs=, lats=) once (timezonefinder >= 9).
  TimezoneFinder(in_memory=True) is used unless --no-in-memory.

stdout: one JSON line. Errors: message on stderr, exit status 2.
--hits-out: one line per point, the sorted (plain string sort) distinct ids of the
regions containing it joined with ";" (timezonefinder: the zone name), empty if none.
"hits" counts (point, region feature) pairs; for timezonefinder, points with an answer.
"""
import argparse
import json
import math
import os
import sys
import time
from importlib import metadata

import numpy as np

EARTH_RADIUS_M = 6371008.8
CIRCLE_VERTICES = 64


def fail(msg: str) -> "NoReturn":  # noqa: F821
    print(f"geo_baseline: {msg}", file=sys.stderr)
    sys.exit(2)


def pkg_version(name: str):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def load_points(path: str) -> np.ndarray:
    size = os.path.getsize(path)
    if size % 16:
        fail(f"{path}: {size} bytes is not a whole number of (lon, lat) float64 pairs")
    raw = np.fromfile(path, dtype="<f8")
    pts = raw.reshape(-1, 2).astype(np.float64, copy=False)
    if not np.isfinite(pts).all():
        fail(f"{path}: non-finite coordinate")
    return np.ascontiguousarray(pts)


def circle_ring(lon: float, lat: float, radius_m: float) -> list:
    """64 vertices at exactly radius_m from (lon, lat) on the sphere, lon/lat degrees."""
    d = radius_m / EARTH_RADIUS_M
    phi1, lam1 = math.radians(lat), math.radians(lon)
    sin_phi1, cos_phi1 = math.sin(phi1), math.cos(phi1)
    sin_d, cos_d = math.sin(d), math.cos(d)
    ring = []
    for k in range(CIRCLE_VERTICES):
        theta = 2.0 * math.pi * k / CIRCLE_VERTICES
        sin_phi2 = sin_phi1 * cos_d + cos_phi1 * sin_d * math.cos(theta)
        phi2 = math.asin(max(-1.0, min(1.0, sin_phi2)))
        lam2 = lam1 + math.atan2(math.sin(theta) * sin_d * cos_phi1, cos_d - sin_phi1 * sin_phi2)
        ring.append((math.degrees(lam2), math.degrees(phi2)))
    ring.append(ring[0])
    return ring


def load_regions(path: str):
    import shapely
    from shapely.geometry import shape

    try:
        with open(path, "rb") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if not isinstance(doc, dict) or doc.get("type") != "FeatureCollection":
        fail(f"{path}: not a GeoJSON FeatureCollection")
    ids, geoms = [], []
    for i, feat in enumerate(doc.get("features") or []):
        geom = feat.get("geometry")
        if geom is None:
            continue
        props = feat.get("properties") or {}
        fid = feat.get("id", props.get("id"))
        if fid is None:
            fail(f"{path}: feature #{i} has no id")
        fid = str(fid)
        gtype = geom.get("type")
        if gtype in ("Polygon", "MultiPolygon"):
            try:
                g = shape(geom)
            except Exception as e:  # noqa: BLE001 - report any malformed geometry
                fail(f"{path}: feature {fid!r}: bad {gtype}: {e}")
        elif gtype == "Point":
            radius = props.get("radius")
            if not isinstance(radius, (int, float)) or not radius > 0:
                fail(f"{path}: feature {fid!r}: Point without positive properties.radius")
            lon, lat = geom["coordinates"][:2]
            g = shapely.Polygon(circle_ring(float(lon), float(lat), float(radius)))
        else:
            fail(f"{path}: feature {fid!r}: unsupported geometry type {gtype!r}")
        ids.append(fid)
        geoms.append(g)
    return ids, np.array(geoms, dtype=object)


def write_hits(path: str, lines) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line)
            f.write("\n")


def run_shapely(args, pts: np.ndarray) -> dict:
    import shapely

    ids, geoms = load_regions(args.regions)
    if len(geoms) == 0:
        fail(f"{args.regions}: no regions")
    points = shapely.points(pts)
    mode = args.mode or "query-predicate"

    if mode not in ("query-predicate", "prepared-pairs", "points-tree"):
        fail(f"unknown shapely mode {mode!r}")
    far_box = shapely.box(1e9, 1e9, 1e9 + 1, 1e9 + 1)  # outside any lon/lat

    t0 = time.perf_counter()
    tree = shapely.STRtree(geoms)
    # GEOS builds the STR packing lazily on the first query: force it inside the build
    # timer with an empty query.
    tree.query(far_box)
    if mode in ("prepared-pairs", "points-tree"):
        shapely.prepare(geoms)
        # GEOS builds each prepared polygon's point-in-area index lazily (on the second
        # point test, as observed with GEOS 3.14): a few point tests inside each bbox force it here.
        b = shapely.bounds(geoms)
        centres = shapely.points((b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2)
        for _ in range(3):
            shapely.intersects(geoms, centres)
    build = time.perf_counter() - t0

    if mode == "query-predicate":
        t0 = time.perf_counter()
        pairs = tree.query(points, predicate="intersects")
        query = time.perf_counter() - t0
    elif mode == "prepared-pairs":
        t0 = time.perf_counter()
        cand = tree.query(points)
        keep = shapely.intersects(geoms.take(cand[1]), points.take(cand[0]))
        pairs = cand[:, keep]
        query = time.perf_counter() - t0
    else:  # points-tree
        t0 = time.perf_counter()
        ptree = shapely.STRtree(points)
        region_point = ptree.query(geoms, predicate="intersects")
        query = time.perf_counter() - t0
        pairs = region_point[::-1]

    if args.hits_out:
        per_point = [set() for _ in range(len(pts))]
        for p, r in zip(pairs[0].tolist(), pairs[1].tolist()):
            per_point[p].add(ids[r])
        write_hits(args.hits_out, (";".join(sorted(s)) for s in per_point))

    return {
        "engine": "shapely",
        "mode": f"STRtree {mode}",
        "regions": len(geoms),
        "build_seconds": build,
        "query_seconds": query,
        "hits": int(pairs.shape[1]),
    }


def run_timezonefinder(args, pts: np.ndarray) -> dict:
    import warnings

    warnings.filterwarnings("ignore")
    from timezonefinder import TimezoneFinder

    in_memory = not args.no_in_memory
    mode = args.mode or "loop"
    t0 = time.perf_counter()
    tf = TimezoneFinder(in_memory=in_memory)
    build = time.perf_counter() - t0
    lngs = pts[:, 0].tolist()
    lats = pts[:, 1].tolist()

    if mode == "loop":
        timezone_at = tf.timezone_at
        t0 = time.perf_counter()
        names = [timezone_at(lng=x, lat=y) for x, y in zip(lngs, lats)]
        query = time.perf_counter() - t0
    elif mode == "batch":
        lng_arr = np.ascontiguousarray(pts[:, 0])
        lat_arr = np.ascontiguousarray(pts[:, 1])
        t0 = time.perf_counter()
        zone_ids = tf.timezone_ids_at(lngs=lng_arr, lats=lat_arr)
        query = time.perf_counter() - t0
        names = tf.zone_names_from_ids(zone_ids)
    else:
        fail(f"unknown timezonefinder mode {mode!r}")

    if args.hits_out:
        write_hits(args.hits_out, (n or "" for n in names))
    return {
        "engine": "timezonefinder",
        "mode": f"TimezoneFinder(in_memory={in_memory}) "
        + ("timezone_at loop" if mode == "loop" else "timezone_ids_at batch"),
        "regions": int(tf.nr_of_zones),
        "build_seconds": build,
        "query_seconds": query,
        "hits": sum(1 for n in names if n is not None),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", required=True, choices=["shapely", "timezonefinder"])
    ap.add_argument("--regions", help="GeoJSON FeatureCollection (shapely engine)")
    ap.add_argument("--points", required=True, help="raw little-endian float64 (lon, lat) pairs")
    ap.add_argument("--hits-out", help="write per-point region ids here")
    ap.add_argument("--mode", help="shapely: query-predicate (default)|prepared-pairs|points-tree; "
                    "timezonefinder: loop (default)|batch")
    ap.add_argument("--no-in-memory", action="store_true",
                    help="timezonefinder: read polygon data from files instead of memory")
    args = ap.parse_args()
    if args.engine == "shapely" and not args.regions:
        fail("--regions is required with --engine shapely")

    try:
        pts = load_points(args.points)
    except OSError as e:
        fail(f"{args.points}: {e}")

    try:
        result = run_shapely(args, pts) if args.engine == "shapely" else run_timezonefinder(args, pts)
    except (OSError, ValueError, TypeError) as e:  # e.g. a coordinate timezonefinder rejects
        fail(f"{type(e).__name__}: {e}")
    n = len(pts)
    q = result["query_seconds"]
    geos = None
    try:
        import shapely

        geos = shapely.geos_version_string
    except ImportError:
        pass
    out = {
        "engine": result["engine"],
        "mode": result["mode"],
        "points": n,
        "regions": result["regions"],
        "build_seconds": round(result["build_seconds"], 6),
        "query_seconds": round(q, 6),
        "points_per_s": round(n / q, 1) if q > 0 else None,
        "hits": result["hits"],
        "versions": {
            "shapely": pkg_version("shapely"),
            "geos": geos,
            "timezonefinder": pkg_version("timezonefinder"),
        },
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
