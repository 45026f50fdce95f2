"""The class-folder source: SRC/<class>/**/<image>, one class per first-level folder."""

from __future__ import annotations

import operator
import os
import stat
from collections.abc import Iterable, Mapping

from shardpack.errors import Option, SourceError
from shardpack.options import SPLIT_NAMES, PackOptions
from shardpack.schema import Schema
from shardpack.sources import cifar
from shardpack.sources.classlist import check_class_name, class_list, labelled
from shardpack.sources.scanned import listed
from shardpack.sources.source import Dataset, Item, Source, folder_only
from shardpack.storage import Storage
from shardpack.storage.srcfiles import not_regular

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
_ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip")  # what a dataset is downloaded as


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


def _hidden(name: str) -> bool:
    return name.startswith(".")


def _is_image_name(name: str) -> bool:
    return "." in name and "." + name.rpartition(".")[2].lower() in IMAGE_EXTENSIONS


# The extensions without their dot, for the walk's inline test (no function call per file).
_SUFFIXES = frozenset(ext[1:] for ext in IMAGE_EXTENSIONS)


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
    classes = class_list(found_classes, options.classes)
    items, left_out = labelled(found, classes, options.on_error)
    if found and not items:
        raise left_out_by_classes(src.path(), len(found), found_classes)
    if not items:
        raise SourceError(f"{src.path()}: no images found; ", *_nothing_found(src))
    return passed.dataset("folder", src, Schema.build(classes), {"train": items}, left_out,
                          empty_class_warnings(src.path(), empty, classes))  # fmt: skip


# Split folders number a few (train, val, test); a tree of more first-level folders is classes.
_MOST_SPLITS = 5


def _refuse_split_like(
    src: Storage, folders: tuple[str, ...], found: list[tuple[str, str, int]]
) -> None:
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
    raise SourceError(
        f"{src.path()}: its folders {few(folders)} each hold the same folders ({few(shared)}), "
        "as a split tree's split folders hold classes; pass ",
        Option("split_names", tuple(folders)),
        " to take them as splits, or ",
        Option("source", "folder"),
        " to take them as classes",
    )


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
) -> tuple[tuple[str, ...], list[tuple[str, str, int]], list[str]]:
    """The class folders of SRC/base and their images, sorted by key; what is not an image
    goes to `passed`.

    Returns:
        (class names, [(class name, key, size)] with keys relative to SRC, the names of the
        class folders that hold no image).
    """
    root = src.local_path()
    if root is None:  # a walk of os.scandir per folder would be a request per folder
        return _list_class_objects(src, passed, base)
    top = os.path.join(root, base) if base else root
    try:
        entries = sorted(os.scandir(top), key=lambda e: e.name)
    except OSError as e:
        raise SourceError(f"{top}: cannot list ({e.strerror}); check its permissions") from None
    classes = tuple(e.name for e in entries if not _hidden(e.name) and e.is_dir())
    for name in classes:
        check_class_name(name, top)
    for e in entries:
        if not _hidden(e.name) and not e.is_dir():
            passed.ignore(f"{base}/{e.name}" if base else e.name)
    found: list[tuple[str, str, int]] = []
    # Claim the folder and every class folder up front: a link from one class into another (or
    # back to the folder) must not list the other class's images under the wrong label.
    class_dirs: dict[tuple[int, int], str] = {}
    for name in classes:
        first = class_dirs.setdefault(_dir_id(os.path.join(top, name)), name)
        if first != name:
            raise SourceError(
                f"{os.path.join(top, name)}: is the same folder as {os.path.join(top, first)} "
                "(a link); one folder cannot be two classes: remove the link"
            )
    seen_dirs = {_dir_id(top), *class_dirs}
    empty = []
    for name in classes:
        before, rel = len(found), f"{base}/{name}" if base else name
        _walk_images(root, name, rel, seen_dirs, passed, found)
        unlisted = any(key == f"{rel}/" for key, _ in passed.skipped[-1:])
        if len(found) == before and not unlisted:  # one that cannot be listed: skipped, why
            empty.append(name)
    found.sort(key=operator.itemgetter(1))
    return classes, _fill_sizes(root, found), empty


