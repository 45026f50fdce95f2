"""The Parquet container: the Hugging Face Hub's Parquet, one file per shard, each written by
its own worker, `{name}-{split}-{i:05d}-of-{n:05d}.parquet`; positions are record numbers.

Columns, as `datasets` writes them: `image` is the struct `{bytes: binary, path: string}` of its
`Image()` feature (path null: the bytes are the image), a class label is int64, text is string,
other bytes binary, numbers int64 or float32, a (-1,) feature a list, a (-1, k) feature a list of
k-long fixed-size lists. Each file's schema metadata holds the `huggingface` key (the features
as `datasets.Features.to_dict()` writes them: Image, ClassLabel with its names, Value,
Sequence), so `datasets.load_dataset("parquet", ...)` gives `Image()` and `ClassLabel(names=...)`
from any one file. Parquet's strings are UTF-8: a text value that is not (a key from a file
name in another encoding) is stored with U+FFFD for its bad bytes.

The files are flat in OUT like every container's shards (OUT's names are plain file names,
index.py), not under the Hub's data/ folder: OUT/README.md's `configs` list each split's files
(`{name}-{split}-*.parquet`), which is how the Hub and `load_dataset(OUT)` find them, grown
shards included (they keep the count the split was first packed with and number on, so the
same pattern holds them).

Row groups: ROW_GROUP_ROWS records or ROW_GROUP_BYTES of them, whichever comes first (see
there); no compression, since the images are compressed already, and no dictionary encoding,
so that the footer bounds what a row group decodes to (a reader refuses anything else); page
checksums on (what verify's framing check reads). pyarrow (the `parquet` extra) is imported only
here, inside the functions that touch a file. The files are byte-identical across runs of the
same pyarrow.
"""

from __future__ import annotations

import bisect
import io
import json
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING

from shardpack.containers import (
    MAX_RECORD_BYTES,
    NAME_SPLIT,
    Container,
    Example,
    Features,
    HashingFile,
    ShardReader,
    ShardWriter,
    open_hashing,
    open_shard,
)
from shardpack.errors import MissingPackageError, RecordError, install_hint, plural
from shardpack.hffeatures import IMAGE, hf_features
from shardpack.schema import Feature, Schema
from shardpack.storage import HashingBlob, Sink

if TYPE_CHECKING:
    from shardpack.storage import Blob, Storage

# A row group closes at 100 records (the batch `datasets` writes image datasets in, and a page
# of the Hub's viewer) or 1 MiB of images, whichever first. A random read (Records) reads its
# whole row group: ~0.2-0.3 ms per record in it for 46 KB photos, so ~22 of them keep it to a few
# ms, where 100 cost ~20-30 ms; sequential reading showed no trend from 10 to 100 records a
# group (`python -m benchmarks.parquet_row_groups`; benchmarks/README.md).
ROW_GROUP_ROWS = 100
ROW_GROUP_BYTES = 1 << 20
# A row group of ours holds at most ROW_GROUP_BYTES and one more record, ROW_GROUP_ROWS rows: a
# reader refuses one whose footer claims far more (what a hostile footer would make it allocate).
_MAX_ROW_GROUP_BYTES = (1 << 20) + MAX_RECORD_BYTES
_MAX_ROWS = 10_000
# `load_dataset("parquet", data_dir=OUT)` reads a file into a split once for each of its
# patterns the file's name matches: a word of the split's first, or between two of "-._ 0-9"
# (datasets' data_files.py: SPLIT_KEYWORDS, KEYWORDS_IN_FILENAME_BASE_PATTERNS); a split of
# another name it leaves out.
_DATA_DIR_SPLITS = {"train": ("train", "training"),
                    "validation": ("validation", "valid", "dev", "val"),
                    "test": ("test", "testing", "eval", "evaluation")}  # fmt: skip
_WORD_SEP = "[-._ 0-9]"
_HF_KEY = b"huggingface"
_MAGIC = b"PAR1"


def _pyarrow():
    """(pyarrow, pyarrow.parquet), imported only when a Parquet file is touched.

    Raises:
        MissingPackageError: pyarrow is not installed.
    """
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise MissingPackageError(
            "the parquet format needs pyarrow: " + install_hint("parquet")
        ) from None
    return pyarrow, pyarrow.parquet


# ---- the schema as Arrow types and `datasets` features ---------------------------------------


def _arrow_type(pa, name: str, feature: Feature):
    """The Arrow type of a feature's column."""
    if name == IMAGE:
        return pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    if feature.dtype == "bytes":
        value = pa.string() if feature.text else pa.binary()
    else:
        value = getattr(pa, feature.dtype)()  # pa.int64, pa.float32
    if feature.row is not None:
        return pa.list_(pa.list_(value, feature.row))
    return pa.list_(value) if feature.is_list else value


