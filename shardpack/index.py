"""index.json, the contract between pack and readers: the document as dataclasses, loaded,
validated (everything read is hostile) and written back (packing/merge.py builds it)."""

from __future__ import annotations

import collections
import json
import os
import re
from dataclasses import dataclass, field, replace
from itertools import islice

from shardpack.containers import CONTAINERS, Container
from shardpack.errors import (
    FileAccessError,
    IndexFormatError,
    Option,
    is_count,
    is_machine_limit,
    shortened,
)
from shardpack.layout import INDEX_NAME, JOURNAL_FOLDER, JOURNAL_NAME, LOCK_NAME
from shardpack.options import ENCODINGS, SHUFFLES
from shardpack.schema import V1_DTYPES, Schema, check_values
from shardpack.storage import Storage, storage_at

# The most bytes of index.json read: a million shards with their skipped files fit many times.
MAX_INDEX_BYTES = 1 << 30
# The most lists and objects an index.json may hold (json makes each a Python object of ~60
# bytes and more): a shard is two, a skipped file one; a million shards fit twice over.
MAX_INDEX_CONTAINERS = 5_000_000
# The most values (numbers, strings, lists, objects: json_values) it may hold: a shard is six, a
# class about three a split; a million shards and a million classes in three splits fit twice
# over. Past it, planted: 100 MB of two-letter strings was 1.6 GB once parsed (20M of them).
MAX_INDEX_VALUES = 32_000_000
# The skipped items pack names in index.json (as the sources name the first ignored files),
# each key and reason cut to MAX_SKIPPED_TEXT characters: `num_skipped` counts them all.
MAX_NAMED_SKIPPED = 1000
MAX_SKIPPED_TEXT = 1000
# The entries of a folder without index.json looked at for a pack inside it (the demo's
# OUT/shards, a folder of outputs): the error path stays bounded on a folder of a million images.
MAX_LOOKED_FOR_PACKS = 1000
# What the pack summary, inspect, verify and the card say of a split whose every image was
# skipped: pack and grow leave it out of `splits` and OUT (no shard of no record: `datasets`
# refuses a dataset one of whose splits holds no data); its summary says what was skipped.
UNWRITTEN = "every image skipped, not written"
# A JSON string with its escapes: what the count of lists and objects passes over.
# What json_values() keeps of a planted file (quotes and what it counts), and reads at a time.
_UNCOUNTED = bytes(set(range(256)) - set(b'",[{'))
_QUOTE = ord('"')
_CHUNK = 16 << 20
_JSON_STRING = rb'"(?:[^"\\]++|\\.)*+"'  # matched with re.DOTALL
# A \u escape of a lone surrogate but those of a file name's undecodable bytes (U+DC80 to
# U+DCFF, Python's surrogateescape): no text, so no output (a report, --json, a grown index)
# could write it. Pack never writes one (storage/atomic.json_bytes writes U+FFFD for it).
_HIGH = rb"\\u[dD][89abAB][0-9a-fA-F]{2}"
_NO_NAME = (rb"(?<!\\)(?:\\\\)*(" + _HIGH + rb"(?!\\u[dD][c-fC-F])|(?<!" + _HIGH
            + rb")\\u[dD](?:[cC][0-7]|[d-fD-F][0-9a-fA-F])[0-9a-fA-F])")  # fmt: skip
FORMAT = "shardpack-index"
# Version 2 added the typed feature schema (`features`: name -> {dtype, shape, text, classes});
# version 1 (`features`: name -> dtype, `coarse_classes`) is still read.
VERSION = 2
READABLE_VERSIONS = (1, 2)
LEGACY_CONTAINER = "tfrecord"  # what an index without `container` (written before it) holds
# The most records a split's shards may claim in all: far past any dataset, and within what a
# reader's counts hold (a range of 10**30 positions is an OverflowError, not a count).
MAX_SPLIT_RECORDS = 1 << 48
# The largest count or size index.json may give: exact as a float (what charts and numpy take;
# 10**30 was an OverflowError's traceback in report), and far past any real one.
MAX_COUNT = 1 << 53
# A shard name is a plain file name inside OUT: no folders, no climbing out, nothing hidden.
SAFE_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
# What a record's `format` may say: the encodings pack stores ("keep" stores one of these).
STORED_FORMATS = tuple(e for e in ENCODINGS if e != "keep")
_FORMAT_BYTES = {f.encode() for f in STORED_FORMATS}
# A record's image sides may be what an image header holds, at most 32 bits (TIFF's; PNG's are
# 31, JPEG's and WebP's fewer), and at least one pixel; its channels what pack stores: gray,
# gray and alpha, RGB or RGBA (a JPEG of other channel counts is stored as PNG).
MOST_SIDE = 2**32 - 1
MOST_CHANNELS = 4


