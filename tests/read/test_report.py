"""report's data card of a dataset of objects: per class, per image, COCO's box sizes."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from shardpack.errors import RESTORE_SHARD
from shardpack.index import load_index
from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.read.report import (
    _described,
    _objects_section,
    _splits_section,
    _splits_table,
    _thumbnails,
)
from tests.helpers import (
    OBJECT_ROWS,
    make_tree,
    object_mask,
    one_line_error,
    pack_objects,
    run_cli,
)
from tests.packing.test_duplicates import _Marked


def test_the_card_counts_objects_per_class_per_image_and_by_box_size(objects_out: Path):
    """The objects section alone (the card's charts cost seconds; the card is test_duplicates')."""
    index = load_index(objects_out)
    marked = _Marked()
    marked.feed(_objects_section(index, index.summaries))
    values = {name: text for (split, name), text in marked.values.items() if split == "train"}
    assert (values["objects"], values["without"]) == ("4", "1")
    # objects per image 2, 2 and 0 (the image without objects)
    assert [values[f"per_image:{q}"] for q in ("min", "median", "90%", "max")] == \
        ["0", "2", "2", "2"]  # fmt: skip
    assert (values["images:0"], values["images:2"]) == ("1", "2")
    assert [values[f"class:{c}"] for c in ("cat", "dog", "eel")] == ["2", "1", "1"]
    # a.png's two boxes are 20 x 24 and 16 x 27 pixels; b.png's 100 x 120 and 50 x 60
    assert [values[f"size:{s}"] for s in ("small", "medium", "large")] == ["2", "1", "1"]


def test_the_cards_thumbnails_show_the_objects_as_preview_draws_them(objects_out: Path):
    """The card's thumbnails of an object dataset showed bare images where preview draws each
    box: a.png (40 x 60 grey, kept at its size) shows its cat box [0.1, 0.1, 0.6, 0.5] in
    preview's green (a JPEG's: each column of its bottom edge, row 23, far greener than red),
    c.png (no objects) none."""
    sheets, _ = _thumbnails(load_index(objects_out), set())
    greener = {}  # how much greener than red each pixel is
    for name, uri in sheets[""]:
        data = np.frombuffer(base64.b64decode(uri.partition(",")[2]), np.uint8)
        thumb = cv2.imdecode(data, cv2.IMREAD_COLOR).astype(int)
        greener[name.rpartition(":")[2]] = thumb[..., 1] - thumb[..., 2]
    assert greener["0"].shape == (40, 60)
    assert greener["0"][21:26, 10:28].max(axis=0).min() > 60  # the box's bottom edge
    assert greener["0"][15:20, 12:26].max() < 30  # an outline, not a filled box (its name: above)
    assert greener["2"].max() < 30


def test_the_card_says_the_classes_as_the_pack_summary_does(objects_out: Path, tmp_path: Path):
    """A COCO pack's card began 'coco source, encoding keep, tfrecord shards, 0 classes.',
    where pack said 'no image classes; 6 object classes', and one class was '1 classes'; its
    class balance was a table of no row."""
    index = load_index(objects_out)
    said = _described(index)
    assert said.endswith(" shards, no image classes, 3 object classes.</p>"), said
    splits = _splits_section(index)
    assert "Class balance" not in splits
    assert "<p>The images have no classes (their objects' classes: Objects, below).</p>" in splits
    out = pack(make_tree(tmp_path / "src", {"cat": 1}), tmp_path / "out", PackOptions(workers=1))
    assert _described(out.index).endswith(" shards, 1 class.</p>")


def test_the_card_counts_objects_where_every_image_holds_some(tmp_path: Path):
    """Such a split's summary counts no image without objects: its section was left out."""
    index = load_index(pack_objects(tmp_path, OBJECT_ROWS[:2]))
    marked = _Marked()
    marked.feed(_objects_section(index, index.summaries))
    values = {name: text for (split, name), text in marked.values.items() if split == "train"}
    assert (values["objects"], values["without"]) == ("4", "0")


def test_the_card_counts_the_boxes_dropped_by_reason(tmp_path: Path):
    """Boxes outside the image and of no area were dropped when packed, counted in the pack
    summary and inspect, and the card said nothing of them."""
    row = {**OBJECT_ROWS[0], "boxes": [[0.1, 0.1, 0.6, 0.5], [1.2, 1.2, 1.5, 1.5],
                                       [0.2, 0.2, 0.2, 0.6], [1.1, 0.0, 1.4, 0.5]],
           "labels": [0, 1, 2, 0], "is_crowd": [0, 0, 0, 0],
           "mask": object_mask(40, 60, [(4, 6, 24, 30)])}  # fmt: skip
    index = load_index(pack_objects(tmp_path, [row]))
    marked = _Marked()
    marked.feed(_objects_section(index, index.summaries))
    values = {name: text for (split, name), text in marked.values.items() if split == "train"}
    assert (values["objects"], values["dropped"]) == ("1", "3")
    assert (values["dropped:outside the image"], values["dropped:no area"]) == ("2", "1")
    # and which record lost them (the card named none)
    assert values["dropped_in:outside the image:objects.parquet:0"] == "2"
    assert values["dropped_in:no area:objects.parquet:0"] == "1"


