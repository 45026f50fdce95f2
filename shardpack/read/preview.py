"""preview: a contact sheet of random records with their class names, to eyeball labels."""

from __future__ import annotations

import math
import os
import random
import unicodedata
from dataclasses import dataclass

import numpy as np

from shardpack import images
from shardpack.errors import OutputError, is_count, os_error_fix
from shardpack.index import load_index
from shardpack.packing.objects import Objects, objects_of
from shardpack.read.objects import decode_mask
from shardpack.read.stream import decode_pixels, iter_examples
from shardpack.schema import Schema
from shardpack.storage.atomic import write_atomic
from shardpack.storage.locations import local_file, shell_slip

CELL = 128  # pixels per thumbnail side
_CAPTION = 22  # pixels of caption strip under each thumbnail
BOX_COLOR = (0, 255, 0)  # BGR: green shows on most photos
BAD_COLOR = (0, 0, 255)  # BGR red: the cross on the cell of an image that does not decode
MASK_COLOR = (255, 0, 255)  # BGR magenta: the outline of each object's instance mask
NAME_COLOR = (0, 0, 0)  # each box's class name, in black on a strip of BOX_COLOR
_NAME_SCALE = 0.3  # OpenCV's font scale for box names: about 7 pixels high
# The sheet's format, picked by the extension of the file asked for.
FORMATS = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".webp": "webp"}


@dataclass(frozen=True)
class Preview:
    """What make_preview drew: the file written, the split, and how many records it shows (all
    the split holds, where that is fewer than were asked for). Path-like: the file written, as
    make_preview returned before (`cv2.imread(make_preview(out, "grid.png"))`)."""

    path: str
    split: str
    records: int

    def __fspath__(self) -> str:
        return self.path

    def short_of(self, n: int) -> str | None:
        """One line saying the split holds fewer than the `n` records asked for, else None."""
        if self.records >= n:
            return None
        held = f"{self.records:,} record{'s' * (self.records != 1)}"
        return f"split {self.split!r} holds only {held}: the sheet shows all of them, not {n:,}"


