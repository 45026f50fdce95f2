"""inspect (read/describe.py): a dataset of objects gets one line of them, classes named."""

from __future__ import annotations

import json
import os
from pathlib import Path

import shardpack
from shardpack.read.describe import describe
from tests.helpers import (
    OBJECT_ROWS,
    bytes_read,
    make_tree,
    pack_objects,
    packed_tree,
    run_cli,
    write_csv,
)


def test_inspect_says_the_objects_in_one_line_with_class_names(objects_out: Path):
    summary = describe(objects_out, num_records=0)["summaries"]["train"]
    assert summary["object_classes"] == {"cat": 2, "dog": 1, "eel": 1}
    done = run_cli("inspect", str(objects_out))
    assert done.returncode == 0, done.stderr
    # its header said "0 classes", which the README reads as a misread source
    assert done.stdout.splitlines()[0].endswith(" shards, no image classes, 3 object classes)")
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("  objects:")]
    assert line == ("  objects: 4 in 3 images (1 without), 1.333 per image, at most 2; cat 2, "
                    "dog 1, eel 1; boxes small 2, medium 1, large 1")  # fmt: skip


def test_inspect_and_the_card_of_an_unlabeled_dataset_say_so(tmp_path: Path):
    """A manifest without a label column: pack said `no classes: unlabeled`, inspect's header
    and the Hub card "0 classes", as a class list misread would read."""
    photos = make_tree(tmp_path / "photos", {"a": 2})
    table = write_csv(tmp_path / "photos" / "list.csv",
                      [{"path": p.relative_to(photos).as_posix(), "caption": "x"}
                       for p in sorted(photos.rglob("*.jpg"))])  # fmt: skip
    out = tmp_path / "out"
    done = run_cli("pack", str(table), str(out), "--no-progress")
    assert "\nno classes: unlabeled\n" in done.stdout, done.stderr
    done = run_cli("inspect", str(out))
    assert done.stdout.splitlines()[0].endswith(" tfrecord shards, unlabeled)"), done.stdout
    assert "train 2 images, unlabeled; 0 skipped" in (out / "README.md").read_text()


def test_inspect_of_a_dataset_missing_a_shard_says_so_and_shows_the_rest(tmp_path: Path):
    """It ended in one error line, the shard's "cannot open", before it could say MISSING."""
    out = packed_tree(tmp_path, {"a": 2, "b": 2}, shards=2)
    gone = sorted(out.glob("*.tfrecord-*"))[0]
    gone.unlink()
    done = run_cli("inspect", str(out))
    assert done.returncode == 0, done.stderr
    assert f"{gone.name}" in done.stdout and "MISSING" in done.stdout
    assert done.stderr.startswith(f"warning: 1 shard the index lists not in OUT ({gone.name})")


def test_inspect_of_a_dataset_with_a_shard_cut_short_says_so_and_reads_none_of_its_split(
    tmp_path: Path,
):
    """A shard cut short was listed as whole, in silence (inspect reads a few records, which
    may all lie before the cut): its size is in the listing inspect takes anyway."""
    out = packed_tree(tmp_path, {"a": 2, "b": 2}, shards=2)
    cut = sorted(out.glob("*.tfrecord-*"))[1]
    size = cut.stat().st_size
    os.truncate(cut, size - 10)
    done = run_cli("inspect", str(out))
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if cut.name in line]
    assert line.endswith(f"WRONG SIZE ({size - 10:,} bytes; index.json: {size:,})")
    assert done.stderr == (f"warning: 1 shard of another size than the index says ({cut.name}): "
                           "cut short or replaced; for each, restore it from a copy or pack "
                           "again (shardpack verify checks every shard)\n")  # fmt: skip
    described = json.loads(run_cli("inspect", str(out), "--json").stdout)
    (shard,) = [s for s in described["splits"]["train"]["shards"] if s["file"] == cut.name]
    assert (shard["size_on_disk"], shard["num_bytes"]) == (size - 10, size)
    assert described["splits"]["train"]["samples"] == []  # its split read no further


