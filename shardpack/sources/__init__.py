"""Sources: where items come from. A source is a `Source` object in one registry; the built-in
ones, one module each, are folder (SRC/<class>/...), splittree (SRC/<split>/<class>/...),
manifest (a CSV/TSV/JSONL/Parquet table, read by the tables package), cifar (CIFAR batches,
python pickles walked by safepickle), hf (Hugging Face Parquet datasets), tfdsdir (TFDS prepared
directories), tars (WebDataset tars) and repack (shardpack's own output). `register_source` adds
one.

A source provides: its `name` (a --source choice when `choosable`), the `kinds` its scan gives
(Dataset.kind, written to index.json), `described` (what SRC is, for messages), the PackOptions
fields only it reads (`own_options`, with their flags: another source refuses them when given),
`recognise` (does SRC hold it?), `scan` (SRC -> Dataset with the feature schema), `load` (one
item's image file bytes or RGB pixels; runs in the workers), `item_files` (the files `load`
reads, for read-ahead), `default_name`, `record_cost` (what an item costs, for the planner's cost
model) and `keeping` (a context the whole pack runs in). Nothing outside this package names a
source: the packer and the planner ask the dataset's source (Dataset.source, found in the
registry by its kind), and the workers are handed it.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import operator
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from shardpack.errors import SourceError
from shardpack.options import PackOptions
from shardpack.schema import Schema
from shardpack.storage import Storage, storage_at

if TYPE_CHECKING:
    import numpy as np

# A field's value as a source gives it: a scalar, or a list (flat, or of k-long rows).
FieldValue = int | float | str | bytes | tuple


class Item(NamedTuple):
    """One record to write: where its pixels are, its class, and its other feature values.

    A named tuple, not a frozen dataclass: a listing of 1,000,000 makes 1,000,000 of them
    (a third of the time: a frozen dataclass's __init__ sets each field through
    object.__setattr__) and pickles them to the workers (2x faster).
    """

    key: str  # unique in the dataset: path relative to SRC, or "<file>:<position>"
    label: int | tuple[int, ...] | None  # class index (a tuple for multi-label); None: unlabeled
    # file to read, relative to the dataset's root (or, from a manifest, an absolute path or URL)
    path: str
    # bytes on disk (for an image file; past the first files of a large local tree, the mean
    # of a sample: folder.SIZED_FILES) or raw pixel bytes (for a record inside a file)
    size: int
    # where the item lies inside the file at `path` that holds many (a record's number in it);
    # None: the file is the item's image
    position: int | None = None
    # name -> value of each feature the schema adds beyond the built-ins and `label`; never
    # written to (NO_FIELDS below is shared by every item with none)
    fields: Mapping[str, FieldValue] = {}


# The fields of every item with none beyond the built-ins: one shared mapping, never written
# (a listing of 1,000,000 would otherwise hold 1,000,000 empty dicts, 64 MB).
NO_FIELDS: Mapping[str, FieldValue] = Item._field_defaults["fields"]


@dataclass(frozen=True)
class Dataset:
    """What a scan found: the feature schema, items per split, and files passed over."""

    kind: str  # one of its source's `kinds`: which source scanned it, and how
    root: Storage  # where items' paths are read from (relative to its folder or URL prefix)
    schema: Schema
    splits: dict[str, tuple[Item, ...]] = field(hash=False)
    ignored: int = 0
    ignored_files: tuple[str, ...] = ()  # the first folder.MAX_NAMED_IGNORED of them
    # (key, reason): special files, unlistable folders, classes not in --classes, bad rows
    skipped: tuple[tuple[str, str], ...] = ()
    warnings: tuple[str, ...] = ()  # for the user, one line each: a class with no images

    @property
    def classes(self) -> tuple[str, ...]:
        """The `label` feature's class names."""
        return self.schema.classes

    @property
    def num_items(self) -> int:
        return sum(len(items) for items in self.splits.values())

    @property
    def source(self) -> Source:
        """The registered source that scanned this dataset."""
        return source_of(self.kind)


# What a loader gives for one item: an image file's bytes, or decoded RGB pixels.
Loader = Callable[[Item, Storage, PackOptions, dict], "bytes | np.ndarray"]


@dataclass(frozen=True)
class RecordCost:
    """What packing one item costs when items are fixed-size records inside files (rather than
    image files, which the planner costs by their bytes)."""

    raw_bytes: int  # an item's pixels: the most its record grows to
    seconds: Mapping[str, float]  # one core's seconds per item, by output encoding


