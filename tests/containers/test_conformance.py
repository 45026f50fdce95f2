"""The container seam: each container writes, reads back, checks its framing, and its files
are read by the real readers of its audience (TensorFlow, array_record, Grain, webdataset)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from contextlib import suppress
from pathlib import Path

import cv2
import numpy as np
import pytest

from shardpack.containers import CONTAINERS, get_container, is_shard_name
from shardpack.containers.example import encode_example
from shardpack.errors import OutputError, RecordError
from tests import forkserver
from tests.helpers import READ_ARRAY_RECORD, READ_WEBDATASET, at, image, needs, run_json

NAMES = sorted(CONTAINERS)


def _records() -> list[dict[str, object]]:
    """Seven records: JPEG, PNG and raw pixels, a non-UTF-8 key, an extra feature."""
    out = []
    for i, fmt in enumerate(["jpeg", "png", "raw", "jpeg", "png", "raw", "jpeg"]):
        pixels = image(i, 12 + i, 16)
        if fmt == "raw":
            data = cv2.cvtColor(pixels, cv2.COLOR_BGR2RGB).tobytes()
        else:
            data = cv2.imencode(".jpg" if fmt == "jpeg" else ".png", pixels)[1].tobytes()
        out.append({
            "image": data, "label": i % 3, "height": 12 + i, "width": 16, "channels": 3,
            "format": fmt.encode(), "key": b"cat/\xff-%d.x" % i, "coarse_label": i % 2,
        })  # fmt: skip
    return out


def _as_read(features: dict[str, object]) -> dict[str, list]:
    return {k: [v] for k, v in features.items()}


def _write(container, folder, records=None, index: int = 0) -> tuple[str, object]:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, container.shard_name("ds", "train", index, 4))
    with container.writer(path) as writer:
        for features in _records() if records is None else records:
            writer.write(features)
    return path, writer.result


def test_registry_and_names():
    assert NAMES == ["array_record", "parquet", "tfrecord", "webdataset"]
    assert get_container("tfrecord").shard_name("ds", "train", 3, 8) == (
        "ds-train.tfrecord-00003-of-00008"
    )
    assert get_container("array_record").shard_name("ds", "train", 3, 8) == (
        "ds-train.array_record-00003-of-00008"
    )
    assert get_container("webdataset").shard_name("ds", "train", 3, 8) == "ds-train-000003.tar"
    assert get_container("parquet").shard_name("ds", "train", 3, 8) == (
        "ds-train-00003-of-00008.parquet"
    )
    with pytest.raises(ValueError, match="array_record"):
        get_container("hdf5")


@pytest.mark.parametrize("name", NAMES)
def test_shard_names_are_recognised_by_their_own_pattern_only(name):
    container = get_container(name)
    for index, count in ((0, 1), (7, 8), (123_456, 200_000)):
        file = container.shard_name("my.ds", "train-a", index, count)
        assert is_shard_name(file) and is_shard_name(file, "my.ds")
        assert not is_shard_name(file, "my")
        match = container.shard_pattern.fullmatch(file)
        assert (match["name"], match["split"]) == ("my.ds", "train-a")
        assert [c for c in CONTAINERS.values() if c.shard_pattern.fullmatch(file)] == [container]
    assert not is_shard_name("my.ds-train.shardindex.json")
    assert not is_shard_name(".my.ds-train-000000.tar.0123456789abcdef.partial")


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_sequential_and_random(tmp_path, name):
    container = get_container(name)
    path, result = _write(container, tmp_path)
    expected = [_as_read(r) for r in _records()]
    assert os.listdir(tmp_path) == [os.path.basename(path)]  # no temporary file left
    assert result.num_records == len(expected)
    assert result.num_bytes == os.path.getsize(path)
    assert result.sha256 == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    read = list(container.iter_records(*at(path)))
    assert [position for position, _ in read] == list(result.offsets)
    assert [example for _, example in read] == expected
    for offsets in (None, result.offsets):  # found by the reader, or given by the writer
        with container.open(*at(path), offsets=offsets) as reader:
            assert len(reader) == len(expected)
            for i in reversed(range(len(expected))):
                assert reader[i] == expected[i]
    assert container.check(*at(path)) == (result.num_records, result.num_bytes, result.sha256)
    assert container.first_record(*at(path), num_bytes=result.num_bytes) == expected[0]


RAW = [name for name in NAMES if get_container(name).raw_examples]


def test_the_example_containers_give_and_take_raw_records():
    assert RAW == ["array_record", "tfrecord"]  # webdataset and parquet: decoded records only


@pytest.mark.parametrize("name", RAW)
def test_raw_records_are_the_example_bytes(tmp_path, name):
    container = get_container(name)
    path, result = _write(container, tmp_path / "a")
    raw = list(container.iter_raw(*at(path)))
    assert [position for position, _ in raw] == list(result.offsets)
    assert [encode_example(r) for r in _records()] == [bytes(data) for _, data in raw]
    with container.open(*at(path)) as reader:
        assert [bytes(reader.raw(i)) for i in range(len(reader))] == [bytes(d) for _, d in raw]


@pytest.mark.parametrize("name", sorted(set(NAMES) - set(RAW)))
def test_a_container_of_decoded_records_refuses_raw_ones(tmp_path, name):
    with pytest.raises(NotImplementedError, match="not Example bytes"):
        get_container(name).iter_raw(*at(tmp_path / "any"))


@pytest.mark.parametrize("name", NAMES)
def test_same_records_give_the_same_bytes(tmp_path, name):
    container = get_container(name)
    first, a = _write(container, tmp_path / "a")
    second, b = _write(container, tmp_path / "b")
    assert a == b
    assert Path(first).read_bytes() == Path(second).read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_an_error_in_the_block_leaves_nothing(tmp_path, name):
    container = get_container(name)
    path = tmp_path / container.shard_name("ds", "train", 0, 1)
    with pytest.raises(KeyError), container.writer(path) as writer:
        writer.write(_records()[0])
        raise KeyError("stop")
    assert writer.result is None
    assert os.listdir(tmp_path) == []


# A byte inside the framing each container checks: TFRecord's length CRC, a chunk of
# ArrayRecord (riegeli hashes every chunk), the first tar header's checksum, the first data
# page of Parquet's image column (its page checksum).
FLIP = {"tfrecord": 3, "array_record": 100, "webdataset": 3, "parquet": 100}


@pytest.mark.parametrize("name", NAMES)
def test_check_names_a_flipped_byte(tmp_path, name):
    container = get_container(name)
    path, _ = _write(container, tmp_path)
    data = bytearray(Path(path).read_bytes())
    data[FLIP[name]] ^= 0x40
    Path(path).write_bytes(data)
    with pytest.raises(RecordError) as caught:
        container.check(*at(path))
    assert caught.value.path == path
    assert caught.value.offset == 0


def test_a_tfrecord_first_record_reads_the_shards_head_only(tmp_path):
    """What a grow holds to contents.json of each shard it keeps: the first record, framing
    checked, the rest unread (a damaged later record passes); a gzip shard's through its
    stream; a broken head names the file."""
    container = get_container("tfrecord")
    path, _ = _write(container, tmp_path)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:-5] + bytes([data[-5] ^ 1]) + data[-4:])  # the last record's
    assert container.first_record(*at(path)) == _as_read(_records()[0])
    Path(path).write_bytes(data[:20] + bytes([data[20] ^ 1]) + data[21:])  # the first's data
    with pytest.raises(RecordError, match=f"{path} at byte 0: data CRC mismatch"):
        container.first_record(*at(path))
    Path(path).write_bytes(data[:4] + b"\xff" * 4 + data[8:])  # a length past the file
    with pytest.raises(RecordError, match=f"{path} at byte 0: length CRC mismatch"):
        container.first_record(*at(path))
    with container.writer(path := str(tmp_path / "z"), compression="gzip") as writer:
        for features in _records():
            writer.write(features)
    assert container.first_record(*at(path), compression="gzip") == _as_read(_records()[0])


def test_a_compressed_array_record_is_read_a_record_at_a_time(tmp_path):
    """A zstd ArrayRecord (TFDS's kind) of 8 records of 8 MiB of zeros is a file of 128 KiB:
    read 256 records at a time, all 64 MiB were held at once (8 of 128 MiB: 2.9 GB); each
    record is refused alone, no more than one held."""
    import tracemalloc

    from array_record.python import array_record_module

    path = tmp_path / get_container("array_record").shard_name("ds", "train", 0, 1)
    writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1,zstd")
    for _ in range(8):
        writer.write(bytes(8 << 20))
    writer.close()
    assert path.stat().st_size <= 128 << 10
    tracemalloc.start()
    try:
        read = list(get_container("array_record").iter_records(*at(path)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [str(fault) for _, fault in read] == [
        f"{path} at record {i}: not a tf.train.Example (a field numbered 0)" for i in range(8)
    ]
    assert peak < 20 << 20, peak  # one record of 8 MiB (and its copy), not 8


@pytest.mark.parametrize("name", NAMES)
def test_check_names_a_truncated_file(tmp_path, name):
    container = get_container(name)
    path, _ = _write(container, tmp_path)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])
    with pytest.raises(RecordError, match=r"truncated|[Cc]orrupt|unreadable") as caught:
        container.check(*at(path))
    assert caught.value.path == path


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.heavy
@pytest.mark.long  # Grain and TFDS read it in make test (tests/containers/test_formats.py)
def test_array_record_is_read_by_array_record_and_grain(tmp_path):
    needs("grain")
    container = get_container("array_record")
    records = _records()
    paths = [_write(container, tmp_path, records[k::2], k)[0] for k in range(2)]
    expected = [[_sha(r["image"]), r["label"]] for r in records[0::2] + records[1::2]]
    read = run_json(READ_ARRAY_RECORD, *paths)
    assert read["first_file"] == expected[: len(records[0::2])]
    assert read["records"] == expected


@pytest.mark.heavy
def test_webdataset_is_read_by_webdataset_and_wids(tmp_path):
    needs("webdataset")
    needs("wids")
    container = get_container("webdataset")
    records = _records()
    shards = [_write(container, tmp_path, records[k::2], k) for k in range(2)]
    expected = records[0::2] + records[1::2]
    (file, document), *more = container.split_files(
        "ds", "train", [(os.path.basename(p), r.num_records, r.num_bytes) for p, r in shards]
    ).items()
    assert not more and file == "ds-train.shardindex.json"
    (tmp_path / file).write_text(json.dumps(document))
    read = run_json(READ_WEBDATASET, str(tmp_path / file), str(tmp_path / "cache"),
                    *(path for path, _ in shards))  # fmt: skip
    assert [d["shape"] for d in read["decoded"]] == [[r["height"], r["width"], 3] for r in expected]
    assert [d["label"] for d in read["decoded"]] == [r["label"] for r in expected]
    assert [d["json"]["key"] for d in read["decoded"]] == [os.fsdecode(r["key"]) for r in expected]
    assert [d["json"]["coarse_label"] for d in read["decoded"]] == [
        r["coarse_label"] for r in expected
    ]
    raw = [_sha(r["image"]) if r["format"] == b"raw" else None for r in expected]
    assert [d["npy"] for d in read["decoded"]] == raw  # .npy holds the raw pixels
    assert read["stored"] == [_sha(r["image"]) for r in expected if r["format"] != b"raw"]
    assert read["by_index"] == [[r["label"], r["height"]] for r in expected]


def test_a_label_that_is_not_one_class_index_stays_in_the_json(tmp_path):
    container = get_container("webdataset")
    records = [dict(r, label=[r["label"], 2]) for r in _records()[:2]]
    records.append({k: v for k, v in _records()[2].items() if k != "label"})
    path, _ = _write(container, tmp_path, records)
    assert [e for _, e in container.iter_records(*at(path))] == [
        {k: v if isinstance(v, list) else [v] for k, v in r.items()} for r in records
    ]
    with tarfile.open(path) as tar:
        assert not [n for n in tar.getnames() if n.endswith(".cls")]


@pytest.mark.parametrize("name", NAMES)
def test_an_empty_shard_is_a_valid_file(tmp_path, name):
    container = get_container(name)
    path, result = _write(container, tmp_path, records=[])
    assert result.num_records == 0
    assert container.check(*at(path)) == (0, result.num_bytes, result.sha256)
    assert list(container.iter_records(*at(path))) == []
    assert container.first_record(*at(path)) is None


FILE_SIZE_LIMIT = """
import os, resource, sys
from shardpack.containers import get_container
from shardpack.errors import OutputError
from tests.containers.test_conformance import _records
container, folder = get_container(sys.argv[1]), sys.argv[2]
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))  # Python ignores SIGXFSZ: EFBIG
path = os.path.join(folder, container.shard_name("ds", "train", 0, 1))
try:
    with container.writer(path) as writer:
        for _ in range(300):
            writer.write(_records()[0])
