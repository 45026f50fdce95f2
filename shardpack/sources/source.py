"""What a source is: the `Source` interface, the `Item`s and `Dataset` a scan gives, and the
registry of sources (`register_source`, `source_of`)."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from shardpack.errors import (
    STORE_REFUSED_FIX,
    ImageError,
    Option,
    SourceError,
    is_store_refusal,
    os_error_fix,
)
from shardpack.options import PackOptions
from shardpack.schema import Schema
from shardpack.storage import Storage
from shardpack.storage.srcfiles import FileTooLarge, RefusedFile

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


class RowFields(Mapping):
    """An item's fields as a table row's values beside the table's name -> position, one dict
    shared by every row: 48 bytes an item beside its values tuple, where a dict of its own
    takes 184 or more (a URL list of 100M rows holds one a row). Read-only, as all fields."""

    __slots__ = ("_at", "_values")

    def __init__(self, at: Mapping[str, int], values: tuple) -> None:
        self._at, self._values = at, values

    def __getitem__(self, name: str) -> FieldValue:
        return self._values[self._at[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)

    def __repr__(self) -> str:
        return repr(dict(self))

    def __reduce__(self) -> tuple:  # pickled as its two parts: the shared one once a pickle
        return RowFields, (self._at, self._values)


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
    # PackOptions fields that only some sources read (each's flag is options.FLAGS'): given
    # to a source that reads none of them, refused; their values checked by check_options
    own_options: ClassVar[tuple[str, ...]] = ()
    record_cost: ClassVar[RecordCost | None] = None  # None: items are files, costed by bytes
    # what gives SRC the several splits it has, where it has them, for --split's refusal
    splits_from: ClassVar[str] = "its own splits"

    @abc.abstractmethod
    def recognise(self, root: Storage, options: PackOptions) -> object | None:
        """What `scan` takes when SRC holds this source (`root` rooted at SRC), else None. With
        --source naming this source, raise SourceError saying what is missing instead
        (refuse_unfound)."""

    def holds(self, found: object, name: str) -> bool:
        """Whether the entry `name` of the folder `recognise` found this source in is a part
        of the dataset (not a dataset of its own beside it), for the error of a SRC one level
        inside it; by default every entry is."""
        return True

    def check_options(self, options: PackOptions) -> None:
        """Refuse a bad value of one of `own_options` (OptionError naming it), as
        PackOptions refuses those every source reads: called once a scan has recognised this
        source, before its `scan`."""
        return None  # any value: most sources own no option

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
        return read_image_file(item, root, options)

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


# Every source by name, in the order registered: shardpack.sources registers the built-in ones
# first, when it is imported (as it is before this module: Python imports a package first).
_REGISTRY: dict[str, Source] = {}


def registered_sources() -> dict[str, Source]:
    """Every source by name, in the order registered: the built-in ones first."""
    return _REGISTRY


def register_source(source: Source) -> None:
    """Add a source: `scan` recognises it (before those registered earlier, so a layout more
    specific than plain class folders wins) and --source offers it when it is choosable.

    Raises:
        ValueError: a source of that name, or one giving one of its kinds, is registered.
    """
    registry = _REGISTRY
    taken = {kind for other in registry.values() for kind in other.kinds}
    if source.name in registry or taken & set(source.kinds) or source.name == "auto":
        raise ValueError(f"a source named {source.name!r} or of kinds {source.kinds!r} is "
                         "registered already; give it another name and kinds")  # fmt: skip
    registry[source.name] = source


def source_choices() -> tuple[str, ...]:
    """What --source takes: "auto" (tell them apart by the files present) and each choosable
    source's name."""
    return ("auto", *(name for name, s in _REGISTRY.items() if s.choosable))


def sources_described() -> str:
    """What SRC may be, each source's `described` once, for the CLI's help."""
    return "; ".join(dict.fromkeys(s.described for s in _REGISTRY.values()))


