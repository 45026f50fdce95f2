"""What the readers withstand: shards written byte by byte whose records pass their CRCs but
lie, index files that lie, records that claim more than they hold. Each ends in a one-line
error (exit 2 from the CLI) or a verify FAULT, never a traceback, in bounded memory."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import shardpack
from shardpack.containers.example import encode_example
from shardpack.containers.tfrecord import frame, masked_crc
from shardpack.errors import IndexFormatError, RecordError
from tests.helpers import PEAK_KIB, at, image, needs, packed_tree, run_cli, run_kept, write_image

SHARD = "x-train.tfrecord-00000-of-00001"


def _png() -> bytes:
    import cv2

    return cv2.imencode(".png", image(0))[1].tobytes()


def _good(**changes) -> dict:
    features = {"image": _png(), "label": 1, "height": 24, "width": 32, "channels": 3,
                "format": b"png", "key": b"b/good.png"}  # fmt: skip
    features.update(changes)
    return {k: v for k, v in features.items() if v is not None}


# A version-1 index (still read): each feature's kind alone.
V1_FEATURES = {"image": "bytes", "label": "int64", "height": "int64", "width": "int64",
               "channels": "int64", "format": "bytes", "key": "bytes"}  # fmt: skip


def _out(tmp_path: Path, shard: bytes, num_records: int = 1, compression: str = "none") -> Path:
    """OUT holding one shard of these bytes and an index.json that vouches for them."""
    out = tmp_path / "out"
    out.mkdir(parents=True)
    (out / SHARD).write_bytes(shard)
    split = {"num_records": num_records, "class_counts": [0, num_records], "shards": [
        {"file": SHARD, "num_records": num_records, "num_bytes": len(shard),
         "sha256": hashlib.sha256(shard).hexdigest()}]}  # fmt: skip
    index = {"format": "shardpack-index", "version": 1, "name": "x", "source": "folder",
             "classes": ["a", "b"], "features": V1_FEATURES, "encoding": "png",
             "compression": compression, "splits": {"train": split}}  # fmt: skip
    (out / "index.json").write_text(json.dumps(index))
    return out


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The CLI's run in this process (tests.helpers.run_cli): its exit code and its lines are
    the point here, not the process."""
    return run_cli(*args)


def _one_line_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert all(w in done.stderr for w in words), done.stderr


LIARS = {
    "not an Example": b"\x0a\x05\x0a\x03abc-this is not a protobuf message",
    "int64 key": encode_example(_good(key=7)),
    "label out of range": encode_example(_good(label=12)),
    "non-UTF-8 format": encode_example(_good(format=b"\xff\xfe")),
    "missing label": encode_example(_good(label=None)),
}
FAULTS = {
    "not an Example": "not a tf.train.Example",
    "int64 key": "feature 'key'",
    "label out of range": "label 12 outside the 2 classes",
    "non-UTF-8 format": "format b'\\xff\\xfe' is not one of",
    "missing label": "feature 'label' missing",
}


@pytest.mark.parametrize("liar", sorted(LIARS))
def test_a_record_that_passes_its_crc_but_lies(tmp_path: Path, liar: str):
    out = _out(tmp_path, frame(LIARS[liar]))
    report = shardpack.verify(out, decode=True)  # was OK for the int64 key; a traceback for
    assert not report.ok  # the non-UTF-8 format
    assert [f.offset for f in report.faults] == [0] and FAULTS[liar] in report.faults[0].reason
    for read in (
        lambda: list(shardpack.iter_examples(out)),
        lambda: shardpack.describe(out),
        lambda: shardpack.read_record(out, "train", 0),
        lambda: shardpack.make_preview(out, tmp_path / "p.png"),
    ):
        with pytest.raises(RecordError, match=f"{SHARD} at byte 0: .*{re.escape(FAULTS[liar])}"):
            read()


def test_the_cli_names_the_mend_of_a_shard_cut_short_once(tmp_path: Path):
    """A shard shorter than the index says: its message holds the mend; the CLI's line adds
    where the others are listed, not the mend again."""
    out = _out(tmp_path, frame(encode_example(_good())))
    (out / SHARD).write_bytes((out / SHARD).read_bytes()[:-4])
    done = _cli("preview", str(out), "--out", str(tmp_path / "grid.png"))
    _one_line_error(done, SHARD, "index.json says", f"verify {out}` lists every damaged shard")
    # a size fault of the whole file: it said "at byte 0", which points at no fault
    assert f"{SHARD}: size " in done.stderr and " at byte " not in done.stderr, done.stderr
    assert done.stderr.count("from a copy or pack again") == 1, done.stderr


