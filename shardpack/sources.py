"""Finding items: a folder per class, or CIFAR-10/100 batches (python pickles or binary)."""

from __future__ import annotations

import os
import stat
import unicodedata
from dataclasses import dataclass, field

import numpy as np

from shardpack import safepickle
from shardpack.errors import SourceError
from shardpack.options import SOURCE_KINDS
from shardpack.srcfiles import RefusedFile, not_regular, read_regular

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
CIFAR_PIXELS = 32 * 32 * 3
_ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip")  # what a dataset is downloaded as
# The largest real CIFAR file (CIFAR-100 train) is 155 MB; refuse what could only be a trap.
MAX_BATCH_BYTES = 512 * 2**20
# A class-names file holds 100 short lines.
MAX_NAMES_BYTES = 2**20

# name -> (split of each batch file, file holding the class names)
_CIFAR_LAYOUTS = {
    "cifar10-python": (
        {**{f"data_batch_{i}": "train" for i in range(1, 6)}, "test_batch": "test"},
        "batches.meta",
    ),
    "cifar100-python": ({"train": "train", "test": "test"}, "meta"),
    "cifar10-binary": (
        {**{f"data_batch_{i}.bin": "train" for i in range(1, 6)}, "test_batch.bin": "test"},
        "batches.meta.txt",
    ),
    "cifar100-binary": ({"train.bin": "train", "test.bin": "test"}, "fine_label_names.txt"),
}


@dataclass(frozen=True, slots=True)  # slots: a listing of 1,000,000 holds 1,000,000 Items
class Item:
    """One record to write: where its pixels are and which class it has."""

    key: str  # unique in the dataset: path relative to SRC, or "<batch>:<record>" for CIFAR
    label: int
    path: str  # file to read, relative to SRC
    size: int  # bytes on disk (for an image file) or raw pixel bytes (for a CIFAR record)
    record: int | None = None  # record number inside a CIFAR batch
    coarse_label: int | None = None  # CIFAR-100's superclass


@dataclass(frozen=True)
class Dataset:
    """What a scan found: classes, items per split, and how many files it passed over."""

    kind: str  # "folder" or one of the CIFAR layouts
    root: str
    classes: tuple[str, ...]
    splits: dict[str, tuple[Item, ...]] = field(hash=False)
    ignored: int = 0
    coarse_classes: tuple[str, ...] | None = None
    ignored_files: tuple[str, ...] = ()  # the first MAX_NAMED_IGNORED of them
    skipped: tuple[tuple[str, str], ...] = ()  # (key, reason): special files, unlistable folders
    warnings: tuple[str, ...] = ()  # for the user, one line each: a class with no images

    @property
    def num_items(self) -> int:
        return sum(len(items) for items in self.splits.values())


def scan(src: str | os.PathLike, source: str = "auto") -> Dataset:
    """List every item under SRC.

    Args:
        src: a class-folder tree (SRC/<class>/**/<image>) or a folder of CIFAR batches.
        source: "folder", "cifar", or "auto" to tell them apart by the files present.

    Raises:
        SourceError: SRC is missing, empty, or not of the layout asked for.
    """
    root = source_root(src)
    if source not in SOURCE_KINDS:
        raise SourceError(f"--source must be one of {', '.join(SOURCE_KINDS)}, got: {source!r}")
    layout = cifar_layout(root, source)
    return _scan_folder(root) if layout is None else _scan_cifar(root, layout)


def cifar_layout(root: str, source: str = "auto") -> str | None:
    """Which CIFAR layout SRC holds (by its file names alone), or None for a class-folder tree.

    Raises:
        SourceError: source is "cifar" and no CIFAR batches are there.
    """
    layout = None if source == "folder" else _cifar_layout(root)
    if source == "cifar" and layout is None:
        raise SourceError(
            f"{root}: no CIFAR batches found; expected data_batch_1..5 and test_batch with "
            "batches.meta (CIFAR-10), train/test with meta (CIFAR-100), or their .bin versions"
        )
    return layout


def source_root(src: str | os.PathLike) -> str:
    """SRC as an absolute path, or a SourceError if it is not an existing folder."""
    root = os.path.abspath(os.fspath(src))
    if not os.path.exists(root):
        raise SourceError(f"{root}: no such folder; pass the folder that holds your images")
    if not os.path.isdir(root):
        raise SourceError(f"{root}: is a file, not a folder; {_instead_of_file(root)}")
    return root


