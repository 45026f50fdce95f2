"""Converting shardpack's own output against packing from the folder and the I/O ceiling.

    python -m benchmarks.convert [WORKLOAD] [--cache bench-out] [--repeat 3] [--workers N]

The workload's JPEG folder is packed once into TFRecords (untimed). Then, each a whole
`shardpack pack` process (start-up included), the best of --repeat runs: the folder packed
into ArrayRecord, and the TFRecords converted into ArrayRecord (--source shardpack: each
record read at random from its shard, the image bytes passed through). The I/O ceiling is
`benchmarks.ceiling --encode keep --write`: one process reading, hashing and writing the same
bytes into one file, fsynced, the least any conversion must do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from benchmarks.workloads import ensure


def _seconds(command: list[str], out: str, repeat: int) -> float:
    """The best wall time of `command` (run with OUT removed before each)."""
    best = float("inf")
    for _ in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="photos-600")
    parser.add_argument("--cache", default="bench-out")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    work = ensure(args.workload, args.cache)
    base = os.path.join(os.path.abspath(args.cache), "convert")
    pack = [sys.executable, "-m", "shardpack", "pack"]
    workers = ["--workers", str(args.workers)] if args.workers else []
    tfrecords = os.path.join(base, "tfrecord")
    shutil.rmtree(tfrecords, ignore_errors=True)
    subprocess.run([*pack, work.path, tfrecords, *workers], check=True, capture_output=True)
    rows = {
        "folder -> array_record": _seconds(
            [*pack, work.path, os.path.join(base, "a"), "--format", "array_record", *workers],
            os.path.join(base, "a"), args.repeat),
        "tfrecord -> array_record": _seconds(
            [*pack, tfrecords, os.path.join(base, "b"), "--format", "array_record", *workers],
            os.path.join(base, "b"), args.repeat),
        "I/O ceiling": _seconds(
            [sys.executable, "-m", "benchmarks.ceiling", work.path, "--encode", "keep",
             "--write", os.path.join(base, "c")], os.path.join(base, "c"), args.repeat),
    }  # fmt: skip
    print(f"{work.name}: {work.num_images} images, {work.input_bytes / 2**20:.1f} MiB")
    for name, seconds in rows.items():
        print(f"  {name:26s} {seconds:6.2f} s  {work.num_images / seconds:8.0f} images/s")
    print(json.dumps({"workload": work.name, "seconds": {k: round(v, 3) for k, v in rows.items()}}))


if __name__ == "__main__":
    main()
