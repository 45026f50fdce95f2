"""How fast a manifest is read, and how much memory the read takes beyond what it returns.

    python -m benchmarks.manifest_scale [--rows 100000,1000000] [--formats csv,jsonl,parquet]
                                        [--cache bench-out] [--json FILE] [--scan | --urls]

Each case writes one table (path, label of 10 class names, split, an int, a float, a caption)
as CSV, JSONL or Parquet (cached under bench-out/manifests/), then reads it with
`shardpack.sources.tables.reader.read_manifest` in a fresh process so that the peak RSS is the
read's own.
`held` is the RSS the returned Manifest keeps (its rows: what the item list needs); `peak` is
the process's peak RSS over the same baseline (taken after reading a 10-row table, so that
imports and pyarrow's code pages are not counted);
`peak/held` is the figure issue 11 bounds by 2.

With --scan it measures the whole scan and plan instead (`shardpack.sources.scan`, then
`make_plan`, as `shardpack pack` does them): the table's paths then name the files of the
`million` workload (hard links of real photos, made under bench-out/workloads/ if missing), so
that every row's image is stat'ed like a real one; `held` is what the Dataset keeps after the
scan (freed memory handed back to the kernel first), `peak` the scan and plan's peak over the
same baseline (the process's peak reset there: VmHWM, through /proc/self/clear_refs).

With --scan or --urls it also gives the bytes a row of the items packed for the forked workers
(`packing/forkpool.py`), which the parent adds to that peak while the shards are written.

With --urls it scans and plans a URL list instead (two columns, `url` and `caption`, as LAION's
and CC12M's: an http(s) URL a row, which the scan takes no request for), so nothing on disk but
the table; it also prints the bytes a row (peak over rows) and the peak projected to 100M
rows. With --stream as well, the list is written as files of PART_ROWS rows in a folder and
packed with --no-shuffle, so that the scan streams it (sources/streamed.py): each file's rows
counted and its columns typed, no row held; the plan is ranges of rows.

With --pack it packs a whole streamed list instead (--no-shuffle, 2 workers, as files of
PART_ROWS rows of `path` and `caption`), each row a distinct tiny JPEG on this disk (one small
image with the row's number in a JPEG comment: ~0.4 kB; made under the cache once), and gives
the packing process's own peak (VmHWM, the forked workers' not counted) over its memory after a
first pack of 10 rows: what the scan, the plan, the results kept until the merge and the merge
itself hold. The JPEGs take a file each: 1M rows are 1M files (~4 GB of disk, a few minutes to
make once).
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import os
import subprocess
import sys

CLASSES = [f"class_{i}" for i in range(10)]
SPLITS = ["train"] * 8 + ["validation", "test"]

_CHILD = """
import json, resource, sys, time
fmt, path, warm = sys.argv[1:4]
from shardpack.sources.tables.reader import read_manifest

# A first read of a 10-row table pays the fixed costs (imports, the first touch of pyarrow's
# code pages: ~50 MB of RSS) before the baseline, so that they are not counted as the read's.
read_manifest(warm)

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

base = rss()
start = time.perf_counter()
manifest = read_manifest(path)
seconds = time.perf_counter() - start
held = rss() - base
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
print(json.dumps({"rows": len(manifest.rows), "bad": len(manifest.bad), "seconds": seconds,
                  "held": held, "peak": peak}))
"""


_SCAN_CHILD = """
import ctypes, gc, json, resource, sys, time
fmt, path, warm, root, column, streamed = sys.argv[1:7]
from shardpack.options import PackOptions
from shardpack.packing.cpuload import machine_cores
from shardpack.packing.fresh import default_name
from shardpack.packing.collector import no_gc
from shardpack.packing.plan import make_plan
from shardpack.sources import scan, source_root

options = PackOptions(root=root or None, path_column=column or None, shuffle=not streamed)
scan(warm, options)  # imports and first touches, as in _CHILD

def reset_peak():
    # the peak from here on: the imports' and the warm scan's transients are not the scan's
    # (Linux: 5 in clear_refs resets VmHWM)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

def peak_rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) * 1024

def rss():
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed memory back: held is what is kept
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

