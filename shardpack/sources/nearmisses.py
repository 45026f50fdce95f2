"""Class names that probably say what was not meant, named in warnings (never refused): a
typo away from a larger class's, alike but for case in splits of their own, a missing value as
pandas spells it, numbers sorted as text, folders apart by the spaces around their names, and a
--classes name a typo away from a folder or a manifest's label it leaves out (a name that is
not UTF-8 is refused: classlist.check_class_name)."""

from __future__ import annotations

import operator
import unicodedata
from collections import Counter
from collections.abc import Iterable

from shardpack.errors import printable
from shardpack.sources.classlist import class_name
from shardpack.sources.source import Dataset
from shardpack.sources.spelling import near

# A class of at most this many images whose name is a typo away from a class with at least
# TYPO_RATIO times as many is named as a likely typo (`dgo`: 2 images, beside `dog`: 40).
TYPO_IMAGES = 5
TYPO_RATIO = 4


def near_misses(dataset: Dataset) -> tuple[str, ...]:
    """Warnings for class names that probably say what was not meant: a typo away from
    another's, the same but for case in splits of their own, a missing value as pandas spells
    it, numbers sorted as text."""
    classes = dataset.classes
    if len(classes) < 2:
        return ()
    per_split: dict[str, Counter[int]] = {}  # split -> class index -> images
    for split, items in dataset.splits.items():
        labels = Counter(map(operator.itemgetter(1), items))  # Item.label, counted in C
        counts = per_split[split] = Counter()
        for label, n in labels.items():
            for index in label if isinstance(label, tuple) else () if label is None else (label,):
                counts[index] += n
    counts = sum(per_split.values(), Counter())
    return (_typos(classes, counts) + _cased_apart(classes, per_split)
            + _missing(classes, counts) + _numbers_as_text(classes))  # fmt: skip


def _numbers_as_text(classes: tuple[str, ...]) -> tuple[str, ...]:
    """A warning where every class name is a number but the class list holds them out of
    numeric order (sorted as text, as torchvision's ImageFolder sorts folders: '10' before
    '2'): a label is then not the number its class is named by."""
    if not all(name.isdecimal() and name.isascii() for name in classes):
        return ()
    numeric = sorted(classes, key=lambda name: (int(name), name))
    moved = next((a for a, b in zip(classes, numeric, strict=True) if a != b), None)
    if moved is None:
        return ()
    given = ",".join(numeric) if len(numeric) <= 12 else "a file of them one a line (sort -n)"
    return (f"class names are numbers, sorted as text as torchvision's ImageFolder sorts "
            f"them: class '{moved}' is label {classes.index(moved)}; to number them in numeric "
            f"order, pass --classes {given}",)  # fmt: skip


def _typos(classes: tuple[str, ...], counts: Counter[int]) -> tuple[str, ...]:
    """A warning for each class of a handful of images named a typo away from a larger class."""
    warnings = []
    for index, name in enumerate(classes):
        n = counts[index]
        # (0: warned of as empty; "7" or "b" beside "1" or "a" is no typo)
        if not 0 < n <= TYPO_IMAGES or name.isdigit() or len(name) < 3:
            continue
        larger = (c for i, c in enumerate(classes) if counts[i] >= max(n, 1) * TYPO_RATIO)
        meant = near(name, larger)
        if meant is not None:
            m = counts[classes.index(meant)]
            warnings.append(f"class {name!r} ({n} image{'s' * (n != 1)}) is named a typo away "
                            f"from class {meant!r} ({m:,} images): if it is a typo, give its "
                            f"images the class {meant!r}")  # fmt: skip
    return tuple(warnings)


# How pandas and spreadsheets spell a missing value (pandas' default na_values): a label column
# made text with astype(str) holds 'nan' where a row had no label.
_MISSING = frozenset({"nan", "none", "null", "na", "n/a", "<na>", "#n/a", "nat"})


