"""Our own shards packed again: a record that would be written unchanged passes through,
parsed once in the worker, never encoded again; the scan takes the items from contents.json,
which the worker checks record by record."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

import shardpack
from shardpack import PackOptions
from shardpack.containers import example, tfrecord
from shardpack.containers.tfrecord import TFRecordWriter
from shardpack.errors import ImageError, SourceError
from shardpack.index import load_index
from shardpack.sources import repack
from shardpack.storage import storage_at
from tests.helpers import make_tree, one_line_error, run_cli, vouch_size

COUNT = 7


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repack")
    out = root / "packed"
    shardpack.pack(make_tree(root / "src", {"a": 4, "b": 3}), out, PackOptions(workers=1))
    return out


def _shards(out: Path) -> dict[str, bytes]:
    index = json.loads((out / "index.json").read_text())
    files = [s["file"] for split in index["splits"].values() for s in split["shards"]]
    return {file: (out / file).read_bytes() for file in files}


def _records(out: Path) -> list[bytes]:
    return [
        bytes(data)
        for file in _shards(out)
        for _, data in tfrecord.iter_records(storage_at(str(out)), file)
    ]


@pytest.mark.parametrize("fmt", ["tfrecord", "array_record"])
def test_a_repack_passes_records_through_parsing_each_once(packed, tmp_path, monkeypatch, fmt):
    calls = {"canonical": 0, "general": 0, "encode": 0}

    def counted(name, function):
        def call(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(example, "_decode_canonical",
                        counted("canonical", example._decode_canonical))  # fmt: skip
    monkeypatch.setattr(example, "_decode_general", counted("general", example._decode_general))
    monkeypatch.setattr(example, "_example_parts", counted("encode", example._example_parts))
    out = tmp_path / fmt
    shardpack.pack(packed, out, PackOptions(workers=1, format=fmt, shuffle=False))
    # once, in the worker (the scan reads contents.json); each record checked against the one
    # it would be (encode_example's pieces, not joined), then written as it was read
    assert calls == {"canonical": COUNT, "general": 0, "encode": COUNT}
    assert sorted(_read(out, fmt)) == sorted(_records(packed))
    assert shardpack.verify(out).ok


def _read(out: Path, fmt: str) -> list[bytes]:
    container = shardpack.containers.get_container(fmt)
    return [bytes(d) for f in _shards(out) for _, d in container.iter_raw(storage_at(str(out)), f)]


def test_a_record_in_another_layout_is_encoded_again(packed, tmp_path):
    """Entries out of order (as another writer may put them) decode alike, but the output is
    encode_example's bytes, as a repack of the sorted records gives."""
    bent = tmp_path / "bent"
    bent.mkdir()
    for name in ("index.json", "features.json", "label.labels.txt", "dataset_info.json"):
        (bent / name).write_bytes((packed / name).read_bytes())
    shuffled = random.Random(0)
    for file in _shards(packed):
        with TFRecordWriter(bent / file) as writer:
            for _, data in tfrecord.iter_records(storage_at(str(packed)), file):
                entries = list(example._decode_general(data).items())
                shuffled.shuffle(entries)
                parts = [_entry(name, values) for name, values in entries]
                writer.write(b"\x0a" + example._varint(sum(map(len, parts))) + b"".join(parts))
    assert _records(bent) != _records(packed)  # the same size: the index's sizes still hold
    options = PackOptions(workers=1, shuffle=False)
    shardpack.pack(packed, tmp_path / "a", options)
    shardpack.pack(bent, tmp_path / "b", options)
    assert _shards(tmp_path / "a") == _shards(tmp_path / "b")


def _entry(name: str, values: list) -> bytes:
    """One map entry, as encode_example writes it (its value a list: the same bytes)."""
    encoded = example.encode_example({name: values})
    return encoded[example._read_varint(encoded, 1)[1] :]  # past the Example's own head


