"""Boxes follow the pixels: which features hold geometry, the refusal of a transform that would
leave one behind, and a record's boxes moved through its image's geometry (images.Geometry).

Boxes describe the image as displayed (EXIF orientation applied), normalised
[ymin, xmin, ymax, xmax] as TFDS stores them. Moved boxes are clipped to the image; a box with
no visible area left is dropped (albumentations' min_visibility=0) and counted by reason.
"""

from __future__ import annotations

from shardpack.errors import ShardpackError
from shardpack.options import PackOptions
from shardpack.packing.tfdsmeta import is_box
from shardpack.schema import Schema

# The last part of a feature's name that says it holds geometry of the image: a transform must
# move it or the run is refused. Boxes under tfdsmeta.BOX_NAMES (float32 rows of 4) are moved.
GEOMETRY_WORDS = frozenset({"bbox", "bboxes", "boxes", "keypoints", "mask", "masks",
                            "segmentation", "polygons"})  # fmt: skip
# Why a box was dropped, as the summary counts it: no visible area in the image it came with,
# or none left once the image was cropped.
OUTSIDE = "outside the image"
CROPPED = "cropped away"
# The tally's name (facts.ShardFacts) of the drops, and so the split summaries'.
DROPPED = "boxes_dropped"


def box_features(schema: Schema) -> tuple[str, ...]:
    """The features moved with the pixels: boxes under a recognised name (tfdsmeta.BOX_NAMES)."""
    return tuple(name for name, feature in schema.extras.items() if is_box(name, feature))


def transforms(options: PackOptions) -> str | None:
    """The options that change an image's geometry (resize, crop, pad, scaled decode), as the
    flags read; None if every image keeps its geometry."""
    if options.max_side is not None:
        return f"--max-side {options.max_side}"
    if options.resize is not None:
        width, height = options.resize
        return f"--resize {width}x{height} --resize-mode {options.resize_mode}" + (
            "" if options.upscale else " --no-upscale"
        )
    return None


def refuse_unmoved(schema: Schema, options: PackOptions) -> None:
    """Refuse (ShardpackError) a geometric transform on a dataset holding geometry it would not
    move: keypoints, masks, or boxes of another type or name than those box_features moves."""
    said = transforms(options)
    moved: tuple[str, ...] = ()  # none yet: every box feature is refused
    left = [name for name in schema.extras
            if name.rsplit("/", 1)[-1] in GEOMETRY_WORDS and name not in moved]  # fmt: skip
    if said is None or not left:
        return
    raise ShardpackError(
        f"{said} changes the images' geometry but not feature {left[0]!r} "
        f"({schema[left[0]].dtype} {list(schema[left[0]].shape)}), which would then point at "
        "other pixels; shardpack moves boxes only (float32 rows of 4, normalised [ymin, xmin, "
        "ymax, xmax], named bbox, boxes, bboxes or objects/bbox): rename or drop that column, "
        "or pack without resizing"
    )
