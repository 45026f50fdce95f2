"""PackOptions: every choice a pack run makes, travelling as one value. The values every source
reads are validated here; those of a source's own options (Source.own_options), by that source
(Source.check_options), when a scan has found it."""

from __future__ import annotations

import difflib
import functools
import numbers
import operator
import os
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields

from shardpack.containers import CONTAINER_ALIASES, CONTAINERS
from shardpack.errors import Option, OptionError, ShardpackError, said_value
from shardpack.storage.locations import absolute
from shardpack.storage.urlpolicy import DEADLINE_S

ENCODINGS = ("keep", "jpeg", "png", "webp", "raw")
# Other names of an encoding, taken for it: JPEG's files end in .jpg.
ENCODING_ALIASES = {"jpg": "jpeg"}
CHECKS = ("header", "decode")
ON_ERROR = ("skip", "fail")
BACKENDS = ("local", "dask")
# Older names of a backend, still taken: "loky" ran this machine's workers.
BACKEND_ALIASES = {"loky": "local"}
RESIZE_MODES = ("stretch", "center-crop", "pad", "keep-ratio", "keep-ratio-largest")
# img2dataset's names for the same modes, accepted as they are spelled there.
RESIZE_ALIASES = {
    "fixed": "stretch", "center_crop": "center-crop", "border": "pad",
    "keep_ratio": "keep-ratio", "keep_ratio_largest": "keep-ratio-largest",
}  # fmt: skip
_COLORS = {"white": (255, 255, 255), "black": (0, 0, 0), "gray": (128, 128, 128)}
# What --pad-color takes, as its help and its error say it.
_COLOR_FORMS = f"{', '.join(_COLORS)}, #RRGGBB or R,G,B"
DEFAULT_FORMAT = "tfrecord"  # the shard container (shardpack.containers) when none is named
DEDUP = ("none", "exact", "near")
# --append adds new items in new shards; --update also rewrites the shards of changed ones.
GROW = ("none", "append", "update")
# How WebDataset samples name their members: shardpack's (`.json` of every feature) or
# img2dataset's (`.txt` caption, `.json` with url, status, original size and sha256).
WDS_NAMINGS = ("shardpack", "img2dataset")
# --box-columns' formats of normalised boxes (each taken to TFDS's yxyx at scan): TFDS's,
# Pascal's corners x first, COCO's corner and size, YOLO's centre and size.
BOX_FORMATS = ("yxyx", "xyxy", "xywh", "cxcywh")
DEFAULT_SHARD_SIZE = 128 * 2**20
# The shuffles a pack may use (index.json's `shuffle`): every item in one seeded permutation;
# a list streamed file range by file range, ranges and the rows in each shard permuted; none.
SHUFFLES = ("global", "window", "none")
# Pillow's decompression-bomb limit: the most pixels an image may claim before it is refused.
DEFAULT_MAX_PIXELS = 178_956_970
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")
# First-level folders of SRC that make it a split tree (SRC/<split>/<class>/...).
SPLIT_NAMES = ("train", "training", "validation", "valid", "val", "test", "testing", "dev", "eval")
# A split name goes into shard file names: no '-' (it separates name and split there); its
# dots as datasets takes them ('\w+(\.\w+)*': none at the end, none twice in a row).
_SPLIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")
# The most characters a dataset's and a split's name may have: OUT's longest file name holding
# both (a shard's progress file, `.{name}-{split}.array_record-00000-of-00001.{16 hex}.progress`,
# 56 more) stays within the 255 bytes a file name has on common file systems.
MAX_NAME_CHARS = 128
MAX_SPLIT_CHARS = 64

# The default --near-distance, from `python -m benchmarks.near_distance` (300 benchmark photos):
# a 0.7x, quality-60 copy hashes at most 4 bits away (median 0), quality 60 alone at most 2;
# distinct photos 12 at least (median 30; 0.1% of pairs within 16). A 5% crop or a colour
# shift is 4 bits away typically but up to 10-12: a larger --near-distance finds those.
NEAR_DISTANCE = 4
QUALITY = 95  # --quality's default
# --pad-color's default: white, as img2dataset's border.
_DEFAULT_PAD = (255, 255, 255)

# Options that change the bytes written; the rest (workers, backend...) only change how fast.
_OUTPUT_FIELDS = (
    "name", "source", "shards", "shard_size", "encode", "quality", "max_side", "resize", "check",
    "compression", "seed", "shuffle", "max_pixels", "classes", "split_names", "split",
    "path_column", "root", "format", "dedup", "box_columns", "wds_naming", "min_visibility",
    "resize_mode", "pad_color", "upscale", "min_side", "max_aspect", "max_area",
)  # fmt: skip
# Options that change the bytes written where given (None: as before they were options).
_GIVEN_FIELDS = ("label_column", "path_suffix", "columns")


