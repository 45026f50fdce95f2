"""Objects' outlines as a source hands them to the workers: one blob a record under the `mask`
feature, holding the image's size and each object's COCO segmentation (polygons, or RLE with
compressed or uncompressed counts), which packing/masks.py draws into the record's instance-id
PNG once the image's geometry is known. The parent never draws pixels.

A blob is MAGIC, a JSON head (the size, each object's crowd flag and RLE or polygon lengths),
then every polygon's (x, y) pairs as little-endian float32: a fraction of the JSON text's
size, made without formatting a float. A blob of size null (encode_normalised: YOLO's
polygons) holds polygons as fractions of the image's width and height, drawn at the size the
worker decodes, so that the scan reads no image for its size.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MAGIC = b"shardpack-shapes/2\n"
_HEAD = struct.Struct("<I")
# Past this a coordinate is no pixel's: refused rather than cast to float32's infinity.
_MOST = 1e9
# The most points of one polygon: COCO's outlines have tens to a few hundred; drawing costs
# rows x points (images.fill_polygon), so a hostile one of millions would hold a worker.
MAX_POLYGON_POINTS = 10_000
# The most bits of one count of a compressed RLE: pycocotools reads a count into 64 bits (13
# characters of 5); past it no count is an image's, and a hostile run of continuation
# characters would build an ever longer integer (quadratic time).
_COUNT_BITS = 64


def check(segmentation: object, height: int, width: int) -> dict | list[np.ndarray]:
    """A COCO segmentation, checked: a list of polygons ([x0, y0, x1, y1, ...] in pixels) as
    float32 arrays of (x, y) rows, those of under 3 points (no area) dropped; or an RLE {size:
    [height, width], counts: string or list of integers} of the image's size.

    Raises:
        ValueError: it is neither, saying why.
    """
    import numpy as np  # here: `pack --help` imports the sources, not numpy

    if isinstance(segmentation, dict):
        size, counts = segmentation.get("size"), segmentation.get("counts")
        if size != [height, width]:
            raise ValueError(f"RLE of size {size!r}, not the image's [{height}, {width}]")
        if isinstance(counts, str) and counts.isascii():
            runs = rle_counts(counts)
        elif isinstance(counts, list) and all(
            isinstance(c, int) and not isinstance(c, bool) for c in counts
        ):
            runs = counts
        else:
            raise ValueError("RLE counts are neither an ASCII string nor a list of counts")
        if sum(runs) != height * width or min(runs, default=0) < 0:
            raise ValueError(f"RLE counts cover {sum(runs)} pixels, not {width}x{height}")
        return {"size": size, "counts": counts}
    if not isinstance(segmentation, list) or not all(isinstance(p, list) for p in segmentation):
        raise ValueError("is neither a list of polygons [x0, y0, x1, y1, ...] nor an RLE")
    polygons = []
    for polygon in segmentation:
        try:  # numpy's conversion checks each value: 1/30 of a Python loop's time
            values = np.asarray(polygon, np.float64)
        except (ValueError, TypeError):
            values = np.full(1, np.nan)
        if values.ndim != 1 or len(values) % 2 or not (np.abs(values) < _MOST).all():
            raise ValueError("holds a polygon that is not [x0, y0, x1, y1, ...] in pixels")
        if len(values) > 2 * MAX_POLYGON_POINTS:
            raise ValueError(f"holds a polygon of {len(values) // 2:,} points, over the "
                             f"{MAX_POLYGON_POINTS:,} shardpack draws")  # fmt: skip
        if len(values) >= 6:
            polygons.append(values.astype("<f4").reshape(-1, 2))
    return polygons


def rle_counts(text: str) -> list[int]:
    """COCO's compressed RLE string as counts (pycocotools' rleFrString: 5 bits a character,
    a continuation bit, counts past the second stored as the difference to the one two
    before).

    Raises:
        ValueError: the string ends inside a count, or holds one of over 64 bits.
    """
    counts: list[int] = []
    at, data = 0, text.encode("ascii")
    while at < len(data):
        value, shift, more = 0, 0, True
        while more:
            if at >= len(data):
                raise ValueError("RLE string is cut short")
            c = data[at] - 48
            value |= (c & 0x1F) << shift
            more = bool(c & 0x20)
            at, shift = at + 1, shift + 5
            if more and shift >= _COUNT_BITS:
                raise ValueError("RLE string holds a count past any image's pixels")
            if not more and c & 0x10:
                value |= -1 << shift
        if len(counts) > 2:
            value += counts[-2]
        counts.append(value)
    return counts


def encode(height: int, width: int, outlines: list, crowd: list[int]) -> bytes:
    """One record's blob: its size, and each object's checked segmentation (check's forms)
    with its crowd flag."""
    return _encode([height, width], outlines, crowd)


def encode_normalised(outlines: list[Sequence[np.ndarray]]) -> bytes:
    """One record's blob of polygons only, (x, y) rows as fractions of the image's width and
    height (check's form, of an image of size 1 x 1); no crowds. An object of no polygon (an
    empty list or tuple) gets no pixel."""
    return _encode(None, outlines, [0] * len(outlines))


def _encode(size: list[int] | None, outlines: list, crowd: list[int]) -> bytes:
    """A blob of `size` ([height, width], None: the polygons are fractions of it)."""
    objects, coordinates = [], []
    for outline in outlines:
        if isinstance(outline, dict):
            objects.append({"counts": outline["counts"]})
        else:
            objects.append([len(p) for p in outline])
            coordinates += outline
    head = json.dumps({"size": size, "crowd": crowd, "objects": objects},
                      separators=(",", ":")).encode()  # fmt: skip
    return b"".join([MAGIC, _HEAD.pack(len(head)), head, *(p.tobytes() for p in coordinates)])


def decode(blob: bytes) -> tuple[tuple[int, int] | None, list, list[int]] | None:
    """(size, outlines, crowd flags) of a blob encode made, each outline an RLE dict or a
    list of (n, 2) float32 polygons; size None: polygons in fractions of the image's sides
    (encode_normalised's); None for other bytes (a PNG)."""
    import numpy as np  # here: `pack --help` imports the sources, not numpy

    if not blob.startswith(MAGIC):
        return None
    at = len(MAGIC) + _HEAD.size
    (length,) = _HEAD.unpack_from(blob, len(MAGIC))
    doc = json.loads(blob[at : at + length])
    points = np.frombuffer(blob, "<f4", offset=at + length).reshape(-1, 2)
    size, outlines, used = doc["size"] and tuple(doc["size"]), [], 0
    for entry in doc["objects"]:
        if isinstance(entry, dict):
            outlines.append({"size": list(size), "counts": entry["counts"]})
            continue
        polygon = []
        for count in entry:
            polygon.append(points[used : used + count])
            used += count
        outlines.append(polygon)
    return size, outlines, doc["crowd"]  # type: ignore[return-value]
