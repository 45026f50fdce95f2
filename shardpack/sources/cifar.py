"""The CIFAR source: CIFAR-10/100 batches, python pickles (walked by safepickle) or binary."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from shardpack.errors import Option, SourceError
from shardpack.options import PackOptions
from shardpack.schema import Feature, Schema
from shardpack.sources.classlist import check_class_names
from shardpack.sources.scanprogress import listed
from shardpack.sources.source import NO_FIELDS, Dataset, Item, RecordCost, Source, folder_only
from shardpack.storage import Storage, storage_at
from shardpack.storage.srcfiles import RefusedFile

if TYPE_CHECKING:
    import numpy as np

# numpy, the safe unpickler and images are imported where used: --source's choices come from
# the registry, and `pack --help` loads no numpy.

CIFAR_PIXELS = 32 * 32 * 3
# The largest real CIFAR file (CIFAR-100 train) is 155 MB; refuse what could only be a trap.
MAX_BATCH_BYTES = 512 * 2**20
# A class-names file holds 100 short lines.
MAX_NAMES_BYTES = 2**20

# name -> (split of each batch file, file holding the class names)
LAYOUTS = {
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


class CifarSource(Source):
    """CIFAR-10/100 batches, python or binary: one of LAYOUTS."""

    name = "cifar"
    kinds = tuple(LAYOUTS)
    described = "CIFAR batches"
    splits_from = "its train and test batches"
    # An item is 32x32 pixels in memory, by output encoding; "keep" becomes PNG. Per-record
    # costs from `python -m benchmarks.stages`.
    record_cost = RecordCost(
        CIFAR_PIXELS, {"keep": 150e-6, "raw": 45e-6, "jpeg": 70e-6, "png": 150e-6, "webp": 200e-6}
    )

    def recognise(self, root: Storage, options: PackOptions) -> tuple[Storage, str] | None:
        folder_only(root, options, self.name)
        layout = cifar_layout(root) if root.kind() == "dir" else None
        if layout is not None:
            return root, layout
        if options.source == self.name:
            raise SourceError(
                f"{root.path()}: no CIFAR batches found; expected data_batch_1..5 and test_batch "
                "with batches.meta (CIFAR-10), train/test with meta (CIFAR-100), or their .bin "
                "versions"
            )
        return None

    def scan(
        self,
        found: tuple[Storage, str],
        options: PackOptions,
        storage_options: Mapping[str, object] | None,
    ) -> Dataset:
        root, layout = found
        if options.classes is not None:
            raise SourceError(f"{root.path()}: CIFAR brings its own class list; drop ",
                              Option("classes"))  # fmt: skip
        return scan_cifar(root, layout)

    def load(self, item: Item, root: Storage, options: PackOptions, cache: dict) -> np.ndarray:
        return load(item, root, options, cache)

    def item_files(self, items: Iterable[Item]) -> Iterator[tuple[str, int]]:
        return iter(())  # its batches are read once a process, whole

    def default_name(self, dataset: Dataset) -> str:
        return dataset.kind.split("-")[0]  # cifar10, cifar100

    def keeping(self) -> contextlib.AbstractContextManager[None]:
        return keep_batches()


def cifar_layout(root: Storage) -> str | None:
    """Which CIFAR layout the folder holds (by its file names alone), or None."""
    # The meta file first: a folder of images is told apart in one look per layout (a request
    # each on an object store), not one per batch name.
    for name, (batches, meta) in LAYOUTS.items():
        if root.kind(meta) == "file" and any(root.kind(b) == "file" for b in batches):
            return name
    return None


def scan_cifar(root: Storage, layout: str) -> Dataset:
    batches, meta = LAYOUTS[layout]
    binary = layout.endswith("binary")
    hundred = layout.startswith("cifar100")
    meta_path = root.path(meta)
    if binary:
        classes = _read_names(root, meta)
        coarse = _read_names(root, "coarse_label_names.txt") if hundred else None
    else:
        names = load_cifar_pickle(root, meta)
        classes = _names(names, "fine_label_names" if hundred else "label_names", meta_path)
        coarse = _names(names, "coarse_label_names", meta_path) if hundred else None
    splits: dict[str, list[Item]] = {}
    missing = []
    for batch, split in batches.items():
        path = root.path(batch)
        if root.kind(batch) != "file":
            missing.append(batch)
            continue
        labels, coarse_labels = (
            _binary_labels(root, batch, hundred) if binary else _pickle_labels(root, batch, hundred)
        )
        stem = batch.removesuffix(".bin")
        _check_range(path, labels, classes, meta)
        listed(len(labels))
        if coarse_labels is not None:
            _check_range(path, coarse_labels, coarse, "the coarse label names")
        fields = [NO_FIELDS] * len(labels) if coarse_labels is None else [
            {"coarse_label": value} for value in coarse_labels
        ]  # fmt: skip
        # one comprehension, each Item made by tuple.__new__ (as classlist.labelled does): half
        # the time of Item(...) in a loop
        new = tuple.__new__
        splits.setdefault(split, []).extend([
            new(Item, (f"{stem}:{i}", label, batch, CIFAR_PIXELS, i, fields[i]))
            for i, label in enumerate(labels)
        ])  # fmt: skip
    extra = {} if coarse is None else {"coarse_label": Feature("int64", classes=coarse)}
    return Dataset(
        layout,
        root,
        Schema.build(classes, extra),
        {split: tuple(items) for split, items in splits.items()},
        # a batch gone (an archive extracted in part) is packed around, and said
        warnings=tuple(
            f"{root.path()}: no {batch}: packed without it; extract the whole archive to "
            "pack every record"
            for batch in missing
        ),
    )


def _read_file(root: Storage, name: str, limit: int, what: str) -> bytes:
    """A CIFAR file's bytes, read as hostile input (regular files only, bounded)."""
    try:
        return root.read(name, limit)
    except RefusedFile as e:
        raise SourceError(f"{root.path(name)}: {e}; is it {what}?") from None
    except OSError as e:
        why = e.strerror or e
        raise SourceError(
            f"{root.path(name)}: cannot read ({why}); check its permissions"
        ) from None