@dataclass(frozen=True)
class ShardInfo:
    """One shard as the index records it."""

    file: str
    num_records: int
    num_bytes: int
    sha256: str
    generation: int = 0  # the run that wrote it: 0 the first pack, each grow one more
    # its records' bytes as Arrow holds them (a Parquet shard's, `datasets`' num_bytes); None:
    # not a table, or written before shardpack counted them
    arrow_bytes: int | None = None

    def to_json(self) -> dict:
        """The shard as index.json lists it."""
        arrow = {} if self.arrow_bytes is None else {"arrow_bytes": self.arrow_bytes}
        return {"file": self.file, "num_records": self.num_records, "num_bytes": self.num_bytes,
                "sha256": self.sha256, "generation": self.generation, **arrow}  # fmt: skip


@dataclass(frozen=True)
class SplitInfo:
    """One split: its record count, per-class counts and shards in order; a grown split's
    shard names keep the count it was first packed with (`name_count`), and a grow numbers its
    next shard `next_shard` (packing/grow.py)."""

    num_records: int
    class_counts: tuple[int, ...]
    shards: tuple[ShardInfo, ...]
    name_count: int | None = None  # None: an index before it (names count the shards)
    next_shard: int | None = None  # None: never grown (the next is numbered after the last)

    @property
    def names_count(self) -> int:
        """The count in the split's shard names: the one it was first packed with, kept as it
        grows (an index written before `name_count` names its shard count)."""
        return self.name_count if self.name_count is not None else len(self.shards)

    @property
    def next_number(self) -> int:
        """The number a grow gives the split's next shard, before any name OUT holds."""
        return self.next_shard if self.next_shard is not None else len(self.shards)

    @property
    def shard_records(self) -> int:
        """The records its shards' own counts add up to: what every reader reads of the split
        (each shard is held to its count as it is read), whatever `num_records` says."""
        return sum(s.num_records for s in self.shards)

    def num_records_fault(self, name: str) -> str | None:
        """What is wrong with split `name`'s `num_records` in index.json, a total of its shards'
        counts that a hand or a tool may have changed alone, naming the value to set; None
        where it is their total."""
        if self.num_records == self.shard_records:
            return None
        return (f"'num_records' of split {name!r} is {self.num_records}, but its shards' counts "
                f"add up to {self.shard_records}: set it to {self.shard_records}")  # fmt: skip

    def class_counts_fault(
        self, name: str, held: list[int], classes: tuple[str, ...]
    ) -> str | None:
        """What is wrong with split `name`'s `class_counts` in index.json against the labels
        its records hold (`held`, a count a class, as verify counts them reading every record),
        naming the first classes that differ and the counts to set; None where they agree."""
        if tuple(held) == self.class_counts:
            return None
        size = max(len(held), len(self.class_counts))
        said, have = (
            [*counts, *[0] * (size - len(counts))] for counts in (self.class_counts, held)
        )
        apart = [i for i in range(size) if said[i] != have[i]]
        first = ", ".join(f"{repr(classes[i]) if i < len(classes) else f'#{i}'} {said[i]} "
                          f"against {have[i]}" for i in apart[:3])  # fmt: skip
        more = f" and {len(apart) - 3} more" if len(apart) > 3 else ""
        return (f"'class_counts' of split {name!r} disagrees with the labels its records hold "
                f"({first}{more}): set it to {held}")  # fmt: skip

    def to_json(self) -> dict:
        """The split as index.json writes it."""
        doc = {"num_records": self.num_records, "class_counts": list(self.class_counts),
               "shards": [s.to_json() for s in self.shards]}  # fmt: skip
        if self.name_count is not None:
            doc["name_count"] = self.name_count
        if self.next_shard is not None:
            doc["next_shard"] = self.next_shard
        return doc


@dataclass(frozen=True)
class Skipped:
    """An item pack passed over (the first MAX_NAMED_SKIPPED), each text cut short."""

    key: str
    reason: str

    def to_json(self) -> dict:
        """The item as index.json's `skipped` lists it."""
        return {"key": self.key, "reason": self.reason}


@dataclass(frozen=True)
class Run:
    """One run of --append or --update, as the index's `history` keeps it."""

    generation: int
    when: str  # UTC, 2026-01-31T12:00:00Z
    mode: str  # "append" | "update"
    added: int
    changed: int
    removed: int
    shards_rewritten: int

    def to_json(self) -> dict:
        """The run as index.json's `history` lists it."""
        return {name: getattr(self, name) for name in _RUN_FIELDS}


