"""PackOptions: every choice a pack run makes, validated once, travelling as one value."""

from __future__ import annotations

import functools
import numbers
import operator
import os
import re
import types
import typing
from dataclasses import asdict, dataclass, fields

from shardpack.errors import ShardpackError

SOURCE_KINDS = ("auto", "folder", "cifar")
ENCODINGS = ("keep", "jpeg", "png", "webp", "raw")
CHECKS = ("header", "decode")
ON_ERROR = ("skip", "fail")
COMPRESSIONS = ("none", "gzip")
BACKENDS = ("loky", "dask")
DEDUP = ("none", "exact")
DEFAULT_SHARD_SIZE = 128 * 2**20
# Pillow's decompression-bomb limit: the most pixels an image may claim before it is refused.
DEFAULT_MAX_PIXELS = 178_956_970
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")
# First-level folders of SRC that make it a split tree (SRC/<split>/<class>/...).
SPLIT_NAMES = ("train", "training", "validation", "valid", "val", "test", "testing", "dev", "eval")
# A split name goes into shard file names: no '-' (it separates name and split there).
_SPLIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")

# Options that change the bytes written; the rest (workers, backend...) only change how fast.
_OUTPUT_FIELDS = (
    "name", "source", "shards", "shard_size", "encode", "quality", "max_side", "resize", "check",
    "compression", "seed", "shuffle", "max_pixels", "classes", "split_names", "split",
    "path_column", "root", "format", "dedup",
)  # fmt: skip


def _check_container(fmt: str, compression: str, index_files: bool) -> None:
    from shardpack.containers import CONTAINERS  # here: the containers import this module

    _choice("format", fmt, tuple(CONTAINERS))
    if compression not in CONTAINERS[fmt].compressions:
        raise ShardpackError(f"--compression {compression} is for --format tfrecord only; "
                             f"drop --compression")  # fmt: skip
    if index_files and not CONTAINERS[fmt].index_files:
        raise ShardpackError("--index-files writes DALI's TFRecord index files; "
                             f"--format {fmt} needs none: drop --index-files")  # fmt: skip


def _check_types(options: PackOptions) -> None:
    """Refuse an option whose value is not of its annotated type (TypeError naming it), as a
    Python caller may give; the CLI's are parsed already. Otherwise a string of class names
    would be taken a letter a class, shuffle="no" would shuffle, and a float shard count would
    fail deep in numpy. What is of the type in another dress is taken as it: a list for a
    tuple (the options are hashable), a numpy integer for an int (the journal is JSON), a
    path object for a str."""
    for field in fields(options):
        value = getattr(options, field.name)
        hint = _hints()[field.name]
        conformed = _conform(value, hint)
        if conformed is _WRONG:
            said = hint.__name__ if isinstance(hint, type) else hint  # "int", "int | None"
            raise TypeError(f"PackOptions.{field.name} must be {said}, got: {value!r}")
        if conformed is not value:
            object.__setattr__(options, field.name, conformed)


_WRONG = object()  # _conform's answer for a value not of the type


def _conform(value: object, hint: object) -> object:
    """`value` as a value of `hint` (a class, a tuple[...] or a union of them), or _WRONG."""
    if isinstance(hint, types.UnionType):
        conformed = (_conform(value, one) for one in typing.get_args(hint))
        return next((c for c in conformed if c is not _WRONG), _WRONG)
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, tuple | list):
            return _WRONG
        args = typing.get_args(hint)
        kinds = args[:1] * len(value) if args[1:] == (...,) else args
        items = tuple(_conform(v, k) for v, k in zip(value, kinds, strict=False))
        wrong = len(kinds) != len(value) or any(i is _WRONG for i in items)
        return _WRONG if wrong else items
    if isinstance(value, bool):  # an int too, but True is no shard count
        return value if hint is bool else _WRONG
    if hint is int:
        return operator.index(value) if isinstance(value, numbers.Integral) else _WRONG
    if hint is float:
        return float(value) if isinstance(value, numbers.Real) else _WRONG
    if hint is str and isinstance(value, os.PathLike):
        value = os.fspath(value)
    return value if isinstance(value, hint) else _WRONG


