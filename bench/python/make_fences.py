#!/usr/bin/env python3
"""Synthetic geofences + query points for checking geo_baseline.py (test tool only;
`perimeter bench geo` generates its own data in the same formats).

    python make_fences.py --box-km 10 --count 100000 --seed 1 --out F.geojson \
        --points 200000 --points-out P.f64

A square box of --box-km side centred on lon 2.35, lat 48.85. Half of the fences are
circles (GeoJSON Point + properties.radius in metres), half small polygons (alternately
convex and concave/star-shaped, 4-32 vertices). Size = diameter, log-uniform in
[--min-size-m, --max-size-m] (default 20-500 m); centres uniform in the box. Points are
uniform in the same box, written as raw little-endian float64 (lon, lat) pairs.
Deterministic for a given seed (numpy PCG64).
"""
import argparse
import json
import math

import numpy as np

CENTER_LON, CENTER_LAT = 2.35, 48.85
EARTH_RADIUS_M = 6371008.8
M_PER_DEG_LAT = math.pi * EARTH_RADIUS_M / 180.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--box-km", type=float, required=True)
    ap.add_argument("--count", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--points", type=int, default=0)
    ap.add_argument("--points-out")
    ap.add_argument("--min-size-m", type=float, default=20.0)
    ap.add_argument("--max-size-m", type=float, default=500.0)
    args = ap.parse_args()
    if args.points and not args.points_out:
        ap.error("--points needs --points-out")

    rng = np.random.default_rng(args.seed)
    m_per_deg_lon = M_PER_DEG_LAT * math.cos(math.radians(CENTER_LAT))
    half_lat = args.box_km * 500.0 / M_PER_DEG_LAT
    half_lon = args.box_km * 500.0 / m_per_deg_lon
    lon0, lon1 = CENTER_LON - half_lon, CENTER_LON + half_lon
    lat0, lat1 = CENTER_LAT - half_lat, CENTER_LAT + half_lat

    n = args.count
    cx = rng.uniform(lon0, lon1, n)
    cy = rng.uniform(lat0, lat1, n)
    size = np.exp(rng.uniform(math.log(args.min_size_m), math.log(args.max_size_m), n))
    features = []
    for i in range(n):
        fid = f"f{i:07d}"
        r = float(size[i]) / 2.0
        if i % 2 == 0:
            features.append({
                "type": "Feature", "id": fid, "properties": {"radius": round(r, 3)},
                "geometry": {"type": "Point", "coordinates": [round(float(cx[i]), 7), round(float(cy[i]), 7)]},
            })
            continue
        k = int(rng.integers(4, 33))
        ang = np.sort(rng.uniform(0.0, 2.0 * math.pi, k))
        if (i // 2) % 2 == 0:
            rad = np.full(k, r)  # convex: vertices on a circle
        else:
            rad = r * rng.uniform(0.35, 1.0, k)  # star-shaped, usually concave
            rad[0] = r
        mlat = math.cos(math.radians(float(cy[i])))
        xs = cx[i] + rad * np.cos(ang) / (M_PER_DEG_LAT * mlat)
        ys = cy[i] + rad * np.sin(ang) / M_PER_DEG_LAT
        ring = [[round(float(x), 7), round(float(y), 7)] for x, y in zip(xs, ys)]
        ring.append(ring[0])
        features.append({"type": "Feature", "id": fid, "properties": {},
                         "geometry": {"type": "Polygon", "coordinates": [ring]}})
    with open(args.out, "w") as f:
        json.dump({"type": "FeatureCollection", "features": features}, f, separators=(",", ":"))

    if args.points:
        pts = np.empty((args.points, 2), dtype="<f8")
        pts[:, 0] = rng.uniform(lon0, lon1, args.points)
        pts[:, 1] = rng.uniform(lat0, lat1, args.points)
        pts.tofile(args.points_out)


if __name__ == "__main__":
    main()