def test_the_scans_quick_check_agrees_with_record_fault(packed):
    from shardpack.errors import RecordError
    from shardpack.index import load_index, record_fault

    index = load_index(storage_at(str(packed)))
    good = example.decode_example(_records(packed)[0])
    bent = [good, {k: v for k, v in good.items() if k != "width"}, {**good, "more": [1]},
            {**good, "width": [1.5]}, {**good, "height": [1, 2]}, {**good, "label": [99]},
            {**good, "label": [-1]}, {**good, "format": [b"tiff"]}, {**good, "key": [3]},
            RecordError("x", 0, "broken")]  # fmt: skip
    fits = [repack._fits(record, index.schema) for record in bent]
    assert fits == [isinstance(r, dict) and record_fault(r, index.schema) is None for r in bent]
    assert fits == [True] + [False] * (len(bent) - 1)


def test_an_index_naming_a_class_twice_is_refused_as_every_source_refuses_it(packed, tmp_path):
    """An index.json whose classes were edited to a, a was packed again as classes a, a: two
    labels under one name, which every other source refuses (datasets' ClassLabel too)."""
    edited = _copy(packed, tmp_path / "edited")
    doc = json.loads((edited / "index.json").read_text())
    doc["classes"] = doc["features"]["label"]["classes"] = ["a", "a"]
    (edited / "index.json").write_text(json.dumps(doc))
    said = r"index\.json, feature 'label': two classes are named 'a'; give each class a name"
    with pytest.raises(SourceError, match=said):
        shardpack.pack(edited, tmp_path / "out", PackOptions(workers=1))


# ---- the scan from contents.json, checked by the workers ---------------------------------------


def _copy(packed: Path, dest: Path) -> Path:
    shutil.copytree(packed, dest)
    return dest


def _skips(result) -> dict[str, str]:
    return {s.key: s.reason for s in result.index.skipped}


def test_the_scan_from_contents_lists_what_reading_every_shard_finds(packed, tmp_path):
    index = load_index(storage_at(str(packed)))
    held = repack.scan_held(index)
    assert held is not None and held.splits == repack.scan_shards(index).splits
    # without contents.json (an older pack), or with one for other shards, the shards are read
    bare = _copy(packed, tmp_path / "bare")
    (bare / "contents.json").unlink()
    assert repack.scan_held(load_index(storage_at(str(bare)))) is None
    doc = json.loads((packed / "contents.json").read_text())
    doc["shards"] = {f"x{file}": entry for file, entry in doc["shards"].items()}
    (bare / "contents.json").write_text(json.dumps(doc))
    assert repack.scan_held(load_index(storage_at(str(bare)))) is None
    # a class out of range, or sizes past the shard's bytes (they steer the plan): read them
    for field, value in (("meta", 3), ("meta", 1 << 62), ("size", 1 << 40)):
        doc = json.loads((packed / "contents.json").read_text())
        next(iter(doc["shards"].values()))[field][0] = value
        (bare / "contents.json").write_text(json.dumps(doc))
        assert repack.scan_held(load_index(storage_at(str(bare)))) is None, field
    options = PackOptions(workers=1, shuffle=False)
    shardpack.pack(packed, tmp_path / "a", options)
    shardpack.pack(bare, tmp_path / "b", options)
    assert _shards(tmp_path / "a") == _shards(tmp_path / "b")


@pytest.mark.parametrize("value", [True, -1, 1.5, "x", None])
def test_a_contents_json_whose_skipped_list_is_no_list_sends_the_scan_to_the_shards(
    packed, tmp_path, value
):
    """A `skipped` of true (or -1, 1.5) ended the repack, and --append into that OUT, in a
    traceback (TypeError: object of type 'bool' has no len()): a shard entry of the wrong shape
    is one contents.json does not vouch for, as any other is."""
    bare = _copy(packed, tmp_path / "bare")
    doc = json.loads((packed / "contents.json").read_text())
    entry = next(iter(doc["shards"].values()))
    entry["skipped"] = value
    entry.pop("reasons", None)  # as an older pack wrote it: the reasons counted from `skipped`
    (bare / "contents.json").write_text(json.dumps(doc))
    assert repack.scan_held(load_index(storage_at(str(bare)))) is None
    assert shardpack.pack(bare, tmp_path / "out", PackOptions(workers=1)).num_records == COUNT
    more = make_tree(tmp_path / "more", {"a": 1})
    done = run_cli("pack", str(more), str(bare), "--append", "--workers", "1")
    one_line_error(done, "contents.json: does not agree with index.json")


