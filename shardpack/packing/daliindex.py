"""DALI's index files: one a shard, '<offset> <framed size>' a record (tfrecord2idx's format)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from shardpack.containers import CONTAINERS, Container
from shardpack.errors import IndexFormatError, OutputError
from shardpack.index import Index, ShardInfo, load_index
from shardpack.layout import INDEX_FILES_DIR, index_file_name
from shardpack.storage import Storage, storage_at


def random_access_index(
    out: str | os.PathLike | Storage, index: Index | None = None,
    storage_options: dict | None = None,
) -> Index:  # fmt: skip
    """OUT's index (or `index`, pack's before it is written), for reading records at offsets:
    refused where its shards are compressed."""
    if index is None:
        index = load_index(storage_at(out, storage_options))
    if index.compression != "none":
        raise IndexFormatError(
            f"{index.out}: GZIP shards cannot be read at random offsets; pack with "
            "compression 'none' for random access"
        )
    return index


def _spans_from_offsets(
    offsets: Sequence[int], shard: ShardInfo, container: Container
) -> list[tuple[int, int]] | None:
    """(offset, framed size) of each record from the offsets the writer kept, or None when they
    do not tile the shard exactly (a journal from an older version, or a damaged one)."""
    if len(offsets) != shard.num_records or not all(type(o) is int for o in offsets):
        return None
    ends = [*offsets[1:], shard.num_bytes] if offsets else []
    spans = [(o, end - o) for o, end in zip(offsets, ends, strict=True)]
    if (spans and spans[0][0] != 0) or any(framed < container.min_span for _, framed in spans):
        return None
    return spans


def refuse_index_file_folders(out: Storage, shards: Iterable[str]) -> None:
    """A folder at a shard's index file would stop its write, at the end of a pack: refused
    before anything is written."""
    if out.kind(INDEX_FILES_DIR) != "dir":
        return
    folders = {e.name for e in out.child(INDEX_FILES_DIR).listdir() if e.is_dir}
    blocked = sorted(name for name in map(index_file_name, shards)
                     if name.removeprefix(f"{INDEX_FILES_DIR}/") in folders)  # fmt: skip
    if blocked:
        raise OutputError.folder_at(out.path(blocked[0]))


def write_index_files(
    out: str | os.PathLike | Storage,
    index: Index | None = None,
    offsets: Mapping[str, Sequence[int]] | None = None,
    storage_options: dict | None = None,
) -> list[str]:
    """Write one index file per shard, one line '<offset> <framed size>' per record.

    The format is NVIDIA DALI's tfrecord2idx, read by `fn.readers.tfrecord(index_path=...)` and
    by the `tfrecord` package. Each file appears under its final name only when complete.

    Args:
        out: the output folder or URL of a pack run.
        index: OUT's index (with the shards to write files for), when pack calls this before
            writing index.json.
        offsets: shard file -> each record's offset, as the writer kept them; a shard without
            them has its record headers read instead.
        storage_options: options for the URL's fsspec filesystem (credentials, endpoint...).

    Returns:
        The paths (or URLs) written.
    """
    index = random_access_index(out, index, storage_options)
    if not index.container.index_files:  # before the folder for them is made
        kinds = " or ".join(name for name, c in CONTAINERS.items() if c.index_files)
        raise IndexFormatError(f"{index.out}: index files are DALI's, for {kinds} shards; "
                               f"these are {index.container.name}, which need none")  # fmt: skip
    storage = index.storage
    storage.make_folder(INDEX_FILES_DIR)  # a link planted there is refused, not written through
    shards = [shard for split in index.splits.values() for shard in split.shards]
    refuse_index_file_folders(storage, (shard.file for shard in shards))
    written = []
    for shard in shards:
        spans = _spans_from_offsets((offsets or {}).get(shard.file, ()), shard, index.container)
        if spans is None:
            spans = index.container.record_spans(storage, shard.file)
        lines = "".join(f"{o} {n}\n" for o, n in spans)
        storage.put(index_file_name(shard.file), lines.encode())
        written.append(storage.path(index_file_name(shard.file)))
    return written
