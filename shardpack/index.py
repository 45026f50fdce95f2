"""index.json: built from the workers' results, written atomically, loaded and validated."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from shardpack.containers import CONTAINERS, Container
from shardpack.errors import FileAccessError, IndexFormatError, Option, is_count, shortened
from shardpack.layout import INDEX_NAME
from shardpack.options import ENCODINGS
from shardpack.schema import V1_DTYPES, Schema, check_values
from shardpack.storage import Storage, storage_at

# The most bytes of index.json read: a million shards with their skipped files fit many times.
MAX_INDEX_BYTES = 1 << 30
# The most lists and objects an index.json may hold (json makes each a Python object of ~60
# bytes and more): a shard is two, a skipped file one; a million shards fit twice over.
MAX_INDEX_CONTAINERS = 5_000_000
# The skipped items pack names in index.json (as the sources name the first ignored files),
# each key and reason cut to MAX_SKIPPED_TEXT characters: `num_skipped` counts them all.
MAX_NAMED_SKIPPED = 1000
MAX_SKIPPED_TEXT = 1000
# A JSON string with its escapes: what the count of lists and objects passes over.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
FORMAT = "shardpack-index"
# Version 2 added the typed feature schema (`features`: name -> {dtype, shape, text, classes});
# version 1 (`features`: name -> dtype, `coarse_classes`) is still read.
VERSION = 2
READABLE_VERSIONS = (1, 2)
LEGACY_CONTAINER = "tfrecord"  # what an index without `container` (written before it) holds
# A shard name is a plain file name inside OUT: no folders, no climbing out, nothing hidden.
SAFE_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
# What a record's `format` may say: the encodings pack stores ("keep" stores one of these).
STORED_FORMATS = tuple(e for e in ENCODINGS if e != "keep")
_FORMAT_BYTES = {f.encode() for f in STORED_FORMATS}


@dataclass(frozen=True)
class ShardInfo:
    """One shard as the index records it."""

    file: str
    num_records: int
    num_bytes: int
    sha256: str


@dataclass(frozen=True)
class SplitInfo:
    """One split: its record count, per-class counts and shards in order."""

    num_records: int
    class_counts: tuple[int, ...]
    shards: tuple[ShardInfo, ...]


@dataclass(frozen=True)
class Index:
    """A loaded and validated index.json; `raw` keeps the whole document. `out` is OUT as
    messages name it (a path or URL); `storage` reads the files in it."""

    out: str
    name: str
    schema: Schema
    encoding: str
    compression: str
    splits: dict[str, SplitInfo]
    raw: dict
    container_name: str = LEGACY_CONTAINER  # the shards' file format (shardpack.containers)
    storage: Storage | None = None  # OUT's; index_from_document always sets it
    image_size: tuple[int, int] | None = None  # (height, width) every image has; None: they vary

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

    def to_json(self) -> dict:
        """The index.json document."""
        return self.raw

    @property
    def classes(self) -> tuple[str, ...]:
        """The `label` feature's class names."""
        return self.schema.classes

    def shard_path(self, shard: ShardInfo) -> str:
        """The shard's path or URL inside OUT (the name was checked safe at load)."""
        return self.storage.path(shard.file)

    def split(self, name: str) -> SplitInfo:
        """The named split, or an error that lists the splits there are."""
        if name not in self.splits:
            raise IndexFormatError(
                f"{self.storage.path(INDEX_NAME)}: no split {name!r}; "
                f"it has {', '.join(sorted(self.splits))}"
            )
        return self.splits[name]


def _out_kind(storage: Storage) -> str | None:
    """What OUT itself is: "dir", "file", or None when it is not there. A store that cannot say
    (an error asking) counts as a folder: the message then names the missing index.json."""
    try:
        return storage.kind()
    except OSError:
        return "dir"


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
    try:  # no link followed: OUT's files are opened as they are (Storage.open)
        with storage.open(INDEX_NAME) as blob:
            if blob.size > MAX_INDEX_BYTES:
                raise IndexFormatError(f"{path}: unreadable ({blob.size} bytes, over "
                                       f"{MAX_INDEX_BYTES}); rerun pack to rewrite it")  # fmt: skip
            text = blob.pread(blob.size, 0)
    except FileNotFoundError:
        kind = _out_kind(storage)
        if kind is None:
            raise IndexFormatError(f"{storage.root}: no such folder; pass the OUT of a pack "
                                   "run") from None  # fmt: skip
        if kind == "file":  # an object store's: its name then a slash is not there
            raise _a_file(root) from None
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
        raise IndexFormatError(f"{path}: unreadable ({e}); rerun pack to rewrite it") from None
    if (containers := _containers(text)) > MAX_INDEX_CONTAINERS:  # each a Python object
        raise IndexFormatError(f"{path}: unreadable ({containers:,} lists and objects, over "
                               f"{MAX_INDEX_CONTAINERS:,}); rerun pack to rewrite it")  # fmt: skip
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:  # RecursionError: nested too deeply
        raise IndexFormatError(f"{path}: unreadable ({e}); rerun pack to rewrite it") from None
    return index_from_document(storage, doc)


