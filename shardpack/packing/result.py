"""What a pack, an append or an update returns: the index it committed and the run's figures."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from shardpack.errors import plural
from shardpack.index import Index
from shardpack.packing.boxes import index_geometry
from shardpack.packing.facts import DROPPED
from shardpack.packing.stats import reasons_of
from shardpack.packing.tfdsmeta import tfds_names
from shardpack.schema import Feature, Schema


@dataclass(frozen=True)
class PackResult:
    """What a pack run produced: the index it wrote and a few headline figures."""

    out: str
    index: Index
    num_records: int
    num_skipped: int
    seconds: float
    num_reused: int = 0  # shards kept from an earlier run by resume
    num_shards: int = 0  # shards in the plan, kept ones included
    new_records: int = 0  # records this run wrote (not kept): what images_per_second rates
    notes: tuple[str, ...] = ()  # about this run alone, one line each: fewer workers than asked
    grow: dict | None = None  # --append, --update: added, changed, removed, shards rewritten

    def to_json(self) -> dict:
        """The run's summary as a JSON-ready dict (what `pack --json` prints)."""
        index = self.index
        return {
            "out": self.out,
            "name": self.index.name,
            "records": self.num_records,
            "skipped": self.num_skipped,
            "ignored": index.ignored,
            "ignored_files": list(index.ignored_files[:20]),
            "warnings": [
                *index.warnings,
                *index.container.naming_notes(
                    (index.options or {}).get("wds_naming", "shardpack"),
                    index.schema,
                    _formats(index),
                ),
                *index.container.file_notes(
                    {name: [s.file for s in split.shards] for name, split in index.splits.items()}
                ),
                *_tfds_unnamed(index),
                *self.notes,
            ],
            "splits": {
                name: {
                    "num_records": split.num_records,
                    "num_shards": len(split.shards),
                    "num_bytes": sum(s.num_bytes for s in split.shards),
                }
                for name, split in self.index.splits.items()
            },
            **(self._run_stats() if self.grow else self._pack_stats()),
            "lossless": index.stats.lossless or 0,
            "turned_upright": _turned_upright(index),
            "shards_kept": self.num_reused,
            "new_records": self.new_records,
            "container": self.index.container_name,
            "compression": self.index.compression,
            "tfds_metadata": self.index.tfds_readable,
            "skipped_items": [s.to_json() for s in index.skipped[:20]],
            # of the items index.json names (all, or the first MAX_NAMED_SKIPPED)
            "skip_reasons": reasons_of(s.reason for s in index.skipped),
            "duplicates": {**index.duplicates, "listed": index.duplicates["listed"][:20]},
            "num_classes": len(self.index.classes),
            "classes": list(self.index.classes[:SUMMARY_CLASSES]),
            "features": {name: feature_type(f) for name, f in self.index.schema.extras.items()},
            "object_classes": _object_classes(self.index.schema),
            "grow": self.grow,
            "shuffle": index.shuffle,
            "seed": index.seed,
            "url_failures": index.stats.url_failures or {},
            "boxes_dropped": _boxes_dropped(index.summaries or {}),
            "unwritten_splits": list(index.unwritten_splits),
        }

    def _run_stats(self) -> dict:
        """A grow's time, rate and workers: this run's (its new items'), not the dataset's
        first pack's; a grow that wrote nothing has no rate and ran no worker."""
        wrote = self.new_records and self.seconds
        workers = self.index.stats.workers if wrote else 0
        rate = round(self.new_records / self.seconds, 1) if wrote else None
        return {"seconds": round(self.seconds, 3), "images_per_second": rate, "workers": workers}

    def _pack_stats(self) -> dict:
        """A fresh pack's time, rate and workers, as its index keeps them."""
        stats = self.index.stats
        return {"seconds": stats.seconds, "images_per_second": stats.images_per_second,
                "workers": stats.workers}  # fmt: skip


def _boxes_dropped(summaries: dict) -> dict[str, int]:
    """The boxes a transform left nothing of (packing/boxes.py), by reason, over every split."""
    dropped: Counter[str] = Counter()
    for summary in summaries.values():
        dropped.update(summary.get(DROPPED, {}))
    return dict(sorted(dropped.items()))


def _tfds_unnamed(index: Index) -> list[str]:
    """A line where TFDS metadata leaves out splits whose names TFDS cannot parse (a '.'):
    listed, they made tfds.builder_from_directory(OUT) refuse every split."""
    names = [name for name in index.splits if not tfds_names(name)]
    if not index.tfds_readable or not names:
        return []
    said = ", ".join(map(repr, names[:3])) + (", ..." if len(names) > 3 else "")
    return [f"the TFDS metadata leaves out {plural(len(names), 'split')} ({said}): TFDS reads "
            f"no '.' in a split name; name {'it' if len(names) == 1 else 'them'} with '_' "
            f"instead ({names[0].replace('.', '_')!r}) for TFDS"]  # fmt: skip


def _formats(index: Index) -> list[str]:
    """The formats its images are stored in, by the splits' statistics."""
    summaries = (index.summaries or {}).values()
    return sorted({f for s in summaries for f, n in s.get("formats", {}).items() if n})


def _turned_upright(index: Index) -> int:
    """The images an --encode keep pack stored re-encoded upright instead of kept as they came:
    those with an EXIF turn, in a container whose readers show them turned (datasets), where
    their boxes, keypoints or masks are stored beside them (worker.write_shard's `upright`)."""
    if not index.container.shows_upright or index.encoding != "keep":
        return 0
    if not index_geometry(index):
        return 0
    turns = {str(o) for o in range(2, 9)}
    summaries = (index.summaries or {}).values()
    return sum(n for s in summaries for o, n in s.get("orientations", {}).items() if o in turns)


# The summary names the first this many classes: enough to see a list changed, bounded for
# a dataset of thousands.
SUMMARY_CLASSES = 20


def feature_type(feature: Feature) -> str:
    """A feature's type in a word or three: "class", "class list", "text", "int64",
    "float32 list", "float32 list of 4"."""
    kind = "class" if feature.classes is not None else "text" if feature.text else feature.dtype
    if not feature.shape:
        return kind
    return f"{kind} list of {feature.row}" if feature.row else f"{kind} list"


def _object_classes(schema: Schema) -> dict | None:
    """An object dataset's classes (its boxes' class feature's, objects/label), as num_classes
    and classes give the images': {feature, num_classes, classes (the first few)}; None for a
    dataset without."""
    from shardpack.packing.objects import objects_of  # numpy: not for `pack --help`

    found = objects_of(schema)
    if found is None or not found.classes:
        return None
    return {"feature": found.label, "num_classes": len(found.classes),
            "classes": list(found.classes[:SUMMARY_CLASSES])}  # fmt: skip