except OutputError as e:
    print(e)
"""


@pytest.mark.parametrize("name", NAMES)
def test_a_full_disk_is_one_error_and_leaves_nothing(tmp_path, name):
    """A real EFBIG from the kernel (RLIMIT_FSIZE), in a process of its own."""
    run = forkserver.run(FILE_SIZE_LIMIT, name, str(tmp_path), timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "cannot write" in run.stdout and ".partial" in run.stdout, run.stdout
    assert "free some space" in run.stdout, run.stdout  # the errno survives the library
    assert os.listdir(tmp_path) == []


class _FullSink(io.BytesIO):
    """A sink that fails once it holds more than `room` bytes (as a full disk does)."""

    def __init__(self, room: int = 1 << 40) -> None:
        super().__init__()
        self.room = room

    def write(self, data) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(28, "No space left on device")
        return super().write(data)


def _written_whole(sink, pieces):
    """A HashingFile over `sink` once `pieces` are written and finished, its sink holding them
    in order and its size and sha256 theirs."""
    from shardpack.containers import HashingFile

    hashing = HashingFile(sink)
    for piece in pieces:
        hashing.write(piece)
    size, sha256 = hashing.finish()
    whole = b"".join(pieces)
    assert sink.getvalue() == whole and size == len(whole)
    assert sha256 == hashlib.sha256(whole).hexdigest()
    return hashing


def test_a_shard_s_bytes_are_hashed_and_written_in_order_off_the_worker_s_thread():
    """HashingFile hands chunks to a thread of its own: the file and its sha256 are those of
    the bytes in the order written; a sink's error reaches the writer at its next write (or at
    finish) with the thread ended, and a discarded shard takes no more bytes and no error."""
    from shardpack.containers import HashingFile

    pieces = [np.random.default_rng(i).bytes(1 + 50_000 * (i % 7)) for i in range(200)]
    hashing = _written_whole(_FullSink(), pieces)
    assert not hashing._thread.is_alive()

    hashing = HashingFile(_FullSink(room=3 * HashingFile.CHUNK))
    with pytest.raises(OSError, match="No space left"):
        for piece in pieces:
            hashing.write(piece)
    assert not hashing._thread.is_alive()  # ended by the write that raised: nothing to leak

    quiet = HashingFile(_FullSink(room=0))
    quiet.write(bytes(HashingFile.CHUNK))
    quiet.discard()
    quiet.write(b"a trailer on the way out")  # goes nowhere, raises nothing
    quiet.finish()
    assert not quiet._thread.is_alive()


def test_where_no_core_is_spare_a_shard_s_bytes_are_hashed_and_written_inline(monkeypatch):
    """Not threaded (every core has a worker): no thread, each chunk's pieces hashed and
    written as they are when it fills; the same bytes and sha256, a sink's error at the next
    write, and a discarded shard takes no more bytes and no error."""
    from shardpack.containers import HashingFile

    monkeypatch.setattr(HashingFile, "threaded", False)
    pieces = [np.random.default_rng(i).bytes(1 + 50_000 * (i % 7)) for i in range(200)]
    assert _written_whole(_FullSink(), pieces)._thread is None

    hashing = HashingFile(_FullSink(room=3 * HashingFile.CHUNK))
    written = 0
    with pytest.raises(OSError, match="No space left"):
        for piece in pieces:
            hashing.write(piece)
            written += len(piece)
    assert written < 5 * HashingFile.CHUNK  # the write after the chunk that failed

    quiet = HashingFile(_FullSink(room=0))
    quiet.write(bytes(HashingFile.CHUNK))
    quiet.discard()
    quiet.write(b"a trailer on the way out")
    quiet.finish()


def test_a_chunk_of_small_pieces_is_written_as_one_and_a_large_record_alone():
    """The thread joins a chunk's pieces (each a release of the GIL less), a record past a
    chunk apart, written as it is, not copied; the bytes and their sha256 are the same."""
    from shardpack.containers import HashingFile

    class Counting(_FullSink):
        def write(self, data) -> int:
            self.sizes.append(len(data))
            return super().write(data)

    chunk = HashingFile.CHUNK
    pieces = [b"h" * 512, b"i" * 40_000, b"p" * 300] * 100 + [b"L" * (2 * chunk), b"t" * 9]
    sink = Counting()
    sink.sizes = []
    _written_whole(sink, pieces)
    assert sink.sizes[0] >= chunk  # small pieces: one write a chunk
    assert 2 * chunk in sink.sizes  # the large record, alone
    assert len(sink.sizes) < len(pieces) / 50


@pytest.mark.parametrize(("name", "compression"), [("tfrecord", "gzip"), ("webdataset", "none")])
def test_a_failing_shard_keeps_its_own_error_and_leaves_no_thread(tmp_path, name, compression):
    """The shard's block fails (a bad image with --on-error fail, Ctrl-C) after its sink has
    failed too: the block's exception is the one that comes out (a GZIP trailer raised the
    disk's in its place), and a trailer written after the sink failed leaves no thread."""
    import threading

    from shardpack.storage import storage_at

    class Full:  # an OUT whose sinks fill after 100 KB
        def __init__(self, storage):
            self.storage = storage

        def __getattr__(self, name):
            return getattr(self.storage, name)

        def create(self, name, by_path=False):
            sink = self.storage.create(name, by_path=by_path)
            write, write_parts = sink.write, sink.write_parts
            written = [0]

            def room(size):
                written[0] += size
                if written[0] > 100_000:
                    raise OSError(28, "No space left on device")

            def full(data):
                room(len(data))
                return write(data)

            def full_parts(parts):  # a shard's bytes thread writes a chunk in one call
                room(sum(map(len, parts)))
                write_parts(parts)

            sink.write, sink.write_parts = full, full_parts
            return sink

    container = get_container(name)
    out = Full(storage_at(str(tmp_path)))
    threads = threading.active_count()
    big = {**_records()[0], "image": np.random.default_rng(0).bytes(300_000)}  # 4 > a chunk
    with (
        pytest.raises(KeyError, match="the block's own"),
        container.writer("s.shard", compression, storage=out) as writer,
    ):
        # the thread may meet the full disk while a record is still being written (in
        # pieces), and the next piece's write says so: the block goes on to fail its own way
        with suppress(OutputError):
            for _ in range(4):
                writer.write(big)
        time.sleep(0.3)  # the thread has met the full disk by now
        raise KeyError("the block's own")
    with (
        pytest.raises(OutputError, match="No space left"),  # the trailer meets it: one line
        container.writer("t.shard", compression, storage=out) as writer,
    ):
        for _ in range(4):
            writer.write(big)
        time.sleep(0.3)
    assert threading.active_count() == threads
    assert [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("garbage", ["zeros", "random", "other"])
def test_a_file_that_is_not_a_shard_is_refused_by_every_reader(tmp_path, name, garbage):
    container = get_container(name)
    other = get_container(NAMES[(NAMES.index(name) + 1) % len(NAMES)])
    path = tmp_path / container.shard_name("ds", "train", 0, 1)
    if garbage == "other":  # another container's shard under this one's name
        os.replace(_write(other, tmp_path / "other")[0], path)
    else:
        size = 200_000
        path.write_bytes(
            bytes(size) if garbage == "zeros" else np.random.default_rng(0).bytes(size)
        )
    with pytest.raises(RecordError) as caught:
        container.check(*at(path))
    assert caught.value.path == str(path)
    with pytest.raises(RecordError), container.open(*at(path)) as reader:
        reader[0]


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    return info


@pytest.mark.parametrize(
    ("members", "fault"),
    [
        ([("../000000.jpg", b"x")], "unexpected tar member"),
        ([("000000.jpg", b"")], "archive ends inside a sample"),
        ([("000000.jpg", b"x"), ("000000.cls", b"1"), ("000001.json", b"{}")], "is not <key>"),
        ([("000000.jpg", b"x"), ("000000.cls", b"1"), ("000000.cls", b"1")], "is not <key>"),
        (
            [("000000.jpg", b"x"), ("000000.txt", b"a"), ("000000.json", b'{"format":"jpeg"}')],
            "not img2dataset's",
        ),
        ([("000000.jpg", b"x"), ("000000.txt", b"a"), ("000000.cls", b"1")], "is not <key>"),
        ([("000000.txt", b"x"), ("000000.cls", b"1"), ("000000.json", b"{}")], "no image"),
        ([("000000.jpg", b"x"), ("000000.cls", b"one"), ("000000.json", b"{}")], "decimal"),
        ([("000000.jpg", b"x"), ("000000.cls", b"1"), ("000000.json", b"[")], "not JSON"),
        (
            [("000000.npy", b"x"), ("000000.cls", b"1"), ("000000.json", b'{"format":"raw"}')],
            "does not load",
        ),
    ],
)
def test_a_hostile_tar_is_refused_by_name(tmp_path, members, fault):
    path = _tar(tmp_path / "x.tar", [(_member(name), data) for name, data in members])
    with pytest.raises(RecordError, match=fault) as caught:
        get_container("webdataset").check(*at(path))
    assert caught.value.path == str(path)


@pytest.mark.parametrize(
    ("name", "size"), [("000000.jpg", 0), ("123456.json", 1), ("9.npy", 2**33 - 1)]
)
def test_tar_headers_are_tarfiles_own(name, size):
    from shardpack.containers.webdataset import _header, _ustar

    assert _header(name, size) == _ustar(name, size)
    info = tarfile.TarInfo.frombuf(_header(name, size), "utf-8", "strict")
    assert (info.name, info.size, info.mtime, info.mode, info.uname) == (name, size, 0, 0o644, "")


def test_a_link_member_is_refused(tmp_path):
    path = _tar(tmp_path / "x.tar", [(_member("000000.jpg", tarfile.SYMTYPE), b"")])
    with pytest.raises(RecordError, match="not a tar header shardpack writes"):
        get_container("webdataset").check(*at(path))


DALI_WEBDATASET = """
import json, sys
import numpy as np
from nvidia.dali import fn, pipeline_def
paths = sys.argv[1:]
@pipeline_def(batch_size=7, num_threads=1, device_id=None)
def pipe():
    image, label = fn.readers.webdataset(paths=paths, ext=["jpg;png", "cls"], name="r",
                                         missing_component_behavior="skip")
    return fn.decoders.image(image, device="cpu"), label
p = pipe()
p.build()
images, labels = p.run()
labels = [int(bytes(np.array(labels.at(i))).decode()) for i in range(len(labels))]
print(json.dumps({"epoch": p.epoch_size("r"), "labels": labels,
                  "shapes": [list(images.at(i).shape) for i in range(len(images))]}))
"""


@pytest.mark.heavy
def test_dali_reads_the_tars(tmp_path):
    """NVIDIA DALI's fn.readers.webdataset on the CPU, in a process of its own."""
    needs("nvidia.dali")
    records = [r for r in _records() if r["format"] != b"raw"]  # DALI decodes jpg and png
    paths = [_write(get_container("webdataset"), tmp_path, records[k::2], k)[0] for k in range(2)]
    run = subprocess.run([sys.executable, "-c", DALI_WEBDATASET, *paths], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    expected = records[0::2] + records[1::2]
    assert result["epoch"] == len(expected)
    assert result["labels"][: len(expected)] == [r["label"] for r in expected]
    assert result["shapes"][0] == [expected[0]["height"], expected[0]["width"], 3]


@pytest.mark.parametrize("at_byte", [3, 130])  # a byte of the name; a digit of the size
def test_a_header_whose_checksum_does_not_add_up_is_refused(tmp_path, at_byte):
    """A header is ours but for one byte of its name or size, its checksum not mended."""
    from shardpack.containers.webdataset import _header

    block = bytearray(_header("000000.jpg", 1))
    block[at_byte] = ord("1") if at_byte >= 124 else ord("9")
    path = tmp_path / "x.tar"
    path.write_bytes(bytes(block) + b"\0" * 512 * 3)
    with pytest.raises(RecordError, match=r"bad tar header \(bad checksum\)"):
        get_container("webdataset").check(*at(path))
