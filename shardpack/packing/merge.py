"""The merge step: the workers' results and the scan's findings into the index.json document,
and what is written beside the shards before it (TFDS metadata, the container's split files,
DALI index files, the dataset card, croissant.json)."""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable
from dataclasses import replace
from functools import cache, partial

from shardpack.errors import shortened
from shardpack.index import (
    MAX_NAMED_SKIPPED,
    MAX_SKIPPED_TEXT,
    Index,
    PackStats,
    ShardInfo,
    Skipped,
    SplitInfo,
)
from shardpack.layout import CARD_NAME, CROISSANT_NAME, INDEX_NAME, METADATA_NAMES
from shardpack.options import PackOptions
from shardpack.packing.croissant import croissant, users_keys
from shardpack.packing.daliindex import write_index_files
from shardpack.packing.facts import facts_of, record_sizes
from shardpack.packing.hubcard import card, users_card
from shardpack.packing.plan import Plan, ShardResult
from shardpack.packing.tfdsmeta import tfds_metadata
from shardpack.sources import Dataset
from shardpack.storage import Storage
from shardpack.storage.atomic import json_bytes


def uniform_size(plan: Plan, results: list[ShardResult]) -> tuple[int, int] | None:
    """(height, width) when every record written has that size (center-crop and pad promise
    it), else None: tf_dataset then knows the images stack without image_size. From what
    facts noted of each record; a shard whose notes do not count its records leaves it unknown."""
    items = {spec.file: len(spec.items) for spec in plan.shards}
    sizes: set[tuple[int, int]] = set()
    for r in results:
        noted = record_sizes(facts_of(r.content, items[r.file]), r.num_records)
        if noted is None:
            return None
        sizes |= noted
    return next(iter(sizes)) if len(sizes) == 1 else None


def named_skipped(every: list[tuple[str, str]]) -> tuple[Skipped, ...]:
    """index.json's `skipped`: the first MAX_NAMED_SKIPPED of every (key, reason), shortened."""
    return tuple(
        Skipped(shortened(key, MAX_SKIPPED_TEXT), shortened(reason, MAX_SKIPPED_TEXT))
        for key, reason in heapq.nsmallest(MAX_NAMED_SKIPPED, every)
    )


def shard_info(result: ShardResult, generation: int) -> ShardInfo:
    """The index's entry of the shard a worker wrote in the run numbered `generation`."""
    return ShardInfo(file=result.file, num_records=result.num_records,
                     num_bytes=result.num_bytes, sha256=result.sha256,
                     generation=generation, arrow_bytes=result.arrow_bytes)  # fmt: skip


def build_index(
    *,
    out: Storage,
    name: str,
    dataset: Dataset,
    options: PackOptions,
    plan: Plan,
    results: list[ShardResult],
    stats: PackStats,
) -> Index:
    """Merge the workers' results into the index of a fresh pack in `out` (shards in plan
    order)."""
    by_file = {r.file: r for r in results}
    shards: dict[str, list[ShardInfo]] = {}
    counts: dict[str, list[int]] = {}
    name_count: dict[str, int] = {}  # the count in the split's names, kept as it grows
    for spec in plan.shards:
        result = by_file[spec.file]
        shards.setdefault(spec.split, []).append(shard_info(result, generation=0))
        split = counts.setdefault(spec.split, [0] * len(dataset.classes))
        counts[spec.split] = [a + b for a, b in zip(split, result.label_counts, strict=False)]
        name_count.setdefault(spec.split, spec.num_shards)
    splits = {
        split: SplitInfo(
            num_records=sum(s.num_records for s in listed),
            class_counts=tuple(counts[split]),
            shards=tuple(listed),
            name_count=name_count[split],
        )
        for split, listed in shards.items()
    }
    # what the scan passed over with a reason, and what the workers refused: the first ones
    every = [*dataset.skipped, *(s for r in results for s in r.skipped)]
    return Index(
        out=out.root,
        storage=out,
        name=name,
        source=dataset.kind,
        schema=dataset.schema,
        encoding=options.encode,
        compression=options.compression,
        container_name=options.format,
        seed=options.seed if options.shuffle else None,
        shuffle=plan.shuffle,
        # what --append and --update pack new items with
        options=json_value(options.output_fields()),
        plan_digest=plan.digest,
        splits=splits,
        skipped=named_skipped(every),
        num_skipped=len(every),  # `skipped` names the first MAX_NAMED_SKIPPED
        ignored=dataset.ignored,
        ignored_files=tuple(dataset.ignored_files),  # the first ones, of `ignored` in all
        warnings=(*dataset.warnings, *plan.warnings),
        stats=stats,
        image_size=uniform_size(plan, results),
    )


def json_value(value: object) -> object:
    """A value as JSON gives it back (tuples as lists): what the index holds as read."""
    return json.loads(json.dumps(value))


def write_outputs(
    out: Storage, index: Index, results: list[ShardResult], index_files: bool, tfds: bool = True
) -> None:
    """Write what goes beside the shards of `index` (_beside's files, the index files of the
    shards in `results`); index.json not yet."""
    if not (index.tfds_readable and tfds):  # an earlier run's would point TFDS at shards it
        out.remove(METADATA_NAMES)  # cannot read
    for name, made in _beside(out, index, tfds).items():
        out.put(name, made())
    if index_files:
        offsets = {r.file: r.offsets for r in results}  # only these shards' files: new ones
        written = {split: replace(entry, shards=tuple(s for s in entry.shards if s.file in offsets))
                   for split, entry in index.splits.items()}  # fmt: skip
        write_index_files(out, replace(index, splits=written), offsets)


def restore_outputs(out: Storage, index: Index) -> tuple[str, ...]:
    """Write again those of the files beside the shards of `index` (in place, no gap in its
    numbering) that OUT lacks, as write_outputs writes them: a card or croissant.json removed
    by hand comes back; the shards and index.json are left alone. Returns their names."""
    beside = _beside(out, index, tfds=True)
    missing = tuple(name for name in beside if not out.lexists(name))
    for name in missing:
        out.put(name, beside[name]())
    return missing


def _beside(out: Storage, index: Index, tfds: bool) -> dict[str, Callable[[], bytes]]:
    """Each file that goes beside the shards of `index` (TFDS metadata unless not `tfds`, the
    container's split files, the Hub card, croissant.json), by name, with what makes its bytes
    (the card reads the user's part, croissant.json lists every shard: made only if written)."""
    made: dict[str, Callable[[], bytes]] = {}
    if index.tfds_readable and tfds:
        files = tfds_metadata(index, index.container.tfds_file_format)
        made.update({name: partial(bytes, data) for name, data in files.items()})
    for split, entry in index.splits.items():  # the container's files beside them
        shards = [(s.file, s.num_records, s.num_bytes) for s in entry.shards]
        for file, listing in index.container.split_files(index.name, split, shards).items():
            made[file] = partial(json_bytes, listing)
    # OUT's files but those an update retires, listed once if either is made: neither lists
    # another's file a pattern matches
    gone = set(index.retired or ())
    present = cache(lambda: [n for n, folder in out.entry_names() if not folder and n not in gone])
    made[CARD_NAME] = lambda: card(index, users_card(out), present())  # the user's part kept
    made[CROISSANT_NAME] = lambda: croissant(index, users_keys(out), present())  # and license
    return made


def commit_index(out: Storage, index: Index) -> None:
    """Write index.json: from now on readers see `index`."""
    out.put(INDEX_NAME, json_bytes(index.to_json()))
