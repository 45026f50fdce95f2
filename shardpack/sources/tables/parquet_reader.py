"""Parquet read a row group at a time, refused past a bound on its decoded size (for manifests
and Hugging Face datasets); manifests as chunks. pyarrow is imported when a file is read."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from shardpack.errors import Option, SourceError, install_hint
from shardpack.sources.tables import chunks
from shardpack.sources.tables.chunks import Chunk, check_names

# One row group, as its footer sizes it and then as it decodes (each dictionary value counted
# at every row using it), is refused past this: a 100,000-character caption stored once and
# referenced 20,000 times is 40 KB on disk, 2 GB decoded. 1 GiB is 15 times the 1M-row table of
# benchmarks/manifest_scale.py (67 MB); pyarrow writes up to 1M rows a group by default.
MAX_ROW_GROUP_BYTES = 1 << 30
# A file's values decoded, summed over its row groups, are refused past this: its rows are held
# in memory whole, and 1 GiB under the limit a row group, every 100 KB of row groups on disk
# could otherwise add a GiB. 15 times the 67 MB table.
MAX_FILE_DECODED_BYTES = 1 << 30
# A row group is decoded this much at a time (on average over its rows), so that what a file
# holds decoded stays within MAX_FILE_DECODED_BYTES and one slice.
SLICE_BYTES = 64 << 20
_REWRITE = "pyarrow: a smaller row_group_size"  # how to write smaller row groups


# The name pandas gives an unnamed index level where it writes the index as a column (to_parquet,
# and datasets' from_pandas, of a frame whose index is no plain range: a filtered one's).
_PANDAS_INDEX = re.compile(r"__index_level_\d+__")


def parquet_names(path: str, f: BinaryIO) -> list[str]:
    """A Parquet file's column names, from its footer (its empty or repeated ones refused)."""
    with parquet_errors(path):
        names = open_parquet(path, f).schema_arrow.names
    check_names(path, names)
    return names


def pandas_index(names: list[str]) -> tuple[str, ...]:
    """Those of a table's column names that pandas gives the levels of a DataFrame's index it
    wrote as columns (`__index_level_0__`)."""
    return tuple(name for name in names if _PANDAS_INDEX.fullmatch(name))


def pandas_index_warning(path: str, columns: tuple[str, ...], leave_out: str) -> str:
    """The warning of a file's `columns` that hold pandas' index (pandas_index), packed as
    features: what wrote them, and how to leave them out (`leave_out`, after writing the
    frame without its index)."""
    said = ", ".join(map(repr, columns))
    which, packed, it = ((f"column {said} holds", "a feature", "it") if len(columns) == 1
                         else (f"columns {said} hold", "features", "them"))  # fmt: skip
    return (f"{path}: {which} a pandas DataFrame's index (pandas' name for an unnamed index: "
            "to_parquet and datasets' from_pandas write it of a filtered or reordered frame), "
            f"packed as {packed}, as datasets loads {it}; to leave {it} out, write the frame "
            "without it (to_parquet(..., index=False), from_pandas(..., preserve_index=False)), "
            f"{leave_out}")  # fmt: skip


def parquet_chunks(path: str, f: BinaryIO, columns: list[str] | None = None) -> Iterator[Chunk]:
    """The file's rows as chunks, of `columns` only (None: all): the others are not read."""
    with parquet_errors(path):
        parquet = open_parquet(path, f)
        names = columns if columns is not None else parquet.schema_arrow.names
        numbers = check_schema(path, parquet, columns)
        row = 0
        for table in held_groups(parquet, path, columns, _REWRITE):
            for batch in written_slices(parquet, table, chunks.CHUNK_ROWS):
                columns = dict(zip(names, (c.to_pylist() for c in batch.columns), strict=True))
                yield Chunk(list(range(row, row + batch.num_rows)), columns, [], numbers)
                row += batch.num_rows
        # Arrow's allocator keeps the pages it freed; hand them back before the packer forks.
        import pyarrow as pa

        pa.default_memory_pool().release_unused()


@contextmanager
def parquet_errors(path: str) -> Iterator[None]:
    """pyarrow's errors reading the Parquet file `path` as one SourceError naming it."""
    try:
        yield
    except SourceError:
        raise
    except MemoryError:
        raise out_of_memory(path) from None
    except Exception as e:  # pyarrow raises several types on a damaged file; one to the user
        raise SourceError(f"{path}: not a readable Parquet file ({e})") from None


def check_schema(path: str, parquet, columns: list[str] | None = None) -> frozenset[str]:
    """Refuse a Parquet file's repeated or empty column names and types shardpack does not
    read (of `columns`, those read; None: all); the columns it types as numbers."""
    check_names(path, parquet.schema_arrow.names)
    for field in parquet.schema.to_arrow_schema():  # the types as written, not as read
        if (columns is None or field.name in columns) and not _arrow_supported(field.type):
            raise SourceError(
                f"{path}: column {field.name!r} is of Parquet type {field.type}; shardpack "
                "reads numbers, booleans, strings and (nested) lists of them: convert it, "
                "or leave it out (",
                Option("columns"),
                " names the columns to keep)",
            )
    return frozenset(f.name for f in parquet.schema_arrow if _arrow_number(f.type))


