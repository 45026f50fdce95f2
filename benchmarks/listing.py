"""The listing-scale run: scan and plan of a very large class-folder tree, in a fresh process;
and (--pack) whole packs of a 200,000-file tree, their time and the packing process's memory.

    python -m benchmarks.listing SRC [--encode keep] [--cprofile]
    python -m benchmarks.listing --pack [--files 200000] [--repeat 3] [--against DIR]

Prints one JSON line: files, scan_s, plan_s, files_per_s (scan + plan), cpu_s (the process's
CPU seconds over scan + plan: on a shared, loaded machine the wall time is not all ours) and the
process's peak RSS in MB (the kernel's ru_maxrss: imports included, as a user's pack run would
pay them).
`make bench-long` runs it on the `million` workload (1,000,000 hard links).

--pack (issue 35, in `make bench`): two class-folder trees of `--files` small JPEGs (files of
their own, made once by benchmarks.dedup.copies_trees): each file one of ten images, and each
distinct. Each is packed by a whole `shardpack pack --workers 2` process, alternated (A B A B),
which reports at its exit its own peak RSS (ru_maxrss of RUSAGE_SELF: the packing process alone)
and its workers' (RUSAGE_CHILDREN: the largest worker), with its and its workers' CPU seconds;
the row is the medians, against TARGET_PEAK_MB. `--against DIR` pairs every pack with the same
pack by the shardpack checked out at DIR (before/after).
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

# issue 35: the packing process of a 200,000-file pack peaks at most this (107 MB two rounds
# before it; 188-201 MB when it was filed).
TARGET_PEAK_MB = 120
PACK_FILES = 200_000
PACK_WORKERS = 2
# Run in the measured process: the CLI as `python -m shardpack` runs it, then its own and its
# reaped workers' peak RSS and CPU, as one JSON line on stderr (whichever shardpack the path gives).
_WHOLE = """
import atexit, json, resource, runpy, sys
def said():
    own, workers = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    print(json.dumps({"parent_peak_mb": own.ru_maxrss / 1024, "workers_peak_mb":
                      workers.ru_maxrss / 1024, "parent_cpu_s": own.ru_utime + own.ru_stime,
                      "workers_cpu_s": workers.ru_utime + workers.ru_stime}), file=sys.stderr)
atexit.register(said)
sys.argv = ["shardpack", *sys.argv[1:]]
runpy.run_module("shardpack", run_name="__main__")
"""


def measure(src: str, encode: str) -> dict:
    """Scan `src` and plan it as `shardpack pack` would, timing each step."""
    from shardpack.options import PackOptions
    from shardpack.packing.collector import no_gc
    from shardpack.packing.cpuload import machine_cores
    from shardpack.packing.fresh import default_name
    from shardpack.packing.plan import make_plan
    from shardpack.sources import scan, source_root

    options = PackOptions(encode=encode)
    with no_gc():  # as pack() scans and plans
        cpu = time.process_time()
        start = time.perf_counter()
        dataset = scan(src, options)
        scanned = time.perf_counter()
        plan = make_plan(dataset, default_name(dataset, source_root(src)), options, machine_cores())
        planned = time.perf_counter()
        cpu = time.process_time() - cpu
    files = sum(len(items) for items in dataset.splits.values())
    return {
        "files": files,
        "shards": len(plan.shards),
        "scan_s": round(scanned - start, 3),
        "plan_s": round(planned - scanned, 3),
        "files_per_s": round(files / (planned - start)),
        "cpu_s": round(cpu, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _whole_pack(src: str, out: str, code: str | None) -> dict:
    """One whole `shardpack pack` process (the shardpack at `code`; None: this one): its wall
    seconds and what it said of its memory and CPU."""
    code = code or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src, out = os.path.abspath(src), os.path.abspath(out)  # the process runs in `code`
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    # run in `code`: `python -c` puts the working folder first on the path
    done = subprocess.run([sys.executable, "-c", _WHOLE, "pack", src, out, "--workers",
                           str(PACK_WORKERS), "--no-progress"], env={**os.environ,
                          "PYTHONPATH": code}, cwd=code, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)  # fmt: skip
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"pack {src} by {code} failed: {done.stderr.strip()[-2000:]}")
    return {"wall_s": wall, **json.loads(done.stderr.strip().splitlines()[-1])}


def pack_row(cache: str, files: int, repeat: int, against: str | None) -> dict:
    """Medians of whole packs of the copies tree and the distinct one, alternated, by this
    shardpack and (`against`) the one at that folder."""
    from benchmarks.dedup import copies_trees

    trees = dict(zip(("copies", "distinct"), copies_trees(cache, files), strict=True))
    out = os.path.join(cache, "runs", "listing")
    codes = {"this": None, **({"against": os.path.abspath(against)} if against else {})}
    runs: dict[tuple[str, str], list[dict]] = {(n, k): [] for n in codes for k in trees}
    for _ in range(repeat):
        for name, code in codes.items():
            for kind, src in trees.items():
                runs[name, kind].append(_whole_pack(src, out, code))
    shutil.rmtree(out, ignore_errors=True)
    row: dict = {"files": files, "repeat": repeat, "load": os.getloadavg()}
    for (name, kind), found in runs.items():
        row.setdefault(name, {})[kind] = {
            key: round(statistics.median(r[key] for r in found), 2) for key in found[0]
        } | {"runs": found}
    return row


def pack_report(row: dict) -> str:
    lines = [f"{row['files']:,} small JPEGs, `pack --workers {PACK_WORKERS}` whole processes, "
             f"medians of {row['repeat']} A B runs (load {row['load'][0]:.1f}):", "",
             "| shardpack | tree | wall s | packing process peak MB | largest worker peak MB | "
             "packing process CPU s | workers' CPU s |",
             "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name in ("this", "against"):
        for kind, m in row.get(name, {}).items():
            lines.append(f"| {name} | {kind} | {m['wall_s']:.2f} | {m['parent_peak_mb']:.0f} | "
                         f"{m['workers_peak_mb']:.0f} | {m['parent_cpu_s']:.2f} | "
                         f"{m['workers_cpu_s']:.2f} |")  # fmt: skip
    worst = max(m["parent_peak_mb"] for m in row["this"].values())
    lines += ["", f"Packing process peak {worst:.0f} MB (target {TARGET_PEAK_MB} MB): "
              f"{'met' if worst <= TARGET_PEAK_MB else 'not met'}"]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", nargs="?", help="the tree to scan and plan (not with --pack)")
    parser.add_argument("--encode", default="keep")
    parser.add_argument("--cprofile", action="store_true", help="print a profile instead")
    parser.add_argument("--pack", action="store_true", help="whole packs of --files files")
    parser.add_argument("--files", type=int, default=PACK_FILES, help="files in each --pack tree")
    parser.add_argument("--repeat", type=int, default=3, help="--pack runs of each tree")
    parser.add_argument("--against", help="another shardpack checkout to pair --pack with")
    parser.add_argument("--cache", default="bench-out", help="where --pack's trees are kept")
    parser.add_argument("--json", help="write --pack's row to this file too")
    args = parser.parse_args(argv)
    if args.pack:
        row = pack_row(args.cache, args.files, args.repeat, args.against)
        print(pack_report(row))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(row, f, indent=1)
        return
    if args.src is None:
        parser.error("give SRC, or --pack")
    if args.cprofile:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.runcall(measure, args.src, args.encode)
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)
        return
    print(json.dumps(measure(args.src, args.encode)))


if __name__ == "__main__":
    main()