base = rss()
reset_peak()
with no_gc():  # as pack() scans and plans
    start = time.perf_counter()
    dataset = scan(path, options)
    scanned = time.perf_counter()
    if streamed:
        from shardpack.packing.rangeplan import make_range_plan
        plan = make_range_plan(dataset, "urls", options)
    else:
        plan = make_plan(dataset, default_name(dataset, source_root(path)), options,
                         machine_cores())
    planned = time.perf_counter()
del plan
held = rss() - base
peak = peak_rss() - base
# What the parent adds while the forked workers write: the items packed for them (measured
# after the peak: a split's items in chunks, as a shard's are)
from shardpack.packing.forkpool import _PackedItems
packed = 0 if streamed else sum(len(chunk) for items in dataset.splits.values()
                                for chunk in _PackedItems(items)._chunks)
print(json.dumps({"rows": dataset.num_items, "bad": len(dataset.skipped),
                  "seconds": planned - start, "scan_s": scanned - start,
                  "plan_s": planned - scanned, "held": held, "peak": peak, "packed": packed}))
"""


_PACK_CHILD = """
import json, resource, sys, time
path, warm, out = sys.argv[1:4]
from shardpack import PackOptions, pack

options = PackOptions(shuffle=False, workers=2)
pack(warm, out + "-warm", options)  # imports and first touches, as in _CHILD

def peak_rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) * 1024

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

base = rss()
with open("/proc/self/clear_refs", "w") as f:  # the peak from here on (as _SCAN_CHILD)
    f.write("5")
start = time.perf_counter()
result = pack(path, out, options)
seconds = time.perf_counter() - start
print(json.dumps({"rows": result.num_records + result.num_skipped, "seconds": seconds,
                  "held": rss() - base, "peak": peak_rss() - base, "total": peak_rss(),
                  "records": result.num_records}))
"""


def _image(i: int) -> str:
    return f"images/{i // 1000:04d}/{i:08d}.jpg"


def _million_image(i: int) -> str:
    """The i-th file of the `million` workload (workloads._make_links: 10,000 per class)."""
    return f"class_{i // 10_000:03d}/{i:07d}.jpg"


def _url_row(i: int) -> dict:
    """Row i of a URL list: a ~60-character URL over 1,000 hosts and a ~40-character caption."""
    return {
        "url": f"https://img{i % 1000}.example.com/photos/{i // 1000:06d}/{i:09d}.jpg",
        "caption": f"photo number {i} of a {CLASSES[i * 7 % 10]} outdoors",
    }


# The tiny JPEGs of --pack: folders of this many, each renamed into place when complete.
TINY_FOLDER = 10_000


def _tiny_path(images: str, i: int) -> str:
    return os.path.join(images, f"{i // TINY_FOLDER:05d}", f"{i:08d}.jpg")


def _tiny_images(cache: str, rows: int) -> str:
    """The folder of --pack's JPEGs, the first `rows` of them made if missing: one 16x16 JPEG
    with the file's number in a comment segment, so that no two are alike (no copies)."""
    import numpy as np
    from PIL import Image

    images = os.path.join(os.path.abspath(cache), "manifests", "tiny-jpegs")
    pixels = np.random.default_rng(0).integers(0, 256, (16, 16, 3), np.uint8)
    with io.BytesIO() as f:
        Image.fromarray(pixels).save(f, "JPEG", quality=75)
        jpeg = f.getvalue()
    for start in range(0, rows, TINY_FOLDER):
        folder = os.path.dirname(_tiny_path(images, start))
        if os.path.exists(folder):
            continue
        os.makedirs(folder + ".part", exist_ok=True)
        for i in range(start, start + TINY_FOLDER):
            text = b"row %d" % i
            data = jpeg[:2] + b"\xff\xfe" + (len(text) + 2).to_bytes(2, "big") + text + jpeg[2:]
            with open(os.path.join(folder + ".part", os.path.basename(_tiny_path(images, i))),
                      "wb") as f:  # fmt: skip
                f.write(data)
        os.replace(folder + ".part", folder)
    return images


def _tiny_row(i: int, images: str) -> dict:
    return {"path": _tiny_path(images, i), "caption": f"photo number {i}"}


def _row(i: int, image=_image) -> dict:
    return {
        "path": image(i),
        "label": CLASSES[i * 7 % 10],
        "split": SPLITS[i % 10],
        "objects": i % 17,
        "score": (i % 1000) / 7.0,
        "caption": f"photo number {i} of a {CLASSES[i * 7 % 10]}",
    }


