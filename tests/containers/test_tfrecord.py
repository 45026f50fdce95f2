"""tfrecord.py: framing, Example bytes, writer and checking reader, against real TensorFlow."""

from __future__ import annotations

import gzip
import hashlib
import struct
from pathlib import Path

import crc32c
import pytest

from shardpack.containers import tfrecord
from shardpack.containers.example import decode_example, encode_example
from shardpack.containers.tfrecord import TFRecordWriter, frame, iter_records, masked_crc
from shardpack.errors import RESTORE_SHARD, RecordError
from shardpack.storage.atomic import TEMP_NAME
from tests.helpers import at

PAYLOADS = [b"", b"hello", bytes(range(256)) * 3, b"\xff" * 1000]


def _masked(data: bytes) -> int:
    """The masked CRC32C from the format description, written out independently of shardpack."""
    crc = crc32c.crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) % 2**32


def _tf():
    import tensorflow as tf

    return tf


def _tf_write(path: Path, payloads: list[bytes], options: str | None = None) -> bytes:
    tf = _tf()
    with tf.io.TFRecordWriter(str(path), options) as writer:
        for payload in payloads:
            writer.write(payload)
    return path.read_bytes()


def _tf_read(path: Path, compression: str = "") -> list[bytes]:
    tf = _tf()
    return [r.numpy() for r in tf.data.TFRecordDataset(str(path), compression_type=compression)]


def _write(path: Path, payloads: list[bytes], compression: str = "none") -> TFRecordWriter:
    with TFRecordWriter(path, compression) as writer:
        for payload in payloads:
            writer.write(payload)
    return writer


# ---- framing -------------------------------------------------------------------------------


def test_crc32c_package_gives_the_standard_check_value():
    # The golden bytes below lean on crc32c; make sure it is CRC-32C (Castagnoli) itself.
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_crc32c_comes_from_the_compiled_module_and_else_from_the_package(tmp_path: Path):
    import importlib.machinery
    import subprocess
    import sys

    from shardpack import crc

    assert crc.crc32c.__module__ == "crc32c._crc32c"  # the package's __init__ skipped
    # A crc32c laid out otherwise (no compiled module), or whose compiled module does not
    # load: the package is imported whole.
    code = "import crc32c, shardpack.crc as c; print(c.crc32c is crc32c.crc32c)"
    for broken in (False, True):
        fake = tmp_path / str(broken) / "crc32c"
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text("def crc32c(data, value=0):\n    return 7\n")
        if broken:
            (fake / f"_crc32c{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"no ELF")
        env = {"PYTHONPATH": f"{fake.parent}:{Path(__file__).parents[2]}"}
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, timeout=120)  # fmt: skip
        assert run.stdout.strip() == "True", run.stderr[-2000:]


def test_masked_crc_of_empty_is_the_mask_delta():
    assert masked_crc(b"") == 0xA282EAD8


@pytest.mark.parametrize("data", [b"", b"hello", b"123456789", bytes(range(256))])
def test_masked_crc_matches_the_formula(data):
    assert masked_crc(data) == _masked(data)


@pytest.mark.parametrize(
    ("payload", "golden"),
    [
        # 8 length bytes | masked crc32c(length bytes) LE | data | masked crc32c(data) LE
        (b"", " ".join(["0000000000000000", "29039807", "", "d8ea82a2"])),
        (b"hello", " ".join(["0500000000000000", "eab2043e", "68656c6c6f", "bb1f1c19"])),
    ],
)
def test_frame_golden_bytes(payload, golden):
    length = struct.pack("<Q", len(payload))
    derived = (
        length + struct.pack("<I", _masked(length)) + payload + struct.pack("<I", _masked(payload))
    )
    golden = golden.replace(" ", "")
    assert derived.hex() == golden
    assert frame(payload).hex() == golden


@pytest.mark.heavy
@pytest.mark.parametrize("payload", PAYLOADS, ids=["empty", "hello", "768B", "1000xFF"])
def test_frame_equals_what_tensorflow_writes(tmp_path, payload):
    assert frame(payload) == _tf_write(tmp_path / "tf.tfrecord", [payload])