def _check_container(
    fmt: str, compression: str, index_files: bool, encode: str, naming: str
) -> None:
    check_choice("format", fmt, tuple(CONTAINERS))
    container = CONTAINERS[fmt]
    if compression not in container.compressions:
        others = [name for name, c in CONTAINERS.items() if compression in c.compressions]
        if not others:
            known = (c for each in CONTAINERS.values() for c in each.compressions)
            check_choice("compression", compression, tuple(dict.fromkeys(known)))
        formats = _either(Option("format", name) for name in others)
        raise OptionError(Option("compression", compression), " is for ", *formats,
                          " only; drop ", Option("compression"))  # fmt: skip
    if encode == "raw" and not container.raw_pixels:
        raise OptionError(Option("encode", "raw"), " stores pixels that ", Option("format", fmt),
                          "'s readers do not decode as images; pass ", Option("encode", "png"),
                          " (lossless) instead")  # fmt: skip
    if index_files and not container.index_files:
        kinds = _either(Option("format", name) for name, c in CONTAINERS.items() if c.index_files)
        raise OptionError(Option("index_files", True), " writes DALI's index files, for ", *kinds,
                          "; ", Option("format", fmt), " needs none: drop ",
                          Option("index_files", True))  # fmt: skip
    if naming not in container.namings:
        kinds = _either(Option("format", n) for n, c in CONTAINERS.items() if naming in c.namings)
        raise OptionError(Option("wds_naming", naming), " names the members of ", *kinds,
                          "'s samples; ", Option("format", fmt), " has none: drop ",
                          Option("wds_naming"))  # fmt: skip


def _either(options: Iterable[Option]) -> list[str | Option]:
    """Options as message parts joined by "or"."""
    parts: list[str | Option] = []
    for option in options:
        parts += [" or ", option] if parts else [option]
    return parts


def _check_types(options: PackOptions) -> None:
    """Refuse an option whose value is not of its annotated type (TypeError naming it), as a
    Python caller may give; the CLI's are parsed already. Otherwise a string of class names
    would be taken a letter a class, shuffle="no" would shuffle, and a float shard count would
    fail deep in numpy. What is of the type in another dress is taken as it: a list for a
    tuple (the options are hashable), a numpy integer for an int (the journal is JSON), a
    path object for a str."""
    for field in fields(options):
        value = getattr(options, field.name)
        hint = option_types()[field.name]
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
def option_types() -> dict[str, object]:
    """Each PackOptions field's type, its annotation evaluated once a process (typing's
    get_type_hints evaluates them all on each call)."""
    return typing.get_type_hints(PackOptions)


def choice_options() -> dict[str, tuple[tuple[str, ...], Mapping[str, str]]]:
    """Each option whose value is one of a list: that list, and the other names taken for its
    values (--source's are the sources', which check it)."""
    return {
        "backend": (BACKENDS, BACKEND_ALIASES), "encode": (ENCODINGS, ENCODING_ALIASES),
        "check": (CHECKS, {}), "on_error": (ON_ERROR, {}), "format": (tuple(CONTAINERS),
        CONTAINER_ALIASES), "dedup": (DEDUP, {}), "grow": (GROW, {}),
        "wds_naming": (WDS_NAMINGS, {}),
    }  # fmt: skip


def chosen(option: str, value: str, allowed: tuple[str, ...], aliases: Mapping[str, str]) -> str:
    """The one of `allowed` that `value` of choice option `option` means: itself, what an alias
    of `aliases` stands for, or either written in another case or with '-' or '_' as the other
    or left out ("PNG", "array-record"); else OptionError as check_choice's."""
    if value in allowed:
        return value
    meant = _named(allowed, aliases).get(_folded(value))
    if meant is None:
        check_choice(option, value, allowed, aliases)
    return meant


def check_choice(
    option: str, value: str, allowed: tuple[str, ...], aliases: Mapping[str, str] | None = None
) -> None:
    """Refuse a value not among those allowed, naming the option, every choice and the nearest
    (of those and the `aliases` of them) where one is near."""
    if value in allowed:
        return
    named = _named(allowed, aliases or {})
    near = difflib.get_close_matches(_folded(value), named, n=1, cutoff=_NEAR_CHOICE)
    said = ("; did you mean ", Option(option, named[near[0]]), "?") if near else ()
    raise OptionError(Option(option), f" must be one of {', '.join(allowed)}, got: {value!r}",
                      *said)  # fmt: skip


# How alike (difflib's ratio) a wrong choice and a right one must be to be named as meant:
# "webdatasets", "parquets", "jpgg" and "lcoal" are; "crop" and "center-crop" are not.
_NEAR_CHOICE = 0.6


def _named(allowed: tuple[str, ...], aliases: Mapping[str, str]) -> dict[str, str]:
    """Each choice and alias, folded (_folded), -> the choice it names."""
    return {_folded(name): name for name in allowed} | {
        _folded(alias): name for alias, name in aliases.items() if name in allowed
    }


def _folded(text: str) -> str:
    """A choice's name as its spellings meet: in lower case, without '-', '_' or spaces."""
    return re.sub(r"[-_ ]", "", text.casefold())


