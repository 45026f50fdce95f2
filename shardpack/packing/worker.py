"""write_shard: the only code that runs in a worker. Reads, checks, encodes and writes one shard."""

from __future__ import annotations

import hashlib
import os
import struct
import time
from array import array
from collections.abc import Iterable
from contextlib import suppress
from typing import NamedTuple

import numpy as np

from shardpack import images
from shardpack.containers import CONTAINERS, ShardWriter
from shardpack.errors import ImageError
from shardpack.options import PackOptions
from shardpack.packing import boxes, masks, stamps
from shardpack.packing.facts import ShardFacts
from shardpack.packing.kept import Kept, KeptReader
from shardpack.packing.objects import objects_of
from shardpack.packing.plan import ShardResult, ShardSpec
from shardpack.schema import LABEL, MASK, Schema, example_value
from shardpack.signatures import sniff
from shardpack.sources import Item, Source
from shardpack.sources.objects import ANNOTATED_SIZE
from shardpack.storage import Storage
from shardpack.storage.atomic import create_temp, open_regular
from shardpack.storage.base import Files, NextFiles

# How often a worker reports its count for the parent's progress bar: often enough for a live
# bar, rare enough to cost nothing (one 8-byte pwrite).
PROGRESS_INTERVAL_S = 0.2


def read_progress(path: str) -> int:
    """The count a worker last wrote to its progress file; 0 if there is none (yet) or it is
    not a regular file (never a wait on a FIFO, never more than 8 bytes read)."""
    try:
        fd = open_regular(path)
    except OSError:
        return 0
    try:
        data = os.pread(fd, 8, 0)
    finally:
        os.close(fd)
    return struct.unpack("<Q", data)[0] if len(data) == 8 else 0


class _Progress:
    """Writes the worker's count into its own new progress file at most every
    PROGRESS_INTERVAL_S; the parent finds it by the shard's name (atomic.TEMP_NAME). Where
    OUT offers no folder for them (an object store), there is none."""

    def __init__(self, out: Storage, file: str) -> None:
        folder = out.progress_folder()
        self.fd, self.path = (-1, "") if folder is None else create_temp(
            os.path.join(folder, file), "progress")  # fmt: skip
        self.last = 0.0

    def update(self, count: int) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_INTERVAL_S and self.fd >= 0:
            with suppress(OSError):  # a full disk: the bar is not worth failing the shard for
                os.pwrite(self.fd, struct.pack("<Q", count), 0)
            self.last = now

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            os.remove(self.path)


def write_shard(
    spec: ShardSpec,
    options: PackOptions,
    src: Storage,
    out: Storage,
    schema: Schema,
    source: Source,
    then: NextFiles | None = None,
) -> ShardResult:
    """Write one shard file from its items; it appears under its final name only when complete.

    Args:
        spec: the shard's items and file name, from the plan.
        options: how to check and encode.
        src: the source storage the items' paths are relative to (Dataset.root).
        out: where the shard goes (a local folder or an object store prefix).
        schema: the dataset's features: how to encode each of an item's fields.
        source: the dataset's source (Dataset.source), which loads an item's image.
        then: the next shard this process writes, as src.reading may ask for it (or None).

    Returns the shard's record count, size, sha256, label histogram, skipped items, what facts
    noted of each record (and of each skipped file: its stamp), and each record's offset where
    DALI index files are asked (held by the parent until the merge). Raises ImageError where
    an item is bad and options.on_error is "fail"; no file is left behind.
    """
    start, counts, lossless = time.perf_counter(), [0] * len(schema.classes), 0
    skipped: list[tuple[str, str]] = []
    cache: dict = {}  # what the source's loader keeps between items
    progress, facts = _Progress(out, spec.file), ShardFacts(len(spec.items), objects_of(schema))
    # each stamp from its file's read (no stat of its own), kept if the file was settled by now
    stamping, settled = stamps.loads_whole_files(source), stamps.settled_before()
    shard = _shard_looks(schema, options)
    limit = images.max_file_bytes(options.max_pixels)
    kept = spec.kept or {}  # a grow's records taken from OUT's shards, not fetched again
    held = KeptReader(out, options, schema, shard.original) if kept else None
    try:
        with (
            src.reading(source.item_files(_from_source(spec)), limit, spec.file, then) as src,
            _writer(spec, options, out, schema) as writer,
        ):
            for done, (item, listed) in enumerate(_with_listed(spec), 1):
                where, stamp = kept.get(item.key), None
                try:
                    if where is not None:
                        features, dropped = _kept_record(item, where, held, schema, shard, options)
                    else:
                        loaded, stamp = stamps.load_stamped(item, src, limit, stamping, source,
                                                            options, cache, listed)  # fmt: skip
                        features, orientation, dropped = _record(item, loaded, options, schema,
                                                                 source, shard)  # fmt: skip
                except ImageError as e:
                    if options.on_error == "fail":
                        raise
                    skipped.append((e.key, e.reason))
                    facts.skip(done - 1, e.stamp or stamp)
                else:
                    writer.write(features)
                    _count(counts, item.label)
                    if where is not None:
                        lossless += held.note(facts, done - 1, features, where, shard.reshapes)
                    else:
                        lossless += _made_lossless(loaded, features, options)
                        facts.add(done - 1, loaded, features, orientation,
                                  stamps.settled(stamp, settled))  # fmt: skip
                    if dropped:  # a record with no boxes, or none dropped, pays nothing here
                        facts.drop(item.key, dropped)
                progress.update(done)
    finally:
        progress.close()
        if held is not None:
            held.close()
        if (forget := getattr(spec.items, "forget", None)) is not None:
            forget()  # a streamed range's rows, read here (in-process: the parent's)
    written = writer.result
    return ShardResult(
        spec.split, spec.index, spec.file, written.num_records, written.num_bytes,
        written.sha256, tuple(counts), tuple(skipped), time.perf_counter() - start,
        array("Q", written.offsets if options.index_files else ()), lossless, facts.content(),
        facts.tally(), written.arrow_bytes,
    )  # fmt: skip


