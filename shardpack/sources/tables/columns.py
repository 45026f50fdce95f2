"""Which column is what: the image path, `label`, `split`, and the extra features."""

from __future__ import annotations

import dataclasses

from shardpack.errors import SourceError
from shardpack.schema import BUILTIN_NAMES, LABEL
from shardpack.sources.tables.chunks import Chunk, check_names

PATH_COLUMNS = ("path", "image", "file", "file_name", "filename")
SPLIT = "split"


@dataclasses.dataclass(frozen=True)
class Layout:
    path: str
    labelled: bool
    has_split: bool
    extras: tuple[str, ...]  # sorted

    @classmethod
    def of(cls, manifest: str, names: list[str], path_column: str | None) -> Layout:
        check_names(manifest, names)  # JSONL's keys: CSV and Parquet headers are checked first
        found = ", ".join(names) or "none"
        if path_column is not None:
            if path_column not in names:
                raise SourceError(
                    f"{manifest}: has no column {path_column!r} (columns: {found}); pass the "
                    "column that names each image as --path-column"
                )
        else:
            candidates = [n for n in PATH_COLUMNS if n in names]
            if len(candidates) != 1:
                which = "no image column" if not candidates else "several image columns"
                raise SourceError(
                    f"{manifest}: {which} (columns: {found}); name the column of image paths "
                    f"one of {', '.join(PATH_COLUMNS)}, or pass it as --path-column"
                )
            path_column = candidates[0]
        extras = tuple(sorted(n for n in names if n not in (path_column, LABEL, SPLIT)))
        for name in extras:
            if name in BUILTIN_NAMES:
                raise SourceError(
                    f"{manifest}: column {name!r} has the name of a built-in feature "
                    f"({', '.join(BUILTIN_NAMES)}); rename the column"
                )
        return cls(path_column, LABEL in names, SPLIT in names, extras)


def column_names(chunks: list[Chunk], path: str) -> list[str]:
    """The column names in order of first appearance (in JSONL a key may first come late)."""
    names: dict[str, None] = {}
    for chunk in chunks:
        if chunk.lines:
            names.update(dict.fromkeys(chunk.columns))
    if not names:
        raise SourceError(f"{path}: holds no rows; add one row per image")
    return list(names)
