"""What knowing the data costs: exact-duplicate detection on the passthrough pack, and the
--dedup exact|near pre-pass on --encode keep and jpeg, on the photos workload.

    python -m benchmarks.dedup [--workload photos] [--repeat 3] [--json FILE]

Exact detection: one core's loop of content_key and ShardFacts.add (the worker's content key,
and all it notes of each record) over each photo's bytes just read (medians per image), and
duplicates.found_in_shards (the parent's grouping) timed inside a one-worker, in-process
passthrough pack; their share of that pack's CPU time is the row (target TARGET_EXACT).

--dedup: 2 workers pack with --dedup none, exact and near, alternated within each repeat, and
the pre-pass (duplicates.dedup: all --dedup adds, before the plan) is timed inside each pack;
its median per image is the row, with its share of the --dedup none pack's median wall; beside
them, one core's full decode of the same photos (what the re-encoding pack pays per image).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections import defaultdict

from benchmarks.workloads import ensure, image_files
from shardpack import PackOptions, images, pack
from shardpack.packing import duplicates, facts

# issue 27: exact detection costs at most 2% of the passthrough pack.
TARGET_EXACT = 0.02
WORKERS = 2


def _timed(spent: dict, module: object, name: str) -> None:
    """Wrap module.name so that every call's seconds add to spent[name]."""
    function = getattr(module, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - start

    setattr(module, name, timed)


def _pack(src: str, out: str, **options) -> float:
    """Wall seconds of one pack into a fresh OUT."""
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    pack(src, out, PackOptions(shuffle=False, **options))
    return time.perf_counter() - start


def exact_cost(src: str, out: str, paths: list[str], repeat: int) -> dict:
    """The share of a one-worker, in-process passthrough pack's CPU spent keying contents and
    grouping the keys, and with the other facts (one core's loop of content_key and
    ShardFacts.add over the same bytes, each image's median: timed inside the pack, they would
    count the waits for the interpreter's lock while its writer thread holds it)."""
    features = {"width": 1, "height": 1, "format": "jpeg", "channels": 3}
    rows = []
    for _ in range(repeat):
        notes, adds, keys = facts.ShardFacts([None] * len(paths)), [], []
        for position, path in enumerate(paths):
            with open(path, "rb") as f:
                data = f.read()  # in the cache as in the worker, which has just read it
            start = time.perf_counter()
            facts.content_key(data)
            keyed = time.perf_counter()
            notes.add(position, data, features)
            adds.append(time.perf_counter() - keyed)
            keys.append(keyed - start)
        # medians: a call of a few µs that the scheduler preempts would count milliseconds
        key, add = statistics.median(keys) * len(paths), statistics.median(adds) * len(paths)
        spent: dict[str, float] = defaultdict(float)
        saved = duplicates.found_in_shards
        _timed(spent, duplicates, "found_in_shards")
        cpu = time.process_time()
        try:
            wall = _pack(src, out, workers=1)
        finally:
            duplicates.found_in_shards = saved
        rows.append((wall, time.process_time() - cpu, key, add, spent["found_in_shards"]))
    wall, cpu, key, add, group = (statistics.median(r[i] for r in rows) for i in range(5))
    count = len(paths)
    return {
        "pack_s": wall,
        "pack_cpu_us_per_image": cpu / count * 1e6,
        "key_us_per_image": key / count * 1e6,
        "facts_us_per_image": add / count * 1e6,
        "parent_us_per_image": group / count * 1e6,
        "share": (key + group) / cpu,
        "facts_share": (add + group) / cpu,
    }


def dedup_cost(src: str, out: str, count: int, encode: str, repeat: int) -> dict:
    """Median pack walls with each --dedup, and the pre-pass's seconds within them."""
    walls, prepass = defaultdict(list), defaultdict(list)
    for _ in range(repeat):
        for mode in ("none", "exact", "near"):
            spent: dict[str, float] = defaultdict(float)
            saved = duplicates.dedup
            _timed(spent, duplicates, "dedup")
            try:
                walls[mode].append(_pack(src, out, workers=WORKERS, encode=encode,
                                         dedup=mode))  # fmt: skip
            finally:
                duplicates.dedup = saved
            prepass[mode].append(spent["dedup"])
    row = {"encode": encode, "images": count}
    for mode in ("none", "exact", "near"):
        per_image = statistics.median(prepass[mode]) / count * 1e6
        row[mode] = {"pack_s": statistics.median(walls[mode]), "prepass_us_per_image": per_image}
    return row


def full_decode_us(paths: list[str]) -> float:
    """One core's full decode of each photo, µs per image (what re-encoding pays to start)."""
    blobs = [open(p, "rb").read() for p in paths]  # noqa: SIM115
    start = time.perf_counter()
    for data in blobs:
        images.decode(data)
    return (time.perf_counter() - start) / len(blobs) * 1e6


def report(exact: dict, rows: list[dict], decode_us: float, count: int, argv: list[str]) -> str:
    said = [f"`python -m benchmarks.dedup {' '.join(argv)}`, {count:,} photos, "
            f"{os.cpu_count()} cores", "",
            f"exact detection, passthrough, 1 worker: pack {exact['pack_s']:.2f} s, "
            f"{exact['pack_cpu_us_per_image']:.0f} µs of CPU per image; content key "
            f"{exact['key_us_per_image']:.1f} µs/image in the worker, grouping "
            f"{exact['parent_us_per_image']:.1f} µs/image in the parent: "
            f"{exact['share']:.1%} of the pack (target {TARGET_EXACT:.0%}); with the other facts "
            f"(statistics, {exact['facts_us_per_image']:.1f} µs/image with the key) "
            f"{exact['facts_share']:.1%}", "",
            "| --encode | pack s (--dedup none) | --dedup exact: pre-pass µs/image | "
            "--dedup near: pre-pass µs/image |",
            "|---|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        wall = r["none"]["pack_s"]
        ex, near = (r[m]["prepass_us_per_image"] for m in ("exact", "near"))
        said.append(f"| {r['encode']} | {wall:.2f} | {ex:.0f} (+{ex * count / 1e6 / wall:.0%}) "
                    f"| {near:.0f} (+{near * count / 1e6 / wall:.0%}) |")  # fmt: skip
    said += ["", f"one core's full decode of the same photos: {decode_us:.0f} µs/image"]
    return "\n".join(said)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dedup", description=__doc__)
    parser.add_argument("--workload", default="photos")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--cache", default=os.path.join(os.path.dirname(__file__), "..", "bench-out")
    )
    args = parser.parse_args(argv)
    cache = os.path.abspath(args.cache)
    workload = ensure(args.workload, cache)
    paths = image_files(workload.path)
    out = os.path.join(cache, "runs", "dedup")
    exact = exact_cost(workload.path, out, paths, args.repeat)
    rows = [dedup_cost(workload.path, out, len(paths), e, args.repeat) for e in ("keep", "jpeg")]
    decode_us = full_decode_us(paths[:500])
    shutil.rmtree(out, ignore_errors=True)
    print(report(exact, rows, decode_us, len(paths), argv))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"exact": exact, "dedup": rows, "full_decode_us": decode_us}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
