"""inspect: a readable summary of a pack output, from its index and a few records."""

from __future__ import annotations

import itertools
import os

import numpy as np

from shardpack.errors import is_count
from shardpack.index import load_index
from shardpack.read.stream import iter_examples


def describe(
    out: str | os.PathLike, num_records: int = 3, storage_options: dict | None = None
) -> dict:
    """Summarize OUT: splits, shards, sizes, class histogram and the first few records.

    Args:
        out: the output folder or URL (s3://, gs://, memory://...) of a pack run.
        num_records: how many records of each split to show (image bytes left out).
        storage_options: options for the URL's fsspec filesystem (credentials, endpoint...).

    Returns:
        A JSON-ready dict.
    """
    if not is_count(num_records, 0):
        raise ValueError(f"num_records must be an integer >= 0, got: {num_records!r}")
    index = load_index(out, storage_options)
    present = {e.name for e in index.storage.listdir() if not e.is_dir}  # one listing, not a
    splits = {}  # request a shard on an object store
    for name, split in index.splits.items():
        samples = []
        records = iter_examples(index.storage, name)
        for record in itertools.islice(records, num_records):
            record["image_bytes"] = len(record.pop("image"))
            label = record.get("label")
            if isinstance(label, int):
                record["class"] = index.classes[label]
            elif isinstance(label, np.ndarray):  # multi-label
                record["class"] = [index.classes[i] for i in label.tolist()]
            samples.append({name: _json_value(value) for name, value in record.items()})
        splits[name] = {
            "num_records": split.num_records,
            "num_shards": len(split.shards),
            "num_bytes": sum(s.num_bytes for s in split.shards),
            "class_counts": dict(zip(index.classes, split.class_counts, strict=False)),
            "shards": [
                {
                    "file": s.file,
                    "num_records": s.num_records,
                    "num_bytes": s.num_bytes,
                    "missing": s.file not in present,
                }
                for s in split.shards
            ],
            "samples": samples,
        }
    raw = index.raw
    return {
        "out": index.out,
        "name": index.name,
        "source": raw.get("source"),
        "encoding": index.encoding,
        "compression": index.compression,
        "container": index.container_name,
        "tfds_metadata": index.tfds_readable,
        "num_classes": len(index.classes),
        "features": index.schema.to_json(),
        "splits": splits,
        "skipped": raw.get("skipped", []),  # the first ones; num_skipped counts them all
        "num_skipped": raw.get("num_skipped", len(raw.get("skipped", []))),
        "ignored": raw.get("ignored", 0),
        "stats": raw.get("stats", {}),
    }


def _json_value(value: object) -> object:
    """A record value as JSON holds it: arrays as (nested) lists, bytes as text."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value
