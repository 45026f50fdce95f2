"""Output containers: one small class per shard file format, found through CONTAINERS.

The model is TFDS's `core/file_adapters.py`: nothing outside this package branches on the
container or imports one container's module; the pack, the readers, verify, inspect, the CLI's
--format and --compression, tf_dataset, random access, DALI index files and the TFDS metadata
all ask the container class. A new format is one module here holding a `Container` subclass,
listed in CONTAINERS (or added at run time with `register_container`). It provides:

- `name`, `shard_template` and `shard_pattern`: its --format name and how its shards are named;
- `compressions`: what --compression may be for it (the one list of them);
- `writer(...)`: a ShardWriter, given the dataset's schema (a context manager that writes
  through a storage Sink under a temporary name and commits on success; its result holds
  the record count, byte count, sha256 and each record's position);
- `iter_records(...)`: the sequential reader, checking its framing (what verify and
  iter_examples use); `open(...)`: the random-access reader (what Records uses);
- where records are Example bytes (`raw_examples`): `iter_raw(...)` and `ShardReader.raw(i)`,
  the raw records a repack reads undecoded;
- `min_record_bytes` (or `most_records`): the fewest bytes a record takes, so that an index
  claiming more records than a shard's bytes hold is refused on load (index.py);
- optional: `position_unit` and `framing` (for messages and verify's summary), `media_type`
  and `tabular` (for croissant.json),
  `split_files` (files beside a split's shards), `require` (a missing package), and
  `tfds_file_format`, `tf_readable` + `make_tf_data` (+ `open_for_tf`: what TensorFlow's
  reader would crash on, refused first), `index_files` + `record_spans` +
  `min_span`, for TFDS, tf.data and DALI index files where those can read the shards;
  `ShardReader.original(i)`, what a record holds beyond the schema's features (img2dataset's
  fields of the image as fetched), for a grow that keeps the record.

Readers take a shard as (storage, name): a file in a local folder or an object under a URL,
read through Storage.open at offsets, streamed (a remote object is never fetched whole before
its first record), opened through open_shard with the size the index says (`num_bytes`), which
refuses a file of another.

Records cross the seam as features: name -> value when written (what `encode_example` takes),
name -> list of values when read (what `decode_example` returns), whatever the bytes on disk.
The tf.train.Example codec that does that for the built-in containers is `example.py`.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import os
import queue
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

from shardpack.errors import (
    RESTORE_SHARD,
    FileAccessError,
    OutputError,
    RecordError,
    ShardSizeError,
    is_machine_limit,
    os_error_fix,
)
from shardpack.schema import Schema
from shardpack.storage import Blob, Handover, HashingBlob, Sink, Storage, storage_at

Features = Mapping[str, object]  # as written: name -> bytes, str, int, float or a list of one
Example = dict[str, list]  # as read: name -> list of bytes, int or float
# The dataset name and split at the start of every shard name, as the two groups of a pattern.
NAME_SPLIT = r"(?P<name>[A-Za-z0-9][A-Za-z0-9_.]*)-(?P<split>[A-Za-z0-9_.\-]+)"
# Readers refuse a record that claims more: one image per record, and a raw image at the default
# max_pixels (178,956,970 x 3 channels) is 537 MB. A compressed record's length cannot be checked
# against the file size, so this is what bounds a hostile length there.
MAX_RECORD_BYTES = 2**30


class WriteResult(NamedTuple):
    """What a closed shard writer wrote."""

    num_records: int
    num_bytes: int
    sha256: str
    offsets: tuple[int, ...]  # each record's position: a byte offset, or its number (ArrayRecord)
    # the records as Arrow holds them in memory, `datasets`' num_bytes; None: not a table
    arrow_bytes: int | None = None


class Checked(NamedTuple):
    """What a framing check found in one shard file."""

    num_records: int
    num_bytes: int
    sha256: str


class ShardWriter:
    """Write one shard through a storage Sink; it appears under its name only on success.

    Leaving the `with` block normally commits the sink (local disk: fsync and rename; object
    store: the upload completes), or hands it over (`handed`); an exception discards it.
    `result` then holds a WriteResult.
    Subclasses implement _open, _append and _close.
    """

    by_path = False  # the container's library writes the file itself, through sink.fd
    # In a worker forked by the packing process (forkpool): the shards' sinks handed over for
    # it to commit (Sink.hand_over), in the order written; None: each commits as it closes.
    handed: list[Handover] | None = None

    def __init__(
        self, path: str | os.PathLike, compression: str = "none", storage: Storage | None = None
    ) -> None:
        """Args:
        path: the shard's file: a local path, or with `storage`, a name in it.
        compression: as the container takes it.
        storage: where OUT is (a worker's OUT storage).
        """
        if storage is None:
            head, path = os.path.split(os.path.abspath(os.fspath(path)))
            storage = storage_at(head)
        self.storage, self.name = storage, os.fspath(path)
        self.path = storage.path(self.name)
        self.compression = compression
        # The dataset's features, set by Container.writer, for a container whose files are typed
        # by them (Parquet's columns); None: typed from the first record, where that matters.
        self.schema: Schema | None = None
        self.naming = "shardpack"  # options.WDS_NAMINGS: how a container that names members does
        self.sink: Sink | None = None  # made on entering the block
        self.offsets: list[int] = []
        self.result: WriteResult | None = None
        self.arrow_bytes: int | None = None  # a tabular container's writer counts them
        # False: a shard that holds no record is discarded, not committed (a grow lists no
        # empty shard: one landed would be left under its final name by a kill before the merge)
        self.lands_empty = True

    def __enter__(self) -> ShardWriter:
        self.sink = self.storage.create(self.name, by_path=self.by_path)
        try:
            self._open(self.sink)
        except BaseException:
            self.sink.discard()
            raise
        return self

    def write(self, features: Features) -> None:
        """Append one record."""
        try:
            self.offsets.append(self._append(features))
        except OSError as e:
            raise OutputError.writing(self.sink.name, e) from None

    def __exit__(self, exc_type, exc, tb) -> None:
        sink = self.sink
        try:
            size, sha256 = self._close(exc_type is not None)
            if exc_type is not None:  # the block's exception propagates; nothing is committed
                sink.discard()
                return
            if not self.offsets and not self.lands_empty:
                sink.discard()  # a shard of no record, its caller's to leave out: never lands
            elif ShardWriter.handed is None:
                sink.commit()
            elif (handed := sink.hand_over()) is not None:
                ShardWriter.handed.append(handed)
        except OSError as e:
            sink.discard()
            raise OutputError.writing(sink.name, e) from None
        except BaseException:
            sink.discard()
            raise
        self.result = WriteResult(len(self.offsets), size, sha256, tuple(self.offsets),
                                  self.arrow_bytes)  # fmt: skip

    def _open(self, sink: Sink) -> None:
        """Start writing into the new `sink`."""
        raise NotImplementedError

    def _append(self, features: Features) -> int:
        """Write one record; return its position."""
        raise NotImplementedError

    def _close(self, failed: bool) -> tuple[int, str]:
        """Finish the bytes (the container's trailer unless failed); return (size, sha256)."""
        raise NotImplementedError


class HashingFile:
    """A write-only view of a sink that keeps a running sha256 and size of what it writes.

    Where the process has a core to spare (`threaded`), the hashing and the writing happen on
    a thread of their own, a list of pieces of at least CHUNK bytes at a time: both release
    the GIL, so the worker goes on decoding and encoding meanwhile, and a shard's bytes cost
    it nothing (benchmarks/README.md, "Eighth pass"). One chunk is in the thread's hands while
    the next is gathered: what is held grows by a chunk (twice that while the thread joins its
    pieces into one), or by a record where one is larger (not joined). Where every core has a
    worker, the thread would only hand the GIL back and forth with it, and each chunk is
    hashed and written in the worker's own thread as it fills ("Fifth round"). A sink's error
    (a full disk) is raised by the next write, or by finish; either way the thread has ended
    by then.
    """

    CHUNK = 1 << 20
    # Set by the write step for the process (packing.writing): whether it has a core to spare.
    threaded = True

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        # a chunk in one call where the sink takes several byte strings (a file: one writev)
        self._write_parts = getattr(sink, "write_parts", None) or self._write_each
        self.sha256 = hashlib.sha256()
        self.size = 0
        self._pending: list[bytes] = []  # written, not yet handed over: under CHUNK bytes
        self._pending_size = 0
        self._error: BaseException | None = None
        self._discarded = False
        self._thread: threading.Thread | None = None
        if self.threaded:
            self._chunks: queue.SimpleQueue[list[bytes] | None] = queue.SimpleQueue()  # None: end
            self._free = threading.Semaphore(1)  # taken by a chunk until the thread wrote it
            self._thread = threading.Thread(target=self._drain, name="shard-bytes", daemon=True)
            self._thread.start()

    def write(self, data: bytes) -> int:
        self.writelines((data,))
        return len(data)

    def writelines(self, pieces: Sequence[bytes]) -> None:
        """Write each of `pieces` in turn: a record's in one call, not one a piece."""
        if self._discarded:
            return
        if self._error is not None:
            self._stop()
            raise self._error
        size = sum(map(len, pieces))
        self._pending += pieces
        self._pending_size += size
        self.size += size
        if self._pending_size >= self.CHUNK:
            self._hand_over()

    def flush(self) -> None:
        """Nothing to do: finish hands over what is left, and the sink commits it."""

    def finish(self) -> tuple[int, str]:
        """Wait for every byte to be hashed and written; the size and sha256 of them all."""
        if not self._discarded:
            self._hand_over()
        self._stop()
        if self._error is not None and not self._discarded:
            raise self._error
        return self.size, self.sha256.hexdigest()

    def discard(self) -> None:
        """The shard is being thrown away: stop writing it now, and take no more bytes (a
        trailer written on the way out goes nowhere) and no error of its sink's."""
        self._discarded = True
        self._stop()

    def _hand_over(self) -> None:
        chunk, self._pending, self._pending_size = self._pending, [], 0
        if self._thread is None:  # a sink takes a list as it is: no join, no copy
            self._take(chunk)
            return
        self._free.acquire()
        self._chunks.put(chunk)

    def _stop(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._chunks.put(None)
            self._thread.join()

    def _take(self, pieces: list[bytes]) -> None:
        """Hash and write these pieces, unless a piece before failed or the shard is dropped."""
        if self._error is None and not self._discarded:
            try:
                for piece in pieces:
                    self.sha256.update(piece)
                self._write_parts(pieces)
            except BaseException as e:  # raised again by the worker's next write or finish
                self._error = e

    def _joined(self, chunk: list[bytes]) -> Iterator[bytes]:
        """A chunk's pieces, each run of pieces under CHUNK joined into one: hashing and writing
        then let go of the GIL once for all of it, not for each record's pieces (the worker
        waited on this thread, which waited on the worker for the GIL, dozens of times a
        chunk). A record past CHUNK comes alone, not copied."""
        for small, run in itertools.groupby(chunk, lambda piece: len(piece) <= self.CHUNK):
            pieces = list(run)
            if small and len(pieces) > 1:
                yield b"".join(pieces)
            else:
                yield from pieces

    def _write_each(self, chunk: list[bytes]) -> None:
        for piece in chunk:
            self.sink.write(piece)

    def _drain(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            if self._error is None and not self._discarded:
                self._take(list(self._joined(chunk)))
            self._free.release()


class ShardReader:
    """Random access to one shard's records: `len(reader)`, `reader[i]` (a decoded Example).

    Use as a context manager, or call close(), to release the open file.
    """

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, i: int) -> Example:
        raise NotImplementedError

    def raw(self, i: int) -> bytes:
        """Record i as its serialized tf.train.Example, framing checked, not decoded (a
        container whose `raw_examples` is True)."""
        raise NotImplementedError(f"{type(self).__name__} gives decoded records only")

    def position(self, i: int) -> int:
        """Record i's position, as iter_records gives it (for error messages)."""
        return i

    def original(self, i: int) -> dict[str, object]:
        """What record i's writer was told of its image as fetched beyond the schema's
        features, where the container keeps it (img2dataset's `original_width`,
        `original_height` and `sha256`: a grow keeping the record writes them again)."""
        return {}

    def close(self) -> None:
        """Release the open file."""

    def __enter__(self) -> ShardReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Container:
    """One shard file format. Subclasses set the class attributes and implement the methods."""

    name: str = ""
    compressions: tuple[str, ...] = ("none",)  # what `compression` may be
    position_unit = "byte"  # what a record's position counts, for error messages
    # What checks each record as it is read, for verify's summary: TFRecord's CRCs cover the
    # bytes; ArrayRecord's framing and a tar's headers do not (the shard's sha256 does).
    framing = "CRC"
    # DALI's tfrecord2idx files (--index-files) are for these shards: record_spans gives their
    # lines, and no record's span is under min_span bytes (its framing).
    index_files = False
    min_span = 0
    # The fewest bytes a record takes in a shard shardpack writes (uncompressed): a shard of n
    # bytes holds at most n / this, so an index claiming more lies (most_records).
    min_record_bytes = 1
    tf_readable = False  # tf_dataset reads these shards: make_tf_data gives their records
    # TFDS's `fileFormat` for these shards, where TFDS has a file adapter that reads them.
    tfds_file_format: str | None = None
    # The shards' encodingFormat in croissant.json (a MIME type), and whether their records are
    # rows of named typed columns that a Croissant reader extracts (mlcroissant reads Parquet,
    # not TFRecord, ArrayRecord or tar samples).
    media_type = "application/octet-stream"
    tabular = False
    raw_pixels = True  # it may hold --encode raw's pixels (its readers know them from `format`)
    # Its readers show an image file turned by its EXIF orientation (datasets' Image() does;
    # TensorFlow's and the others' decoders show the pixels stored): an image whose geometry
    # is stored with it is written upright, not kept turned (its boxes would describe other
    # pixels than its readers show).
    shows_upright = False
    # Its records are serialized tf.train.Example bytes: iter_raw and ShardReader.raw give
    # them undecoded, and a repack reads them so.
    raw_examples = False
    # What shard_name gives, for any count, with groups `name` and `split`.
    shard_pattern: re.Pattern[str] = re.compile("(?!)")

    shard_template = ""  # str.format'ed with name, split, index and n (the shard count)
    namings: tuple[str, ...] = ("shardpack",)  # the --wds-naming values its writer takes

    def most_records(self, num_bytes: int, compression: str = "none") -> int:
        """The most records a shard of `num_bytes` bytes can hold (a compression that can
        shrink records, more)."""
        return num_bytes // self.min_record_bytes

    def shard_name(self, name: str, split: str, index: int, num_shards: int) -> str:
        """The file name of shard `index` of `num_shards` of a split."""
        return self.shard_template.format(name=name, split=split, index=index, n=num_shards)

    writer_class: type[ShardWriter] = ShardWriter

    def require(self) -> None:
        """Raise MissingPackageError when the package this format needs is not installed."""

    def writer(
        self, path: str | os.PathLike, compression: str = "none", storage: Storage | None = None,
        schema: Schema | None = None, naming: str = "shardpack",
    ) -> ShardWriter:  # fmt: skip
        """A ShardWriter for one shard: a local `path`, or with `storage`, a name in it; the
        dataset's `schema` where the container types its files by it; `naming`, the members'
        (--wds-naming) where a container names them."""
        writer = self.writer_class(path, compression, storage)
        writer.schema, writer.naming = schema, naming
        return writer

    def check_naming(self, naming: str, features: Sequence[str]) -> None:
        """Refuse, before anything is written, a dataset whose `features` the members' `naming`
        cannot hold apart (a feature of a name the naming takes for its own).

        Raises:
            ShardpackError: naming the features and the fix.
        """

    def naming_notes(self, naming: str, schema: Schema, formats: list[str]) -> list[str]:
        """Warnings on a dataset written under the members' `naming` whose readers ask for a
        member some samples lack: its `schema` gives none (img2dataset's .txt, without a
        caption), or its images' `formats` (those stored) name members apart."""
        return []

    def file_notes(self, files: Mapping[str, Sequence[str]]) -> list[str]:
        """Warnings on the shard names (`files`: each split's, in order) that a reader finding
        splits by the words in file names would read under another split."""
        return []

    def iter_records(
        self, storage: Storage, name: str, compression: str = "none", digest=None,
        num_bytes: int | None = None,
    ) -> Iterator[tuple[int, Example | RecordError]]:  # fmt: skip
        """Yield (position, example) for every record, checking the container's framing.

        A record whose framing holds but whose content does not decode (not an Example, a
        sample's JSON broken) comes as (position, the RecordError saying so): reading can go
        on, and verify reports every such record. A broken framing raises.

        Args:
            storage: where the shard is (a local folder or a URL prefix).
            name: the shard's name in it (on a local disk, opened without following a link).
            compression: as written.
            digest: a hashlib object fed every byte of the file as it is read, even when a
                record is bad.
            num_bytes: the shard's size as the index says: a file of another size is refused
                unread (cut short, grown, another shard in its place: open_shard), and a
                reader that must copy the shard first copies no more; None: not checked.

        Raises:
            RecordError: the framing is broken; names the file and the position.
        """
        raise NotImplementedError

    def first_record(
        self, storage: Storage, name: str, compression: str = "none", num_bytes: int | None = None
    ) -> Example | None:
        """The shard's first record (None: it holds none), its framing checked as
        iter_records checks it, reading no more of the shard than its head needs (what a grow
        holds to contents.json of each shard it keeps unread).

        Raises:
            RecordError: the head's framing or record is broken; names the file.
        """
        records = self.iter_records(storage, name, compression, num_bytes=num_bytes)
        try:
            first = next(records, None)
        finally:
            records.close()  # type: ignore[attr-defined]  (a generator)
        return None if first is None else checked(first[1])

    def iter_raw(
        self, storage: Storage, name: str, compression: str = "none", digest=None,
        num_bytes: int | None = None,
    ) -> Iterator[tuple[int, bytes | RecordError]]:  # fmt: skip
        """iter_records without the decoding: each record's serialized tf.train.Example (a
        container whose `raw_examples` is True), framing checked as iter_records checks it."""
        raise NotImplementedError(f"{self.name} records are not Example bytes")

    def open(
        self, storage: Storage, name: str, compression: str = "none", offsets=None,
        num_bytes: int | None = None,
    ) -> ShardReader:  # fmt: skip
        """A ShardReader over one shard; `offsets` (from the writer) saves finding them."""
        raise NotImplementedError

    def split_files(
        self, name: str, split: str, shards: list[tuple[str, int, int]]
    ) -> dict[str, object]:
        """Files a split needs beside its shards, {file name: JSON document}; given the
        split's (shard file, record count, bytes) in order."""
        return {}

    def record_spans(self, storage: Storage, name: str) -> Iterator[tuple[int, int]]:
        """(byte offset, framed size) of every record of an uncompressed shard, for index files.

        Raises:
            RecordError: the framing is broken; names the file and the position.
        """
        raise NotImplementedError

    def open_for_tf(self, storage: Storage, name: str, compression: str, num_bytes: int) -> None:
        """Refuse a local shard TensorFlow is about to open itself (make_tf_data) where it would
        not read it as ours do: a link, a special file, another size than the index's, and
        what its reader would crash on.

        Raises:
            RecordError: names the file and, where a record is at fault, its position.
        """
        open_shard(storage, name, num_bytes).close()

    def make_tf_data(self, tf, storage: Storage, file, compression: str = "none"):
        """A tf.data.Dataset of one shard's serialized tf.train.Example records.

        Args:
            tf: the tensorflow module (imported by the caller, never here).
            storage: where the shards are.
            file: a scalar string tensor: the shard's path where `storage.tf_path()` gives
                one (TensorFlow opens it itself), else its name in `storage`.
            compression: as written.
        """
        raise NotImplementedError

    def check(self, storage: Storage, name: str, compression: str = "none") -> Checked:
        """The framing check of verify: read every record, hash the whole file.

        Raises:
            RecordError: the first fault found, naming the file and the position.
        """
        digest = _CountingDigest()
        records = self.iter_records(storage, name, compression, digest=digest)
        count = sum(1 for _, example in records if checked(example))
        return Checked(count, digest.size, digest.sha256.hexdigest())


def open_shard(storage: Storage, name: str, num_bytes: int | None = None) -> Blob:
    """storage.open(name) for a reader; on a local disk a link or special file is refused,
    and with `num_bytes` (the index's), a file of another size: the size comes with the open,
    so a shard swapped with another of its split costs nothing to catch where sizes differ.

    Raises:
        FileAccessError: permission denied, or too many files open (how the machine is set up,
            not a damaged shard).
        RecordError: it cannot be opened, or is of another size; names the file.
    """
    try:
        blob = storage.open(name)
    except PermissionError as e:
        raise FileAccessError.from_os_error(e, storage.path(name)) from None
    except FileNotFoundError as e:  # an index's shard gone from OUT: no path of the caller's
        if num_bytes is None:
            raise RecordError(storage.path(name), None, f"cannot open ({e.strerror or e}); "
                              f"{os_error_fix(e)}") from None  # fmt: skip
        raise size_fault(storage.path(name), None, num_bytes) from None
    except OSError as e:  # a link: ELOOP, whose strerror says "too many levels of" them
        if is_machine_limit(e):  # not the shard's fault: no damage to report
            raise FileAccessError.from_os_error(e, storage.path(name)) from None
        raise RecordError(storage.path(name), None, f"cannot open ({e.strerror or e}); "
                          f"{os_error_fix(e)}") from None  # fmt: skip
    if num_bytes is not None and blob.size != num_bytes:
        blob.close()
        raise size_fault(blob.name, blob.size, num_bytes)
    return blob


def size_fault(path: str, size: int | None, said: int) -> ShardSizeError:
    """A shard file of another size than the index says (None: not there): a fault of the
    whole file, at no byte of it. A reader holding an index that OUT has since replaced tells
    so instead (read/changed.py): then nothing is damaged."""
    held = (f"missing (index.json lists it, of {said:,} bytes)" if size is None else
            f"size {size:,} bytes, index.json says {said:,} (cut short or replaced)")  # fmt: skip
    return ShardSizeError(path, None, f"{held}; {RESTORE_SHARD}")


def open_hashing(storage: Storage, name: str, digest, num_bytes: int | None = None) -> Blob:
    """open_shard, through a HashingBlob when there is a digest to feed."""
    blob = open_shard(storage, name, num_bytes)
    return blob if digest is None else HashingBlob(blob, digest)


def checked(example: Example | RecordError) -> Example:
    """The example iter_records gave, or raise the RecordError it gave instead."""
    if isinstance(example, RecordError):
        raise example
    return example


class _CountingDigest:
    """A sha256 that also counts the bytes it is fed."""

    def __init__(self) -> None:
        self.sha256 = hashlib.sha256()
        self.size = 0

    def update(self, data) -> None:
        self.sha256.update(data)
        self.size += len(data)


class _Registry(Mapping[str, Container]):
    """name -> container. A container's module is imported when it is first asked for, so
    that listing the names and what reads them (the CLI's --format help) imports none."""

    def __init__(self, classes: dict[str, tuple[str, str]]) -> None:
        self._classes = classes  # name -> ("module:Class", what reads its shards)
        self._loaded: dict[str, Container] = {}

    def add(self, container: Container, readers: str = "") -> None:
        """Register a container instance under its name."""
        self._loaded[container.name] = container
        self._classes[container.name] = ("", readers)

    def readers(self, name: str) -> str:
        """What reads the shards of container `name`, for help text ("" when not said)."""
        return self._classes[name][1]

    def __getitem__(self, name: str) -> Container:
        if name not in self._loaded:
            module, cls = self._classes[name][0].split(":")
            self._loaded[name] = getattr(importlib.import_module(module), cls)()
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)


CONTAINERS: _Registry = _Registry({
    "tfrecord": ("shardpack.containers.tfrecord:TFRecord", "tf.data, TFDS"),
    "array_record": ("shardpack.containers.array_record:ArrayRecord",
                     "Grain, tfds.data_source; random access"),
    "webdataset": ("shardpack.containers.webdataset:WebDataset", "tar shards for PyTorch"),
    "parquet": ("shardpack.containers.parquet:Parquet",
                "the Hugging Face Hub, datasets, pandas, DuckDB"),
})  # fmt: skip


# Other names of a container, taken for it by --format: TensorFlow's guides name the files
# TFRecords; webdataset is imported as wds. (Another case, '-' for '_': options.chosen.)
CONTAINER_ALIASES = {"tfrecords": "tfrecord", "wds": "webdataset"}


def register_container(cls: type[Container], readers: str = "") -> type[Container]:
    """Add a Container subclass to CONTAINERS under its `name` (usable as a class decorator);
    `readers` says what reads its shards, for help text.

    Raises:
        ValueError: the name is empty or taken by another container.
    """
    if not cls.name or (cls.name in CONTAINERS and type(CONTAINERS[cls.name]) is not cls):
        raise ValueError(f"a container needs a name no other container has, got: {cls.name!r}")
    CONTAINERS.add(cls(), readers)
    return cls


def is_shard_name(file: str, name: str | None = None) -> bool:
    """Whether `file` is a name some container's shard_name gives (for dataset `name`)."""
    return shard_container(file, name) is not None


def shard_container(file: str, name: str | None = None) -> Container | None:
    """The container whose shard_name gives `file` (for dataset `name`); None: none does."""
    for container in CONTAINERS.values():
        match = container.shard_pattern.fullmatch(file)
        if match is not None and name in (None, match["name"]):
            return container
    return None


def get_container(name: str) -> Container:
    """The container called `name`.

    Raises:
        ValueError: no container has that name.
    """
    try:
        return CONTAINERS[name]
    except KeyError:
        raise ValueError(f"format must be one of {sorted(CONTAINERS)}, got: {name!r}") from None