def _with_listed(spec: ShardSpec) -> Iterable[tuple[Item, stamps.Stamp]]:
    """Each item of the shard with its listing's stamp (ShardSpec.listed; None: none)."""
    return zip(spec.items, stamps.listed_of(spec), strict=True)


def _writer(spec: ShardSpec, options: PackOptions, out: Storage, schema: Schema) -> ShardWriter:
    """The shard's writer: its container's, in OUT (the file appears under its name as it
    closes, or as the packing process commits what a forked worker handed over; a grow's
    shard of no record never does)."""
    writer = CONTAINERS[options.format].writer(
        spec.file, options.compression, storage=out, schema=schema, naming=options.wds_naming
    )
    writer.lands_empty = options.grow == "none"  # a grow leaves its empty shards out
    return writer


class _Looks(NamedTuple):
    """What a shard's schema and options decide for every record's image, decided once."""

    moved: tuple[str, ...]  # the features that describe a record's geometry (moved with it)
    upright: bool  # an image with an EXIF turn is stored upright, not kept
    filtered: bool  # an image's size may have it skipped (_filter)
    resized: bool  # an image's size may be changed (_geometry)
    original: bool  # the image as it came is described beside it (_original: img2dataset's)

    @property
    def reshapes(self) -> bool:
        """Whether a readable image may be re-encoded all the same: resized or turned."""
        return self.resized or self.upright


def _shard_looks(schema: Schema, options: PackOptions) -> _Looks:
    """The shard's _Looks: an image with an EXIF turn is stored upright where its container's
    readers show it turned upright (datasets) and its geometry is stored beside it."""
    moved = boxes.packed_moved(schema, options)
    return _Looks(
        moved,
        CONTAINERS[options.format].shows_upright and bool(moved),
        (options.min_side, options.max_aspect, options.max_area) != (None, None, None),
        (options.max_side, options.resize) != (None, None),
        options.wds_naming == "img2dataset",
    )


def next_files(spec: ShardSpec, source: Source) -> tuple[str, Files] | None:
    """What a reading is told of the next shard its process writes (NextFiles): its file name
    and the files of the items it reads from SRC; None for a streamed range (its rows are read
    where it is written)."""
    if getattr(spec.items, "forget", None) is not None:
        return None
    return spec.file, source.item_files(_from_source(spec))


def _from_source(spec: ShardSpec) -> Iterable[Item]:
    """The items of a shard read from SRC: all but those a grow keeps from OUT's shards."""
    if not spec.kept:
        return spec.items
    return [item for item in spec.items if item.key not in spec.kept]


def _kept_record(
    item: Item, where: Kept, held: KeptReader, schema: Schema, looks: _Looks,
    options: PackOptions,
) -> tuple[dict[str, object], dict[str, int]]:  # fmt: skip
    """A record a grow keeps (kept.py): its image as OUT holds it, with the item's label and
    fields now; where the dataset moves geometry with the pixels, its values as held (the
    parent keeps no such record whose values changed), and the boxes it lost when packed, by
    reason (Kept.dropped)."""
    features = held.record(item, where)
    if not looks.moved:
        size = features["height"], features["width"]
        features.update(_fields(item, schema, (), (), size, options)[0])
    return features, dict(where.dropped)


