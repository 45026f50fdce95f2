"""The containers side by side: writing records/s, and reading records/s through each
container's own reader and through shardpack's.

    python -m benchmarks.containers [WORKLOAD] [--shards 8] [--cache bench-out] [--json FILE]
                                    [--array-record-options OPTIONS ...]

The records are a workload's JPEG files as pack writes them with `--encode keep` (image bytes,
label, height, width, channels, format, key), built once, untimed. Writing is one process
through each container's writer (temporary name, fsync, rename, sha256). Reading is one epoch
without decoding the images, so the figures compare the containers, not JPEG decoders:
tf.data's TFRecordDataset, Grain's ArrayRecordDataSource (in order, then by random index),
webdataset's WebDataset and pyarrow's ParquetFile; then shardpack's own reader of each
container (checked framing, Example or sample decoded into features). `--array-record-options`
adds a row for ArrayRecord written with other writer options (e.g. `group_size:1`, TFDS's, which
compresses with zstd).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import time
from pathlib import Path

import cv2
import numpy as np

from benchmarks.workloads import ensure, image_files
from shardpack.containers import CONTAINERS, Container
from shardpack.containers.array_record import ArrayRecord
from shardpack.storage import storage_at


def _records(root: str) -> list[dict]:
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    out = []
    for path in image_files(root):
        with open(path, "rb") as f:
            data = f.read()
        height, width = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape[:2]
        out.append({
            "image": data, "label": classes.index(os.path.basename(os.path.dirname(path))),
            "height": height, "width": width, "channels": 3, "format": b"jpeg",
            "key": os.fsencode(os.path.relpath(path, root)),
        })  # fmt: skip
    return out


def _rate(count: int, start: float) -> float:
    return round(count / (time.perf_counter() - start), 1)


def _write(
    container: Container, records: list[dict], folder: str, shards: int
) -> tuple[list[str], float]:
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    paths = [os.path.join(folder, container.shard_name("bench", "train", i, shards))
             for i in range(shards)]  # fmt: skip
    start = time.perf_counter()
    for i, path in enumerate(paths):
        with container.writer(path) as writer:
            for features in records[i::shards]:
                writer.write(features)
    return paths, _rate(len(records), start)


def _own_reader(name: str, paths: list[str]) -> dict[str, float]:
    """Each container's reader of its audience, one epoch, images not decoded."""
    start = time.perf_counter()
    if name == "tfrecord":
        import tensorflow as tf

        count = sum(1 for _ in tf.data.TFRecordDataset(paths))
        return {"tf.data": _rate(count, start)}
    if name == "array_record":
        import grain

        source = grain.sources.ArrayRecordDataSource(paths)
        count = sum(1 for i in range(len(source)) if source[i])
        rates = {"grain (in order)": _rate(count, start)}
        order = list(range(len(source)))
        random.Random(0).shuffle(order)
        start = time.perf_counter()
        count = sum(1 for i in order if source[i])
        rates["grain (random index)"] = _rate(count, start)
        return rates
    if name == "parquet":  # pyarrow, batch by batch, as datasets and pandas read the files
        import pyarrow.parquet as pq

        count = sum(batch.num_rows for p in paths for batch in pq.ParquetFile(p).iter_batches())
        return {"pyarrow": _rate(count, start)}
    import webdataset as wds

    count = sum(1 for _ in wds.WebDataset(paths, shardshuffle=False))
    return {"webdataset": _rate(count, start)}


def measure(label: str, container: Container, records: list[dict], folder: str, shards: int):
    """One row: write the records with `container`, then read them with each reader."""
    paths, write_rate = _write(container, records, folder, shards)
    start = time.perf_counter()
    storage = storage_at(folder)
    count = sum(1 for p in paths for _ in container.iter_records(storage, os.path.basename(p)))
    return {
        "container": label,
        "records": count,
        "mb": round(sum(os.path.getsize(p) for p in paths) / 1e6, 1),
        "write_per_s": write_rate,
        "readers_per_s": {**_own_reader(container.name, paths), "shardpack": _rate(count, start)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="small-jpeg-5k")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--cache", default="bench-out")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--array-record-options", nargs="*", default=[])
    args = parser.parse_args(argv)
    import grain  # noqa: F401  imported before timing, like TensorFlow: start-up is not speed
    import tensorflow as tf  # noqa: F401
    import webdataset  # noqa: F401

    workload = ensure(args.workload, args.cache)
    records = _records(workload.path)
    folder = os.path.join(args.cache, "containers")
    cases = [(name, c) for name, c in CONTAINERS.items()]
    cases += [(f"array_record ({o})", ArrayRecord(o)) for o in args.array_record_options]
    rows = [measure(label, c, records, os.path.join(folder, f"{n}"), args.shards)
            for n, (label, c) in enumerate(cases)]  # fmt: skip
    print(f"\n## Containers ({workload.name}, {len(records):,} JPEG records, {args.shards} "
          f"shards, {os.cpu_count()} cores; images not decoded)\n")  # fmt: skip
    print("| container | MB | write records/s | reader: records/s |")
    print("|---|---:|---:|---|")
    for r in rows:
        readers = ", ".join(f"{k} {v:,.0f}" for k, v in r["readers_per_s"].items())
        print(f"| {r['container']} | {r['mb']} | {r['write_per_s']:,.0f} | {readers} |")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
