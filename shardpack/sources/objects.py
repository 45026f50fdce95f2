"""What the object-detection sources (yolo, voc; coco's size check) share: the `objects/...`
features, the size of the image an item's annotations describe, the listing of an images
folder, a small annotation file read as hostile input, and the warnings that count images
without objects.

An object dataset's records hold no `label`: each holds `objects/bbox` (float32 rows of
normalised [ymin, xmin, ymax, xmax], of the image as displayed) and `objects/label` (a class
per box), the names TFDS gives COCO's and VOC's features, so that packing/boxes.py moves them
with the pixels and drops a lost box's row from every `objects/...` list.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from shardpack.errors import Option, SourceError
from shardpack.options import PackOptions
from shardpack.schema import Feature, Schema
from shardpack.sources.folder import IMAGE_EXTENSIONS
from shardpack.sources.scanprogress import listed
from shardpack.storage import Entry, Storage
from shardpack.storage.srcfiles import FileTooLarge, RefusedFile

BOX = "objects/bbox"
LABEL = "objects/label"
# The item field holding (height, width, file): the size its annotations give the image as
# displayed (COCO's JSON, VOC's <size>), which their pixel coordinates were normalised by, and
# the file that gives it. The worker refuses the record when the image has another shape (an
# EXIF turn the annotating tool did not apply) and writes no feature of it (a feature of that
# name, a manifest's column, is one).
ANNOTATED_SIZE = "<annotated size>"
# A label file or an annotation XML holds a line or an element per object: kilobytes (a
# segmentation polygon of thousands of points, tens of them). Past this it is no annotation.
MAX_ANNOTATION_BYTES = 4 << 20


class BadAnnotation(Exception):
    """An item's annotation cannot be read: the item is skipped with this reason."""


def object_schema(classes: tuple[str, ...], extra: Mapping[str, Feature] | None = None) -> Schema:
    """The schema of an object dataset: no `label`, objects/bbox and objects/label over
    `classes`, then `extra` (further per-object lists, named objects/..., or YOLO's `mask`)."""
    features = {BOX: Feature("float32", (-1, 4)), LABEL: Feature("int64", (-1,), classes=classes)}
    return Schema.build(None, {**features, **(extra or {})})


def refuse_classes(root: Storage, options: PackOptions, source: str, where: str) -> None:
    """--classes pins image classes; an object source's (named `source`) classes are its
    annotations'."""
    if options.classes is not None:
        raise SourceError(f"{root.path()}: ", Option("classes"), " pins the classes of images, "
                          "and ", Option("source", source), " takes its object classes from "
                          f"{where}; drop ", Option("classes"))  # fmt: skip


def image_files(root: Storage, folder: str) -> Iterator[Entry]:
    """The image files below `folder` of `root` (names relative to `root`), in name order,
    hidden files and folders aside; links are not followed into folders (Storage.walk).

    Raises:
        SourceError: the folder cannot be listed.
    """
    try:
        entries = list(root.walk(folder))
    except OSError as e:
        raise SourceError(f"{root.path(folder)}: cannot list ({e.strerror or e}); check its "
                          "permissions") from None  # fmt: skip
    listed(len(entries))
    for entry in entries:
        parts = entry.name.split("/")
        ext = "." + parts[-1].rpartition(".")[2].lower()
        if not any(p.startswith(".") for p in parts) and ext in IMAGE_EXTENSIONS:
            yield Entry(f"{folder}/{entry.name}" if folder else entry.name, False, entry.size)


def read_annotation(root: Storage, name: str) -> bytes | None:
    """One annotation file, bounded and a regular file only (None: there is none);
    BadAnnotation says why it cannot be read."""
    try:
        return root.read(name, MAX_ANNOTATION_BYTES)
    except FileNotFoundError:
        return None
    except FileTooLarge:
        raise BadAnnotation(f"{name}: holds more than {MAX_ANNOTATION_BYTES >> 20} MiB, more "
                            "than any annotation; remove or fix it") from None  # fmt: skip
    except RefusedFile as e:
        raise BadAnnotation(f"{name}: {e}") from None
    except OSError as e:
        raise BadAnnotation(f"{name}: cannot read ({e.strerror or e})") from None


def negatives(empty: int, unannotated: int, kind: str, file: str) -> list[str]:
    """The warnings counting images kept without objects: `empty` whose annotation names none
    (negatives), `unannotated` with no annotation `file` at all (kept as `kind` does)."""
    said = []
    if empty:
        said.append(f"{empty:,} image{'s' * (empty != 1)} with no object in {file} kept as "
                    "negatives (objects/bbox empty)")  # fmt: skip
    if unannotated:
        images = f"{unannotated:,} image{'s' * (unannotated != 1)}"
        said.append(f"{images} without {file} kept with no objects, as {kind} does; add "
                    f"{file} where one holds some")  # fmt: skip
    return said
