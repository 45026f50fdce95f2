"""verify finds every kind of damage, names the file and the byte offset."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from shardpack.read.verify import verify
from tests.helpers import OBJECT_ROWS, at, object_mask, pack_objects, run_cli


@pytest.fixture(scope="module")
def packed(shared_pack) -> Path:
    return shared_pack({"a": 6, "b": 6}, shards=3, workers=1)


@pytest.fixture
def out(packed: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(packed, tmp_path / "copy"))


def _shard(out: Path, i: int = 1) -> Path:
    index = json.loads((out / "index.json").read_text())
    return out / index["splits"]["train"]["shards"][i]["file"]


def test_clean_output_verifies(out: Path):
    report = verify(out, decode=True)
    assert report.ok and report.shards == 3 and report.records == 12


def test_flipped_bit_is_found_with_offset(out: Path):
    shard = _shard(out)
    data = bytearray(shard.read_bytes())
    first_len = int.from_bytes(data[:8], "little")
    second_record = 8 + 4 + first_len + 4
    data[second_record + 12 + 5] ^= 0x01  # a bit inside the second record's data
    shard.write_bytes(bytes(data))
    report = verify(out)
    reasons = [(f.file, f.offset, f.reason) for f in report.faults]
    crc = "data CRC mismatch (corrupt record): the shard is damaged; restore it from a copy or "
    assert (shard.name, second_record, crc + "pack again") in reasons
    assert any("sha256" in r for _, _, r in reasons)
    # the length passed its own CRC: verify reads on, so every record is counted and only
    # the damaged one is named
    assert not any("records read" in r for _, _, r in reasons), reasons
    assert [r for _, _, r in reasons].count(crc + "pack again") == 1


def test_truncated_shard(out: Path):
    shard = _shard(out, 0)
    shard.write_bytes(shard.read_bytes()[:-10])
    faults = verify(out).faults
    assert any(f.file == shard.name and "truncated" in f.reason for f in faults)


def test_missing_and_extra_shards(out: Path):
    shard = _shard(out, 2)
    shard.rename(out / "a-train.tfrecord-00009-of-00009")
    (out / "src-train.tfrecord-00007-of-00009").write_bytes(b"")
    report = verify(out)
    text = [str(f) for f in report.faults]
    assert f"{shard.name}: missing shard file" in text
    assert any("extra shard" in t and "00007-of-00009" in t for t in text)
    # the shards to restore: the index's own, not a stray beside them
    assert report.damaged == (shard.name,) == tuple(report.to_json()["damaged_shards"])


def test_count_disagreeing_with_index(out: Path):
    index = json.loads((out / "index.json").read_text())
    index["splits"]["train"]["shards"][0]["num_records"] += 1
    (out / "index.json").write_text(json.dumps(index))
    assert any("records read, index.json says" in f.reason for f in verify(out).faults)


def test_decode_catches_a_corrupt_image_with_valid_crc(out: Path, tmp_path: Path):
    # Rewrite one shard with a record whose image bytes are damaged but framed correctly.
    from shardpack.containers.example import decode_example, encode_example
    from shardpack.containers.tfrecord import TFRecordWriter, iter_records

    shard = _shard(out, 0)
    records = [decode_example(data) for _, data in iter_records(*at(shard))]
    records[0]["image"] = [records[0]["image"][0][:200]]  # cut the JPEG short
    with TFRecordWriter(shard) as writer:
        for rec in records:
            writer.write(encode_example({k: v if len(v) != 1 else v[0] for k, v in rec.items()}))
    assert not any("decode" in f.reason for f in verify(out).faults)
    faults = verify(out, decode=True).faults
    assert any(f.file == shard.name and f.offset == 0 and "truncated" in f.reason for f in faults)


def test_a_huge_length_with_a_valid_crc_is_a_fault_not_a_crash(out: Path):
    import struct

    from shardpack.containers.tfrecord import masked_crc

    shard = _shard(out, 0)
    data = bytearray(shard.read_bytes())
    length = struct.pack("<Q", 2**40)  # a terabyte, with a CRC that matches it
    data[:12] = length + struct.pack("<I", masked_crc(length))
    shard.write_bytes(bytes(data))
    faults = verify(out).faults
    assert any(f.offset == 0 and "claims 1,099,511,627,776 bytes" in f.reason for f in faults)


def test_a_record_with_the_wrong_feature_types_is_a_fault(out: Path):
    from shardpack.containers.example import encode_example
    from shardpack.containers.tfrecord import TFRecordWriter

    shard = _shard(out, 0)
    with TFRecordWriter(shard) as writer:
        writer.write(encode_example({"image": b"x", "label": b"cat", "height": 1, "width": 1,
                                     "channels": 3, "format": b"raw"}))  # fmt: skip
    faults = verify(out).faults
    assert any(f.offset == 0 and "'label'" in f.reason for f in faults)


def test_inspect_and_preview_of_a_missing_shard_say_so_in_one_line(out: Path, tmp_path: Path):
    _shard(out, 0).unlink()
    run = run_cli("preview", str(out), "--out", str(tmp_path / "p.png"))
    assert run.returncode == 2 and "missing (index.json lists it, of" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    # inspect shows the listing (and no records of the split missing a shard), and marks
    # what is not there, with or without records asked for
    for records in ("3", "0"):
        run = run_cli("inspect", str(out), "--records", records)
        assert run.returncode == 0 and f"{_shard(out, 0).name}  " in run.stdout
        assert [line for line in run.stdout.splitlines() if line.endswith("MISSING")] == [
            line for line in run.stdout.splitlines() if _shard(out, 0).name in line
        ]
        assert run.stderr.startswith("warning: 1 shard the index lists not in OUT (")
        assert len(run.stderr.strip().splitlines()) == 1
    run = run_cli("preview", str(out), "--out", "/nonexistent/dir/p.png")
    assert run.returncode == 2 and "Traceback" not in run.stderr


def test_an_output_without_its_index_says_a_run_may_be_going_or_stopped(out: Path):
    """pack writes index.json last: verify of an OUT without one (a run still writing it, or
    one stopped) says both, and the way on (--resume), in one line with exit code 2."""
    (out / "index.json").unlink()
    run = run_cli("verify", str(out))
    (line,) = run.stderr.splitlines()
    assert run.returncode == 2 and "a run still going has none yet" in line
    assert line.endswith("one that was stopped has none: rerun it with --resume)")
    gone = out.parent / "no-such-out"
    run = run_cli("verify", str(gone))
    assert run.returncode == 2 and run.stderr == f"error: {gone}: no such folder; pass the OUT " \
        "of a pack run\n"  # fmt: skip


def test_the_index_file_given_for_its_folder_names_the_folder(out: Path):
    from shardpack.errors import IndexFormatError
    from shardpack.index import load_index

    with pytest.raises(IndexFormatError, match=f"is the index itself; pass the folder that holds "
                       f"it, {out}$"):  # fmt: skip
        load_index(out / "index.json")


@pytest.mark.parametrize("command", ["verify", "report"])
def test_verify_and_report_show_progress_as_pack_does(
    packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
):
    """verify --decode (476 images/s: 45 minutes of silence on ImageNet) and report say how
    far they are: lines on a piped stderr (here at once: the bar's delay and interval set to
    0), nothing with --no-progress."""
    import shardpack.console

    if command == "report":
        pytest.importorskip("matplotlib")
    monkeypatch.setattr(shardpack.console, "_BAR_DELAY_S", 0)
    monkeypatch.setattr(shardpack.console, "_LINE_EVERY_S", 0)
    args = [command, str(packed)]
    args += ["--decode"] if command == "verify" else ["--out", str(tmp_path / "r.html")]
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    verb = "verifying" if command == "verify" else "reading"
    lines = [line for line in done.stderr.splitlines() if line.startswith(f"{verb}:")]
    assert lines and lines[-1].startswith(f"{verb}: 12/12 images"), done.stderr
    quiet = run_cli(*args, "--no-progress", *(["--overwrite"] if command == "report" else []))
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


@pytest.mark.parametrize("command", ["verify", "report"])
def test_a_progress_line_rates_the_records_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
):
    """An S3 verify printed `verifying: 64/1,000 images, 0 images/s, ETA unknown`: its first
    report came after 64 records, past the bar's second (the index's load from the store), and
    the bar's rate counts from its first report: nothing to rate. The reading now reports 0 as
    it starts: every line after records were read rates them (here a line at every report: the
    bar's delay and interval set to 0)."""
    import shardpack.console
    from shardpack.options import PackOptions
    from shardpack.packing.packer import pack
    from tests.helpers import make_tree

    if command == "report":
        pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    pack(make_tree(tmp_path / "src", {"a": 100, "b": 100}), out, PackOptions(workers=1))
    monkeypatch.setattr(shardpack.console, "_BAR_DELAY_S", 0)
    monkeypatch.setattr(shardpack.console, "_LINE_EVERY_S", 0)
    card = [] if command == "verify" else ["--out", str(tmp_path / "r.html")]
    done = run_cli(command, str(out), *card)
    assert done.returncode == 0, done.stderr
    verb = "verifying" if command == "verify" else "reading"
    lines = [line for line in done.stderr.splitlines() if line.startswith(f"{verb}:")]
    said = [re.fullmatch(rf"{verb}: ([\d,]+)/200 images, ([\d,]+) images/s, ETA (.+)", line)
            for line in lines]  # fmt: skip
    assert [int(m[1].replace(",", "")) for m in said] == [0, 64, 128, 192, 200], done.stderr
    assert said[0].groups()[1:] == ("0", "unknown"), lines  # as the reading starts: none read
    assert all(int(m[2].replace(",", "")) > 0 and m[3] != "unknown" for m in said[1:]), lines


@pytest.mark.parametrize("command", ["verify", "report"])
def test_verify_and_report_refuse_a_progress_that_is_not_callable_before_reading(
    packed: Path, tmp_path: Path, command: str
):
    """As pack refuses it. Before: verify read every shard and then failed calling it ('int'
    object is not callable), report in the middle of its thumbnails."""
    import shardpack

    if command == "report":
        pytest.importorskip("matplotlib")
    dest = tmp_path / "r.html"
    with pytest.raises(TypeError) as refused:
        if command == "verify":
            shardpack.verify(packed, progress=5)
        else:
            shardpack.write_report(packed, dest, progress=5)
    assert str(refused.value) == "progress must be called with (done, total); got: 5"
    assert not dest.exists()


def test_objects_that_disagree_are_faults_naming_record_shard_and_feature(objects_out, tmp_path):
    """A box outside the image (pack clips boxes: planted in the shard, its frame's CRC and the
    index's digest made to agree), a per-object list out of step with the boxes, a mask of
    another size than its image, a mask cut short, and with --decode a mask id past the
    objects."""
    assert verify(objects_out, decode=True).ok  # the good ones
    a, b, c = (dict(row) for row in OBJECT_ROWS)
    a["boxes"] = [[0.1, 0.1, 0.6, 0.5], [0.5, 0.5, 0.875, 0.95]]
    b["is_crowd"] = [0]
    c["mask"] = object_mask(20, 30, [])
    d = {**OBJECT_ROWS[0], "mask": object_mask(40, 60, [(0, 0, 2, 2), (2, 2, 4, 4), (4, 4, 6, 6)])}
    e = {**OBJECT_ROWS[2], "mask": b"\x89PNG\r\n\x1a\n cut short"}
    out = pack_objects(tmp_path, [a, b, c, d, e], unequal_lists=True)
    shard = json.loads((out / "index.json").read_text())["splits"]["train"]["shards"][0]["file"]
    _plant(out, shard, np.float32(0.875).tobytes(), np.float32(1.25).tobytes())
    faults = [str(f) for f in verify(out).faults]
    assert len(faults) == 4 and all(f.startswith(f"{shard} at byte ") for f in faults)
    assert "record 'objects.parquet:0': feature 'objects/bbox' row 1 [0.5, 0.5, 1.25, 0.95]" \
        in faults[0] and "inside [0, 1]" in faults[0]  # fmt: skip
    assert "'objects.parquet:1': feature 'objects/is_crowd' holds 1 rows beside 2" in faults[1]
    assert "'objects.parquet:2': feature 'mask' is a 30x20 mask of a 30x30 image" in faults[2]
    assert "'objects.parquet:4': feature 'mask' does not decode: truncated PNG" in faults[3]
    decoded = [str(f) for f in verify(out, decode=True).faults]
    assert len(decoded) == 5 and decoded[4] == faults[3]
    decoded = decoded[3]
    assert "'objects.parquet:3': feature 'mask' holds instance id 3, past the 2 objects" in decoded


def _plant(out: Path, shard: str, old: bytes, new: bytes) -> None:
    """Write `new` over the first `old` in a TFRecord shard, with its record's CRC and the
    index's size and sha256 made to agree: a record no pack writes, framed as one."""
    from shardpack.containers.tfrecord import FOOTER, HEADER, masked_crc

    path = out / shard
    data = bytearray(path.read_bytes())
    at = data.index(old)
    data[at : at + len(new)] = new
    start = 0
    while not start + HEADER.size <= at < start + HEADER.size + HEADER.unpack_from(data, start)[0]:
        start += HEADER.size + HEADER.unpack_from(data, start)[0] + FOOTER.size
    begin, length = start + HEADER.size, HEADER.unpack_from(data, start)[0]
    FOOTER.pack_into(data, begin + length, masked_crc(bytes(data[begin : begin + length])))
    path.write_bytes(data)
    doc = json.loads((out / "index.json").read_text())
    (entry,) = [s for s in doc["splits"]["train"]["shards"] if s["file"] == shard]
    entry["sha256"] = hashlib.sha256(data).hexdigest()
    (out / "index.json").write_text(json.dumps(doc, indent=2))


def test_a_stale_or_cut_index_file_is_a_fault_naming_it(shared_pack, tmp_path: Path):
    import shutil

    packed = shared_pack({"a": 6, "b": 6}, shards=3, workers=1, index_files=True)
    out = Path(shutil.copytree(packed, tmp_path / "copy"))
    assert verify(out).ok
    first, second, _ = sorted((out / "idx").glob("*.idx"))
    lines = first.read_text().splitlines(keepends=True)
    first.write_text("".join(lines[:2]))  # Records refuses it; DALI would read 2 records
    report = verify(out)
    (fault,) = report.faults
    assert report.damaged == ()  # the index file's fault: no shard to restore
    assert str(fault) == (f"idx/{first.name}: line 3: missing: 2 lines for the shard's 4 records; "
                          "rewrite it with write_index_files (shardpack index-files)")  # fmt: skip
    shutil.copy(second, first)  # another shard's, of as many lines: it reads the wrong bytes
    (fault,) = verify(out).faults
    assert str(fault).startswith(f"idx/{first.name}: its offsets and sizes are not the shard's")


def test_verify_reads_a_shard_with_an_index_file_once(shared_pack, tmp_path: Path, monkeypatch):
    """The index file was checked by hopping the shard's record headers again (record_spans),
    after opening it once more for its size: 4 opens a shard, 2 of them reads."""
    import shutil

    from shardpack.storage.local import LocalStorage

    packed = shared_pack({"a": 6, "b": 6}, shards=3, workers=1, index_files=True)
    out = Path(shutil.copytree(packed, tmp_path / "copy"))
    opened = []
    real = LocalStorage.open
    monkeypatch.setattr(LocalStorage, "open", lambda self, name: opened.append(name) or
                        real(self, name))  # fmt: skip
    assert verify(out).ok
    shards = [s.name for s in sorted(out.glob("*.tfrecord-*"))]
    assert sorted(n for n in opened if n in shards) == sorted(shards * 2)  # its size, its read


def test_bookkeeping_that_disagrees_with_the_shards_is_a_fault_naming_the_field(out: Path):
    """A planted name_count, next_shard or generation verified OK, and a grow trusts them."""
    doc = json.loads((out / "index.json").read_text())
    split = doc["splits"]["train"]
    first, _, last = (s["file"] for s in split["shards"])
    split.update(name_count=5, next_shard=2)
    split["shards"][0]["generation"] = 2
    (out / "index.json").write_text(json.dumps(doc))
    assert [str(f) for f in verify(out).faults] == [
        f"index.json: 'name_count' of split 'train' is 5, but {first} is named with 3: set it to 3",
        f"index.json: 'next_shard' of split 'train' is 2, but {last} is numbered 2: a grow "
        "would write over a listed shard; set it to 3",
        "index.json: 'generation' is 0, but a shard is of generation 2: set it to 2",
    ]


def test_a_split_total_that_disagrees_with_its_shards_is_a_fault_beside_a_damaged_shard(
    out: Path,
):
    """The index contradicting itself was left unsaid where a shard of the split was damaged
    too; it names the field and the value to set, as the other bookkeeping faults do."""
    doc = json.loads((out / "index.json").read_text())
    doc["splits"]["train"]["num_records"] = 7
    (out / "index.json").write_text(json.dumps(doc))
    _shard(out, 0).unlink()
    text = [str(f) for f in verify(out).faults]
    assert f"{_shard(out, 0).name}: missing shard file" in text
    assert text[-1] == ("index.json: 'num_records' of split 'train' is 7, but its shards' counts "
                        "add up to 12: set it to 12")  # fmt: skip


def test_class_counts_that_disagree_with_the_records_labels_are_a_fault_naming_them(out: Path):
    """A hand-edited class_counts verified OK, and inspect, the data card and TFDS's metadata
    show it: verify counts every record's label as it reads it. A split whose records were
    not all read (a damaged shard) is not held to its counts."""
    doc = json.loads((out / "index.json").read_text())
    assert doc["classes"] == ["a", "b"] and doc["splits"]["train"]["class_counts"] == [6, 6]
    doc["splits"]["train"]["class_counts"] = [7, 5]
    (out / "index.json").write_text(json.dumps(doc))
    assert [str(f) for f in verify(out).faults] == [
        "index.json: 'class_counts' of split 'train' disagrees with the labels its records hold "
        "('a' 7 against 6, 'b' 5 against 6): set it to [6, 6]"
    ]
    _shard(out, 0).unlink()
    assert not any("class_counts" in str(f) for f in verify(out).faults)


def test_a_planted_shard_name_of_a_huge_number_is_a_fault_not_a_crash(out: Path):
    """A name's numbers are what verify holds `next_shard` to: one of 5,000 digits was int()'s
    ValueError, and thousands of numbers their square in names tried."""
    doc = json.loads((out / "index.json").read_text())
    doc["splits"]["train"]["shards"][0]["file"] = name = "x" + "9" * 5000 + "-1" * 2000
    (out / "index.json").write_text(json.dumps(doc))
    faults = verify(out).faults
    assert faults[0].file == name and "cannot open" in faults[0].reason