def _record(
    item: Item,
    loaded: bytes | np.ndarray,
    options: PackOptions,
    schema: Schema,
    source: Source,
    looks: _Looks,
) -> tuple[dict[str, object], int, dict[str, int]]:
    """One loaded item's features (its image checked, transformed and encoded; its fields, the
    boxes moved with the pixels), its EXIF orientation, and the objects dropped by reason."""
    features, where, orientation = _features(item, loaded, options, looks)
    kept = features["image"] is loaded  # stored as it came
    taken = boxes.moves(orientation, kept, where, source.name) if looks.moved else ()
    size = features["height"], features["width"]
    fields, dropped = _fields(item, schema, looks.moved, taken, size, options, orientation)
    features.update(fields)
    if looks.original:
        features.update(_original(loaded))
    return features, orientation, dropped


def _features(
    item: Item, loaded: bytes | np.ndarray, options: PackOptions, looks: _Looks
) -> tuple[dict[str, object], images.Geometry | None, int | None]:
    """Build one record's image features from what the source loaded (an image file's bytes,
    or RGB pixels), with the geometry its pixels went through (None: as loaded, upright) and
    the EXIF orientation the header probe read (a JPEG's or a PNG's, for the facts: None for
    others), or raise ImageError naming the item and the reason."""
    orientation = None
    if isinstance(loaded, bytes):
        image, fmt, (height, width, channels), where, orientation = _from_bytes(
            item, loaded, options, looks
        )
    else:
        if looks.filtered:
            _filter(item, *loaded.shape[:2], options)
        image, fmt, (height, width, channels), where = _reencode(loaded, options, "png",
                                                                  order="rgb")  # fmt: skip
    features = {
        "image": image,
        "height": height,
        "width": width,
        "channels": channels,
        "format": fmt,
        "key": os.fsencode(item.key),
    }
    return features, where, orientation


def _original(loaded: bytes | np.ndarray) -> dict[str, object]:
    """What img2dataset's .json says of the image as it came: its stored size (as
    cv2.imdecode's IMREAD_UNCHANGED sees it, no EXIF turn) and the sha256 of its bytes."""
    if not isinstance(loaded, bytes):
        return {"original_width": loaded.shape[1], "original_height": loaded.shape[0],
                "sha256": hashlib.sha256(loaded.tobytes()).hexdigest()}  # fmt: skip
    info = images.probe(loaded)  # a few us: the header was checked already
    return {"original_width": info.width, "original_height": info.height,
            "sha256": hashlib.sha256(loaded).hexdigest()}  # fmt: skip


def _made_lossless(loaded: bytes | np.ndarray, features: dict, options: PackOptions) -> bool:
    """Whether --encode keep re-encoded an image file as PNG because TensorFlow cannot decode
    it as it is (a CMYK JPEG, a GIF, ...); an image kept as it came is in its own format."""
    return (
        options.encode == "keep"
        and features["image"] is not loaded
        and isinstance(loaded, bytes)
        and features["format"] != sniff(loaded)
    )


def _fields(
    item: Item,
    schema: Schema,
    moved: tuple[str, ...],
    where: tuple[boxes.Move, ...],
    size: tuple[int, int],
    options: PackOptions,
    orientation: int | None = None,
) -> tuple[dict[str, object], dict[str, int]]:
    """The item's label and other fields, its geometry (`moved`) taken where its pixels went
    to the stored `size` (boxes.follow: boxes under the options' min_visibility dropped, a
    stored mask of more than their max_pixels refused), encoded as the schema declares them;
    and the boxes dropped, by reason. An ANNOTATED_SIZE field is checked against the image as
    displayed (`orientation`: its EXIF one), not written."""
    values = dict(item.fields)
    if ANNOTATED_SIZE in values and ANNOTATED_SIZE not in schema:
        height, width, file = values.pop(ANNOTATED_SIZE)
        shown = masks.shown_size(where, size)
        masks.check_size(item.key, (height, width), shown, orientation, file)
        if MASK in values:  # drawn at that size (COCO's), then resized to the image
            masks.check_drawn_size(item.key, (height, width), shown, file)
    if item.label is not None:
        values[LABEL] = item.label
    dropped: dict[str, int] = {}
    # most records hold no geometry (a passthrough is ~20 us a record); boxes are clipped and
    # a mask drawn whatever the moves
    if moved:
        values, dropped = boxes.follow(item.key, values, schema, moved, where, size,
                                       options.min_visibility, options.max_pixels)  # fmt: skip
    return {name: example_value(schema[name], value) for name, value in values.items()}, dropped


def _count(counts: list[int], label: int | tuple[int, ...] | None) -> None:
    """Add one record's label (each of them, for multi-label) to the class histogram."""
    if isinstance(label, tuple):
        for one in label:
            counts[one] += 1
    elif label is not None:
        counts[label] += 1


