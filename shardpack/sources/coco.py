"""The COCO source: instances JSONs (annotations/instances_<split>.json) beside their image
folders, as detectron2 and TFDS lay COCO out, or in them (<split>/_annotations.coco.json,
Roboflow's export), read into objects/* features.

Boxes (COCO's pixel [x, y, width, height]) become objects/bbox, normalised [ymin, xmin, ymax,
xmax] by the JSON's width and height of the image (as displayed, EXIF orientation applied) and
clipped to it;
category ids become objects/label (ClassLabel names in id order; ids need not be contiguous);
`iscrowd`, `area` (pixels, rounded) and `id` become objects/is_crowd, objects/area, objects/id.
Keypoints become objects/keypoints, flat rows of COCO's (x, y, v) per keypoint, x and y
normalised; segmentations (polygons, RLE) travel to the workers as sources/shapes blobs under
`mask` and are drawn there into one instance-id PNG per image (packing/masks.py).

An annotation shardpack cannot use (a bbox that is not 4 finite numbers or that reaches more
than the image's side past its edge, a category not listed, a segmentation or keypoints list
of the wrong shape, an iscrowd not 0 or 1 as pycocotools reads it, an id an earlier annotation
has) skips its image with the reason (or stops the scan with --on-error fail): packing the
image without the object would make a false negative of it. Annotations naming an image the
JSON does not list are counted in a warning; unknown keys are ignored.
"""

from __future__ import annotations

import json
import posixpath
import re
import sys
from collections import Counter
from collections.abc import Mapping

from shardpack.errors import Option, SourceError, printable, way_past
from shardpack.options import PackOptions
from shardpack.schema import BOX_REACH, INT64, MASK, Feature, Schema
from shardpack.sources import shapes
from shardpack.sources.classlist import MAX_CLASSES, check_class_name
from shardpack.sources.objects import ANNOTATED_SIZE
from shardpack.sources.scanprogress import listed
from shardpack.sources.source import Dataset, Item, Source, folder_only, refuse_unfound
from shardpack.storage import Storage
from shardpack.storage.spelt import LOOKED_FOR, alike
from shardpack.storage.srcfiles import FileTooLarge, RefusedFile

# COCO 2017's largest JSON (instances_train2017.json) is 448 MB; a file past this cap is a trap
# or not COCO (parsed, a JSON takes several times its size in memory).
MAX_JSON_BYTES = 1 << 30
# Where the JSONs are (one look tells any other SRC apart: a request on an object store), and
# their names: instances_<split>.json (person_keypoints_<split>.json, COCO's keypoint set, where
# no instances file names the split).
FOLDER = "annotations"
_JSON_NAME = r"(instances|person_keypoints)_(?P<split>[A-Za-z0-9_.-]+)\.json"
# Roboflow's COCO export: each split's folder (of these names) holds its images and this JSON.
_EXPORT_JSON = "_annotations.coco.json"
_EXPORT_SPLITS = ("train", "valid", "test")
# The year COCO's split names carry (train2017): dropped from the split's name when no other
# JSON gives the same name without it.
_YEAR = r"(?<=[a-z])(19|20)\d\d$"
# The features every COCO record gets (TFDS's names for COCO, so its readers find them).
BBOX, LABEL, CROWD, AREA, ID = (f"objects/{n}" for n in ("bbox", "label", "is_crowd", "area", "id"))
KEYPOINTS = "objects/keypoints"
IMAGE_ID = "image/id"
# The most keypoints an object may have: COCO's person has 17, whole-body sets 133.
MAX_KEYPOINTS = 1024
# Why an annotation belongs to no image packed, as its JSON's warning says it, and the fix.
_NO_IMAGE_ID = ("have no image_id", "; give each the id of its image (images[].id) as image_id")
_UNLISTED = (
    "name an image id the JSON does not list",
    "; list their images in images[] (id, file_name, width, height), or remove them",
)