def _check_transform(options: PackOptions) -> None:
    """--resize-mode (img2dataset's name taken as ours), --pad-color and the size filters."""
    if options.resize_mode == "no":  # img2dataset's --resize_mode no: every image as it is
        also = (" and ", Option("resize")) if options.resize is not None else ()
        raise OptionError(Option("resize_mode", "no"), " (img2dataset's: each image keeps its "
                          "size) is what leaving out ", Option("resize"), " does: drop ",
                          Option("resize_mode"), *also)  # fmt: skip
    mode = chosen("resize_mode", options.resize_mode, RESIZE_MODES, RESIZE_ALIASES)
    object.__setattr__(options, "resize_mode", mode)
    if options.resize is None and (mode != "stretch" or not options.upscale):
        said = Option("upscale", False) if mode == "stretch" else Option("resize_mode", mode)
        raise OptionError(said, " needs ", Option("resize"))
    if len(options.pad_color) != 3 or not all(0 <= c <= 255 for c in options.pad_color):
        raise OptionError(Option("pad_color"), " must be R,G,B of 0-255, got: "
                          f"{options.pad_color!r}")  # fmt: skip
    for option in ("min_side", "max_area"):
        check_positive(option, getattr(options, option))
    if not 0 <= options.min_visibility <= 1:
        raise OptionError(Option("min_visibility"), " is a share of a box's area, between 0 "
                          f"and 1, got: {options.min_visibility!r}")  # fmt: skip
    if options.max_aspect is not None and not options.max_aspect >= 1:
        raise OptionError(Option("max_aspect"), " must be a ratio of at least 1, got: "
                          f"{options.max_aspect!r}")  # fmt: skip


def refuse_idle(options: PackOptions) -> None:
    """Refuse an option that changes nothing in the run the others ask for, as --no-upscale
    without --resize is: --pad-color without --resize-mode pad (the image would be stretched or
    cut instead, silently), --quality where nothing is JPEG or WebP (--encode png or raw; keep
    re-encodes a JPEG it resizes or turns upright as JPEG), --near-distance without --dedup
    near. A fresh pack's check: a grow takes the dataset's own options, which an older pack
    kept whatever they were."""
    if options.pad_color != _DEFAULT_PAD and options.resize_mode != "pad":
        raise OptionError(Option("pad_color"), " colours the border of ",
                          Option("resize_mode", "pad"), ", and this run does not pad; pass ",
                          Option("resize_mode", "pad"), " (with ", Option("resize"),
                          "), or drop ", Option("pad_color"))  # fmt: skip
    if options.quality != QUALITY and options.encode in ("raw", "png"):
        raise OptionError(Option("quality"), " is the quality of JPEG and WebP, and this run "
                          "encodes ", Option("encode", options.encode), "; pass ",
                          Option("encode", "jpeg"), " (or webp, or keep), or drop ",
                          Option("quality"))  # fmt: skip
    if options.near_distance != NEAR_DISTANCE and options.dedup != "near":
        raise OptionError(Option("near_distance"), " is the distance of ",
                          Option("dedup", "near"), ", and this run's is ",
                          Option("dedup", options.dedup), "; pass ", Option("dedup", "near"),
                          ", or drop ", Option("near_distance"))  # fmt: skip


def check_positive(option: str, value: int | None) -> None:
    """Refuse a value under 1 of `option` (None, for an option left out, passes)."""
    if value is not None and value < 1:
        raise OptionError(Option(option), f" must be a positive integer, got: {value!r}")