@pytest.mark.parametrize("command", ["inspect", "preview"])
def test_the_cli_says_one_line_for_a_lying_record(tmp_path: Path, command: str):
    out = _out(tmp_path, frame(LIARS["label out of range"]))
    args = [command, str(out)] + (
        ["--out", str(tmp_path / "p.png")] if command == "preview" else []
    )
    _one_line_error(_cli(*args), SHARD, "label 12 outside the 2 classes",
                    f"verify {out}` lists every damaged shard: restore them from a copy or "
                    "pack again")  # fmt: skip


def test_verify_cli_reports_an_int64_key_as_a_fault(tmp_path: Path):
    done = _cli("verify", str(_out(tmp_path, frame(LIARS["int64 key"]))))
    assert done.returncode == 1 and "FAULT" in done.stderr and "feature 'key'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bytes_value_that_is_a_huge_varint_allocates_nothing(tmp_path: Path):
    # bytes_list { value: <varint 2**40> }: bytes(2**40) would try to allocate a terabyte
    bad = encode_example(_good()).replace(b"\x0a\x03png", b"\x08\x80\x80\x80\x80\x80\x20")
    out = _out(tmp_path, frame(bad))
    assert "not a tf.train.Example" in shardpack.verify(out).faults[0].reason


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> Path:
    return packed_tree(tmp_path_factory.mktemp("idx"), {"a": 3}, workers=1, index_files=True)


@pytest.mark.parametrize("line", ["-5 100", "0 99999999999999", "0 100 7", "zero hundred",
                                  "0x10 20", "", "9" * 70])  # fmt: skip
def test_read_record_refuses_a_lying_index_file_line(indexed: Path, tmp_path: Path, line: str):
    import shutil

    out = Path(shutil.copytree(indexed, tmp_path / "copy"))
    idx = next((out / "idx").glob("*.idx"))
    idx.write_text(f"{line}\n" + "".join(idx.read_text().splitlines(True)[1:]))
    with pytest.raises(IndexFormatError, match=r"\.idx: line 1: .*write_index_files"):
        shardpack.read_record(out, "train", 2)


def test_a_gzip_record_of_128_mib_is_held_once(tmp_path: Path):
    """127 KB of GZIP whose one record holds 128 MiB: reading it peaked at 270 MiB more."""
    length = struct.pack("<Q", 128 * 2**20)
    body = length + struct.pack("<I", masked_crc(length)) + bytes(128 * 2**20 + 4)
    shard = gzip.compress(body, 9)
    assert len(shard) < 128 * 2**10  # 128 MiB of zeros and a CRC of zeros
    out = _out(tmp_path, shard, compression="gzip")
    code = (
        "import sys, shardpack, shardpack.read.stream\n"
        f"before = {PEAK_KIB}\n"
        "try:\n    list(shardpack.iter_examples(sys.argv[1]))\n"
        "except shardpack.RecordError as e:\n    reason = e.reason\n"
        f"grew = {PEAK_KIB} - before\n"
        "print(grew // 1024, reason)"
    )  # the peak after the imports may grow only by what is read
    done = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True,
                          check=True)  # fmt: skip
    grew_mib, reason = done.stdout.split(maxsplit=1)
    assert int(grew_mib) < 160 and "data CRC mismatch" in reason  # the record, held once


def test_a_shuffle_holds_no_record_over_its_byte_bound(tmp_path: Path, monkeypatch):
    """Records each over the shuffle buffer's byte bound (900 MB ones against 256 MiB, scaled
    down): the shuffle held one such record in its buffer while the reader had the last and the
    next was read (3.5 GB for 900 MB records); it passes them on as they come, so shuffling
    costs no more memory than reading in order."""
    import tracemalloc

    from shardpack.read import stream

    src = tmp_path / "src"
    for i in range(8):  # 768 KiB of raw pixels a record, GZIP shard
        write_image(src / "a" / f"{i}.png", image(i, 512, 512))
    out = tmp_path / "out"
    shardpack.pack(src, out, shardpack.PackOptions(encode="raw", compression="gzip", shards=1,
                                                   workers=1))  # fmt: skip
    monkeypatch.setattr(stream, "SHUFFLE_BUFFER_BYTES", 100_000)
    peaks = []
    for shuffle in (False, True):
        tracemalloc.start()
        count = sum(1 for _ in shardpack.iter_examples(out, shuffle=shuffle, decode=False))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert count == 8
    assert peaks[1] - peaks[0] < 512 * 512 * 3 // 2, peaks