def _containers(text: bytes) -> int:
    """How many lists and objects the JSON `text` opens: its `[` and `{` outside strings."""
    rough = text.count(b"[") + text.count(b"{")  # an upper bound, and fast
    if rough <= MAX_INDEX_CONTAINERS:
        return rough
    bare = _JSON_STRING.sub(b"", text)
    return bare.count(b"[") + bare.count(b"{")


def index_from_document(out: str | os.PathLike | Storage, doc: object) -> Index:
    """Validate an index document (as load_index does) for the output folder or URL `out`."""
    storage = storage_at(out)
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
    schema = _schema(doc, bad)
    splits = {}
    for split, entry in doc["splits"].items():
        if not isinstance(entry, dict):
            raise bad(f"split {split!r} is not an object")
        _expect(entry, {"num_records": int, "shards": list}, bad)
        _expect(entry, {key: int for key in _GROWN_SPLIT if key in entry}, bad)
        shards = []
        for shard in entry["shards"]:
            if not isinstance(shard, dict):
                raise bad(f"a shard of split {split!r} is not an object")
            _expect(shard, {"file": str, "num_records": int, "num_bytes": int, "sha256": str}, bad)
            _expect(shard, {"generation": int} if "generation" in shard else {}, bad)
            if min(shard["num_records"], shard["num_bytes"]) < 0:
                raise bad(f"a shard of split {split!r} has a negative count")
            if not SAFE_FILE.fullmatch(shard["file"]):
                raise IndexFormatError(
                    f"{path}: refused shard name {shard['file']!r}: shard names must be plain "
                    "file names inside the output folder"
                )
            shards.append(ShardInfo(**{k: shard[k] for k in ShardInfo.__dataclass_fields__}))
        counts = entry.get("class_counts", [])
        if not isinstance(counts, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) for c in counts
        ):
            raise bad(f"'class_counts' of split {split!r} must be a list of integers")
        splits[split] = SplitInfo(entry["num_records"], tuple(counts), tuple(shards))
    size = doc.get("image_size")  # indexes before it: None, as for sizes that vary
    if size is not None and not (
        isinstance(size, list) and len(size) == 2
        and all(type(n) is int and n > 0 for n in size)
    ):  # fmt: skip
        raise bad("'image_size' must be [height, width] or null")
    return Index(
        out=storage.root,
        name=doc["name"],
        schema=schema,
        encoding=doc["encoding"],
        compression=doc["compression"],
        splits=splits,
        raw=doc,
        container_name=container,
        storage=storage,
        image_size=tuple(size) if size is not None else None,
    )


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


def _expect(doc: dict, types: dict[str, type], bad) -> None:
    """Each key of `types` is in `doc` with a value of its type (an int: a count, >= 0)."""
    for key, kind in types.items():
        value = doc.get(key)
        if kind is int and not is_count(value, 0):
            raise bad(f"{key!r} must be an integer >= 0, got {shortened(repr(value))}")
        if not isinstance(value, kind):
            raise bad(f"{key!r} must be a {kind.__name__}, got {type(value).__name__}")


# The fields a reader may show that an index need not have (older versions lack some).
_OPTIONAL = {"source": str, "plan_digest": str, "num_skipped": int, "ignored": int,
             "stats": dict, "skipped": list, "ignored_files": list, "warnings": list,
             "options": dict, "generation": int, "history": list, "retired": list}  # fmt: skip
# What a grown split and its shards may hold (packing/grow.py): counts, each optional.
_GROWN_SPLIT = ("name_count", "next_shard")


def _check_optional(doc: dict, bad) -> None:
    """The optional fields there are hold what pack writes: a planted `"ignored": "lots"` is
    refused here, not a TypeError in inspect."""
    _expect(doc, {key: kind for key, kind in _OPTIONAL.items() if key in doc}, bad)
    if doc.get("seed") is not None and not isinstance(doc["seed"], int):
        raise bad(f"'seed' must be an integer or null, got {type(doc['seed']).__name__}")
    for key in ("ignored_files", "warnings"):
        if not all(isinstance(v, str) for v in doc.get(key, [])):
            raise bad(f"{key!r} must be a list of strings")
    for item in doc.get("skipped", []):
        if not isinstance(item, dict) or not all(
            isinstance(item.get(k), str) for k in ("key", "reason")
        ):
            raise bad("'skipped' must be a list of {key, reason} strings")


def record_fault(example: dict[str, list], schema: Schema) -> str | None:
    """What makes a decoded Example disagree with the index's schema, or None.

    Every feature the schema declares must be there, of its dtype and shape (one value for a
    scalar, whole rows for a (-1, k) list); class labels must index their class list; `format`
    must name a stored format; a feature the schema does not declare is refused. Every
    disagreement is named, joined by "; ".
    """
    reasons = [
        f"feature {name!r} missing" if name not in example else check_values(name, f, example[name])
        for name, f in schema.items()
    ]
    reasons += [f"feature {name!r} is not in the index's schema" for name in example
                if name not in schema]  # fmt: skip
    reasons = [r for r in reasons if r is not None]
    if not reasons and example["format"][0] not in _FORMAT_BYTES:
        reasons.append(f"format {example['format'][0]!r} is not one of {', '.join(STORED_FORMATS)}")
    return "; ".join(reasons) or None
