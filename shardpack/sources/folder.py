"""The class-folder source: SRC/<class>/**/<image>, one class per first-level folder."""

from __future__ import annotations

import json
import os
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping

from shardpack.containers import shard_container
from shardpack.errors import Option, SourceError, plural
from shardpack.layout import INDEX_NAME
from shardpack.options import SPLIT_NAMES, PackOptions
from shardpack.schema import Schema
from shardpack.sources import cifar, repack, tfdsdir
from shardpack.sources.classlist import Listing, check_class_name, class_list, labelled
from shardpack.sources.nearmisses import folder_name_warnings
from shardpack.sources.scanprogress import listed
from shardpack.sources.source import Dataset, Item, Source, folder_only
from shardpack.sources.tables.files import compressed_list
from shardpack.sources.tars import TarSource
from shardpack.storage import Folder, Storage

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
_ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip")  # what a dataset is downloaded as
# Photos of formats no reader of shardpack's decodes (OpenCV's builds leave them out): a
# phone's HEIC, AVIF, JPEG XL and cameras' raw files, by extension.
UNREAD_PHOTOS = {".heic": "HEIC", ".heif": "HEIF", ".avif": "AVIF", ".jxl": "JPEG XL",
                 ".dng": "DNG", ".cr2": "Canon raw", ".nef": "Nikon raw",
                 ".arw": "Sony raw"}  # fmt: skip


# ---- class folders ---------------------------------------------------------------------------

# index.json names this many of the files a scan ignored (the count stays exact): enough to see
# what was passed over, bounded for a tree of millions of text files.
MAX_NAMED_IGNORED = 1000


# A stat per file would be a third of a large listing's time (`python -m benchmarks.listing`),
# and a size is used only to choose the shard count and to
# weigh the work (plan.py); the worker reads each file to its end whatever the size says. So a
# walk stats the first SIZED_FILES files (a tree this small has every size exact) and every
# SIZE_STRIDE-th after them, in key order (the same files each run: the plan stays a function of
# the tree), and gives the others the mean of those.
SIZED_FILES = 10_000
SIZE_STRIDE = 100


# What macOS's zip puts beside what it packed (its files' resource forks, `._<name>`): the
# metadata of an archive, never a class or a split of the dataset.
_ARCHIVE_METADATA = "__MACOSX"


def hidden(name: str) -> bool:
    """Whether a name in SRC is no part of the dataset: a dot name (.DS_Store, .git) or
    macOS's __MACOSX folder; passed over unnamed, as a file manager hides them."""
    return name.startswith(".") or name == _ARCHIVE_METADATA


def is_image_name(name: str) -> bool:
    """Whether a file's name is an image's by its extension (IMAGE_EXTENSIONS)."""
    return "." in name and "." + name.rpartition(".")[2].lower() in IMAGE_EXTENSIONS


# The extensions without their dot, for the walk's inline test (no function call per file).
_SUFFIXES = frozenset(ext[1:] for ext in IMAGE_EXTENSIONS)
# The skip reason of an image beside the class folders, not in one (of SRC, or of a split).
_NO_CLASS = "in no class folder ({}): move it into its class's folder"
_SPLIT_LAYOUT = "SRC/<split>/<class>/<image>"


class Passed:
    """What a folder scan passed over: files ignored (counted, the first ones named) and files
    or folders skipped with a reason."""

    def __init__(self) -> None:
        self.ignored = 0
        self.ignored_files: list[str] = []
        self.skipped: list[tuple[str, str]] = []

    def ignore(self, rel: str) -> None:
        self.ignored += 1
        if len(self.ignored_files) < MAX_NAMED_IGNORED:
            self.ignored_files.append(rel)

    def dataset(
        self,
        kind: str,
        root: Storage,
        schema: Schema,
        splits: dict[str, tuple[Item, ...]],
        left_out: list[tuple[str, str]],
        warnings: list[str],
    ) -> Dataset:
        """The Dataset of a folder scan, with what it passed over and `left_out` skipped."""
        return Dataset(
            kind,
            root,
            schema,
            splits,
            self.ignored,
            ignored_files=tuple(self.ignored_files),
            skipped=tuple(sorted([*self.skipped, *left_out])),
            warnings=tuple(warnings),
        )