def test_a_record_over_the_cap_is_refused_before_it_is_read(tmp_path: Path):
    data = encode_example(_good())
    out = _out(tmp_path, gzip.compress(frame(data)), compression="gzip")
    from shardpack.containers.tfrecord import iter_records

    path = str(out / SHARD)
    assert [d for _, d in iter_records(*at(path), "gzip")] == [data]
    with pytest.raises(RecordError, match="over the limit of 100"):
        list(iter_records(*at(path), "gzip", max_record_bytes=100))


def test_the_pixel_limit_holds_when_reading(tmp_path: Path):
    out = _out(tmp_path, frame(encode_example(_good())))  # a 32x24 image: 768 pixels
    assert len(list(shardpack.iter_examples(out, decode=True, max_pixels=768))) == 1
    with pytest.raises(RecordError, match="32x24 pixels is over max_pixels 767"):
        list(shardpack.iter_examples(out, decode=True, max_pixels=767))
    assert "over max_pixels 767" in shardpack.verify(out, True, max_pixels=767).faults[0].reason
    raw = _good(image=b"\0" * (24 * 32 * 3), format=b"raw")
    out = _out(tmp_path / "raw", frame(encode_example(raw)))
    with pytest.raises(RecordError, match="over max_pixels 767"):
        list(shardpack.iter_examples(out, decode=True, max_pixels=767))


def test_a_raw_record_whose_fields_disagree_with_its_bytes(tmp_path: Path):
    raw = _good(image=b"\0" * 100, format=b"raw")
    out = _out(tmp_path, frame(encode_example(raw)))
    with pytest.raises(RecordError, match="raw image of 100 bytes, fields say 24x32x3"):
        list(shardpack.iter_examples(out, decode=True))


def _planted(tmp_path: Path, kind: str) -> Path:
    """OUT whose one shard name is a FIFO, or a link to a good shard outside OUT."""
    import os

    out = _out(tmp_path, frame(encode_example(_good())))
    target = tmp_path / "elsewhere"
    target.write_bytes((out / SHARD).read_bytes())
    (out / SHARD).unlink()
    if kind == "fifo":
        os.mkfifo(out / SHARD)
    else:
        (out / SHARD).symlink_to(target)
    return out


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_shard_that_is_not_a_regular_file(tmp_path: Path, kind: str):
    out = _planted(tmp_path, kind)
    with pytest.raises(RecordError, match="cannot open"):
        list(shardpack.iter_examples(out))  # a FIFO blocked here forever
    (fault,) = shardpack.verify(out).faults
    assert fault.reason == "not a regular file (a link or special file)"


@pytest.mark.heavy
def test_tf_dataset_refuses_a_shard_that_is_not_a_regular_file(tmp_path: Path):
    """TensorFlow opens local shards itself: it followed a link out of OUT and read that file's
    records as this dataset's, and waited on a FIFO for ever (hence another Python, timed)."""
    needs("tensorflow")
    outs = [_planted(tmp_path / kind, kind) for kind in ("fifo", "symlink")]
    code = (
        "import sys, shardpack\n"
        "for out in sys.argv[1:]:\n"
        "    try:\n"
        "        print('read', len(list(shardpack.tf_dataset(out, shuffle=False))))\n"
        "    except shardpack.ShardpackError as e:\n"
        "        print('refused', e)\n"
    )
    lines = run_kept(code, *map(str, outs), timeout=120).splitlines()
    assert len(lines) == len(outs), lines
    for out, line in zip(outs, lines, strict=True):
        assert line.startswith(f"refused {out / SHARD}: cannot open"), line


def test_inspect_escapes_names_with_control_characters(tmp_path: Path):
    src = tmp_path / "src"
    # pack refuses such class names; a file name can still carry them into the keys
    write_image(src / "plain" / "new\nline img\x1b[31m.png", image(1))
    write_image(src / "plain" / "a.png", image(2))
    out = tmp_path / "out"
    shardpack.pack(src, out, shardpack.PackOptions(workers=1))
    done = _cli("inspect", str(out))
    assert done.returncode == 0, done.stderr
    assert "new\\nline img\\x1b[31m.png" in done.stdout
    assert "\x1b" not in done.stdout and "new\nline" not in done.stdout


