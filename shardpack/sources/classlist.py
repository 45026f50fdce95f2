"""The class list: found in the source (sorted union) or pinned by --classes, and labels by it."""

from __future__ import annotations

import codecs
import operator
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator

from shardpack.errors import Option, ShardpackError, SourceError, printable
from shardpack.sources.source import NO_FIELDS, Item
from shardpack.storage.atomic import NOT_A_NAME

# A --classes file holds one name a line; no real class list is anywhere near this large.
MAX_CLASSES_FILE = 64 * 2**20
# The most classes a dataset may have: ImageNet-21k has 21,841 and the largest label sets in
# use about a million, while each class costs a line of label.labels.txt, a name and a count per
# split in index.json: a stray integer label of 100,000,000 would build gigabytes of them.
MAX_CLASSES = 1_000_000
# Names that are a class list file's, not a class's: a typo in one is a missing file.
_LIST_FILES = (".txt", ".names", ".lst", ".csv")
# Characters that would split a class name over lines of TFDS's label.labels.txt or garble a
# terminal: control characters and line or paragraph separators.
_BAD_NAME_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})
# What os.fsdecode makes of each byte that is not UTF-8 (surrogateescape's U+DC80 to U+DCFF).
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


class Listing:
    """A walk's images as three columns: (class name, key, size) of each, iterated as such
    tuples. Columns, not a tuple each: a listing of 200,000 files held ~13 MB less while its
    Items were made (`python -m benchmarks.listing --pack`)."""

    __slots__ = ("keys", "names", "sizes")

    def __init__(self) -> None:
        self.names: list[str] = []  # each image's class name (one shared string a class)
        self.keys: list[str] = []  # path relative to SRC
        self.sizes: list[int | None] = []  # None: not known yet

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[tuple[str, str, int | None]]:
        return zip(self.names, self.keys, self.sizes, strict=True)

    def sort(self) -> None:
        """In key order."""
        order = sorted(range(len(self.keys)), key=self.keys.__getitem__)
        for column in (self.names, self.keys, self.sizes):
            column[:] = [column[i] for i in order]


def check_class_name(name: str, where: str | Option) -> None:
    """Refuse a class name (a folder's, a manifest's, from --classes or a CIFAR meta file at
    `where`) that is not one line of printable text."""
    if any(unicodedata.category(c) in _BAD_NAME_CATEGORIES for c in name):
        raise SourceError(
            where,
            f": the class name '{printable(name)}' holds a control character or a line "
            "break, but class names are written one per line: rename it",
        )
    if NOT_A_NAME.search(name):  # a JSON "\ud800": no text, nothing could write it out
        raise SourceError(where, f": the class name '{printable(name)}' holds a lone "
                          "surrogate, which is no text: rename it")  # fmt: skip
    if _NOT_UTF8.search(name):  # bytes os.fsdecode kept as surrogates: a Latin-1 folder name
        raise SourceError(where, f": the class name '{printable(name)}' is not UTF-8, and the "
                          "dataset card, croissant.json and TFDS hold names as UTF-8 text; "
                          "rename it in UTF-8 (convmv -f latin1 -t utf8 -r FOLDER lists the "
                          "renames of a tree)")  # fmt: skip


def check_class_names(names: tuple[str, ...], where: str, what: str) -> None:
    """Refuse the class list a source brings (`what` at `where`: a CIFAR meta file's names, a
    ClassLabel's, TFDS's label.labels.txt) that makes over MAX_CLASSES classes, holds a name
    that is not one line of printable text, or names one class twice: datasets' ClassLabel
    refuses such a list, and the name would no longer say which label it is."""
    check_class_count(len(names), where, what)
    for name in names:
        check_class_name(name, where)
    counts = Counter(names)  # not n**2
    twice = next((name for name, count in counts.items() if count > 1), None)
    if twice is not None:
        raise SourceError(f"{where}: two classes are named '{printable(twice)}'; give each "
                          "class a name of its own")  # fmt: skip


def class_name(text: str) -> str:
    """A class name as the dataset keeps it: NFC (macOS names files in NFD, so "café" can come
    in two spellings), without surrounding spaces (a CSV cell ", cat")."""
    return unicodedata.normalize("NFC", text.strip())