def _inferred(features: Features) -> Schema:
    """A schema typed from one record's values, for a writer given none (the container tests):
    bytes as binary, not text."""

    def one(value: object) -> Feature:
        if isinstance(value, (bytes, str)):
            return Feature("bytes")
        if isinstance(value, int):
            return Feature("int64")
        if isinstance(value, float):
            return Feature("float32")
        if hasattr(value, "dtype"):  # a numpy array: its dtype, even when empty
            return Feature("float32" if value.dtype.kind == "f" else "int64", (-1,))
        return Feature(one(value[0]).dtype if len(value) else "int64", (-1,))

    return Schema(tuple((name, one(value)) for name, value in features.items()))


def _arrow_schema(pa, schema: Schema):
    """The file's Arrow schema, the `huggingface` metadata in it."""
    fields = [pa.field(name, _arrow_type(pa, name, f)) for name, f in schema.items()]
    info = {"info": {"features": hf_features(schema)}}
    return pa.schema(fields, metadata={_HF_KEY: json.dumps(info)})


# ---- writing ---------------------------------------------------------------------------------


class _Out(io.RawIOBase):
    """The HashingFile of a sink as the file pyarrow writes to (it asks where it is)."""

    def __init__(self, out: HashingFile) -> None:
        self.out = out

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        return self.out.write(bytes(data))  # a copy: pyarrow reuses its buffer, the thread holds it

    def tell(self) -> int:
        return self.out.size


def _cell(feature: Feature, value: object) -> object:
    """One record's value as its column holds it."""
    if feature.dtype == "bytes":
        values = [v if isinstance(v, bytes) else v.encode() for v in
                  (value if isinstance(value, (list, tuple)) else [value])]  # fmt: skip
        if feature.text:  # Parquet's strings are UTF-8 (see the module's docstring)
            values = [v.decode("utf-8", "replace") for v in values]
        return values if feature.is_list else values[0]
    if not feature.is_list:
        return value
    flat = value.tolist() if hasattr(value, "tolist") else list(value)
    if feature.row is None:
        return flat
    k = feature.row
    return [flat[i : i + k] for i in range(0, len(flat), k)]


class _Writer(ShardWriter):
    def _open(self, sink: Sink) -> None:
        self._pa, self._pq = _pyarrow()
        self._out = HashingFile(sink)
        self._file = _Out(self._out)
        self._writer = None  # made with the first record, or at close for an empty shard
        self._columns: dict[str, list] = {}
        self._rows = self._bytes = self.arrow_bytes = 0

    def _start(self, features: Features | None) -> None:
        """Open pyarrow's writer with the columns of the schema (or of the first record)."""
        if self.schema is None:
            self.schema = _inferred(features or {IMAGE: b""})
        self._arrow = _arrow_schema(self._pa, self.schema)
        self._writer = self._pq.ParquetWriter(
            self._file, self._arrow, compression="none", use_dictionary=False,
            write_statistics=[n for n, f in self.schema.items() if f.dtype == "int64"],
            write_page_checksum=True, store_schema=True,
        )  # fmt: skip
        self._columns = {name: [] for name in self.schema}

    def _append(self, features: Features) -> int:
        if self._writer is None:
            self._start(features)
        if not features.keys() <= self._columns.keys():  # no value dropped unseen
            raise ValueError(f"features {sorted(features.keys() - self._columns.keys())} are "
                             "not in the shard's schema")  # fmt: skip
        for name, column in self._columns.items():
            value = features.get(name)
            feature = self.schema[name]
            if value is None:
                column.append(None)
            elif name == IMAGE:
                column.append({"bytes": bytes(value), "path": None})
                self._bytes += len(value)
            else:
                column.append(_cell(feature, value))
        self._rows += 1
        if self._rows >= ROW_GROUP_ROWS or self._bytes >= ROW_GROUP_BYTES:
            self._flush()
        return len(self.offsets)  # records are found by number

    def _flush(self) -> None:
        if not self._rows:
            return
        table = self._pa.Table.from_pydict(self._columns, schema=self._arrow)
        self._writer.write_table(table, row_group_size=self._rows)
        self.arrow_bytes += table.nbytes
        self._columns = {name: [] for name in self._columns}
        self._rows = self._bytes = 0

    def _close(self, failed: bool) -> tuple[int, str]:
        if failed:
            self._out.discard()
            if self._writer is not None:
                with suppress(Exception):  # what it writes goes nowhere; its error is no news
                    self._writer.close()
            return self._out.finish()
        if self._writer is None:
            self._start(None)
        self._flush()
        self._writer.close()
        return self._out.finish()


