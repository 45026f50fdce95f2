"""The merge step: the workers' results and the scan's findings into the index.json document,
and what is written beside the shards before it (TFDS metadata, the container's split files,
DALI index files, the dataset card, croissant.json)."""

from __future__ import annotations

import heapq

from shardpack.errors import shortened
from shardpack.index import (
    FORMAT,
    MAX_NAMED_SKIPPED,
    MAX_SKIPPED_TEXT,
    VERSION,
    Index,
    index_from_document,
)
from shardpack.layout import CARD_NAME, CROISSANT_NAME, METADATA_NAMES
from shardpack.options import PackOptions
from shardpack.packing.croissant import croissant
from shardpack.packing.daliindex import write_index_files
from shardpack.packing.facts import record_sizes
from shardpack.packing.hubcard import card
from shardpack.packing.plan import Plan, ShardResult
from shardpack.packing.tfdsmeta import write_tfds_metadata
from shardpack.sources import Dataset
from shardpack.storage import Storage
from shardpack.storage.atomic import json_bytes


def uniform_size(results: list[ShardResult]) -> list[int] | None:
    """[height, width] when every record written has that size (center-crop and pad promise
    it), else None: tf_dataset then knows the images stack without image_size. From what
    facts noted of each record; a shard whose notes do not count its records leaves it unknown."""
    sizes: set[tuple[int, int]] = set()
    for r in results:
        noted = record_sizes(r.content, r.num_records)
        if noted is None:
            return None
        sizes |= noted
    return list(next(iter(sizes))) if len(sizes) == 1 else None


def named_skipped(every: list[tuple[str, str]]) -> list[dict[str, str]]:
    """index.json's `skipped`: the first MAX_NAMED_SKIPPED of every (key, reason), shortened."""
    return [
        {"key": shortened(key, MAX_SKIPPED_TEXT), "reason": shortened(reason, MAX_SKIPPED_TEXT)}
        for key, reason in heapq.nsmallest(MAX_NAMED_SKIPPED, every)
    ]


def build_index(
    *,
    name: str,
    dataset: Dataset,
    options: PackOptions,
    plan: Plan,
    results: list[ShardResult],
    stats: dict[str, object],
) -> dict:
    """Merge the workers' results into the index.json document (shards in plan order)."""
    by_file = {r.file: r for r in results}
    splits: dict[str, dict] = {}
    for spec in plan.shards:
        result = by_file[spec.file]
        split = splits.setdefault(
            spec.split,
            # name_count: the count in the split's shard names, kept as they grow (grow.py)
            {
                "num_records": 0,
                "class_counts": [0] * len(dataset.classes),
                "shards": [],
                "name_count": spec.num_shards,
            },
        )
        split["num_records"] += result.num_records
        split["class_counts"] = [
            a + b for a, b in zip(split["class_counts"], result.label_counts, strict=False)
        ]
        split["shards"].append(
            {
                "file": result.file,
                "num_records": result.num_records,
                "num_bytes": result.num_bytes,
                "sha256": result.sha256,
                "generation": 0,  # the run that wrote it: grown datasets' later ones count up
            }
        )
    # what the scan passed over with a reason, and what the workers refused: the first ones
    every = [*dataset.skipped, *(s for r in results for s in r.skipped)]
    skipped = named_skipped(every)
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "source": dataset.kind,
        "classes": list(dataset.classes),  # the label's, as in version 1; also in `features`
        "features": dataset.schema.to_json(),
        "encoding": options.encode,
        "compression": options.compression,
        "container": options.format,
        "seed": options.seed if options.shuffle else None,
        "options": options.output_fields(),  # what --append and --update pack new items with
        "generation": 0,
        "history": [],
        "plan_digest": plan.digest,
        "splits": splits,
        "skipped": skipped,
        "num_skipped": len(every),  # `skipped` names the first MAX_NAMED_SKIPPED
        "ignored": dataset.ignored,
        "ignored_files": list(dataset.ignored_files),  # the first ones, of `ignored` in all
        "warnings": [*dataset.warnings, *plan.warnings],
        "stats": stats,
        "image_size": uniform_size(results),
    }
    return doc


def write_outputs(
    out: Storage, document: dict, results: list[ShardResult], index_files: bool, tfds: bool = True
) -> Index:
    """Write what goes beside the shards of `document` (TFDS metadata unless not `tfds`, the
    container's split files, the index files of the shards in `results`, the Hub card,
    croissant.json);
    index.json not yet."""
    index = index_from_document(out, document)
    if index.tfds_readable and tfds:
        write_tfds_metadata(out, document, index.container.tfds_file_format)
    else:  # an earlier run's metadata would point TFDS at shards it cannot read
        out.remove(METADATA_NAMES)
    for split, entry in document["splits"].items():  # the container's files beside them
        shards = [(s["file"], s["num_records"]) for s in entry["shards"]]
        for file, listing in index.container.split_files(index.name, split, shards).items():
            out.put(file, json_bytes(listing))
    if index_files:
        offsets = {r.file: r.offsets for r in results}  # only these shards' files: new ones
        written = {split: {**entry, "shards": [s for s in entry["shards"] if s["file"] in offsets]}
                   for split, entry in document["splits"].items()}  # fmt: skip
        write_index_files(out, {**document, "splits": written}, offsets)
    out.put(CARD_NAME, card(document))  # the Hub's dataset card
    out.put(CROISSANT_NAME, croissant(document, index.container))
    return index