def _from_bytes(
    item: Item, data: bytes, options: PackOptions, looks: _Looks
) -> tuple[bytes, str, tuple, images.Geometry | None, int | None]:
    """The record's image, format and (height, width, channels) from an image file's bytes,
    the geometry its pixels went through (None: kept as they are), and the EXIF orientation
    its header probe read (None: not a JPEG); `looks.upright`: an image with an EXIF turn is
    re-encoded upright even where --encode keep would keep it."""
    try:
        info = images.probe(data)  # sniffs the format, then reads the header
        if info is None:
            raise ImageError(item.key, "not an image (unknown format)")
        fmt = info.format
        images.check_pixels(info.height, info.width, options.max_pixels)
        if looks.filtered:
            _filter(item, info.height, info.width, options)
        where = _geometry(info.height, info.width, options) if looks.resized else None
        turned = looks.upright and images.stored_turn(info.orientation)
        if options.encode == "keep" and info.tf_readable and where is None and not turned:
            if options.check == "decode":  # every pixel decoded, the bytes kept as they are
                _check_decode(data, info, options.max_pixels)
            return data, fmt, (info.height, info.width, info.channels), None, info.orientation
        # Re-encoding turns the image upright (decode applies its EXIF orientation), so the size
        # it gets comes from the upright size: the decoded pixels' (where None), or for a JPEG
        # that libjpeg may decode scaled down, the header's turned by that orientation.
        reduce = 1
        if fmt == "jpeg" and where is not None:
            height, width = images.jpeg_upright_size(data, info)
            where = _geometry(height, width, options)
            reduce = images.reduce_factor(height, width, where.scaled) if where else 1
        else:
            where = None
        # what TensorFlow decodes is kept as it is; what it cannot becomes PNG, losslessly
        keep_format = fmt if fmt in ("jpeg", "png") and info.tf_readable else "png"
        order = _order(options)
        pixels = images.decode(data, reduce, order, options.max_pixels)
        return (*_reencode(pixels, options, keep_format, where, order), info.orientation)
    except images.BadImage as e:
        raise ImageError(item.key, str(e)) from None


def _filter(item: Item, height: int, width: int, options: PackOptions) -> None:
    """Raise ImageError (a skip with its reason) for an image --min-side, --max-aspect or
    --max-area passes over."""
    short, long = sorted((height, width))
    if options.min_side is not None and short < options.min_side:
        raise ImageError(item.key, f"shorter side {short} px is under --min-side "
                                   f"{options.min_side}")  # fmt: skip
    if options.max_aspect is not None and long > options.max_aspect * short:
        raise ImageError(item.key, f"aspect {long / short:.2f} is over --max-aspect "
                                   f"{options.max_aspect:g}")  # fmt: skip
    if options.max_area is not None and height * width > options.max_area:
        raise ImageError(item.key, f"{width}x{height} pixels is over --max-area "
                                   f"{options.max_area}")  # fmt: skip


def _geometry(height: int, width: int, options: PackOptions) -> images.Geometry | None:
    """Where the options send an upright image of this size (None: it keeps its size); refused
    (BadImage) when enlarging it would make more than --max-pixels (keep-ratio of a thin strip)."""
    where = images.geometry(height, width, options.max_side, options.resize,
                            options.resize_mode, options.upscale)  # fmt: skip
    if where is not None:
        images.check_pixels(*where.scaled, options.max_pixels)
    return where


def _check_decode(data: bytes, info: images.ImageInfo, max_pixels: int) -> None:
    """Decode passed-through bytes as every reader will (TensorFlow, verify --decode: EXIF
    orientation not applied) and raise BadImage if the size disagrees with the header's, which
    becomes the record's height and width."""
    pixels = images.decode(data, max_pixels=max_pixels, orient=False)
    if pixels.shape[:2] != (info.height, info.width):
        raise images.BadImage(f"image decodes to {pixels.shape[1]}x{pixels.shape[0]}, "
                              f"header says {info.width}x{info.height}")  # fmt: skip


def _order(options: PackOptions) -> str:
    """Decode straight into the channel order the output wants: RGB for raw, else BGR."""
    return "rgb" if options.encode == "raw" else "bgr"


def _reencode(
    pixels: np.ndarray,
    options: PackOptions,
    keep_format: str,
    where: images.Geometry | None = None,
    order: str = "bgr",
) -> tuple[bytes, str, tuple[int, int, int], images.Geometry | None]:
    """Resize, crop or pad pixels to `where` (computed here when not given) and encode them as
    the options ask; 'keep' becomes `keep_format`. The geometry applied comes back with them."""
    where = where or _geometry(*pixels.shape[:2], options)
    if where is not None:
        pixels = images.fit(pixels, where, options.pad_color, order)
    fmt = keep_format if options.encode == "keep" else options.encode
    height, width = pixels.shape[:2]
    return images.encode(pixels, fmt, options.quality, order), fmt, (height, width, 3), where