@dataclass(frozen=True)
class PackOptions:
    """How to pack: source layout, sharding, encoding, checking and parallelism.

    Attributes:
        name: dataset name in shard file names; None takes it from SRC.
        source: "auto" (SRC's files tell), or a registered source's name: "folder",
            "cifar" (shardpack.sources.source_choices).
        shards: shards per split; None sizes them by `shard_size`, and at least as many as
            the workers the cost model (plan.best_workers) says the work is worth.
        shard_size: target bytes per shard when `shards` is None.
        workers: worker processes; 1 runs in-process; None lets the cost model choose from
            the work and the cores free (never more than there are shards).
        backend: "local" (this machine's cores; "loky" is taken as its old name) or "dask"
            (a cluster).
        scheduler: the Dask scheduler's address; None starts a LocalCluster of `workers`.
        encode: "keep" (JPEG/PNG bytes pass through), "jpeg", "png", "webp" or "raw" pixels.
        quality: JPEG/WebP quality, 1-100.
        max_side: shrink so the longer side is at most this many pixels.
        resize: (width, height) to resize every image to.
        check: "header" (structure only for passed-through bytes) or "decode" (every pixel).
        on_error: "skip" a bad image and record why, or "fail" the run.
        compression: one of the container's `compressions` ("none" for every one).
        format: the shard container, a name in shardpack.containers.CONTAINERS.
        dedup: "none" reports exact copies; "exact" also keeps one of each group, an
            evaluation split's first (packing.duplicates), and skips the others; "near" does
            so for images whose perceptual hashes differ in up to near_distance bits too.
        near_distance: --dedup near's Hamming distance (NEAR_DISTANCE here).
        seed: shuffle seed.
        shuffle: False keeps the sorted source order.
        shuffle_window: shuffle a list of many manifest files streamed, without holding it
            (see docs/architecture.md); pack refuses it for other sources.
        max_pixels: refuse images that claim more pixels than this (decompression bombs).
        overwrite: replace an existing, different shardpack output in OUT.
        resume: keep the shards an interrupted run of the same plan finished.
        index_files: also write DALI-style per-shard index files (OUT/idx/) for random access.
        classes: the class list and its order (--classes); None takes the sorted names found.
        split_names: first-level folder names that make SRC a split tree (--splits).
        split: (name, fraction) pairs to split a one-split source into (--split), seeded by
            `seed`, stratified by label.
        path_column: a manifest's column of image paths (--path-column); None finds it.
        label_column: a manifest's column of labels (--label-column); None: `label`, if any.
        path_suffix: written after every image path of a manifest (--path-suffix): ".jpg" for
            a column of ids of the files `<id>.jpg`; None: the paths name the files.
        root: the folder a manifest's relative image paths are under (--root); None: the
            manifest's folder.
        columns: a manifest's columns to keep as features, each "NAME" or "NAME=FEATURE" (the
            feature's name: "TEXT=caption"), beside its image, label, split and box columns,
            which are always taken; the others are not read where the format allows (Parquet);
            None: every column, each under its own name; (): none.
        box_columns: a manifest's columns of boxes, each "NAME" or "NAME:FORMAT" (BOX_FORMATS,
            normalised; yxyx when none is said), moved with the pixels (--box-columns); None:
            the columns recognised by name (bbox, boxes, bboxes, objects/bbox) only.
        min_visibility: drop a box left with less than this share of its area in the image a
            crop made (0: kept while any part remains; albumentations' min_visibility);
            above 0, refused for records holding no boxes.
        resize_mode: how `resize` meets the image's aspect (RESIZE_MODES, or img2dataset's
            names in RESIZE_ALIASES): stretch, center-crop, pad, keep-ratio, keep-ratio-largest.
        pad_color: (r, g, b) of the border `pad` adds.
        upscale: False leaves an image smaller than the target at its size (img2dataset's
            resize_only_if_bigger); `pad` still centres it on the full canvas.
        min_side: skip images whose shorter side is below this many pixels.
        max_aspect: skip images whose longer side is more than this many times the shorter.
        max_area: skip images of more than this many pixels.
        retries: more tries of an image URL after a transient failure (a reset or refused
            connection, a timeout, HTTP 5xx or 429), with backoff.
        allow_private_urls: fetch image URLs on loopback and private addresses too (never
            link-local or cloud metadata ones).
        ignore_opt_out: fetch images whose X-Robots-Tag says noai, noimageai, noindex or
            noimageindex (else skipped with that reason).
        user_agent: the User-Agent image requests send; None: shardpack's own.
        url_threads: image URL requests in flight per worker.
        per_host: of those, to one host at most.
        url_deadline: the most seconds one image URL may take, from its first request: its
            tries, redirects and the waits between them together (then skipped, timed out).
        wds_naming: "shardpack", or "img2dataset": WebDataset samples named as img2dataset
            names them (the caption as `.txt`; `.json` with url, key, status, width, height,
            original_width, original_height and sha256), for code written for its output.
    """

    name: str | None = None
    source: str = "auto"
    shards: int | None = None
    shard_size: int = DEFAULT_SHARD_SIZE
    workers: int | None = None
    backend: str = "local"
    scheduler: str | None = None
    encode: str = "keep"
    quality: int = QUALITY
    max_side: int | None = None
    resize: tuple[int, int] | None = None
    check: str = "header"
    on_error: str = "skip"
    compression: str = "none"
    seed: int = 0
    shuffle: bool = True
    shuffle_window: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS
    overwrite: bool = False
    resume: bool = False
    index_files: bool = False
    classes: tuple[str, ...] | None = None
    split_names: tuple[str, ...] = SPLIT_NAMES
    split: tuple[tuple[str, float], ...] | None = None
    path_column: str | None = None
    label_column: str | None = None
    path_suffix: str | None = None
    root: str | None = None
    format: str = DEFAULT_FORMAT
    resize_mode: str = "stretch"
    pad_color: tuple[int, int, int] = _DEFAULT_PAD
    upscale: bool = True
    min_side: int | None = None
    max_aspect: float | None = None
    max_area: int | None = None
    dedup: str = "none"
    grow: str = "none"  # GROW: how a run treats the dataset already in OUT
    near_distance: int = NEAR_DISTANCE
    retries: int = 2
    allow_private_urls: bool = False
    ignore_opt_out: bool = False
    user_agent: str | None = None
    url_threads: int = 128
    per_host: int = 16
    url_deadline: float = DEADLINE_S
    wds_naming: str = "shardpack"
    box_columns: tuple[str, ...] | None = None
    columns: tuple[str, ...] | None = None
    min_visibility: float = 0.0

    def __post_init__(self) -> None:
        _check_types(self)
        _check_transform(self)
        for option, (allowed, aliases) in choice_options().items():  # as the choice named
            object.__setattr__(
                self, option, chosen(option, getattr(self, option), allowed, aliases)
            )
        if self.grow != "none" and self.overwrite:
            raise OptionError(Option("grow", self.grow), " keeps the dataset in OUT; drop ",
                              Option("overwrite"))  # fmt: skip
        if not 0 <= self.near_distance <= 64:
            raise OptionError(Option("near_distance"), " must be between 0 and 64 bits, got: "
                              f"{self.near_distance!r}")  # fmt: skip
        for option in ("shards", "shard_size", "workers", "max_side", "max_pixels"):
            check_positive(option, getattr(self, option))
        if self.seed < 0:
            raise OptionError(
                Option("seed"), f" must be a non-negative integer, got: {self.seed!r}"
            )
        if not 1 <= self.quality <= 100:
            raise OptionError(Option("quality"), " must be between 1 and 100, got: "
                              f"{self.quality!r}")  # fmt: skip
        if self.resize is not None:
            if len(self.resize) != 2 or min(self.resize) < 1:
                raise OptionError(
                    Option("resize"), f" must be (width, height), got: {self.resize!r}"
                )
            if self.max_side is not None:
                raise OptionError(Option("resize"), " and ", Option("max_side"),
                                  " exclude each other; pass one")  # fmt: skip
            if self.resize[0] * self.resize[1] > self.max_pixels:
                raise OptionError(
                    Option("resize", self.resize),
                    " is over ",
                    Option("max_pixels", self.max_pixels),
                    "; pass a smaller size or raise ",
                    Option("max_pixels"),
                )
        if self.shuffle_window and not self.shuffle:
            raise OptionError(Option("shuffle_window"), " shuffles; drop ",
                              Option("shuffle", False), " or it")  # fmt: skip
        if self.scheduler is not None and self.backend != "dask":
            raise OptionError(Option("scheduler"), " needs ", Option("backend", "dask"))
        if self.index_files and self.compression != "none":
            raise OptionError(Option("index_files", True), " needs uncompressed shards; drop ",
                              Option("compression"))  # fmt: skip
        _check_container(
            self.format, self.compression, self.index_files, self.encode, self.wds_naming
        )
        if self.split is not None:
            check_split_names("split", tuple(name for name, _ in self.split))
            check_fractions(self.split)
        if self.name is not None and len(self.name) > MAX_NAME_CHARS:
            raise OptionError(Option("name"), f" must be at most {MAX_NAME_CHARS} characters "
                              f"(shard file names hold it), got {len(self.name):,}; pass ",
                              Option("name", self.name[:MAX_NAME_CHARS]))  # fmt: skip
        if self.name is not None and not _NAME.match(self.name):
            safe = safe_name(self.name)  # the name made so, where anything is left
            such = ("; pass ", Option("name", safe)) if safe else ()
            raise OptionError(Option("name"), " must start with a letter or digit and hold only "
                              f"ASCII letters, digits, '_' and '.', got: {self.name!r}",
                              *such)  # fmt: skip

    def output_fields(self, every: bool = False) -> dict[str, object]:
        """The options that decide the output bytes, as JSON-ready values (`every`: also those
        a run that does not use them leaves out)."""
        fields = asdict(self)
        if not self.shuffle:
            fields["seed"] = None  # no shuffle: the seed changes nothing
        # only --dedup near reads the distance, and a window shuffle is asked for: other runs'
        # plans stay as they were without them
        near = ("near_distance",) if self.dedup == "near" or every else ()
        window = ("shuffle_window",) if self.shuffle_window or every else ()
        # likewise a manifest's label column and path suffix where given
        given = tuple(k for k in _GIVEN_FIELDS if fields[k] is not None or every)
        return {key: fields[key] for key in (*_OUTPUT_FIELDS, *near, *window, *given)}

    @property
    def shuffle_kind(self) -> str:
        """The shuffle asked for: one of SHUFFLES."""
        return "none" if not self.shuffle else "window" if self.shuffle_window else "global"