class CocoSource(Source):
    """A folder holding annotations/instances_<split>.json and the images of each split, or
    Roboflow's <split>/_annotations.coco.json beside them."""

    name = "coco"
    kinds = ("coco",)
    described = "a COCO folder (annotations/instances_<split>.json beside the images)"
    splits_from = "its annotation files, one a split"

    def recognise(self, root: Storage, options: PackOptions) -> tuple[Storage, dict] | None:
        folder_only(root, options, self.name)
        found = coco_files(root) if root.kind() == "dir" else {}
        if found:
            return root, found
        refuse_unfound(self, root, options, "no annotations/instances_<split>.json (or "
                       f"<split>/{_EXPORT_JSON}, Roboflow's export) found; pass the folder "
                       "that holds annotations/ and the image folders (train2017/, val2017/ or "
                       "images/<split>/)")  # fmt: skip
        return None

    def holds(self, found: tuple[Storage, dict], name: str) -> bool:
        """annotations/ and each split's image folder (images/ for images/<split>/)."""
        root, files = found
        folders = (_image_folder(root, split) for split in files)
        return name == FOLDER or any(f is not None and f.split("/")[0] == name for f in folders)

    def scan(
        self, found: tuple[Storage, dict], options: PackOptions,
        storage_options: Mapping[str, object] | None,
    ) -> Dataset:  # fmt: skip
        root, files = found
        if options.classes is not None:
            raise SourceError(f"{root.path()}: COCO brings its own categories; drop ",
                              Option("classes"))  # fmt: skip
        return scan_coco(root, files, options)


def coco_files(root: Storage) -> dict[str, str]:
    """split -> the JSON (path under root) holding its annotations; {} when none is there."""
    found: dict[str, tuple[str, str]] = {}  # split -> (kind of file, path)
    if root.kind(FOLDER) != "dir":
        exports = (posixpath.join(split, _EXPORT_JSON) for split in _EXPORT_SPLITS)
        return {posixpath.dirname(p): p for p in exports if root.kind(p) == "file"}
    for entry in root.listdir(FOLDER):
        match = re.fullmatch(_JSON_NAME, entry.name)
        if match is None or entry.is_dir:
            continue
        kind, split = match.group(1), match.group("split")
        if split not in found or (found[split][0], kind) == ("person_keypoints", "instances"):
            found[split] = (kind, posixpath.join(FOLDER, entry.name))
    return {split: path for split, (_, path) in sorted(found.items())}


def _split_names(splits: list[str]) -> dict[str, str]:
    """Each JSON's split as the dataset names it: train2017 -> train, unless that repeats."""
    short = {s: re.sub(_YEAR, "", s) or s for s in splits}
    names = list(short.values())
    return {s: n if names.count(n) == 1 else s for s, n in short.items()}


def _image_folder(root: Storage, split: str) -> str | None:
    """Where a split's images are: <split>/, <split>2017/ (for a split named without its year)
    or images/<split>/ (detectron2's and TFDS's layouts; a split named with its year also
    <split without it>/), the first that is a folder."""
    bare = re.sub(_YEAR, "", split) or split
    names = dict.fromkeys((split, bare) if bare != split else (split, split + "2017"))
    for name in (*names, *(f"images/{n}" for n in names)):
        if root.kind(name) == "dir":
            return name
    return None