def source_of(kind: str) -> Source:
    """The source whose scan gives datasets of this kind."""
    for source in _REGISTRY.values():
        if kind in source.kinds:
            return source
    raise ValueError(f"no source gives datasets of kind {kind!r}; register_source it first")


def read_image_file(item: Item, src: Storage, options: PackOptions) -> bytes:
    """An image file's bytes, read as hostile input: a regular file (links followed), bounded by
    the most an image of --max-pixels can take: every source's loader but CIFAR's.

    Raises:
        ImageError: the file is missing, unreadable, not a regular file, too large or empty.
    """
    from shardpack.images import max_file_bytes  # numpy: not for pack --help

    return read_stamped_image(item, src, max_file_bytes(options.max_pixels))[0]


def read_stamped_image(
    item: Item, src: Storage, limit: int, listed: tuple[int, int] | None = None
) -> tuple[bytes, tuple[int, int] | None]:
    """read_image_file's bytes, at most `limit` (images.max_file_bytes of --max-pixels: a
    worker's, reckoned once a shard), with the file's stamp as the read saw it before its first
    byte (Storage.read_stamped: the worker's stamp without a stat of its own), or where the
    read takes none, `listed` (its listing's before the read: an object's; else None)."""
    try:
        data, stamp = src.read_stamped(item.path, limit)
        stamp = stamp or listed
    except FileTooLarge as e:
        refused = ImageError(item.key, f"{e}, the most an image of --max-pixels can take: "
                             "raise --max-pixels if it is an image, else remove it")  # fmt: skip
        refused.stamp = e.stamp or listed
        raise refused from None
    except RefusedFile as e:
        raise ImageError(item.key, str(e)) from None
    except OSError as e:  # a store's refusal: the credentials, as likely as the object
        fix = f"; {STORE_REFUSED_FIX}" if is_store_refusal(e) else ""
        raise ImageError(item.key, f"cannot read ({e.strerror or e}){fix}") from None
    if not data:
        refused = ImageError(item.key, "empty file")
        refused.stamp = stamp
        raise refused
    return data, stamp


def cannot_read(path: str, error: OSError) -> SourceError:
    """A file of SRC whose read failed as a scan read it (a store that lists it but refuses
    its bytes, a disk's EIO): named, with what to do about it."""
    return SourceError(f"{path}: cannot read ({error.strerror or error}); {os_error_fix(error)}")


def a_link(root: Storage, name: str = "", part: bool = False) -> SourceError:
    """The error of a file of SRC that is a symbolic link, naming where it leads (a DVC
    checkout's, a Hugging Face cache's: a file named by its hash, somewhere else), for a scan
    whose open of it refused the link (ELOOP); `part`: one file of a whole SRC reads (a TFDS
    shard), which cannot be passed alone."""
    target = root.link_target(name)
    to = "" if target is None else f" to {target}"  # None: gone since
    which = "a copy" if part else "the file it points to, or a copy"
    return SourceError(f"{root.path(name)}: is a symbolic link{to}; shardpack does not follow "
                       f"links it did not make: pass {which} of its folder with the links "
                       "resolved (cp -rL: a Hugging Face cache's snapshots are links into its "
                       "blobs)")  # fmt: skip


def folder_only(root: Storage, options: PackOptions, name: str) -> None:
    """--source `name` on a file (a manifest) is refused: that source reads folders."""
    if options.source == name and root.kind() != "dir":
        raise SourceError(f"{root.path()}: ", Option("source", name), " takes a folder; drop ",
                          Option("source"))  # fmt: skip


def refuse_unfound(source: Source, root: Storage, options: PackOptions, lacking: str) -> None:
    """With --source naming `source`, a SRC its `recognise` does not find it in is refused,
    saying what SRC lacks: `lacking` ("holds no X; pass the folder that holds them")."""
    if options.source == source.name:
        raise SourceError(f"{root.path()}: {lacking}")
