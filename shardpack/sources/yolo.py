"""The YOLO source: Ultralytics' layout, images/<split>/ beside labels/<split>/ (or
<split>/images beside <split>/labels), one `.txt` label file an image, class names from
`data.yaml`.

A label file's rows are `class cx cy w h`, normalised to the image as displayed; they become
objects/bbox rows [cy - h/2, cx - w/2, cy + h/2, cx + w/2] and objects/label. A row of YOLO's
segmentation format (`class x1 y1 x2 y2 ...`, three points or more) is an object whose box is
its polygon's bounding box (as Ultralytics' segments2boxes) and whose polygon is drawn into the
record's instance-id `mask` (as COCO's are: sources/shapes.py, packing/masks.py), in the worker,
at the size of the image as decoded: the scan reads no image. A dataset with a polygon anywhere
gets `mask` on every record; an object of a box row there has no pixel in it (a warning counts
them). A pose row (`kpt_shape` in data.yaml) is packed as its box: a warning counts them, since
keypoints are not packed yet. A row repeated in its file is left out (as Ultralytics
drops duplicate labels), and a warning counts them. An image's label file is found as
Ultralytics finds it: the last `/images/` of its path replaced by `/labels/`, the extension by
`.txt`. A label file with no rows is an image without objects (a negative), and so is an image
without a label file (Ultralytics trains on it as one); both are kept and counted.
"""

from __future__ import annotations

import math
import posixpath
import re
import reprlib
from collections import Counter
from collections.abc import Mapping
from typing import NamedTuple

from shardpack.errors import SourceError, install_hint, plural, printable
from shardpack.options import SPLIT_NAMES, PackOptions
from shardpack.schema import BOX_REACH, MASK, Feature
from shardpack.sources import shapes
from shardpack.sources.classlist import MAX_CLASSES, check_class_count, check_class_name
from shardpack.sources.folder import few, folder_entries
from shardpack.sources.objects import (
    BOX,
    LABEL,
    BadAnnotation,
    image_files,
    negatives,
    object_schema,
    read_annotation,
    refuse_classes,
)
from shardpack.sources.openfiles import read_metadata
from shardpack.sources.source import Dataset, Item, Source, folder_only, refuse_unfound
from shardpack.storage import Entry, Storage

KIND = "yolo"
YAML_FILES = ("data.yaml", "data.yml")
# data.yaml's keys that name a split's images (a folder, a .txt list of images, or a list of
# either), as Ultralytics reads them.
SPLIT_KEYS = ("train", "val", "test")


class _Found(NamedTuple):
    root: Storage
    yaml: str | None  # data.yaml's name, if SRC holds one


class YoloSource(Source):
    """images/ and labels/ folders (with data.yaml) as Ultralytics trains on them."""

    name = "yolo"
    kinds = (KIND,)
    described = "a YOLO dataset (images/ beside labels/, data.yaml)"
    splits_from = "its split folders"

    def recognise(self, root: Storage, options: PackOptions) -> _Found | None:
        folder_only(root, options, self.name)
        if root.kind() != "dir":
            return None
        entries = dict(folder_entries(root))
        yaml = next((name for name in YAML_FILES if entries.get(name) is False), None)
        if yaml is not None or _layout(root, entries) is not None:
            return _Found(root, yaml)
        refuse_unfound(self, root, options, "holds no data.yaml, and no images/ folder beside a "
                       "labels/ folder (nor <split>/images beside <split>/labels); pass the "
                       "folder that holds them")  # fmt: skip
        return None

    def holds(self, found: _Found, name: str) -> bool:
        """images/, labels/, data.yaml and Roboflow's <split>/ folders."""
        return name in ("images", "labels", found.yaml) or name in SPLIT_NAMES

    def scan(
        self, found: _Found, options: PackOptions, storage_options: Mapping[str, object] | None
    ) -> Dataset:
        return scan_yolo(found.root, found.yaml, options)


