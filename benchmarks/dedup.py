"""What knowing the data costs: exact-duplicate detection on the passthrough pack, and the
--dedup exact|near pre-pass on --encode keep and jpeg, on the photos workload.

    python -m benchmarks.dedup [--workload photos] [--repeat 3] [--json FILE]

Exact detection: one core's loop of content_key with content_digest, and ShardFacts.add (the
worker's content key and digest, and all it notes of each record) over each photo's bytes just
read (medians per image), and the parent's part (factspill.FactSpill.add, which spills each
landed shard's content keys, and its copy_sets with duplicates.found_in_shards, which group
them) timed inside a one-worker, in-process passthrough pack; their share of that pack's CPU
time is the row (target TARGET_EXACT).

--dedup: 2 workers pack with --dedup none, exact and near, alternated within each repeat, and
the pre-pass (duplicates.dedup: all --dedup adds, before the plan) is timed inside each pack;
its median per image is the row, with its share of the --dedup none pack's median wall; beside
them, one core's full decode of the same photos (what the re-encoding pack pays per image).

Copies (issue 35): `--copies N` small JPEGs that are each one of ten images against N distinct
ones, each packed by a whole `shardpack pack --encode keep` process at the default worker count,
alternated (A B A B), with --dedup none and exact; the row is each one's median CPU time (user +
system, the workers included: the machine is shared) and wall, their ratios (target
TARGET_COPIES) and the paired CPU difference per image (what copies cost). `--against DIR`
pairs every pack with the same pack by the shardpack checked out at DIR (before/after);
`--only copies` runs this row alone.

Stamps (issue 35 item 2): one core's loops over 2,000 of the distinct files, a stat before
each read (as the workers took stamps before) against the read's own fstat, alternated; µs of
CPU per image (`--only stamps`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict

import cv2
import numpy as np

from benchmarks.workloads import ensure, image_files
from shardpack import PackOptions, images, pack
from shardpack.packing import duplicates, facts, stamps
from shardpack.packing.factspill import FactSpill
from shardpack.sources import scan, source_root
from shardpack.sources.source import read_stamped_image

# issue 27: exact detection costs at most 2% of the passthrough pack.
TARGET_EXACT = 0.02
WORKERS = 2
# issue 35: a pack whose files are copies of ten images costs at most 1.2x the distinct one.
TARGET_COPIES = 1.2
COPIES = 30_000
ORIGINALS = 10
STAMPED_FILES, STAMP_LOOPS = 2000, 40  # the stamps row: the files of a loop, and its loops
DEDUP_MODES = ("none", "exact")  # the copies row's: found while packing, dropped before the plan


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
    grouping the keys, and with the other facts (one core's loop of content_key, content_digest
    and ShardFacts.add over the same bytes, each image's median: timed inside the pack, they would
    count the waits for the interpreter's lock while its writer thread holds it)."""
    features = {"width": 1, "height": 1, "format": "jpeg", "channels": 3}
    rows = []
    for _ in range(repeat):
        notes, adds, keys = facts.ShardFacts(len(paths)), [], []
        for position, path in enumerate(paths):
            with open(path, "rb") as f:
                data = f.read()  # in the cache as in the worker, which has just read it
            start = time.perf_counter()
            facts.content_key(data)
            facts.content_digest(data)
            keyed = time.perf_counter()
            notes.add(position, data, features, 1)  # the orientation probe read
            adds.append(time.perf_counter() - keyed)
            keys.append(keyed - start)
        # medians: a call of a few µs that the scheduler preempts would count milliseconds
        key, add = statistics.median(keys) * len(paths), statistics.median(adds) * len(paths)
        spent: dict[str, float] = defaultdict(float)
        parts = ((duplicates, "found_in_shards"), (FactSpill, "add"), (FactSpill, "copy_sets"))
        saved = [getattr(owner, name) for owner, name in parts]
        for owner, name in parts:
            _timed(spent, owner, name)
        cpu = time.process_time()
        try:
            wall = _pack(src, out, workers=1)
        finally:
            for (owner, name), function in zip(parts, saved, strict=True):
                setattr(owner, name, function)
        rows.append((wall, time.process_time() - cpu, key, add, sum(spent.values())))
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


