"""A class-folder workload into the Hub's Parquet: shardpack against `datasets`, side by side.

    python -m benchmarks.hub_parquet [WORKLOAD] [--cache bench-out] [--shards 8] [--json FILE]

Both write the same image bytes (no re-encode) into Parquet shards with `Image` and `ClassLabel`
features, each a whole process measured by benchmarks.measure (wall, CPU with its children, and
the peak memory of its process tree):

- shardpack: `shardpack pack WORKLOAD OUT --format parquet --shards N`;
- datasets: `load_dataset("imagefolder")`, then what `push_to_hub` does to each of N shards
  before uploading it: the image files' bytes embedded (`embed_table_storage`) and the shard
  written with `to_parquet`, locally.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from benchmarks.measure import run_measured
from benchmarks.workloads import ensure

# What push_to_hub does to a dataset's shards, without the upload (datasets/arrow_dataset.py).
_DATASETS = """
import sys
from datasets import Image, load_dataset
from datasets.table import embed_table_storage

src, out, shards = sys.argv[1], sys.argv[2], int(sys.argv[3])
dataset = load_dataset("imagefolder", data_dir=src, split="train")
dataset = dataset.cast_column("image", Image(decode=False))
for i in range(shards):
    shard = dataset.shard(num_shards=shards, index=i, contiguous=True)
    shard = shard.with_format("arrow").map(embed_table_storage, batched=True)
    shard.to_parquet(f"{out}/train-{i:05d}-of-{shards:05d}.parquet")
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="photos")
    parser.add_argument("--cache", default="bench-out")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    work = ensure(args.workload, args.cache)
    base = f"{args.cache}/hub-parquet"
    runs = {
        "shardpack": [sys.executable, "-m", "shardpack", "pack", work.path, f"{base}/shardpack",
                      "--format", "parquet", "--shards", str(args.shards), "--no-progress"],
        "datasets": [sys.executable, "-c", _DATASETS, work.path, f"{base}/datasets",
                     str(args.shards)],
    }  # fmt: skip
    rows = {}
    for name, command in runs.items():
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(f"{base}/datasets")  # to_parquet writes into a folder that is there
        measured = run_measured(command)
        if measured.returncode != 0:
            raise SystemExit(f"{name} failed: {measured.stderr[-2000:]}")
        rows[name] = {"wall_s": round(measured.wall_s, 2), "cpu_s": round(measured.cpu_s, 2),
                      "peak_tree_mb": round(measured.tree_pss_mb, 1)}  # fmt: skip
    ratio = rows["datasets"]["wall_s"] / rows["shardpack"]["wall_s"]
    print(f"{work.name}: {work.num_images} images, {work.input_bytes / 2**20:.1f} MiB")
    for name, row in rows.items():
        print(f"  {name:10s} {row['wall_s']:7.2f} s  {row['cpu_s']:7.2f} s CPU  "
              f"{row['peak_tree_mb']:8.1f} MB peak")  # fmt: skip
    print(f"  shardpack is {ratio:.1f}x as fast as datasets")
    result = {"workload": work.name, "rows": rows, "speedup": round(ratio, 2)}
    print(json.dumps(result))
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