def test_an_index_of_millions_of_empty_lists_is_refused_before_it_is_parsed(tmp_path: Path):
    """Each [] json makes is a Python object: a 63 MB planted index held 1.6 GB in inspect."""
    (tmp_path / "index.json").write_bytes(b"[" + b"[]," * 6_000_000 + b"[]]")
    with pytest.raises(IndexFormatError, match=r"index.json: unreadable \(6,000,002 lists and"):
        shardpack.load_index(tmp_path)


@pytest.mark.parametrize("num_records", [2**40, 2**62, 2**70, -5])
def test_records_beside_an_index_file_with_a_hostile_record_count(tmp_path: Path, num_records):
    """A planted index.json's count went unchecked to len() and to the index file's read:
    OverflowError, MemoryError (a read of (n + 1) x 64 bytes), or a negative __len__."""
    out = packed_tree(tmp_path / "packed", {"a": 2, "b": 1}, index_files=True, shards=1)
    index = json.loads((out / "index.json").read_text())
    index["splits"]["train"]["shards"][0]["num_records"] = num_records
    index["splits"]["train"]["num_records"] = num_records
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(shardpack.ShardpackError) as raised, shardpack.Records(out) as records:
        len(records)
        records[0]
    assert "\n" not in str(raised.value) and str(out) in str(raised.value)


def test_verify_lists_a_bounded_number_of_faults_per_shard_and_counts_the_rest(tmp_path: Path):
    """A tiny GZIP shard of empty records (each a fault) made one Fault each: 2,000,000 of
    them cost 0.8 GB and as many FAULT lines."""
    from shardpack.read.verify import MAX_SHARD_FAULTS

    n = 20_000
    out = _out(tmp_path, gzip.compress(frame(b"") * n), num_records=n, compression="gzip")
    faults = shardpack.verify(out).faults
    assert len(faults) == MAX_SHARD_FAULTS + 1, [str(f) for f in faults[-3:]]
    assert all("feature 'image' missing" in f.reason for f in faults[:-1])
    assert faults[-1].reason == f"{n - MAX_SHARD_FAULTS} more faulty records (not listed)"


def test_verify_stops_at_a_shard_larger_than_the_index_says(tmp_path: Path):
    """A shard grown sparse to 32 GiB was hashed to its end (~20 s; 15 TiB, hours) though its
    size alone disagreed with the index."""
    import os
    import time

    shard = frame(encode_example(_good()))
    out = _out(tmp_path, shard)
    os.truncate(out / SHARD, 32 << 30)
    started = time.monotonic()
    faults = shardpack.verify(out).faults
    assert time.monotonic() - started < 10
    assert [f.reason for f in faults] == [f"{32 << 30:,} bytes, index.json says {len(shard):,}"]


# Not ArrayRecord (a file in whole 64 KiB blocks) nor tar (10 KiB): tiny shards of as many
# records are of one size, and only sha256 (verify) tells them apart.
@pytest.mark.parametrize("container", ["tfrecord", "parquet"])
def test_two_shards_of_a_split_swapped_are_refused_by_every_reader(
    shared_pack, tmp_path: Path, container: str
):
    """Of as many records, they read silently in the wrong places (only verify's sha256 saw
    it); their sizes differ, which opening a shard tells for nothing."""
    import shutil

    packed = shared_pack({"a": 4, "b": 4}, workers=1, shards=2, format=container)
    out = Path(shutil.copytree(packed, tmp_path / "out"))
    first, second = (s["file"] for s in json.loads((out / "index.json").read_text())["splits"][
        "train"]["shards"])  # fmt: skip
    one, two = (out / first).read_bytes(), (out / second).read_bytes()
    assert len(one) != len(two)
    (out / first).write_bytes(two)
    (out / second).write_bytes(one)
    said = f"{out / first}: size {len(two):,} bytes, index.json says {len(one):,} (cut short"
    for read in (
        lambda: list(shardpack.iter_examples(out)),
        lambda: shardpack.read_record(out, "train", 0),
    ):
        with pytest.raises(RecordError, match=re.escape(said)):
            read()
    # inspect reads none of the split, and marks both shards (as it marks a missing one)
    split = shardpack.describe(out)["splits"]["train"]
    assert split["samples"] == [] and [s["size_on_disk"] for s in split["shards"]] == [
        len(two), len(one)]  # fmt: skip