@dataclass(frozen=True)
class PackStats:
    """How the dataset's latest run went (index.json's `stats`)."""

    seconds: float | None = None
    images_per_second: float | None = None  # None: no time measured
    workers: int | None = None
    lossless: int | None = None  # --encode keep's images made PNG (None: an index before it)
    url_failures: dict[str, int] | None = None  # kind -> failures.jsonl rows of it

    def to_json(self) -> dict:
        """The statistics as index.json writes them (lossless and url_failures when known)."""
        doc = {"seconds": self.seconds, "images_per_second": self.images_per_second,
               "workers": self.workers}  # fmt: skip
        if self.lossless is not None:
            doc["lossless"] = self.lossless
        if self.url_failures is not None:
            doc["url_failures"] = dict(self.url_failures)
        return doc


@dataclass(frozen=True, kw_only=True)
class Index:
    """index.json as dataclasses: every field the document holds, read by from_json (which
    refuses what pack does not write) and written back by to_json. `out` is OUT as messages
    name it (a path or URL); `storage` reads the files in it."""

    out: str
    name: str
    schema: Schema
    encoding: str
    compression: str
    splits: dict[str, SplitInfo]
    container_name: str = LEGACY_CONTAINER  # the shards' file format (shardpack.containers)
    storage: Storage | None = None  # OUT's; from_json always sets it
    image_size: tuple[int, int] | None = None  # (height, width) every image has; None: they vary
    image_size_told: bool = True  # False: an index before `image_size` (sizes unknown)
    version: int = VERSION  # the version read; to_json writes VERSION
    source: str | None = None  # the source's kind (None: an index before it)
    seed: int | None = None  # the shuffle's seed; None: not shuffled
    shuffle: str | None = None  # options.SHUFFLES: the shuffle used; None: an index before it
    options: dict | None = None  # PackOptions.output_fields() as JSON: what a grow packs with
    generation: int = 0  # the latest run: 0 the first pack, each grow one more
    history: tuple[Run, ...] = ()  # the last MAX_HISTORY grows
    plan_digest: str | None = None  # the plan the latest run wrote (its journal's)
    skipped: tuple[Skipped, ...] = ()  # the first MAX_NAMED_SKIPPED of num_skipped
    num_skipped: int = 0
    ignored: int = 0  # files the source passed over as no image
    ignored_files: tuple[str, ...] = ()  # the first ones of `ignored`
    warnings: tuple[str, ...] = ()
    stats: PackStats = PackStats()
    duplicates: dict | None = None  # packing/duplicates.summary's JSON (None: before it)
    summaries: dict | None = None  # packing/stats' per-split summaries (None: before them)
    retired: tuple[str, ...] | None = None  # shards an --update replaced, removed once in place
    # index.json's identity (storage.identity) as load_index found it before reading it: a
    # reader tells a later index by it (read/changed.py); None: not loaded, or the store has none
    loaded_as: tuple[int, ...] | None = field(default=None, compare=False, repr=False)

    @property
    def container(self) -> Container:
        """The container of the shards (shardpack.containers), loaded on first use."""
        return CONTAINERS[self.container_name]

    @property
    def tfds_readable(self) -> bool:
        """Whether TFDS can load these shards, so that pack writes its metadata beside them.

        TFDS opens TFRecord shards without a compression type (`TfRecordFileAdapter` in
        tensorflow_datasets/core/file_adapters.py), so GZIP shards get no TFDS metadata; it
        reads ArrayRecord too, and has no adapter for tar shards.
        """
        return self.compression == "none" and self.container.tfds_file_format is not None

    @property
    def classes(self) -> tuple[str, ...]:
        """The `label` feature's class names."""
        return self.schema.classes

    @property
    def unwritten_splits(self) -> tuple[str, ...]:
        """The splits whose every image was skipped (UNWRITTEN): summarized with no record
        (packing/stats.py), not listed in `splits`."""
        told = self.summaries or {}
        return tuple(name for name, summary in told.items()
                     if name not in self.splits and isinstance(summary, dict)
                     and summary.get("records") == 0)  # fmt: skip

    @property
    def shards(self) -> tuple[ShardInfo, ...]:
        """Every split's shards, split by split."""
        return tuple(s for split in self.splits.values() for s in split.shards)

    def to_json(self) -> dict:
        """The index.json document, its keys in the order pack writes them (a document an
        older version wrote comes back as this version's)."""
        doc = {"format": FORMAT, "version": VERSION, "name": self.name}
        doc.update(_some(source=self.source))
        doc.update(classes=list(self.classes), features=self.schema.to_json(),
                   encoding=self.encoding, compression=self.compression,
                   container=self.container_name, seed=self.seed)  # fmt: skip
        doc.update(_some(shuffle=self.shuffle))
        doc.update(_some(options=self.options))
        doc.update(generation=self.generation, history=[r.to_json() for r in self.history])
        doc.update(_some(plan_digest=self.plan_digest))
        doc.update(
            splits={name: split.to_json() for name, split in self.splits.items()},
            skipped=[s.to_json() for s in self.skipped],
            num_skipped=self.num_skipped,
            ignored=self.ignored,
            ignored_files=list(self.ignored_files),
            warnings=list(self.warnings),
            stats=self.stats.to_json(),
        )
        if self.image_size_told:
            doc["image_size"] = list(self.image_size) if self.image_size is not None else None
        doc.update(_some(duplicates=self.duplicates, summaries=self.summaries))
        doc.update(_some(retired=list(self.retired) if self.retired is not None else None))
        return doc

    @classmethod
    def from_json(cls, out: str | os.PathLike | Storage, doc: object) -> Index:
        """Validate an index document for the output folder or URL `out`; refuse, in one line
        naming index.json, anything pack does not write.

        Raises:
            IndexFormatError: not an index, an unknown version or container, a value of the
                wrong type, or a shard name that is not a plain file name inside OUT.
        """
        return _from_json(storage_at(out), doc)

    def shard_path(self, shard: ShardInfo) -> str:
        """The shard's path or URL inside OUT (the name was checked safe at load)."""
        return self.storage.path(shard.file)

    def split(self, name: str) -> SplitInfo:
        """The named split, or an error that lists the splits there are."""
        if name not in self.splits:
            some = f"it has {', '.join(sorted(self.splits))}: name one of those"
            what = (f"split {name!r}: {UNWRITTEN} (index.json lists the items skipped)"
                    if name in self.unwritten_splits else f"no split {name!r}")  # fmt: skip
            raise IndexFormatError(
                f"{self.storage.path(INDEX_NAME)}: {what}; "
                f"{some if self.splits else 'it has none (nothing packed)'}"
            )
        return self.splits[name]


