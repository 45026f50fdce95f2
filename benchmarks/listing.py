"""The listing-scale run: scan and plan of a very large class-folder tree, in a fresh process.

    python -m benchmarks.listing SRC [--encode keep] [--cprofile]

Prints one JSON line: files, scan_s, plan_s, files_per_s (scan + plan), cpu_s (the process's
CPU seconds over scan + plan: on a shared, loaded machine the wall time is not all ours) and the
process's peak RSS in MB (the kernel's ru_maxrss: imports included, as a user's pack run would
pay them).
`make bench-long` runs it on the `million` workload (1,000,000 hard links).
"""

from __future__ import annotations

import argparse
import json
import resource
import time


def measure(src: str, encode: str) -> dict:
    """Scan `src` and plan it as `shardpack pack` would, timing each step."""
    from shardpack.options import PackOptions
    from shardpack.packing.cpuload import machine_cores
    from shardpack.packing.fresh import default_name
    from shardpack.packing.plan import make_plan
    from shardpack.packing.writing import no_gc
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("--encode", default="keep")
    parser.add_argument("--cprofile", action="store_true", help="print a profile instead")
    args = parser.parse_args(argv)
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