class Source(abc.ABC):
    """One kind of SRC. Subclass it, give what differs from these defaults, and pass an
    instance to register_source. `load` and `item_files` run in the workers, which get the
    source pickled (by its class's name: define it at a module's top level); the rest runs in
    the packing process."""

    name: ClassVar[str]  # unique; the --source choice when `choosable`
    kinds: ClassVar[tuple[str, ...]]  # the Dataset.kind values its scan gives
    described: ClassVar[str]  # what SRC is, for messages: "a manifest"
    choosable: ClassVar[bool] = True
    # (PackOptions field, its flag) that only some sources read: given to another, refused
    own_options: ClassVar[tuple[tuple[str, str], ...]] = ()
    record_cost: ClassVar[RecordCost | None] = None  # None: items are files, costed by bytes

    @abc.abstractmethod
    def recognise(self, root: Storage, options: PackOptions) -> object | None:
        """What `scan` takes when SRC holds this source (`root` rooted at SRC), else None. With
        --source naming this source, raise SourceError saying what is missing instead."""

    @abc.abstractmethod
    def scan(
        self, found: object, options: PackOptions, storage_options: Mapping[str, object] | None
    ) -> Dataset:
        """List every item of what `recognise` found."""

    def load(
        self, item: Item, root: Storage, options: PackOptions, cache: dict
    ) -> bytes | np.ndarray:
        """One item's image: the file's bytes (read as hostile input, see folder.load), or RGB
        pixels as an H x W x 3 uint8 array; `cache` is the worker's, kept across its items."""
        from shardpack.sources.folder import load

        return load(item, root, options, cache)

    def item_files(self, items: Iterable[Item]) -> Iterator[tuple[str, int]]:
        """The files (path, size) `load` reads for these items, one each, in order (for
        read-ahead). Lazy: a list would hold every path of the shard in the worker."""
        return ((item.path, item.size) for item in items)

    def default_name(self, dataset: Dataset) -> str | None:
        """The dataset's name when none is given; None takes it from SRC's name."""
        return None

    def takes_path(self, where: str) -> bool:
        """Whether SRC's name alone is this source's where it is no folder (a file of its
        kind, or a pattern naming files)."""
        return False

    def keeping(self) -> contextlib.AbstractContextManager[None]:
        """A context the whole pack (scan, then workers forked inside it) runs in."""
        return contextlib.nullcontext()


_REGISTRY: dict[str, Source] = {}


def _registry() -> dict[str, Source]:
    """Every source by name, in the order registered: the built-in ones first."""
    if not _REGISTRY:
        from shardpack.sources import cifar, folder, hf, manifest, repack, splittree, tars, tfdsdir

        # the folder catch-all first: recognition tries the last registered first (our own
        # output holds TFDS metadata too: repack before tfdsdir)
        for module in (folder, splittree, manifest, cifar, hf, tfdsdir, tars, repack):
            _REGISTRY[module.SOURCE.name] = module.SOURCE
    return _REGISTRY


def register_source(source: Source) -> None:
    """Add a source: `scan` recognises it (before those registered earlier, so a layout more
    specific than plain class folders wins) and --source offers it when it is choosable.

    Raises:
        ValueError: a source of that name, or one giving one of its kinds, is registered.
    """
    registry = _registry()
    taken = {kind for other in registry.values() for kind in other.kinds}
    if source.name in registry or taken & set(source.kinds) or source.name == "auto":
        raise ValueError(f"a source named {source.name!r} or of kinds {source.kinds!r} is "
                         "registered already; give it another name and kinds")  # fmt: skip
    registry[source.name] = source


def source_choices() -> tuple[str, ...]:
    """What --source takes: "auto" (tell them apart by the files present) and each choosable
    source's name."""
    return ("auto", *(name for name, s in _registry().items() if s.choosable))


def sources_described() -> str:
    """What SRC may be, each source's `described` once, for the CLI's help."""
    return "; ".join(dict.fromkeys(s.described for s in _registry().values()))


def source_of(kind: str) -> Source:
    """The source whose scan gives datasets of this kind."""
    for source in _registry().values():
        if kind in source.kinds:
            return source
    raise ValueError(f"no source gives datasets of kind {kind!r}; register_source it first")


