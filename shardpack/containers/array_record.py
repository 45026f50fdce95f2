"""The ArrayRecord container: tf.train.Example records in ArrayRecord files, for Grain and
`tfds.data_source`; TFDS's `.array_record-` shard names; positions are record numbers.

Writer options: one record per chunk group, TFDS's choice, so reading record i decodes one
chunk; and no compression, since images are already compressed: zstd (the library's default,
and TFDS's) costs writing time for a few percent of size (`python -m benchmarks.containers
--array-record-options group_size:1`; benchmarks/README.md). The files are byte-identical
across runs (tests/containers/test_conformance.py).

The library's reader opens files by path only: a shard in an object store is first copied to
an unnamed local temporary file (at most the index's num_bytes; gone when the reader closes,
or when the process dies), the one reader that does not stream.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import suppress
from typing import TYPE_CHECKING

from shardpack.containers import (
    NAME_SPLIT,
    Container,
    Example,
    Features,
    ShardReader,
    ShardWriter,
    checked,
    open_shard,
)
from shardpack.containers.example import decode, encode_example
from shardpack.errors import MissingPackageError, RecordError, install_hint
from shardpack.storage import HashingBlob, Sink, Storage
from shardpack.storage.atomic import hash_fd

if TYPE_CHECKING:
    from shardpack.storage import Blob, Storage

WRITER_OPTIONS = "group_size:1,uncompressed"
_RANDOM_ACCESS = "readahead_buffer_size:0,max_parallelism:0"  # the library's advice
# The sequential reader reads a record at a time: a compressed chunk (zstd, TFDS's) may inflate
# thousands of times, whatever the file's options say (8 records of 128 KiB held 1 GiB of zeros,
# read at once: 2.9 GB). It costs nothing: 4,000 small records read in 256s or alone, ~5 us each.
_COPY_CHUNK = 4 << 20  # bytes per read when copying a remote shard to a local file


def _module():
    """The array_record extension, imported only when an ArrayRecord file is touched.

    Raises:
        MissingPackageError: the array-record package is not installed.
    """
    try:
        from array_record.python import array_record_module
    except ImportError:
        raise MissingPackageError(
            "the array_record format needs the array-record package: "
            + install_hint("array_record")
        ) from None
    return array_record_module


def _fd_path(fd: int) -> str:
    """A path that names the file open at `fd` itself: the library opens files by path, and
    this way it opens the very file we created or checked, never a link planted since."""
    return f"/proc/self/fd/{fd}"


class _Writer(ShardWriter):
    options = WRITER_OPTIONS
    by_path = True  # the library writes the file itself

    def _open(self, sink: Sink) -> None:
        self._fd = sink.fd
        self._writer = _module().ArrayRecordWriter(_fd_path(sink.fd), self.options)

    def _append(self, features: Features) -> int:
        self._writer.write(encode_example(features))
        if not self._writer.ok():
            raise OSError(f"the ArrayRecord writer failed after record {len(self.offsets)}")
        return len(self.offsets)  # ArrayRecord reads by record number

    def _close(self, failed: bool) -> tuple[int, str]:
        try:
            self._writer.close()
        except Exception as e:  # the library reports write errors (ENOSPC) as RuntimeError
            raise _os_error(e) from None
        if failed:
            return 0, ""
        digest = hashlib.sha256()
        reading = os.open(_fd_path(self._fd), os.O_RDONLY | os.O_CLOEXEC)  # ours: write-only
        try:
            return hash_fd(reading, digest), digest.hexdigest()
        finally:
            os.close(reading)


class _Reader(ShardReader):
    """An ArrayRecordReader over a shard's blob: a local file opened without following a link,
    or a local copy of a remote object (see the module's docstring)."""

    def __init__(self, blob: Blob, options: str, num_bytes: int | None = None, digest=None) -> None:
        self.path, self.copy = blob.name, None
        self.blob = blob if digest is None else HashingBlob(blob, digest)
        try:
            # A local file's blob has an fd the library can open by /proc/self/fd/N.
            fd = blob.fileno() if hasattr(blob, "fileno") else self._copy(num_bytes)
            self.reader = _module().ArrayRecordReader(_fd_path(fd), options)
        except Exception as e:  # a damaged footer or index
            self._release()
            if isinstance(e, (RecordError, MissingPackageError)):
                raise
            raise RecordError(self.path, None, f"not a readable ArrayRecord file "
                              f"({_first_line(e)})") from None  # fmt: skip
        self.count = 0
        if not self.reader.ok():  # the reader does not raise: a damaged file reads as empty
            try:
                self.finish()  # raises what the reader found
            finally:
                self.close()
            raise RecordError(self.path, None, "not a readable ArrayRecord file")
        self.count = self.reader.num_records()

    def _copy(self, num_bytes: int | None) -> int:
        """Copy the blob to an unnamed temporary file (through the blob: a digest is fed as it
        goes); refuse one that grows past num_bytes (open_shard held its size to it)."""
        self.copy = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        copied = 0
        while chunk := self.blob.pread(_COPY_CHUNK, copied):
            copied += len(chunk)
            if num_bytes is not None and copied > num_bytes:
                raise RecordError(self.path, num_bytes, "grew past the index's size while "
                                  "copied", unit="record")  # fmt: skip
            self.copy.write(chunk)
        self.copy.flush()
        return self.copy.fileno()

    def hash_rest(self) -> None:
        """Feed the digest what reading did not (all of a local file; nothing of a copy)."""
        if isinstance(self.blob, HashingBlob):
            self.blob.finish()

    def __len__(self) -> int:
        return self.count

    def read(self, start: int, end: int) -> list[bytes]:
        """Records start..end-1 as bytes."""
        try:
            return self.reader.read(start, end)
        except Exception as e:  # a chunk fails its hash, or the file is cut short
            raise RecordError(self.path, start, f"unreadable ({_first_line(e)})",
                              unit="record") from None  # fmt: skip

    def __getitem__(self, i: int) -> Example:
        return checked(decode(self.raw(i), self.path, i, "record"))

    def raw(self, i: int) -> bytes:
        if not 0 <= i < self.count:
            raise IndexError(f"record {i} is outside {self.path} of {self.count} records")
        return self.read(i, i + 1)[0]

    def finish(self) -> None:
        """Close the reader, which checks what reading did not (a file cut short after its
        last record reads fine until the reader looks for its footer)."""
        try:
            self.reader.close()
        except Exception as e:
            raise RecordError(self.path, self.count, f"unreadable ({_first_line(e)})",
                              unit="record") from None  # fmt: skip

    def close(self) -> None:
        if hasattr(self, "reader"):
            with suppress(Exception):  # a damaged file fails again on close; reads said so
                self.reader.close()
            del self.reader
        self._release()

    def _release(self) -> None:
        """Close the copy, if any, and the blob."""
        if self.copy is not None:
            self.copy.close()
            self.copy = None
        self.blob.close()


def _os_error(error: Exception) -> OSError:
    """The library's error as an OSError, with the errno its message names (so the user is told
    the fix: free some space...), read from the strerror text it quotes."""
    message = _first_line(error)
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EIO):
        if os.strerror(code) in message:
            return OSError(code, message)
    return OSError(errno.EIO, message)


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


