"""How fast shardpack.torch feeds a PyTorch loop, against the same loop decoding the same bytes
from memory (the ceiling), and how soon a resume at 90% of an epoch gives its first batch.

    python -m benchmarks.torch_read [--workloads photos,small-jpeg] [--limit N] [--json FILE]
                                    [--formats tfrecord,array_record]

Each workload is packed (cached under bench-out/torch/) as TFRecord and as ArrayRecord; the
loop is a DataLoader with 2 workers and batches of 64 (kept as lists: photos differ in size).
The ceiling's workers decode the packed records' own image bytes, held in memory, with the
same decoder, split among the workers the same way. Each loop gives images/s and the CPU time
an image cost (the process and its workers): on a machine others load, the rate follows their
load, the CPU time much less. iter_examples (one process, decoded) is beside them.
MosaicML's and litData's StreamingDatasets (the issue's peers) read copies of the same records
in the same loop, run by benchmarks/torch_peers.py in .venv-peers (`make peers`; their pins
conflict with the test venv's); without that venv their columns say so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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


def _cpu_s() -> float:
    """CPU seconds of this process and of its children reaped so far."""
    import resource

    own, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                      resource.RUSAGE_CHILDREN))  # fmt: skip
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure_loop(dataset, limit: int) -> tuple[float, float]:
    """Images per second through a DataLoader over `dataset`, up to `limit` images, and the CPU
    microseconds an image cost (this process and its workers): on a machine others load, the
    rate follows their load, the CPU time much less."""
    import torch

    loader = torch.utils.data.DataLoader(
        dataset, batch_size=BATCH, num_workers=WORKERS, collate_fn=_keep
    )
    images = 0
    cpu = _cpu_s()
    start = time.perf_counter()
    batches = iter(loader)
    for batch in batches:
        images += len(batch)
        if images >= limit:
            break
    rate = _rate(images, start)
    del batches  # its workers stop and are reaped: their CPU time is counted
    return rate, round((_cpu_s() - cpu) / max(images, 1) * 1e6, 1)


def _ceiling(stored: list[dict], limit: int) -> tuple[float, float]:
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

    return measure_loop(Memory(), limit)


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
    rate, cpu = measure_loop(dataset, limit)
    resumed = ShardDataset(out, batch_size=BATCH, seed=0)
    resumed.load_state_dict({"epoch": 0, "consumed": int(len(resumed) * 0.9), "seed": 0,
                             "world_size": 1})  # fmt: skip
    start = time.perf_counter()
    measure_loop(resumed, 1)
    resume_s = round(time.perf_counter() - start, 3)
    ceiling, ceiling_cpu = _ceiling(stored, limit)
    return {"workload": name, "format": fmt, "images": min(limit, len(dataset)),
            "shard_dataset_images_per_s": rate, "ceiling_images_per_s": ceiling,
            "of_ceiling": round(rate / ceiling, 2), "cpu_us_per_image": cpu,
            "ceiling_cpu_us_per_image": ceiling_cpu,
            "of_ceiling_cpu": round(ceiling_cpu / cpu, 2),
            "iter_examples_images_per_s": python_rate,
            "resume_first_batch_s": resume_s}  # fmt: skip


PEERS_PYTHON = os.path.join(".venv-peers", "bin", "python")


def peers(name: str, cache: str, limit: int) -> dict[str, list[float]] | str:
    """MosaicML's and litData's [images/s, CPU us an image] over copies of the workload's
    TFRecord pack, or why they were not measured."""
    if not os.path.exists(PEERS_PYTHON):
        return f"not measured: no {PEERS_PYTHON} (make peers)"
    out = os.path.join(cache, "torch", f"{name}-tfrecord")
    work = os.path.join(cache, "torch", f"{name}-peers")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}  # this tree's shardpack decodes for them too
    done = subprocess.run([PEERS_PYTHON, "-m", "benchmarks.torch_peers", out, work, "--limit",
                           str(limit)], capture_output=True, text=True, env=env)  # fmt: skip
    if done.returncode:
        return f"failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="photos,small-jpeg")
    parser.add_argument("--formats", default=",".join(FORMATS), help="containers to read")
    parser.add_argument("--limit", type=int, default=1 << 62, help="images per measurement")
    parser.add_argument("--cache", default="bench-out")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    import torch  # imported before timing: its start is not reading speed

    rows = [measure(name, fmt, args.cache, args.limit)
            for name in args.workloads.split(",")
            for fmt in args.formats.split(",")]  # fmt: skip
    print(f"\n## PyTorch loop (torch {torch.__version__}, {os.cpu_count()} cores, "
          f"{WORKERS} DataLoader workers, batch {BATCH})\n")  # fmt: skip
    print("| workload | format | images | ShardDataset images/s | ceiling images/s | of ceiling "
          "| CPU us an image: ShardDataset, ceiling | of ceiling by CPU "
          "| iter_examples images/s | first batch after a resume at 90% |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {r['format']} | {r['images']:,} | "
              f"{r['shard_dataset_images_per_s']:,.0f} | {r['ceiling_images_per_s']:,.0f} | "
              f"{r['of_ceiling']} | {r['cpu_us_per_image']:,.0f}, "
              f"{r['ceiling_cpu_us_per_image']:,.0f} | {r['of_ceiling_cpu']} | "
              f"{r['iter_examples_images_per_s']:,.0f} | "
              f"{r['resume_first_batch_s']} s |")  # fmt: skip
    print(f"\n## Peers in the same loop (MosaicML streaming, litData; {PEERS_PYTHON})\n")
    print("| workload | measure | ShardDataset TFRecord | ShardDataset ArrayRecord | MosaicML "
          "| litData | best shardpack / MosaicML | best shardpack / litData |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in args.workloads.split(","):
        mine = [r for r in rows if r["workload"] == name]
        theirs = peers(name, args.cache, args.limit)
        for r in mine:
            r["peers"] = theirs
        for unit, key, better in (("images/s", "shard_dataset_images_per_s", max),
                                     ("CPU us an image", "cpu_us_per_image", min)):  # fmt: skip
            ours = {r["format"]: r[key] for r in mine}
            cells = f"| {name} | {unit} | " + " | ".join(
                f"{ours[f]:,.0f}" if f in ours else "not read" for f in FORMATS
            )
            if isinstance(theirs, str):
                print(f"{cells} | {theirs} | | | |")
                continue
            best = better(ours.values())
            peer = {p: theirs[p][0 if unit == "images/s" else 1] for p in theirs}
            ratio = {p: v / best if better is min else best / v for p, v in peer.items()}
            print(f"{cells} | {peer['mosaicml']:,.0f} | {peer['litdata']:,.0f} | "
                  f"{ratio['mosaicml']:.2f} | {ratio['litdata']:.2f} |")  # fmt: skip
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