@functools.cache
def _hints() -> dict[str, object]:
    return typing.get_type_hints(PackOptions)


def _choice(option: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ShardpackError(f"--{option} must be one of {', '.join(allowed)}, got: {value!r}")


def _positive(option: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise ShardpackError(f"--{option} must be a positive integer, got: {value!r}")


@dataclass(frozen=True)
class PackOptions:
    """How to pack: source layout, sharding, encoding, checking and parallelism.

    Attributes:
        name: dataset name in shard file names; None takes it from SRC.
        source: "auto", "folder" or "cifar".
        shards: shards per split; None sizes them by `shard_size`, and at least as many as
            the workers the cost model (plan.best_workers) says the work is worth.
        shard_size: target bytes per shard when `shards` is None.
        workers: worker processes; 1 runs in-process; None lets the cost model choose from
            the work and the cores free (never more than there are shards).
        backend: "loky" (this machine) or "dask" (a cluster).
        scheduler: the Dask scheduler's address; None starts a LocalCluster of `workers`.
        encode: "keep" (JPEG/PNG bytes pass through), "jpeg", "png", "webp" or "raw" pixels.
        quality: JPEG/WebP quality, 1-100.
        max_side: shrink so the longer side is at most this many pixels.
        resize: (width, height) to resize every image to.
        check: "header" (structure only for passed-through bytes) or "decode" (every pixel).
        on_error: "skip" a bad image and record why, or "fail" the run.
        compression: "none" or "gzip" TFRecords.
        format: the shard container: "tfrecord", "array_record" or "webdataset"
            (shardpack.containers.CONTAINERS).
        dedup: "none" reports exact copies; "exact" also keeps one of each group, an
            evaluation split's first (packing.duplicates), and skips the others.
        seed: shuffle seed.
        shuffle: False keeps the sorted source order.
        max_pixels: refuse images that claim more pixels than this (decompression bombs).
        overwrite: replace an existing, different shardpack output in OUT.
        resume: keep the shards an interrupted run of the same plan finished.
        index_files: also write DALI-style per-shard index files (OUT/idx/) for random access.
        classes: the class list and its order (--classes); None takes the sorted names found.
        split_names: first-level folder names that make SRC a split tree (--splits).
        split: (name, fraction) pairs to split a one-split source into (--split), seeded by
            `seed`, stratified by label.
        path_column: a manifest's column of image paths (--path-column); None finds it.
        root: the folder a manifest's relative image paths are under (--root); None: the
            manifest's folder.
    """

    name: str | None = None
    source: str = "auto"
    shards: int | None = None
    shard_size: int = DEFAULT_SHARD_SIZE
    workers: int | None = None
    backend: str = "loky"
    scheduler: str | None = None
    encode: str = "keep"
    quality: int = 95
    max_side: int | None = None
    resize: tuple[int, int] | None = None
    check: str = "header"
    on_error: str = "skip"
    compression: str = "none"
    seed: int = 0
    shuffle: bool = True
    max_pixels: int = DEFAULT_MAX_PIXELS
    overwrite: bool = False
    resume: bool = False
    index_files: bool = False
    classes: tuple[str, ...] | None = None
    split_names: tuple[str, ...] = SPLIT_NAMES
    split: tuple[tuple[str, float], ...] | None = None
    path_column: str | None = None
    root: str | None = None
    format: str = "tfrecord"
    dedup: str = "none"

    def __post_init__(self) -> None:
        _check_types(self)
        _choice("source", self.source, SOURCE_KINDS)
        _choice("backend", self.backend, BACKENDS)
        _choice("encode", self.encode, ENCODINGS)
        _choice("check", self.check, CHECKS)
        _choice("on-error", self.on_error, ON_ERROR)
        _choice("compression", self.compression, COMPRESSIONS)
        _choice("dedup", self.dedup, DEDUP)
        for option in ("shards", "shard_size", "workers", "max_side", "max_pixels"):
            _positive(option.replace("_", "-"), getattr(self, option))
        if self.seed < 0:
            raise ShardpackError(f"--seed must be a non-negative integer, got: {self.seed!r}")
        if not 1 <= self.quality <= 100:
            raise ShardpackError(f"--quality must be between 1 and 100, got: {self.quality!r}")
        if self.resize is not None:
            if len(self.resize) != 2 or min(self.resize) < 1:
                raise ShardpackError(f"--resize must be WIDTHxHEIGHT, got: {self.resize!r}")
            if self.max_side is not None:
                raise ShardpackError("--resize and --max-side exclude each other; pass one")
            if self.resize[0] * self.resize[1] > self.max_pixels:
                raise ShardpackError(
                    f"--resize {self.resize[0]}x{self.resize[1]} is over --max-pixels "
                    f"{self.max_pixels}; pass a smaller size or raise --max-pixels"
                )
        if self.scheduler is not None and self.backend != "dask":
            raise ShardpackError("--scheduler needs --backend dask")
        if self.index_files and self.compression != "none":
            raise ShardpackError("--index-files needs uncompressed shards; drop --compression")
        _check_container(self.format, self.compression, self.index_files)
        for split in (*self.split_names, *(name for name, _ in self.split or ())):
            if not _SPLIT.match(split):
                raise ShardpackError(
                    f"split names must start with a letter or digit and hold only letters, "
                    f"digits, '_' and '.', got: {split!r}"
                )
        if self.split is not None:
            check_fractions(self.split)
        if self.name is not None and not _NAME.match(self.name):
            raise ShardpackError(
                f"--name must start with a letter or digit and hold only letters, digits, '_' "
                f"and '.', got: {self.name!r}"
            )

    def output_fields(self) -> dict[str, object]:
        """The options that decide the output bytes, as JSON-ready values."""
        fields = asdict(self)
        if not self.shuffle:
            fields["seed"] = None  # no shuffle: the seed changes nothing
        return {key: fields[key] for key in _OUTPUT_FIELDS}


def parse_size(text: str) -> int:
    """Parse '128MiB', '64M', '1G' or '1048576' into bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*", text, re.IGNORECASE)
    if not match:
        raise ShardpackError(f"--shard-size must look like 128MiB, 64M or 1000000, got: {text!r}")
    number, unit = float(match.group(1)), match.group(2).upper()
    return int(number * 1024 ** " KMGT".index(unit or " "))


def parse_resize(text: str) -> tuple[int, int]:
    """Parse 'WIDTHxHEIGHT' into (width, height)."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not match or min(int(match.group(1)), int(match.group(2))) < 1:
        raise ShardpackError(f"--resize must be WIDTHxHEIGHT such as 224x224, got: {text!r}")
    return int(match.group(1)), int(match.group(2))


def check_fractions(split: tuple[tuple[str, float], ...]) -> None:
    """--split: distinct names, fractions in (0, 1] that add up to 1."""
    names = [name for name, _ in split]
    if len(set(names)) != len(names) or not names:
        raise ShardpackError(f"--split must name each split once, got: {', '.join(names)!r}")
    if any(not 0 < fraction <= 1 for _, fraction in split):
        raise ShardpackError("--split fractions must be above 0 and at most 1, such as train=0.9")
    if abs(sum(fraction for _, fraction in split) - 1) > 1e-6:
        total = sum(fraction for _, fraction in split)
        raise ShardpackError(f"--split fractions must add up to 1, got {total:g}")


def parse_split(text: str) -> tuple[tuple[str, float], ...]:
    """Parse 'train=0.9,validation=0.1' into (("train", 0.9), ("validation", 0.1))."""
    pairs = []
    for part in text.split(","):
        name, sep, fraction = part.partition("=")
        try:
            pairs.append((name.strip(), float(fraction)))
        except ValueError:
            sep = ""
        if not sep:
            raise ShardpackError(
                f"--split must look like train=0.9,validation=0.1, got: {text!r}"
            ) from None
    split = tuple(pairs)
    check_fractions(split)
    return split
