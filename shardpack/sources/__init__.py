"""Sources: where items come from. One module each: folder (SRC/<class>/...), splittree
(SRC/<split>/<class>/...), manifest (a CSV/TSV/JSONL/Parquet table) and cifar (CIFAR batches).

Each source finds its items (scan -> Dataset with the feature schema) and loads one item's image
(`loader`); the worker builds an Example from what the loader gives and the item's fields,
without knowing which source it came from.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from shardpack.errors import SourceError
from shardpack.options import SPLIT_NAMES, PackOptions
from shardpack.schema import Schema
from shardpack.storage import Storage, storage_at

if TYPE_CHECKING:
    import numpy as np

# A field's value as a source gives it: a scalar, or a list (flat, or of k-long rows).
FieldValue = int | float | str | bytes | tuple


class Item(NamedTuple):
    """One record to write: where its pixels are, its class, and its other feature values.

    A named tuple, not a frozen dataclass: a listing of 1,000,000 makes 1,000,000 of them
    (0.6 us each against 1.7 us: a frozen dataclass's __init__ sets each field through
    object.__setattr__) and pickles them to the workers (2x faster).
    """

    key: str  # unique in the dataset: path relative to SRC, or "<batch>:<record>" for CIFAR
    label: int | tuple[int, ...] | None  # class index (a tuple for multi-label); None: unlabeled
    # file to read, relative to the dataset's root (or, from a manifest, an absolute path or URL)
    path: str
    # bytes on disk (for an image file; past the first files of a large local tree, the mean
    # of a sample: folder.SIZED_FILES) or raw pixel bytes (for a CIFAR record)
    size: int
    record: int | None = None  # record number inside a CIFAR batch
    # name -> value of each feature the schema adds beyond the built-ins and `label`; never
    # written to (NO_FIELDS below is shared by every item with none)
    fields: Mapping[str, FieldValue] = {}


# The fields of every item with none beyond the built-ins: one shared mapping, never written
# (a listing of 1,000,000 would otherwise hold 1,000,000 empty dicts, 64 MB).
NO_FIELDS: Mapping[str, FieldValue] = Item._field_defaults["fields"]


@dataclass(frozen=True)
class Dataset:
    """What a scan found: the feature schema, items per split, and files passed over."""

    kind: str  # "folder", "split-tree", "manifest" or one of the CIFAR layouts
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


# What a loader gives for one item: an image file's bytes, or decoded RGB pixels (CIFAR).
Loader = Callable[[Item, Storage, PackOptions, dict], "bytes | np.ndarray"]


def scan(
    src: Storage | str | os.PathLike,
    options: PackOptions | None = None,
    storage_options: Mapping[str, object] | None = None,
) -> Dataset:
    """List every item of SRC.

    Args:
        src: a class-folder tree (SRC/<class>/**/<image>), a split tree
            (SRC/<split>/<class>/**/<image>), a manifest (.csv, .tsv, .jsonl, .parquet, or a
            folder holding metadata.csv/.jsonl/.parquet) or a folder of CIFAR batches: a local
            path, an fsspec URL, or the Storage source_root made of either.
        options: the source layout ("auto" tells them apart by the files present), the
            pinned class list, split names and fractions, the manifest's path column and
            root, and the on-error policy.
        storage_options: options for the filesystem of a URL (SRC, --root, a manifest's
            image URLs).

    Raises:
        SourceError: SRC is missing, empty, or not of the layout asked for.
        StorageError: a URL's filesystem package is missing.
    """
    from shardpack.sources import cifar, folder, manifest, splittree
    from shardpack.sources.splitting import split_dataset

    options = options or PackOptions()
    root = source_root(src, storage_options)
    is_folder = root.kind() == "dir"
    layout = cifar.cifar_layout(root, options.source) if is_folder else None
    table = manifest.manifest_source(root, options.source, is_folder)
    kind = (
        "CIFAR batches" if layout is not None else "a manifest" if table is not None else "folders"
    )
    named = options.split_names != SPLIT_NAMES  # --splits given
    _refuse_unused(root, options, kind, named)
    if layout is not None:
        if options.classes is not None:
            raise SourceError(f"{root.path()}: CIFAR brings its own class list; drop --classes")
        dataset = cifar.scan_cifar(root, layout)
    elif table is not None:
        dataset = manifest.scan_manifest(table, options, storage_options)
    elif options.source == "auto" and splittree.is_split_tree(root, options.split_names, named):
        dataset = splittree.scan_split_tree(root, options)
    else:
        dataset = folder.scan_folder(root, options)
    if options.split is None:
        return dataset
    return split_dataset(dataset, options.split, options.seed, root.path())


def _refuse_unused(root: Storage, options: PackOptions, kind: str, named: bool) -> None:
    """An option the layout of SRC takes no notice of is refused, not ignored: --splits
    (`named`) names split folders, --path-column and --root a manifest's images."""
    if options.source == "folder" and named:
        raise SourceError(f"{root.path()}: --splits names split folders, and --source folder "
                          "takes every folder as a class; drop one of them")  # fmt: skip
    for flag, given, meant in (
        ("--splits", named, "folders"),
        ("--path-column", options.path_column is not None, "a manifest"),
        ("--root", options.root is not None, "a manifest"),
    ):
        if given and kind != meant:
            raise SourceError(f"{root.path()}: {flag} is for {meant}, and SRC is {kind}; "
                              f"drop {flag}")  # fmt: skip


def loader(kind: str) -> Loader:
    """The function that loads one item's image for datasets of this kind."""
    from shardpack.sources import cifar, folder

    return cifar.load if kind in cifar.LAYOUTS else folder.load


def item_files(kind: str, items: Iterable[Item]) -> Iterator[tuple[str, int]]:
    """The files (path, size) the loader of `kind` reads for these items, one each, in order
    (CIFAR: none, its batches are read once a process). Lazy: a list would hold every path of
    the shard in the worker (8,333 small JPEGs: ~0.5 MB, and then more at every shard)."""
    from shardpack.sources import cifar

    return iter(()) if kind in cifar.LAYOUTS else ((item.path, item.size) for item in items)


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
    if kind is None:
        raise SourceError(f"{where}: no such folder; pass the folder that holds your images")
    if kind != "dir" and not manifest.is_manifest_name(where):
        raise SourceError(f"{where}: is a file, not a folder; {folder.instead_of_file(where)}")
    return root