def parse_classes(text: str) -> tuple[str, ...]:
    """--classes: a comma-separated list, or the path of a file with one class name a line.

    Raises:
        ShardpackError: the file cannot be read (or, named like a list file, is missing), or
            the list is empty or repeats a name.
    """
    if os.path.isdir(text):
        raise ShardpackError(f"{text}: is a folder; pass a file with one class name a line, or "
                             "the names as a,b,c")  # fmt: skip
    if os.path.exists(text):  # a file, or a pipe: <(...), a FIFO, /dev/stdin
        try:
            with open(text, "rb") as f:
                data = f.read(MAX_CLASSES_FILE + 1)
        except OSError as e:
            raise ShardpackError(f"{text}: cannot read the class list ({e.strerror})") from None
        if len(data) > MAX_CLASSES_FILE:
            raise ShardpackError(f"{text}: over {MAX_CLASSES_FILE} bytes; is it a class list?")
        # lines end at \n alone: a name holding another line break is refused, not split;
        # a byte-order mark (Notepad's and Excel's "UTF-8 with BOM") is no part of a name
        data = data.removeprefix(codecs.BOM_UTF8)
        names = [class_name(line) for line in os.fsdecode(data).split("\n")]
        _refuse_comment(names, text)
        where = text
    elif "," not in text and text.lower().endswith(_LIST_FILES):
        raise ShardpackError(f"{text}: no such file; pass the class list's path, or the names "
                             "as a,b,c")  # fmt: skip
    else:
        names = [class_name(name) for name in text.split(",")]
        where = Option("classes")
    names = [name for name in names if name]
    if not names:
        raise ShardpackError(where, ": names no class; pass a,b,c or a file with one a line")
    check_class_count(len(names), where, "its names")  # before a name's characters are read
    for name in names:
        check_class_name(name, where)
    repeated = sorted(n for n, times in Counter(names).items() if times > 1)  # not n**2
    if repeated:
        raise ShardpackError(f"{where}: class {repeated[0]!r} is listed twice; list each once")
    return tuple(names)


def _refuse_comment(lines: list[str], where: str) -> None:
    """Refuse a class list file's line beginning with '#': a comment to its writer, a class to
    every reader of one name a line (TFDS's label.labels.txt), so taken either way it would
    shift or drop a label unseen."""
    number = next((n for n, line in enumerate(lines, 1) if line.startswith("#")), None)
    if number is not None:
        raise ShardpackError(
            f"{where} line {number}: '{printable(lines[number - 1])}' begins with '#', as a "
            "comment does, but every line of a class list is a class name; remove the line "
            "(for a class whose name begins with '#', pass the names as a,b,c)"
        )


def class_list(found: Iterable[str], pinned: tuple[str, ...] | None) -> tuple[str, ...]:
    """The dataset's classes: `pinned` as given, else the sorted union of the names found, each
    as class_name gives it (two folders "café" in NFC and NFD are one class)."""
    classes = pinned if pinned is not None else tuple(sorted({class_name(n) for n in found}))
    check_class_count(len(classes), "the source", "class names")
    return classes


def check_class_count(count: int, where: str, what: str) -> None:
    """Refuse a dataset of more than MAX_CLASSES classes; `what` says what made them."""
    if count > MAX_CLASSES:
        raise SourceError(f"{where}: {what} make {count:,} classes, over the {MAX_CLASSES:,} "
                          "shardpack packs; check the labels")  # fmt: skip


def labelled(
    found: Listing | list[tuple[str, str, int]], classes: tuple[str, ...], on_error: str
) -> tuple[tuple[Item, ...], list[tuple[str, str]]]:
    """The Item of each (class name, key, size), labelled by its class's position in `classes`.

    Returns:
        (the items, [(key, reason)] for those whose class is not in the list).

    Raises:
        SourceError: an item's class is not in the list and on_error is "fail".
    """
    position = {name: i for i, name in enumerate(classes)}
    for name in set(map(operator.itemgetter(0), found)) - position.keys():  # "café" in NFD
        if (i := position.get(class_name(name))) is not None:
            position[name] = i
    new = tuple.__new__
    # One comprehension over a listing of millions (not a loop with appends), each Item made by
    # tuple.__new__ from all its fields in order: Item(...) would run the named tuple's __new__,
    # a Python function (`python -m benchmarks.listing`).
    items = tuple([new(Item, (key, position[name], key, size, None, NO_FIELDS))
                   for name, key, size in found if name in position])  # fmt: skip
    skipped = []
    if len(items) < len(found):  # some class is not in --classes: say which items, in order
        for name, key, _ in found:
            if name in position:
                continue
            reason = f"class {name!r} is not in --classes"
            if on_error == "fail":
                raise SourceError(f"{key}: {reason}; add it to the list, or pass ",
                                  Option("on_error", "skip"))  # fmt: skip
            skipped.append((key, reason))
    return items, skipped