def test_a_file_at_out_is_kept_and_the_report_refused(tmp_path: Path):
    """`report OUT --out OUT/index.json` wrote the card over the dataset's index (any file at
    --out was replaced); it is kept now, as preview keeps one, unless --overwrite."""
    out = tmp_path / "out"
    pack(make_tree(tmp_path / "src", {"a": 2, "b": 1}), out, PackOptions(workers=1))
    index = (out / "index.json").read_bytes()
    done = run_cli("report", str(out), "--out", str(out / "index.json"), "--no-progress")
    one_line_error(done, f"{out / 'index.json'}: is the dataset's index.json; pass another --out")
    assert (out / "index.json").read_bytes() == index and not (out / "report.html").exists()


@pytest.mark.parametrize("name", ["index.json", "croissant.json", "README.md", "shard"])
def test_a_file_of_the_dataset_is_never_the_report(tmp_path: Path, name: str):
    """`report OUT --out OUT/index.json` said 'exists; pass --overwrite to replace it', and
    with --overwrite wrote the card over the index (or a shard, the Hub card): the dataset
    was lost. A file of OUT's own is refused with or without --overwrite, and kept."""
    out = tmp_path / "out"
    pack(make_tree(tmp_path / "src", {"a": 2, "b": 1}), out, PackOptions(workers=1))
    if name == "shard":
        (name,) = [p.name for p in out.glob("*.tfrecord*")]
    before = (out / name).read_bytes()
    alias = tmp_path / "alias"
    alias.symlink_to(out)  # the same folder by another path
    for dest in (out / name, alias / name):
        for extra in ([], ["--overwrite"]):
            done = run_cli("report", str(out), "--out", str(dest), "--no-progress", *extra)
            one_line_error(done, f"{dest}: is the dataset's {name}; pass another --out")
    assert (out / name).read_bytes() == before and not (out / "report.html").exists()


@pytest.mark.parametrize("damage", ["cut short", "a byte flipped"])
def test_a_damaged_shard_refuses_the_card_in_one_line(tmp_path: Path, damage: str):
    """A shard cut short wrote the card and exited 0: counts and charts of records no reader
    can read (its thumbnails' pass stopped at the damage in silence); a byte flipped inside a
    shard alike. Refused now as every reader refuses it (verify lists it), in one line naming
    the shard, what is wrong and the mend, before any card is written."""
    out = tmp_path / "out"
    pack(make_tree(tmp_path / "src", {"a": 3, "b": 3}), out, PackOptions(workers=1, shards=2))
    shard = sorted(out.glob("*.tfrecord-*"))[-1]
    data = bytearray(shard.read_bytes())
    if damage == "cut short":
        del data[-100:]
    else:
        data[len(data) // 2] ^= 0xFF  # a record's bytes or framing: a CRC fails
    shard.write_bytes(bytes(data))
    done = run_cli("report", str(out), "--no-progress")
    what = f"{shard}: size {len(data):,} bytes, index.json says" if damage == "cut short" else (
        "CRC mismatch")  # fmt: skip
    one_line_error(done, str(shard), what, RESTORE_SHARD, f"verify {out}` lists every damaged")
    assert not (out / "report.html").exists()


def test_the_card_counts_what_the_shards_hold_where_the_split_s_total_says_otherwise(
    tmp_path: Path,
):
    """A hand-edited splits.train.num_records was the card's record count, where every reader
    reads what the shards' counts add up to (inspect shows and warns of it; verify lists it)."""
    out = tmp_path / "out"
    pack(make_tree(tmp_path / "src", {"a": 2, "b": 1}), out, PackOptions(workers=1))
    doc = json.loads((out / "index.json").read_text())
    doc["splits"]["train"]["num_records"] = 1000
    (out / "index.json").write_text(json.dumps(doc))
    marked = _Marked()
    marked.feed(_splits_table(load_index(out)))
    assert marked.values["train", "records"] == "3"


@pytest.mark.parametrize("name, said", [("card.pdf", ".pdf"), ("card", "without extension")])
def test_an_out_not_named_html_is_refused_in_one_line(tmp_path: Path, name: str, said: str):
    """`report OUT --out r.pdf` wrote the HTML card under a .pdf name (preview refuses a name
    its format is not); refused now in one line naming the file and the names it takes."""
    out = tmp_path / "out"
    pack(make_tree(tmp_path / "src", {"a": 2, "b": 1}), out, PackOptions(workers=1))
    done = run_cli("report", str(out), "--out", str(tmp_path / name), "--no-progress")
    one_line_error(done, f"{tmp_path / name}: a report is written as HTML (.html, .htm), not",
                   said, "name the file with one of those")  # fmt: skip
    assert not (tmp_path / name).exists()
    done = run_cli("report", str(out), "--out", str(tmp_path / "card.HTM"), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "card.HTM").read_text().startswith("<!doctype html>")
