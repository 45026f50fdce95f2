"""Parquet row groups: what their size costs a random read and gains a sequential one.

    python -m benchmarks.parquet_row_groups [WORKLOAD] [--rows 10 25 50 100 250 1000]
                                             [--cache bench-out]

The records are a workload's JPEG files as pack writes them (`--encode keep`), built once,
untimed, written to one shard per row-group size through the Parquet container's writer (its
byte bound lifted, so the row count alone decides). Per size: the file's MB, the writer's
records/s, shardpack's sequential reader (iter_records) in records/s, and a random read
(Records' reader, 200 indices in a seeded random order, no two in one row group in a row) in
ms per record: a random read reads its whole row group.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

from benchmarks.containers import _records
from benchmarks.workloads import ensure
from shardpack.containers import parquet
from shardpack.storage import storage_at


def _row(records: list[dict], folder: str, rows: int) -> dict:
    parquet.ROW_GROUP_ROWS, parquet.ROW_GROUP_BYTES = rows, 1 << 40
    container = parquet.Parquet()
    name = container.shard_name("bench", "train", 0, 1)
    path = os.path.join(folder, name)
    start = time.perf_counter()
    with container.writer(path) as writer:
        for features in records:
            writer.write(features)
    write = len(records) / (time.perf_counter() - start)
    storage = storage_at(folder)
    start = time.perf_counter()
    count = sum(1 for _ in container.iter_records(storage, name))
    sequential = count / (time.perf_counter() - start)
    order = random.Random(0).sample(range(count), min(200, count))
    with container.open(storage, name) as reader:
        start = time.perf_counter()
        for i in order:
            reader.cached = (-1, [])  # a random read: never the group read last
            reader[i]
        per_read = (time.perf_counter() - start) / len(order) * 1e3
    return {"rows": rows, "mb": os.path.getsize(path) / 1e6, "write": write,
            "sequential": sequential, "random_ms": per_read}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="photos-600")
    parser.add_argument("--rows", type=int, nargs="*", default=[10, 25, 50, 100, 250, 1000])
    parser.add_argument("--cache", default="bench-out")
    args = parser.parse_args(argv)
    workload = ensure(args.workload, args.cache)
    records = _records(workload.path)
    mean = sum(len(r["image"]) for r in records) / len(records) / 1e3
    print(f"\n## Parquet row groups ({workload.name}, {len(records):,} JPEG records of "
          f"{mean:.0f} KB on average, one shard)\n")  # fmt: skip
    print("| rows per group | MB | write records/s | sequential records/s | random ms/record |")
    print("|---:|---:|---:|---:|---:|")
    for rows in args.rows:
        with tempfile.TemporaryDirectory() as folder:
            r = _row(records, folder, rows)
        print(f"| {rows} | {r['mb']:.1f} | {r['write']:,.0f} | {r['sequential']:,.0f} | "
              f"{r['random_ms']:.2f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
