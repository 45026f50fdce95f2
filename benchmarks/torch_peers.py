"""The issue's peers in benchmarks/torch_read.py's PyTorch loop: MosaicML's StreamingDataset
over MDS written by MDSWriter, and litData's StreamingDataset over `optimize` output, both
holding the same JPEG bytes a shardpack pack holds, decoded by the same decoder.

    .venv-peers/bin/python -m benchmarks.torch_peers OUT WORK [--limit N]

Runs in .venv-peers (`make peers`): their pins (torchvision, so torch 2.14 with CUDA, and
numpy < 2.2) conflict with the test venv's. Prints one JSON line: [images/s, CPU us an
image] of each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil

import litdata
from streaming import MDSWriter, StreamingDataset
from streaming.base.util import clean_stale_shared_memory

from benchmarks.torch_read import measure_loop

# MDS and litData chunks: both libraries' defaults (64 MB).
CHUNK_BYTES = 64 << 20


def _stored(out: str) -> list[dict]:
    """The pack's records, image bytes as stored, in written order."""
    from shardpack import iter_examples

    return [{"image": r["image"], "label": r["label"], "format": r["format"],
             "height": r["height"], "width": r["width"], "channels": r["channels"]}
            for r in iter_examples(out)]  # fmt: skip


def _decoded(record: dict) -> dict:
    """The record with its image decoded as shardpack.torch does (uint8 CHW)."""
    import torch

    from shardpack.read.stream import decode_pixels

    image = record["image"]  # litData gives a memoryview of its chunk: bytes for the probe
    record = {**record, "image": image if isinstance(image, bytes) else bytes(image)}
    pixels = torch.from_numpy(decode_pixels(record)).permute(2, 0, 1)
    return {"image": pixels, "label": record["label"]}


class _MosaicML(StreamingDataset):
    def __getitem__(self, i):
        return _decoded(super().__getitem__(i))


class _LitData(litdata.StreamingDataset):
    def __getitem__(self, i):
        return _decoded(super().__getitem__(i))


def _mosaicml(records: list[dict], work: str, limit: int) -> tuple[float, float]:
    folder = os.path.join(work, "mds")
    if not os.path.exists(os.path.join(folder, "index.json")):
        shutil.rmtree(folder, ignore_errors=True)
        columns = {"image": "bytes", "label": "int", "format": "str", "height": "int",
                   "width": "int", "channels": "int"}  # fmt: skip
        with MDSWriter(out=folder, columns=columns, size_limit=CHUNK_BYTES) as writer:
            for record in records:
                writer.write(record)

    clean_stale_shared_memory()
    dataset = _MosaicML(local=folder, shuffle=True, shuffle_seed=0, batch_size=64)
    return measure_loop(dataset, limit)


def _litdata_item(record: dict) -> dict:
    return record


def _litdata(records: list[dict], work: str, limit: int) -> tuple[float, float]:
    folder = os.path.join(work, "litdata")
    if not os.path.exists(os.path.join(folder, "index.json")):
        shutil.rmtree(folder, ignore_errors=True)
        litdata.optimize(fn=_litdata_item, inputs=records, output_dir=folder,
                         chunk_bytes=CHUNK_BYTES, num_workers=2)  # fmt: skip

    return measure_loop(_LitData(folder, shuffle=True, seed=0), limit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="a shardpack pack's OUT: the records to copy")
    parser.add_argument("work", help="where the peers' copies are written (kept)")
    parser.add_argument("--limit", type=int, default=1 << 62, help="images per measurement")
    args = parser.parse_args(argv)
    records = _stored(args.out)
    os.makedirs(args.work, exist_ok=True)
    rates = {"mosaicml": _mosaicml(records, args.work, args.limit),
             "litdata": _litdata(records, args.work, args.limit)}  # fmt: skip
    print(json.dumps(rates))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