class FolderSource(Source):
    """Class folders: the layout every SRC is taken for when no other source recognises it."""

    name = "folder"
    kinds = ("folder",)
    described = "class folders"
    own_options = ("split_names",)

    def recognise(self, root: Storage, options: PackOptions) -> Storage:
        folder_only(root, options, self.name)
        if options.source == self.name and options.split_names != SPLIT_NAMES:
            raise SourceError(f"{root.path()}: ", Option("split_names"), " names split folders, "
                              "and ", Option("source", "folder"), " takes every folder as a "
                              "class; drop one of them")  # fmt: skip
        return root

    def scan(
        self, found: Storage, options: PackOptions, storage_options: Mapping[str, object] | None
    ) -> Dataset:
        return scan_folder(found, options)


def scan_folder(src: Storage, options: PackOptions) -> Dataset:
    passed = Passed()
    found_classes, found, empty = list_class_folders(src, passed)
    if options.source != "folder":  # --source folder: every folder is a class, as asked
        _refuse_split_like(src, found_classes, found)
        _refuse_one_class_of_folders(src, found_classes, found)
        _refuse_one_class_with_folders(src, found, passed)
    classes = class_list(found_classes, options.classes)
    items, left_out = labelled(found, classes, options.on_error)
    if found and not items:
        raise left_out_by_classes(src.path(), len(found), found_classes)
    if not items:
        raise SourceError(f"{src.path()}: no images found; ", *_nothing_found(src, passed))
    warnings = empty_class_warnings(src.path(), empty, classes)
    warnings += folder_name_warnings(found_classes, options.classes, src.path())
    return passed.dataset("folder", src, Schema.build(classes), {"train": items}, left_out,
                          warnings)  # fmt: skip


# Split folders number a few (train, val, test); a tree of more first-level folders is classes.
_MOST_SPLITS = 5


def _refuse_split_like(src: Storage, folders: tuple[str, ...], found: Listing) -> None:
    """Refuse first-level folders that are a split tree by another name (tr/cat, te/cat): a
    few, none with an image of its own, all holding the same two or more folders. Taken for
    classes, every image would be labelled by its split."""
    if not 2 <= len(folders) <= _MOST_SPLITS:
        return
    inner: dict[str, set[str]] = {name: set() for name in folders}
    for label, key, _ in found:
        parts = key.split("/", 2)
        if len(parts) == 2:
            return  # an image in the folder itself: a class
        inner[label].add(parts[1])
    shared = set.intersection(*inner.values())
    if len(shared) < 2 or any(len(names) > 2 * len(shared) for names in inner.values()):
        return
    if shared <= set(SPLIT_NAMES):  # cat/train/, cat/test/: classes holding splits
        raise SourceError(
            f"{src.path()}: its folders {few(folders)} each hold split folders ({few(shared)}), "
            f"but a split tree holds its classes in its splits ({_SPLIT_LAYOUT}): move "
            f"{folders[0]}/{min(shared)}/ to {min(shared)}/{folders[0]}/ and so on, or pass ",
            Option("source", "folder"),
            " to take every folder as a class, its splits' images together",
        )
    raise SourceError(
        f"{src.path()}: its folders {few(folders)} each hold the same folders ({few(shared)}), "
        "as a split tree's split folders hold classes; pass ",
        Option("split_names", tuple(folders)),
        " to take them as splits, or ",
        Option("source", "folder"),
        " to take them as classes",
    )


