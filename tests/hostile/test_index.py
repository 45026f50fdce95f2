"""What pack writes into index.json and what its readers take from a planted one: pack never
writes an index its readers refuse, a run that packs nothing leaves no dataset, and every field
and string of a planted index is checked or escaped (one line, exit 2; never a traceback)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shardpack.errors import IndexFormatError, OutputError
from shardpack.index import (
    MAX_INDEX_BYTES,
    MAX_INDEX_CONTAINERS,
    MAX_NAMED_SKIPPED,
    MAX_SPLIT_RECORDS,
    load_index,
)
from shardpack.read.stream import iter_examples
from shardpack.schema import MAX_ROW
from tests.helpers import PEAK_KIB, make_tree, one_line_error, run_cli, write_csv


def test_missing_paths_full_of_brackets_pack_into_an_index_its_readers_take(tmp_path: Path):
    """A 5 MB CSV of one good row and 40 missing paths of 125,001 `[` each: the index names the
    skipped rows cut short, and verify, inspect and iter_examples read it."""
    src = make_tree(tmp_path / "src", {"cat": 1})
    rows = [{"path": "cat/img_000.jpg", "label": "cat"}]
    rows += [{"path": "[" * 125_001 + str(i), "label": "cat"} for i in range(40)]
    manifest = write_csv(src / "labels.csv", rows)
    assert manifest.stat().st_size > 5_000_000
    out = tmp_path / "out"
    done = run_cli("pack", str(manifest), str(out), "--workers", "1", "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    raw = json.loads((out / "index.json").read_text())
    assert raw["num_skipped"] == len(raw["skipped"]) == 40
    assert all(len(s["key"]) <= 1000 for s in raw["skipped"])
    for command in ("verify", "inspect"):
        done = run_cli(command, str(out))
        assert done.returncode == 0, done.stderr[-2000:]
    assert len(list(iter_examples(out, "train"))) == 1


def test_pack_names_the_first_skipped_items_and_counts_them_all(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 1})
    rows = [{"path": "cat/img_000.jpg", "label": "cat"}]
    rows += [{"path": f"gone/{i:05d}.jpg", "label": "cat"} for i in range(MAX_NAMED_SKIPPED + 5)]
    manifest = write_csv(src / "labels.csv", rows)
    out = tmp_path / "out"
    done = run_cli("pack", str(manifest), str(out), "--workers", "1", "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"skipped {MAX_NAMED_SKIPPED + 5:,} items (the first 1,000 listed" in done.stdout
    raw = json.loads((out / "index.json").read_text())
    assert (len(raw["skipped"]), raw["num_skipped"]) == (MAX_NAMED_SKIPPED, MAX_NAMED_SKIPPED + 5)
    done = run_cli("inspect", str(out))
    assert done.returncode == 0 and f"skipped {MAX_NAMED_SKIPPED + 5:,} items" in done.stdout


def test_the_reader_counts_lists_and_objects_not_brackets_inside_strings(tmp_path: Path):
    """A planted index whose one warning holds more `[` and `{` than the structure bound."""
    src = make_tree(tmp_path / "src", {"cat": 1, "dog": 1})
    out = tmp_path / "out"
    assert run_cli("pack", str(src), str(out), "--workers", "1", "--no-progress").returncode == 0
    raw = json.loads((out / "index.json").read_text())
    raw["warnings"] = ["[{" * (MAX_INDEX_CONTAINERS // 2 + 1)]
    (out / "index.json").write_text(json.dumps(raw))
    assert load_index(out).name == raw["name"]
    raw["warnings"] = [[]] * (MAX_INDEX_CONTAINERS + 1)  # real structure is still refused
    (out / "index.json").write_text(json.dumps(raw))
    one_line_error(run_cli("verify", str(out)), "lists and objects, over")


def test_an_index_or_croissant_json_of_too_many_values_is_refused_unparsed(tmp_path, monkeypatch):
    """Only lists and objects were counted: 100 MB of two-letter strings in a planted index.json
    was 1.6 GB once parsed by every reader (1 GiB is allowed: ~17 GB), and a croissant.json of
    90 MB of [] held a pack 2 minutes and 2.9 GB. Values are counted before either is parsed
    (the limit lowered here: the count is what is checked), commas inside strings not."""
    import shardpack
    from shardpack import PackOptions

    monkeypatch.setattr("shardpack.index.MAX_INDEX_VALUES", 10_000)
    src = make_tree(tmp_path / "src", {"cat": 1, "dog": 1})
    out = tmp_path / "out"
    shardpack.pack(src, out, PackOptions(workers=1))
    raw = json.loads((out / "index.json").read_text())
    raw["warnings"] = ["a," * 20_000]
    (out / "index.json").write_text(json.dumps(raw))
    assert load_index(out).warnings == ("a," * 20_000,)
    raw["warnings"] = ["ab"] * 10_000
    (out / "index.json").write_text(json.dumps(raw))
    with pytest.raises(IndexFormatError, match=r"index.json: unreadable \(10,\d+ values, over "
                       r"10,000\); rerun pack to rewrite it"):  # fmt: skip
        load_index(out)
    raw["warnings"] = []
    (out / "index.json").write_text(json.dumps(raw))
    (out / "croissant.json").write_text(json.dumps({"license": "x", "junk": [[]] * 10_000}))
    held = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(OutputError, match=r"croissant.json: is no JSON object .* \(it holds "
                       r"[\d,]+ values, over 10,000\); fix it, or move it out of OUT"):  # fmt: skip
        shardpack.pack(src, out, PackOptions(workers=1, overwrite=True))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == held


def test_a_run_that_packs_nothing_leaves_no_dataset(tmp_path: Path):
    """Every image skipped: exit 2 naming the first, and OUT keeps no index, no TFDS metadata,
    no empty shard and no journal; the next run from another SRC is not refused."""
    bad = tmp_path / "bad"
    (bad / "a").mkdir(parents=True)
    (bad / "a" / "x.jpg").write_bytes(b"\xff\xd8 not really")
    (bad / "b").mkdir()
    (bad / "b" / "y.png").write_bytes(b"neither")
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("the user's own file stays")
    done = run_cli("pack", str(bad), str(out), "--workers", "1", "--no-progress")
    one_line_error(done, "no image was packed", "2 items skipped", "a/x.jpg")
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    good = make_tree(tmp_path / "good", {"cat": 2, "dog": 1})
    done = run_cli("pack", str(good), str(out), "--workers", "1", "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    assert load_index(out).splits["train"].num_records == 3


def test_a_run_into_object_storage_that_packs_nothing_leaves_no_journal(tmp_path: Path):
    import fsspec

    from shardpack.errors import SourceError
    from shardpack.options import PackOptions
    from shardpack.packing.packer import pack

    bad = tmp_path / "bad"
    (bad / "a").mkdir(parents=True)
    (bad / "a" / "x.jpg").write_bytes(b"\xff\xd8 not really")
    (bad / "b").mkdir()
    (bad / "b" / "y.png").write_bytes(b"neither")
    with pytest.raises(SourceError, match="no image was packed"):
        pack(bad, "memory://nothing/out", PackOptions(workers=1))
    fs = fsspec.filesystem("memory")
    assert not fs.exists("/nothing/out") or fs.find("/nothing/out") == []


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    """A real pack output of 3 images in 2 classes (copy it before planting anything)."""
    base = tmp_path_factory.mktemp("packed")
    src = make_tree(base / "src", {"cat": 2, "dog": 1})
    done = run_cli("pack", str(src), str(base / "out"), "--workers", "1", "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    return base / "out"


def _planted(packed: Path, tmp_path: Path, **fields: object) -> Path:
    """A copy of `packed` whose index.json has these fields set as given."""
    out = tmp_path / "out"
    shutil.copytree(packed, out)
    raw = json.loads((out / "index.json").read_text())
    raw.update(fields)
    (out / "index.json").write_text(json.dumps(raw))
    return out


WRONG_TYPES = [
    {"ignored": "lots"},
    {"skipped": 5},
    {"ignored": [1]},
    {"ignored": -3},
    {"num_skipped": True},
    {"skipped": [1]},
    {"skipped": [{"key": "a", "reason": 7}]},
    {"ignored_files": [None]},
    {"warnings": "one"},
    {"source": {"kind": "folder"}},
    {"seed": "7"},
    {"stats": [1, 2]},
    {"plan_digest": 12},
    {"history": [5]},
    {"stats": {"seconds": "1"}},
    {"retired": {"a": 1}},
]


@pytest.mark.parametrize("fields", WRONG_TYPES, ids=lambda f: json.dumps(f))
def test_index_fields_of_the_wrong_type_are_refused_on_load(packed, tmp_path, fields):
    out = _planted(packed, tmp_path, **fields)
    (name,) = fields
    for command in ("verify", "inspect"):
        one_line_error(run_cli(command, str(out)), str(out / "index.json"), repr(name))
    with pytest.raises(IndexFormatError, match=repr(name)):
        list(iter_examples(out, "train"))


def test_an_index_past_the_bound_is_refused_unread_with_its_size(tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    with open(out / "index.json", "wb") as f:  # sparse: no gigabyte written
        f.truncate(MAX_INDEX_BYTES + 1)
    with pytest.raises(IndexFormatError) as refused:
        load_index(out)
    said = f"unreadable ({MAX_INDEX_BYTES + 1:,} bytes, over {MAX_INDEX_BYTES:,}); rerun pack"
    assert said in str(refused.value)


@pytest.mark.parametrize("shape", [[-1, 2**64], [-1, MAX_ROW + 1], [-1, -1], [2**63, 4]])
def test_a_feature_shape_past_the_bound_is_refused_by_name_on_load(packed, tmp_path, shape):
    raw = json.loads((packed / "index.json").read_text())
    features = {**raw["features"], "boxes": {"dtype": "float32", "shape": shape}}
    out = _planted(packed, tmp_path, features=features)
    for command in ("verify", "inspect"):
        one_line_error(run_cli(command, str(out)), str(out / "index.json"), "feature 'boxes'")
    with pytest.raises(IndexFormatError, match="feature 'boxes'"):
        list(iter_examples(out, "train"))


@pytest.mark.parametrize(("count", "said"), [
    (10**30, "'num_records' must be an integer >= 0, got 1000000000000000000000000000000, over"),
    (MAX_SPLIT_RECORDS + 1, "the shards of split 'train' claim more than"),
])  # fmt: skip
def test_shards_claiming_more_records_than_readers_count_are_refused_on_load(
    packed, tmp_path, count, said
):
    # inspect and iter_examples ended in OverflowError's traceback (a share of 10**30 positions)
    raw = json.loads((packed / "index.json").read_text())
    split = raw["splits"]["train"]
    shards = [{**split["shards"][0], "num_records": count, "num_bytes": count * 16},
              *split["shards"][1:]]  # fmt: skip
    out = _planted(packed, tmp_path, splits={"train": {**split, "shards": shards}})
    for command in ("verify", "inspect"):
        one_line_error(run_cli(command, str(out)), str(out / "index.json"), said)
    with pytest.raises(IndexFormatError, match=said):
        list(iter_examples(out, "train"))


@pytest.mark.parametrize("plant", ["class_counts", "num_bytes", "listed twice"])
def test_counts_past_the_bound_and_a_shard_listed_twice_are_refused_on_load(
    packed, tmp_path, plant
):
    """report ended in an OverflowError's traceback for a count of 10**30 (and took a class
    count of -1); a shard listed twice, in one split or two, was read twice by every reader."""
    split = json.loads((packed / "index.json").read_text())["splits"]["train"]
    first = split["shards"][0]
    if plant == "class_counts":
        split["class_counts"] = [10**30, -1]
        said = "'class_counts' of split 'train' must be a list of integers from 0 to"
    elif plant == "num_bytes":
        first["num_bytes"] = 10**30
        said = "'num_bytes' must be an integer >= 0, got 1000000000000000000000000000000, over"
    else:
        split["shards"].append(first)
        said = f"shard {first['file']!r} is listed 2 times"
    out = _planted(packed, tmp_path, splits={"train": split})
    done = run_cli("report", str(out), "--out", str(tmp_path / "report.html"))
    one_line_error(done, str(out / "index.json"), said)


@pytest.mark.parametrize("container", ["tfrecord", "webdataset"])
def test_a_shard_claiming_more_records_than_its_bytes_hold_is_refused_on_load(
    shared_pack, tmp_path, container
):
    """ShardDataset took 8 bytes a record claimed (a MemoryError for 10**12 of them)."""
    from shardpack.containers import CONTAINERS

    packed = shared_pack({"a": 2, "b": 1}, format=container, workers=1)
    out = Path(shutil.copytree(packed, tmp_path / "out"))
    raw = json.loads((out / "index.json").read_text())
    shard = raw["splits"]["train"]["shards"][0]
    most = CONTAINERS[container].most_records(shard["num_bytes"])
    assert shard["num_records"] <= most  # what pack writes passes
    shard["num_records"] = most + 1
    (out / "index.json").write_text(json.dumps(raw))
    said = f"shard {shard['file']!r} of split 'train' claims {most + 1:,} records in"
    one_line_error(run_cli("inspect", str(out)), str(out / "index.json"), said)
    with pytest.raises(IndexFormatError, match=re.escape(said)):
        load_index(out)


def test_inspect_prints_every_string_from_a_planted_index_escaped(packed, tmp_path):
    """Terminal codes and line breaks in the name, source, encoding, a split and a class name:
    no escape sequence reaches the screen and no forged line appears."""
    raw = json.loads((packed / "index.json").read_text())
    forged = "\nOK: everything verified\n"
    classes = ["cat\x1b[2J", "dog\u202e"]
    features = {**raw["features"], "label": {**raw["features"]["label"], "classes": classes}}
    splits = {"train\x1b]0;title\x07": raw["splits"]["train"]}
    out = _planted(packed, tmp_path, name="x\x1b[2J" + forged, source="folder" + forged,
                   encoding="png\x1b]0;pwned\x07" + forged, classes=classes, features=features,
                   splits=splits)  # fmt: skip
    done = run_cli("inspect", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    shown = done.stdout + done.stderr
    assert not any(c in shown for c in "\x1b\x07\u202e"), shown
    assert not any(line.startswith("OK") for line in shown.splitlines()), shown
    assert "x\\x1b[2J\\nOK: everything verified\\n" in shown
    assert "png\\x1b]0;pwned\\x07" in shown and "split train\\x1b]0;title\\x07" in shown


@pytest.mark.parametrize("text", ["\ud800", "a\udfff", "\\\udc00"])
def test_a_lone_surrogate_no_file_name_holds_is_refused_on_load(packed, tmp_path, text):
    """Valid JSON, no text: report, inspect --json and --append ended in a UnicodeEncodeError
    writing it out. A pair (an emoji) and a file name's undecodable byte (\udcff) still load."""
    out = _planted(packed, tmp_path, name=text, warnings=["\U0001f600 \udcff"])
    for command in ("report", "inspect --json", "verify"):
        one_line_error(run_cli(*command.split(), str(out)), str(out / "index.json"),
                       "lone surrogate")  # fmt: skip
    (out / "index.json").write_text(json.dumps({**json.loads((out / "index.json").read_text()),
                                                "name": "out"}))  # fmt: skip
    assert load_index(out).warnings == ("\U0001f600 \udcff",)


