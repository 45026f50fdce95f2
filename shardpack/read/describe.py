"""inspect: a readable summary of a pack output, from its index and a few records."""

from __future__ import annotations

import itertools
import os
from contextlib import suppress

import numpy as np

from shardpack.errors import is_count, printable
from shardpack.index import Index, SplitInfo, load_index
from shardpack.layout import INDEX_NAME
from shardpack.packing import facts
from shardpack.packing.objects import SIZES, num_object_classes, objects_of
from shardpack.packing.stats import NOT_NOTED
from shardpack.read.stream import iter_examples


def describe(
    out: str | os.PathLike, num_records: int = 3, storage_options: dict | None = None
) -> dict:
    """Summarize OUT: splits, shards, sizes, class histogram and the first few records.

    Args:
        out: the output folder or URL (s3://, gs://, memory://...) of a pack run.
        num_records: how many records of each split to show (image bytes left out); none
            of a split with a shard missing.
        storage_options: options for the URL's fsspec filesystem (credentials, endpoint...).

    Returns:
        A JSON-ready dict. A split's `num_records` is what its shards' counts add up to (what
        every reader reads); where index.json's own total says otherwise, `index_faults` holds
        a line naming the field and the value to set (verify lists it as a fault).
    """
    if not is_count(num_records, 0):
        raise ValueError(f"num_records must be an integer >= 0, got: {num_records!r}")
    index = load_index(out, storage_options)
    # one listing, not a request a shard on an object store
    sizes = {e.name: e.size for e in index.storage.listdir() if not e.is_dir}
    splits = {}
    faults = []
    for name, split in index.splits.items():
        if fault := split.num_records_fault(name):
            faults.append(f"{index.storage.path(INDEX_NAME)}: {fault}")
        splits[name] = _split(index, name, split, sizes, num_records)
    objects = objects_of(index.schema)
    return {
        "out": index.out,
        "name": index.name,
        "source": index.source,
        "encoding": index.encoding,
        "compression": index.compression,
        "container": index.container_name,
        "tfds_metadata": index.tfds_readable,
        "num_classes": len(index.classes),
        # COCO, YOLO, VOC: the images hold no label, their objects' class feature does
        "num_object_classes": num_object_classes(index.schema),
        "features": index.schema.to_json(),
        "splits": splits,
        "unwritten_splits": list(index.unwritten_splits),  # every image skipped: not listed
        "index_faults": faults,
        # the first ones; num_skipped counts them all
        "skipped": [s.to_json() for s in index.skipped],
        "num_skipped": index.num_skipped,
        "ignored": index.ignored,
        "stats": index.stats.to_json(),
        "duplicates": index.duplicates,  # None in an index from before
        "summaries": _named(index.summaries, objects),
        "generation": index.generation,
        "history": [run.to_json() for run in index.history],
    }


def _split(index: Index, name: str, split: SplitInfo, sizes: dict[str, int], num_records: int
           ) -> dict:  # fmt: skip
    """What describe says of one split: its counts, its shards (each as OUT lists it: `sizes`,
    file -> bytes) and its first `num_records` records, none where a shard is missing or of
    another size than the index says (inspect marks it MISSING or WRONG SIZE)."""
    samples = []
    whole = all(sizes.get(s.file) == s.num_bytes for s in split.shards)
    records = iter_examples(index, name) if whole else iter(())
    for record in itertools.islice(records, num_records):
        record["image_bytes"] = len(record.pop("image"))
        label = record.get("label")
        if isinstance(label, int):
            record["class"] = index.classes[label]
        elif isinstance(label, np.ndarray):  # multi-label
            record["class"] = [index.classes[i] for i in label.tolist()]
        samples.append({name: _json_value(value) for name, value in record.items()})
    return {
        "num_records": split.shard_records,
        "num_shards": len(split.shards),
        "num_bytes": sum(s.num_bytes for s in split.shards),
        "class_counts": dict(zip(index.classes, split.class_counts, strict=False)),
        "shards": [
            {
                "file": s.file,
                "num_records": s.num_records,
                "num_bytes": s.num_bytes,
                "missing": s.file not in sizes,
                "size_on_disk": sizes.get(s.file),
                "generation": s.generation,
            }
            for s in split.shards
        ],
        "samples": samples,
    }


def _named(summaries: object, objects) -> dict:
    """The index's split summaries, each object class id (facts.CLASSES) as its class name."""
    if not isinstance(summaries, dict):
        return {}
    classes = None if objects is None else objects.classes
    named = {}
    for split, summary in summaries.items():
        counts = summary.get(facts.CLASSES) if isinstance(summary, dict) else None
        if classes and isinstance(counts, dict):
            ids = {str(i): name for i, name in enumerate(classes)}
            summary = {**summary, facts.CLASSES: {ids.get(k, k): n for k, n in counts.items()}}
        named[split] = summary
    return named


SIZE_NAMES = tuple(name for name, _ in SIZES)

# What inspect prints of each run in a grown dataset's history.
_RUN = "generation {generation} ({when}): {mode}, added {added:,}, changed {changed:,}, " \
    "removed {removed:,}, {shards_rewritten:,} {shards} rewritten"  # fmt: skip