def empty_class_warnings(top: str, empty: list[str], classes: tuple[str, ...]) -> list[str]:
    """One warning for each class folder of `top` that holds no images (and is in the list)."""
    return [
        f"class '{name}' ({os.path.join(top, name)}) holds no images: it keeps label "
        f"{classes.index(name)} with no records"
        for name in empty
        if name in classes
    ]


def _nothing_found(src: Storage) -> tuple[str | Option, ...]:
    """What SRC holds instead of class folders with images, and what to pass instead (as the
    parts of a message)."""
    entries = folder_entries(src)
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
    if archives:
        return (f"it holds {archives[0]}: extract it, then pass the folder it makes",)
    loose = sum(1 for name, is_dir in entries if not is_dir and _is_image_name(name))
    if loose:
        root = src.path()
        parent, name = os.path.dirname(root), os.path.basename(root)
        way = "move them into class folders"
        on_disk = src.local_path() is not None
        if on_disk and _only_entry(parent, name):  # else the parent packs its others too
            way += f", or pass {parent} to pack {name} as one class"
        return (f"its {loose} images lie in SRC itself, but each class needs its own folder "
                f"(SRC/<class>/<image>): {way}",)  # fmt: skip
    return (f"expected SRC/<class>/<image> with extensions {', '.join(sorted(IMAGE_EXTENSIONS))}",)


def _only_entry(folder: str, name: str) -> bool:
    """Whether `name` is the only folder in `folder` (hidden ones aside): a scan of `folder`
    would take no other class."""
    try:
        with os.scandir(folder) as entries:
            return all(e.name == name or e.name.startswith(".") or not e.is_dir() for e in entries)
    except OSError:
        return False