def _npy_declaring(out: Path, shape: str) -> Path:
    """OUT's one tar with its first sample's .npy header rewritten to declare `shape` (padded
    to the header's length, so the tar's framing and sizes stay true)."""
    tar = next(out.glob("*.tar"))
    data = bytearray(tar.read_bytes())
    size = int(data[124:135], 8)  # the first member: the image
    npy = data[512 : 512 + size]
    end = 10 + int.from_bytes(npy[8:10], "little")  # magic, version, length, then the header
    header = f"{{'descr': '|u1', 'fortran_order': False, 'shape': {shape}, }}"
    npy[10:end] = header.ljust(end - 11).encode() + b"\n"
    data[512 : 512 + size] = npy
    tar.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("shape", ["(1099511627776, 1048576, 3)", "(25, 32, 3)", "(-1, 32, 3)"])
def test_an_npy_image_declaring_other_bytes_than_it_holds_allocates_nothing(
    shared_pack, tmp_path: Path, shape: str
):
    """np.load allocated what the header declared before it found the data short: 2**61 bytes
    ended every reader in a MemoryError's traceback."""
    import shutil

    packed = shared_pack({"a": 2}, workers=1, shards=1, format="webdataset", encode="raw")
    out = _npy_declaring(Path(shutil.copytree(packed, tmp_path / "out")), shape)
    said = f"the .npy image declares {shape[1:-1].replace(', ', 'x')} pixels but holds 2,304 bytes"
    with pytest.raises(RecordError, match=re.escape(said)):
        list(shardpack.iter_examples(out))
    assert said in shardpack.verify(out).faults[0].reason
    _one_line_error(_cli("inspect", str(out)), said)


def test_a_ten_byte_varint_reads_as_protobuf_reads_it(tmp_path: Path):
    """A varint's tenth byte carries bits past 64, which protobuf (and so TensorFlow) drops: the
    reader kept them, and an int64 of 2**70 - 2**64 - 1 reached torch's collate as an
    'Overflow when unpacking long long' traceback."""
    record = encode_example(_good(height=-1))  # -1: the ten-byte varint ff..ff 01
    assert record.count(b"\xff" * 9 + b"\x01") == 1
    out = _out(tmp_path, frame(record.replace(b"\xff" * 9 + b"\x01", b"\xff" * 9 + b"\x7f")))
    assert [r["height"] for r in shardpack.iter_examples(out)] == [-1]


def _wds_json_rewritten(out: Path, change) -> Path:
    """OUT's first tar written again with its first sample's .json changed by `change` (a
    dict in place), its size and sha256 in index.json made to agree."""
    import io
    import tarfile

    doc = json.loads((out / "index.json").read_text())
    shard = doc["splits"]["train"]["shards"][0]
    with tarfile.open(out / shard["file"]) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    name, text = next((n, t) for n, t in members if n.endswith(".json"))
    sample = json.loads(text)
    change(sample)
    members[members.index((name, text))] = (name, json.dumps(sample).encode())
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for member, data in members:  # as pack writes a header: every other field fixed
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode, info.uname, info.gname = len(data), 0, 0o644, "", ""
            tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    (out / shard["file"]).write_bytes(data)
    shard.update(num_bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (out / "index.json").write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**70])
def test_a_sample_json_integer_past_int64_is_refused_by_name(shared_pack, tmp_path, value):
    """JSON's integers are unbounded: a `.json` height of 2**70 read as a record's int64
    feature, and torch's collate ended in 'Overflow when unpacking long long'."""
    import shutil

    packed = shared_pack({"a": 2}, workers=1, shards=1, format="webdataset", encode="jpeg")
    out = Path(shutil.copytree(packed, tmp_path / "out"))
    _wds_json_rewritten(out, lambda sample: sample.update(height=value))
    said = "'height' holds an integer past int64"
    with pytest.raises(RecordError, match=re.escape(said)):
        list(shardpack.iter_examples(out))
    assert said in shardpack.verify(out).faults[0].reason


def test_a_sample_with_a_cls_and_a_json_label_is_refused(shared_pack, tmp_path: Path):
    """Pack writes a label to the .cls or the .json, never both: a sample with both was read
    with the .cls's, its .json's (what a `sample["json"]["label"]` reader takes) passed over."""
    import shutil

    packed = shared_pack({"a": 2, "b": 1}, workers=1, shards=1, format="webdataset")
    out = Path(shutil.copytree(packed, tmp_path / "out"))
    _wds_json_rewritten(out, lambda sample: sample.update(label=[1, 0]))
    with pytest.raises(RecordError, match=r"\.cls beside a label in .*\.json"):
        list(shardpack.iter_examples(out))
