"""Objects' outlines as a source hands them to the workers: one blob a record under the `mask`
feature, holding the image's size and each object's COCO segmentation (polygons, or RLE with
compressed or uncompressed counts), which packing/masks.py draws into the record's instance-id
PNG once the image's geometry is known. The parent never draws pixels.
"""

from __future__ import annotations

import json

# The feature holding a record's instance-id map: one lossless PNG an image (0 background, i
# the i-th object of objects/*), not a PNG per object: one decode gives every object, an
# image of many small objects costs one small file, and it is TFDS's and Cityscapes' form.
MASK = "mask"
MAGIC = b"shardpack-shapes/1\n"


def check(segmentation: object, height: int, width: int) -> object:
    """A COCO segmentation, checked: a list of polygons ([x0, y0, x1, y1, ...] in pixels; those
    of under 3 points, which hold no area, dropped) or an RLE {size: [height, width], counts:
    string or list of integers} of the image's size.

    Raises:
        ValueError: it is neither, saying why.
    """
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
            raise ValueError("RLE counts are neither a string nor a list of counts")
        if sum(runs) != height * width or min(runs, default=0) < 0:
            raise ValueError(f"RLE counts cover {sum(runs)} pixels, not {width}x{height}")
        return {"size": size, "counts": counts}
    if not isinstance(segmentation, list) or not all(
            isinstance(p, list) and len(p) % 2 == 0 and all(
                isinstance(v, int | float) and not isinstance(v, bool) and abs(v) < 1e9
                for v in p) for p in segmentation):  # fmt: skip
        raise ValueError("is neither a list of polygons [x0, y0, x1, y1, ...] nor an RLE")
    return [p for p in segmentation if len(p) >= 6]


def rle_counts(text: str) -> list[int]:
    """COCO's compressed RLE string as counts (pycocotools' rleFrString: 5 bits a character,
    a continuation bit, counts past the second stored as the difference to the one two
    before).

    Raises:
        ValueError: the string ends inside a count.
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
            if not more and c & 0x10:
                value |= -1 << shift
        if len(counts) > 2:
            value += counts[-2]
        counts.append(value)
    return counts


def encode(height: int, width: int, outlines: list, crowd: list[int]) -> bytes:
    """One record's blob: its size, and each object's checked segmentation with its crowd flag."""
    doc = {"size": [height, width], "objects": outlines, "crowd": crowd}
    return MAGIC + json.dumps(doc, separators=(",", ":")).encode()


def decode(blob: bytes) -> tuple[tuple[int, int], list, list[int]] | None:
    """(size, outlines, crowd flags) of a blob encode made; None for other bytes (a PNG)."""
    if not blob.startswith(MAGIC):
        return None
    doc = json.loads(blob[len(MAGIC) :])
    return tuple(doc["size"]), doc["objects"], doc["crowd"]  # type: ignore[return-value]
