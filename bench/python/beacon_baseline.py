#!/usr/bin/env python3
"""Baseline for `perimeter bench beacons`: how fast does the PyPI package beacontools
decode BLE advertising data into beacon identities?

Benchmark tooling only: never imported or run by the product.

    python beacon_baseline.py --adverts ADVERTS.txt [--repeat N] [--json]

ADVERTS.txt: one advert per line, the AD structures (length, type, data ...) as hex,
e.g. `0201061aff4c000215<uuid:16><major:2><minor:2><tx:1>` (iBeacon). Blank lines are
skipped; any other line must be hex that bytes.fromhex() accepts (spaces between bytes
allowed) or the script stops.

Timing: hex is converted to bytes for every line before any timing. Each timed pass calls
beacontools.parse_packet(bytes) once per advert, in a plain Python loop, single thread,
time.perf_counter; --repeat passes (default 3), the best pass is reported. Identity counts
and checksums come from one separate, untimed pass (which also serves as warm-up).

What beacontools (checked against 2.1.0, the latest release) decodes, and the attributes
used here:
  iBeacon        Apple manufacturer data (0xFF, company 0x004C, 0x02 0x15): an
                 IBeaconAdvertisement (not "IBeaconFrame") with .uuid (str, 8-4-4-4-12,
                 already lowercase; lowercased again here), .major, .minor (int).
  Eddystone-UID  service data (0x16) for 0xFEAA, frame type 0x00: an EddystoneUIDFrame with
                 .namespace (20 lowercase hex chars) and .instance (12). Counted only, no
                 checksum. The two trailing RFU bytes are optional.
  AltBeacon      NOT SUPPORTED. beacontools has no AltBeacon frame class and parse_packet
                 recognises manufacturer data only for the company ids 0x004C (iBeacon),
                 0x015D (Estimote Nearable) and 0x0472 (Control-J); an AltBeacon advert
                 (`1bff` + company id, e.g. 0x0118 `1801`, + `beac` ...) decodes to None
                 (checked for 0x0118, 0x004C, 0x015D, 0x0000), except that with company id
                 0x0472 it is misread as a CJMonitorAdvertisement. Either way it has no
                 AltBeacon identity: identities.altbeacon is always 0, those lines are
                 counted under "none", and checksum.altbeacon is null (JSON) because this
                 tool cannot produce it.
  other          Eddystone-URL/TLM/EID, Estimote telemetry/Nearable, Control-J, Exposure
                 Notification frames decode to other classes; they carry no identity
                 the bench compares and are counted under "none" along with None.

beacontools quirks that matter for parity with another decoder: it returns the FIRST
recognised structure; for the AD types 0x01 (flags), 0x16 and 0xFF it ignores the AD
length byte and parses a fixed layout, so a flags structure whose length is not 2 throws
the rest of the advert out of step (-> None), and an over-long iBeacon structure still
decodes. parse_packet can also raise (seen: TypeError on malformed Control-J data, company
0x0472); such lines are counted under "none", reported as "raised", and the timed loop
swallows the exception the same way on every pass.

Import: `from beacontools import parse_packet` needs only construct and ahocorapy (+ future);
the Bluetooth scanning backend is imported lazily by BeaconScanner, so no pybluez / system
Bluetooth packages are needed. (Importing beacontools.parser would run the package
__init__ anyway, so there is nothing to gain from importing the submodule directly.)

Checksums (integers, mod 2**61), over the lines of the untimed pass:
  ibeacon    sum of (major * 65536 + minor) over IBeaconAdvertisement results. The UUID is
             not part of it.
  altbeacon  would be sum of (id2 * 65536 + id3); null, see above.

stdout with --json: one JSON object
  {"tool": "beacontools", "version": ..., "adverts": n, "seconds": best, "rate": n/best,
   "identities": {"ibeacon": a, "eddystone-uid": b, "altbeacon": 0, "none": d},
   "checksum": {"ibeacon": x, "altbeacon": null}, "repeat": N, "raised": k}
otherwise one readable line. Errors (unreadable file, bad hex, empty input): a message
naming the file (and line) on stderr, exit status 1.
"""
import argparse
import json
import sys
import time
from importlib import metadata

CHECKSUM_MOD = 2**61


def fail(msg: str) -> "NoReturn":  # noqa: F821
    print(f"beacon_baseline: {msg}", file=sys.stderr)
    sys.exit(1)