def write_table(path: str, fmt: str, rows: int, image=_image, row=None) -> None:
    """Write the table of `rows` rows in `fmt`, under a temporary name renamed when complete;
    `image(i)` names row i's image file; `row(i)`, when given, makes the whole row instead."""
    row = row or functools.partial(_row, image=image)
    tmp = f"{path}.part"
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        with pq.ParquetWriter(tmp, pa.Table.from_pylist([row(0)]).schema) as writer:
            for lo in range(0, rows, 100_000):
                chunk = [row(i) for i in range(lo, min(rows, lo + 100_000))]
                writer.write_table(pa.Table.from_pylist(chunk))
    else:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            if fmt == "csv":
                writer = csv.DictWriter(f, fieldnames=list(row(0)))
                writer.writeheader()
                writer.writerows(row(i) for i in range(rows))
            else:
                f.writelines(json.dumps(row(i)) + "\n" for i in range(rows))
    os.replace(tmp, path)


# The rows of each file a streamed list is written as (--stream): LAION's and DataComp's
# parts hold about this many, so that a longer list is more files, as theirs are.
PART_ROWS = 100_000


def measure(
    fmt: str, rows: int, cache: str, whole_scan: bool = False, urls: bool = False,
    stream: bool = False, whole_pack: bool = False,
) -> dict:  # fmt: skip
    """Read (or, with `whole_scan`, scan and plan; with `urls`, scan and plan a URL list; with
    `stream` too, as a folder of files of PART_ROWS rows, streamed; with `whole_pack`, pack a
    streamed list of tiny JPEGs) one cached table in a fresh process; rows/s and memory in
    MB."""
    folder = os.path.join(cache, "manifests")
    os.makedirs(folder, exist_ok=True)
    prefix, image, argv, row, root = "table", _image, [_CHILD], None, []
    if whole_pack:
        return _measure_pack(fmt, rows, cache)
    if urls:
        whole_scan = True
        prefix, argv, row, root = "urls", [_SCAN_CHILD], _url_row, ["", "url", ""]
    elif whole_scan:
        from benchmarks import workloads

        million = workloads.ensure("million", cache).path
        prefix, image, argv, root = "scan", _million_image, [_SCAN_CHILD], [million, "", ""]
    path = os.path.join(folder, f"{prefix}-{rows}.{fmt}")
    warm = os.path.join(folder, f"{prefix}-10.{fmt}")
    if stream:
        path, warm = (_parts(folder, fmt, n, row) for n in (rows, 10))
        root[-1] = "stream"
    for name, n in ((path, rows), (warm, 10)):
        if not os.path.exists(name):
            write_table(name, fmt, n, image, row)
    argv += [fmt, path, warm, *root]
    run = subprocess.run([sys.executable, "-c", *argv], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{path}: the measuring process failed:\n{run.stderr[-2000:]}")
    got = json.loads(run.stdout)
    mb = 2**20
    return {
        "format": fmt,
        "what": "scan + plan" if whole_scan else "read",
        "rows": got["rows"],
        "file_mb": round(_bytes(path) / mb, 1),
        "rows_per_s": round(got["rows"] / got["seconds"]),
        "seconds": round(got["seconds"], 2),
        **({"scan_s": round(got["scan_s"], 2), "plan_s": round(got["plan_s"], 2)}
           if whole_scan else {}),
        "held_mb": round(got["held"] / mb, 1),
        "peak_mb": round(got["peak"] / mb, 1),
        "peak_over_held": round(got["peak"] / got["held"], 2),
        "peak_bytes_per_row": round(got["peak"] / got["rows"]),
        **({"packed_bytes_per_row": round(got["packed"] / got["rows"])} if whole_scan else {}),
    }  # fmt: skip


def _measure_pack(fmt: str, rows: int, cache: str) -> dict:
    """measure()'s whole pack of a streamed list of `rows` tiny JPEGs, into a temporary OUT."""
    import shutil
    import tempfile

    folder = os.path.join(cache, "manifests")
    row = functools.partial(_tiny_row, images=_tiny_images(cache, rows))
    path, warm = (_parts(folder, fmt, n, row, "jpegs") for n in (rows, 10))
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        out = os.path.join(scratch, "out")
        run = subprocess.run([sys.executable, "-c", _PACK_CHILD, path, warm, out],
                             capture_output=True, text=True)  # fmt: skip
        shutil.rmtree(scratch, ignore_errors=True)  # the shards: ~0.5 kB a row
    if run.returncode != 0:
        raise SystemExit(f"{path}: the packing process failed:\n{run.stderr[-2000:]}")
    got = json.loads(run.stdout)
    mb = 2**20
    return {
        "format": fmt, "what": "pack", "rows": got["rows"], "records": got["records"],
        "file_mb": round(_bytes(path) / mb, 1), "rows_per_s": round(got["rows"] / got["seconds"]),
        "seconds": round(got["seconds"], 2), "held_mb": round(got["held"] / mb, 1),
        "peak_mb": round(got["peak"] / mb, 1), "peak_over_held": None,
        "peak_bytes_per_row": round(got["peak"] / got["rows"]),
        "process_peak_mb": round(got["total"] / mb, 1),
    }  # fmt: skip


def _bytes(path: str) -> int:
    """A table's bytes: a file's, or a folder of parts' summed."""
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))