def _layout(root: Storage, entries: dict[str, bool]) -> dict[str, list[str]] | None:
    """Each split's image folders as the folders lay them out (images/<split>, or
    <split>/images beside <split>/labels; images/ alone is split train); None for neither."""
    if entries.get("images") and entries.get("labels"):
        inner = folder_entries(root, "images")
        splits = [name for name, is_dir in inner if is_dir and name[:1] != "."]
        loose = any(not is_dir and name[:1] != "." for name, is_dir in inner)
        if splits and not loose:
            return {split: [f"images/{split}"] for split in splits}
        return {"train": ["images"]}
    found = {}
    for name, is_dir in entries.items():
        if is_dir and name in SPLIT_NAMES:
            inside = dict(folder_entries(root, name))
            if inside.get("images") and inside.get("labels"):
                found[name] = [f"{name}/images"]
    return found or None


def scan_yolo(root: Storage, yaml: str | None, options: PackOptions) -> Dataset:
    """List a YOLO dataset's images, each with the objects of its label file.

    Raises:
        SourceError: data.yaml cannot be read or names no folder under SRC, a folder cannot be
            listed, or no image is found.
    """
    refuse_classes(root, options, "yolo", "data.yaml's names")
    doc = _read_yaml(root, yaml) if yaml is not None else {}
    where = root.path(yaml) if yaml is not None else root.path()
    names = _names(doc, where)
    said: list[str] = []
    places = _places(root, doc, where, said) or _layout(root, dict(folder_entries(root)))
    if not places:
        raise SourceError(f"{where}: names no train/val/test images, and SRC holds no images/ "
                          "beside labels/; add train: images/train to data.yaml")  # fmt: skip
    kpt = _keypoint_values(doc, where)
    tally = _Tally()
    splits: dict[str, list[Item]] = {}
    # split -> each item's polygons as a mask blob (None: it has none), in step with its items
    outlines: dict[str, list[bytes | None]] = {}
    skipped: list[tuple[str, str]] = []
    seen: dict[str, str] = {}  # image -> its split: one image is one record
    read: dict[str, str] = {}  # the label files of the images found -> the first image
    shared: list[tuple[str, str, str]] = []  # (first image, image, label file) of one file
    for split, folders in places.items():
        for entry in (e for place in folders for e in _images(root, place, skipped)):
            if entry.name in seen:
                skipped.append((entry.name, f"is in split {seen[entry.name]} too; list it in "
                                            "one split of data.yaml"))  # fmt: skip
                continue
            seen[entry.name] = split
            label_file = label_path(entry.name)
            first = read.setdefault(label_file, entry.name)
            try:
                data = read_annotation(root, label_file)
                fields, polygons = ({BOX: (), LABEL: ()}, None) if data is None else _objects(
                    data, label_file, len(names), kpt, tally)  # fmt: skip
            except BadAnnotation as e:
                skipped.append((entry.name, str(e)))
                continue
            tally.unannotated += data is None
            if first != entry.name and data is not None:
                shared.append((first, entry.name, label_file))
            tally.empty += not fields[LABEL] and data is not None
            splits.setdefault(split, []).append(Item(entry.name, None, entry.name, entry.size,
                                                     fields=fields))  # fmt: skip
            outlines.setdefault(split, []).append(
                None if polygons is None else shapes.encode_normalised(polygons))  # fmt: skip
    if not names:  # no data.yaml: the classes are the numbers the label files use
        most = max((max(i.fields[LABEL], default=-1) for s in splits.values() for i in s),
                   default=-1)  # fmt: skip
        names = tuple(str(i) for i in range(most + 1))
        said += _yaml_above(root) if yaml is None else []
    if not splits and not skipped:  # all skipped: the pack says so, as of any source
        folders = few(f for fs in places.values() for f in fs)
        raise SourceError(f"{where}: no image found in {folders}")
    masked = tally.rows["polygons"] > 0
    if masked:
        splits = {split: _with_masks(items, outlines[split]) for split, items in splits.items()}
    return Dataset(
        KIND,
        root,
        object_schema(names, {MASK: Feature("bytes")} if masked else None),
        {split: tuple(items) for split, items in splits.items()},
        skipped=tuple(skipped),
        warnings=(
            *said,
            *_orphans(root, places, read),
            *tally.warnings(),
            *_shared(shared),
            *negatives(tally.empty, tally.unannotated, "Ultralytics", "a label file"),
        ),
    )


