"""Which column is what: the image path, the label (`label`, or --label-column's), `split`, and
the extra features."""

from __future__ import annotations

import dataclasses
import os

from shardpack.errors import Option, SourceError
from shardpack.options import escaped_column
from shardpack.schema import BOX_NAMES, BUILTIN_NAMES, LABEL
from shardpack.sources.spelling import near
from shardpack.sources.tables.chunks import Chunk, check_names, no_rows

PATH_COLUMNS = ("path", "image", "file", "file_name", "filename")
SPLIT = "split"
# Names a table's column of labels often has (Kaggle's, pandas users'): a manifest with no
# label column but one of these is told of --label-column rather than packed unlabeled.
LABEL_LIKE = ("class", "category", "target", "labels", "class_name", "classname", "label_name",
              "breed", "species", "diagnosis", "y")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Layout:
    path: str
    label: str | None  # the column of labels; None: an unlabeled dataset
    has_split: bool
    extras: tuple[str, ...]  # sorted by their features' names
    warnings: tuple[str, ...] = ()  # a `label` or `split` column missing, one named nearly so
    suffix: str = ""  # --path-suffix: written after each image path
    # (column, feature) of each extra column whose feature is named otherwise (--columns)
    renamed: tuple[tuple[str, str], ...] = ()

    @property
    def read(self) -> list[str]:
        """The columns a row is made of, in the file's terms: the rest need not be read."""
        taken = (self.path, self.label, SPLIT if self.has_split else None, *self.extras)
        return [name for name in taken if name is not None]

    def feature(self, column: str) -> str:
        """The name of an extra column's feature."""
        return dict(self.renamed).get(column, column)

    @classmethod
    def of(
        cls, manifest: str, names: list[str], path_column: str | None,
        label_column: str | None = None, path_suffix: str | None = None,
        columns: dict[str, str] | None = None, boxes: tuple[str, ...] = (),
        first: dict[str, object] | None = None,
    ) -> Layout:  # fmt: skip
        """Which column is what in a manifest of these column names. `columns` (--columns):
        column -> feature name of the extra columns to keep (None: every one, as it is named);
        `boxes`: --box-columns' columns, kept with them (a missing one is said by its own
        check); `first`: the first row's values, where read (NoImageColumn carries them).

        Raises:
            SourceError: a column named is not there (with the one meant), or is a built-in
                feature's name; NoImageColumn: no column is the images' nor named like it.
        """
        check_names(manifest, names)  # JSONL's keys: CSV and Parquet headers are checked first
        found = ", ".join(names) or "none"
        label = _label_column(manifest, names, label_column, found)
        if path_column is not None:
            if path_column not in names:
                meant = _meant(path_column, names)  # LAION's `URL` for img2dataset's url_col
                raise SourceError(
                    f"{manifest}: has no column {path_column!r} (columns: {found}); pass the "
                    "column that names each image as ",
                    Option("path_column", meant) if meant else Option("path_column"),
                )
        else:
            candidates = [n for n in PATH_COLUMNS if n in names]
            meant = _meant_path(names) if not candidates else None
            if meant is not None:
                raise SourceError(f"{manifest}: no image column: did you mean {meant!r}? "
                                  f"(columns: {found}); pass ",
                                  Option("path_column", meant))  # fmt: skip
            if len(candidates) != 1:
                which = "no image column" if not candidates else "several image columns"
                head = f"{manifest}: {which} (columns: {found})"
                said = (f"{head}; name the column of image paths one of "
                        f"{', '.join(PATH_COLUMNS)}, or pass it as ",
                        Option("path_column"))  # fmt: skip
                if candidates:
                    raise SourceError(*said)
                raise NoImageColumn(*said, first=first, head=head)
            path_column = candidates[0]
        if label == path_column:
            raise SourceError(f"{manifest}: column {label!r} is both the image paths and the "
                              "labels; pass the column of labels as ",
                              Option("label_column"))  # fmt: skip
        taken = (path_column, label, SPLIT)
        if columns is None:
            extras = tuple(sorted(n for n in names if n not in taken))
            renamed: dict[str, str] = {}
            split: tuple[str, ...] = ()
            _refuse_built_in(manifest, extras)
        else:  # a feature's name is checked by _chosen
            split = _split(manifest, names, columns)
            renamed = _chosen(manifest, names, columns, boxes, taken, found)
            extras = tuple(sorted(renamed, key=renamed.__getitem__))
        renamed = {column: name for column, name in renamed.items() if column != name}
        warnings = tuple(
            f"{os.path.basename(manifest)}: no {column!r} column: did you mean {meant!r}? "
            f"(taken as a feature; rename it {column!r} to {what})"
            for column, what in ((LABEL, "label the images"), (SPLIT, "split them"))
            if column not in names
            and (meant := near(column, extras))
            and (column != LABEL or label is None)
        )
        if label is None and not warnings:
            warnings = _label_like(manifest, extras)
        return cls(
            path_column,
            label,
            SPLIT in names,
            extras,
            (*split, *warnings),
            path_suffix or "",
            tuple(renamed.items()),
        )