def _missing(classes: tuple[str, ...], counts: Counter[int]) -> tuple[str, ...]:
    """A warning for each class named as pandas spells a missing value ('nan', 'None', 'N/A'):
    most likely the images of rows without a label, all under one made-up class."""
    return tuple(
        f"class {name!r} ({counts[index]:,} image{'s' * (counts[index] != 1)}) is named as "
        "pandas writes a missing value: if those images have no label, leave their label "
        "empty (a row without one is skipped, named)"
        for index, name in enumerate(classes)
        if name.casefold() in _MISSING and counts[index]
    )


def _cased_apart(classes: tuple[str, ...], per_split: dict[str, Counter[int]]) -> tuple[str, ...]:
    """A warning for class names alike but for case where no split holds two of them
    (train/Cat, val/cat): one class spelt two ways, most likely, whose images each split labels
    apart, so that no label of the one split is ever seen in the other. Names alike but for
    case in one split are left alone: they are two classes there (EMNIST's `A` and `a`)."""
    spellings: dict[str, list[int]] = {}
    for index, name in enumerate(classes):
        spellings.setdefault(name.casefold(), []).append(index)
    warnings = []
    for indices in spellings.values():
        if len(indices) < 2:
            continue
        held = {split: [i for i in indices if counts[i]] for split, counts in per_split.items()}
        held = {split: found for split, found in held.items() if found}
        if len(held) < 2 or any(len(found) > 1 for found in held.values()):
            continue
        names = " and ".join(repr(classes[i]) for i in indices)
        where = "; ".join(f"{split}: {classes[found[0]]!r}" for split, found in held.items())
        warnings.append(f"classes {names} differ only in case, and no split holds two of them "
                        f"({where}): packed as {len(indices)} classes, each split's images "
                        "under a label the other splits never have; if they are one class, "
                        "give them one name")  # fmt: skip
    return tuple(warnings)


def spaced_apart(found: Iterable[str], where: str) -> list[str]:
    """A warning for each class whose folders' names differ by the spaces around them ('cat '
    beside 'cat'): class_name makes them one class, which a folder named by mistake means, but
    should not go unsaid. Names alike but for Unicode normalisation (macOS's NFD) are one name
    and said nothing of."""
    spellings: dict[str, set[str]] = {}
    for name in set(found):
        spellings.setdefault(class_name(name), set()).add(unicodedata.normalize("NFC", name))
    return [
        f"{where}: folders {' and '.join(repr(printable(n)) for n in sorted(names))} are one "
        f"class '{printable(name)}' (a class name is taken without the spaces around it); "
        "rename one if they are two classes"
        for name, names in sorted(spellings.items())
        if len(names) > 1
    ]


def folder_name_warnings(
    found: Iterable[str], pinned: tuple[str, ...] | None, where: str
) -> list[str]:
    """The near misses among class folders' names: folders apart by spaces, or where
    --classes pins the names (`pinned`), a name of it a typo away from a folder it leaves out."""
    return spaced_apart(found, where) if pinned is None else pinned_apart(found, pinned)


def pinned_apart(found: Iterable[str], pinned: tuple[str, ...], labels: bool = False) -> list[str]:
    """A warning for each --classes name that no class folder has (`labels`: no manifest row
    has as its label), where a folder (a label) it leaves out, its images skipped, is a typo
    away: `squares` pinned beside a folder `square`, `circel` beside rows labelled `circle`."""
    names = {class_name(name) for name in found}
    left_out = sorted(names - set(pinned))
    none, left = ("row's label", "class") if labels else ("class folder", "folder")
    whose = "rows" if labels else "images"
    return [
        f"--classes names class {printable(name)!r}, which no {none} is, and leaves out "
        f"{left} {printable(meant)!r} (its {whose} skipped): if they are one class, name it "
        f"{printable(meant)!r}"
        for name in pinned
        if name not in names and (meant := near(name, left_out)) is not None
    ]