def out_of_memory(path: str) -> SourceError:
    """What to say when memory ran out reading a Parquet file within shardpack's limits."""
    return SourceError(
        f"{path}: memory ran out reading it, within shardpack's limits ({_gib(MAX_ROW_GROUP_BYTES)}"
        f" a row group, {_gib(MAX_FILE_DECODED_BYTES)} a file, decoded): this process's memory "
        "limit (ulimit -v, a container's) is lower; raise it, or split the file"
    )


def open_parquet(path: str, f: BinaryIO):
    """An open Parquet file as pyarrow's ParquetFile, every text or bytes column (lists' and
    structs' too) read as a dictionary: a value repeated costs memory once, until decoded."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SourceError(
            f"{path}: reading Parquet needs pyarrow: {install_hint('parquet')}"
        ) from None
    schema = (plain := pq.ParquetFile(f)).schema
    leaves = [c.path for c in map(schema.column, range(len(schema)))
              if c.physical_type == "BYTE_ARRAY"]  # fmt: skip
    return pq.ParquetFile(f, metadata=plain.metadata, read_dictionary=leaves)


def read_group(parquet, path: str, group: int, columns: list[str] | None, rewrite: str):
    """Row group `group` (of `columns`; None: all) as an Arrow table, dictionaries kept, and
    its decoded bytes; refused (SourceError) when its footer or its decoded values put it over
    MAX_ROW_GROUP_BYTES. `rewrite` says how to write smaller row groups."""
    meta = parquet.metadata.row_group(group)
    # 8 bytes a value (an int64, a double, an offset): run-length encoding hides the count
    values = sum(meta.column(j).num_values for j in range(meta.num_columns))
    stored = meta.total_byte_size + 8 * values
    if stored > MAX_ROW_GROUP_BYTES:
        _refuse(path, group, f"holds {_gib(stored)} by its footer's sizes and counts", rewrite)
    table = parquet.read_row_group(group, columns=columns)
    decoded = sum(map(decoded_bytes, table.columns))
    if decoded > MAX_ROW_GROUP_BYTES:
        _refuse(path, group, f"decodes to {_gib(decoded)}", rewrite)
    return table, decoded


def held_groups(parquet, path: str, columns: list[str] | None, rewrite: str) -> Iterator:
    """Each row group (of `columns`; None: all) as read_group reads it, dictionaries kept, to
    decode with written_slices; refused (SourceError) once they decode to over
    MAX_FILE_DECODED_BYTES."""
    total = 0
    for group in range(parquet.num_row_groups):
        table, decoded = read_group(parquet, path, group, columns, rewrite)
        total += decoded
        if total > MAX_FILE_DECODED_BYTES:
            raise SourceError(
                f"{path}: row groups 0 to {group} decode to {_gib(total)} (over the "
                f"{_gib(MAX_FILE_DECODED_BYTES)} limit for one file, held in memory whole); "
                "split the file or shorten its values"
            )
        yield table


def written_slices(parquet, table, rows: int) -> Iterator:
    """A table held_groups gave, as tables of up to `rows` rows and about SLICE_BYTES decoded,
    each with its dictionaries decoded to the types as written: a row group is never decoded
    whole at once (and pyarrow turns a dictionary into Python values 15 times slower)."""
    import pyarrow as pa

    written = parquet.schema.to_arrow_schema()
    schema = pa.schema([written.field(name) for name in table.column_names],
                       metadata=table.schema.metadata)  # fmt: skip
    decoded = sum(map(decoded_bytes, table.columns))
    step = max(1, min(rows, table.num_rows * SLICE_BYTES // max(decoded, 1)))
    for start in range(0, table.num_rows, step):
        yield table.slice(start, step).cast(schema)


def _refuse(path: str, group: int, size: str, rewrite: str) -> None:
    """Refuse a row group over MAX_ROW_GROUP_BYTES, naming it, the limit and the fix."""
    raise SourceError(
        f"{path}: row group {group} {size} (over the {_gib(MAX_ROW_GROUP_BYTES)} limit for one "
        f"row group); write it with smaller row groups ({rewrite}) or shorter values"
    )


def _gib(size: int) -> str:
    """A size for a message: GiB or MiB to one decimal (1 GiB, 2.3 GiB), or bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):,.1f}".removesuffix(".0") + f" {unit}"
    return f"{size:,} bytes"


def decoded_bytes(array) -> int:
    """An Arrow array's bytes once decoded: each dictionary value counted at every use."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        return sum(map(decoded_bytes, array.chunks))
    t = array.type
    if pa.types.is_dictionary(t):
        values, indices = array.dictionary, array.indices
        if _binary_like(t.value_type):
            used = pc.sum(pc.take(pc.binary_length(values), indices)).as_py() or 0
        else:  # fixed-width values: the dictionary's average width at every use
            used = -(-decoded_bytes(values) * len(indices) // max(len(values), 1))
        return used + indices.nbytes
    if pa.types.is_struct(t):
        return sum(map(decoded_bytes, array.flatten())) + len(array)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return decoded_bytes(array.flatten()) + 8 * len(array)
    return array.nbytes


def _binary_like(t) -> bool:
    import pyarrow as pa

    return any(check(t) for check in (pa.types.is_string, pa.types.is_large_string,
                                      pa.types.is_binary, pa.types.is_large_binary))  # fmt: skip


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
