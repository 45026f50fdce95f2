"""Parquet manifests as chunks, a row group at a time (pyarrow, imported when one is read)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from shardpack.errors import SourceError, install_hint
from shardpack.sources.tables import chunks
from shardpack.sources.tables.chunks import Chunk, check_names

# Parquet is read one row group at a time; refuse a row group that would take more memory than
# any sane manifest needs at once (pyarrow writes up to 1M rows a group by default; the 1M-row
# table of benchmarks/manifest_scale.py is 67 MB uncompressed).
MAX_ROW_GROUP_BYTES = 1 << 30


def parquet_chunks(path: str, f: BinaryIO) -> Iterator[Chunk]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise SourceError(
            f"{path}: reading Parquet needs pyarrow: {install_hint('parquet')}"
        ) from None
    try:
        parquet = pq.ParquetFile(f)
        names = parquet.schema_arrow.names
        check_names(path, names)
        for field in parquet.schema_arrow:
            if not _arrow_supported(field.type):
                raise SourceError(
                    f"{path}: column {field.name!r} is of Parquet type {field.type}; shardpack "
                    "reads numbers, booleans, strings and (nested) lists of them: convert it "
                    "or drop the column"
                )
        for i in range(parquet.num_row_groups):
            size = parquet.metadata.row_group(i).total_byte_size
            if size > MAX_ROW_GROUP_BYTES:
                raise SourceError(
                    f"{path}: row group {i} holds {size} bytes (over {MAX_ROW_GROUP_BYTES}); "
                    "rewrite it with smaller row groups (pyarrow: row_group_size=100_000)"
                )
        numbers = frozenset(f.name for f in parquet.schema_arrow if _arrow_number(f.type))
        row = 0
        for batch in parquet.iter_batches(batch_size=chunks.CHUNK_ROWS):
            columns = dict(zip(names, (c.to_pylist() for c in batch.columns), strict=True))
            yield Chunk(list(range(row, row + batch.num_rows)), columns, [], numbers)
            row += batch.num_rows
        # Arrow's allocator keeps the pages it freed; hand them back before the packer forks.
        pa.default_memory_pool().release_unused()
    except SourceError:
        raise
    except Exception as e:  # pyarrow raises several types on a damaged file; one to the user
        raise SourceError(f"{path}: not a readable Parquet file ({e})") from None


def _arrow_number(t) -> bool:
    """Whether a Parquet column's type is a number or boolean (a scalar, not a list)."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _arrow_number(t.value_type)
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _arrow_supported(t) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _arrow_supported(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _arrow_supported(t.value_type)
    return any(
        check(t)
        for check in (
            pa.types.is_integer,
            pa.types.is_floating,
            pa.types.is_boolean,
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_null,
        )
    )