class NoImageColumn(SourceError):
    """A manifest has no column of image paths nor one named like it; `first`: its first
    row's values, where read (which of them names an image is for the caller to look); `head`:
    the message's first clause, which names the manifest and its columns."""

    def __init__(
        self, *parts: object, first: dict[str, object] | None = None, head: str = ""
    ) -> None:
        super().__init__(*parts)
        self.first, self.head = first or {}, head or str(self)


def _refuse_built_in(manifest: str, extras: tuple[str, ...]) -> None:
    """Refuse an extra column named as a built-in feature."""
    for name in extras:
        if name in BUILTIN_NAMES:
            raise SourceError(
                f"{manifest}: column {name!r} has the name of a built-in feature "
                f"({', '.join(BUILTIN_NAMES)}); rename the column, or name its feature "
                "otherwise with ",
                Option("columns", (f"{name}=original_{name}", "...")),
                " (the columns to keep)",
            )


def _split(manifest: str, names: list[str], columns: dict[str, str]) -> tuple[str, ...]:
    """A warning for each column holding a ',' or '=' that --columns' entries, read as they
    are, cut into columns there are (its name spells entries in a row: 'a,b' kept as columns
    'a' and 'b'), a column's name written \\, or \\= to be one.

    Raises:
        SourceError: the entries so cut name a column that is not there: they meant it whole.
    """
    said = [column if feature == column else f"{column}={feature}"
            for column, feature in columns.items()]  # fmt: skip
    kept = list(columns)
    warnings = []
    for name in names:
        if name in columns or not {",", "="} & set(name):
            continue
        spelled = ",".join(_entry_as_read(piece) for piece in name.split(","))
        at = next(((i, j) for i in range(len(said)) for j in range(i + 1, len(said) + 1)
                   if ",".join(said[i:j]) == spelled), None)  # fmt: skip
        if at is None:
            continue
        cut, meant = said[slice(*at)], escaped_column(name)
        if any(column not in names for column in kept[slice(*at)]):
            raise SourceError(f"{manifest}: ", Option("columns"), f" cuts column {name!r} at its "
                              f"{'comma' if ',' in name else 'equals sign'}; write it {meant}: "
                              "a ',' or '=' in a column's name is written \\, or \\= (a "
                              "backslash \\\\)")  # fmt: skip
        warnings.append(f"{os.path.basename(manifest)}: column {name!r} is not kept, though the "
                        f"columns kept ({', '.join(map(repr, cut))}) spell its name; a ',' or "
                        f"'=' in a name is written \\, or \\=: {meant}")  # fmt: skip
    return tuple(warnings)


def _entry_as_read(text: str) -> str:
    """A --columns entry written unescaped as its column and feature are read: each stripped."""
    column, equals, feature = text.partition("=")
    return column.strip() + equals + feature.strip()


