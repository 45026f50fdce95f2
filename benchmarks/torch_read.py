"""How fast shardpack.torch feeds a PyTorch loop, against the same loop decoding the same bytes
from memory (the ceiling), and how soon a resume at 90% of an epoch gives its first batch.

    python -m benchmarks.torch_read [--workloads photos,small-jpeg] [--limit N] [--json FILE]

Each workload is packed (cached under bench-out/torch/) as TFRecord and as ArrayRecord; the
loop is a DataLoader with 2 workers and batches of 64 (kept as lists: photos differ in size).
The ceiling's workers decode the packed records' own image bytes, held in memory, with the
same decoder, split among the workers the same way. iter_examples (one process, decoded) is
beside them. MosaicML's and litData's StreamingDatasets are the issue's peers; they are not in
the test environment, so they are not run here.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from benchmarks.workloads import ensure

WORKERS = 2
BATCH = 64
FORMATS = ("tfrecord", "array_record")


def _keep(batch: list) -> list:
    """A DataLoader collate that keeps the batch as a list (images differ in size)."""
    return batch


def _rate(images: int, start: float) -> float:
    return round(images / (time.perf_counter() - start), 1)


def _loop(dataset, limit: int) -> float:
    """Images per second through a DataLoader over `dataset`, up to `limit` images."""
    import torch

    loader = torch.utils.data.DataLoader(
        dataset, batch_size=BATCH, num_workers=WORKERS, collate_fn=_keep
    )
    images = 0
    start = time.perf_counter()
    for batch in loader:
        images += len(batch)
        if images >= limit:
            break
    return _rate(images, start)


def _ceiling(stored: list[dict], limit: int) -> float:
    """The same loop over the same stored records, decoded from memory."""
    import numpy as np
    import torch

    from shardpack.read.order import worker_part
    from shardpack.read.stream import decode_pixels

    class Memory(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            mine = np.arange(len(stored))
            if info is not None:
                mine = worker_part(mine, info.id, info.num_workers, BATCH)
            for i in mine:
                yield {**stored[i], "image": torch.from_numpy(decode_pixels(stored[i]))}

    return _loop(Memory(), limit)


def measure(name: str, fmt: str, cache: str, limit: int) -> dict:
    import itertools

    from shardpack import PackOptions, iter_examples, pack
    from shardpack.torch import ShardDataset

    workload = ensure(name, cache)
    out = os.path.join(cache, "torch", f"{name}-{fmt}")
    if not os.path.exists(os.path.join(out, "index.json")):
        pack(workload.path, out, PackOptions(format=fmt, shards=8, encode="keep"))
    stored = list(itertools.islice(iter_examples(out), limit))
    start = time.perf_counter()
    count = sum(1 for _ in itertools.islice(iter_examples(out, decode=True), limit))
    python_rate = _rate(count, start)
    dataset = ShardDataset(out, batch_size=BATCH, seed=0)
    rate = _loop(dataset, limit)
    resumed = ShardDataset(out, batch_size=BATCH, seed=0)
    resumed.load_state_dict({"epoch": 0, "consumed": int(len(resumed) * 0.9), "seed": 0,
                             "world_size": 1})  # fmt: skip
    start = time.perf_counter()
    _loop(resumed, 1)
    resume_s = round(time.perf_counter() - start, 3)
    ceiling = _ceiling(stored, limit)
    return {"workload": name, "format": fmt, "images": min(limit, len(dataset)),
            "shard_dataset_images_per_s": rate, "ceiling_images_per_s": ceiling,
            "of_ceiling": round(rate / ceiling, 2), "iter_examples_images_per_s": python_rate,
            "resume_first_batch_s": resume_s}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="photos,small-jpeg")
    parser.add_argument("--limit", type=int, default=1 << 62, help="images per measurement")
    parser.add_argument("--cache", default="bench-out")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    import torch  # imported before timing: its start is not reading speed

    rows = [measure(name, fmt, args.cache, args.limit)
            for name in args.workloads.split(",") for fmt in FORMATS]  # fmt: skip
    print(f"\n## PyTorch loop (torch {torch.__version__}, {os.cpu_count()} cores, "
          f"{WORKERS} DataLoader workers, batch {BATCH})\n")  # fmt: skip
    print("| workload | format | images | ShardDataset images/s | ceiling images/s | of ceiling "
          "| iter_examples images/s | first batch after a resume at 90% |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {r['format']} | {r['images']:,} | "
              f"{r['shard_dataset_images_per_s']:,.0f} | {r['ceiling_images_per_s']:,.0f} | "
              f"{r['of_ceiling']} | {r['iter_examples_images_per_s']:,.0f} | "
              f"{r['resume_first_batch_s']} s |")  # fmt: skip
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
