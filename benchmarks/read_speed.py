"""How fast the readers feed training: tf_dataset and iter_examples over packed workloads.

    python -m benchmarks.read_speed [--json FILE]

Each case packs a harness workload (cached under bench-out/), then reads one epoch with
`shardpack.tf_dataset` (shuffled, decoded, batched, prefetched; TensorFlow's import is not
timed) and with `shardpack.iter_examples` (no TensorFlow, CRC-checked, decoded with OpenCV).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from benchmarks.workloads import ensure
from shardpack import PackOptions, iter_examples, pack, tf_dataset

# (workload, encoding, image_size for batching): image_size only where sizes differ.
CASES = (("cifar10", "raw", None), ("small-jpeg", "keep", None), ("photos", "keep", (224, 224)))
BATCH = 128


def _rate(images: int, start: float) -> float:
    return round(images / (time.perf_counter() - start), 1)


def measure(name: str, encode: str, image_size, cache: str) -> dict:
    workload = ensure(name, cache)
    out = os.path.join(cache, "read", f"{name}-{encode}")
    pack(workload.path, out, PackOptions(encode=encode, shards=8, overwrite=True))
    split = "train"
    start = time.perf_counter()
    images = 0
    for batch in tf_dataset(out, split, batch_size=BATCH, image_size=image_size, seed=None):
        images += int(batch["label"].shape[0])
    tf_rate = _rate(images, start)
    start = time.perf_counter()
    count = sum(1 for _ in iter_examples(out, split, decode=True))
    return {
        "workload": name,
        "encoding": encode,
        "images": images,
        "tf_dataset_images_per_s": tf_rate,
        "iter_examples_images_per_s": _rate(count, start),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default="bench-out")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    import tensorflow as tf  # imported before timing: its ~3 s start is not reading speed

    rows = [measure(name, encode, size, args.cache) for name, encode, size in CASES]
    print(
        f"\n## Reading back (TensorFlow {tf.__version__}, {os.cpu_count()} cores, batch {BATCH})\n"
    )
    print("| workload | encoding | images | tf_dataset images/s | iter_examples images/s |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        tf_rate, py_rate = r["tf_dataset_images_per_s"], r["iter_examples_images_per_s"]
        print(f"| {r['workload']} | {r['encoding']} | {r['images']:,} | {tf_rate:,.0f} | "
              f"{py_rate:,.0f} |")  # fmt: skip
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
