"""Sources: where items come from. A source is a `Source` object in one registry; the built-in
ones, one module each, are folder (SRC/<class>/...), splittree (SRC/<split>/<class>/...),
manifest (a CSV/TSV/JSONL/Parquet table, read by the tables package), cifar (CIFAR batches,
python pickles walked by safepickle), hf (Hugging Face Parquet datasets), tfdsdir (TFDS prepared
directories), tars (WebDataset tars), coco (COCO instances JSONs), yolo (YOLO's images/ and
labels/), voc (Pascal VOC) and repack (shardpack's own output); objects holds what the object
sources share. `register_source` adds one.

A source provides: its `name` (a --source choice when `choosable`), the `kinds` its scan gives
(Dataset.kind, written to index.json), `described` (what SRC is, for messages), the PackOptions
fields only it reads (`own_options`, with their flags: another source refuses them when given),
`check_options` (refuses a bad value of one of them), `recognise` (does SRC hold it?), `scan`
(SRC -> Dataset with the feature schema), `load` (one item's image file bytes or RGB pixels;
runs in the workers), `item_files` (the files `load` reads, for read-ahead), `default_name`,
`record_cost` (what an item costs, for the planner's cost model) and `keeping` (a context the
whole pack runs in). Nothing outside this package names a source: the packer and the planner ask
the dataset's source (Dataset.source, found in the registry by its kind), and the workers are
handed it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Mapping

from shardpack.errors import Option, ShardpackError, SourceError
from shardpack.options import PackOptions, check_choice, reserved_split, too_long_split
from shardpack.sources import (
    cifar,
    coco,
    folder,
    hf,
    manifest,
    repack,
    splittree,
    tars,
    tfdsdir,
    voc,
    yolo,
)
from shardpack.sources.nearmisses import near_misses
from shardpack.sources.source import (
    NO_FIELDS,
    Dataset,
    FieldValue,
    Item,
    Loader,
    RecordCost,
    Source,
    register_source,
    registered_sources,
    source_choices,
    source_of,
    sources_described,
)
from shardpack.sources.streamed import scan_streamed
from shardpack.storage import Storage, storage_at

__all__ = [
    "NO_FIELDS", "Dataset", "FieldValue", "Item", "Loader", "RecordCost", "Source", "keeping",
    "register_source", "registered_sources", "scan", "source_choices", "source_of",
    "source_root", "sources_described",
]  # fmt: skip

# The built-in sources, the folder catch-all first: recognition tries the last registered
# first (our own output holds TFDS metadata too: repack before tfdsdir).
for _module in (folder, splittree, manifest, cifar, hf, tfdsdir, tars, coco, yolo, voc, repack):
    register_source(_module.SOURCE)


@contextlib.contextmanager
def keeping() -> Iterator[None]:
    """Every source's `keeping` context at once: a pack runs inside it."""
    with contextlib.ExitStack() as stack:
        for source in registered_sources().values():
            stack.enter_context(source.keeping())
        yield


def scan(
    src: Storage | str | os.PathLike,
    options: PackOptions | None = None,
    storage_options: Mapping[str, object] | None = None,
) -> Dataset:
    """List every item of SRC.

    Args:
        src: a class-folder tree (SRC/<class>/**/<image>), a split tree
            (SRC/<split>/<class>/**/<image>), a manifest (.csv, .tsv, .jsonl, .parquet, or a
            folder holding metadata.csv/.jsonl/.parquet), a folder of CIFAR batches, a Hugging
            Face Parquet dataset (a file, or a folder as the Hub keeps it) or a shardpack
            output: a local path, an fsspec URL, or the Storage source_root made of either.
        options: the source layout ("auto" tells them apart by the files present), the
            pinned class list, split names and fractions, the manifest's path column and
            root, and the on-error policy.
        storage_options: options for the filesystem of a URL (SRC, --root, a manifest's
            image URLs).

    Raises:
        SourceError: SRC is missing, empty, or not of the layout asked for.
        StorageError: a URL's filesystem package is missing.
    """
    options = options or PackOptions()
    root = source_root(src, storage_options)
    with root.listing_once():  # the recognisers' listings are the scan's
        source, found = _recognise(root, options)
        _refuse_unused(root, options, source)
        source.check_options(options)
        dataset = scan_streamed(root, source, found, options, storage_options)
        try:
            dataset = dataset or source.scan(found, options, storage_options)
        except SourceError:  # the folders' layouts take any SRC: one a level off finds none
            above = _object_dataset_above(root) if source in _ANY_FOLDER else None
            if above is None or options.source != "auto":
                raise
            # the folder layout's own advice (class folders) is not for a part of a dataset
            raise SourceError(f"{root.path()}: {above}") from None
    dataset = dataclasses.replace(dataset, warnings=dataset.warnings + near_misses(dataset))
    if options.split is not None:
        from shardpack.sources.splitting import split_dataset  # --split's alone

        dataset = split_dataset(dataset, options.split, options.seed, root.path())
    _refuse_unwritable_splits(dataset, root)
    return dataset