def _refuse_one_class_of_folders(src: Storage, folders: tuple[str, ...], found: Listing) -> None:
    """Refuse one class folder whose images all lie in two or more folders of its own, beside
    no other folder with images: SRC is most likely the folder above the dataset (~/data for
    ~/data/flowers, the demo's OUT beside its shards/), and every image would get one label."""
    holding = {label for label, _, _ in found}
    if len(holding) != 1:
        return
    (name,) = holding
    inner = set()
    for _, key, _ in found:
        parts = key.split("/", 2)
        if len(parts) == 2:
            return  # an image in the class folder itself: a class
        inner.add(parts[1])
    if len(inner) < 2:
        return
    others = [f for f in folders if f != name]
    besides = f" with images ({few(others)} {'hold' if others[1:] else 'holds'} none)"
    raise SourceError(
        f"{src.path()}: its one folder {name!r}{besides if others else ''} holds no image of its "
        f"own, only folders "
        f"({few(inner)}), as a dataset's folder holds its classes; pass {src.path(name)} "
        "as SRC to take those as the classes, or ",
        Option("source", "folder"),
        f" to pack every image as the one class {name!r}",
    )


def _refuse_one_class_with_folders(src: Storage, found: Listing, passed: Passed) -> None:
    """Refuse SRC holding images of its own beside folders of images, as many or more than
    those folders, where folders beside SRC hold images themselves: SRC is one class folder of
    the dataset above it (~/data/flowers/daisy with its 2019/), whose own images a scan would
    skip as in no class folder and whose folders it would take for the classes."""
    own = sum(1 for _, why in passed.skipped if why == _NO_CLASS.format("SRC/<class>/<image>"))
    folders = sorted({label for label, _, _ in found})
    above = src.parent()
    if not folders or own < len(folders) or above is None:
        return
    name = os.path.basename(src.path())
    if not (others := _classes_beside(above, name)):
        return
    raise SourceError(
        f"{src.path()}: its {own} images lie in SRC itself and more in its "
        f"{'folder' if len(folders) == 1 else 'folders'} {few(folders)}: it is "
        f"{_beside(src, others)}; or pass ",
        Option("source", "folder"),
        f" to take {few(folders)} as the classes, its own images skipped",
    )


def _beside(src: Storage, others: list[str]) -> str:
    """What to pass for SRC, one class folder beside `others` (folders of images): a message's
    part."""
    return (f"a class folder beside {few(others)}: pass {os.path.dirname(src.path())} to pack "
            "them all, each folder a class")  # fmt: skip


def left_out_by_classes(where: str, images: int, found: Iterable[str]) -> SourceError:
    """The error of a scan that found images, every one in a class that --classes leaves out."""
    return SourceError(f"{where}: none of its {images:,} images is in a class of ",
                       Option("classes"), f"; its class folders are {few(found)}: name "
                       "those")  # fmt: skip


def few(names: Iterable[str]) -> str:
    """Up to five of `names`, sorted and quoted, for a message: 'a', 'b', ..."""
    names = sorted(set(names))
    return ", ".join(map(repr, names[:5])) + (", ..." if len(names) > 5 else "")


def list_class_folders(
    src: Storage, passed: Passed, base: str = ""
) -> tuple[tuple[str, ...], Listing, list[str]]:
    """The class folders of SRC/base and their images, sorted by key; what is not an image
    goes to `passed`. The store's walk claims every class folder before walking any: a link
    from one class into another (or back to SRC) must not list the other class's images under
    the wrong label.

    Returns:
        (class names, the (class name, key, size) of each image with keys relative to SRC,
        the names of the class folders that hold no image).
    """
    walk = src.walk_folders(base)
    top = next(walk)
    if top.error is not None:
        e = top.error
        raise SourceError(f"{src.path(base)}: cannot list ({e.strerror or e}); check its "
                          "permissions")  # fmt: skip
    top.folders[:] = [name for name in top.folders if not hidden(name)]
    classes = tuple(top.folders)
    for name in classes:
        check_class_name(name, src.path(base))
    prefix = f"{base}/" if base else ""
    loose = sorted([*top.files, *(name for name, _ in top.others)])
    for name in loose:
        if hidden(name):
            continue
        if is_image_name(name):  # an image with no class: named with why, not "not an image"
            where = _SPLIT_LAYOUT if base else "SRC/<class>/<image>"
            passed.skipped.append((prefix + name, _NO_CLASS.format(where)))
        else:
            passed.ignore(prefix + name)
    found = Listing()
    # class -> whether it holds an image; None where it cannot be listed (skipped with why,
    # not warned about as empty)
    holding: dict[str, bool | None] = dict.fromkeys(classes, False)
    for folder in walk:
        label = folder.name.partition("/")[0]
        if folder.same_as is not None and label == folder.name:
            raise _same_folder(src, base, folder.name, folder.same_as)
        if folder.same_as is not None:
            continue  # a link to a folder walked or claimed: walked once
        if folder.error is not None:
            why = (folder.error.strerror or str(folder.error)).lower()
            passed.skipped.append((f"{prefix}{folder.name}/", f"cannot list ({why})"))
            if label == folder.name:
                holding[label] = None
            continue
        folder.folders[:] = [name for name in folder.folders if not hidden(name)]
        if _list_images(folder, label, prefix, passed, found) and holding[label] is False:
            holding[label] = True
    found.sort()
    empty = [name for name, holds in holding.items() if holds is False]
    _fill_sizes(src, found)
    return classes, found, empty