def _shared(shared: list[tuple[str, str, str]]) -> list[str]:
    """A warning naming the first images that share one label file (`a.jpg` beside `a.png`,
    both `a.txt`'s): each is packed with its objects, as Ultralytics reads them, which is right
    for at most one of them unless they are one picture."""
    if not shared:
        return []
    first, other, label_file = shared[0]
    more = f" ({len(shared):,} images in all share an earlier image's)" if len(shared) > 1 else ""
    return [f"{first} and {other} share one label file, {label_file}: both are packed with its "
            f"objects, as Ultralytics reads them{more}; if they are different pictures, rename "
            "one and give it a label file of its own, else remove the copy"]  # fmt: skip


def _yaml_above(root: Storage) -> list[str]:
    """A warning where SRC holds no data.yaml but the folder above does: SRC is most likely one
    split of a Roboflow export (`train/` beside `valid/` and data.yaml), its class names there."""
    above = root.parent()
    yaml = next((n for n in YAML_FILES if above is not None and above.kind(n) == "file"), None)
    if yaml is None:
        return []
    return [f"{root.path()}: holds no data.yaml, so its classes are named by their numbers; "
            f"{above.path(yaml)} above it names them: pass {above.path()} to pack the dataset it "
            "describes"]  # fmt: skip


def _with_masks(items: list[Item], blobs: list[bytes | None]) -> list[Item]:
    """The items with their polygons' blobs (None: an item of no polygon, whose objects get
    no pixel) as `mask`, which the workers draw (shapes.encode_normalised, masks.drawn)."""
    return [item._replace(fields={**item.fields, MASK: shapes.encode_normalised(
                [()] * len(item.fields[LABEL])) if blob is None else blob})
            for item, blob in zip(items, blobs, strict=True)]  # fmt: skip


# What a labelling tool leaves beside the label files (LabelImg's list of class names).
_NOT_LABELS = frozenset({"classes.txt"})


def _orphans(root: Storage, places: dict[str, list[str]], read: Mapping[str, str]) -> list[str]:
    """A warning counting the label files in the split folders' label folders that no image
    found has: named otherwise than their image, or of an image shardpack does not read."""
    folders = {posixpath.dirname(label_path(posixpath.join(place, "x.jpg")))
               for places_of in places.values() for place in places_of}  # fmt: skip
    orphans = sorted(
        name
        for folder in folders
        if root.kind(folder) == "dir"
        for entry in root.walk(folder)
        if (name := f"{folder}/{entry.name}" if folder else entry.name) not in read
        and name.endswith(".txt") and posixpath.basename(name) not in _NOT_LABELS
        and not any(part.startswith(".") for part in name.split("/"))
    )  # fmt: skip
    if not orphans:
        return []
    files = f"{len(orphans):,} label file{' matches' if len(orphans) == 1 else 's match'}"
    return [f"{files} no image found "
            f"(the first: {orphans[0]}): is an image named otherwise, or of a kind shardpack "
            "does not read?"]  # fmt: skip


def label_path(image: str) -> str:
    """The label file of an image, as Ultralytics finds it: the last `images/` folder of its
    path replaced by `labels/`, its extension by `.txt`."""
    head, sep, tail = f"/{image}".rpartition("/images/")
    path = f"{head}/labels/{tail}" if sep else f"/{image}"
    return posixpath.splitext(path[1:])[0] + ".txt"


class _Tally:
    """The kinds of rows the label files held, and the images without objects."""

    def __init__(self) -> None:
        self.empty = self.unannotated = 0
        self.repeated = 0  # rows equal to an earlier row of their file, left out
        self.rows: Counter[str] = Counter()  # boxes, polygons, keypoints -> objects
        self.files: Counter[str] = Counter()  # boxes, polygons, keypoints -> label files

    def warnings(self) -> list[str]:
        said = []
        if self.rows["polygons"] and self.rows["boxes"]:
            boxes = self.rows["boxes"]
            said.append(f"{plural(boxes, 'object')} in {plural(self.files['boxes'], 'label file')} "
                        f"{'is a box' if boxes == 1 else 'are boxes'} without a polygon, beside "
                        f"{plural(self.rows['polygons'], 'polygon')} (YOLO's segmentation "
                        f"format): {'its box is' if boxes == 1 else 'their boxes are'} packed, "
                        f"and no pixel of {MASK} is "
                        f"{'its' if boxes == 1 else 'theirs'}")  # fmt: skip
        if self.rows["keypoints"]:
            held = self.rows["keypoints"]
            said.append(f"{plural(held, 'object')} in "
                        f"{plural(self.files['keypoints'], 'label file')} "
                        f"{'has' if held == 1 else 'have'} keypoints (data.yaml's kpt_shape): "
                        f"{'its box is' if held == 1 else 'their boxes are'} packed, the "
                        "keypoints not yet")  # fmt: skip
        if self.repeated:
            said.append(f"{self.repeated:,} label rows repeat an earlier row of their file "
                        "(the same class and numbers): left out, each object packed once, as "
                        "Ultralytics does")  # fmt: skip
        return said