def stamps_cost(src: str, count: int, loops: int) -> dict:
    """One core: a worker's stamp as a stat before each read (stamps.take_stamps, as workers
    took them before issue 35) against the read's own fstat (read_stamped_image), alternated
    loops over the first `count` files of `src`; µs of CPU per image."""
    dataset = scan(source_root(src), PackOptions(), None)
    items = [item for split in sorted(dataset.splits) for item in dataset.splits[split]][:count]
    root, source = dataset.root, dataset.source
    limit = images.max_file_bytes(PackOptions().max_pixels)
    stat_first, own = [], []
    for _ in range(loops):
        start = time.process_time()
        stamps.take_stamps(source, root, items)
        for item in items:
            read_stamped_image(item, root, limit)
        stat_first.append(time.process_time() - start)
        start = time.process_time()
        for item in items:
            read_stamped_image(item, root, limit)
        own.append(time.process_time() - start)
    per_image = 1e6 / len(items)
    return {
        "images": len(items),
        "loops": loops,
        "stat_then_read_us": statistics.median(stat_first) * per_image,
        "read_stamped_us": statistics.median(own) * per_image,
        "saved_us_paired_median": statistics.median(
            a - b for a, b in zip(stat_first, own, strict=True)) * per_image,
        "saved_us_min": (min(stat_first) - min(own)) * per_image,
    }  # fmt: skip


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


def _small_jpeg(seed: int) -> bytes:
    """A 32x32 JPEG of noise and a block (CIFAR's size, ~1.5 kB): distinct for each seed."""
    rng = np.random.default_rng((seed, 35))
    pixels = rng.integers(0, 256, (32, 32, 3), np.uint8)
    pixels[: rng.integers(4, 28), : rng.integers(4, 28)] = rng.integers(0, 256, 3)
    return cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()