def test_a_coco_file_name_that_is_no_name_is_skipped_into_an_index_its_readers_take(tmp_path):
    src = make_tree(tmp_path / "src", {"train": 1})
    (src / "annotations").mkdir()
    images = [{"id": 1, "file_name": "img_000.jpg", "width": 32, "height": 24},
              {"id": 2, "file_name": "\ud800.jpg", "width": 32, "height": 24}]  # fmt: skip
    coco = {"images": images, "annotations": [], "categories": [{"id": 1, "name": "x"}]}
    (src / "annotations" / "instances_train.json").write_text(json.dumps(coco))
    done = run_cli("pack", str(src), str(tmp_path / "out"), "--workers", "1", "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    assert [s.key for s in load_index(tmp_path / "out").skipped] == ["train/\ufffd.jpg"]


def _shard_out(tmp_path: Path, records: list[dict], extra: dict) -> Path:
    """OUT of one TFRecord shard holding `records` (Example features), with a version-2 index
    of classes a, b and the `extra` features that vouches for them."""
    import hashlib

    from shardpack.containers.example import encode_example
    from shardpack.containers.tfrecord import frame
    from shardpack.schema import Schema

    shard = b"".join(frame(encode_example(r)) for r in records)
    out = tmp_path / "out"
    out.mkdir()
    name = "x-train.tfrecord-00000-of-00001"
    (out / name).write_bytes(shard)
    schema = Schema.build(("a", "b"), extra)
    index = {"format": "shardpack-index", "version": 2, "name": "x", "source": "manifest",
             "classes": ["a", "b"], "features": schema.to_json(), "encoding": "png",
             "compression": "none", "splits": {"train": {
                 "num_records": len(records), "class_counts": [0, len(records)],
                 "shards": [{"file": name, "num_records": len(records), "num_bytes": len(shard),
                             "sha256": hashlib.sha256(shard).hexdigest()}]}}}  # fmt: skip
    (out / "index.json").write_text(json.dumps(index))
    return out


def test_preview_marks_a_tile_whose_image_does_not_decode_and_skips_a_nan_box(tmp_path):
    """A box of NaN and infinities (a fault verify names: no pack writes one) and image bytes
    that are no image (verify without --decode passes them): preview writes the sheet all the
    same, the NaN box undrawn, the bad image's tile crossed in red."""
    import cv2
    import numpy as np

    from shardpack.read.preview import BAD_COLOR, CELL
    from shardpack.schema import Feature

    png = cv2.imencode(".png", np.full((24, 32, 3), 255, np.uint8))[1].tobytes()
    base = {"label": 1, "height": 24, "width": 32, "channels": 3, "format": b"png"}
    nan_box = np.array([[np.nan, 0.1, 0.5, 0.5], [0.2, -np.inf, 1e30, 0.9]], np.float32)
    no_box = np.zeros((0, 4), np.float32)
    records = [
        {**base, "image": png, "key": b"nan.png", "boxes": nan_box},
        {
            **base,
            "image": b"\x89PNG\r\n\x1a\n and then nothing",
            "key": b"bad.png",
            "boxes": no_box,
        },
    ]
    out = _shard_out(tmp_path, records, {"boxes": Feature("float32", (-1, 4))})
    checked = run_cli("verify", str(out))
    assert checked.returncode == 1 and "record 'nan.png': feature 'boxes' row 0" in checked.stderr
    sheet_path = tmp_path / "sheet.png"
    done = run_cli("preview", str(out), "--out", str(sheet_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    sheet = cv2.imread(str(sheet_path))
    tiles = [sheet[:CELL, :CELL], sheet[:CELL, CELL : 2 * CELL]]
    crossed = [bool((tile == BAD_COLOR).all(axis=2).any()) for tile in tiles]
    assert sorted(crossed) == [False, True]  # one tile (the bad image's) crossed in red


# Reads a split shuffled, then prints the records read and its peak resident memory (MiB).
_SHUFFLED_READ = f"""
import sys
from shardpack.read import stream
stream.SHUFFLE_BUFFER_BYTES = 16 << 20  # scaled down with the records
before = {PEAK_KIB}
n = sum(1 for _ in stream.iter_examples(sys.argv[1], "train", shuffle=True, seed=1))
print(n, ({PEAK_KIB} - before) // 1024)
"""


def test_a_shuffled_read_of_huge_records_holds_a_bounded_buffer(tmp_path: Path):
    """A small GZIP shard of 24 records of 8 MiB: the shuffle buffer holds at most
    SHUFFLE_BUFFER_BYTES of them (16 MiB here), not all 24 (192 MiB)."""
    import gzip
    import hashlib

    from shardpack.containers.example import encode_example
    from shardpack.containers.tfrecord import frame

    base = {"label": 1, "height": 24, "width": 32, "channels": 3, "format": b"png"}
    out = tmp_path / "out"
    out.mkdir()
    name = "x-train.tfrecord-00000-of-00001"
    with gzip.open(out / name, "wb", compresslevel=1) as f:
        for i in range(24):
            f.write(frame(encode_example({**base, "image": bytes(8 << 20), "key": b"%d" % i})))
    shard = (out / name).read_bytes()
    assert len(shard) < 2 << 20
    raw = json.loads(json.dumps(_V1_INDEX))
    raw["splits"]["train"]["shards"] = [{"file": name, "num_records": 24, "num_bytes": len(shard),
                                         "sha256": hashlib.sha256(shard).hexdigest()}]  # fmt: skip
    raw["splits"]["train"].update(num_records=24, class_counts=[0, 24])
    (out / "index.json").write_text(json.dumps(raw))
    done = subprocess.run([sys.executable, "-c", _SHUFFLED_READ, str(out)], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    count, grown_mib = map(int, done.stdout.split())
    assert count == 24
    assert grown_mib < 16 + 3 * 8 + 48, grown_mib  # the buffer, a record being read, slack


_V1_INDEX = {"format": "shardpack-index", "version": 1, "name": "x", "source": "folder",
             "classes": ["a", "b"], "encoding": "png", "compression": "gzip",
             "features": {"image": "bytes", "label": "int64", "height": "int64", "width": "int64",
                          "channels": "int64", "format": "bytes", "key": "bytes"},
             "splits": {"train": {"num_records": 8, "class_counts": [0, 8],
                                  "shards": []}}}  # fmt: skip


def test_a_parquet_column_of_rows_past_the_bound_is_bad_rows_not_a_shape(tmp_path: Path):
    """Two rows of 2**20 + 1 numbers (a small file: they compress): they are bad rows, so pack
    never declares a shape its own readers refuse."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = make_tree(tmp_path / "src", {"cat": 3})
    wide = [[0.0] * (MAX_ROW + 1)]
    table = pa.table({"path": [f"cat/img_00{i}.jpg" for i in range(3)], "label": ["cat"] * 3,
                      "emb": [wide, wide, [[0.5] * 4]]})  # fmt: skip
    pq.write_table(table, src / "wide.parquet")
    out = tmp_path / "out"
    done = run_cli("pack", str(src / "wide.parquet"), str(out), "--workers", "1", "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    raw = json.loads((out / "index.json").read_text())
    assert raw["features"]["emb"]["shape"] == [-1, 4] and raw["num_skipped"] == 2
    assert all(f"over {MAX_ROW:,}" in s["reason"] for s in raw["skipped"])
    assert run_cli("verify", str(out)).returncode == 0


def test_an_index_of_no_splits_is_reported_without_warnings_and_named_as_empty(packed, tmp_path):
    """report warned twice of a legend of nothing; preview said 'it has : name one of those'."""
    out = _planted(packed, tmp_path, splits={})
    done = run_cli("report", str(out), "--out", str(tmp_path / "report.html"), "--no-progress")
    assert done.returncode == 0 and "legend" not in done.stderr, done.stderr
    done = run_cli("preview", str(out), "--out", str(tmp_path / "grid.png"))
    one_line_error(done, "no split 'train'; it has none (nothing packed)")