def parse_size(text: str) -> int:
    """Parse '128MiB', '64M', '1G' or '1048576' into bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*", text, re.IGNORECASE)
    if not match:
        raise OptionError(Option("shard_size"), " must look like 128MiB, 64M or 1000000, got: "
                          f"{text!r}")  # fmt: skip
    number, unit = float(match.group(1)), match.group(2).upper()
    return int(number * 1024 ** " KMGT".index(unit or " "))


def size_text(size: int) -> str:
    """Bytes as parse_size reads them back: 128MiB, 1GiB; a count no unit divides as it is."""
    for power, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if size and size % 1024**power == 0:
            return f"{size // 1024**power}{unit}"
    return str(size)


def parse_resize(text: str) -> tuple[int, int]:
    """Parse 'WIDTHxHEIGHT' into (width, height)."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not match or min(int(match.group(1)), int(match.group(2))) < 1:
        raise OptionError(Option("resize"), f" must be WIDTHxHEIGHT such as 224x224, got: {text!r}")
    return int(match.group(1)), int(match.group(2))


def safe_name(text: str) -> str:
    """A name as shard file names take it: each run of other characters than ASCII letters,
    digits, '_' and '.' as one '_', such runs at either end dropped ('hf-style': 'hf_style');
    '' where nothing is left."""
    return re.sub(r"[^A-Za-z0-9_.]+", "_", text).strip("_.")


