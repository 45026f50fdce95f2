"""Masks follow the pixels: a record's instance-id map drawn from its objects' outlines
(sources/shapes.py: COCO polygons and RLE, decoded here, in the worker; YOLO's polygons, in
fractions of the image's sides, drawn at the size of the image as displayed, as COCO's are
drawn at the JSON's size, up to MAX_DRAWN_SCALE times the image's side) or read from a PNG,
taken through its image's moves (EXIF turn, then images.Geometry's resize, crop and pad:
nearest-neighbour, the pixels' own arithmetic), renumbered after the objects a transform
dropped, and stored as one lossless PNG (8-bit, 16-bit past 255 objects).

In the map 0 is background and i the i-th object of the record's objects/* lists. Where objects
overlap, the one drawn last holds the pixel: crowd regions first, then the others in their
order, so that a crowd never hides a single object.
"""

from __future__ import annotations

import numpy as np

from shardpack import images
from shardpack.errors import ImageError
from shardpack.options import DEFAULT_MAX_PIXELS
from shardpack.signatures import sniff
from shardpack.sources import shapes

Move = images.Geometry | images.Turn
# The most objects one map numbers: a 16-bit PNG's values.
MAX_OBJECTS = 65535
# The most polygon points one map draws, all its objects' together: drawing costs rows x points
# (a 10,000-point zigzag 0.2 s at 480 rows), and shapes.MAX_POLYGON_POINTS bounds one polygon,
# not how many an object or an image has. COCO's busiest images hold thousands; as many as a
# YOLO label file of 4 MiB holds.
MAX_POINTS = 250_000
# The most point-rows one map draws: each polygon's points times the rows it spans, all its
# objects' together. MAX_POINTS bounds the points, not the rows a COCO JSON's size (up to
# --max-pixels, whatever the image's) gives them: 250,000 points over 13,000 rows held a worker
# 29 s for a 100x100 image. This is MAX_POINTS over 1,000 rows: 2 to 6 s here, at 8 to 25 ns a
# point-row (images.fill_polygon of a 10,000-point zigzag at 480 to 13,000 rows).
MAX_POINT_ROWS = MAX_POINTS * 1_000
# The most pixels one map's RLE objects decode, all of them together: each decodes the whole
# map (1 to 5 ns a pixel here), and a COCO JSON's size of 13,000 x 13,000 for a 100x100 image
# made ten RLEs of two counts each (1.7 KB of JSON) hold a worker 9 s. COCO's crowd regions are
# one or two an image; a thousand million is 300 RLEs of a 12-megapixel photo.
MAX_RLE_PIXELS = 1_000_000_000
# The most times a COCO JSON's size of an image may be its file's on a side where a mask is
# drawn: a map is drawn at the JSON's size, then resized to the image, and a JSON of
# 13000x13000 for a 100x100 PNG (a wrong size of the same shape, taken for a resized copy) drew
# 169 million pixels, 338 MB of a worker, for 10,000. A copy 4 times smaller is drawn.
MAX_DRAWN_SCALE = 4