def history_lines(history: list) -> list[str]:
    """The index's history (the runs of --append and --update), read as untrusted: an entry
    not as pack writes it prints nothing."""
    said = []
    for run in history[-10:]:
        with suppress(KeyError, TypeError, ValueError, AttributeError, IndexError):
            shards = "shard" if run["shards_rewritten"] == 1 else "shards"
            said.append(printable(_RUN.format(**{**run, "shards": shards})))
    return said


def summary_lines(summary: object) -> list[str]:
    """What inspect prints of a split's summary (packing.stats), read as untrusted: a part
    not as pack writes it prints nothing."""
    said = []
    with suppress(KeyError, TypeError, ValueError, AttributeError):
        said.append(_sizes_line(summary))
    with suppress(KeyError, TypeError, ValueError, AttributeError):
        said.append(_bytes_line(summary))
    with suppress(KeyError, TypeError, ValueError, AttributeError):
        said.append(_objects_line(summary))
    for what in ("formats", "channels", "orientations", "skipped", "boxes_dropped"):
        with suppress(KeyError, TypeError, ValueError, AttributeError):
            counts = ", ".join(f"{printable(str(k))} {_num(n)}" for k, n in summary[what].items())
            said.append(f"  {what.replace('_', ' ')}: {counts}")  # as pack says it
    with suppress(KeyError, TypeError, ValueError, AttributeError):
        said.extend(_dropped_in_lines(summary))
    return said


def _dropped_in_lines(summary: dict) -> list[str]:
    """A line for each reason boxes were dropped for, naming the records that lost them (the
    first facts.MAX_NAMED_DROPS by key) and how many each lost; none from an index before."""
    said = []
    for reason, named in summary.get(facts.DROPPED_IN, {}).items():
        total = summary[facts.DROPPED][reason]
        listed = ", ".join(f"{printable(str(k))} {_num(n)}" for k, n in named.items())
        some = sum(named.values()) < total  # named: every record, or the first by key
        said.append(f"  boxes dropped, {printable(str(reason))}: {listed}"
                    + (f" (the first {len(named)} records by key)" if some else ""))  # fmt: skip
    return said


def _sizes_line(summary: dict) -> str:
    """One line of a split's image sizes: median, least and greatest; unknown where records
    were packed before shardpack noted them (a dataset grown since)."""
    if "width" not in summary and summary["records"]:
        return f"  images: {NOT_NOTED}"
    width, height = summary["width"], summary["height"]
    # least and greatest side by side, not as sizes: the widest image need not be the tallest
    return (f"  images: {_num(width['median'])}x{_num(height['median'])} median; widths "
            f"{_num(width['min'])} to {_num(width['max'])}, heights {_num(height['min'])} to "
            f"{_num(height['max'])}")  # fmt: skip


def _bytes_line(summary: dict) -> str:
    """One line of a split's bytes per image, median and in all: its source's (before any
    resize or re-encoding) and as stored (the records'); stored unknown where records were
    packed before shardpack noted it (an index from before, or a dataset grown since)."""
    stored = summary.get("stored_bytes")
    return (f"  bytes per image: source {_bytes_said(summary['bytes'])}; stored "
            f"{NOT_NOTED if stored is None else _bytes_said(stored)}")  # fmt: skip


def _bytes_said(figures: dict) -> str:
    """A median of bytes, and their total where the summary has one (none before totals)."""
    total = figures.get("total")
    return f"{_num(figures['median'])} median" + (f", {_num(total)} in all" if total else "")


def _objects_line(summary: dict) -> str:
    """One line of a split's objects: how many, in how many images, per image, per class
    (the most common first) and by COCO's box size."""
    count, without = facts.object_counts(summary)
    per_image = {int(k): n for k, n in summary[facts.PER_IMAGE].items()}
    images = sum(per_image.values())
    classes = sorted(summary.get(facts.CLASSES, {}).items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{printable(str(k))[:20]} {_num(n)}" for k, n in classes[:8])
    more = f" (+{len(classes) - 8} classes)" if len(classes) > 8 else ""
    sizes = summary.get(facts.SIZES, {})
    return (
        f"  objects: {_num(count)} in {_num(images)} images ({_num(without)} without), "
        f"{_num(count / max(images, 1))} per image, at most {_num(max(per_image))}"
        + (f"; {shown}{more}" if shown else "")
        + "; boxes "
        + ", ".join(f"{k} {_num(sizes.get(k, 0))}" for k in SIZE_NAMES)
    )


def _num(value: object) -> str:
    """A number from the index, shown with thousands separators; anything else refused."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(value)
    if isinstance(value, float) and 1000 <= abs(value) < 1e15:  # a median of bytes: 10,410
        return f"{round(value):,}"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def _json_value(value: object) -> object:
    """A record value as JSON holds it: arrays as (nested) lists, bytes as text, or as their
    count where they are no text (a mask's PNG: its bytes decoded were noise on a terminal)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return f"<{len(value):,} bytes>"
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value