def test_a_contents_json_that_lies_about_a_record_is_caught_in_the_worker(packed, tmp_path):
    """A label or key contents.json gives that its record does not hold is never written: the
    worker names the shard and record, and skips it (or fails the run in one line)."""
    lying = _copy(packed, tmp_path / "lying")
    doc = json.loads((lying / "contents.json").read_text())
    file, entry = next(iter(doc["shards"].items()))
    entry["meta"][0] = 3 - entry["meta"][0]  # class a (meta 1) <-> b (meta 2)
    entry["keys"][1] = "a/listed-but-not-held.jpg"  # (another record's key: contents refused)
    (lying / "contents.json").write_text(json.dumps(doc))
    result = shardpack.pack(lying, tmp_path / "out", PackOptions(workers=1, shuffle=False))
    skips = _skips(result)
    assert result.num_records == COUNT - 2 and len(skips) == 2
    label = skips.pop(doc["shards"][file]["keys"][0])
    assert label.startswith(f"{file} record 0: holds label ") and "as the scan found" in label
    (key,) = skips.values()
    assert key.startswith(f"{file} record 1: holds key ") and "contents.json" in key
    truth = {r["key"]: r["label"] for r in shardpack.iter_examples(packed)}
    assert all(truth[r["key"]] == r["label"] for r in shardpack.iter_examples(tmp_path / "out"))
    with pytest.raises(ImageError, match=f"{file} record 0: holds label "):
        shardpack.pack(lying, tmp_path / "fail", PackOptions(workers=1, on_error="fail"))


def test_a_contents_json_listing_a_key_twice_is_not_taken_and_the_shards_are_read(packed, tmp_path):
    """Pack keys each record once: a contents.json that lists one twice (another record's
    written over it) says nothing of the shards, which are read instead, every record kept."""
    lying = _copy(packed, tmp_path / "lying")
    doc = json.loads((lying / "contents.json").read_text())
    entry = next(iter(doc["shards"].values()))
    entry["keys"][1] = entry["keys"][2]
    (lying / "contents.json").write_text(json.dumps(doc))
    result = shardpack.pack(lying, tmp_path / "out", PackOptions(workers=1, shuffle=False))
    assert result.num_records == COUNT and not _skips(result)
    keys = [r["key"] for r in shardpack.iter_examples(tmp_path / "out")]
    assert sorted(keys) == sorted(r["key"] for r in shardpack.iter_examples(packed))


def test_a_corrupt_record_is_named_with_its_shard_and_number_in_the_worker(packed, tmp_path):
    bad = _copy(packed, tmp_path / "bad")
    file = next(iter(_shards(packed)))
    offsets = [offset for offset, _ in tfrecord.iter_records(storage_at(str(packed)), file)]
    blob = bytearray((bad / file).read_bytes())
    blob[offsets[2] + 40] ^= 0xFF  # inside record 2's data: its CRC no longer holds
    (bad / file).write_bytes(bytes(blob))
    result = shardpack.pack(bad, tmp_path / "out", PackOptions(workers=1, shuffle=False))
    (reason,) = _skips(result).values()
    assert result.num_records == COUNT - 1
    assert reason.startswith(f"{file} record 2: cannot read it (") and "CRC mismatch" in reason
    # a shard cut short while index.json and contents.json still count its records (a copy
    # at another path: a process keeps the record positions it found by path and sha256)
    cut = _copy(packed, tmp_path / "cut")
    (cut / file).write_bytes((packed / file).read_bytes()[: offsets[-1]])
    vouch_size(cut, file)  # its size refuses it at once: past that, its count
    held = len(offsets)  # every record of the only shard is refused: no image packed
    said = f"{file} record \\d+: cannot read it .*{file}: holds {held - 1} records, the index says"
    with pytest.raises(SourceError, match=f"{said} {held}"):
        shardpack.pack(cut, tmp_path / "out-cut", PackOptions(workers=1, shuffle=False))


