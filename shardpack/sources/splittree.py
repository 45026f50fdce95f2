"""Split trees: SRC/<split>/<class>/**/<image>, one split per first-level folder, one class list."""

from __future__ import annotations

from collections.abc import Mapping

from shardpack.errors import Option, OptionError, SourceError
from shardpack.options import SPLIT_NAMES, PackOptions, check_split_names
from shardpack.schema import Schema
from shardpack.sources.classlist import class_list, labelled
from shardpack.sources.folder import (
    Passed,
    empty_class_warnings,
    expected_layout,
    few,
    folder_entries,
    hidden,
    in_split_folders,
    left_out_by_classes,
    list_class_folders,
)
from shardpack.sources.nearmisses import folder_name_warnings
from shardpack.sources.source import Dataset, Item, Source
from shardpack.storage import Storage


def _folders(root: Storage) -> list[str]:
    """The first-level folders of SRC that are not hidden."""
    return [name for name, is_dir in folder_entries(root) if is_dir and not hidden(name)]


def is_split_tree(root: Storage, split_names: tuple[str, ...], named: bool = False) -> bool:
    """Whether every first-level folder of SRC (there is at least one) is a split name.

    Raises:
        SourceError: taken for class folders, every image would be labelled by its split:
            split folders are at least half of SRC's folders but not all (train/, val/ and
            a stray extras/; a class folder named test/ among more classes is a class), or
            every folder is a split name but for case (Train/), or --splits (`named`) names
            none of them.
    """
    folders = _folders(root)
    splits = [name for name in folders if name in split_names]
    if folders and len(splits) == len(folders):
        return True
    if named and not splits:
        holds = f"its folders are {few(folders)}" if folders else "it holds no folder"
        raise SourceError(f"{root.path()}: ", Option("split_names"), f" names none of its "
                          f"folders ({holds}); pass the names of its split folders, or drop ",
                          Option("split_names"))  # fmt: skip
    others = [name for name in folders if name not in split_names]
    if splits and len(splits) >= len(others):
        every = tuple(sorted(folders))  # a holdout/ of its own is a split --splits names
        named_so = (", pass ", Option("split_names", every), " if every one is a split")
        raise SourceError(
            f"{root.path()}: holds split folders ({few(splits)}) and others ({few(others)}): "
            "move the others out of SRC (a split tree holds split folders only)",
            *(named_so if _nameable(every) else ()),
            ", or pass ",
            Option("source", "folder"),
            " to take every folder as a class",
        )
    lowered = {name.lower() for name in split_names}
    if folders and all(name.lower() in lowered for name in folders):
        raise SourceError(
            f"{root.path()}: its folders {few(folders)} are split names but for case; pass ",
            Option("split_names", tuple(folders)),
            " to take them as splits, or ",
            Option("source", "folder"),
            " to take them as classes",
        )
    return False


def _nameable(folders: tuple[str, ...]) -> bool:
    """Whether --splits could name these folders: split names, none alike but for case."""
    try:
        check_split_names("split_names", folders)
    except OptionError:
        return False
    return len({name.casefold() for name in folders}) == len(folders)


def scan_split_tree(root: Storage, options: PackOptions) -> Dataset:
    """List a split tree: each split folder's class folders and images.

    The class list is the sorted union of every split's class folders (or --classes), so a
    label means the same class in every split; a class absent from a split counts 0 there.

    Raises:
        SourceError: no split holds an image.
    """
    passed = Passed()
    for name, is_dir in folder_entries(root):
        if not hidden(name) and not is_dir:
            passed.ignore(name)
    listings = {split: list_class_folders(root, passed, split) for split in _folders(root)}
    found_classes = [c for names, _, _ in listings.values() for c in names]
    classes = class_list(found_classes, options.classes)
    splits: dict[str, tuple[Item, ...]] = {}
    left_out: list[tuple[str, str]] = []
    warnings = folder_name_warnings(found_classes, options.classes, root.path())
    for split, (_, found, _) in listings.items():
        splits[split], skipped = labelled(found, classes, options.on_error)
        left_out += skipped
        if not found:  # a split folder left empty (its images not copied in): no split at all
            warnings.append(f"split folder {split!r} ({root.path(split)}) holds no image in a "
                            f"class folder: the pack has no split {split!r}")  # fmt: skip
    held = frozenset(item.label for items in splits.values() for item in items)
    for split, (_, _, empty) in listings.items():
        warnings += empty_class_warnings(root.path(split), empty, classes, held)
    images = sum(len(found) for _, found, _ in listings.values())
    if images and not any(splits.values()):
        raise left_out_by_classes(root.path(), images, found_classes)
    if not any(splits.values()):
        instead = in_split_folders(passed) or expected_layout(root, passed, splits=True)
        raise SourceError(f"{root.path()}: no images found; ", *instead)
    splits = {split: items for split, items in splits.items() if items}
    return passed.dataset("split-tree", root, Schema.build(classes), splits, left_out, warnings)


class SplitTreeSource(Source):
    """Split folders of class folders; found by --source auto only."""

    name = "split-tree"
    kinds = ("split-tree",)
    described = "split folders"
    splits_from = "its split folders"
    choosable = False
    own_options = ("split_names",)

    def check_options(self, options: PackOptions) -> None:
        """--splits' names, which go into shard file names."""
        check_split_names("split_names", options.split_names)

    def recognise(self, root: Storage, options: PackOptions) -> Storage | None:
        named = options.split_names != SPLIT_NAMES  # --splits given
        return root if is_split_tree(root, options.split_names, named) else None

    def scan(
        self, found: Storage, options: PackOptions, storage_options: Mapping[str, object] | None
    ) -> Dataset:
        return scan_split_tree(found, options)


SOURCE = SplitTreeSource()