def parse_color(text: str) -> tuple[int, int, int]:
    """Parse a colour name (white, black, gray), '#RRGGBB' or 'R,G,B' into (r, g, b)."""
    text = text.strip().lower()
    if text in _COLORS:
        return _COLORS[text]
    if re.fullmatch(r"#[0-9a-f]{6}", text):
        return tuple(int(text[i : i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]
    parts = text.split(",")
    if len(parts) == 3 and all(p.strip().isdigit() and int(p) <= 255 for p in parts):
        return tuple(int(p) for p in parts)  # type: ignore[return-value]
    raise OptionError(Option("pad_color"), f" must be {_COLOR_FORMS}, got: {text!r}")


def check_split_names(option: str, names: tuple[str, ...]) -> None:
    """Refuse a split name that shard file names cannot hold (--split's, a source's)."""
    for name in names:
        if not _SPLIT.match(name):
            raise OptionError("split names must start with a letter or digit and hold only "
                              "ASCII letters, digits, '_' and '.' (not at the end nor twice in a "
                              f"row), got: {name!r} in ",
                              Option(option))  # fmt: skip
        if (why := too_long_split(name) or reserved_split(name)) is not None:
            raise OptionError(why, " in ", Option(option))


def reserved_split(name: str) -> str | None:
    """Why a split name is one its readers reserve, else None: `all` (in any case) is every
    split together to datasets, whose load_dataset refuses a split of that name, and to TFDS."""
    if name.casefold() != "all":
        return None
    return (f"split {name!r} is the name datasets and TFDS give every split together "
            "(load_dataset refuses a split so named); give it another name")  # fmt: skip


def too_long_split(name: str) -> str | None:
    """Why a split name is too long for shard file names (over MAX_SPLIT_CHARS), else None."""
    if len(name) <= MAX_SPLIT_CHARS:
        return None
    return (f"split {name[:24]!r}... is {len(name):,} characters, over the {MAX_SPLIT_CHARS} "
            "a split's shard file names hold; give it a shorter name")  # fmt: skip


def check_fractions(split: tuple[tuple[str, float], ...]) -> None:
    """--split: distinct names, fractions in (0, 1] that add up to 1."""
    names = [name for name, _ in split]
    if len(set(names)) != len(names) or not names:
        raise OptionError(Option("split"), f" must name each split once, got: "
                          f"{', '.join(names)!r}")  # fmt: skip
    if any(not 0 < fraction <= 1 for _, fraction in split):
        raise OptionError(Option("split"), " fractions must be above 0 and at most 1, such as "
                          "train=0.9")  # fmt: skip
    if abs(sum(fraction for _, fraction in split) - 1) > 1e-6:
        total = sum(fraction for _, fraction in split)
        other = next(n for n in ("test", "validation", "holdout") if n not in names)
        fix = (f"add a split of the rest, such as {other}={round(1 - total, 6):g}" if total < 1
               else "lower one of them")  # fmt: skip
        raise OptionError(Option("split"), f" fractions must add up to 1, got {total:g}; {fix}")


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
            raise OptionError(Option("split"), " must look like train=0.9,validation=0.1, got: "
                              f"{text!r}") from None  # fmt: skip
    split = tuple(pairs)
    check_fractions(split)
    return split


def parse_names(option: str, text: str) -> tuple[str, ...]:
    """A,b,c as names of `option` (each checked by the source that reads them,
    Source.check_options); none at all is refused."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise OptionError(Option(option), f" names no split, got: {text!r}; pass a,b,c")
    return names


def box_column(entry: str) -> tuple[str, str]:
    """(column, format) of a --box-columns entry, "NAME" (yxyx) or "NAME:FORMAT"."""
    name, _, fmt = entry.rpartition(":") if ":" in entry else (entry, "", "yxyx")
    if not name.strip() or fmt not in BOX_FORMATS:
        pixels = " (boxes in pixels are not read yet: normalise them)" if "pixel" in fmt else ""
        raise OptionError(Option("box_columns"), " entries are NAME or NAME:FORMAT with FORMAT "
                          f"one of {', '.join(BOX_FORMATS)}, normalised{pixels}, got: "
                          f"{entry!r}")  # fmt: skip
    return name.strip(), fmt


def parse_box_columns(text: str) -> tuple[str, ...]:
    """'bbox,det:xywh' as ("bbox", "det:xywh"), each checked by the manifest source
    (box_column)."""
    entries = tuple(entry.strip() for entry in text.split(",") if entry.strip())
    if not entries:
        raise OptionError(Option("box_columns"), f" names no column, got: {text!r}; pass "
                          "NAME[:FORMAT]")  # fmt: skip
    return entries


def column_entry(entry: str) -> tuple[str, str]:
    """(column, feature name) of a --columns entry, "NAME" (its own name) or "NAME=FEATURE"; a
    ',' or '=' in a name is written \\, or \\= (a backslash \\\\)."""
    name, *feature = _cut(entry, "=", 1)
    name = _unescaped(name.strip())
    feature = _unescaped(feature[0].strip()) if feature else name
    if not name or not feature:
        raise OptionError(Option("columns"), " entries are NAME or NAME=FEATURE (TEXT=caption; "
                          "a ',' or '=' in a name written \\, or \\=), got: "
                          f"{entry!r}")  # fmt: skip
    return name, feature


def parse_columns(text: str) -> tuple[str, ...]:
    """'TEXT=caption,similarity' as ("TEXT=caption", "similarity"), each checked by the
    manifest source (column_entry); '' as (): no column but those always taken. A comma
    written \\, is a name's, not a cut."""
    return tuple(entry.strip() for entry in _cut(text, ",") if entry.strip())


def escaped_column(name: str) -> str:
    """A column's name as a --columns entry writes it: its ',', '=' and '\\' escaped."""
    return re.sub(r"([\\,=])", r"\\\1", name)


def _unescaped(text: str) -> str:
    """A --columns name as written, its escapes (\\, \\= \\\\) read; another backslash stays."""
    return re.sub(r"\\([\\,=])", r"\1", text)


def _cut(text: str, at: str, most: int | None = None) -> list[str]:
    """`text` cut at each `at` (at most `most` times) that no backslash escapes, the escapes
    kept in the pieces."""
    pieces, piece, escaped = [], [], False
    for char in text:
        if escaped:
            piece.append(char)
            escaped = False
        elif char == "\\":
            piece.append(char)
            escaped = True
        elif char == at and (most is None or len(pieces) < most):
            pieces.append("".join(piece))
            piece = []
        else:
            piece.append(char)
    return [*pieces, "".join(piece)]


@dataclass(frozen=True)
class Flag:
    """How one PackOptions field is spelled on the command line (its type and default are the
    field's own): the flag, its metavar, its help, and how its text becomes the value."""

    flag: str  # "--shard-size"; a switch pair "--shuffle/--no-shuffle"
    help: str
    metavar: str | None = None
    parse: Callable[[str], object] | None = None  # the flag's text -> the field's value
    shown: str | None = None  # a parsed field's default as its text: "128MiB"
    min: int | None = None
    max: int | None = None
    # value -> its help, for a field said by one switch a value ("grow": --append, --update)
    switches: tuple[tuple[str, str], ...] = ()
    show: Callable[[object], str] | None = None  # a value as the flag's text, where not str()


# Every option's flag, written once: the CLI's declarations, its messages (as_flags) and
# docs/packing.md's table (tests/docs/test_options_table.py) follow it. "grow" is said by two
# switches, --append and --update; "source" and "format" take their choices from the
# registries, "classes" its parser from the sources (the CLI fills those in).
FLAGS: dict[str, Flag] = {
    "source": Flag("--source", "Layout of SRC."),
    "name": Flag(
        "--name",
        "Dataset name in shard file names.  [default: SRC's name, without a "
        "manifest's extension; each run of characters other than ASCII letters, digits, "
        "'_' and '.' made one '_']",
        "NAME",
    ),
    "shards": Flag("--shards", "Shards per split.  [default: by --shard-size]", "N", min=1),
    "shard_size": Flag(
        "--shard-size",
        "Target shard size when --shards is not given.",
        "SIZE",
        parse_size,
        shown="128MiB",
        show=size_text,
    ),
    "workers": Flag("--workers", "Worker processes.  [default: by the work]", "N", min=1),
    "backend": Flag(
        "--backend", "local: this machine's cores (loky: the same); dask: a Dask cluster."
    ),
    "scheduler": Flag(
        "--scheduler", "Dask scheduler address.  [default: a local cluster of --workers]", "ADDRESS"
    ),
    "encode": Flag(
        "--encode", "keep: JPEG/PNG bytes untouched, others to PNG; raw: uint8 HWC RGB pixels."
    ),
    "quality": Flag(
        "--quality",
        "JPEG/WebP quality (with --encode keep: of the JPEGs it resizes or turns upright).",
        "Q",
        min=1,
        max=100,
    ),
    "max_side": Flag("--max-side", "Shrink so the longer side is at most N pixels.", "N", min=1),
    "resize": Flag(
        "--resize",
        "Resize every image to W x H pixels.",
        "WxH",
        parse_resize,
        show=lambda size: "x".join(map(str, size)),
    ),
    "resize_mode": Flag(
        "--resize-mode",
        "How --resize meets the aspect: stretch, center-crop, "
        "pad, keep-ratio (shorter side to the size), keep-ratio-largest (longer "
        "side); img2dataset's names too.",
        "MODE",
    ),
    "pad_color": Flag(
        "--pad-color",
        f"pad's border: {_COLOR_FORMS}.",
        "COLOR",
        parse_color,
        shown="white",
    ),
    "upscale": Flag("--upscale/--no-upscale", "Enlarge images smaller than --resize."),
    "min_side": Flag("--min-side", "Skip images whose shorter side is under N.", "N", min=1),
    "max_aspect": Flag("--max-aspect", "Skip images whose long side is over R x the short.", "R"),
    "max_area": Flag("--max-area", "Skip images of over P pixels.", "P", min=1),
    "check": Flag(
        "--check", "header: check structure without decoding kept bytes; decode: every pixel."
    ),
    "on_error": Flag(
        "--on-error", "skip: record a bad image in the index and go on; fail: stop the run."
    ),
    "compression": Flag(
        "--compression", "Shard compression, one the --format takes (none: any format).", "NAME"
    ),
    "format": Flag("--format", "Shard container:"),
    "seed": Flag("--seed", "Shuffle seed.", "N"),
    "shuffle": Flag("--shuffle/--no-shuffle", "Shuffle before sharding."),
    "shuffle_window": Flag(
        "--shuffle-window",
        "Shuffle a list of many Parquet/JSONL files without holding it: the files' row ranges "
        "in a seeded order, the rows within each shard.",
    ),
    "max_pixels": Flag(
        "--max-pixels", "Refuse images claiming more pixels (decompression bombs).", "N", min=1
    ),
    "overwrite": Flag("--overwrite", "Replace a different dataset already in OUT."),
    "resume": Flag("--resume", "Keep the shards an interrupted run of this job finished."),
    "grow": Flag(
        "--append/--update",
        "Grow the dataset in OUT.",
        switches=(
            ("append", "Add SRC's new items to the dataset in OUT, in new shards."),
            (
                "update",
                "Make OUT hold exactly SRC's items: --append, and rewrite the shards of "
                "changed or removed ones.",
            ),
        ),
    ),
    "index_files": Flag("--index-files", "Also write DALI index files (OUT/idx/)."),
    "classes": Flag(
        "--classes",
        "Pin the class list and order: a,b,c or a file with one name a line.",
        "NAMES|FILE",
    ),
    "split_names": Flag(
        "--splits",
        "Folder names that make SRC a split tree (default: train, val, ...).",
        "NAMES",
        functools.partial(parse_names, "split_names"),
    ),
    "split": Flag(
        "--split",
        "Split a one-split source: train=0.9,validation=0.1 (seeded, stratified).",
        "NAME=FRACTION,...",
        parse_split,
        show=lambda split: ",".join(f"{name}={fraction:g}" for name, fraction in split),
    ),
    "path_column": Flag(
        "--path-column",
        "A manifest's column of image paths.  [default: path, image, file, file_name or filename]",
        "NAME",
    ),
    "label_column": Flag(
        "--label-column",
        "A manifest's column of labels (class names or numbers).  [default: label]",
        "NAME",
    ),
    "path_suffix": Flag(
        "--path-suffix",
        "Written after each image path of a manifest: .jpg where a column of ids names "
        "<id>.jpg files.",
        "TEXT",
    ),
    "root": Flag(
        "--root",
        "Folder a manifest's relative image paths are under.  [default: its folder]",
        "DIR",
        absolute,
    ),
    "dedup": Flag(
        "--dedup",
        "none: report exact copies; exact: also keep one (test's first); "
        "near: also of resized, re-compressed copies (--near-distance).",
    ),
    "near_distance": Flag(
        "--near-distance",
        "--dedup near: the most bits two images' perceptual hashes differ in.",
        "BITS",
    ),
    "retries": Flag(
        "--retries",
        "More tries of an image URL after a transient failure (reset, timeout, 5xx, 429), "
        "with backoff.",
        "N",
        min=0,
    ),
    "allow_private_urls": Flag(
        "--allow-private-urls",
        "Fetch image URLs on loopback and private addresses (never link-local or cloud "
        "metadata ones).",
    ),
    "ignore_opt_out": Flag(
        "--ignore-opt-out",
        "Fetch images whose X-Robots-Tag says noai, noimageai, noindex or noimageindex.",
    ),
    "user_agent": Flag(
        "--user-agent", "User-Agent of image requests.  [default: shardpack's]", "TEXT"
    ),
    "url_threads": Flag("--url-threads", "Image URL requests in flight per worker.", "N", min=1),
    "per_host": Flag("--per-host", "Of those, to one host at most.", "N", min=1),
    "url_deadline": Flag(
        "--url-deadline",
        "The most seconds one image URL may take: its tries, redirects and the waits between "
        "them together.",
        "SECONDS",
    ),
    "wds_naming": Flag(
        "--wds-naming",
        "WebDataset members: shardpack's, or img2dataset's (.txt caption; .json with url, "
        "status, original size, sha256).",
    ),
    "min_visibility": Flag(
        "--min-visibility",
        "Drop a box a crop leaves with less than this share of its area (0: any part).",
        "SHARE",
    ),
    "box_columns": Flag(
        "--box-columns",
        "A manifest's columns of normalised boxes, moved with the pixels; FORMAT: yxyx "
        "(default), xyxy, xywh or cxcywh.",
        "NAME[:FORMAT],...",
        parse_box_columns,
    ),
    "columns": Flag(
        "--columns",
        "A manifest's columns kept as features, FEATURE naming one otherwise (TEXT=caption: "
        "img2dataset's .txt); the image, label, split and box columns are always taken, the "
        "others not read ('': none); a ',' or '=' in a name is written \\, or \\=.  "
        "[default: every column]",
        "NAME[=FEATURE],...",
        parse_columns,
    ),
}


def flag(option: str) -> str:
    """The CLI flag of a PackOptions field: --shard-size; a switch's positive one."""
    return FLAGS[option].flag.split("/")[0]


def as_flags(error: ShardpackError) -> str:
    """An error's message as the CLI says it: each option it names (Option) as its flag,
    encode='gif' as --encode gif, upscale=False as --no-upscale, index_files=True as
    --index-files, grow='update' as --update."""
    return error.said(said_as_flag)


def said_as_flag(option: Option) -> str:
    """One option of a message, with its value if it has one, as the CLI's flag."""
    spec, value = FLAGS[option.name], option.value
    if isinstance(value, str) and value in dict(spec.switches):
        return f"--{value}"
    if value is ... and spec.switches:  # grow: --append or --update
        return " or ".join(f"--{each}" for each, _ in spec.switches)
    said = flag(option.name)
    if value is ... or value is True:
        return said
    if value is False:  # a switch pair's negative; a lone switch left out
        return "--no-" + said[2:] if "/" in spec.flag else f"no {said}"
    if value is None:  # an option left out: --resize, --split, --max-side, ...
        return f"no {said}"
    try:
        text = spec.show(value) if spec.show else _as_text(value)
    except (TypeError, ValueError):  # a journal's value of another shape than the option's
        text = _as_text(value)
    return f"{said} {said_value(text, value)}"


def _as_text(value: object) -> str:
    """A value as a flag's text says it: a tuple of names as a,b,c."""
    if isinstance(value, tuple | list):
        return ",".join(map(_as_text, value))
    return str(value)