def make_preview(
    out: str | os.PathLike, dest: str | os.PathLike, split: str | None = None, n: int = 64,
    seed: int = 0, storage_options: dict | None = None, overwrite: bool = False,
) -> Preview:  # fmt: skip
    """Draw n random records of a split in a grid, each captioned with its class name(s); where
    the schema holds objects (packing/objects.py), each box with its class name and each object's
    instance-mask outline drawn.

    Records are drawn by reservoir sampling over one pass, so any split size works.

    Args:
        out: the output folder or URL (s3://, gs://, memory://...) of a pack run.
        dest: the image to write; its extension (.png, .jpg, .jpeg, .webp) picks the format.
        split: the split to draw from; None: `train`, or the first by name where there is none
            (a COCO set of `val` alone).
        n: how many records to show.
        seed: which random records.
        storage_options: options for OUT's fsspec filesystem, when it is a URL.
        overwrite: replace a file already at dest (else it is refused, and kept).

    Returns:
        The path written (the Preview is path-like), the split drawn from and how many records
        the sheet shows: all the split holds where it holds fewer than n (`short_of(n)` says so
        in one line).

    Raises:
        OutputError: dest has another extension, exists (without overwrite), its folder is
            missing, or it cannot be written.
    """
    if not is_count(n):
        raise ValueError(f"n must be a positive integer (records to show), got: {n!r}")
    if not isinstance(dest, str | os.PathLike):  # else os.fspath's TypeError, of no argument
        raise TypeError(f"dest must be the image file to write (a str or path), got: {dest!r}")
    dest = os.fspath(dest)
    if (why := shell_slip(dest, "--out", "an image file name")) is not None:
        raise OutputError(why)
    if local_file(dest) is None:
        raise OutputError(f"{dest}: preview writes a local image file; pass a local path for "
                          "--out (and copy it to the store after)")  # fmt: skip
    fmt = _sheet_format(dest)
    if not overwrite and os.path.lexists(dest):  # before reading a record
        raise exists_error(dest)
    index = load_index(out, storage_options)
    if split is None:
        split = "train" if "train" in index.splits else min(index.splits, default="train")
    rng = random.Random(seed)
    chosen: list[dict] = []
    for seen, record in enumerate(iter_examples(index.storage, split)):
        if len(chosen) < n:
            chosen.append(record)
        elif (j := rng.randrange(seen + 1)) < n:
            chosen[j] = record
    objects = objects_of(index.schema)
    cv2 = images._opencv()  # with Ctrl-C held off as it loads (its loader swallows one)
    cols = max(1, math.ceil(math.sqrt(len(chosen))))
    rows = max(1, math.ceil(len(chosen) / cols))
    sheet = np.full((rows * (CELL + _CAPTION), cols * CELL, 3), 255, np.uint8)
    for k, record in enumerate(chosen):
        thumb, mark = _thumbnail(record)
        if objects is not None and not mark:
            draw_objects(thumb, record, objects)
        y, x = (k // cols) * (CELL + _CAPTION), (k % cols) * CELL
        sheet[y : y + thumb.shape[0], x : x + thumb.shape[1]] = thumb
        caption = mark + _caption(index.classes, record.get("label"))
        caption = _drawable(caption)[:18]
        cv2.putText(sheet, caption, (x + 3, y + CELL + 15), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                    (0, 0, 0), 1, cv2.LINE_AA)  # fmt: skip
    try:
        write_atomic(dest, images.encode(sheet, fmt, quality=90), new=not overwrite)
    except FileExistsError:  # made while the records were read
        raise exists_error(dest) from None
    except OSError as e:
        raise OutputError(
            f"{dest}: cannot write the preview ({e.strerror or e}); {os_error_fix(e)}"
        ) from None
    return Preview(dest, split, len(chosen))


def exists_error(dest: str) -> OutputError:
    """The error of a --out FILE already there (preview's, report's): kept, and the run refused."""
    return OutputError(f"{dest}: exists; pass --overwrite to replace it, or another --out")


def box_feature(schema: Schema) -> str | None:
    """The name of the feature that holds boxes: a [-1, 4] float32 one named as TFDS does."""
    objects = objects_of(schema)
    return None if objects is None else objects.boxes


def draw_objects(thumb: np.ndarray, record: dict, objects: Objects) -> None:
    """Draw a record's instance-mask outlines, then its boxes, each with its class name, onto
    a thumbnail of its image (BGR): the preview's cells and the data card's."""
    if objects.mask is not None:
        try:
            ids = decode_mask(record[objects.mask])
        except images.BadImage:  # verify names it; the sheet shows the boxes still
            ids = None
        if ids is not None:
            _draw_mask(thumb, ids)
    _draw_boxes(thumb, record[objects.boxes], objects.names(record))


def _thumbnail(record: dict) -> tuple[np.ndarray, str]:
    """The record's image scaled to fit a cell (BGR) and no mark; for an image that does not
    decode (verify without --decode passes it), a grey cell crossed in red, marked in words."""
    cv2 = images._opencv()
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


def _draw_boxes(thumb: np.ndarray, boxes: np.ndarray, names: list[str]) -> None:
    """Draw [ymin, xmin, ymax, xmax] boxes (relative, as TFDS's BBox) onto the thumbnail, each
    named at its top left corner; a box with a NaN or infinite corner is not drawn, and
    corners past the image are cut to it."""
    cv2 = images._opencv()
    height, width = thumb.shape[:2]
    finite = np.isfinite(boxes).all(axis=1)
    boxes = np.clip(boxes[finite], 0.0, 1.0)
    names = [name for name, kept in zip(names, finite.tolist(), strict=True) if kept]
    corners = [((round(xmin * (width - 1)), round(ymin * (height - 1))),
                (round(xmax * (width - 1)), round(ymax * (height - 1))))
               for ymin, xmin, ymax, xmax in boxes.tolist()]  # fmt: skip
    for top_left, bottom_right in corners:
        cv2.rectangle(thumb, top_left, bottom_right, BOX_COLOR, 1)
    for (x, y), name in zip((c[0] for c in corners), names, strict=True):  # over every box
        if not name:
            continue
        name = _drawable(name)[:12]
        (w, h), base = cv2.getTextSize(name, cv2.FONT_HERSHEY_SIMPLEX, _NAME_SCALE, 1)
        cv2.rectangle(thumb, (x, y), (x + w + 1, y + h + base), BOX_COLOR, cv2.FILLED)
        cv2.putText(thumb, name, (x + 1, y + h), cv2.FONT_HERSHEY_SIMPLEX, _NAME_SCALE,
                    NAME_COLOR, 1, cv2.LINE_AA)  # fmt: skip


def _draw_mask(thumb: np.ndarray, ids: np.ndarray) -> None:
    """Outline each object of an instance-id map (0 background, i the i-th object), scaled to
    the thumbnail nearest-neighbour as masks are."""
    cv2 = images._opencv()
    height, width = thumb.shape[:2]
    ids = cv2.resize(ids, (width, height), interpolation=cv2.INTER_NEAREST)
    for i in np.unique(ids[ids > 0]).tolist():
        shape = (ids == i).astype(np.uint8)
        contours, _ = cv2.findContours(shape, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        cv2.drawContours(thumb, contours, -1, MASK_COLOR, 1)


def _drawable(text: str) -> str:
    """Text in the ASCII that OpenCV's font draws: accents dropped from their letters
    (`Crème Brûlée` as `Creme Brulee`, not `Cr?me Br?l?e`), any other character a '?'."""
    bare = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return bare.encode("ascii", "replace").decode()


def _caption(classes: tuple[str, ...], label: object) -> str:
    """The class name of a label, the names of a multi-label list joined, or '' unlabeled."""
    if isinstance(label, int):
        return classes[label]
    if isinstance(label, np.ndarray):
        return "+".join(classes[i] for i in label.tolist())
    return ""


def _sheet_format(dest: str) -> str:
    """The format dest's extension asks for; refuse any other, a folder, and a folder that is
    missing."""
    if no_file := no_file_there(dest, "preview.png"):
        raise no_file
    ext = os.path.splitext(dest)[1].lower()
    if ext not in FORMATS:
        raise OutputError(
            f"{dest}: a preview is written as {', '.join(FORMATS)}, not "
            f"{ext or 'a file without extension'}; name the file with one of those"
        )
    return FORMATS[ext]


def no_file_there(dest: str, name: str) -> OutputError | None:
    """The error of a --out FILE (preview's, report's) that is a folder (a file `name` in it is
    suggested) or whose folder does not exist; None where the file can be made."""
    if os.path.isdir(dest):
        return OutputError(f"{dest}: is a folder; --out names the file to write, such as "
                           f"{os.path.join(dest, name)}")  # fmt: skip
    folder = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(folder):
        return OutputError(f"{dest}: folder {folder} does not exist; create it, or write "
                           "elsewhere")  # fmt: skip
    return None