# A label row's number as Ultralytics (Python's float(), through numpy) and darknet (C's
# fscanf "%f") both read it: ASCII digits, a sign, a point, an exponent. float() alone also
# takes '1_0' (10; C reads 1), non-ASCII digits ('٣': 3; C none), 'nan' and 'inf' (which
# Ultralytics' checks refuse): read otherwise by one trainer or refused, such a row is refused.
_NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_NUMBERS = re.compile(rf"{_NUMBER}(?: {_NUMBER})*")


def _row_numbers(values: list[str], line: str, at: str) -> list[float]:
    """A label row's numbers, each a finite decimal (`at`: its file and line, for the message)."""
    numbers = [float(v) for v in values] if _NUMBERS.fullmatch(" ".join(values)) else None
    if numbers is not None and all(map(math.isfinite, numbers)):  # 1e999 is inf
        return numbers
    for value in values:
        try:
            number = float(value)
        except ValueError:
            raise BadAnnotation(f"{at}: {line[:60]!r} is not numbers; a row is 'class cx cy w "
                                "h'") from None  # fmt: skip
        if not re.fullmatch(_NUMBER, value) or not math.isfinite(number):
            break
    raise BadAnnotation(f"{at}: {value[:20]!r} is not a finite decimal number (ASCII digits, "
                        "as 0.25 or 1e-3); fix the row")  # fmt: skip


def _objects(
    data: bytes, name: str, classes: int, kpt: int | None, tally: _Tally
) -> tuple[dict[str, tuple], list | None]:
    """objects/bbox (flat rows of 4) and objects/label of one label file's rows, and each
    object's polygons (shapes.check's: one of normalised (x, y) rows, or () for a box; None
    where no row is a polygon); `classes`: how many data.yaml names (0: none, any class number
    taken).

    Raises:
        BadAnnotation: a row that is not YOLO's (naming its file and line).
    """
    try:
        lines = data.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError:
        raise BadAnnotation(f"{name}: is not UTF-8 text; is it a YOLO label file?") from None
    boxes: list[float] = []
    labels: list[int] = []
    # each object's polygons from the first polygon row on (before it, a box's () each): a
    # boxes-only file makes no list
    polygons: list | None = None
    posed = 0  # pose rows; each kind is tallied once the file is read whole
    seen: set[tuple[float, ...]] = set()  # rows read: one repeated is left out, as Ultralytics
    for number, line in enumerate(lines, 1):
        values = line.split()
        if not values:
            continue
        at = f"{name} line {number}"
        numbers = _row_numbers(values, line, at)
        label = numbers[0]
        if tuple(numbers) in seen:  # the same object twice: kept once (the first was checked)
            tally.repeated += 1
            continue
        seen.add(tuple(numbers))
        if not label.is_integer() or not 0 <= label < (classes or MAX_CLASSES):
            names = f"one of data.yaml's {classes} classes" if classes else "a class number"
            raise BadAnnotation(f"{at}: class {values[0]} is not {names}; fix the row or "
                                "data.yaml's names")  # fmt: skip
        coords = numbers[1:]
        if kpt is not None and len(coords) == 4 + kpt:
            posed += 1
            coords = coords[:4]
        if len(coords) == 4:
            cx, cy, w, h = coords
            if w < 0 or h < 0:
                side, given = ("width", values[3]) if w < 0 else ("height", values[4])
                raise BadAnnotation(f"{at}: {side} {given} is negative; fix the row")
            box = (cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2)
            if polygons is not None:
                polygons.append(())
        elif len(coords) >= 6 and len(coords) % 2 == 0:
            xs, ys = coords[0::2], coords[1::2]
            box = (min(ys), min(xs), max(ys), max(xs))
            try:  # in fractions of the image's sides: checked as pixels of an image of 1 x 1
                polygon = shapes.check([coords], 1, 1)
            except ValueError as e:
                raise BadAnnotation(f"{at}: {e}") from None
            polygons = [()] * len(labels) if polygons is None else polygons
            polygons.append(polygon)
        else:
            pose = f", or class cx cy w h and {kpt} keypoint values" if kpt else ""
            raise BadAnnotation(f"{at}: {len(values)} values; a row is class cx cy w h, or "
                                f"class x1 y1 x2 y2 x3 y3 ... (a polygon){pose}")  # fmt: skip
        past = [v for v in box if not BOX_REACH[0] <= v <= BOX_REACH[1]]
        if past:  # one of no area inside, a little way out, is dropped when packed
            raise BadAnnotation(f"{at}: its box reaches {past[0]:g}, more than the image's side "
                                "past its edge; a row's numbers are fractions of the image's "
                                "width and height (0 to 1), not pixels")  # fmt: skip
        boxes.extend(box)
        labels.append(int(label))
    drawn = 0 if polygons is None else len(polygons) - polygons.count(())
    for kind, count in (("boxes", len(labels) - drawn), ("polygons", drawn), ("keypoints", posed)):
        if count:
            tally.rows[kind] += count
            tally.files[kind] += 1
    return {BOX: tuple(boxes), LABEL: tuple(labels)}, polygons


