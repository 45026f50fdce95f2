"""Finding a manifest (the file SRC is, or a folder's metadata file) and naming its rows.

No numpy here: recognising SRC and `pack --help` stay light.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from shardpack.errors import SourceError
from shardpack.storage import Storage, storage_at

SUFFIXES = (".csv", ".tsv", ".jsonl", ".parquet")
METADATA_FILES = ("metadata.csv", "metadata.jsonl", "metadata.parquet")  # Hugging Face ImageFolder
# A list compressed whole (img2dataset reads csv.gz, tsv.gz, jsonl.gz and txt.gz), which
# shardpack reads once decompressed.
_COMPRESSIONS = {".gz": "gunzip", ".bz2": "bunzip2", ".xz": "unxz", ".zst": "unzstd"}
_LISTS = (".csv", ".tsv", ".jsonl", ".json", ".txt")


def compressed_list(name: str) -> str | None:
    """The command that decompresses a file named as a compressed list (`urls.csv.gz`:
    gunzip), else None."""
    stem, dot, kind = name.rpartition(".")
    tool = _COMPRESSIONS.get(f".{kind.lower()}")
    return tool if dot and tool is not None and stem.lower().endswith(_LISTS) else None


def line_name(path: str, line: int) -> str:
    """How messages name a manifest's line: "labels.csv line 7", lines counted from 1 as editors
    show them; a Parquet file's row: "shots.parquet row 0", counted from 0 as pandas and pyarrow
    index rows."""
    return f"{os.path.basename(path)} {row_unit(path)} {line}"


# how line_name's words begin a bad row's reason: "labels.csv line 7: why"
_NAMED_LINE = r"([^:/]+) (?:line|row) (\d+): "


def named_line(reason: str) -> tuple[str, int] | None:
    """The (file name, line or row) a bad row's reason begins by naming (line_name), else None."""
    found = re.match(_NAMED_LINE, reason)
    return (found[1], int(found[2])) if found else None


def row_unit(path: str) -> str:
    """What a manifest's rows are called in messages: a Parquet file's rows, others' lines."""
    return "row" if path.lower().endswith(".parquet") else "line"


def manifest_file(
    src: Storage | str | os.PathLike, storage_options: Mapping[str, object] | None = None
) -> Storage | None:
    """The manifest SRC is (a .csv/.tsv/.jsonl/.parquet file) or holds (metadata.*): a Storage
    rooted at that file (read it as read("") or open("")); None when there is none.

    Raises:
        SourceError: SRC is a file of another kind, or a folder holding several metadata files.
        StorageError: a URL's filesystem package is missing.
    """
    src = storage_at(src, storage_options)
    if src.kind() == "dir":
        found = [n for n in METADATA_FILES if src.lexists(n)]
        if len(found) > 1:
            raise SourceError(
                f"{src.path()}: holds {' and '.join(found)}; keep one metadata file, or pass "
                "the one to pack as SRC"
            )
        return src.child(found[0]) if found else None
    if not src.lexists():
        return None
    if not src.path().lower().endswith(SUFFIXES):
        raise SourceError(
            f"{src.path()}: is a file of unknown kind; pass a folder of images, or a manifest "
            f"ending in {', '.join(SUFFIXES)}"
        )
    return src