def _some(**fields: object) -> dict:
    """The fields whose value is not None: the optional ones an index may lack."""
    return {key: value for key, value in fields.items() if value is not None}


def _out_kind(storage: Storage) -> str | None:
    """What OUT itself is: "dir", "file", or None when it is not there. A store that cannot say
    (an error asking) counts as a folder: the message then names the missing index.json."""
    try:
        return storage.kind()
    except OSError:
        return "dir"


def _packs_inside(storage: Storage) -> list[str]:
    """The folders right inside OUT that hold an index.json, by name, among its first
    MAX_LOOKED_FOR_PACKS entries: the packs a folder above them was passed for."""
    try:
        folders = [name for name, is_dir in islice(storage.entry_names(), MAX_LOOKED_FOR_PACKS)
                   if is_dir]  # fmt: skip
        return sorted(f for f in folders if storage.child(f).kind(INDEX_NAME) == "file")
    except OSError:  # a hint only: the error it joins says what is missing
        return []


def _run_began(storage: Storage) -> bool:
    """Whether a pack run has begun in OUT: its lock (a run going) or its journal (a run stopped
    after its plan) is there. A run stopped before its plan leaves OUT as it found it, so a
    folder of neither (a dataset's own, passed to inspect) has no run to resume."""
    try:
        return any(storage.kind(name) is not None for name in (LOCK_NAME, JOURNAL_NAME,
                                                               JOURNAL_FOLDER))  # fmt: skip
    except OSError:  # a hint only: the error it picks says what is missing either way
        return True


def _a_file(root: str) -> IndexFormatError:
    """The error of a file (a shard, an image) passed as OUT."""
    return IndexFormatError(f"{root}: is a file, not a pack output; pass the folder that holds "
                            f"index.json and the shards (OUT of pack), not one file")  # fmt: skip