@contextlib.contextmanager
def keeping() -> Iterator[None]:
    """Every source's `keeping` context at once: a pack runs inside it."""
    with contextlib.ExitStack() as stack:
        for source in _registry().values():
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
    from shardpack.sources.splitting import split_dataset

    options = options or PackOptions()
    root = source_root(src, storage_options)
    source, found = _recognise(root, options)
    _refuse_unused(root, options, source)
    dataset = source.scan(found, options, storage_options)
    dataset = dataclasses.replace(dataset, warnings=dataset.warnings + _typos(dataset))
    if options.split is None:
        return dataset
    return split_dataset(dataset, options.split, options.seed, root.path())


# A class of at most this many images whose name is a typo away from a class with at least
# TYPO_RATIO times as many is named as a likely typo (`dgo`: 2 images, beside `dog`: 40).
TYPO_IMAGES = 5
TYPO_RATIO = 4


def _typos(dataset: Dataset) -> tuple[str, ...]:
    """A warning for each class of a handful of images named a typo away from a larger class."""
    from shardpack.sources.spelling import near

    classes = dataset.classes
    if len(classes) < 2:
        return ()
    labels = Counter()
    for items in dataset.splits.values():
        labels.update(map(operator.itemgetter(1), items))  # Item.label, counted in C
    counts = Counter()
    for label, n in labels.items():
        for index in label if isinstance(label, tuple) else () if label is None else (label,):
            counts[index] += n
    warnings = []
    for index, name in enumerate(classes):
        n = counts[index]
        # (0: warned of as empty; "7" or "b" beside "1" or "a" is no typo)
        if not 0 < n <= TYPO_IMAGES or name.isdigit() or len(name) < 3:
            continue
        larger = (c for i, c in enumerate(classes) if counts[i] >= max(n, 1) * TYPO_RATIO)
        meant = near(name, larger)
        if meant is not None:
            m = counts[classes.index(meant)]
            warnings.append(f"class {name!r} ({n} image{'s' * (n != 1)}) is named a typo away "
                            f"from class {meant!r} ({m:,} images): if it is a typo, give its "
                            f"images the class {meant!r}")  # fmt: skip
    return tuple(warnings)


def _recognise(root: Storage, options: PackOptions) -> tuple[Source, object]:
    """The source SRC holds (--source's, or the last registered that recognises it) and what
    its recognise found."""
    registry = _registry()
    if options.source != "auto":
        source = registry[options.source]
        found = source.recognise(root, options)
        if found is None:
            raise SourceError(f"{root.path()}: is not {source.described}; drop --source")
        return source, found
    for source in reversed(registry.values()):  # the last is the folder: it takes any SRC
        found = source.recognise(root, options)
        if found is not None:
            break
    return source, found


def _refuse_unused(root: Storage, options: PackOptions, source: Source) -> None:
    """An option only other sources read is refused, not ignored: --splits names split
    folders, --path-column and --root a manifest's images."""
    meant: dict[str, tuple[str, str]] = {}  # field -> (flag, what the first taking it reads)
    for other in _registry().values():
        for name, flag in other.own_options:
            meant.setdefault(name, (flag, other.described))
    defaults = {f.name: f.default for f in dataclasses.fields(PackOptions)}
    for name, (flag, what) in meant.items():
        if name not in dict(source.own_options) and getattr(options, name) != defaults[name]:
            raise SourceError(f"{root.path()}: {flag} is for {what}, and SRC is "
                              f"{source.described}; drop {flag}")  # fmt: skip


def source_root(
    src: Storage | str | os.PathLike, storage_options: Mapping[str, object] | None = None
) -> Storage:
    """SRC as the Storage rooted at it: an existing folder (or URL prefix), or a manifest file
    (a Storage rooted at the file itself: its kind() is "file", read("") reads it).

    Raises:
        SourceError: nothing is there, or a file that is not a manifest.
        StorageError: a URL's filesystem package is missing.
    """
    from shardpack.sources import folder, manifest

    root = storage_at(src, storage_options)
    where = root.path()
    try:
        kind = root.kind()
    except OSError as e:  # an object store refusing us (credentials, permissions)
        raise SourceError(f"{where}: cannot read ({e}); check its permissions") from None
    named = any(source.takes_path(where) for source in _registry().values())
    if kind is None and manifest.is_manifest_name(where) and not named:
        raise SourceError(f"{where}: no such file; check the manifest's path")
    if kind is None and not named:
        raise SourceError(f"{where}: no such folder; pass the folder that holds your images")
    if kind != "dir" and not manifest.is_manifest_name(where) and not named:
        raise SourceError(f"{where}: is a file, not a folder; {folder.instead_of_file(where)}")
    return root