# A value of data.yaml as messages show it: a few items, a few levels (an alias can make a
# 16 MiB file a structure whose whole repr would never end).
_SHOWN = reprlib.Repr()  # (its keyword arguments are Python 3.12's)
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict, _SHOWN.maxstring = 2, 4, 4, 60


def _shown(value: object) -> str:
    return _SHOWN.repr(value)


def _read_yaml(root: Storage, name: str) -> dict:
    """data.yaml, parsed (PyYAML's safe loader: plain data only) and checked to be a mapping."""
    try:
        import yaml  # PyYAML: read by this source only
    except ImportError:
        raise SourceError(
            f"{root.path(name)}: reading data.yaml needs PyYAML; " + install_hint("yolo")
        ) from None
    data = read_metadata(root, name, "YOLO's data.yaml")
    try:
        doc = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SourceError(f"{root.path(name)}: is not YAML ({why}); fix it") from None
    if not isinstance(doc, dict):
        raise SourceError(f"{root.path(name)}: is not a mapping of names, train, val, ...; is it "
                          "YOLO's data.yaml?")  # fmt: skip
    return doc


def _names(doc: dict, where: str) -> tuple[str, ...]:
    """The class names of data.yaml's `names` (a list, or a map of class number -> name; a
    number it skips is named by itself) or `nc` (names "0", "1", ...); () if neither."""
    names, count = doc.get("names"), doc.get("nc")
    if names is None and count is None:
        return ()
    if count is not None and (type(count) is not int or not 0 < count <= MAX_CLASSES):
        raise SourceError(f"{where}: nc {_shown(count)} is not a number of classes; fix it")
    if names is None:
        return tuple(map(str, range(count)))
    if isinstance(names, dict):
        if not all(type(k) is int and 0 <= k < MAX_CLASSES for k in names):
            raise SourceError(f"{where}: names maps keys that are not class numbers 0, 1, ... "
                              "to names; fix it")  # fmt: skip
        check_class_count(max(names, default=-1) + 1, where, "data.yaml's names")
        names = [names.get(i, str(i)) for i in range(max(names, default=-1) + 1)]
    if not isinstance(names, list) or not names:
        raise SourceError(f"{where}: names is not a list of class names, nor a map of class "
                          "numbers to names; fix it")  # fmt: skip
    check_class_count(len(names), where, "data.yaml's names")
    if not all(isinstance(n, str | int | float) and not isinstance(n, bool) for n in names):
        raise SourceError(f"{where}: a class name in names is not text; fix it")
    names = tuple(str(n).strip() for n in names)
    for name in names:
        check_class_name(name, where)
    counts = Counter(names)  # one name of two classes: TFDS's ClassLabel refuses it
    twice = next((name for name, count in counts.items() if count > 1), None)
    if "" in counts or twice is not None:
        said = "an empty name" if "" in counts else f"'{printable(twice)}' twice"
        raise SourceError(f"{where}: names holds {said}; give each class a name of its own")
    if count is not None and count != len(names):
        raise SourceError(
            f"{where}: nc is {_shown(count)} but names has {len(names)} names; fix one"
        )
    return names