def _read_batch(root: Storage, name: str) -> bytes:
    return _read_file(root, name, MAX_BATCH_BYTES, "a CIFAR batch")


def _read_names(root: Storage, file: str) -> tuple[str, ...]:
    path = root.path(file)
    text = _text(_read_file(root, file, MAX_NAMES_BYTES, "a CIFAR class-names file"), path)
    names = tuple(line.strip() for line in text.split("\n") if line.strip())
    check_class_names(names, path, "its lines")
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


def _binary_labels(root: Storage, name: str, hundred: bool) -> tuple[list[int], list[int] | None]:
    import numpy as np

    size = _binary_record_size(hundred)
    path = root.path(name)
    raw = np.frombuffer(_read_batch(root, name), dtype=np.uint8)
    if raw.size == 0 or raw.size % size:
        raise SourceError(
            f"{path}: {raw.size} bytes is not a whole number of {size}-byte CIFAR records; "
            "the file is truncated or not a CIFAR binary batch"
        )
    records = raw.reshape(-1, size)
    if hundred:
        return records[:, 1].tolist(), records[:, 0].tolist()
    return records[:, 0].tolist(), None


def _pickle_labels(root: Storage, name: str, hundred: bool) -> tuple[list[int], list[int] | None]:
    import numpy as np

    path = root.path(name)
    batch = load_cifar_pickle(root, name)
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
    import numpy as np

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
    check_class_names(names, path, f"its '{key}'")
    return names


def _check_range(path: str, labels, names: tuple[str, ...], where: str) -> None:
    for i, label in enumerate(labels):
        if not 0 <= label < len(names):
            raise SourceError(
                f"{path}: record {i} has label {label}, but {where} names {len(names)} "
                "classes; the batch and its meta file do not belong together"
            )