def _dir_id(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _fill_sizes(root: str, found: list[tuple[str, str, int | None]]) -> list[tuple[str, str, int]]:
    """`found` with a size for each file the walk left without: its own for the first
    SIZED_FILES files and every SIZE_STRIDE-th after them, the mean of those for the rest."""
    sample = [*range(min(SIZED_FILES, len(found))), *range(SIZED_FILES, len(found), SIZE_STRIDE)]
    sizes = []
    for i in sample:
        label, key, size = found[i]
        if size is None:
            try:  # no link to follow: the walk saw a regular file
                size = os.stat(os.path.join(root, key), follow_symlinks=False).st_size
            except OSError:  # gone since: the worker's skip will say so
                size = 0
            found[i] = (label, key, size)
        sizes.append(size)
    if len(sample) == len(found):
        return found  # every file has its own size
    mean = round(sum(sizes) / len(sizes))
    return [(label, key, mean if size is None else size) for label, key, size in found]


def _walk_images(
    root: str,
    label: str,
    top: str,
    seen_dirs: set[tuple[int, int]],
    passed: Passed,
    found: list[tuple[str, str, int | None]],
) -> None:
    """Add (label, relative path, size) of each image under root/top to `found`, each folder
    once, a folder's images in name order; what is not an image goes to `passed`. Links are
    followed to folders and regular files only. A regular file (told by the directory entry's
    type, no syscall) gets size None: _fill_sizes gives it one. Per file this is the listing's
    hot loop."""
    pending = [top]
    while pending:
        rel_dir = pending.pop()
        path = os.path.join(root, rel_dir)
        try:
            if rel_dir != top:
                folder = _dir_id(path)
                if folder in seen_dirs:
                    continue  # a link to a folder already walked or claimed: follow it once
                seen_dirs.add(folder)
            entries = list(os.scandir(path))
        except OSError as e:
            why = (e.strerror or str(e)).lower()  # "cannot list (permission denied)"
            passed.skipped.append((f"{rel_dir}/", f"cannot list ({why})"))
            continue
        files, subfolders, ignored = [], [], []
        for entry in entries:  # in the directory's order: each list is sorted below, by name
            name = entry.name
            if name.startswith("."):
                continue  # hidden
            _, dot, ext = name.rpartition(".")
            if not dot or (ext not in _SUFFIXES and ext.lower() not in _SUFFIXES):
                # the entry's d_type: no syscall unless it is a link
                (subfolders if entry.is_dir() else ignored).append(name)
            elif entry.is_file(follow_symlinks=False):
                files.append(name)
            else:  # a link, a special file, or a file system without d_type: stat it
                _stat_image(entry, label, f"{rel_dir}/{name}", subfolders, passed, found)
        found.extend([(label, f"{rel_dir}/{name}", None) for name in sorted(files)])
        listed(len(files) + len(ignored))
        for name in sorted(ignored):
            passed.ignore(f"{rel_dir}/{name}")
        pending.extend([f"{rel_dir}/{name}" for name in sorted(subfolders, reverse=True)])


def _stat_image(
    entry: os.DirEntry,
    label: str,
    rel: str,
    subfolders: list[str],
    passed: Passed,
    found: list[tuple[str, str, int | None]],
) -> None:
    """An image name that is not a plain regular file: a link is followed to a regular file
    (listed with its size) or a folder (walked); anything else is skipped, never opened."""
    try:
        st = entry.stat()
    except OSError:  # dangling link: kept, so that the worker's skip says why
        found.append((label, rel, 0))
        return
    if stat.S_ISREG(st.st_mode):
        found.append((label, rel, st.st_size))
    elif stat.S_ISDIR(st.st_mode):
        subfolders.append(entry.name)
    else:
        passed.skipped.append((rel, not_regular(st.st_mode)))


def instead_of_file(path: str) -> str:
    """What to pass instead of a file given as SRC, judged by its name."""
    parent = os.path.dirname(path)
    name = os.path.basename(path)
    if any(name in batches or name == meta for batches, meta in cifar.LAYOUTS.values()):
        return f"it is a CIFAR file: pass the folder that holds it, {parent}"
    if name.endswith(_ARCHIVES):
        return "it is an archive: extract it (tar xf / unzip), then pass the folder it makes"
    if _is_image_name(name):
        return (
            f"it is an image: pass the folder above its class folder, {os.path.dirname(parent)} "
            f"(SRC/<class>/<image>, here with {os.path.basename(parent)} as the class)"
        )
    return "pass a folder of class folders (SRC/<class>/<image>) or of CIFAR batches"


# ---- object stores ---------------------------------------------------------------------------


def folder_entries(src: Storage, base: str = "") -> list[tuple[str, bool]]:
    """(name, is a folder) of each entry of SRC/base, sorted by name.

    Raises:
        SourceError: the folder cannot be listed.
    """
    try:
        if (path := src.local_path(base)) is not None:  # scandir: a dangling link or a FIFO
            return sorted((e.name, e.is_dir()) for e in os.scandir(path))  # is listed unread
        return [(e.name, e.is_dir) for e in src.listdir(base)]
    except OSError as e:
        where = src.path(base)
        raise SourceError(
            f"{where}: cannot list ({e.strerror or e}); check its permissions"
        ) from None


def _list_class_objects(
    src: Storage, passed: Passed, base: str
) -> tuple[tuple[str, ...], list[tuple[str, str, int]], list[str]]:
    """list_class_folders from one recursive listing (an object store's paginated list): the
    same classes, items and files passed over, in the same order, as the walk of a disk."""
    top = src.path(base)
    try:
        listing = list(src.walk(base))
    except OSError as e:
        raise SourceError(f"{top}: cannot list ({e}); check its permissions") from None
    prefix = f"{base}/" if base else ""
    holds_images: dict[str, bool] = {}  # class name -> whether an image is below it
    found: list[tuple[str, str, int]] = []
    ignored = []
    for entry in listing:
        parts = entry.name.split("/")
        if any(part.startswith(".") for part in parts):
            continue  # hidden, or below a hidden folder
        if len(parts) == 1:
            ignored.append(prefix + entry.name)  # a file beside the class folders
            continue
        holds_images.setdefault(parts[0], False)
        if _is_image_name(parts[-1]):
            found.append((parts[0], prefix + entry.name, entry.size))
            holds_images[parts[0]] = True
        else:
            ignored.append(prefix + entry.name)
    classes = tuple(sorted(holds_images))
    for name in classes:
        check_class_name(name, top)
    for rel in sorted(ignored, key=_walk_order):
        passed.ignore(rel)
    found.sort(key=operator.itemgetter(1))
    return classes, found, [name for name in classes if not holds_images[name]]


def _walk_order(rel: str) -> list[tuple[int, str]]:
    """Sorts paths as a walk meets them: a folder's files by name, then its folders."""
    *folders, name = rel.split("/")
    return [(1, folder) for folder in folders] + [(0, name)]


SOURCE = FolderSource()