def _instead_of_file(path: str) -> str:
    """What to pass instead of a file given as SRC, judged by its name."""
    parent = os.path.dirname(path)
    name = os.path.basename(path)
    if any(name in batches or name == meta for batches, meta in _CIFAR_LAYOUTS.values()):
        return f"it is a CIFAR file: pass the folder that holds it, {parent}"
    if name.endswith(_ARCHIVES):
        return "it is an archive: extract it (tar xf / unzip), then pass the folder it makes"
    if _is_image_name(name):
        return (
            f"it is an image: pass the folder above its class folder, {os.path.dirname(parent)} "
            f"(SRC/<class>/<image>, here with {os.path.basename(parent)} as the class)"
        )
    return "pass a folder of class folders (SRC/<class>/<image>) or of CIFAR batches"


# ---- class folders ---------------------------------------------------------------------------

# index.json names this many of the files a scan ignored (the count stays exact): enough to see
# what was passed over, bounded for a tree of millions of text files.
MAX_NAMED_IGNORED = 1000
# Characters that would split a class name over lines of TFDS's label.labels.txt or garble a
# terminal: control characters and line or paragraph separators. (Bytes that are not UTF-8 are
# kept: label.labels.txt holds the name's own bytes.)
_BAD_NAME_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


def _hidden(name: str) -> bool:
    return name.startswith(".")


def _is_image_name(name: str) -> bool:
    return "." in name and "." + name.rpartition(".")[2].lower() in IMAGE_EXTENSIONS


def _check_class_name(name: str, where: str) -> None:
    """Refuse a class name (a folder's, or from a CIFAR meta file at `where`) that is not one
    line of printable text."""
    if any(unicodedata.category(c) in _BAD_NAME_CATEGORIES for c in name):
        shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in name)
        raise SourceError(
            f"{where}: the class name '{shown}' holds a control character or a line break, "
            "but class names are written one per line: rename it"
        )


class _Passed:
    """What a folder scan passed over: files ignored (counted, the first ones named) and files
    or folders skipped with a reason."""

    def __init__(self) -> None:
        self.ignored = 0
        self.ignored_files: list[str] = []
        self.skipped: list[tuple[str, str]] = []

    def ignore(self, rel: str) -> None:
        self.ignored += 1
        if len(self.ignored_files) < MAX_NAMED_IGNORED:
            self.ignored_files.append(rel)


def _scan_folder(root: str) -> Dataset:
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as e:
        raise SourceError(f"{root}: cannot list ({e.strerror}); check its permissions") from None
    classes = tuple(e.name for e in entries if not _hidden(e.name) and e.is_dir())
    for name in classes:
        _check_class_name(name, root)
    passed = _Passed()
    for e in entries:
        if not _hidden(e.name) and not e.is_dir():
            passed.ignore(e.name)
    items: list[Item] = []
    # Claim SRC and every class folder up front: a link from one class into another (or back to
    # SRC) must not list the other class's images under the wrong label.
    class_dirs: dict[tuple[int, int], str] = {}
    for name in classes:
        first = class_dirs.setdefault(_dir_id(os.path.join(root, name)), name)
        if first != name:
            raise SourceError(
                f"{os.path.join(root, name)}: is the same folder as {os.path.join(root, first)} "
                "(a link); one folder cannot be two classes: remove the link"
            )
    seen_dirs = {_dir_id(root), *class_dirs}
    warnings = []
    for label, name in enumerate(classes):
        found = _walk_images(root, name, seen_dirs, passed)
        items.extend(Item(key=rel, label=label, path=rel, size=size) for rel, size in found)
        if not found:
            warnings.append(
                f"class '{name}' ({os.path.join(root, name)}) holds no images: it keeps label "
                f"{label} with no records"
            )
    if not items:
        raise SourceError(f"{root}: no images found; {_nothing_found(root, entries)}")
    items.sort(key=lambda item: item.key)
    return Dataset(
        "folder",
        root,
        classes,
        {"train": tuple(items)},
        passed.ignored,
        ignored_files=tuple(passed.ignored_files),
        skipped=tuple(sorted(passed.skipped)),
        warnings=tuple(warnings),
    )