def test_a_record_that_is_no_example_is_named_with_its_place_in_the_worker(packed, tmp_path):
    """Framing and CRCs that hold around bytes no Example parses as: skipped in one line naming
    the shard, the record's number and its byte offset (the worker asks the offset only then)."""
    bad = _copy(packed, tmp_path / "bad")
    file = next(iter(_shards(packed)))
    records = [bytes(data) for _, data in tfrecord.iter_records(storage_at(str(packed)), file)]
    records[1] = b"\x0a\x05bytes of no Example"
    (bad / file).write_bytes(b"".join(map(tfrecord.frame, records)))
    vouch_size(bad, file)
    result = shardpack.pack(bad, tmp_path / "out", PackOptions(workers=1, shuffle=False))
    (reason,) = _skips(result).values()
    assert result.num_records == COUNT - 1
    offset = len(tfrecord.frame(records[0]))
    assert reason.startswith(f"{file} record 1: cannot read it ({bad / file} at byte {offset}: "
                             "not a tf.train.Example (")  # fmt: skip


def test_a_raw_record_whose_sizes_disagree_with_its_pixels_is_named_and_skipped(tmp_path):
    """A raw-pixels record whose height x width x channels is not its byte count (rewritten by
    another writer, its framing and CRCs whole) is a one-line skip naming the shard, the record
    and both sizes; its pixels are never reshaped to another image."""
    raw = tmp_path / "raw"
    tree = make_tree(tmp_path / "src", {"a": 2, "b": 1})
    shardpack.pack(tree, raw, PackOptions(workers=1, encode="raw", shuffle=False))
    (file,) = _shards(raw)
    records = [example._decode_general(d) for d in _records(raw)]
    height, width, channels = (records[1][name][0] for name in ("height", "width", "channels"))
    records[1]["height"] = [height + 1]  # one more row than the pixels hold
    with TFRecordWriter(raw / file) as writer:
        for record in records:
            parts = [_entry(name, values) for name, values in sorted(record.items())]
            writer.write(b"\x0a" + example._varint(sum(map(len, parts))) + b"".join(parts))
    result = shardpack.pack(raw, tmp_path / "out", PackOptions(workers=1, shuffle=False))
    (reason,) = _skips(result).values()
    size = height * width * channels
    assert reason == (f"{file} record 1: raw image of {size} bytes, fields say "
                      f"({height + 1}, {width}, {channels})")  # fmt: skip
    assert result.num_records == len(records) - 1


def test_the_output_of_a_run_that_wrote_no_index_is_named_as_one_when_packed(tmp_path):
    """An OUT whose run stopped before its index.json (here one that failed after its first
    shard) packed as SRC is said to be a run's output to finish or resume, not a folder of
    files to convert to images, nor no output of a pack run at all."""
    tree = make_tree(tmp_path / "src", {"a": 3, "b": 3})
    (tree / "b" / "zz.jpg").write_bytes(b"no image")  # the last item: the second shard fails
    stopped = tmp_path / "stopped"
    options = PackOptions(workers=1, shuffle=False, shards=2, on_error="fail")
    with pytest.raises(ImageError):
        shardpack.pack(tree, stopped, options)
    assert (stopped / ".shardpack.journal").is_file() and not (stopped / "index.json").exists()
    for extra in ((), ("--source", "shardpack")):
        done = run_cli("pack", str(stopped), str(tmp_path / "again"), "--no-progress", *extra)
        line = one_line_error(done, str(stopped), "has not written its index.json yet")
        assert "rerun it with --resume" in line and "convert" not in line
    with pytest.raises(SourceError, match=r"rerun it with resume=True, then pack its output"):
        shardpack.pack(stopped, tmp_path / "again")
    assert not (tmp_path / "again").exists()