def _parts(folder: str, fmt: str, rows: int, row, prefix: str = "urls") -> str:
    """A folder of files of PART_ROWS rows (the last fewer), `rows` in all (made if missing),
    for --stream and --pack."""
    parts = os.path.join(folder, f"{prefix}-{rows}-{fmt}-files")
    if not os.path.exists(parts):
        os.makedirs(parts + ".part")
        for i, lo in enumerate(range(0, rows, PART_ROWS)):
            write_table(os.path.join(parts + ".part", f"part-{i:05d}.{fmt}"), fmt,
                        min(PART_ROWS, rows - lo), row=lambda j, lo=lo: row(lo + j))  # fmt: skip
        os.replace(parts + ".part", parts)
    return parts


def _slope(results: list[dict]) -> str:
    """The peak's growth a row between the smallest and the largest run of one format, and the
    peak of 100M rows it projects (a line: the fixed part and the slope)."""
    if len(results) < 2:
        return f"{results[0]['format']}: one size only, no slope" if results else ""
    low, high = min(results, key=lambda r: r["rows"]), max(results, key=lambda r: r["rows"])
    slope = (high["peak_mb"] - low["peak_mb"]) * 2**20 / (high["rows"] - low["rows"])
    fixed = low["peak_mb"] - slope * low["rows"] / 2**20
    projected = (fixed + slope * 100_000_000 / 2**20) / 1024
    packed = high.get("packed_bytes_per_row")
    workers = f"; and {packed} a row packed for the workers while they write" if packed else ""
    return (
        f"{low['format']}: {slope:,.0f} bytes a row ({low['rows']:,} to {high['rows']:,} "
        f"rows); 100,000,000 rows: ~{projected:,.1f} GB at peak{workers}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000")
    parser.add_argument("--formats", default="csv,jsonl,parquet")
    parser.add_argument("--cache", default="bench-out")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--scan", action="store_true", help="the whole scan + plan, not the read")
    parser.add_argument("--urls", action="store_true", help="scan + plan a URL list (url, caption)")
    parser.add_argument("--stream", action="store_true",
                        help="with --urls: the list as a folder of files, streamed")  # fmt: skip
    parser.add_argument("--pack", action="store_true",
                        help="pack a streamed list of tiny JPEGs: the parent's peak")  # fmt: skip
    args = parser.parse_args(argv)
    results = []
    print("| format | rows | file MB | rows/s | s | held MB | peak MB | peak/held | peak B/row |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rows in (int(n) for n in args.rows.split(",")):
        for fmt in args.formats.split(","):
            r = measure(fmt, rows, args.cache, args.scan, args.urls, args.stream, args.pack)
            results.append(r)
            print(f"| {fmt} | {r['rows']:,} | {r['file_mb']} | {r['rows_per_s']:,} | "
                  f"{r['seconds']} | {r['held_mb']} | {r['peak_mb']} | {r['peak_over_held']} | "
                  f"{r['peak_bytes_per_row']:,} |", flush=True)  # fmt: skip
            if args.pack:
                print(f"|  | {r['records']:,} packed; the process's own peak "
                      f"{r['process_peak_mb']} MB |", flush=True)  # fmt: skip
    for fmt in args.formats.split(","):
        print(_slope([r for r in results if r["format"] == fmt]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