def _nothing_found(root: str, entries: list[os.DirEntry]) -> str:
    """What SRC holds instead of class folders with images, and what to pass instead."""
    for e in entries:
        if e.is_dir() and _cifar_layout(e.path) is not None:
            return f"{e.path} holds CIFAR batches: pass that folder as SRC"
    archives = [e.name for e in entries if e.name.endswith(_ARCHIVES)]
    if archives:
        return f"it holds {archives[0]}: extract it, then pass the folder it makes"
    loose = sum(1 for e in entries if not e.is_dir() and _is_image_name(e.name))
    if loose:
        return (
            f"its {loose} images lie in SRC itself, but each class needs its own folder "
            f"(SRC/<class>/<image>): move them into class folders, or pass "
            f"{os.path.dirname(root)} to pack {os.path.basename(root)} as one class"
        )
    return f"expected SRC/<class>/<image> with extensions {', '.join(sorted(IMAGE_EXTENSIONS))}"


def _dir_id(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _walk_images(
    root: str, top: str, seen_dirs: set[tuple[int, int]], passed: _Passed
) -> list[tuple[str, int]]:
    """Return [(relative path, size)] of the images under root/top, each folder once; what is
    not an image goes to `passed`. Links are followed to folders and regular files only."""
    found: list[tuple[str, int]] = []
    pending = [top]
    while pending:
        rel_dir = pending.pop()
        path = os.path.join(root, rel_dir)
        try:
            if rel_dir != top:
                folder = _dir_id(path)
                if folder in seen_dirs:
                    continue  # a link to a folder already walked or claimed: follow it once
                seen_dirs.add(folder)
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except OSError as e:
            passed.skipped.append((f"{rel_dir}/", f"cannot list folder ({e.strerror})"))
            continue
        subfolders = []
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue  # hidden
            rel = f"{rel_dir}/{name}"
            try:
                st = entry.stat()  # follows links; one syscall, cached by the entry
            except OSError:
                st = None  # dangling link: an image name is kept so that the skip says why
            if st is not None and stat.S_ISDIR(st.st_mode):
                subfolders.append(rel)
            elif not _is_image_name(name):
                passed.ignore(rel)
            elif st is not None and not stat.S_ISREG(st.st_mode):
                passed.skipped.append((rel, not_regular(st.st_mode)))  # never opened
            else:
                found.append((rel, st.st_size if st is not None else 0))
        pending.extend(reversed(subfolders))  # walked in name order
    return found


# ---- CIFAR -----------------------------------------------------------------------------------


def _cifar_layout(root: str) -> str | None:
    for name, (batches, meta) in _CIFAR_LAYOUTS.items():
        present = [b for b in batches if os.path.isfile(os.path.join(root, b))]
        if present and os.path.isfile(os.path.join(root, meta)):
            return name
    return None


def _scan_cifar(root: str, layout: str) -> Dataset:
    batches, meta = _CIFAR_LAYOUTS[layout]
    binary = layout.endswith("binary")
    hundred = layout.startswith("cifar100")
    meta_path = os.path.join(root, meta)
    if binary:
        classes = _read_names(meta_path)
        coarse = _read_names(os.path.join(root, "coarse_label_names.txt")) if hundred else None
    else:
        names = load_cifar_pickle(meta_path)
        classes = _names(names, "fine_label_names" if hundred else "label_names", meta_path)
        coarse = _names(names, "coarse_label_names", meta_path) if hundred else None
    splits: dict[str, list[Item]] = {}
    for batch, split in batches.items():
        path = os.path.join(root, batch)
        if not os.path.isfile(path):
            continue
        labels, coarse_labels = (
            _binary_labels(path, hundred) if binary else _pickle_labels(path, hundred)
        )
        stem = batch.removesuffix(".bin")
        _check_range(path, labels, classes, meta)
        if coarse_labels is not None:
            _check_range(path, coarse_labels, coarse, "the coarse label names")
        for i, label in enumerate(labels):
            splits.setdefault(split, []).append(
                Item(
                    key=f"{stem}:{i}",
                    label=int(label),
                    path=batch,
                    size=CIFAR_PIXELS,
                    record=i,
                    coarse_label=None if coarse_labels is None else int(coarse_labels[i]),
                )
            )
    return Dataset(
        layout,
        root,
        classes,
        {split: tuple(items) for split, items in splits.items()},
        coarse_classes=coarse,
    )


def _read_file(path: str, limit: int, what: str) -> bytes:
    """A CIFAR file's bytes, read as hostile input (regular files only, bounded)."""
    try:
        return read_regular(path, limit)
    except RefusedFile as e:
        raise SourceError(f"{path}: {e}; is it {what}?") from None
    except OSError as e:
        raise SourceError(f"{path}: cannot read ({e.strerror}); check its permissions") from None


def _read_batch(path: str) -> bytes:
    return _read_file(path, MAX_BATCH_BYTES, "a CIFAR batch")


def _read_names(path: str) -> tuple[str, ...]:
    text = _text(_read_file(path, MAX_NAMES_BYTES, "a CIFAR class-names file"), path)
    names = tuple(line.strip() for line in text.split("\n") if line.strip())
    for name in names:
        _check_class_name(name, path)
    return names


def _text(value: object, path: str) -> str:
    """A name from a CIFAR file as text; bytes must be UTF-8."""
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise SourceError(
            f"{path}: holds a name that is not UTF-8 text; is it a CIFAR file?"
        ) from None


def _require(batch: dict, key: str, path: str):
    if key not in batch:
        raise SourceError(f"{path}: has no '{key}' entry; is it a CIFAR file?")
    return batch[key]


def _binary_record_size(hundred: bool) -> int:
    return CIFAR_PIXELS + (2 if hundred else 1)


def _binary_labels(path: str, hundred: bool) -> tuple[np.ndarray, np.ndarray | None]:
    size = _binary_record_size(hundred)
    raw = np.frombuffer(_read_batch(path), dtype=np.uint8)
    if raw.size == 0 or raw.size % size:
        raise SourceError(
            f"{path}: {raw.size} bytes is not a whole number of {size}-byte CIFAR records; "
            "the file is truncated or not a CIFAR binary batch"
        )
    records = raw.reshape(-1, size)
    if hundred:
        return records[:, 1], records[:, 0]
    return records[:, 0], None


def _pickle_labels(path: str, hundred: bool) -> tuple[list[int], list[int] | None]:
    batch = load_cifar_pickle(path)
    labels = _int_list(batch, "fine_labels" if hundred else "labels", path)
    data = _require(batch, "data", path)
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2
            and data.shape[1] == CIFAR_PIXELS):  # fmt: skip
        raise SourceError(f"{path}: 'data' is not an N x 3072 uint8 array; is it a CIFAR batch?")
    if len(labels) != len(data):
        raise SourceError(f"{path}: {len(labels)} labels for {len(data)} images")
    coarse = _int_list(batch, "coarse_labels", path) if hundred else None
    if coarse is not None and len(coarse) != len(labels):
        raise SourceError(f"{path}: {len(coarse)} coarse labels for {len(labels)} images")
    return labels, coarse