def read_cifar_pixels(root: Storage | str, batch: str) -> np.ndarray:
    """Return every image of one CIFAR batch (in the folder `root`, a path, URL or Storage) as
    N x 32 x 32 x 3 uint8 RGB: a read-only view over the file's planar rows."""
    return _planes(storage_at(root), batch).transpose(0, 2, 3, 1)


def _planes(root: Storage, batch: str) -> np.ndarray:
    """A batch's images as N x 3 x 32 x 32 (each image's red, green and blue planes), a view
    over the file's rows."""
    import numpy as np

    if batch.endswith(".bin"):
        size = _binary_record_size(batch in ("train.bin", "test.bin"))
        data = np.frombuffer(_read_batch(root, batch), np.uint8).reshape(-1, size)[
            :, size - CIFAR_PIXELS :
        ]
    else:
        data = _require(load_cifar_pickle(root, batch), "data", root.path(batch))
    return data.reshape(-1, 3, 32, 32)


def load_cifar_pickle(root: Storage | str, name: str = "") -> dict[str, object]:
    """Load a CIFAR python batch, admitting only what the real files hold (see safepickle).

    Args:
        root: the batch file (path, URL or Storage), or the folder holding `name`.
        name: the batch's name in `root`; "" when root is the file itself.

    Keys come back as str whether the file was written by Python 2 or 3.

    Raises:
        UnsafePickleError: the pickle holds anything else; nothing of it has run.
        SourceError: the file is unreadable or not a pickled dict.
    """
    root = storage_at(root)
    path = root.path(name)
    # Kept by a local file's identity only: an object's would cost a request to learn.
    identity = root.identity(name)
    loaded = _kept.get(identity) if _kept is not None and identity is not None else None
    if loaded is None:
        from shardpack.sources import safepickle  # numpy: not for pack --help

        loaded = safepickle.load(_read_batch(root, name), path)
        _keep(identity, root, name, loaded)
    if not isinstance(loaded, dict):
        raise SourceError(f"{path}: holds a {type(loaded).__name__}, not a CIFAR batch dict")
    return {_text(k, path): v for k, v in loaded.items()}


def load(item: Item, root: Storage, options: PackOptions, cache: dict) -> np.ndarray:
    """One record's 32x32 RGB pixels; each batch a shard reads is loaded once into `cache`."""
    from shardpack import images  # numpy: not for pack --help

    if item.path not in cache:
        cache[item.path] = _planes(root, item.path)
    # One image at a time: interleaving whole batches in a forked worker is no faster (its
    # fresh memory is page-faulted in, each worker all six batches) and holds 186 MB.
    return images.interleave(cache[item.path][item.position])


# The scan loads every python batch for its labels, then each shard reads pixels from the same
# batches (a shuffled shard draws from all of them); each load is the safe unpickler's walk
# again. Inside keep_batches() the loaded batches are kept by file identity, up to
# MAX_KEPT_BYTES: all of CIFAR-10 (6 x 31 MB) or CIFAR-100 (155 + 31 MB). Workers forked
# after the scan find them in memory they share with the parent; an in-process run reuses them.
MAX_KEPT_BYTES = 200 * 2**20
_kept: dict[tuple[int, int, int, int], object] | None = None


@contextlib.contextmanager
def keep_batches() -> Iterator[None]:
    """Keep the CIFAR python batches loaded inside the block (bounded by MAX_KEPT_BYTES), so
    that reading one again, in this process or a worker forked from it, loads nothing."""
    global _kept
    _kept = {}
    try:
        yield
    finally:
        _kept = None


def _keep(identity: tuple[int, ...] | None, root: Storage, name: str, loaded: object) -> None:
    """Keep `loaded` under `identity` if a block is open, it fits, and the file did not change
    while it was read."""
    if _kept is None or identity is None or identity != root.identity(name):
        return
    if identity[2] + sum(key[2] for key in _kept) <= MAX_KEPT_BYTES:
        _kept[identity] = loaded


SOURCE = CifarSource()