def load_index(out: str | os.PathLike | Storage, storage_options: dict | None = None) -> Index:
    """Load OUT/index.json and refuse anything it does not fully understand.

    Args:
        out: the output folder or URL (s3://, gs://, memory://...) of a pack run.
        storage_options: options for the URL's fsspec filesystem (credentials, endpoint...).

    Raises:
        IndexFormatError: missing, not JSON, unknown format or version, wrong types, or a shard
            name that is absolute, hidden or climbs out of OUT.
        StorageError: the URL's filesystem package is missing.
    """
    storage = storage_at(out, storage_options)
    root = storage.root.rstrip("/")
    if root.rsplit("/", 1)[-1] == INDEX_NAME:  # OUT/index.json given for OUT
        raise IndexFormatError(f"{root}: is the index itself; pass the folder that holds it, "
                               f"{root.rsplit('/', 1)[0]}")  # fmt: skip
    path = storage.path(INDEX_NAME)
    seen = storage.identity(INDEX_NAME)  # before the read: an index replaced between is told
    try:  # no link followed: OUT's files are opened as they are (Storage.open)
        with storage.open(INDEX_NAME) as blob:
            if blob.size > MAX_INDEX_BYTES:
                raise IndexFormatError(f"{path}: unreadable ({blob.size:,} bytes, over "
                                       f"{MAX_INDEX_BYTES:,}); rerun pack to rewrite "
                                       "it")  # fmt: skip
            text = blob.pread(blob.size, 0)
    except FileNotFoundError:
        kind = _out_kind(storage)
        if kind is None:
            raise IndexFormatError(f"{storage.root}: no such folder; pass the OUT of a pack "
                                   "run") from None  # fmt: skip
        if kind == "file":  # an object store's: its name then a slash is not there
            raise _a_file(root) from None
        if inner := _packs_inside(storage):
            named = ", ".join(inner[:3]) + (", ..." if len(inner) > 3 else "")
            inside = (f"its folder {named} is one: pass" if len(inner) == 1 else
                      f"its folders {named} are: pass one of them, such as")  # fmt: skip
            raise IndexFormatError(f"{path}: not found; {storage.root} is no shardpack output, "
                                   f"but {inside} {root}/{inner[0]}") from None  # fmt: skip
        if not _run_began(storage):
            raise IndexFormatError(f"{path}: not found; {storage.root} is no shardpack output "
                                   "(no pack run has written into it): pass the OUT of a pack "
                                   "run") from None  # fmt: skip
        raise IndexFormatError(
            f"{path}: not found; is {storage.root} a shardpack output? (pack writes index.json "
            "last: a run still going has none yet, and one that was stopped has none: rerun it "
            "with ",
            Option("resume", True),
            ")",
        ) from None
    except NotADirectoryError:
        raise _a_file(root) from None
    except PermissionError as e:  # how the machine is set up, not a bad index
        raise FileAccessError.from_os_error(e, path) from None
    except OSError as e:  # a folder, a link, a FIFO under the name
        if is_machine_limit(e):  # the index is not at fault
            raise FileAccessError.from_os_error(e, path) from None
        raise IndexFormatError(f"{path}: unreadable ({e}); rerun pack to rewrite it") from None
    if (past := past_bounds(text)) is not None:
        raise IndexFormatError(f"{path}: unreadable ({past}); rerun pack to rewrite it")
    if b"\\u" in text and (lone := re.search(_NO_NAME, text)):
        raise IndexFormatError(f"{path}: unreadable (a lone surrogate, {lone[1].decode()}, at "
                               f"byte {lone.start(1):,}); rerun pack to rewrite it")  # fmt: skip
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:  # RecursionError: nested too deeply
        raise IndexFormatError(f"{path}: unreadable ({e}); rerun pack to rewrite it") from None
    return replace(index_from_document(storage, doc), loaded_as=seen)


def json_values(text: bytes, limit: int) -> int:
    """How many JSON values `text` holds at least: its `,`, `[` and `{` outside strings (exact
    only once the quick count, strings included, passes `limit`). Past it, the escapes go
    and every byte but quotes and those three, and what is left is read a chunk at a time: a
    byte is in a string after an odd count of quotes (a regex substitution over a planted
    file took 4x its size in small objects)."""
    rough = text.count(b",") + text.count(b"[") + text.count(b"{")
    if rough <= limit:
        return rough
    import numpy as np  # a planted file's count: `import shardpack` stays numpy-free

    plain = text.replace(b"\\\\", b"").replace(b'\\"', b"")  # no quote inside a string now
    kept = plain.translate(None, _UNCOUNTED)
    found, quotes = 0, 0  # quotes before the chunk
    for start in range(0, len(kept), _CHUNK):
        chunk = np.frombuffer(kept, np.uint8, min(_CHUNK, len(kept) - start), start)
        quote = chunk == _QUOTE
        inside = (np.cumsum(quote, dtype=np.uint8) + quotes) & 1  # mod 256 keeps the parity
        found += int(np.count_nonzero(~quote & (inside == 0)))
        quotes = (quotes + int(np.count_nonzero(quote))) & 1
    return found