def _int_list(batch: dict, key: str, path: str) -> list[int]:
    values = _require(batch, key, path)
    if not isinstance(values, list) or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values
    ):
        raise SourceError(f"{path}: '{key}' is not a list of integers; is it a CIFAR batch?")
    return [int(v) for v in values]


def _names(meta: dict, key: str, path: str) -> tuple[str, ...]:
    values = _require(meta, key, path)
    if not isinstance(values, list) or not all(isinstance(v, (bytes, str)) for v in values):
        raise SourceError(f"{path}: '{key}' is not a list of names; is it a CIFAR meta file?")
    names = tuple(_text(v, path) for v in values)
    for name in names:
        _check_class_name(name, path)
    return names


def _check_range(path: str, labels, names: tuple[str, ...], where: str) -> None:
    for i, label in enumerate(labels):
        if not 0 <= label < len(names):
            raise SourceError(
                f"{path}: record {i} has label {label}, but {where} names {len(names)} "
                "classes; the batch and its meta file do not belong together"
            )


def read_cifar_pixels(root: str, batch: str) -> np.ndarray:
    """Return every image of one CIFAR batch as N x 32 x 32 x 3 uint8 RGB."""
    path = os.path.join(root, batch)
    if batch.endswith(".bin"):
        size = _binary_record_size(batch in ("train.bin", "test.bin"))
        data = np.frombuffer(_read_batch(path), np.uint8).reshape(-1, size)[
            :, size - CIFAR_PIXELS :
        ]
    else:
        data = _require(load_cifar_pickle(path), "data", path)
    return np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def load_cifar_pickle(path: str) -> dict[str, object]:
    """Load a CIFAR python batch, admitting only what the real files hold (see safepickle).

    Keys come back as str whether the file was written by Python 2 or 3.

    Raises:
        UnsafePickleError: the pickle holds anything else; nothing of it has run.
        SourceError: the file is unreadable or not a pickled dict.
    """
    loaded = safepickle.load(_read_batch(path), path)
    if not isinstance(loaded, dict):
        raise SourceError(f"{path}: holds a {type(loaded).__name__}, not a CIFAR batch dict")
    return {_text(k, path): v for k, v in loaded.items()}
