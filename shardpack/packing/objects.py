"""Which features of a schema hold its objects: the boxes, their class, the other per-object
lists of their group, and the instance-mask map; as TFDS groups COCO's and VOC's objects:
`objects/bbox` (normalised [ymin, xmin, ymax, xmax] rows), `objects/label` (class ids with the
names as `classes`, or the names as text) and any other `objects/<name>` list, one row per
object. An instance mask is one PNG per image whose pixel values are instance ids (0
background, i the i-th object), in a bytes feature whose last name part is MASK.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardpack.packing.tfdsmeta import is_box
from shardpack.schema import BOX_NAMES, Schema, is_mask

# The last name part of the class feature beside a group's boxes (TFDS's COCO and VOC).
LABEL = "label"
# COCO's box sizes, by area in pixels of the stored image: small below 32^2, medium below 96^2.
SIZES = (("small", 32**2), ("medium", 96**2), ("large", None))


@dataclass(frozen=True)
class Objects:
    """The features of a schema that hold objects."""

    boxes: str  # the box feature (objects/bbox)
    label: str | None  # the class of each box: objects/label, or the group's one class list
    classes: tuple[str, ...] | None  # the label's class names; None: text labels, or ids
    rows: tuple[str, ...]  # every per-object list of the boxes' group, boxes included
    mask: str | None  # the instance-id map PNG, if the schema has one

    def names(self, record: dict) -> list[str]:
        """Each object's class name; '' for each where there is no label feature, or where it
        holds another number of rows than the boxes (verify names that)."""
        count = len(record[self.boxes])
        values = [] if self.label is None else record[self.label]
        values = values.tolist() if isinstance(values, np.ndarray) else list(values)
        if len(values) != count:
            return [""] * count
        if self.classes is None:
            return [str(v) for v in values]
        return [self.classes[i] if 0 <= i < len(self.classes) else str(i) for i in values]


def objects_of(schema: Schema) -> Objects | None:
    """The object features of a schema, or None if it has no box feature (tfdsmeta.BOX_NAMES)."""
    boxes = next((n for n in BOX_NAMES if n in schema and is_box(n, schema[n])), None)
    if boxes is None:
        return None
    group = group_of(boxes)
    rows = tuple(n for n in schema if schema[n].is_list and n != boxes and group_of(n) == group
                 and group) if group else ()  # fmt: skip
    label = f"{group}/{LABEL}" if group else None
    if label not in rows:
        classed = [n for n in rows if schema[n].classes is not None]
        label = classed[0] if len(classed) == 1 else None
    mask = next((n for n, f in schema.items() if is_mask(n, f)), None)
    classes = None if label is None else schema[label].classes
    return Objects(boxes, label, classes, (boxes, *rows), mask)


def num_object_classes(schema: Schema) -> int:
    """How many classes a schema's objects have (objects/label's); 0 for none or text labels."""
    objects = objects_of(schema)
    return len(objects.classes or ()) if objects is not None else 0


def group_of(name: str) -> str:
    """The group a feature belongs to: its name up to the last '/' ('' for none)."""
    return name.rpartition("/")[0]


def size_name(area: float) -> str:
    """COCO's size of a box of `area` pixels: small, medium or large."""
    return next(name for name, below in SIZES if below is None or area < below)