def past_bounds(text: bytes) -> str | None:
    """What JSON `text` holds past what an index may (MAX_INDEX_CONTAINERS lists and objects,
    MAX_INDEX_VALUES values: each a Python object once parsed), counted unparsed; None if
    nothing."""
    if (containers := _containers(text)) > MAX_INDEX_CONTAINERS:
        return f"{containers:,} lists and objects, over {MAX_INDEX_CONTAINERS:,}"
    if (found := json_values(text, MAX_INDEX_VALUES)) > MAX_INDEX_VALUES:
        return f"{found:,} values, over {MAX_INDEX_VALUES:,}"
    return None


def _containers(text: bytes) -> int:
    """How many lists and objects the JSON `text` opens: its `[` and `{` outside strings."""
    rough = text.count(b"[") + text.count(b"{")  # an upper bound, and fast
    if rough <= MAX_INDEX_CONTAINERS:
        return rough
    bare = re.sub(_JSON_STRING, b"", text, flags=re.DOTALL)
    return bare.count(b"[") + bare.count(b"{")


def index_from_document(out: str | os.PathLike | Storage, doc: object) -> Index:
    """Validate an index document (as load_index does) for the output folder or URL `out`."""
    return Index.from_json(out, doc)


def _from_json(storage: Storage, doc: object) -> Index:
    """Index.from_json for OUT's `storage`."""
    path = storage.path(INDEX_NAME)

    def bad(what: str) -> IndexFormatError:
        return IndexFormatError(f"{path}: {what}; this is not an index shardpack wrote")

    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise bad(f"'format' is not {FORMAT!r}")
    if type(doc.get("version")) is not int or doc["version"] not in READABLE_VERSIONS:
        raise IndexFormatError(
            f"{path}: index version {doc.get('version')!r} is not one of "
            f"{', '.join(map(str, READABLE_VERSIONS))}; upgrade shardpack to read it"
        )
    _expect(doc, {"name": str, "classes": list, "features": dict, "encoding": str,
                  "compression": str, "splits": dict}, bad)  # fmt: skip
    container = doc.get("container", LEGACY_CONTAINER)
    if not isinstance(container, str) or container not in CONTAINERS:
        raise IndexFormatError(f"{path}: unknown container {container!r}; upgrade shardpack "
                               "to read it")  # fmt: skip
    if doc["compression"] not in CONTAINERS[container].compressions:
        raise bad(f"unknown compression {doc['compression']!r}")
    if not all(isinstance(c, str) for c in doc["classes"]):
        raise bad("'classes' must be a list of strings")
    _check_optional(doc, bad)
    size = doc.get("image_size")  # indexes before it: None, as for sizes that vary
    if size is not None and not (
        isinstance(size, list) and len(size) == 2
        and all(type(n) is int and 0 < n <= MAX_COUNT for n in size)
    ):  # fmt: skip
        raise bad("'image_size' must be [height, width] or null")
    skipped = tuple(Skipped(s["key"], s["reason"]) for s in doc.get("skipped", []))
    splits = {name: _split(name, entry, path, bad, CONTAINERS[container], doc["compression"])
              for name, entry in doc["splits"].items()}  # fmt: skip
    files = collections.Counter(s.file for split in splits.values() for s in split.shards)
    if twice := [file for file, n in files.items() if n > 1]:  # its records read twice
        raise bad(f"shard {twice[0]!r} is listed {files[twice[0]]} times")
    return Index(
        out=storage.root,
        name=doc["name"],
        schema=_schema(doc, bad),
        encoding=doc["encoding"],
        compression=doc["compression"],
        splits=splits,
        container_name=container,
        storage=storage,
        image_size=tuple(size) if size is not None else None,
        image_size_told="image_size" in doc,
        version=doc["version"],
        source=doc.get("source"),
        seed=doc.get("seed"),
        shuffle=doc.get("shuffle"),
        options=doc.get("options"),
        generation=doc.get("generation", 0),
        history=tuple(Run(**run) for run in doc.get("history", [])),
        plan_digest=doc.get("plan_digest"),
        skipped=skipped,
        num_skipped=doc.get("num_skipped", len(skipped)),
        ignored=doc.get("ignored", 0),
        ignored_files=tuple(doc.get("ignored_files", ())),
        warnings=tuple(doc.get("warnings", ())),
        stats=_stats(doc.get("stats", {}), bad),
        duplicates=_report(doc.get("duplicates")),
        summaries=_report(doc.get("summaries")),
        retired=tuple(doc["retired"]) if "retired" in doc else None,
    )