def test_inspect_shows_what_the_shards_hold_where_the_index_s_total_says_otherwise(
    tmp_path: Path,
):
    """A hand-edited splits.train.num_records was inspect's record count, in silence, where
    every reader reads what the shards' counts add up to and verify lists the total as a fault:
    the shards' total is shown, with a warning naming index.json, the field and what to set."""
    out = packed_tree(tmp_path, {"a": 2, "b": 2}, shards=2)
    doc = json.loads((out / "index.json").read_text())
    doc["splits"]["train"]["num_records"] = 1000
    (out / "index.json").write_text(json.dumps(doc))
    said = (f"{out / 'index.json'}: 'num_records' of split 'train' is 1000, but its shards' "
            "counts add up to 4: set it to 4")  # fmt: skip
    summary = describe(out, num_records=0)
    assert summary["splits"]["train"]["num_records"] == 4 and summary["index_faults"] == [said]
    done = run_cli("inspect", str(out), "--records", "0")
    assert done.returncode == 0, done.stderr
    assert "split train: 4 records in 2 shards" in done.stdout and "1,000" not in done.stdout
    assert done.stderr.splitlines() == [f"warning: {said} (shown: what the shards hold, as every "
                                        "reader reads them)"]  # fmt: skip
    assert [str(f) for f in shardpack.verify(out).faults] == [said.replace(str(out) + "/", "")]


def test_a_grown_dataset_s_history_counts_its_shards_in_words():
    """inspect's history said "1 shards rewritten"."""
    from shardpack.read.describe import history_lines

    run = {"generation": 2, "when": "2026-12-02T19:40:14Z", "mode": "update", "added": 0,
           "changed": 0, "removed": 1, "shards_rewritten": 1}  # fmt: skip
    said = history_lines([run, {**run, "generation": 3, "shards_rewritten": 2}])
    assert said == [
        "generation 2 (2026-12-02T19:40:14Z): update, added 0, changed 0, removed 1, "
        "1 shard rewritten",
        "generation 3 (2026-12-02T19:40:14Z): update, added 0, changed 0, removed 1, "
        "2 shards rewritten",
    ]


def test_objects_are_said_where_every_image_holds_some(tmp_path: Path):
    """A split with no image without objects has no such count in its summary: its objects
    line was left out whole (a COCO set whose every image is annotated)."""
    out = pack_objects(tmp_path, OBJECT_ROWS[:2])
    done = run_cli("inspect", str(out))
    assert done.returncode == 0, done.stderr
    assert "  objects: 4 in 2 images (0 without), 2 per image, at most 2; " in done.stdout
    assert "  classes:" not in done.stdout  # its images hold no class: no empty heading


def test_a_summary_s_figures_read_as_numbers_with_their_unit():
    """A median of bytes is a float in the index: inspect printed '1.041e+04 bytes median' (and
    called a source file's bytes those of the record, re-encoded or not)."""
    from shardpack.read.describe import summary_lines

    figures = {"min": 96, "median": 96.0, "max": 96}
    summary = {"width": figures, "height": figures,
               "bytes": {"min": 9000, "median": 10409.5, "max": 12001}}  # fmt: skip
    assert summary_lines(summary) == [  # an index from before stored bytes and totals
        "  images: 96x96 median; widths 96 to 96, heights 96 to 96",
        "  bytes per image: source 10,410 median; stored unknown (packed before shardpack "
        "noted it)",
    ]
    summary["width"], summary["height"] = (
        {"min": 2, "median": 40, "max": 12000},
        {"min": 1, "median": 44, "max": 60},
    )  # a 12,000x40 image and a 40x60 one
    # said "from 2x1 to 12,000x60", a size no image has
    assert (
        summary_lines(summary)[0] == "  images: 40x44 median; widths 2 to 12,000, heights 1 to 60"
    )
    summary["bytes"]["total"] = 1234567
    summary["stored_bytes"] = {"min": 900, "median": 1000.5, "max": 1200, "total": 120060}
    assert summary_lines(summary)[1] == (
        "  bytes per image: source 10,410 median, 1,234,567 in all; stored 1,000 median, "
        "120,060 in all"
    )


def test_inspect_reads_index_json_once(tmp_path: Path):
    """Each split's sample records were read through iter_examples of OUT, which loaded
    index.json again: a 55 MB index took inspect 9 s. Bytes read counted by the kernel."""
    out = packed_tree(tmp_path, {"a": 2, "b": 2}, shards=2)
    index = out / "index.json"
    with index.open("a") as f:
        f.write(" " * (8 << 20))  # JSON's whitespace: the same index, 8 MiB longer
    before = bytes_read()
    summary = describe(out, 1)
    assert bytes_read() - before < 1.5 * index.stat().st_size  # 2x before: once more a split
    assert [len(s["samples"]) for s in summary["splits"].values()] == [1]