def read_json(root: Storage, path: str) -> dict:
    """The JSON at `path`, read within MAX_JSON_BYTES, as a dict (SourceError otherwise)."""
    where = root.path(path)
    try:
        data = root.read(path, MAX_JSON_BYTES)
    except FileTooLarge:
        raise SourceError(
            f"{where}: over {MAX_JSON_BYTES:,} bytes, more than any COCO "
            "annotation file; split it by image, or check it is COCO"
        ) from None
    except (RefusedFile, OSError) as e:
        raise SourceError(f"{where}: cannot read ({e}); check the file") from None
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as e:
        raise SourceError(
            f"{where}: line {e.lineno} column {e.colno}: {e.msg}; the JSON is "
            "damaged or cut short: download or write it again"
        ) from None
    except (RecursionError, UnicodeDecodeError) as e:
        raise SourceError(f"{where}: not COCO JSON ({type(e).__name__}); check the file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
        raise SourceError(f"{where}: no 'images' list at the top; is this a COCO instances "
                          "JSON?")  # fmt: skip
    for key in ("annotations", "categories"):
        if not isinstance(doc.get(key, []), list):
            raise SourceError(f"{where}: '{key}' is not a list; is this a COCO instances JSON?")
    return doc


def _number(value: object) -> bool:
    """A finite JSON number, of a float's range (a bool is no number: its type is not int's;
    JSON's integers have no bound, and one past a float's would overflow each division)."""
    return type(value) in (int, float) and abs(value) <= sys.float_info.max  # type: ignore


def _count(value: object) -> bool:
    """An integer int64 holds (ids and areas are stored as int64)."""
    return type(value) is int and INT64[0] <= value <= INT64[1]


class _Categories:
    """Every JSON's categories, one class each in id order, with their keypoint names."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.named_in: dict[int, str] = {}  # the JSON each id's name was first read from
        self.keypoints: dict[int, tuple[str, ...]] = {}

    def add(self, where: str, categories: list) -> None:
        for n, category in enumerate(categories):
            if not isinstance(category, dict) or not _count(category.get("id")) or not isinstance(
                    category.get("name"), str):  # fmt: skip
                raise SourceError(f"{where}: categories[{n}] is not {{id: integer, name: text}}; "
                                  "fix the JSON")  # fmt: skip
            ident, name = category["id"], category["name"]
            check_class_name(name, where)
            if not name.strip():  # TFDS reads a class list leaving out empty lines
                raise SourceError(f"{where}: categories[{n}] (id {ident}) has no name; give "
                                  "each category its class's name")  # fmt: skip
            if self.names.get(ident, name) != name:
                raise SourceError(f"{where}: category {ident} is named '{printable(name)}', "
                                  f"and '{printable(self.names[ident])}' in "
                                  f"{self.named_in[ident]}; give each id one name")  # fmt: skip
            self.names[ident] = name
            self.named_in.setdefault(ident, where)
            names = category.get("keypoints", [])
            if not isinstance(names, list) or not all(isinstance(k, str) for k in names):
                raise SourceError(f"{where}: categories[{n}].keypoints is not a list of names")
            if names:
                self.keypoints[ident] = tuple(names)

    def classes(self, where: str) -> tuple[str, ...]:
        if len(self.names) > MAX_CLASSES:
            raise SourceError(f"{where}: {len(self.names):,} categories, over the "
                              f"{MAX_CLASSES:,} classes a dataset may have")  # fmt: skip
        ordered = [self.names[i] for i in sorted(self.names)]
        if len(set(ordered)) != len(ordered):
            twice = Counter(ordered).most_common(1)[0][0]
            raise SourceError(f"{where}: two categories are named '{printable(twice)}'; class "
                              "names must differ: rename one")  # fmt: skip
        return tuple(ordered)


class _BadAnnotation(Exception):
    """An annotation shardpack cannot use, and what is wrong with it."""

    def __init__(self, annotation: dict, wrong: str) -> None:
        super().__init__(f"annotation {_shown(annotation.get('id'))}: {wrong}")


def scan_coco(root: Storage, files: dict[str, str], options: PackOptions) -> Dataset:
    """Every image of every split's JSON as an Item with its objects."""
    docs = {split: read_json(root, path) for split, path in files.items()}
    categories = _Categories()
    for split, doc in docs.items():
        categories.add(root.path(files[split]), doc.get("categories", []))
    where = root.path(files[next(iter(files))])
    classes = categories.classes(where)
    label_of = {ident: n for n, ident in enumerate(sorted(categories.names))}
    points = max((len(k) for k in categories.keypoints.values()), default=0)
    points = max(points, *(_most_points(doc) for doc in docs.values()))
    if points > MAX_KEYPOINTS:
        raise SourceError(f"{where}: objects of {points} keypoints, over the {MAX_KEYPOINTS} "
                          "shardpack reads; check the JSON")  # fmt: skip
    masked = any(_has_segmentation(doc) for doc in docs.values())
    names = _split_names(list(files))
    splits: dict[str, tuple[Item, ...]] = {}
    skipped: list[tuple[str, str]] = []
    warnings: list[str] = []
    ignored = 0
    for split, doc in docs.items():
        json_path = root.path(files[split])
        folder = _image_folder(root, split)
        if folder is None:
            warnings.append(f"{json_path}: no image folder for split {split!r} (looked for "
                            f"{split}/, images/{split}/): packed without it")  # fmt: skip
            continue
        sizes = {e.name: e.size for e in root.walk(folder)}
        sizes.pop(posixpath.relpath(files[split], folder), None)  # a JSON among the images
        listed(len(sizes))
        scanned = _Split((json_path, files[split]), folder, sizes, label_of, points, masked,
                         options)  # fmt: skip
        splits[names[split]] = scanned.items(doc)
        skipped += scanned.skipped
        ignored += len(sizes) - scanned.used
        warnings += [f"{json_path}: {count:,} annotation(s) {what} (the first: {first}): "
                     f"not packed{fix}"
                     for (what, fix), (count, first) in scanned.stray.items()]  # fmt: skip
    if not splits:
        raise SourceError(f"{root.path()}: no split's images found beside its JSON; put each "
                          "split's images in <split>/ or images/<split>/")  # fmt: skip
    extra = {
        IMAGE_ID: Feature("int64"),
        BBOX: Feature("float32", (-1, 4)),
        LABEL: Feature("int64", (-1,), classes=classes),
        CROWD: Feature("int64", (-1,)),
        AREA: Feature("int64", (-1,)),
        ID: Feature("int64", (-1,)),
    }
    if points:
        extra[KEYPOINTS] = Feature("float32", (-1, 3 * points))
    if masked:
        extra[MASK] = Feature("bytes")
    return Dataset("coco", root, Schema.build(None, extra), splits, ignored=ignored,
                   skipped=tuple(skipped), warnings=tuple(warnings))  # fmt: skip


def _most_points(doc: dict) -> int:
    lengths = (len(a["keypoints"]) for a in doc.get("annotations", [])
               if isinstance(a, dict) and isinstance(a.get("keypoints"), list))  # fmt: skip
    return max(lengths, default=0) // 3


def _has_segmentation(doc: dict) -> bool:
    return any(isinstance(a, dict) and a.get("segmentation") for a in doc.get("annotations", []))


class _Split:
    """One JSON's images as items: what was packed, skipped and left over."""

    def __init__(self, json: tuple[str, str], folder: str, sizes: dict[str, int],
                 label_of: dict[int, int], points: int, masked: bool,
                 options: PackOptions) -> None:  # fmt: skip
        # the JSON as messages name it, and under SRC (what a record keeps: not where SRC is)
        (self.json_path, self.json_name), self.folder, self.sizes = json, folder, sizes
        self.label_of, self.points, self.masked, self.options = label_of, points, masked, options
        self.skipped: list[tuple[str, str]] = []
        self.used = 0
        # annotations of no image packed: (what is wrong, the fix) -> (how many, the first)
        self.stray: dict[tuple[str, str], tuple[int, str]] = {}
        self.passed: set[int] = set()  # ids of images listed but skipped: not orphans' images
        self.spelt_looks = 0  # missing images looked for under another spelling

    def items(self, doc: dict) -> tuple[Item, ...]:
        images = self._images(doc["images"])
        objects: dict[int, list[dict]] = {ident: [] for ident in images}
        first: dict[int, int] = {}  # annotation id -> the first annotation's number with it
        repeated: dict[int, str] = {}  # image id -> why (an annotation id used before)
        for n, annotation in enumerate(doc.get("annotations", [])):
            ident = annotation.get("image_id") if isinstance(annotation, dict) else None
            if ident is None:
                self._stray(_NO_IMAGE_ID, f"annotations[{n}]")
                continue
            counted = _count(ident)
            if not counted or ident not in objects:
                if not counted or ident not in self.passed:
                    shown = ident if counted else repr(ident)[:40]
                    self._stray(_UNLISTED, f"annotations[{n}] -> image {shown}")
                continue
            objects[ident].append(annotation)
            own = annotation.get("id")
            if _count(own) and first.setdefault(own, n) != n and ident not in repeated:
                repeated[ident] = (f"annotation {own}: annotations[{n}] has the id of "
                                   f"annotations[{first[own]}], which pycocotools keeps one of; "
                                   "give each annotation its own id")  # fmt: skip
        items = []
        for ident, (name, height, width) in images.items():
            key = posixpath.join(self.folder, name)
            if name not in self.sizes:
                other = alike(name, self.sizes) if self.spelt_looks < LOOKED_FOR else None
                self.spelt_looks += 1
                self._skip(key, f"listed in {self.json_path} but not in {self.folder}/" + (
                    "" if other is None else f", which holds it as {other!r}, in another case "
                    "or Unicode form (one name to the disks of macOS and Windows): write the "
                    "JSON's file_name as the file is named"))  # fmt: skip
                continue
            self.used += 1
            if ident in repeated:
                self._skip(key, f"{repeated[ident]} (in {self.json_path})")
                continue
            try:
                fields = self._fields(ident, height, width, objects[ident])
            except _BadAnnotation as e:
                self._skip(key, f"{e} (in {self.json_path})")
                continue
            items.append(Item(key, None, key, self.sizes[name], None, fields))
        return tuple(items)

    def _stray(self, why: tuple[str, str], first: str) -> None:
        """One more annotation of no image packed, for this reason (_NO_IMAGE_ID, _UNLISTED)."""
        count, said = self.stray.get(why, (0, first))
        self.stray[why] = (count + 1, said)

    def _skip(self, key: str, reason: str) -> None:
        if self.options.on_error == "fail":
            raise SourceError(f"{key}: {reason}", *way_past(reason))
        self.skipped.append((key, reason))

    def _images(self, entries: list) -> dict[int, tuple[str, int, int]]:
        """image id -> (file name under the folder, height, width); SourceError on an entry
        that is not COCO's."""
        images: dict[int, tuple[str, int, int]] = {}
        named: dict[str, int] = {}  # file name -> its image id: a key names one record
        for n, image in enumerate(entries):
            ok = isinstance(image, dict) and _count(image.get("id")) and isinstance(
                image.get("file_name"), str) and all(
                _count(image.get(k)) and image[k] > 0 for k in ("width", "height"))  # fmt: skip
            if not ok:
                raise SourceError(
                    f"{self.json_path}: images[{n}] is not {{id, file_name, width, "
                    "height} (64-bit integers, a name, sizes above 0); fix the JSON"
                )
            name = image["file_name"]
            parts = name.split("/")
            if name.startswith("/") or "\\" in name or "\0" in name or ".." in parts or (
                    "" in parts):  # fmt: skip
                raise SourceError(f"{self.json_path}: images[{n}].file_name "
                                  f"'{printable(name)}' is not a plain relative path; fix the "
                                  "JSON")  # fmt: skip
            if image["id"] in images:
                raise SourceError(f"{self.json_path}: image id {image['id']} is listed twice; "
                                  "give each image its own id")  # fmt: skip
            if name in named:
                self._skip(posixpath.join(self.folder, name), f"listed twice in "
                           f"{self.json_path}, as images {named[name]} and {image['id']}: "
                           "packed as the first")  # fmt: skip
                self.passed.add(image["id"])
                continue
            named[name] = image["id"]
            if image["width"] * image["height"] > self.options.max_pixels:
                self._skip(
                    posixpath.join(self.folder, name),
                    f"{image['width']}x{image['height']} pixels (the JSON's) is over --max-pixels",
                )
                self.passed.add(image["id"])
                continue
            images[image["id"]] = (name, image["height"], image["width"])
        listed(len(images))
        return images

    def _fields(self, ident: int, height: int, width: int, annotations: list[dict]) -> dict:
        """The record's objects/* features (and mask blob) from its annotations."""
        boxes, labels, crowd, area, ids, points, outlines = [], [], [], [], [], [], []
        for annotation in annotations:
            bbox = annotation.get("bbox")
            if not (isinstance(bbox, list) and len(bbox) == 4 and all(map(_number, bbox))
                    and bbox[2] >= 0 and bbox[3] >= 0):  # fmt: skip
                raise _BadAnnotation(annotation, f"bbox {_shown(bbox)} is not [x, y, width, "
                                                 "height] in pixels")  # fmt: skip
            category = annotation.get("category_id")
            if not _count(category) or category not in self.label_of:
                raise _BadAnnotation(annotation, f"category_id {_shown(category)} is not among "
                                                 "the categories; fix it or add its category to "
                                                 "the JSON's categories")  # fmt: skip
            if not _count(annotation.get("id")):
                raise _BadAnnotation(annotation, "its id is not a 64-bit integer")
            x, y, w, h = bbox  # the worker clips it to the image, as detectron2 clips them
            box = (y / height, x / width, (y + h) / height, (x + w) / width)
            far = next((n for n, v in enumerate(box) if not BOX_REACH[0] <= v <= BOX_REACH[1]),
                       None)  # fmt: skip
            if far is not None:  # a box in another image's pixels: clipped, it would be wrong
                raise _BadAnnotation(annotation, f"bbox {_shown(bbox)} reaches {box[far]:g} of "
                                     f"the image's {('height', 'width')[far % 2]}, more than a "
                                     f"side past its edge (the JSON's size {width}x{height}); "
                                     "fix the box or the image's width and height")  # fmt: skip
            boxes.append(box)
            labels.append(self.label_of[category])
            # absent: 0 (detectron2's default). Else pycocotools' reading: false and 0.0 are 0,
            # true and 1.0 a crowd; "", null or [] it cannot evaluate (int() of them), and a
            # text "0" or 2 it finds as neither, yet ignores as a crowd
            flag = annotation.get("iscrowd", 0)
            if flag not in (0, 1):
                raise _BadAnnotation(annotation, f"iscrowd {_shown(flag)} is not 0 or 1; write 0 "
                                                 "for an object, 1 for a crowd region")  # fmt: skip
            crowd.append(int(flag))
            given = annotation.get("area")
            pixels = w * h if given is None else given  # its box's where it has none
            if not _number(pixels) or pixels < 0:  # NaN, a text: was its box's, unsaid
                raise _BadAnnotation(annotation, f"area {_shown(pixels)} is not a number of "
                                                 "pixels")  # fmt: skip
            if not _count(round(pixels)):
                raise _BadAnnotation(annotation, f"area {_shown(pixels)} is past any image's "
                                                 "pixels")  # fmt: skip
            area.append(round(pixels))
            ids.append(annotation["id"])
            if self.points:
                points.append(self._keypoints(annotation, height, width))
            if self.masked:
                outlines.append(self._outline(annotation, height, width))
        fields: dict[str, object] = {
            IMAGE_ID: ident, BBOX: tuple(boxes), LABEL: tuple(labels), CROWD: tuple(crowd),
            AREA: tuple(area), ID: tuple(ids), ANNOTATED_SIZE: (height, width, self.json_name),
        }  # fmt: skip
        if self.points:
            fields[KEYPOINTS] = tuple(points)
        if self.masked:
            fields[MASK] = shapes.encode(height, width, outlines, crowd)
        return fields

    def _keypoints(self, annotation: dict, height: int, width: int) -> tuple:
        """COCO's [x, y, v, ...] in pixels as one row of self.points (x, y, v), x and y
        normalised, padded with (0, 0, 0): not labelled."""
        given = annotation.get("keypoints") or []
        if not (isinstance(given, list) and len(given) % 3 == 0 and all(map(_number, given))):
            raise _BadAnnotation(annotation, "keypoints is not a list of (x, y, v) numbers")
        row = []
        for x, y, v in zip(given[0::3], given[1::3], given[2::3], strict=True):
            if v not in (0, 1, 2):
                raise _BadAnnotation(annotation, f"keypoint visibility {_shown(v)} is not 0, 1 "
                                                 "or 2")  # fmt: skip
            row += (x / width, y / height, int(v)) if v else (0.0, 0.0, 0)
        return tuple(row + [0.0, 0.0, 0] * (self.points - len(given) // 3))

    def _outline(self, annotation: dict, height: int, width: int) -> object:
        """The annotation's segmentation, checked (shapes.check), as the blob keeps it."""
        try:
            return shapes.check(annotation.get("segmentation") or [], height, width)
        except ValueError as e:
            raise _BadAnnotation(annotation, f"segmentation {e}") from None


def _shown(value: object) -> str:
    """A value for a message, a few dozen characters at most."""
    text = printable(repr(value))
    return text if len(text) <= 60 else text[:57] + "..."


SOURCE = CocoSource()
