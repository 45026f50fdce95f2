"""PackOptions: every choice a pack run makes, validated once, travelling as one value."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from shardpack.errors import ShardpackError

SOURCE_KINDS = ("auto", "folder", "cifar")
ENCODINGS = ("keep", "jpeg", "png", "webp", "raw")
CHECKS = ("header", "decode")
ON_ERROR = ("skip", "fail")
COMPRESSIONS = ("none", "gzip")
BACKENDS = ("loky", "dask")
DEFAULT_SHARD_SIZE = 128 * 2**20
# Pillow's decompression-bomb limit: the most pixels an image may claim before it is refused.
DEFAULT_MAX_PIXELS = 178_956_970
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")

# Options that change the bytes written; the rest (workers, backend...) only change how fast.
_OUTPUT_FIELDS = (
    "name", "source", "shards", "shard_size", "encode", "quality", "max_side", "resize", "check",
    "compression", "seed", "shuffle", "max_pixels",
)  # fmt: skip


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
        seed: shuffle seed.
        shuffle: False keeps the sorted source order.
        max_pixels: refuse images that claim more pixels than this (decompression bombs).
        overwrite: replace an existing, different shardpack output in OUT.
        resume: keep the shards an interrupted run of the same plan finished.
        index_files: also write DALI-style per-shard index files (OUT/idx/) for random access.
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

    def __post_init__(self) -> None:
        _choice("source", self.source, SOURCE_KINDS)
        _choice("backend", self.backend, BACKENDS)
        _choice("encode", self.encode, ENCODINGS)
        _choice("check", self.check, CHECKS)
        _choice("on-error", self.on_error, ON_ERROR)
        _choice("compression", self.compression, COMPRESSIONS)
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