def _list_images(folder: Folder, label: str, prefix: str, passed: Passed, found: Listing) -> int:
    """Add (label, key, size or None) of each image of `folder` to `found`; what is not an
    image goes to `passed`. Return how many images. Per file this is the listing's hot loop."""
    at = f"{prefix}{folder.name}/"
    images, ignored = [], []
    for name in folder.files:
        if name[0] == ".":
            continue  # hidden
        _, dot, ext = name.rpartition(".")
        if dot and (ext in _SUFFIXES or ext.lower() in _SUFFIXES):
            images.append(name)
        else:
            ignored.append(name)
    for name, why in folder.others:  # FIFOs, devices: one named as an image is skipped, why
        if hidden(name):
            continue
        if is_image_name(name):
            passed.skipped.append((at + name, why))
        else:
            ignored.append(name)
    sizes = folder.sizes
    found.names += [label] * len(images)
    found.keys += [at + name for name in images]
    if sizes:
        found.sizes += [sizes.get(name) for name in images]
    else:  # a disk's plain files: sized afterwards (_fill_sizes)
        found.sizes += [None] * len(images)
    listed(len(images) + len(ignored))
    for name in sorted(ignored):
        passed.ignore(at + name)
    return len(images)


def _same_folder(src: Storage, base: str, name: str, first: str) -> SourceError:
    """The error of class folder `name` of SRC/base: a link to class folder `first` ("": to
    SRC/base itself)."""
    top = src.child(base) if base else src
    if not first:
        return SourceError(f"{top.path(name)}: is a link to {top.path()}, the folder holding "
                           "it; a class cannot hold the classes: remove the link")  # fmt: skip
    return SourceError(f"{top.path(name)}: is the same folder as {top.path(first)} (a link); "
                       "one folder cannot be two classes: remove the link")  # fmt: skip


def empty_class_warnings(
    top: str, empty: list[str], classes: tuple[str, ...], elsewhere: frozenset[int] = frozenset()
) -> list[str]:
    """One warning for each class folder of `top` that holds no images (and is in the list);
    `elsewhere`: the labels other split folders hold records of (a split tree's `val/cat/`
    empty beside `train/cat/`: the class has records, that split none)."""
    said = []
    for name in empty:
        if name not in classes:
            continue
        label = classes.index(name)
        what = (f"this split has no record of label {label}, which another split has"
                if label in elsewhere
                else f"it keeps label {label} with no records")  # fmt: skip
        said.append(f"class '{name}' ({os.path.join(top, name)}) holds no images: {what}")
    return said


