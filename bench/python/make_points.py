#!/usr/bin/env python3
"""Uniform random query points as raw little-endian float64 (lon, lat) pairs (test tool).

    python make_points.py --count 100000 --seed 1 --out P.f64   # whole globe (default box)
    python make_points.py --lon -10 10 --lat 40 50 --count 1000 --seed 1 --out P.f64

Deterministic: numpy default_rng(seed); all longitudes are drawn first (uniform in
[lon_min, lon_max)), then all latitudes (uniform in [lat_min, lat_max)).
"""
import argparse

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lon", type=float, nargs=2, default=[-180.0, 180.0], metavar=("MIN", "MAX"))
    ap.add_argument("--lat", type=float, nargs=2, default=[-90.0, 90.0], metavar=("MIN", "MAX"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    pts = np.empty((args.count, 2), dtype="<f8")
    pts[:, 0] = rng.uniform(args.lon[0], args.lon[1], args.count)
    pts[:, 1] = rng.uniform(args.lat[0], args.lat[1], args.count)
    pts.tofile(args.out)


if __name__ == "__main__":
    main()