def _report(value: object) -> dict | None:
    """`duplicates` or `summaries`: what only reports show, each part read as untrusted there
    (read/report.py), so one that is not an object reads as missing, not as a broken index."""
    return value if isinstance(value, dict) else None


def _split(
    name: str, entry: object, path: str, bad, container: Container, compression: str
) -> SplitInfo:
    """One split of the document, checked: no shard claims more records than its bytes hold
    (a reader sizes its work by the counts before it reads a byte)."""
    if not isinstance(entry, dict):
        raise bad(f"split {name!r} is not an object")
    _expect(entry, {"num_records": int, "shards": list}, bad)
    _expect(entry, {key: int for key in _GROWN_SPLIT if key in entry}, bad)
    if entry.get("name_count") == 0:  # a count in shard names: 1 at least
        raise bad(f"'name_count' of split {name!r} must be at least 1")
    shards = []
    for shard in entry["shards"]:
        if not isinstance(shard, dict):
            raise bad(f"a shard of split {name!r} is not an object")
        _expect(shard, {"file": str, "num_records": int, "num_bytes": int, "sha256": str}, bad)
        _expect(shard, {k: int for k in ("generation", "arrow_bytes") if k in shard}, bad)
        if min(shard["num_records"], shard["num_bytes"]) < 0:
            raise bad(f"a shard of split {name!r} has a negative count")
        if not SAFE_FILE.fullmatch(shard["file"]):
            raise IndexFormatError(
                f"{path}: refused shard name {shard['file']!r}: shard names must be plain "
                "file names inside the output folder"
            )
        if shard["num_records"] > (most := container.most_records(shard["num_bytes"], compression)):
            raise bad(
                f"shard {shard['file']!r} of split {name!r} claims {shard['num_records']:,} "
                f"records in {shard['num_bytes']:,} bytes, more than {container.name} bytes "
                f"can hold ({most:,} at most)"
            )
        shards.append(ShardInfo(shard["file"], shard["num_records"], shard["num_bytes"],
                                shard["sha256"], shard.get("generation", 0),
                                shard.get("arrow_bytes")))  # fmt: skip
    if sum(s.num_records for s in shards) > MAX_SPLIT_RECORDS:
        raise bad(f"the shards of split {name!r} claim more than {MAX_SPLIT_RECORDS:,} records")
    counts = entry.get("class_counts", [])
    if not isinstance(counts, list) or not all(map(_is_count, counts)):
        raise bad(f"'class_counts' of split {name!r} must be a list of integers from 0 to "
                  f"{MAX_COUNT:,}")  # fmt: skip
    return SplitInfo(
        num_records=entry["num_records"], class_counts=tuple(counts), shards=tuple(shards),
        name_count=entry.get("name_count"), next_shard=entry.get("next_shard"),
    )  # fmt: skip


def _stats(doc: dict, bad) -> PackStats:
    """The document's `stats`, checked (a key this version does not write is left out)."""
    numbers = {k: doc.get(k) for k in ("seconds", "images_per_second")}
    counts = {k: doc.get(k) for k in ("workers", "lossless")}
    failures = doc.get("url_failures")
    if not (
        all(v is None or (isinstance(v, int | float) and not isinstance(v, bool))
            for v in numbers.values())
        and all(v is None or _is_count(v) for v in counts.values())
        and (failures is None or (isinstance(failures, dict)
                                  and all(_is_count(n) for n in failures.values())))
    ):  # fmt: skip
        raise bad("'stats' must hold numbers (seconds, images_per_second), counts (workers, "
                  "lossless) and url_failures {reason: count}")  # fmt: skip
    return PackStats(**numbers, **counts, url_failures=failures)


def _schema(doc: dict, bad) -> Schema:
    """The document's feature schema (a version-1 index implies one from its dtypes)."""
    try:
        if doc["version"] == 1:
            coarse = doc.get("coarse_classes")
            if coarse is not None and not (
                isinstance(coarse, list) and all(isinstance(c, str) for c in coarse)
            ):
                raise ValueError("'coarse_classes' must be a list of strings")
            if not all(v in V1_DTYPES for v in doc["features"].values()):
                raise ValueError(f"'features' kinds must be among {', '.join(V1_DTYPES)}")
            return Schema.from_v1(doc["features"], doc["classes"], coarse)
        schema = Schema.from_json(doc["features"])
    except ValueError as e:
        raise bad(str(e)) from None
    if list(schema.classes) != doc["classes"]:
        raise bad("'classes' differs from the classes of the 'label' feature")
    return schema


def _is_count(value: object) -> bool:
    """Whether `value` is a count index.json may give: an int from 0 to MAX_COUNT."""
    return is_count(value, 0) and value <= MAX_COUNT