def _nothing_found(src: Storage, passed: Passed) -> tuple[str | Option, ...]:
    """What SRC holds instead of class folders with images, and what to pass instead (as the
    parts of a message); `passed`: the files the scan found that are no image."""
    entries = folder_entries(src)
    if (unfinished := repack.unfinished_run(src)) is not None:
        return unfinished
    for name, is_dir in entries:
        if is_dir and cifar.cifar_layout(src.child(name)) is not None:
            return (f"{src.path(name)} holds CIFAR batches: pass that folder as SRC",)
    names = {name for name, is_dir in entries if not is_dir}
    for batches, meta in cifar.LAYOUTS.values():
        batch = min(names & batches.keys(), default=None)
        if batch is not None and meta in names:  # only --source folder leads here
            return ("it holds CIFAR batches: pass ", Option("source", "cifar"))
        if batch is not None:
            return (
                f"it holds {batch} but not {meta}, which names CIFAR's classes: extract the "
                "whole archive",
            )
    archives = [name for name, _ in entries if name.endswith(_ARCHIVES)]
    if archives and archives[0].endswith(".tar"):  # or a WebDataset's shards
        return (f"it holds {archives[0]}: for WebDataset shards pass ",
                Option("source", TarSource.name), "; for an archive of images, extract it, then "
                "pass the folder it makes")  # fmt: skip
    if archives:
        return (f"it holds {archives[0]}: extract it, then pass the folder it makes",)
    loose = sum(1 for name, is_dir in entries if not is_dir and is_image_name(name))
    if loose:
        root = src.path()
        parent, name = os.path.dirname(root), os.path.basename(root)
        way = "move them into class folders"
        above = src.parent()
        if above is not None and _only_entry(above, name):  # else it packs its others too
            way += f", or pass {parent} to pack {name} as one class"
        elif above is not None and (others := _classes_beside(above, name)):
            return (f"its {loose} images lie in SRC itself, {_beside(src, others)}",
                    *_unlabeled(root))  # fmt: skip
        return (f"its {loose} images lie in SRC itself, but each class needs its own folder "
                f"(SRC/<class>/<image>): {way}", *_unlabeled(root))  # fmt: skip
    return expected_layout(src, passed)


def _unlabeled(root: str) -> tuple[str | Option, ...]:
    """How to pack a flat folder's images with no labels (a manifest without a label column),
    as a message's tail: a folder source takes each folder's name as a label."""
    return ("; or, to pack them unlabeled, list them in a manifest, (echo path; ls "
            f"{shlex.quote(root)}) > images.csv, and pack images.csv with ",
            Option("root", root))  # fmt: skip


def expected_layout(src: Storage, passed: Passed, splits: bool = False) -> tuple[str | Option, ...]:
    """The layout (of a split tree's, `splits`) and extensions a scan of `src` that found no
    image expected, and the kinds of the files it passed over instead (HEIC photos, a pack's
    shards, say) with the way on: a message's tail."""
    layout = _SPLIT_LAYOUT if splits else "SRC/<class>/<image>"
    expected = f"expected {layout} with extensions {', '.join(sorted(IMAGE_EXTENSIONS))}"
    if not passed.ignored:
        return (expected,)
    if _saved_to_disk(passed.ignored_files):
        root = src.path().rstrip("/")
        code = (f"import datasets; d = datasets.load_from_disk({json.dumps(root)}); [s.to_parquet("
                f"{json.dumps(root + '-parquet/data/')} + n + \"-00000-of-00001.parquet\") for "
                "n, s in (d.items() if isinstance(d, datasets.DatasetDict) else [(\"train\", "
                "d)])]")  # fmt: skip
        return ("it is a Hugging Face dataset written by save_to_disk (Arrow files), which "
                f"shardpack does not read: write it as Parquet, python -c {shlex.quote(code)}, "
                f"then pack {root}-parquet",)  # fmt: skip
    kinds = Counter(map(_file_kind, passed.ignored_files))
    said = ", ".join(plural(n, kind) if kind.endswith(" shard") else f"{kind} {n:,}"
                     for kind, n in kinds.most_common(3))  # fmt: skip
    have = "has" if passed.ignored == 1 else "have"
    passed_over = f"{expected}; its {plural(passed.ignored, 'file')} {have} none of those ({said})"
    shards = [name for name in passed.ignored_files if shard_container(name.rpartition("/")[2])]
    if shards:  # a pack's output, or a copy of its shards: packed again from its own folder
        base = shards[0].rpartition("/")[0]
        folder = src.path(base)
        holder = src.child(base) if base else src
        if holder.kind(INDEX_NAME) != "file" and all(
            holder.kind(name) == "file" for name in (tfdsdir.INFO, tfdsdir.FEATURES)
        ):  # TFDS's data_dir/<name>/<version>, passed a level or two above
            return (f"{passed_over}: {shards[0]} is a shard of the TFDS prepared directory "
                    f"{folder} ({tfdsdir.INFO} beside it): pass that folder as SRC",)  # fmt: skip
        kind = _file_kind(shards[0])
        article = "an" if kind[0] in "aeiou" else "a"
        return (f"{passed_over}: {shards[0]} is {article} {kind}, not an image; to pack "
                f"shards again, pass the folder of the pack that wrote them ({folder}, with its "
                "index.json) as SRC with ", Option("source", "shardpack"))  # fmt: skip
    return (f"{passed_over}: convert the images to one of those formats",)


