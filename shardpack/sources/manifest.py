"""The manifest source: a table of images (shardpack.manifest reads it) as items with fields.

Labels become class indices: class names sorted (or in --classes order), integers as they are
(indexing --classes when given, else classes named "0", "1", ...); a list of labels makes a
multi-label dataset. The `split` column assigns splits (else one split, "train"). Each image
file is stat'ed at scan, following links like a folder scan but only to a regular file; a row
whose file is missing or not a regular file, or whose class is not in --classes, is skipped
with its manifest line, like every other bad row.
"""

from __future__ import annotations

import os
import stat

from shardpack.errors import SourceError
from shardpack.manifest import SUFFIXES, LabelInfo, Manifest, manifest_file, read_manifest
from shardpack.options import PackOptions
from shardpack.schema import Schema
from shardpack.sources import Dataset, Item
from shardpack.srcfiles import not_regular

KIND = "manifest"
DEFAULT_SPLIT = "train"


def is_manifest_name(path: str) -> bool:
    """Whether a file's name says it is a manifest (.csv, .tsv, .jsonl, .parquet)."""
    return path.lower().endswith(SUFFIXES)


def manifest_source(root: str, source: str) -> str | None:
    """The manifest file SRC is or holds (metadata.csv/.jsonl/.parquet), when --source is auto."""
    if source != "auto":
        if not os.path.isdir(root):
            raise SourceError(f"{root}: --source {source} takes a folder; drop --source")
        return None
    return manifest_file(root)


def scan_manifest(path: str, options: PackOptions) -> Dataset:
    """List a manifest's rows as items: paths, labels by the class list, splits and fields.

    Raises:
        SourceError: the manifest cannot be read (see read_manifest), or no row is usable.
    """
    table = read_manifest(path, path_column=options.path_column, root=options.root)
    classes = _classes(table, options.classes)
    position = None if classes is None else {name: i for i, name in enumerate(classes)}
    where = os.path.basename(table.path)
    unit = "row" if table.path.lower().endswith(".parquet") else "line"
    bad = [(b.line, b.path or f"{where} {unit} {b.line}", b.reason) for b in table.bad]
    splits: dict[str, list[Item]] = {}
    for row in table.rows:
        try:
            label = None if position is None else _label(row.label, table.label, position)
            size = _image_size(os.path.join(table.root, row.path))
        except _Bad as e:
            bad.append((row.line, row.path, f"{where} {unit} {row.line}: {e}"))
            continue
        item = Item(row.path, label, row.path, size, fields=table.fields(row))
        splits.setdefault(row.split or DEFAULT_SPLIT, []).append(item)
    skipped = tuple((key, reason) for _, key, reason in sorted(bad))  # in manifest order
    if not splits:
        first = f"; the first: {skipped[0][1]}" if skipped else ""
        raise SourceError(f"{table.path}: no row names a usable image{first}")
    schema = Schema.build(
        classes, table.columns, multi_label=bool(table.label and table.label.multi)
    )
    return Dataset(
        KIND,
        table.root,
        schema,
        {split: tuple(items) for split, items in splits.items()},
        skipped=skipped,  # the first is what --on-error fail names
    )


class _Bad(Exception):
    """Why one row's item cannot be packed (caught per row)."""


def _classes(table: Manifest, pinned: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The class list: None unlabeled; --classes as given; else names sorted, or "0".."max"."""
    info = table.label
    if info is None:
        if pinned is not None:
            raise SourceError(f"{table.path}: has no label column for --classes to name")
        return None
    if pinned is not None:
        return pinned
    if info.kind == "names":
        return tuple(info.values)
    return tuple(str(i) for i in range(max(info.values, default=-1) + 1))


def _label(value, info: LabelInfo, position: dict[str, int]) -> int | tuple[int, ...]:
    """A row's label (a name, an integer, or a tuple of them) as class indices."""
    if info.multi:
        return tuple(_index(v, info, position) for v in value)
    return _index(value, info, position)


def _index(value, info: LabelInfo, position: dict[str, int]) -> int:
    if info.kind == "integers":
        if value >= len(position):
            raise _Bad(f"label {value} is not one of the {len(position)} classes of --classes")
        return value
    if value not in position:
        raise _Bad(f"class {value!r} is not in --classes")
    return position[value]


def _image_size(path: str) -> int:
    """The size of the image file at path; links are followed, but only to a regular file."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise _Bad(f"image {path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _Bad(f"image {path}: {not_regular(st.st_mode)}")
    return st.st_size