def load_adverts(path: str) -> list:
    """Every non-blank line of `path` as bytes (hex decoded here, outside any timing)."""
    try:
        with open(path, "rb") as f:
            raw_lines = f.read().splitlines()
    except OSError as e:
        fail(f"{path}: {e.strerror or e}")
    packets = []
    for lineno, raw in enumerate(raw_lines, start=1):
        text = raw.strip()
        if not text:
            continue
        shown = text[:60].decode("ascii", "backslashreplace") + ("..." if len(text) > 60 else "")
        try:
            packets.append(bytes.fromhex(text.decode("ascii")))
        except (UnicodeDecodeError, ValueError) as e:
            digits = b"".join(text.split())
            why = "odd number of hex digits" if len(digits) % 2 and digits.isalnum() else str(e)
            fail(f"{path}:{lineno}: bad hex ({why}): {shown!r}")
    if not packets:
        fail(f"{path}: no adverts (file has no non-blank lines)")
    return packets


def identities(parse_packet, packets: list) -> dict:
    """One untimed pass: counts by identity type, checksums, and how many calls raised."""
    from beacontools import EddystoneUIDFrame, IBeaconAdvertisement

    counts = {"ibeacon": 0, "eddystone-uid": 0, "altbeacon": 0, "none": 0}
    ibeacon_sum = 0
    raised = 0
    for p in packets:
        try:
            frame = parse_packet(p)
        except Exception:  # noqa: BLE001 - beacontools can raise on malformed data
            raised += 1
            frame = None
        if isinstance(frame, IBeaconAdvertisement):
            counts["ibeacon"] += 1
            # identity = (frame.uuid.lower(), frame.major, frame.minor); the checksum
            # specified for the bench covers major/minor only
            ibeacon_sum = (ibeacon_sum + frame.major * 65536 + frame.minor) % CHECKSUM_MOD
        elif isinstance(frame, EddystoneUIDFrame):
            counts["eddystone-uid"] += 1
        else:
            # None, or a frame without a compared identity. AltBeacon adverts land here:
            # beacontools has no AltBeacon decoder (see the module docstring).
            counts["none"] += 1
    return {
        "identities": counts,
        "checksum": {"ibeacon": ibeacon_sum, "altbeacon": None},
        "raised": raised,
    }


def timed_pass(parse_packet, packets: list) -> float:
    t0 = time.perf_counter()
    for p in packets:
        try:
            parse_packet(p)
        except Exception:  # noqa: BLE001 - same lines raise on every pass (see docstring)
            pass
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adverts", required=True, help="text file, one advert (AD structures, hex) per line")
    ap.add_argument("--repeat", type=int, default=3, help="timed passes; the best is reported (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a readable line")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    try:
        from beacontools import parse_packet
    except ImportError as e:
        fail(f"cannot import beacontools ({e}); pip install -r requirements.txt")
    try:
        version = metadata.version("beacontools")
    except metadata.PackageNotFoundError:
        version = None

    # Hex -> bytes for all lines happens here, before (and outside) any timing.
    packets = load_adverts(args.adverts)
    n = len(packets)

    result = identities(parse_packet, packets)
    best = min(timed_pass(parse_packet, packets) for _ in range(args.repeat))
    rate = n / best if best > 0 else None

    if args.json:
        out = {
            "tool": "beacontools",
            "version": version,
            "adverts": n,
            "seconds": best,
            "rate": round(rate, 1) if rate is not None else None,
            "identities": result["identities"],
            "checksum": result["checksum"],
            "repeat": args.repeat,
            "raised": result["raised"],
        }
        print(json.dumps(out))
    else:
        ids = result["identities"]
        rate_s = f"{rate:,.0f} adverts/s" if rate is not None else "rate n/a"
        raised = f", {result['raised']} raised" if result["raised"] else ""
        print(
            f"beacontools {version}: {n} adverts, best of {args.repeat}: {best:.4f} s, {rate_s}; "
            f"ibeacon {ids['ibeacon']}, eddystone-uid {ids['eddystone-uid']}, "
            f"altbeacon {ids['altbeacon']} (unsupported), none {ids['none']}{raised}; "
            f"ibeacon checksum {result['checksum']['ibeacon']}"
        )


if __name__ == "__main__":
    main()