@pytest.mark.heavy
def test_writer_file_is_byte_identical_to_tensorflow_writer(tmp_path):
    ours = _write(tmp_path / "ours.tfrecord", PAYLOADS)
    theirs = _tf_write(tmp_path / "tf.tfrecord", PAYLOADS)
    assert (tmp_path / "ours.tfrecord").read_bytes() == theirs
    assert ours.result[0] == len(PAYLOADS)


# ---- Example bytes -------------------------------------------------------------------------


def _tf_example(features: dict) -> bytes:
    tf = _tf()

    def feature(kind: str, values: list):
        if kind == "bytes":
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        if kind == "int":
            return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    example = tf.train.Example(
        features=tf.train.Features(feature={k: feature(*v) for k, v in features.items()})
    )
    return example.SerializeToString(deterministic=True)


# name -> (value for encode_example, (kind, values) for tf.train.Feature)
EXAMPLE_CASES = {
    "bytes": {"image": (b"\x00\xff\xd8 jpeg bytes", ("bytes", [b"\x00\xff\xd8 jpeg bytes"]))},
    "str": {
        "format": ("jpeg", ("bytes", [b"jpeg"])),
        "key": ("cats/é 1.jpg", ("bytes", ["cats/é 1.jpg".encode()])),
    },
    "empty_bytes": {"image": (b"", ("bytes", [b""]))},
    "bytes_list": {"b": ([b"a", b"", b"ccc"], ("bytes", [b"a", b"", b"ccc"]))},
    "int_zero": {"label": (0, ("int", [0]))},
    "int_small": {"label": (7, ("int", [7]))},
    "int_varint_boundary": {"n": ([127, 128, 16383, 16384], ("int", [127, 128, 16383, 16384]))},
    "int_negative": {"n": (-1, ("int", [-1]))},
    "int64_extremes": {
        "n": ([2**63 - 1, -(2**63), -300, 2**40], ("int", [2**63 - 1, -(2**63), -300, 2**40]))
    },
    "float": {"f": (1.5, ("float", [1.5]))},
    "float_list": {"f": ([0.1, -2.0, 3e38, 0.0], ("float", [0.1, -2.0, 3e38, 0.0]))},
    "empty_list": {"e": ([], ("bytes", []))},
    "no_features": {},
    "many_unsorted": {
        "width": (32, ("int", [32])),
        "channels": (3, ("int", [3])),
        "label": (9, ("int", [9])),
        "height": (24, ("int", [24])),
        "image": (b"x" * 300, ("bytes", [b"x" * 300])),  # a length that needs a 2-byte varint
        "Key": (b"upper sorts first", ("bytes", [b"upper sorts first"])),
    },
}


@pytest.mark.heavy
@pytest.mark.parametrize("case", list(EXAMPLE_CASES))
def test_encode_example_is_byte_identical_to_tensorflow(case):
    features = EXAMPLE_CASES[case]
    ours = encode_example({name: value for name, (value, _) in features.items()})
    theirs = _tf_example({name: spec for name, (_, spec) in features.items()})
    assert ours == theirs


def test_encode_example_bytes_do_not_depend_on_insertion_order():
    a = encode_example({"a": 1, "b": b"x", "c": 2.0})
    b = encode_example({"c": 2.0, "b": b"x", "a": 1})
    assert a == b


@pytest.mark.heavy
def test_tensorflow_parses_encode_example():
    tf = _tf()
    data = encode_example(
        {"image": b"\x01\x02", "label": -5, "big": 2**62, "f": [0.5, 2.0], "format": "png"}
    )
    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
        "big": tf.io.FixedLenFeature([], tf.int64),
        "f": tf.io.FixedLenFeature([2], tf.float32),
        "format": tf.io.FixedLenFeature([], tf.string),
    }
    parsed = {k: v.numpy() for k, v in tf.io.parse_single_example(data, spec).items()}
    assert parsed["image"] == b"\x01\x02"
    assert parsed["label"] == -5
    assert parsed["big"] == 2**62
    assert parsed["f"].tolist() == [0.5, 2.0]
    assert parsed["format"] == b"png"


