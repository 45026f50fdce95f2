"""A manifest opened without following links, read as chunks: rows held as columns."""

from __future__ import annotations

import codecs
import errno
import io
import itertools
import posixpath
from collections.abc import Iterable, Iterator, Sequence
from typing import BinaryIO, NamedTuple

from shardpack.errors import SourceError
from shardpack.sources.source import a_link
from shardpack.storage import Blob, Storage

# A JSONL or CSV line longer than this is not a manifest row: COCO's most crowded image (~90
# boxes) is ~4 KB as JSON; a long caption ~2 KB. The bound keeps a file without newlines (a
# binary renamed .jsonl) from being read into memory whole.
MAX_LINE_BYTES = 1 << 20
# A text value longer than this (a path, a caption, a class name) is a bad row. It equals the
# csv module's own field limit: a CSV cell beyond it is read again on its own (one line) or,
# quoted over many lines, stops the read as a quote never closed.
MAX_TEXT_CHARS = 131_072
# Rows read and typed a column at a time (a Parquet batch; CSV/JSONL lines): C-speed checks
# over a column in place of Python code per cell, and a bounded transient per chunk.
CHUNK_ROWS = 16_384
READ_BYTES = 1 << 20  # CSV/JSONL are read and decoded this much (and the rest of a line) at once


class Chunk(NamedTuple):
    """Up to CHUNK_ROWS consecutive rows of the file, held as columns of their raw values."""

    lines: list[int]  # each row's line (CSV/JSONL, 1 = first) or row (Parquet, 0 = first)
    columns: dict[str, Sequence]  # name -> the rows' values (None where a JSONL key is absent)
    problems: list[tuple[int, str]]  # (line, why) of the lines that are not rows
    numbers: frozenset[str] = frozenset()  # Parquet: the columns the file types as numbers


def open_table(table: Storage) -> BinaryIO:
    """Open a manifest for reading without following a link; refuse anything but a file."""
    path = table.path()
    try:
        blob = table.open("")  # a disk's: O_NOFOLLOW, and O_NONBLOCK so a FIFO never blocks
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise a_link(table) from None
        if e.errno == errno.EINVAL:
            raise SourceError(f"{path}: is not a regular file; pass a manifest file") from None
        why = e.strerror or e
        raise SourceError(f"{path}: cannot open ({why}); check its permissions") from None
    return io.BufferedReader(_BlobFile(blob), READ_BYTES)


class _BlobFile(io.RawIOBase):
    """A Blob as a file object (read, readline, seek) for the CSV/JSON readers and pyarrow."""

    def __init__(self, blob: Blob) -> None:
        self.blob, self.at = blob, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.blob.pread(len(buffer), self.at)
        buffer[: len(data)] = data
        self.at += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.at = offset + (0, self.at, self.blob.size)[whence]
        return self.at

    def tell(self) -> int:
        return self.at

    def close(self) -> None:
        if not self.closed:
            self.blob.close()
        super().close()


def text_lines(path: str, f: BinaryIO) -> Iterator[str]:
    """The file's lines as text (split at "\\n" only, as readline does), each bounded and
    checked to be UTF-8; read and decoded a block of whole lines at a time."""
    return itertools.chain.from_iterable(text_blocks(path, f))


def text_blocks(path: str, f: BinaryIO, first_line: int = 0) -> Iterator[list[str]]:
    """The file's lines (from `first_line` lines in: a streamed range's), a block at a time."""
    n = first_line  # lines before this block
    while block := f.read(READ_BYTES):
        if not block.endswith(b"\n"):
            block += f.readline(MAX_LINE_BYTES + 1)  # the rest of the last line, bounded
        if not n and b"\n" not in block and b"\r" in block.rstrip(b"\r"):  # the first block
            raise SourceError(f"{path}: its lines end in a carriage return alone (as "
                              "Excel for Mac once saved CSV); save it with Unix (LF) or "
                              "Windows (CRLF) line ends")  # fmt: skip
        parts = block.split(b"\n")
        # Every part but the last ended in "\n", which counts towards the line's bytes.
        if max(map(len, parts)) >= MAX_LINE_BYTES:
            sizes = [len(p) + 1 for p in parts[:-1]] + [len(parts[-1])]
            long = next((i for i, size in enumerate(sizes) if size > MAX_LINE_BYTES), None)
            if long is not None:
                raise SourceError(
                    f"{path} line {n + long + 1}: longer than {MAX_LINE_BYTES} bytes; a "
                    "manifest row is far shorter: is this really a manifest?"
                )
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError as e:
            if not n and block.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                raise _utf16(path) from None
            line = n + block.count(b"\n", 0, e.start) + 1
            start = block.rfind(b"\n", 0, e.start) + 1
            raise SourceError(
                f"{path} line {line}: not UTF-8 text (byte {e.start - start + 1} of the line); "
                "save the manifest as UTF-8"
            ) from None
        if not n:
            text = text.removeprefix("\ufeff")  # a BOM, as Excel writes
        lines = text.split("\n")
        last = lines.pop()  # "" when the block ends with a newline
        lines = [line + "\n" for line in lines]
        if last:
            lines.append(last)
        n += len(lines)
        yield lines


def _utf16(path: str) -> SourceError:
    """The error of a manifest saved as UTF-16 (its byte-order mark first), with the iconv
    that makes it UTF-8."""
    name = posixpath.basename(path)
    stem, dot, ext = name.rpartition(".")
    return SourceError(f"{path}: is UTF-16 text (it starts with UTF-16's byte-order mark, as "
                       "Excel's 'Unicode Text' and Windows PowerShell's Out-File save it); save "
                       f"the manifest as UTF-8: iconv -f UTF-16 -t UTF-8 {name} > "
                       f"{stem}-utf8{dot}{ext}")  # fmt: skip


def no_rows(path: str, problems: Iterable[tuple[int, str]]) -> SourceError:
    """The error of a manifest file that holds no row: empty, or not one of its lines a row
    (`problems`: each such line and why), when the first of those is what to fix."""
    first = next(iter(problems), None)
    if first is None:
        return SourceError(f"{path}: holds no rows; add one row per image")
    return SourceError(f"{path}: no line of it is a row; the first, line {first[0]}: {first[1]}")


def check_names(path: str, names: list[str]) -> None:
    """Refuse a header of an empty or repeated column name, naming pandas' index column (a
    first column of no name, as `DataFrame.to_csv` writes it) where that is the one."""
    rest = names[1:]
    if names[:1] == [""] and rest and "" not in rest and len(set(rest)) == len(rest):
        raise SourceError(f"{path}: its first column has no name, as pandas' to_csv writes a "
                          "DataFrame's index: save it with to_csv(..., index=False), or name "
                          "the column")  # fmt: skip
    if "" in names or len(set(names)) != len(names):
        raise SourceError(
            f"{path}: the columns {names!r} include an empty or repeated name; give every "
            "column its own name"
        )


# ---- which column is what --------------------------------------------------------------------