def _chosen(
    manifest: str, names: list[str], columns: dict[str, str], boxes: tuple[str, ...],
    taken: tuple[str | None, ...], found: str,
) -> dict[str, str]:  # fmt: skip
    """Column -> feature of the extra columns --columns keeps (with the box columns there).

    Raises:
        SourceError: a column named is not there (with the one meant), is the image's, the
            label's or the split's, or two features would share a name or take a built-in one.
    """
    kept = {name: name for name in boxes if name in names}
    for column, feature in columns.items():
        if column not in names:
            meant = _meant(column, names)
            said = f": did you mean {escaped_column(meant)!r}?" if meant else ""
            raise SourceError(f"{manifest}: ", Option("columns"), f" names {column!r}, which is "
                              f"not one of its columns{said} (columns: {found})")  # fmt: skip
        if column in taken:
            what = ("image paths", "labels", "splits")[taken.index(column)]
            raise SourceError(f"{manifest}: ", Option("columns"), f" names {column!r}, the "
                              f"column of {what}, which is always taken; leave it out of ",
                              Option("columns"))  # fmt: skip
        if column != feature and {column, feature} & {*boxes, *BOX_NAMES}:
            raise SourceError(f"{manifest}: ", Option("columns"), f" names {column}={feature}: "
                              "boxes are found by their feature's name (the column's), moved "
                              f"with the pixels; keep it {column!r}")  # fmt: skip
        kept[column] = feature
    features: set[str] = set()
    for column, feature in kept.items():
        if feature in (*BUILTIN_NAMES, LABEL, SPLIT, *features):
            why = (f"{feature!r} is a built-in feature's name" if feature in BUILTIN_NAMES
                   else f"{feature!r} is the {'labels' if feature == LABEL else 'splits'}' name"
                   if feature in (LABEL, SPLIT)
                   else f"another kept column's feature is named {feature!r} too")  # fmt: skip
            raise SourceError(f"{manifest}: ", Option("columns"), f" names {column}={feature}: "
                              f"{why}; name that feature otherwise")  # fmt: skip
        features.add(feature)
    return kept


def _label_column(
    manifest: str, names: list[str], label_column: str | None, found: str
) -> str | None:
    """The column of labels: --label-column's (which must be there, and no other named
    `label` beside it), else `label` where there is one."""
    if label_column is None:
        return LABEL if LABEL in names else None
    if label_column not in names:
        meant = _meant(label_column, names)
        said = Option("label_column", meant) if meant else Option("label_column")
        raise SourceError(f"{manifest}: has no column {label_column!r} (columns: {found}); pass "
                          "the column that labels each image as ", said)  # fmt: skip
    if label_column != LABEL and LABEL in names:
        raise SourceError(f"{manifest}: has a column 'label' beside {label_column!r}, the "
                          "labels by ", Option("label_column", label_column), "; rename or "
                          "drop the column 'label'")  # fmt: skip
    return label_column


def _meant(column: str, names: list[str]) -> str | None:
    """The column probably meant by a name the table lacks: one spelled alike but for case
    (`URL`, `TEXT` in LAION's lists), else one a typo away."""
    alike = [name for name in names if name.lower() == column.lower()]
    return alike[0] if len(alike) == 1 else near(column, names)


def _label_like(manifest: str, extras: tuple[str, ...]) -> tuple[str, ...]:
    """A warning where an unlabeled manifest has a column named as labels often are."""
    like = [name for name in extras if name.lower() in LABEL_LIKE]
    if len(like) != 1:
        return ()
    return (f"{os.path.basename(manifest)}: no 'label' column, so the images are packed "
            f"unlabeled and {like[0]!r} as a feature; if {like[0]!r} labels them, pass "
            f"--label-column {like[0]}",)  # fmt: skip


def _meant_path(names: list[str]) -> str | None:
    """The column that probably names each image, where none has a name of PATH_COLUMNS: one a
    typo away from them, or the one naming a path, a file or a URL (`filepath`, `image_path`,
    LAION's `URL`)."""
    for name in names:
        if near(name, PATH_COLUMNS):
            return name
    words = ("path", "file", "image", "url")
    holding = [n for n in names if any(word in n.lower() for word in words)]
    return holding[0] if len(holding) == 1 else None


def column_names(chunks: list[Chunk], path: str) -> list[str]:
    """The column names in order of first appearance (in JSONL a key may first come late)."""
    names: dict[str, None] = {}
    for chunk in chunks:
        if chunk.lines:
            names.update(dict.fromkeys(chunk.columns))
    if not names:
        raise no_rows(path, (problem for chunk in chunks for problem in chunk.problems))
    return list(names)