@pytest.mark.parametrize("value", [[1, b"x"], [1.0, 2], True, None, {"a": 1}])
def test_encode_example_refuses_mixed_or_unknown_values(value):
    with pytest.raises(TypeError, match="feature values"):
        encode_example({"x": value})


@pytest.mark.parametrize("value", [2**63, 2**64, -(2**63) - 1])
def test_encode_example_refuses_ints_outside_int64(value):
    # Regression: _varint masked to 64 bits, so 2**64 was written as 0 and 2**63 read back as
    # -2**63; TensorFlow's Int64List raises instead.
    with pytest.raises(ValueError, match="64 bits"):
        encode_example({"n": value})


def test_decode_example_round_trips():
    features = {
        "image": b"\x00\xffpixels",
        "label": 3,
        "neg": -(2**63),
        "max": 2**63 - 1,
        "ints": [1, -1, 300],
        "f": 0.25,
        "floats": [1.0, -0.5],
        "names": [b"a", b"bc"],
        "text": "é",
        "empty": [],
    }
    decoded = decode_example(encode_example(features))
    assert decoded == {
        "image": [b"\x00\xffpixels"],
        "label": [3],
        "neg": [-(2**63)],
        "max": [2**63 - 1],
        "ints": [1, -1, 300],
        "f": [0.25],
        "floats": [1.0, -0.5],
        "names": [b"a", b"bc"],
        "text": ["é".encode()],
        "empty": [],
    }


@pytest.mark.heavy
def test_decode_example_reads_tensorflow_bytes():
    data = _tf_example(
        {"image": ("bytes", [b"abc"]), "label": ("int", [-7, 2**50]), "f": ("float", [1.5])}
    )
    assert decode_example(data) == {"image": [b"abc"], "label": [-7, 2**50], "f": [1.5]}