def _saved_to_disk(names: Iterable[str]) -> bool:
    """Whether these files (relative paths) are a `datasets` save_to_disk folder's: its
    dataset_dict.json, or a split's state.json beside its data-00000-of-00001.arrow."""
    names = set(names)
    arrow = {name.rpartition("/")[0] for name in names if name.endswith(".arrow")}
    return any(name.rpartition("/")[2] == "dataset_dict.json" or (
        name.rpartition("/")[2] == "state.json" and name.rpartition("/")[0] in arrow)
        for name in names)  # fmt: skip


def _file_kind(name: str) -> str:
    """What a file that is no image is, for a message: a container's shard (a TFRecord's tail,
    `.tfrecord-00000-of-00048`, is no extension), else its extension."""
    if (container := shard_container(name.rpartition("/")[2])) is not None:
        return f"{container.name} shard"
    return os.path.splitext(name)[1].lower() or "no extension"


def unread_photos(names: Iterable[str]) -> str | None:
    """What to do of the photos among these ignored files that shardpack cannot read (a
    phone's HEIC, say): a line's tail; None where there are none."""
    kinds = Counter(UNREAD_PHOTOS.get(os.path.splitext(name)[1].lower()) for name in names)
    kinds.pop(None, None)
    if not kinds:
        return None
    said = ", ".join(f"{n:,} {kind}" for kind, n in kinds.most_common())
    return (
        f"{said} among them: photos of a format shardpack does not read; convert them to "
        "JPEG or PNG in SRC to pack them (e.g. heif-convert, ImageMagick's magick)"
    )


def in_split_folders(passed: Passed) -> tuple[str, ...]:
    """Why a split tree without an image in a class folder found none, where its images lie
    in the split folders themselves (skipped, _NO_CLASS): a message's tail; () otherwise."""
    loose = [key for key, why in passed.skipped if why == _NO_CLASS.format(_SPLIT_LAYOUT)]
    if not loose:
        return ()
    folders = ", ".join(sorted({key.split("/", 1)[0] + "/" for key in loose}))
    return (f"its {plural(len(loose), 'image')} lie in its split folders ({folders}) themselves, "
            f"but each class needs its own folder ({_SPLIT_LAYOUT}): move them into class "
            "folders",)  # fmt: skip


# Folders beside a flat SRC looked into for images (_classes_beside): a listing each.
_SIBLINGS_LOOKED_INTO = 8


def _classes_beside(folder: Storage, name: str) -> list[str]:
    """The folders beside `name` in `folder` (a few at most) that hold images themselves: SRC
    is then one class folder of the dataset `folder` is, passed one level too deep."""
    try:
        others = [entry for entry, is_dir in folder_entries(folder)
                  if is_dir and entry != name and not hidden(entry)]  # fmt: skip
        return [other for other in others[:_SIBLINGS_LOOKED_INTO]
                if any(not is_dir and is_image_name(file)
                       for file, is_dir in folder_entries(folder.child(other)))]  # fmt: skip
    except SourceError:
        return []