class ArrayRecord(Container):
    """ArrayRecord files as TFDS writes them (`--file_format=array_record`)."""

    name = "array_record"
    position_unit = "record"
    framing = "framing"  # the library checks no record's bytes (a flipped byte reads fine)
    min_record_bytes = 40  # a chunk a record (group_size:1), each with a 40-byte chunk header
    tfds_file_format = "array_record"
    media_type = "application/x-array_record"
    shard_template = "{name}-{split}.array_record-{index:05d}-of-{n:05d}"
    shard_pattern = re.compile(NAME_SPLIT + r"\.array_record-\d{5,}-of-\d{5,}")

    def __init__(self, options: str = WRITER_OPTIONS) -> None:
        self.options = options  # the writer's; another only to measure (benchmarks/containers)

    def require(self) -> None:
        _module()

    def writer(
        self, path: str | os.PathLike, compression: str = "none", storage: Storage | None = None,
        schema=None, naming: str = "shardpack",
    ) -> ShardWriter:  # fmt: skip
        self.require()  # fail before creating anything when the package is missing
        writer = _Writer(path, compression, storage)
        writer.options = self.options
        return writer

    raw_examples = True

    def iter_records(
        self, storage: Storage, name: str, compression: str = "none", digest=None,
        num_bytes: int | None = None,
    ) -> Iterator[tuple[int, Example | RecordError]]:  # fmt: skip
        path = storage.path(name)
        for i, data in self.iter_raw(storage, name, compression, digest, num_bytes):
            yield i, decode(data, path, i, "record")

    def iter_raw(
        self, storage: Storage, name: str, compression: str = "none", digest=None,
        num_bytes: int | None = None,
    ) -> Iterator[tuple[int, bytes | RecordError]]:  # fmt: skip
        with _Reader(open_shard(storage, name, num_bytes), "", num_bytes, digest) as reader:
            try:
                for i in range(reader.count):
                    yield i, reader.read(i, i + 1)[0]
                reader.finish()
            finally:
                reader.hash_rest()

    def open(
        self, storage: Storage, name: str, compression: str = "none", offsets=None,
        num_bytes: int | None = None,
    ) -> ShardReader:  # fmt: skip
        return _Reader(open_shard(storage, name, num_bytes), _RANDOM_ACCESS, num_bytes)