def _refuse_unwritable_splits(dataset: Dataset, root: Storage) -> None:
    """Refuse, before any is written, a split name too long for its shard files' names
    (options.too_long_split) or one its readers reserve (options.reserved_split), and splits
    alike but for case (a split column's `Train` beside `train`): their shard files
    (`name-Train.tfrecord-...`, `name-train.tfrecord-...`) are one file on a disk that ignores
    case (macOS's and Windows' by default, exFAT), where one split's shards would replace the
    other's under both names."""
    seen: dict[str, str] = {}
    for split in sorted(dataset.splits):
        if (why := too_long_split(split) or reserved_split(split)) is not None:
            raise SourceError(f"{root.path()}: {why}")
        other = seen.setdefault(split.casefold(), split)
        if other != split:
            raise SourceError(f"{root.path()}: splits {other!r} and {split!r} differ only in "
                              "case, and their shard files would be one file on a disk that "
                              "ignores case (macOS, Windows, exFAT): give them one "
                              "name")  # fmt: skip


# The sources that take any folder (the last tried), and those whose datasets hold files and
# folders a user may pass as SRC by mistake: a COCO JSON or annotations/, YOLO's data.yaml or
# images/, VOC's JPEGImages/.
_ANY_FOLDER = (folder.SOURCE, splittree.SOURCE)
_OBJECTS = (coco.SOURCE, yolo.SOURCE, voc.SOURCE)


def _object_dataset_above(root: Storage) -> str | None:
    """'it lies inside a COCO folder (...), D: pass that' where the folder D one or two levels
    above SRC is an object dataset (_OBJECTS) and SRC lies in one of its parts (not in a
    dataset beside it, as ~/data/flowers beside ~/data/VOCdevkit); None where neither is."""
    step, above = root, root.parent()
    for _ in range(2):
        if above is None:
            return None
        name = os.path.basename(step.path().rstrip("/"))
        for source in _OBJECTS:
            with contextlib.suppress(ShardpackError, OSError):
                found = source.recognise(above, PackOptions())
                if found is not None and source.holds(found, name):
                    return f"it lies inside {source.described}, {above.path()}: pass that"
        step, above = above, above.parent()
    return None


def _recognise(root: Storage, options: PackOptions) -> tuple[Source, object]:
    """The source SRC holds (--source's, or the last registered that recognises it) and what
    its recognise found."""
    registry = registered_sources()
    check_choice("source", options.source, source_choices())
    if options.source != "auto":
        source = registry[options.source]
        found = source.recognise(root, options)
        if found is None:
            raise SourceError(f"{root.path()}: is not {source.described}; drop ", Option("source"))
        return source, found
    for source in reversed(registry.values()):  # the last is the folder: it takes any SRC
        found = source.recognise(root, options)
        if found is not None:
            break
    return source, found


def _refuse_unused(root: Storage, options: PackOptions, source: Source) -> None:
    """An option only other sources read is refused, not ignored: --splits names split
    folders, --path-column and --root a manifest's images."""
    meant: dict[str, str] = {}  # field -> what the first source taking it reads
    for other in registered_sources().values():
        for name in other.own_options:
            meant.setdefault(name, other.described)
    defaults = {f.name: f.default for f in dataclasses.fields(PackOptions)}
    for name, what in meant.items():
        if name not in source.own_options and getattr(options, name) != defaults[name]:
            raise SourceError(f"{root.path()}: ", Option(name), f" is for {what}, and SRC is "
                              f"{source.described}; drop ", Option(name))  # fmt: skip


def source_root(
    src: Storage | str | os.PathLike, storage_options: Mapping[str, object] | None = None
) -> Storage:
    """SRC as the Storage rooted at it: an existing folder (or URL prefix), or a manifest file
    (a Storage rooted at the file itself: its kind() is "file", read("") reads it).

    Raises:
        SourceError: nothing is there, or a file that is not a manifest.
        StorageError: a URL's filesystem package is missing.
    """
    root = storage_at(src, storage_options)
    where = root.path()
    try:
        kind = root.kind()
    except OSError as e:  # an object store refusing us (credentials, permissions)
        raise SourceError(f"{where}: cannot read ({e.strerror or e}); check its permissions "
                          "and the credentials") from None  # fmt: skip
    named = any(source.takes_path(where) for source in registered_sources().values())
    if kind is None and manifest.is_manifest_name(where) and not named:
        raise SourceError(f"{where}: no such file; check the manifest's path")
    if kind is None and not named:
        raise SourceError(f"{where}: no such folder; pass the folder that holds your images")
    if kind != "dir" and not manifest.is_manifest_name(where) and not named:
        instead = _object_dataset_above(root) or folder.instead_of_file(where)
        raise SourceError(f"{where}: is a file, not a folder; {instead}")
    return root