def copies_trees(cache: str, count: int) -> tuple[str, str]:
    """Two class-folder trees of `count` files: each file one of ORIGINALS images (written as
    files of their own, not links), and each file distinct; made once, then cached."""
    trees = []
    for kind in ("copies", "distinct"):
        root = os.path.join(cache, "workloads", f"{kind}-{count}")
        trees.append(root)
        if os.path.exists(os.path.join(root, ".done")):
            continue
        shutil.rmtree(root, ignore_errors=True)
        for i in range(count):
            folder = os.path.join(root, f"class_{i % 10}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"{i:06d}.jpg"), "wb") as f:
                f.write(_small_jpeg(i % ORIGINALS if kind == "copies" else i))
        with open(os.path.join(root, ".done"), "w"):
            pass
    return trees[0], trees[1]


def _pack_cpu(src: str, out: str, code: str | None, dedup: str) -> tuple[float, float]:
    """CPU seconds (user + system) and wall seconds of one whole `shardpack pack --encode keep`
    process and its workers at the default worker count, run with the shardpack at `code`
    (None: this one)."""
    code = code or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": code}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # else each run compiles the package anew
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # run in `code`: `python -m` puts the working folder first on the path
    subprocess.run([sys.executable, "-m", "shardpack", "pack", src, out, "--encode", "keep",
                    "--dedup", dedup, "--no-progress"], env=env, cwd=code, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def copies_cost(cache: str, count: int, repeat: int, against: str | None) -> dict:
    """Median CPU and wall seconds of packing the copies tree and the distinct one, alternated
    (A B A B), with --dedup none and exact, with this shardpack and (`against`) the one at that
    folder; and the paired differences per image."""
    copies, distinct = copies_trees(cache, count)
    out = os.path.join(cache, "runs", "copies")
    codes = {"this": None, **({"against": os.path.abspath(against)} if against else {})}
    runs: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for _ in range(repeat):
        for name, code in codes.items():
            for dedup in DEDUP_MODES:
                for kind, src in (("copies", copies), ("distinct", distinct)):
                    runs[name, dedup, kind].append(_pack_cpu(src, out, code, dedup))
    shutil.rmtree(out, ignore_errors=True)
    row: dict = {"images": count, "repeat": repeat}
    for name in codes:
        for dedup in DEDUP_MODES:
            c, d = runs[name, dedup, "copies"], runs[name, dedup, "distinct"]
            cpu = [statistics.median(r[0] for r in runs_) for runs_ in (c, d)]
            wall = [statistics.median(r[1] for r in runs_) for runs_ in (c, d)]
            paired = statistics.median(a[0] - b[0] for a, b in zip(c, d, strict=True))
            row[f"{name} {dedup}"] = {
                "copies_cpu_s": cpu[0], "distinct_cpu_s": cpu[1], "cpu_ratio": cpu[0] / cpu[1],
                "copies_wall_s": wall[0], "distinct_wall_s": wall[1],
                "wall_ratio": wall[0] / wall[1], "paired_cpu_us_per_image": paired / count * 1e6,
                "runs": {"copies": c, "distinct": d},
            }  # fmt: skip
    return row


def copies_report(row: dict) -> list[str]:
    said = [f"copies of {ORIGINALS} images against distinct files, {row['images']:,} small "
            "JPEGs each, `pack --encode keep` whole processes at the default worker count, "
            f"medians of {row['repeat']} A B runs (CPU: user + system, workers included):", "",
            "| shardpack | --dedup | copies CPU s | distinct CPU s | CPU copies / distinct | "
            "wall copies / distinct | copies cost, µs/image (paired CPU) |",
            "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for key, r in row.items():
        if isinstance(r, dict):
            name, dedup = key.split()
            said.append(f"| {name} | {dedup} | {r['copies_cpu_s']:.2f} | "
                        f"{r['distinct_cpu_s']:.2f} | {r['cpu_ratio']:.2f}x (target "
                        f"{TARGET_COPIES}x) | {r['wall_ratio']:.2f}x | "
                        f"{r['paired_cpu_us_per_image']:+.1f} |")  # fmt: skip
    return said


def report(exact: dict, rows: list[dict], decode_us: float | None, count: int,
           argv: list[str]) -> str:  # fmt: skip
    said = [f"`python -m benchmarks.dedup {' '.join(argv)}`, {count:,} photos, "
            f"{os.cpu_count()} cores", "",
            f"exact detection, passthrough, 1 worker: pack {exact['pack_s']:.2f} s, "
            f"{exact['pack_cpu_us_per_image']:.0f} µs of CPU per image; content key and "
            f"digest {exact['key_us_per_image']:.1f} µs/image in the worker, grouping "
            f"{exact['parent_us_per_image']:.1f} µs/image in the parent: "
            f"{exact['share']:.1%} of the pack (target {TARGET_EXACT:.0%}); with the other facts "
            f"(statistics, {exact['facts_us_per_image']:.1f} µs/image with the key) "
            f"{exact['facts_share']:.1%}"]  # fmt: skip
    if rows:
        said += ["", "| --encode | pack s (--dedup none) | --dedup exact: pre-pass µs/image | "
                 "--dedup near: pre-pass µs/image |", "|---|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        wall = r["none"]["pack_s"]
        ex, near = (r[m]["prepass_us_per_image"] for m in ("exact", "near"))
        said.append(f"| {r['encode']} | {wall:.2f} | {ex:.0f} (+{ex * count / 1e6 / wall:.0%}) "
                    f"| {near:.0f} (+{near * count / 1e6 / wall:.0%}) |")  # fmt: skip
    if decode_us is not None:
        said += ["", f"one core's full decode of the same photos: {decode_us:.0f} µs/image"]
    return "\n".join(said)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dedup", description=__doc__)
    parser.add_argument("--workload", default="photos")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--copies", type=int, default=COPIES, help="files in each copies tree")
    parser.add_argument("--against", help="another shardpack checkout to pair the copies row with")
    parser.add_argument("--only", choices=("copies", "exact", "stamps"),
                        help="run this row alone")  # fmt: skip
    parser.add_argument(
        "--cache", default=os.path.join(os.path.dirname(__file__), "..", "bench-out")
    )
    args = parser.parse_args(argv)
    cache = os.path.abspath(args.cache)
    found: dict = {}
    said = []
    if args.only in (None, "exact"):
        workload = ensure(args.workload, cache)
        paths = image_files(workload.path)
        out = os.path.join(cache, "runs", "dedup")
        found["exact"] = exact_cost(workload.path, out, paths, args.repeat)
        if args.only is None:
            found["dedup"] = [dedup_cost(workload.path, out, len(paths), e, args.repeat)
                              for e in ("keep", "jpeg")]  # fmt: skip
            found["full_decode_us"] = full_decode_us(paths[:500])
        shutil.rmtree(out, ignore_errors=True)
        said.append(report(found["exact"], found.get("dedup", []), found.get("full_decode_us"),
                           len(paths), argv))  # fmt: skip
    if args.only in (None, "stamps"):
        distinct = copies_trees(cache, args.copies)[1]
        found["stamps"] = row = stamps_cost(distinct, STAMPED_FILES, STAMP_LOOPS)
        said.append(f"stamps, one core, {row['images']:,} small files, {row['loops']} "
                    f"alternated loops: stat then read {row['stat_then_read_us']:.1f} µs/image, "
                    f"the read's own fstat {row['read_stamped_us']:.1f}; saved "
                    f"{row['saved_us_paired_median']:.1f} µs (paired median), "
                    f"{row['saved_us_min']:.1f} (minimums)")  # fmt: skip
    if args.only in (None, "copies"):
        found["copies"] = copies_cost(cache, args.copies, args.repeat, args.against)
        said.append("\n".join(copies_report(found["copies"])))
    print("\n\n".join(said))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(found, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