# ---- reading ---------------------------------------------------------------------------------


class _In(io.RawIOBase):
    """A shard's Blob as the seekable file pyarrow reads (no link followed: open_shard)."""

    def __init__(self, blob: Blob) -> None:
        self.blob, self.position = blob, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self.position, self.blob.size)[whence]
        self.position = max(0, base + offset)
        return self.position

    def tell(self) -> int:
        return self.position

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (all that is left for -1): one pread, one copy."""
        left = max(0, self.blob.size - self.position)
        data = self.blob.pread(left if size is None or size < 0 else min(size, left),
                               self.position)  # fmt: skip
        self.position += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _data_dir_reads(file: str) -> Counter[str]:
    """How many times `load_dataset("parquet", data_dir=...)` reads a file of this name into
    each split: once a pattern of the split's it matches."""
    reads: Counter[str] = Counter()
    for split, words in _DATA_DIR_SPLITS.items():
        for word in words:
            reads[split] += bool(re.match(f"{word}{_WORD_SEP}", file))
            reads[split] += bool(re.search(f"{_WORD_SEP}{word}{_WORD_SEP}", file))
    return +reads


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


class _Shard:
    """One Parquet shard open for reading: its row groups checked against what we write."""

    def __init__(self, blob: Blob) -> None:
        self.blob, self.path = blob, blob.name
        pa, pq = _pyarrow()
        if blob.pread(4, 0) != _MAGIC:  # pyarrow reads the footer's copy only
            raise self.fault(0, "not a Parquet file (no PAR1 at its start)")
        try:
            self.file = pq.ParquetFile(_In(blob), page_checksum_verification=True)
            metadata = self.file.metadata
            self.sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
            arrow = self.file.schema_arrow
            groups = [metadata.row_group(g) for g in range(metadata.num_row_groups)]
        except (pa.ArrowException, OSError, ValueError) as e:
            raise self.fault(0, f"not a readable Parquet file ({_first_line(e)})") from None
        self.readers = {f.name: _column_reader(pa, f.type) for f in arrow}
        if IMAGE not in self.readers or None in self.readers.values():
            raise self.fault(0, "not a Parquet shard of shardpack's (its columns are not "
                                "an image and typed features)")  # fmt: skip
        self.starts = [0]
        for size in self.sizes:
            self.starts.append(self.starts[-1] + size)
        for group, start in zip(groups, self.starts, strict=False):
            self._check(group, start)

    def fault(self, position: int, reason: str) -> RecordError:
        return RecordError(self.path, position, reason, unit="record")

    def _check(self, group, start: int) -> None:
        """Refuse a row group shardpack does not write, before it is read: compressed or
        dictionary-encoded columns (whose decoded size the file does not bound), more rows than
        _MAX_ROWS, or more bytes and values (8 bytes each) than _MAX_ROW_GROUP_BYTES."""
        values = 0
        for c in range(group.num_columns):
            column = group.column(c)
            if column.compression != "UNCOMPRESSED" or any("DICT" in e for e in column.encodings):
                raise self.fault(start, f"column {column.path_in_schema!r} is compressed or "
                                        "dictionary-encoded, not as shardpack writes")  # fmt: skip
            values += column.num_values
        claimed = group.total_byte_size + 8 * values
        if group.num_rows > _MAX_ROWS or claimed > _MAX_ROW_GROUP_BYTES:
            raise self.fault(start, f"a row group of {group.num_rows:,} rows claims {claimed:,} "
                                    "bytes, more than shardpack writes")  # fmt: skip

    def __len__(self) -> int:
        return self.starts[-1]

    def group(self, g: int) -> list[Example]:
        """Row group g's records as Examples."""
        pa, _ = _pyarrow()
        try:
            table = self.file.read_row_group(g, use_threads=False)  # its threads wait on our GIL
            if table.num_rows != self.sizes[g]:
                raise ValueError(f"{table.num_rows} rows, the footer says {self.sizes[g]}")
            columns = {name: table.column(name).to_pylist() for name in self.readers}
        except (pa.ArrowException, OSError, ValueError) as e:
            raise self.fault(self.starts[g], f"unreadable ({_first_line(e)})") from None
        records: list[Example] = [{} for _ in range(table.num_rows)]
        for name, values in columns.items():
            read = self.readers[name]
            for record, value in zip(records, values, strict=True):
                if value is not None:
                    record[name] = read(value)
        for i, record in enumerate(records):
            if not record.get(IMAGE) or len(record[IMAGE][0]) > MAX_RECORD_BYTES:
                raise self.fault(self.starts[g] + i, "a record without image bytes")
        return records

    def close(self) -> None:
        self.blob.close()


