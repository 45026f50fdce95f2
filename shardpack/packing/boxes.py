"""Boxes, keypoints and masks follow the pixels: which features hold geometry, the refusal of a
transform that would leave one behind, and a record's geometry moved through its image's
(images.Geometry, images.Turn).

Boxes are normalised [ymin, xmin, ymax, xmax] as TFDS stores them, of the image as displayed
(EXIF orientation applied; TFDS's and shardpack's own records: as stored, see moves). Moved
boxes are clipped to the image; a box with no visible area left is dropped (kept if any part
remains; albumentations at its defaults would keep it as a line of no area) and counted by
reason (facts.ShardFacts.drop, which names the records too).

Keypoints (objects/keypoints, float32 rows of (x, y, v) per keypoint, x and y normalised, as
COCO orders them) move as points with the boxes' arithmetic; one that leaves the image, or lies
outside it where nothing moves, becomes (0, 0, 0), COCO's "not labelled". A record's `mask`
(packing/masks.py) is drawn, moved and renumbered after the objects dropped.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

import numpy as np

from shardpack import images
from shardpack.errors import ImageError, Option, ShardpackError
from shardpack.index import Index
from shardpack.options import DEFAULT_MAX_PIXELS, PackOptions, box_column
from shardpack.packing import masks
from shardpack.packing.tfdsmeta import is_box
from shardpack.schema import BOX_REACH, Feature, Schema, is_mask

# The last part of a feature's name that says it holds geometry of the image: a transform must
# move it or the run is refused. Boxes under tfdsmeta.BOX_NAMES (float32 rows of 4) are moved.
GEOMETRY_WORDS = frozenset({"bbox", "bboxes", "boxes", "keypoints", "mask", "masks",
                            "segmentation", "polygons"})  # fmt: skip
# Why a box was dropped, as the summary counts it: no width or height to begin with (COCO's
# [x, y, 0, h]), no visible area in the image it came with, or none left once it was cropped.
NO_AREA = "no area"
OUTSIDE = "outside the image"
CROPPED = "cropped away"
HIDDEN = "mostly cropped away"  # under min_visibility
# How far a box's normalised edge may be from where it was meant: rows come as float32 (a
# manifest's, TFDS's, our own shards'), a few units of its last bit (2**-24) at 1.
ROUNDING = 2.0**-20
_APART = np.array([[ROUNDING] * 4, [0.0] * 4])
# Sources whose boxes describe their records' images as TensorFlow decodes them, EXIF
# orientation not applied: TFDS's prepared folders and shardpack's own shards.
UNTURNED_SOURCES = frozenset({"tfds", "shardpack"})
# Keypoint features moved as points: float32 rows of (x, y, v) triples.
POINT_NAMES = ("keypoints", "objects/keypoints")
# The group of per-object lists whose rows a top-level `mask` map numbers (objects/mask: its own).
OBJECTS = "objects"

Move = images.Geometry | images.Turn


def box_features(schema: Schema, declared: Iterable[str] = ()) -> tuple[str, ...]:
    """The features moved with the pixels: boxes under a recognised name (tfdsmeta.BOX_NAMES)
    or `declared` (declared_boxes) as float32 rows of 4."""
    declared = set(declared)
    return tuple(name for name, feature in schema.extras.items() if is_box(name, feature) or (
        name in declared and feature.dtype == "float32" and feature.row == 4))  # fmt: skip


def declared_boxes(entries: Iterable[str] | None) -> tuple[str, ...]:
    """The columns --box-columns `entries` (PackOptions.box_columns, or an index's) declare
    boxes."""
    return tuple(box_column(entry)[0] for entry in entries or ())


def moved_features(schema: Schema, declared: Iterable[str] = ()) -> tuple[str, ...]:
    """Every feature moved with the pixels: boxes (box_features), keypoints and the
    instance-id `mask`."""
    return tuple(geometry(schema, declared))


def packed_moved(schema: Schema, options: PackOptions) -> tuple[str, ...]:
    """moved_features of a dataset packed with these options (the boxes its --box-columns
    declared among them)."""
    return moved_features(schema, declared_boxes(options.box_columns))


def index_geometry(index: Index) -> dict[str, str]:
    """geometry() of an index's records: its schema, with the boxes its --box-columns declared."""
    return geometry(index.schema, declared_boxes((index.options or {}).get("box_columns")))


def geometry(schema: Schema, declared: Iterable[str] = ()) -> dict[str, str]:
    """What each feature moved with the pixels holds: "boxes", "keypoints" or "mask", in the
    schema's order."""
    boxed = set(box_features(schema, declared))
    kinds = {}
    for name, feature in schema.extras.items():
        if name in boxed:
            kinds[name] = "boxes"
        elif _is_points(name, feature):
            kinds[name] = "keypoints"
        elif is_mask(name, feature):
            kinds[name] = "mask"
    return kinds


def _is_points(name: str, feature: Feature) -> bool:
    return name in POINT_NAMES and feature.dtype == "float32" and (feature.row or 1) % 3 == 0


def transforms(options: PackOptions) -> tuple[str | Option, ...] | None:
    """The options that change an image's geometry (resize, crop, pad, scaled decode), as a
    message's parts; None if every image keeps its geometry."""
    if options.max_side is not None:
        return (Option("max_side", options.max_side),)
    if options.resize is not None:
        size = (Option("resize", options.resize), " ", Option("resize_mode", options.resize_mode))
        return size + (() if options.upscale else (" ", Option("upscale", False)))
    return None


def refuse_unmoved(schema: Schema, options: PackOptions) -> None:
    """Refuse (ShardpackError) a geometric transform on a dataset holding geometry it would not
    move: any feature named like geometry of another type or name than moved_features's."""
    said = transforms(options)
    moved = packed_moved(schema, options)
    left = [name for name in schema.extras
            if name.rsplit("/", 1)[-1] in GEOMETRY_WORDS and name not in moved]  # fmt: skip
    if said is None or not left:
        return
    raise ShardpackError(
        *said,
        f" changes the images' geometry but not feature {left[0]!r} "
        f"({schema[left[0]].dtype} {list(schema[left[0]].shape)}), which would then point at "
        "other pixels; shardpack moves boxes (float32 rows of 4, normalised [ymin, xmin, "
        "ymax, xmax], named bbox, boxes, bboxes or objects/bbox, or declared with ",
        Option("box_columns"),
        "), keypoints (float32 rows of normalised (x, y, v), named keypoints or "
        "objects/keypoints) and an instance-id map (bytes, named mask): rename, declare or "
        "drop that column, or pack without resizing",
    )


def refuse_boxless(schema: Schema, options: PackOptions, src: str) -> None:
    """Refuse (ShardpackError) --min-visibility on a dataset (of SRC `src`) whose records hold
    no boxes: it would drop nothing, and say nothing."""
    if not options.min_visibility or box_features(schema, declared_boxes(options.box_columns)):
        return
    raise ShardpackError(
        f"{src}: ", Option("min_visibility", options.min_visibility), " drops boxes a crop "
        "leaves mostly cut away, and its records hold none (float32 rows of 4 named bbox, "
        "boxes, bboxes or objects/bbox, or declared with ", Option("box_columns"), "); drop ",
        Option("min_visibility"),
    )  # fmt: skip


def moves(
    orientation: int | None, kept: bool, where: images.Geometry | None, source: str
) -> tuple[Move, ...]:
    """What took a record's image from what its boxes describe to what readers decode: the
    geometry `where` its pixels went through (None: none), after the EXIF turn of a JPEG
    (images.Turn; `orientation`: the one the header probe read, None for none) where the
    boxes and the pixels stored see it differently. `kept`: the bytes
    were stored as they are (decoded unturned), else re-encoded from decode (turned upright);
    `source`: the source's name (UNTURNED_SOURCES's boxes describe the image unturned)."""
    turn = images.stored_turn(orientation)
    after = () if where is None else (where,)
    if turn is None:
        return after
    if source in UNTURNED_SOURCES:  # the boxes see it as stored
        return () if kept else (images.Turn(turn.orientation, upright=True), *after)
    return (turn,) if kept else after  # the boxes see it as displayed


def follow(
    key: str,
    fields: dict[str, object],
    schema: Schema,
    moved: tuple[str, ...],
    where: tuple[Move, ...],
    size: tuple[int, int],
    min_visibility: float = 0.0,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> tuple[dict[str, object], Counter[str]]:
    """An item's fields with each feature in `moved` (moved_features) taken through the moves
    `where` (moves() gives them): boxes clipped to the image, keypoints, and a `mask` drawn to
    the stored image's `size` (height, width); and how many boxes were dropped, by reason (a
    box left with less than `min_visibility` of its area in the image: HIDDEN).

    A dropped box takes its row of every list feature of its group (`objects/label` beside
    `objects/bbox`: TFDS's Sequence of a dict keeps them in step) with it, and its pixels out
    of the `mask` (the others renumbered).

    Raises:
        ImageError: a top-level box column lost boxes beside another list of as many rows,
            which may or may not be per box: the record is skipped rather than misaligned; a
            list of the boxes' group holds another number of rows than the boxes (which row
            is whose box cannot be told, and verify refuses it); a mask that cannot be drawn or
            moved (masks.drawn).
    """
    dropped: Counter[str] = Counter()
    masked = [name for name in moved if name in fields and is_mask(name, schema[name])]
    pointed = [name for name in moved if name in fields and _is_points(name, schema[name])]
    boxed = [name for name in moved if name in fields and name not in masked
             and name not in pointed]  # fmt: skip
    if not where and not masked and not boxed and not pointed:
        return fields, dropped
    fields = dict(fields)
    kept: dict[str, np.ndarray] = {}  # group -> the rows its boxes kept
    # Boxes are clipped to the image even where nothing moves it: a box reaching past its
    # edge is stored as what it covers of the image, as verify and TFDS's BBoxFeature want.
    for name in boxed:
        rows = np.asarray(fields[name], np.float64).reshape(-1, 4)
        _check_rows(key, name, rows)
        grouped = _group_lists(key, fields, schema, name, len(rows))
        boxes, reasons = _moved(rows, where, min_visibility)
        fields[name] = boxes[reasons == ""].astype(np.float32)
        dropped.update(str(r) for r in reasons if r)
        kept[name.rpartition("/")[0]] = reasons == ""
        if len(boxes) != len(fields[name]):
            _drop_siblings(key, fields, schema, name, reasons == "", grouped)
    for name in pointed:  # where nothing moves them too: one outside the image is unlabelled
        fields[name] = _moved_points(fields[name], where, schema[name].row or 3)
    for name in masked:
        group = name.rpartition("/")[0] or OBJECTS
        fields[name] = masks.drawn(key, fields[name], where, size, kept.get(group), max_pixels)
    return fields, dropped


def _moved_points(value: object, where: tuple[Move, ...], row: int) -> np.ndarray:
    """Rows of (x, y, v) triples, normalised, taken through `where`: a point that leaves the
    image [0, 1) or was not labelled (v 0) becomes (0, 0, 0)."""
    points = np.asarray(value, np.float64).reshape(-1, 3)
    yx, apart = points[:, [1, 0, 1, 0]], _APART  # each point a box of no size, as move_points
    for move in where:
        yx, apart = _move(yx, apart, move)
    yx = yx[:, :2]
    inside = ((yx >= 0) & (yx < 1)).all(axis=1) & (points[:, 2] > 0)
    out = np.zeros_like(points)
    out[inside] = np.column_stack([yx[:, 1], yx[:, 0], points[:, 2]])[inside]
    return out.reshape(-1, row).astype(np.float32)


def _check_rows(key: str, name: str, rows: np.ndarray) -> None:
    """Raise ImageError (the record skipped, or the run stopped) for box rows that cannot be
    normalised [ymin, xmin, ymax, xmax]."""
    wrong = ((rows < BOX_REACH[0]) | (rows > BOX_REACH[1])).any(axis=1)
    wrong |= (rows[:, 0] > rows[:, 2]) | (rows[:, 1] > rows[:, 3])
    if wrong.any():
        row = int(np.argmax(wrong))
        far = ((rows[row] < BOX_REACH[0]) | (rows[row] > BOX_REACH[1])).any()
        way = ("its numbers reach past the image as a box in pixels does: divide them by the "
               "image's height and width (boxes in pixels are not read)" if far else
               f"convert the column, or name its order with --box-columns {name}:xyxy (or "
               "xywh, cxcywh)")  # fmt: skip
        raise ImageError(key, f"{name!r} row {row} {[round(v, 4) for v in rows[row].tolist()]} "
                              f"is not a normalised [ymin, xmin, ymax, xmax] box of the image: "
                              f"{way}")  # fmt: skip


def _moved(
    rows: np.ndarray, where: tuple[Move, ...], min_visibility: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """The boxes clipped to the image, moved through `where` and clipped to the canvas (a box
    reaching past the image stops at its edge, not in a pad border), and each one's reason to
    be dropped ("" to keep): no area of its own (NO_AREA), none in the image (OUTSIDE) or
    none the crop left (CROPPED), or less of its area left than `min_visibility` (HIDDEN; as
    albumentations measures it: the share of the moved box that the canvas holds)."""
    inside = moved = np.clip(rows, 0.0, 1.0)
    seen = np.ones(len(rows))
    apart = _APART
    for move in where:
        whole, apart = _move(moved, apart, move)
        moved = np.clip(whole, 0.0, 1.0)
        seen *= _area(moved) / np.maximum(_area(whole), np.finfo(np.float64).tiny)
    kept = np.where(seen >= min_visibility, "", HIDDEN)
    lost = np.where(_has_area(inside), CROPPED, np.where(_has_area(rows), OUTSIDE, NO_AREA))
    reasons = np.where(_has_area(moved), kept, lost)
    return moved, reasons


def _move(rows: np.ndarray, apart: np.ndarray, move: Move) -> tuple[np.ndarray, np.ndarray]:
    """Box rows taken through one move, unclipped, each edge within float32's rounding of the
    canvas's edge on it; and `apart` (how far off an edge may be, in the image's units: rows
    ROUNDING and 0, their difference) taken along for the next move."""
    n = len(rows)
    whole = move.move_boxes(np.concatenate([rows, apart]))
    apart, whole = whole[n:], whole[:n]
    rounding = np.abs(apart[0] - apart[1])
    # a box that ended where the crop begins keeps no sliver of 1e-7, a keypoint on the crop's
    # edge stays in (a float32 row's last bit, scaled by the cut)
    whole[np.abs(whole) <= rounding] = 0.0
    whole[np.abs(whole - 1) <= rounding] = 1.0
    return whole, apart


def _has_area(boxes: np.ndarray) -> np.ndarray:
    return (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])


def _area(boxes: np.ndarray) -> np.ndarray:
    return np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)


def _list_rows(fields: dict[str, object], schema: Schema, names: Iterable[str]) -> dict:
    """Each list feature `names` of the record as its rows (a list of bytes, or an array of one
    row per object)."""
    return {other: list(fields[other]) if schema[other].dtype == "bytes" else np.asarray(
                fields[other]).reshape(-1, *schema[other].shape[1:])
            for other in names}  # fmt: skip


def _group_lists(
    key: str, fields: dict[str, object], schema: Schema, name: str, count: int
) -> list[str]:
    """The per-object lists of the group of boxes `name` (objects/label beside objects/bbox;
    none for a top-level box column), each checked to hold its `count` rows (_check_rows_of)."""
    group = name.rpartition("/")[0]
    names = [other for other in fields if group and other != name
             and other.startswith(group + "/") and schema[other].is_list]  # fmt: skip
    for other in names:
        _check_rows_of(key, fields, schema, other, (name, count))
    return names


def _check_rows_of(
    key: str, fields: dict[str, object], schema: Schema, other: str, boxes: tuple[str, int]
) -> None:
    """Refuse the list `other` unless it holds a row for each of the `boxes` (their feature's
    name and count): stored, verify would call its shard damaged."""
    name, count = boxes
    shape = schema[other].shape
    value = fields[other]  # counted unconverted: this runs for every record of objects
    held = len(value) if len(shape) == 1 else np.size(value) // math.prod(shape[1:])
    if held != count:
        raise ImageError(key, f"{other!r} holds {held} rows beside {count} boxes in "
                              f"{name!r}: which is whose box cannot be told; give each "
                              "box one row of each list of its group")  # fmt: skip


def _drop_siblings(
    key: str,
    fields: dict[str, object],
    schema: Schema,
    name: str,
    kept: np.ndarray,
    grouped: list[str],
) -> None:
    """Drop the rows of `name`'s per-object siblings (`grouped`: _group_lists's) that its boxes
    lost (see follow)."""
    count = len(kept)
    if not name.rpartition("/")[0]:  # a top-level box column: a list as long may be per box
        lists = [other for other in fields if other != name and schema[other].is_list]
        for other, rows in _list_rows(fields, schema, lists).items():
            if len(rows) == count:
                raise ImageError(key, f"{count - int(kept.sum())} of its {count} boxes in "
                                      f"{name!r} have nothing left in the image, and {other!r} "
                                      f"holds {count} rows too, which may be one per box: name "
                                      f"per-box columns objects/bbox, objects/<name> so that "
                                      "they are dropped together")  # fmt: skip
    for other, rows in _list_rows(fields, schema, grouped).items():
        fields[other] = [v for v, k in zip(rows, kept, strict=True) if k] if isinstance(
            rows, list) else rows[kept]  # fmt: skip
