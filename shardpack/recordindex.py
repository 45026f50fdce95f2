"""Random access: per-shard index files in DALI's tfrecord2idx format, and read_record(i)."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

from shardpack.atomic import write_atomic
from shardpack.errors import IndexFormatError, OutputError, RecordError
from shardpack.index import INDEX_FILES_DIR, Index, index_from_document, load_index
from shardpack.read import to_python
from shardpack.tfrecord import decode_example, masked_crc

_HEADER = struct.Struct("<QI")


def record_spans(path: str) -> Iterator[tuple[int, int]]:
    """Yield (byte offset, framed size) of every record by hopping from header to header.

    Only the 12-byte headers are read, so this costs one seek per record, not a full read.

    Raises:
        RecordError: a header fails its CRC or the file ends inside a record.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        offset = 0
        while offset < size:
            header = f.read(_HEADER.size)
            length, crc = _HEADER.unpack(header) if len(header) == _HEADER.size else (0, None)
            if crc is None or masked_crc(header[:8]) != crc:
                raise RecordError(path, offset, "bad record header (corrupt or truncated)")
            framed = _HEADER.size + length + 4
            if offset + framed > size:
                raise RecordError(path, offset, "file ends inside a record (truncated)")
            yield offset, framed
            offset += framed
            f.seek(offset)


def index_file_path(index: Index, file: str) -> str:
    """Where the index file of one shard lives: OUT/idx/<shard>.idx (outside shard globs)."""
    return os.path.join(index.out, INDEX_FILES_DIR, f"{file}.idx")


def _random_access(out: str | os.PathLike, document: dict | None = None) -> Index:
    index = load_index(out) if document is None else index_from_document(out, document)
    if index.compression != "none":
        raise IndexFormatError(
            f"{index.out}: GZIP shards cannot be read at random offsets; pack without "
            "--compression for random access"
        )
    return index


def write_index_files(out: str | os.PathLike, document: dict | None = None) -> list[str]:
    """Write one index file per shard, one line '<offset> <framed size>' per record.

    The format is NVIDIA DALI's tfrecord2idx, read by `fn.readers.tfrecord(index_path=...)` and
    by the `tfrecord` package. Each file appears under its final name only when complete.

    Args:
        out: the output folder of a pack run.
        document: the index document, when pack calls this before writing index.json.

    Returns:
        The paths written.
    """
    index = _random_access(out, document)
    folder = os.path.join(index.out, INDEX_FILES_DIR)
    if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
        # a link planted in OUT: never write where it points
        raise OutputError(f"{folder}: is a link or a file, not a folder of index files; remove it")
    os.makedirs(folder, exist_ok=True)
    written = []
    for split in index.splits.values():
        for shard in split.shards:
            path = index_file_path(index, shard.file)
            spans = record_spans(index.shard_path(shard))
            write_atomic(path, "".join(f"{o} {n}\n" for o, n in spans).encode())
            written.append(path)
    return written


def read_record(out: str | os.PathLike, split: str, i: int) -> dict[str, object]:
    """Fetch record i of a split without scanning the shards before it.

    Uses the shard's index file when there is one, else hops over record headers of that
    one shard. The record's CRCs are checked.

    Returns:
        The record as iter_examples yields it (image bytes, label, key...).
    """
    index = _random_access(out)
    info = index.split(split)
    if not 0 <= i < info.num_records:
        raise IndexError(f"record {i} is outside split {split!r} of {info.num_records} records")
    for shard in info.shards:
        if i >= shard.num_records:
            i -= shard.num_records
            continue
        path = index.shard_path(shard)
        offset, framed = _span(index, shard.file, path, i)
        with open(path, "rb") as f:
            f.seek(offset)
            record = f.read(framed)
        header_ok = len(record) == framed >= _HEADER.size + 4
        if header_ok:
            length, length_crc = _HEADER.unpack_from(record)
            header_ok = masked_crc(record[:8]) == length_crc and _HEADER.size + length + 4 == framed
        if not header_ok:
            raise RecordError(path, offset, "no record starts here: the index file is stale; "
                              "rerun shardpack index-files")  # fmt: skip
        data = record[_HEADER.size : framed - 4]
        if masked_crc(data) != struct.unpack("<I", record[framed - 4 :])[0]:
            raise RecordError(path, offset, "data CRC mismatch (corrupt record)")
        return to_python(decode_example(data))
    raise IndexError(f"record {i} not found; the index's record counts disagree with its shards")


def _span(index: Index, file: str, path: str, i: int) -> tuple[int, int]:
    idx = index_file_path(index, file)
    if os.path.exists(idx):
        with open(idx) as f:
            for n, line in enumerate(f):
                if n == i:
                    offset, framed = line.split()
                    return int(offset), int(framed)
    for n, span in enumerate(record_spans(path)):
        if n == i:
            return span
    raise RecordError(path, 0, f"has no record {i}")
