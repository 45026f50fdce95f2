"""What walking a TFRecord shard's framing costs beside TensorFlow reading it.

    python -m benchmarks.tf_framing [--cache bench-out] [--mib 300]

tf_dataset walks each local uncompressed shard header to header (one 12-byte read a record,
TFRecord.open_for_tf) before TensorFlow opens it: TensorFlow's reader crashes the process at a
record whose length claims 2**40 bytes or more. Two shards of about --mib MiB each, one of
photo-sized records (110 KB) and one of CIFAR-sized ones (3 KB), are written once under the
cache; each is then walked, read by TensorFlow's own TFRecordDataset (batched, so that Python
is not the cost), and read through tf_dataset (parsed, undecoded, batched), all from the page
cache, best of a few runs each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

from shardpack.containers.example import encode_example
from shardpack.containers.tfrecord import TFRecord, TFRecordWriter
from shardpack.storage.local import LocalStorage

SHARD = "x-train.tfrecord-00000-of-00001"
RECORDS = {"photos": 110_000, "small": 3_000}  # image bytes a record
_FEATURES = {"image": "bytes", "label": "int64", "height": "int64", "width": "int64",
             "channels": "int64", "format": "bytes", "key": "bytes"}  # fmt: skip


def _shard(folder: Path, image_bytes: int, total: int) -> tuple[Path, int]:
    """OUT holding one shard of records of `image_bytes` (about `total` bytes), written once."""
    count = total // image_bytes
    if (folder / "index.json").exists():
        return folder, count
    folder.mkdir(parents=True, exist_ok=True)
    image = os.urandom(image_bytes)  # never decoded: tf_dataset reads it undecoded
    with TFRecordWriter(folder / SHARD) as writer:
        for i in range(count):
            writer.write(encode_example({"image": image, "label": 0, "height": 24, "width": 32,
                                         "channels": 3, "format": b"png",
                                         "key": f"a/{i}.png".encode()}))  # fmt: skip
    data = (folder / SHARD).read_bytes()
    shard = {"file": SHARD, "num_records": count, "num_bytes": len(data),
             "sha256": hashlib.sha256(data).hexdigest()}  # fmt: skip
    split = {"num_records": count, "class_counts": [count], "shards": [shard]}
    index = {"format": "shardpack-index", "version": 1, "name": "x", "source": "folder",
             "classes": ["a"], "features": _FEATURES, "encoding": "png", "compression": "none",
             "splits": {"train": split}}  # fmt: skip
    (folder / "index.json").write_text(json.dumps(index))
    return folder, count


def _best(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _measure(tf, out: Path) -> tuple[float, float, float]:
    """Seconds to walk the shard, to read it with TFRecordDataset, and with tf_dataset."""
    import shardpack

    storage, path = LocalStorage(str(out)), str(out / SHARD)
    length = os.path.getsize(path)
    walk = _best(lambda: TFRecord().open_for_tf(storage, SHARD, "none", length), 5)
    bare = _best(lambda: sum(1 for _ in tf.data.TFRecordDataset(path).batch(4096)), 3)
    read = shardpack.tf_dataset
    ours = _best(lambda: sum(1 for _ in read(out, shuffle=False, decode=False, batch_size=256)), 2)
    return walk, bare, ours


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default="bench-out")
    parser.add_argument("--mib", type=int, default=300)
    args = parser.parse_args(argv)
    import tensorflow as tf  # imported before timing

    print("| records | count | walk ms | TFRecordDataset ms | tf_dataset ms | walk / tf_dataset |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, size in RECORDS.items():
        out, count = _shard(Path(args.cache) / "tf-framing" / name, size, args.mib << 20)
        walk, bare, ours = _measure(tf, out)
        print(f"| {name} ({size:,} B) | {count:,} | {walk * 1e3:,.0f} | {bare * 1e3:,.0f} | "
              f"{ours * 1e3:,.0f} | {walk / ours:.1%} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