@pytest.mark.parametrize(
    "data", [b"\x0a\x05\x0a", b"\x0a", b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"]
)
def test_decode_example_refuses_malformed_bytes(data):
    with pytest.raises(ValueError):
        decode_example(data)


# ---- TFRecordWriter ------------------------------------------------------------------------


def test_writer_result_matches_the_file(tmp_path):
    path = tmp_path / "a.tfrecord"
    writer = _write(path, PAYLOADS)
    data = path.read_bytes()
    assert writer.result[:3] == (len(PAYLOADS), len(data), hashlib.sha256(data).hexdigest())
    assert data == b"".join(frame(p) for p in PAYLOADS)
    # Each record's offset, as the writer saw it: where the reader finds that record.
    assert writer.result.offsets == tuple(offset for offset, _ in iter_records(*at(path)))
    assert writer.result.offsets == tuple(_offsets(PAYLOADS))


def test_writer_file_appears_only_on_clean_exit(tmp_path):
    path = tmp_path / "a.tfrecord"
    with TFRecordWriter(path) as writer:
        writer.write(b"one")
        assert not path.exists()
        assert TEMP_NAME.fullmatch(Path(writer.sink.name).name)  # hidden, beside the file
        assert Path(writer.sink.name).parent == tmp_path and Path(writer.sink.name).exists()
    assert path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tfrecord"]


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_writer_removes_temp_file_on_exception(tmp_path, compression):
    path = tmp_path / "a.tfrecord"
    with pytest.raises(RuntimeError, match="boom"), TFRecordWriter(path, compression) as writer:
        writer.write(b"one")
        raise RuntimeError("boom")
    assert writer.result is None
    assert list(tmp_path.iterdir()) == []


def test_writer_exception_keeps_an_older_file_untouched(tmp_path):
    path = tmp_path / "a.tfrecord"
    _write(path, [b"old"])
    before = path.read_bytes()
    with pytest.raises(RuntimeError), TFRecordWriter(path) as writer:
        writer.write(b"new")
        raise RuntimeError
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tfrecord"]


def test_writer_refuses_unknown_compression(tmp_path):
    with pytest.raises(ValueError, match="'zstd'"):
        TFRecordWriter(tmp_path / "a", "zstd")


def test_empty_writer_gives_an_empty_file(tmp_path):
    path = tmp_path / "a.tfrecord"
    writer = _write(path, [])
    assert path.read_bytes() == b""
    assert writer.result == (0, 0, hashlib.sha256(b"").hexdigest(), (), None)  # no Arrow bytes
    assert list(iter_records(*at(path))) == []


@pytest.mark.heavy
def test_gzip_output_is_read_by_tensorflow_and_deterministic(tmp_path):
    a, b = tmp_path / "a.tfrecord.gz", tmp_path / "b.tfrecord.gz"
    ra = _write(a, PAYLOADS, "gzip")
    rb = _write(b, PAYLOADS, "gzip")
    assert a.read_bytes() == b.read_bytes()
    assert ra.result == rb.result
    data = a.read_bytes()
    assert ra.result[:3] == (len(PAYLOADS), len(data), hashlib.sha256(data).hexdigest())
    assert data[:2] == b"\x1f\x8b"
    # Two writes a second apart would differ unless the header holds no time and no file name.
    assert data[3] == 0  # FLG: no FNAME, no FEXTRA, no FCOMMENT
    assert data[4:8] == bytes(4)  # MTIME
    assert gzip.decompress(data) == b"".join(frame(p) for p in PAYLOADS)
    assert _tf_read(a, "GZIP") == PAYLOADS


@pytest.mark.heavy
def test_iter_records_reads_gzip_written_by_tensorflow(tmp_path):
    path = tmp_path / "tf.tfrecord.gz"
    _tf_write(path, PAYLOADS, "GZIP")
    assert [data for _, data in iter_records(*at(path), "gzip")] == PAYLOADS


@pytest.mark.heavy
def test_tensorflow_reads_uncompressed_output(tmp_path):
    path = tmp_path / "a.tfrecord"
    _write(path, PAYLOADS)
    assert _tf_read(path) == PAYLOADS


# ---- iter_records --------------------------------------------------------------------------


def _offsets(payloads: list[bytes]) -> list[int]:
    offsets, pos = [], 0
    for p in payloads:
        offsets.append(pos)
        pos += 16 + len(p)
    return offsets


def test_iter_records_yields_offsets_and_data(tmp_path):
    path = tmp_path / "a.tfrecord"
    _write(path, PAYLOADS)
    assert list(iter_records(*at(path))) == list(zip(_offsets(PAYLOADS), PAYLOADS, strict=True))


@pytest.mark.heavy
def test_iter_records_reads_tensorflow_output(tmp_path):
    path = tmp_path / "tf.tfrecord"
    _tf_write(path, PAYLOADS)
    assert [data for _, data in iter_records(*at(path))] == PAYLOADS


def _damaged(tmp_path: Path, position: int | None = None, cut: int | None = None) -> Path:
    """Three records of 10 bytes each (26 bytes framed); flip one byte or cut the file."""
    path = tmp_path / "a.tfrecord"
    _write(path, [b"0123456789", b"abcdefghij", b"ABCDEFGHIJ"])
    data = bytearray(path.read_bytes())
    if position is not None:
        data[position] ^= 0x40
    if cut is not None:
        data = data[:cut]
    path.write_bytes(bytes(data))
    return path


def _error(path: Path, compression: str = "none") -> RecordError:
    with pytest.raises(RecordError) as caught:
        list(iter_records(*at(path), compression))
    return caught.value


def test_flipped_data_byte_names_its_record_offset(tmp_path):
    """It named the file and the record's byte, and no fix: a caller of iter_examples or a
    DataLoader loop (no CLI to add one) was left with "data CRC mismatch (corrupt record)"."""
    path = _damaged(tmp_path, position=26 + 12 + 3)  # a data byte of the second record
    error = _error(path)
    assert error.offset == 26
    assert str(error) == (f"{path} at byte 26: data CRC mismatch (corrupt record): the shard is "
                          f"damaged; {RESTORE_SHARD}")  # fmt: skip


def test_records_before_the_damage_are_yielded(tmp_path):
    path = _damaged(tmp_path, position=52 + 14)
    seen = []
    with pytest.raises(RecordError) as caught:
        for offset, data in iter_records(*at(path)):
            seen.append((offset, data))
    assert seen == [(0, b"0123456789"), (26, b"abcdefghij")]
    assert caught.value.offset == 52


@pytest.mark.parametrize("position", [52 + 0, 52 + 7, 52 + 9])  # length bytes and length CRC
def test_flipped_length_or_length_crc_byte_names_its_record_offset(tmp_path, position):
    error = _error(_damaged(tmp_path, position=position))
    assert error.offset == 52
    assert "length CRC" in error.reason and error.reason.endswith(RESTORE_SHARD)


def test_flipped_data_crc_byte_is_caught(tmp_path):
    error = _error(_damaged(tmp_path, position=26 + 22 + 1))
    assert error.offset == 26
    assert "data CRC" in error.reason


@pytest.mark.parametrize(
    ("cut", "offset", "where"),
    [
        (26 + 5, 26, "header"),  # inside the second record's header
        (26 + 12 + 4, 26, "inside a record"),  # inside its data
        (78 - 1, 52, "inside a record"),  # one byte short of the last footer
    ],
)
def test_truncated_file_names_the_record_offset(tmp_path, cut, offset, where):
    error = _error(_damaged(tmp_path, cut=cut))
    assert error.offset == offset
    assert "truncated" in error.reason
    assert where in error.reason


def test_check_crc_false_does_not_check(tmp_path):
    path = _damaged(tmp_path, position=26 + 12 + 3)
    records = [data for _, data in iter_records(*at(path), check_crc=False)]
    assert records[1] != b"abcdefghij"
    assert len(records) == 3


def test_truncated_gzip_raises_record_error(tmp_path):
    path = tmp_path / "a.tfrecord.gz"
    _write(path, PAYLOADS, "gzip")
    path.write_bytes(path.read_bytes()[:-12])
    assert "unreadable compressed data" in _error(path, "gzip").reason


def test_plain_file_read_as_gzip_raises_record_error(tmp_path):
    path = _damaged(tmp_path)
    assert _error(path, "gzip").offset == 0


def test_every_flipped_byte_of_a_gzip_file_is_caught_or_harmless(tmp_path):
    # Regression: a damaged deflate stream raised zlib.error, which escaped as a traceback.
    payloads = [bytes([i]) * 40 + bytes(range(i, i + 20)) for i in range(8)]
    clean = tmp_path / "clean.tfrecord.gz"
    _write(clean, payloads, "gzip")
    original = clean.read_bytes()
    damaged = tmp_path / "damaged.tfrecord.gz"
    escaped = []
    for position in range(10, len(original)):  # every byte after the gzip header
        data = bytearray(original)
        data[position] ^= 0x10
        damaged.write_bytes(bytes(data))
        try:
            records = [r for _, r in iter_records(*at(damaged), "gzip")]
        except RecordError:
            continue
        except Exception as e:  # anything else is a traceback for the user
            escaped.append((position, f"{type(e).__module__}.{type(e).__name__}"))
            continue
        assert records == payloads, position  # undetected damage must at least be harmless
    assert escaped == []


# ---- iter_views ----------------------------------------------------------------------------


def _outcome(records) -> list:
    """What a reader gave: (offset, bytes or the fault's message), then the error it raised."""
    out: list = []
    try:
        for offset, data in records:
            out.append((offset, str(data) if isinstance(data, RecordError) else bytes(data)))
    except RecordError as e:
        out.append(str(e))
    return out


@pytest.mark.parametrize("chunk", [7, 100, 4 << 20])  # every record straddles, some, none
def test_iter_views_reads_as_iter_records_does(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(tfrecord, "_CHUNK", chunk)
    path = tmp_path / "a.tfrecord"
    whole = b"".join(frame(p) for p in PAYLOADS)
    flipped = bytearray(whole)
    flipped[len(frame(PAYLOADS[0])) + 20] ^= 1  # in the data of the second record
    bent_header = bytearray(whole)
    bent_header[len(frame(PAYLOADS[0])) + 1] ^= 1  # in the length of the second record
    for content in (whole, bytes(flipped), bytes(bent_header), whole[:-3], whole[:-1000]):
        path.write_bytes(content)
        expected = _outcome(iter_records(*at(path), data_faults=True))
        assert _outcome(tfrecord.iter_views(*at(path))) == expected
    assert isinstance(expected[-1], str)  # the file cut short raised


@pytest.mark.parametrize("one_read", [0, 1 << 20])  # header, data and footer apart; at once
def test_a_record_read_by_its_offset_is_checked_alike_in_one_read_or_three(
    tmp_path, monkeypatch, one_read
):
    monkeypatch.setattr(tfrecord, "_ONE_READ", one_read)
    path = tmp_path / "a.tfrecord"
    whole = b"".join(frame(p) for p in PAYLOADS)
    path.write_bytes(whole)
    offsets = [offset for offset, _ in iter_records(*at(path))]
    flipped = bytearray(whole)
    flipped[offsets[1] + 20] ^= 1  # in the data of the second record
    moved = [0, offsets[1] + 3, *offsets[2:]]  # an index whose second record starts elsewhere
    last = len(PAYLOADS) - 1
    for content, listed, record, fault in (
        (bytes(flipped), offsets, 1, "data CRC mismatch"),
        (whole, moved, 1, "damaged or its index file is stale"),
        (whole[:-3], offsets, last, "damaged or its index file is stale"),  # its footer cut short
    ):
        path.write_bytes(content)
        reader = tfrecord.TFRecord().open(*at(path), offsets=listed)
        with reader, pytest.raises(RecordError, match=fault):
            reader.raw(record)
    path.write_bytes(whole)
    with tfrecord.TFRecord().open(*at(path), offsets=offsets) as reader:
        assert [reader.raw(i) for i in range(len(reader))] == PAYLOADS
        for i, payload in enumerate(PAYLOADS):  # the data where it was read: in its framing
            data, start, stop = reader.framed(i)
            assert data[start:stop] == payload
            assert data == (frame(payload) if one_read else payload)


@pytest.mark.parametrize("one_read", [0, 1 << 20])  # header, data and footer apart; at once
@pytest.mark.parametrize("flip", [8, 11])  # the first and last byte of the length's CRC
def test_a_record_whose_length_crc_fails_is_refused_when_read_by_its_offset(
    tmp_path, monkeypatch, one_read, flip
):
    """Its length and data as written, only the length's CRC wrong: no read of it passes (the
    one-read path checks the framing inline for a record that passes)."""
    monkeypatch.setattr(tfrecord, "_ONE_READ", one_read)
    path = tmp_path / "a.tfrecord"
    whole = bytearray(b"".join(frame(p) for p in PAYLOADS))
    path.write_bytes(whole)
    offsets = [offset for offset, _ in iter_records(*at(path))]
    whole[offsets[1] + flip] ^= 1
    path.write_bytes(whole)
    with tfrecord.TFRecord().open(*at(path), offsets=offsets) as reader:
        assert reader.raw(0) == PAYLOADS[0]
        with pytest.raises(RecordError, match="damaged or its index file is stale"):
            reader.framed(1)


@pytest.mark.parametrize(
    "image_size", [0, 100, 4095, 4096, 300_000], ids=["empty", "small", "under", "at", "large"]
)
def test_a_record_written_in_pieces_is_the_record_framed_whole(tmp_path, image_size):
    """The writer frames an Example's pieces without joining them (its image alone where large,
    the small parts joined around it): the shard holds exactly frame(encode_example(...)) of
    each record, whatever the image's size and wherever its entry falls among the keys."""
    image = bytes(range(256)) * (image_size // 256) + bytes(image_size % 256)
    records = [
        {"image": image, "height": 3, "width": 4, "key": b"a/b.jpg", "label": 2},
        {"a_first": image, "z_last": image, "label": 1},  # two large entries, first and last
        {"zz": image},
    ]
    path = tmp_path / "s.tfrecord"
    with tfrecord.TFRecord().writer(str(path)) as writer:
        for record in records:
            writer.write(record)
    assert path.read_bytes() == b"".join(frame(encode_example(r)) for r in records)
    assert writer.result.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