def _column_reader(pa, kind):
    """value -> Example list for a column of type `kind`; None for a type we never write."""
    types = pa.types
    if types.is_struct(kind) and [f.name for f in kind] == ["bytes", "path"]:
        return lambda v: [v["bytes"]] if v["bytes"] is not None else []
    if types.is_string(kind) or types.is_large_string(kind):
        return lambda v: [v.encode()]
    if types.is_binary(kind) or types.is_large_binary(kind):
        return lambda v: [v]
    if types.is_signed_integer(kind) or types.is_floating(kind):  # unsigned: past int64
        return lambda v: [v]
    if types.is_list(kind) or types.is_large_list(kind):
        inner = kind.value_type
        if types.is_fixed_size_list(inner) or types.is_list(inner):
            one = _column_reader(pa, inner.value_type)
            return None if one is None else lambda v: [x for row in v for y in row
                                                       for x in one(y)]  # fmt: skip
        one = _column_reader(pa, inner)
        return None if one is None else lambda v: [x for y in v for x in one(y)]
    return None


class _Reader(ShardReader):
    def __init__(self, blob: Blob) -> None:
        self.shard = _Shard(blob)
        self.cached: tuple[int, list[Example]] = (-1, [])

    def __len__(self) -> int:
        return len(self.shard)

    def __getitem__(self, i: int) -> Example:
        if not 0 <= i < len(self.shard):
            raise IndexError(f"record {i} is outside {self.shard.path} of {len(self)} records")
        g = bisect.bisect_right(self.shard.starts, i) - 1
        if self.cached[0] != g:  # readers mostly go on in order: keep the group they are in
            self.cached = (g, self.shard.group(g))
        return self.cached[1][i - self.shard.starts[g]]

    def close(self) -> None:
        self.shard.close()


class Parquet(Container):
    """Parquet files as the Hugging Face Hub serves datasets (`datasets`, pandas, DuckDB)."""

    name = "parquet"
    position_unit = "record"
    framing = "page checksums"
    # each record's image bytes, stored PLAIN (no compression, no dictionary): a 4-byte length
    min_record_bytes = 4
    media_type = "application/x-parquet"
    tabular = True
    raw_pixels = False  # datasets' Image() decodes image files, not bare pixels
    shows_upright = True  # datasets' Image() applies the EXIF orientation (exif_transpose)
    shard_template = "{name}-{split}-{index:05d}-of-{n:05d}.parquet"
    shard_pattern = re.compile(NAME_SPLIT + r"-\d{5,}-of-\d{5,}\.parquet")
    writer_class = _Writer

    def require(self) -> None:
        _pyarrow()

    def file_notes(self, files: Mapping[str, Sequence[str]]) -> list[str]:
        misread = []
        for split, names in files.items():
            own = Counter(_data_dir_reads(f"-{split}-"))  # its own split's, once (or none)
            misread += [(file, reads) for file in names if (reads := _data_dir_reads(file)) != own]
        if not misread:
            return []
        file, reads = misread[0]
        said = ", ".join(f"{split} {'once' if n == 1 else f'{n} times'}"
                         for split, n in sorted(reads.items()))  # fmt: skip
        return [f"load_dataset('parquet', data_dir=OUT) misreads {plural(len(misread), 'file')} "
                f"({file}: into {said}), as its name holds a split's word beside the split's "
                "own; load_dataset(OUT) reads each split as the card lists it, or pack it under "
                "a name without such a word"]  # fmt: skip

    def writer(
        self, path: str | os.PathLike, compression: str = "none", storage: Storage | None = None,
        schema: Schema | None = None, naming: str = "shardpack",
    ) -> ShardWriter:  # fmt: skip
        self.require()  # fail before creating anything when pyarrow is missing
        return super().writer(path, compression, storage, schema, naming)

    def iter_records(
        self, storage: Storage, name: str, compression: str = "none", digest=None,
        num_bytes: int | None = None,
    ) -> Iterator[tuple[int, Example | RecordError]]:  # fmt: skip
        blob = open_hashing(storage, name, digest, num_bytes)
        try:
            shard = _Shard(blob)
            for g, start in enumerate(shard.starts[:-1]):
                yield from enumerate(shard.group(g), start)
            if isinstance(blob, HashingBlob):
                blob.finish()  # what reading skipped, into the hash
        finally:
            blob.close()

    def open(
        self, storage: Storage, name: str, compression: str = "none", offsets=None,
        num_bytes: int | None = None,
    ) -> ShardReader:  # fmt: skip
        return _Reader(open_shard(storage, name, num_bytes))
