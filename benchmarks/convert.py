"""Converting shardpack's own output against packing from the folder and the I/O ceiling.

    python -m benchmarks.convert [WORKLOAD] [--cache bench-out] [--repeat 3] [--workers N]
                                 [--shards 8]

The workload's JPEG folder is packed once into TFRecords (untimed), every pack in `--shards`
shards (8: issue 33's figures). Then, each a whole `shardpack pack` process (start-up
included), the cases alternate within each repeat (A B C, then C B A, as the machine is
shared): the folder packed into TFRecord, ArrayRecord and WebDataset, and the TFRecords
converted into TFRecord, ArrayRecord and WebDataset (--source shardpack: each record read at
random from its shard, the image bytes passed through; into an Example container, the record
itself). Each row gives the medians of wall time and of CPU time (user + system of the process
and its workers) and the CPU per image. The I/O ceiling is
`benchmarks.ceiling --encode keep --write`: one process reading, hashing and writing the same
bytes into one file, fsynced, the least any conversion must do.
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

from benchmarks.workloads import ensure


def _run(command: list[str], out: str) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `command` (OUT removed before it)."""
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="photos-600")
    parser.add_argument("--cache", default="bench-out")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--shards", type=int, default=8, help="shards of every pack")
    args = parser.parse_args(argv)
    work = ensure(args.workload, args.cache)
    base = os.path.join(os.path.abspath(args.cache), "convert")
    pack = [sys.executable, "-m", "shardpack", "pack"]
    flags = ["--shards", str(args.shards), *(["--workers", str(args.workers)] if args.workers
                                              else [])]  # fmt: skip
    tfrecords = os.path.join(base, "tfrecord")
    shutil.rmtree(tfrecords, ignore_errors=True)
    subprocess.run([*pack, work.path, tfrecords, *flags], check=True, capture_output=True)
    cases = {
        f"{src} -> {fmt}": [*pack, path, os.path.join(base, "out"), "--format", fmt,
                            "--no-progress", *flags]
        for src, path in (("folder", work.path), ("tfrecord", tfrecords))
        for fmt in ("tfrecord", "array_record", "webdataset")
    }  # fmt: skip
    cases["I/O ceiling"] = [sys.executable, "-m", "benchmarks.ceiling", work.path, "--encode",
                            "keep", "--write", os.path.join(base, "out")]  # fmt: skip
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    load = os.getloadavg()[0]
    for repeat in range(args.repeat):
        for name in list(cases)[:: 1 if repeat % 2 == 0 else -1]:
            runs[name].append(_run(cases[name], os.path.join(base, "out")))
    load = (load + os.getloadavg()[0]) / 2
    print(f"{work.name}: {work.num_images} images, {work.input_bytes / 2**20:.1f} MiB, "
          f"{args.shards} shards; load average ~{load:.1f} on {os.cpu_count()} cores")  # fmt: skip
    rows = {}
    for name, times in runs.items():
        wall = statistics.median(w for w, _ in times)
        cpu = statistics.median(c for _, c in times)
        rows[name] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                      "cpu_us_per_image": round(cpu / work.num_images * 1e6)}  # fmt: skip
        print(f"  {name:26s} {wall:6.2f} s  {work.num_images / wall:7.0f} images/s  "
              f"CPU {cpu:6.2f} s  {rows[name]['cpu_us_per_image']:5d} us/image")  # fmt: skip
    found = {"workload": work.name, "shards": args.shards, "load": round(load, 2), "rows": rows}
    print(json.dumps(found))


if __name__ == "__main__":
    main()
