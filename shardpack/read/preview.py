"""preview: a contact sheet of random records with their class names, to eyeball labels."""

from __future__ import annotations

import math
import os
import random

import cv2
import numpy as np

from shardpack import images
from shardpack.errors import OutputError, is_count, os_error_fix
from shardpack.index import load_index
from shardpack.packing.tfdsmeta import BOX_NAMES, is_box
from shardpack.read.stream import decode_pixels, iter_examples
from shardpack.schema import Schema
from shardpack.storage.atomic import write_atomic
from shardpack.storage.locations import local_file

CELL = 128  # pixels per thumbnail side
_CAPTION = 22  # pixels of caption strip under each thumbnail
BOX_COLOR = (0, 255, 0)  # BGR: green shows on most photos
BAD_COLOR = (0, 0, 255)  # BGR red: the cross on the cell of an image that does not decode
# The sheet's format, picked by the extension of the file asked for.
FORMATS = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".webp": "webp"}


def make_preview(
    out: str | os.PathLike, dest: str | os.PathLike, split: str = "train", n: int = 64,
    seed: int = 0, storage_options: dict | None = None, overwrite: bool = False,
) -> str:  # fmt: skip
    """Draw n random records of a split in a grid, each captioned with its class name(s), with
    its boxes drawn when the schema has a box feature (see box_feature).

    Records are drawn by reservoir sampling over one pass, so any split size works.

    Args:
        out: the output folder or URL (s3://, gs://, memory://...) of a pack run.
        dest: the image to write; its extension (.png, .jpg, .jpeg, .webp) picks the format.
        split: the split to draw from.
        n: how many records to show.
        seed: which random records.
        storage_options: options for OUT's fsspec filesystem, when it is a URL.
        overwrite: replace a file already at dest (else it is refused, and kept).

    Returns:
        The path written.

    Raises:
        OutputError: dest has another extension, exists (without overwrite), its folder is
            missing, or it cannot be written.
    """
    if not is_count(n):
        raise ValueError(f"n must be a positive integer (records to show), got: {n!r}")
    dest = os.fspath(dest)
    if local_file(dest) is None:
        raise OutputError(f"{dest}: preview writes a local image file; pass a local path for "
                          "--out (and copy it to the store after)")  # fmt: skip
    fmt = _sheet_format(dest)
    if not overwrite and os.path.lexists(dest):  # before reading a record
        raise _exists(dest)
    index = load_index(out, storage_options)
    rng = random.Random(seed)
    chosen: list[dict] = []
    for seen, record in enumerate(iter_examples(index.storage, split)):
        if len(chosen) < n:
            chosen.append(record)
        elif (j := rng.randrange(seen + 1)) < n:
            chosen[j] = record
    boxes = box_feature(index.schema)
    cols = max(1, math.ceil(math.sqrt(len(chosen))))
    rows = max(1, math.ceil(len(chosen) / cols))
    sheet = np.full((rows * (CELL + _CAPTION), cols * CELL, 3), 255, np.uint8)
    for k, record in enumerate(chosen):
        thumb, mark = _thumbnail(record)
        if boxes is not None:
            _draw_boxes(thumb, record[boxes])
        y, x = (k // cols) * (CELL + _CAPTION), (k % cols) * CELL
        sheet[y : y + thumb.shape[0], x : x + thumb.shape[1]] = thumb
        caption = mark + _caption(index.classes, record.get("label"))
        caption = caption.encode("ascii", "replace").decode()[:18]
        cv2.putText(sheet, caption, (x + 3, y + CELL + 15), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                    (0, 0, 0), 1, cv2.LINE_AA)  # fmt: skip
    try:
        write_atomic(dest, images.encode(sheet, fmt, quality=90), new=not overwrite)
    except FileExistsError:  # made while the records were read
        raise _exists(dest) from None
    except OSError as e:
        raise OutputError(
            f"{dest}: cannot write the preview ({e.strerror or e}); {os_error_fix(e)}"
        ) from None
    return dest


def _exists(dest: str) -> OutputError:
    return OutputError(f"{dest}: exists; pass --overwrite to replace it, or another --out")


def box_feature(schema: Schema) -> str | None:
    """The name of the feature that holds boxes: a [-1, 4] float32 one named as TFDS does."""
    return next((n for n in BOX_NAMES if n in schema and is_box(n, schema[n])), None)


def _thumbnail(record: dict) -> tuple[np.ndarray, str]:
    """The record's image scaled to fit a cell (BGR) and no mark; for an image that does not
    decode (verify without --decode passes it), a grey cell crossed in red, marked in words."""
    try:
        rgb = decode_pixels(record)
    except images.BadImage:
        thumb = np.full((CELL, CELL, 3), 160, np.uint8)
        cv2.line(thumb, (0, 0), (CELL - 1, CELL - 1), BAD_COLOR, 3)
        cv2.line(thumb, (0, CELL - 1), (CELL - 1, 0), BAD_COLOR, 3)
        return thumb, "BAD IMAGE "
    scale = CELL / max(rgb.shape[:2])
    size = (max(1, round(rgb.shape[1] * scale)), max(1, round(rgb.shape[0] * scale)))
    return cv2.resize(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), size, interpolation=cv2.INTER_AREA), ""


def _draw_boxes(thumb: np.ndarray, boxes: np.ndarray) -> None:
    """Draw [ymin, xmin, ymax, xmax] boxes (relative, as TFDS's BBox) onto the thumbnail; a box
    with a NaN or infinite corner is not drawn, and corners past the image are cut to it."""
    height, width = thumb.shape[:2]
    boxes = np.clip(boxes[np.isfinite(boxes).all(axis=1)], 0.0, 1.0)
    for ymin, xmin, ymax, xmax in boxes.tolist():
        top_left = (round(xmin * (width - 1)), round(ymin * (height - 1)))
        bottom_right = (round(xmax * (width - 1)), round(ymax * (height - 1)))
        cv2.rectangle(thumb, top_left, bottom_right, BOX_COLOR, 1)


def _caption(classes: tuple[str, ...], label: object) -> str:
    """The class name of a label, the names of a multi-label list joined, or '' unlabeled."""
    if isinstance(label, int):
        return classes[label]
    if isinstance(label, np.ndarray):
        return "+".join(classes[i] for i in label.tolist())
    return ""


def _sheet_format(dest: str) -> str:
    """The format dest's extension asks for; refuse any other, and a folder that is missing."""
    ext = os.path.splitext(dest)[1].lower()
    if ext not in FORMATS:
        raise OutputError(
            f"{dest}: a preview is written as {', '.join(FORMATS)}, not "
            f"{ext or 'a file without extension'}; name the file with one of those"
        )
    folder = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(folder):
        raise OutputError(f"{dest}: folder {folder} does not exist; create it, or write elsewhere")
    return FORMATS[ext]