def _only_entry(folder: Storage, name: str) -> bool:
    """Whether `name` is the only folder in `folder` (hidden ones aside): a scan of `folder`
    would take no other class."""
    try:
        entries = folder_entries(folder)
    except SourceError:
        return False
    return all(entry == name or hidden(entry) or not is_dir for entry, is_dir in entries)


def _fill_sizes(src: Storage, found: Listing) -> None:
    """Give a size to each file of `found` the walk left without: its own for the first
    SIZED_FILES files and every SIZE_STRIDE-th after them, the mean of those for the rest."""
    keys, sizes = found.keys, found.sizes
    sample = [*range(min(SIZED_FILES, len(keys))), *range(SIZED_FILES, len(keys), SIZE_STRIDE)]
    unsized = [i for i in sample if sizes[i] is None]  # the walk saw a regular file
    for i, size in zip(unsized, src.sizes(keys[i] for i in unsized), strict=True):
        sizes[i] = 0 if size is None else size  # None: gone since, the worker's skip says so
    if len(sample) == len(keys):
        return  # every file has its own size
    mean = round(sum(sizes[i] for i in sample) / len(sample))
    sizes[:] = [mean if size is None else size for size in sizes]


def instead_of_file(path: str) -> str:
    """What to pass instead of a file given as SRC, judged by its name."""
    parent = os.path.dirname(path)
    name = os.path.basename(path)
    if any(name in batches or name == meta for batches, meta in cifar.LAYOUTS.values()):
        return f"it is a CIFAR file: pass the folder that holds it, {parent}"
    if name.endswith(_ARCHIVES):
        return "it is an archive: extract it (tar xf / unzip), then pass the folder it makes"
    if is_image_name(name):
        return (
            f"it is an image: pass the folder above its class folder, {os.path.dirname(parent)} "
            f"(SRC/<class>/<image>, here with {os.path.basename(parent)} as the class)"
        )
    if (tool := compressed_list(name)) is not None:
        return (f"it is a compressed list: shardpack reads .csv, .tsv and .jsonl lists as they "
                f"are; decompress it ({tool} -k {name}), then pack what it makes")  # fmt: skip
    if name.endswith(".json"):  # img2dataset's --input_format json: one array of rows
        stem = name[: -len(".json")]
        return (f"if it is a list of rows (a JSON array of objects), make it JSONL, an object a "
                f"line: jq -c '.[]' {name} > {stem}.jsonl, then pack {stem}.jsonl; a COCO "
                "annotation file's dataset is the folder that holds annotations/")  # fmt: skip
    if name.endswith(".txt"):  # img2dataset's default --input_format: one URL a line
        stem = name[: -len(".txt")]
        return (
            f"if it lists image URLs one a line, make it a manifest with an image column: "
            f"(echo path; cat {name}) > {stem}.tsv, then pack {stem}.tsv; if each line is an "
            f"image's path and its label (Caffe's lists): (printf 'path\\tlabel\\n'; tr ' ' "
            f"'\\t' < {name}) > {stem}.tsv; else pass a folder of class folders "
            f"(SRC/<class>/<image>) or of CIFAR batches"
        )
    return "pass a folder of class folders (SRC/<class>/<image>) or of CIFAR batches"


def folder_entries(src: Storage, base: str = "") -> list[tuple[str, bool]]:
    """(name, is a folder) of each entry of SRC/base, sorted by name; a link counts as what it
    leads to, and nothing is read (a dangling link or a FIFO is listed, as a file).

    Raises:
        SourceError: the folder cannot be listed.
    """
    folder = next(src.walk_folders(base))  # its own listing only: nothing below is walked
    if (e := folder.error) is not None:
        where = src.path(base)
        raise SourceError(f"{where}: cannot list ({e.strerror or e}); check its permissions")
    files = [*folder.files, *(name for name, _ in folder.others)]
    return sorted([*((name, True) for name in folder.folders), *((name, False) for name in files)])


SOURCE = FolderSource()