def _keypoint_values(doc: dict, where: str) -> int | None:
    """How many numbers a pose row holds after its box (data.yaml's kpt_shape [k, 2 or 3])."""
    shape = doc.get("kpt_shape")
    if shape is None:
        return None
    if not (isinstance(shape, list) and len(shape) == 2 and all(type(v) is int and v > 0
                                                                for v in shape)):  # fmt: skip
        raise SourceError(f"{where}: kpt_shape {_shown(shape)} is not [keypoints, 2 or 3]; fix it")
    return shape[0] * shape[1]


def _places(root: Storage, doc: dict, where: str, warnings: list[str]) -> dict[str, list[str]]:
    """Each split data.yaml names (train, val, test) and its image folders or .txt lists, as
    names under SRC; a test split SRC lacks is left out with a warning (exports name one that
    is not there), a train or val split is refused."""
    places = {}
    for split in SPLIT_KEYS:
        value = doc.get(split)
        if value is None or value == "":
            continue
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in values):
            raise SourceError(f"{where}: {split}: {_shown(value)} is not a folder or a list of "
                              "them; fix it")  # fmt: skip
        found = [_place(root, doc.get("path"), v) for v in values]
        if None not in found:
            places[split] = found
            continue
        value = values[found.index(None)]
        said = f"{where}: {split}: {value!r} is no folder or list file under {root.path()}"
        if split != "test":
            raise SourceError(f"{said}; name it relative to data.yaml's folder")
        warnings.append(f"{said}: split test left out")
    return places


def _place(root: Storage, base: object, value: str) -> str | None:
    """A folder or list file data.yaml names, under SRC: taken under its `path` (where that is
    a folder of SRC; mostly it is where the dataset lay on its author's machine), else under
    SRC, else without its leading ../ (Roboflow's exports), as Ultralytics falls back."""
    tried = []
    if isinstance(base, str) and base and not posixpath.isabs(base):
        tried.append(posixpath.join(base, value))
    stripped = value
    while stripped.startswith("../"):
        stripped = stripped[3:]
    tried += [value, stripped]
    for name in tried:
        name = posixpath.normpath(name)
        if name == "." or (not posixpath.isabs(name) and not name.startswith("../")):
            name = "" if name == "." else name
            if root.kind(name) is not None:
                return name
    return None


def _images(root: Storage, place: str, skipped: list[tuple[str, str]]) -> list[Entry]:
    """The images of a split's folder, or those its .txt list names (one a line, relative to
    the list's folder); an image a list names outside SRC or missing goes to `skipped`."""
    if root.kind(place) == "dir":
        return list(image_files(root, place))
    # (bounded as metadata: COCO's train2017.txt, a line an image, is 4.5 MB)
    data = read_metadata(root, place, "a list of images, one a line")
    folder = posixpath.dirname(place)
    found = []
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        name = posixpath.normpath(posixpath.join(folder, line))
        if posixpath.isabs(line) or name.startswith("../") or name == "..":
            skipped.append((line, f"{root.path(place)} line {number}: names an image outside "
                                  "SRC; name it relative to the list's folder"))  # fmt: skip
            continue
        if "\0" in line:  # no file's name holds one: the system refuses the path
            skipped.append((line, f"{root.path(place)} line {number}: holds a NUL, which no "
                                  "file name does; fix the line"))  # fmt: skip
            continue
        try:
            found.append(Entry(name, False, root.size(name)))
        except OSError as e:
            skipped.append((name, f"{root.path(place)} line {number}: cannot read the image "
                                  f"({e.strerror or e})"))  # fmt: skip
    return found


SOURCE = YoloSource()