def drawn(
    key: str,
    value: bytes,
    where: tuple[Move, ...],
    size: tuple[int, int],
    kept: np.ndarray | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> bytes:
    """A record's `mask` value as stored: its map taken through `where` to the stored image's
    `size` (height, width), the objects `kept` False (boxes.follow's drops) cleared and the rest
    renumbered, as a PNG. A PNG given with nothing to do is kept as it is.

    Raises:
        ImageError: the value is neither a shapes blob nor a PNG id map, a PNG of more than
            `max_pixels` pixels, an RLE does not decode to its size, or the annotations' image
            size is not the image's (the outlines would land on other pixels).
    """
    outlines = shapes.decode(value)
    if outlines is None and not where and (kept is None or kept.all()):
        return value
    if outlines is not None and outlines[0] is None:  # fractions of the image's sides
        outlines = _in_pixels(outlines, shown_size(where, size))
    if outlines is None:  # a stored map: its size checked from its header, then decoded
        shape = _png_size(key, value, max_pixels)
        if all(isinstance(move, images.Turn) or move.source for move in where):
            turn = next((move for move in where if isinstance(move, images.Turn)), None)
            check_size(key, shape, shown_size(where, size), turn and turn.orientation,
                       stored_map=True)  # fmt: skip
        ids = _read_png(key, value)
    else:
        ids = draw(key, *outlines)
    for move in where:
        if isinstance(move, images.Turn):
            ids = move.move_pixels(ids)
        else:
            check_size(key, ids.shape, move.source or ids.shape)
            ids = images.fit(ids, move, (0, 0, 0), nearest=True)
    if ids.shape != size:  # no geometry: the map of a JSON's size given to another image
        check_size(key, ids.shape, size)
        ids = images.resize(ids, size, nearest=True)
    count = int(ids.max(initial=0)) if outlines is None else len(outlines[1])
    if kept is not None and not kept.all():
        ids, count = _renumbered(ids, kept)
    return encode(ids, count)


def shown_size(where: tuple[Move, ...], size: tuple[int, int]) -> tuple[int, int]:
    """(height, width) of the image the moves `where` start from (as its annotations see it:
    displayed), given the `size` they end at: each Geometry's upright source, a quarter turn's
    sides swapped."""
    for move in reversed(where):
        if isinstance(move, images.Turn):
            size = (size[1], size[0]) if move.orientation in images.QUARTER_TURNS else size
        else:  # a geometry that does not say its source: drawn at its resize (the same map)
            size = move.source or move.scaled
    return size


def _in_pixels(outlines: tuple, size: tuple[int, int]) -> tuple:
    """A normalised blob's (size, outlines, crowd) in pixels of an image of `size`."""
    _, polygons, crowd = outlines
    scale = np.array([size[1], size[0]], np.float64)  # (x, y) rows: width, then height
    return size, [[p * scale for p in outline] for outline in polygons], crowd


def draw(key: str, size: tuple[int, int], outlines: list, crowd: list[int]) -> np.ndarray:
    """The uint16 instance-id map of one image's outlines (shapes.check's forms)."""
    if len(outlines) > MAX_OBJECTS:
        raise ImageError(key, f"{len(outlines)} objects, more than a mask PNG numbers "
                              f"({MAX_OBJECTS})")  # fmt: skip
    points = sum(len(p) for outline in outlines if not isinstance(outline, dict) for p in outline)
    if points > MAX_POINTS:
        raise ImageError(key, f"its objects' polygons hold {points:,} points, more than shardpack "
                              f"draws in one image ({MAX_POINTS:,}); simplify them")  # fmt: skip
    height, width = size
    spans = sum(len(p) * _rows(p, height) for outline in outlines if not isinstance(outline, dict)
                for p in outline)  # fmt: skip
    if spans > MAX_POINT_ROWS:
        raise ImageError(key, f"its objects' polygons span {spans:,} point-rows (each one's "
                              f"points times its rows of the {width}x{height} it is drawn at), "
                              f"more than shardpack draws in one image ({MAX_POINT_ROWS:,}); "
                              "simplify them")  # fmt: skip
    rles = sum(isinstance(outline, dict) for outline in outlines)
    if rles * height * width > MAX_RLE_PIXELS:
        raise ImageError(key, f"its objects' {rles:,} RLE masks of {width}x{height} pixels each "
                              f"decode {rles * height * width:,} pixels, more than shardpack "
                              f"decodes in one image ({MAX_RLE_PIXELS:,}); check the size the "
                              "annotations give the image")  # fmt: skip
    ids = np.zeros((height, width), np.uint16)
    order = sorted(range(len(outlines)), key=lambda i: not crowd[i])  # crowds first: stable
    for i in order:
        outline = outlines[i]
        if isinstance(outline, dict):
            ids[rle_mask(key, outline, height, width)] = i + 1
            continue
        for polygon in outline:  # several: the object's parts, their union (as pycocotools)
            images.fill_polygon(ids, np.asarray(polygon, np.float64).reshape(-1, 2), i + 1)
    return ids


def _rows(polygon: np.ndarray, height: int) -> int:
    """How many of an image's `height` rows a polygon ((x, y) rows in pixels) spans."""
    if not len(polygon):
        return 0
    ys = np.asarray(polygon, np.float64).reshape(-1, 2)[:, 1]
    top, bottom = np.clip(np.ceil([ys.min() - 0.5, ys.max() - 0.5]), 0, height)  # as it fills
    return int(bottom - top)


def rle_mask(key: str, rle: dict, height: int, width: int) -> np.ndarray:
    """A COCO RLE (counts a list, or COCO's compressed string) as a height x width bool array;
    shapes.check made sure they cover the image, this checks again (a blob is data)."""
    counts = rle["counts"]
    if isinstance(counts, str):
        counts = shapes.rle_counts(counts)
    total = sum(counts)
    if total != height * width or min(counts, default=0) < 0:
        raise ImageError(key, f"an RLE's counts cover {total} pixels, not the image's "
                              f"{width}x{height}")  # fmt: skip
    flat = np.repeat(np.arange(len(counts)) % 2 == 1, counts)
    return flat.reshape(width, height).T  # COCO runs down the columns


def encode(ids: np.ndarray, count: int) -> bytes:
    """The map as a PNG: 8-bit for up to 255 objects, else 16-bit."""
    depth = np.uint8 if count <= 255 else np.uint16
    return images.encode_labels(ids.astype(depth))


def _renumbered(ids: np.ndarray, kept: np.ndarray) -> tuple[np.ndarray, int]:
    """The map with the objects not kept cleared and the rest numbered in order."""
    table = np.zeros(len(kept) + 1, np.uint16)
    table[1:][kept] = np.arange(1, int(kept.sum()) + 1)
    return table[np.minimum(ids, len(kept))], int(kept.sum())


def _png_size(key: str, value: bytes, max_pixels: int) -> tuple[int, int]:
    """(height, width) of a stored id map (a repack's PNG) from its header, refused past
    `max_pixels` as an image is: a few kilobytes of PNG can hold gigabytes of pixels."""
    if sniff(value) != "png":
        raise ImageError(key, "its 'mask' is not a PNG id map nor shapes to draw; drop the "
                              "feature or pack without --resize/--max-side")  # fmt: skip
    try:
        info = images.probe(value)
        images.check_pixels(info.height, info.width, max_pixels)  # type: ignore[union-attr]
    except images.BadImage as e:
        raise ImageError(key, f"its 'mask': {e}") from None
    return info.height, info.width  # type: ignore[union-attr]


def _read_png(key: str, value: bytes) -> np.ndarray:
    """A stored id map (a repack's): a one-channel 8- or 16-bit PNG (_png_size's checked)."""
    try:
        ids = images.decode_labels(value)
    except images.BadImage as e:
        raise ImageError(key, f"its 'mask': {e}") from None
    return ids.astype(np.uint16)


def check_drawn_size(key: str, annotated: tuple, size: tuple[int, int], file: str) -> None:
    """Raise ImageError where a map drawn at `annotated` (height, width: the size `file` gives
    the image) would be over MAX_DRAWN_SCALE times the image's `size` on a side."""
    (a, b), (c, d) = annotated[:2], size
    if a * b > MAX_DRAWN_SCALE**2 * c * d:
        raise ImageError(key, f"its annotations in {file} are of a {b}x{a} image, over "
                              f"{MAX_DRAWN_SCALE} times the side of the image, {d}x{c}: its mask "
                              f"would be drawn at that size; fix the width and height in {file}, "
                              "or scale its annotations to the image")  # fmt: skip


def check_size(
    key: str,
    annotated: tuple,
    size: tuple[int, int],
    orientation: int | None = None,
    file: str | None = None,
    stored_map: bool = False,
) -> None:
    """Raise ImageError when annotations of an image of `annotated` (height, width; a map's
    shape) cannot be of an image of `size`: they would land on other pixels. They can be of the
    same size, or of a resized copy (the same aspect within the rounding of its sides, which
    normalised coordinates follow); a size within a pixel of theirs on each side is no resize
    but a wrong size (a JSON 121 wide of a 120-wide image). `orientation`: the image's EXIF
    orientation, where `size` is the image as displayed; a quarter turn that explains the
    difference is named with both fixes. `file`: the annotation file that gives the size, named
    in the reason; `stored_map`: the annotations are the record's stored `mask` PNG (a
    repack's, a table's), named instead."""
    (a, b), (c, d) = annotated[:2], size
    resized = abs(a - c) > 1 or abs(b - d) > 1
    if (a, b) == (c, d) or (resized and abs(a * d - b * c) <= max(a, b, c, d)):
        return
    given, shown, stored = f"{b:.10g}x{a:.10g}", f"{d}x{c}", f"{c}x{d}"  # VOC's are floats
    if stored_map:
        theirs, are = "its 'mask'", "is a map"
        turned, fix = f"draw the 'mask' at {shown}", f"draw the 'mask' at {shown}, or fix the image"
    else:
        theirs = f"its annotations in {file}" if file else "its annotations"
        where = file or "its annotation (COCO's JSON, VOC's <size>)"
        are, turned = "are", f"swap the width and height in {where}"
        fix = f"fix the width and height in {where}, or the image"
    if orientation in images.QUARTER_TURNS and abs(a * c - b * d) <= max(a, b, c, d):
        raise ImageError(key, f"{theirs} {are} of a {given} image, but the image is {shown} as "
                              f"displayed: its EXIF orientation {orientation} turns the {stored} "
                              "it stores a quarter. Annotations of the stored pixels: remove "
                              "the orientation tag from the image; of the image as displayed: "
                              f"{turned}")  # fmt: skip
    raise ImageError(key, f"{theirs} {are} of a {given} image (as the image is stored or "
                          f"displayed), but the image is {shown}: {fix}")  # fmt: skip
