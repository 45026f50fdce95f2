"""The Pascal VOC source: VOCdevkit/VOC20xx (or any folder holding Annotations/*.xml beside
JPEGImages/), split by ImageSets/Main/{train,val,trainval,test}.txt.

Each annotation XML gives its image's objects: objects/bbox from `bndbox`, objects/label,
objects/is_difficult, objects/is_truncated and objects/pose (TFDS's voc features). VOC counts
pixels from 1, both ends inside the box, so a box of pixels xmin..xmax covers [xmin - 1, xmax]
of the image: it is stored as [(ymin - 1) / height, (xmin - 1) / width, ymax / height,
xmax / width] with the XML's `size` (detectron2's reading; TFDS's voc builder divides xmin and
ymin as they are, a pixel to the right and below). The classes are VOC's 20 in TFDS's order
when every object is of one of them (labels then agree with TFDS's voc), else the names found,
sorted. The XML is hostile: read bounded, and one with a DOCTYPE (entities) refused unparsed;
a box reaching past schema.BOX_REACH skips its image naming the object. Annotation XMLs of no
image are counted in a warning.
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from shardpack.errors import SourceError, printable
from shardpack.options import PackOptions
from shardpack.schema import BOX_REACH, Feature
from shardpack.sources.classlist import check_class_count, check_class_name
from shardpack.sources.folder import folder_entries
from shardpack.sources.objects import (
    ANNOTATED_SIZE,
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

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

KIND = "voc"
# TFDS's voc builder's ClassLabel names, in its order.
VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
               "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
               "sheep", "sofa", "train", "tvmonitor")  # fmt: skip
# ImageSets/Main's split lists; trainval (train and val together) is a split only where
# neither train nor val is listed.
SPLIT_LISTS = ("train", "val", "test")
# Roboflow's VOC export: each split's folder (of these names) holds its images beside their XMLs.
EXPORT_SPLITS = ("train", "valid", "test")
DIFFICULT, TRUNCATED, POSE = "objects/is_difficult", "objects/is_truncated", "objects/pose"
# An <object>'s children packed; others (part, actions, point, occluded) are counted and named.
_OBJECT_TAGS = frozenset({"name", "pose", "truncated", "difficult", "bndbox"})


class VocSource(Source):
    """Annotations/*.xml beside JPEGImages/, as the VOC challenge's devkit lays them out."""

    name = "voc"
    kinds = (KIND,)
    described = "a Pascal VOC folder (Annotations/ beside JPEGImages/)"
    splits_from = "its ImageSets/Main lists, or split folders"

    def recognise(self, root: Storage, options: PackOptions) -> _Found | None:
        """The year folders under SRC (SRC itself, SRC/VOC20xx, SRC/VOCdevkit/VOC20xx)."""
        folder_only(root, options, self.name)
        years = voc_folders(root) if root.kind() == "dir" else []
        if years:
            return _Found(root, years)
        exported = export_splits(root) if root.kind() == "dir" else []
        if exported:
            return _Found(root, exported, exported=True)
        refuse_unfound(self, root, options, "holds no Annotations/ folder beside JPEGImages/ (nor "
                       "VOCdevkit/VOC20xx/ holding them, nor train/, valid/, test/ of images "
                       "beside their XMLs); pass the folder that holds them")  # fmt: skip
        return None

    def holds(self, found: _Found, name: str) -> bool:
        """A year folder's every entry; above one, its VOCdevkit/ or VOC20xx/ folder."""
        return any(year == "" or year.split("/")[0] == name for year in found.years)

    def scan(
        self, found: _Found, options: PackOptions, storage_options: Mapping[str, object] | None
    ) -> Dataset:
        return scan_voc(found.root, found.years, options, found.exported)


class _Found(NamedTuple):
    root: Storage
    years: list[str]  # the folders holding Annotations/ beside JPEGImages/ ("": SRC itself)
    exported: bool = False  # years are Roboflow's split folders, images beside their XMLs


def _is_year(root: Storage, folder: str) -> bool:
    entries = dict(folder_entries(root, folder))
    return bool(entries.get("Annotations") and entries.get("JPEGImages"))


def voc_folders(root: Storage) -> list[str]:
    """The folders under `root` that hold Annotations/ beside JPEGImages/: itself, else each
    VOC* folder of it or of its VOCdevkit/."""
    if _is_year(root, ""):
        return [""]
    entries = folder_entries(root)
    if any(name == "VOCdevkit" and is_dir for name, is_dir in entries):
        entries = [(f"VOCdevkit/{n}", d) for n, d in folder_entries(root, "VOCdevkit")]
    named = [name for name, is_dir in entries if is_dir and "VOC" in name]
    return [name for name in named if posixpath.basename(name).startswith("VOC")
            and _is_year(root, name)]  # fmt: skip


def export_splits(root: Storage) -> list[str]:
    """Roboflow's VOC export: its split folders (EXPORT_SPLITS) that hold an XML."""
    return [
        split
        for split in EXPORT_SPLITS
        if root.kind(split) == "dir"
        and any(
            not is_dir and name.endswith(".xml") for name, is_dir in folder_entries(root, split)
        )
    ]


class _Tally:
    """What the annotations held that is not packed, and the images without objects."""

    def __init__(self) -> None:
        self.empty = self.unannotated = self.segmented = 0
        self.unknown: Counter[str] = Counter()  # an <object>'s other children, by tag
        self.imageless: list[str] = []  # annotation XMLs of no image, listed in no split

    def warnings(self) -> list[str]:
        said = []
        if self.imageless:
            count = len(self.imageless)
            match = "XML matches" if count == 1 else "XMLs match"
            said.append(f"{count:,} annotation {match} no image (the first: "
                        f"{self.imageless[0]}): not packed; add the image, or remove the "
                        "XML")  # fmt: skip
        if self.unknown:
            tags = ", ".join(f"<{tag}> ({n:,})" for tag, n in sorted(self.unknown.items()))
            said.append(f"objects' elements not packed: {tags}")
        if self.segmented:
            masks = "SegmentationClass and SegmentationObject masks"
            images = f"{self.segmented:,} image{' is' if self.segmented == 1 else 's are'}"
            said.append(f"{images} segmented (<segmented>1): their "
                        f"{masks} are not packed")  # fmt: skip
        return said


def scan_voc(
    root: Storage, years: list[str], options: PackOptions, exported: bool = False
) -> Dataset:
    """List the images of each VOC year folder with their annotations' objects; `exported`:
    the folders are Roboflow's splits, each holding its images beside their XMLs.

    Raises:
        SourceError: a folder or split list cannot be read, or no image is found.
    """
    refuse_classes(root, options, "voc", "the annotations' <name>s")
    tally = _Tally()
    found: dict[str, list[tuple[str, int, dict | None]]] = {}  # split -> (image, size, objects)
    skipped: list[tuple[str, str]] = []
    for year in years:
        prefix = f"{year}/" if year else ""
        pictures, notes = (year, year) if exported else (f"{prefix}JPEGImages",
                                                         f"{prefix}Annotations")  # fmt: skip
        images, twins = _by_id(image_files(root, pictures))
        splits = {year: sorted(images)} if exported else _split_ids(root, prefix, images)
        listed_ids = {image_id for ids in splits.values() for image_id in ids}  # skipped if lost
        tally.imageless += [f"{notes}/{name}" for name, is_dir in folder_entries(root, notes)
                            if not is_dir and name.endswith(".xml") and name[:-4] not in images
                            and name[:-4] not in listed_ids]  # fmt: skip
        for split, ids in splits.items():
            for image_id in ids:
                entry = images.get(image_id)
                xml = f"{notes}/{image_id}.xml"
                if entry is None:
                    skipped.append((f"{prefix}JPEGImages/{image_id}.jpg", "no such image in "
                                    f"JPEGImages/ (listed in split {split}); remove it from "
                                    "the list or add the image"))  # fmt: skip
                    continue
                # the id's other images (a.png beside a.jpg), once: its split's lists name it
                skipped += [
                    (twin, _twin_reason(entry.name, xml)) for twin in twins.pop(image_id, ())
                ]
                try:
                    data = read_annotation(root, xml)
                    objects = None if data is None else _objects(data, xml, tally)
                except BadAnnotation as e:
                    skipped.append((entry.name, str(e)))
                    continue
                found.setdefault(split, []).append((entry.name, entry.size, objects))
    if not found and not skipped:  # all skipped: the pack says so, as of any source
        raise SourceError(f"{root.path()}: no image found in JPEGImages/")
    classes = _classes(found, root.path())
    position = {name: i for i, name in enumerate(classes)}
    splits = {}
    for split, listed_images in found.items():
        items = []
        for name, size, objects in listed_images:
            tally.unannotated += objects is None
            tally.empty += objects is not None and not objects[LABEL]
            fields = _fields(objects, position)
            items.append(Item(name, None, name, size, fields=fields))
        splits[split] = tuple(items)
    extra = {DIFFICULT: Feature("int64", (-1,)), TRUNCATED: Feature("int64", (-1,)),
             POSE: Feature("bytes", (-1,), text=True)}  # fmt: skip
    return Dataset(
        KIND,
        root,
        object_schema(classes, extra),
        splits,
        skipped=tuple(skipped),
        warnings=(
            *tally.warnings(),
            *negatives(tally.empty, tally.unannotated, "TFDS's voc", "an annotation XML"),
        ),
    )


def _by_id(entries: Iterable[Entry]) -> tuple[dict[str, Entry], dict[str, list[str]]]:
    """Each image id's file, and the other files of ids that have several (a.jpg beside a.png):
    <id>.jpg where there is one, as VOC's devkit, TFDS and detectron2 read JPEGImages/<id>.jpg,
    else the first in name order."""
    images: dict[str, Entry] = {}
    twins: dict[str, list[str]] = {}
    for entry in sorted(entries, key=lambda e: (not e.name.endswith(".jpg"), e.name)):
        image_id = posixpath.splitext(posixpath.basename(entry.name))[0]
        if images.setdefault(image_id, entry) is not entry:
            twins.setdefault(image_id, []).append(entry.name)
    return images, twins


def _twin_reason(kept: str, xml: str) -> str:
    """Why another file of `kept`'s image id is skipped: an id names one image (`xml`'s)."""
    chosen = "as VOC's readers read <id>.jpg" if kept.endswith(".jpg") else "the first by name"
    return (f"has the image id of {kept}, taken for it ({chosen}): an id names one image, "
            f"annotated by {xml}; give this one a name of its own, or remove it")  # fmt: skip


def _split_ids(root: Storage, prefix: str, images: dict) -> dict[str, list[str]]:
    """Each split's image ids from ImageSets/Main's lists (trainval only where neither train
    nor val is listed); without lists, every image of JPEGImages/ in split train."""
    main = f"{prefix}ImageSets/Main"
    present = {name for name, is_dir in (folder_entries(root, main) if root.kind(main) == "dir"
                                         else []) if not is_dir}  # fmt: skip
    names = [s for s in SPLIT_LISTS if f"{s}.txt" in present]
    if not {"train", "val"} & set(names) and "trainval.txt" in present:
        names.insert(0, "trainval")
    if not names:
        return {"train": sorted(images)}
    splits = {}
    for split in names:
        text = read_metadata(root, f"{main}/{split}.txt", "a VOC split list, an image id a line")
        ids = [line.split()[0] for line in text.decode("utf-8", "replace").splitlines()
               if line.strip()]  # fmt: skip
        splits[split] = list(dict.fromkeys(ids))  # an id listed twice is one record
    return splits


def _classes(found: dict, where: str) -> tuple[str, ...]:
    """VOC's 20 classes when every object is of one of them, else the names found, sorted."""
    names = {n for items in found.values() for _, _, objects in items if objects
             for n in objects[LABEL]}  # fmt: skip
    if names <= set(VOC_CLASSES):
        return VOC_CLASSES
    check_class_count(len(names), where, "the annotations' <name>s")  # each checked as read
    return tuple(sorted(names))


def _fields(objects: dict | None, position: dict[str, int]) -> dict[str, tuple]:
    """An item's objects/... fields: its objects' class names as class numbers."""
    if objects is None:
        return {BOX: (), LABEL: (), DIFFICULT: (), TRUNCATED: (), POSE: ()}
    return {**objects, LABEL: tuple(position[n] for n in objects[LABEL])}


def _objects(data: bytes, name: str, tally: _Tally) -> dict[str, tuple]:
    """The objects of one annotation XML, class names as they are (see _fields).

    Raises:
        BadAnnotation: the XML is refused, malformed, or misses what a box needs.
    """
    import xml.etree.ElementTree as ET  # here: every folder pack imports the VOC source

    text = _decoded(data, name)
    try:
        if _declares_doctype(text):
            raise BadAnnotation(f"{name}: declares a DOCTYPE or entities, which no VOC "
                                "annotation holds (and which could expand unbounded); remove "
                                "them")  # fmt: skip
        top = ET.fromstring(text)
    except ET.ParseError as e:
        raise BadAnnotation(f"{name}: is not well-formed XML ({e}); fix or remove it") from None
    except ValueError as e:  # expat's: an encoding it names that is no codec of one byte
        raise BadAnnotation(f"{name}: cannot be read ({e}); save it as UTF-8") from None
    if top.tag != "annotation":
        raise BadAnnotation(f"{name}: its root element is <{top.tag}>, not <annotation>; is it "
                            "a VOC annotation?")  # fmt: skip
    size = _children(top.find("size"))
    width, height = _number(size, "size/", "width", name), _number(size, "size/", "height", name)
    if width <= 0 or height <= 0:
        raise BadAnnotation(f"{name}: <size> {width:g}x{height:g} is no image size; fix it")
    tally.segmented += (top.findtext("segmented") or "").strip() == "1"
    boxes: list[float] = []
    labels, difficult, truncated, poses = [], [], [], []
    for number, obj in enumerate(top.findall("object")):
        tags = _children(obj)  # plain lookups: find() of a path is 20x slower
        label = (tags.get("name") or "").strip()
        if not label:
            raise BadAnnotation(f"{name}: object {number} has no <name>; give it its class")
        at = f"{name} object {number} ({printable(label)})"
        try:  # here, not once for the dataset: the XML and object are what to fix
            check_class_name(label, at)
        except SourceError as e:
            raise BadAnnotation(str(e)) from None
        box = _children(obj.find("bndbox"))
        xmin, ymin = _number(box, "bndbox/", "xmin", at), _number(box, "bndbox/", "ymin", at)
        xmax, ymax = _number(box, "bndbox/", "xmax", at), _number(box, "bndbox/", "ymax", at)
        if xmin > xmax or ymin > ymax:
            raise BadAnnotation(f"{at}: its bndbox has a min over its max; fix it")
        box = [(ymin - 1) / height, (xmin - 1) / width, ymax / height, xmax / width]
        past = next((v for v in box if not BOX_REACH[0] <= v <= BOX_REACH[1]), None)
        if past is not None:  # one of no area inside, a little way out, is dropped when packed
            raise BadAnnotation(f"{at}: its bndbox reaches {past:g} of the image's side, more "
                                f"than a side past its edge (<size> {width:g}x{height:g}); fix "
                                "the box or the size")  # fmt: skip
        boxes += box
        labels.append(label)
        difficult.append(_flag(tags, "difficult", at))
        truncated.append(_flag(tags, "truncated", at))
        poses.append((tags.get("pose") or "Unspecified").strip())
        tally.unknown.update(tag for tag in tags if tag not in _OBJECT_TAGS)
    return {BOX: tuple(boxes), LABEL: tuple(labels), DIFFICULT: tuple(difficult),
            TRUNCATED: tuple(truncated), POSE: tuple(poses),
            ANNOTATED_SIZE: (height, width, name)}  # fmt: skip


# The encoding an XML declaration names (in its first bytes, ASCII's), and those expat reads
# itself; Python's codecs read the others (GBK, Shift-JIS: expat refuses multi-byte ones).
_DECLARED = rb"(?:\xef\xbb\xbf)?<\?xml[^>]{0,200}?encoding\s*=\s*[\"']([\w.:-]{1,40})[\"']"
_EXPAT_READS = frozenset({"utf-8", "utf8", "us-ascii", "ascii", "iso-8859-1", "latin-1"})


def _decoded(data: bytes, name: str) -> bytes | str:
    """An XML as expat reads it: its bytes, or text decoded from the encoding its declaration
    names where expat would not read that encoding itself (a str's declaration is ignored)."""
    match = re.match(_DECLARED, data)
    encoding = match.group(1).decode().lower() if match else "utf-8"
    if encoding in _EXPAT_READS or encoding.startswith("utf-16"):
        return data
    try:
        return data.decode(encoding)
    except (LookupError, UnicodeError) as e:  # punycode's, undefined's: no UnicodeDecodeError
        raise BadAnnotation(f"{name}: cannot be read in the encoding it declares, {encoding} "
                            f"({e}); save it as UTF-8") from None  # fmt: skip


class _Prolog(Exception):
    """The prolog's parse reached a DOCTYPE (args[0] True) or the root element (False)."""


def _declares_doctype(data: bytes | str) -> bool:
    """Whether an XML declares a DOCTYPE (the only place for entities) before its root element,
    in whatever encoding it is written (UTF-16 too) and after however long a prolog: only the
    prolog is parsed. Malformed XML: False (the parse that follows says what is wrong)."""
    from xml.parsers import expat

    def stop(found: bool):
        def handler(*_: object) -> None:
            raise _Prolog(found)

        return handler

    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler, parser.StartElementHandler = stop(True), stop(False)
    try:
        parser.Parse(data, True)
    except _Prolog as reached:
        return reached.args[0]
    except expat.ExpatError:
        pass
    return False


def _children(element: ET.Element | None) -> dict[str, str | None]:
    """Tag -> text of an element's children (the first of a tag); {} for no element."""
    found: dict[str, str | None] = {}
    for child in () if element is None else element:
        found.setdefault(child.tag, child.text)
    return found


def _number(tags: dict[str, str | None], parent: str, tag: str, at: str) -> float:
    """The number of a child element (tags: _children); `parent` names it in messages."""
    text, path = tags.get(tag), parent + tag
    try:
        value = float(text)  # type: ignore[arg-type]  # None: TypeError
    except (TypeError, ValueError):
        raise BadAnnotation(f"{at}: <{path}> is {'missing' if text is None else repr(text)}, "
                            "not a number; fix it") from None  # fmt: skip
    if value != value or value in (float("inf"), float("-inf")):
        raise BadAnnotation(f"{at}: <{path}> is {text!r}, not a finite number; fix it")
    return value


def _flag(tags: dict[str, str | None], tag: str, at: str) -> int:
    """A 0/1 flag of an object (tags: _children; absent: 0)."""
    text = (tags.get(tag) or "0").strip()
    if text not in ("0", "1"):
        raise BadAnnotation(f"{at}: <{tag}> is {text!r}, not 0 or 1; fix it")
    return int(text)


SOURCE = VocSource()