def _expect(doc: dict, types: dict[str, type], bad) -> None:
    """Each key of `types` is in `doc` with a value of its type (an int: a count, >= 0)."""
    for key, kind in types.items():
        value = doc.get(key)
        if kind is int and not _is_count(value):
            over = f", over {MAX_COUNT:,}" if is_count(value, 0) else ""
            raise bad(f"{key!r} must be an integer >= 0, got {shortened(repr(value))}{over}")
        if not isinstance(value, kind):
            raise bad(f"{key!r} must be a {kind.__name__}, got {type(value).__name__}")


# The fields a reader may show that an index need not have (older versions lack some).
_OPTIONAL = {"source": str, "plan_digest": str, "num_skipped": int, "ignored": int,
             "stats": dict, "skipped": list, "ignored_files": list, "warnings": list,
             "options": dict, "generation": int, "history": list, "retired": list}  # fmt: skip
# What index.json's `history` keeps of each run (Run).
_RUN_FIELDS = ("generation", "when", "mode", "added", "changed", "removed", "shards_rewritten")
# What a grown split and its shards may hold (packing/grow.py): counts, each optional.
_GROWN_SPLIT = ("name_count", "next_shard")


def _check_optional(doc: dict, bad) -> None:
    """The optional fields there are hold what pack writes: a planted `"ignored": "lots"` is
    refused here, not a TypeError in inspect."""
    _expect(doc, {key: kind for key, kind in _OPTIONAL.items() if key in doc}, bad)
    if doc.get("seed") is not None and not isinstance(doc["seed"], int):
        raise bad(f"'seed' must be an integer or null, got {type(doc['seed']).__name__}")
    if "shuffle" in doc and doc["shuffle"] not in SHUFFLES:
        raise bad(f"'shuffle' must be one of {', '.join(SHUFFLES)}, got {doc['shuffle']!r}")
    for key in ("ignored_files", "warnings"):
        if not all(isinstance(v, str) for v in doc.get(key, [])):
            raise bad(f"{key!r} must be a list of strings")
    for item in doc.get("skipped", []):
        if not isinstance(item, dict) or not all(
            isinstance(item.get(k), str) for k in ("key", "reason")
        ):
            raise bad("'skipped' must be a list of {key, reason} strings")
    if not all(isinstance(f, str) for f in doc.get("retired", [])):
        raise bad("'retired' must be a list of strings")
    for run in doc.get("history", []):
        if (
            not isinstance(run, dict)
            or set(run) != set(_RUN_FIELDS)
            or not all(
                isinstance(run[k], str) if k in ("when", "mode") else _is_count(run[k])
                for k in _RUN_FIELDS
            )
        ):
            raise bad(f"'history' must be a list of runs {{{', '.join(_RUN_FIELDS)}}}")


def record_fault(example: dict[str, list], schema: Schema) -> str | None:
    """What makes a decoded Example disagree with the index's schema, or None.

    Every feature the schema declares must be there, of its dtype and shape (one value for a
    scalar, whole rows for a (-1, k) list); class labels must index their class list; `format`
    must name a stored format; a feature the schema does not declare is refused. Every
    disagreement is named, joined by "; ".
    """
    if schema.fits(example) and example["format"][0] in _FORMAT_BYTES:
        return _size_fault(example)
    reasons = [
        f"feature {name!r} missing" if name not in example else check_values(name, f, example[name])
        for name, f in schema.items()
    ]
    reasons += [f"feature {name!r} is not in the index's schema" for name in example
                if name not in schema]  # fmt: skip
    reasons = [r for r in reasons if r is not None]
    if not reasons and example["format"][0] not in _FORMAT_BYTES:
        reasons.append(f"format {example['format'][0]!r} is not one of {', '.join(STORED_FORMATS)}")
    if not reasons:
        reasons.append(_size_fault(example))
    return "; ".join(r for r in reasons if r is not None) or None


def _size_fault(example: dict[str, list]) -> str | None:
    """What makes a record's height, width or channels no image's (record_fault checked their
    types), else None: a reader without decode would serve them as they are."""
    (height,), (width,), (channels,) = example["height"], example["width"], example["channels"]
    if 1 <= height <= MOST_SIDE and 1 <= width <= MOST_SIDE and 1 <= channels <= MOST_CHANNELS:
        return None
    return (f"height {height}, width {width}, channels {channels} are no image's (sides of 1 "
            f"to {MOST_SIDE:,} pixels, 1 to {MOST_CHANNELS} channels)")  # fmt: skip
