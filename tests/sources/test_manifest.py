"""A manifest as a pack source, on real files: bad rows by line, labels to classes, splits,
--path-column and --root, the Hugging Face metadata folder, and version-1 outputs still read."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from shardpack.errors import OptionError, OutputError, SourceError
from shardpack.options import PackOptions, as_flags
from shardpack.packing.packer import pack
from shardpack.read.random_access import read_record
from shardpack.read.stream import iter_examples, tf_dataset
from shardpack.read.verify import verify
from shardpack.sources import scan
from shardpack.storage.imageroot import NOT_WEB
from tests.helpers import (
    cli,
    evict,
    heavy_import,
    make_tree,
    needs,
    one_line_error,
    run_cli,
    run_json,
    shard_files,
    write_csv,
    write_jsonl,
    write_parquet,
)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


def _index(out: Path) -> dict:
    return json.loads((out / "index.json").read_text())


GOOD = {"label": "cat", "boxes": [[0.1, 0.2, 0.3, 0.4]], "score": 0.5}


@pytest.fixture
def bad_rows(tmp_path: Path) -> Path:
    """A JSONL manifest whose lines 2-8 are each bad in their own way (line 1 is good)."""
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 1})
    os.mkfifo(src / "fifo.jpg")
    rows = [
        {"path": "cat/img_000.jpg", **GOOD},
        {"path": "nowhere.jpg", **GOOD},  # missing file
        {"path": "cat/img_001.jpg", **GOOD, "score": "high"},  # a value of the wrong type
        {"path": "dog/img_000.jpg", **GOOD, "boxes": [[0.1, 0.2, 0.3]]},  # a ragged box list
        {"path": "", **GOOD},  # an empty path
        {"path": "fifo.jpg", **GOOD},  # not a regular file: never opened
        {"path": "cat/img_000.jpg", **GOOD, "label": "bird"},  # the same image again
    ]
    manifest = write_jsonl(src / "labels.jsonl", rows)
    with manifest.open("a") as f:
        f.write('{"path": "dog/img_000.jpg",\n')  # line 8: not JSON at all
    return manifest


def test_a_path_whose_file_is_named_in_another_case_or_unicode_form_says_so(tmp_path: Path):
    """A manifest's "ü" in NFC of a file named in NFD (copied from a Mac, which writes names so
    and packs it, as its disk takes the two for one name), or its `IMGS/a.jpg` of `imgs/a.JPG`
    (written on Windows), was skipped as "No such file or directory" on a disk that tells them
    apart, the file there to see in `ls` (and, every row so, told to try --root); now the reason
    names the file as the disk spells it and the way on."""
    import unicodedata

    src = make_tree(tmp_path / "src", {"cat": 3})
    for stem, form, other in (("img_000", "NFD", "NFC"), ("img_001", "NFC", "NFD")):
        file = unicodedata.normalize(form, f"cat/{stem}_tür.jpg")
        (src / f"cat/{stem}.jpg").rename(src / file)
        write_csv(src / f"{stem}.csv", [{"path": unicodedata.normalize(other, file)}])
        with pytest.raises(SourceError) as caught:
            pack(src / f"{stem}.csv", tmp_path / stem, PackOptions(workers=1))
        assert (f": No such file or directory, but it is there named in Unicode {form}"
                in str(caught.value)), str(caught.value)  # fmt: skip
        assert (f"write the manifest's paths in {form}, or rename the files to {other} "
                f"(convmv -f utf8 -t utf8 --{other.lower()} -r FOLDER lists the renames)"
                in str(caught.value))  # fmt: skip
        write_csv(src / f"{stem}.csv", [{"path": file}])  # as the disk spells it: packed
        assert pack(src / f"{stem}.csv", tmp_path / stem, PackOptions(workers=1)).num_records == 1
    (src / "cat/img_002.jpg").rename(src / "cat/img_002.JPG")
    write_csv(src / "case.csv", [{"path": "CAT/img_002.jpg"}])
    with pytest.raises(SourceError) as caught:
        pack(src / "case.csv", tmp_path / "case", PackOptions(workers=1))
    assert str(caught.value).endswith(
        "No such file or directory, but it is there as 'cat/img_002.JPG', in another case, which "
        "this disk tells apart (the disks of macOS and Windows do not): write the manifest's "
        "paths as the files are named"
    )
    assert "--root" not in str(caught.value)  # not relative to another folder
    write_csv(src / "ids.csv", [{"path": "cat/img_002"}])  # a column of ids: the suffix's case
    with pytest.raises(SourceError) as caught:
        pack(src / "ids.csv", tmp_path / "ids", PackOptions(workers=1, path_suffix=".jpg"))
    assert str(caught.value).endswith("but cat/img_002.JPG is: pass path_suffix='.JPG'")
    (src / "Cat").mkdir()  # two folders alike but for case: no telling which was meant
    with pytest.raises(SourceError) as caught:
        pack(src / "case.csv", tmp_path / "case", PackOptions(workers=1))
    assert "in another case" not in str(caught.value)


def test_bad_rows_are_skipped_with_their_manifest_line(bad_rows: Path, tmp_path: Path):
    result = pack(bad_rows, tmp_path / "out", PackOptions(workers=1))
    shown = [f"{s['key']}: {s['reason']}" for s in _index(tmp_path / "out")["skipped"]]
    assert all(line.count("labels.jsonl line") == 1 for line in shown), shown  # named once
    skipped = {re.search(r"labels\.jsonl line \d+", line)[0]: line for line in shown}
    assert sorted(skipped) == [f"labels.jsonl line {n}" for n in range(2, 9)]
    assert "No such file" in skipped["labels.jsonl line 2"]
    assert "score" in skipped["labels.jsonl line 3"]
    assert "boxes" in skipped["labels.jsonl line 4"]
    assert "no image path" in skipped["labels.jsonl line 5"]
    assert "not a regular file (a FIFO)" in skipped["labels.jsonl line 6"]
    assert "the same image as line 1" in skipped["labels.jsonl line 7"]
    assert "not valid JSON" in skipped["labels.jsonl line 8"]
    assert result.index.split("train").num_records == 1


def test_a_bad_row_with_on_error_fail_is_one_line_naming_it(bad_rows: Path, tmp_path: Path):
    done = _cli("pack", str(bad_rows), str(tmp_path / "out"), "--on-error", "fail")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "labels.jsonl line 2" in done.stderr
    assert "fix it, or pass --on-error skip" in done.stderr
    assert not (tmp_path / "out" / "index.json").exists()


@pytest.mark.parametrize(
    ("header", "words"),
    [
        (["path", "height"], ["column 'height'", "built-in feature"]),
        (["picture", "label"], ["no image column", "columns: picture, label", "--path-column"]),
    ],
)
def test_an_unusable_manifest_is_one_line(tmp_path: Path, header: list[str], words: list[str]):
    make_tree(tmp_path / "src", {"cat": 1})
    manifest = write_csv(tmp_path / "src" / "m.csv", [dict.fromkeys(header, "cat/img_000.jpg")])
    done = _cli("pack", str(manifest), str(tmp_path / "out"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert all(w in done.stderr for w in words), done.stderr


def test_a_column_of_ids_beside_their_images_is_named_as_the_image_column(tmp_path: Path):
    """Kaggle's `id,breed` beside train/<id>.jpg: "no image column" told to name a column of
    paths, not which one; now the column whose first value names an image, and how."""
    src = make_tree(tmp_path / "src", {"train": 2})
    rows = [{"id": f"img_{i:03d}", "breed": b} for i, b in enumerate(["pug", "husky"])]
    manifest = write_csv(src / "labels.csv", rows)
    done = _cli("pack", str(manifest), str(tmp_path / "out"))
    fix = f"--path-column id --root {src / 'train'} --path-suffix .jpg"
    one_line_error(done, f"{manifest}: no image column (columns: id, breed), but column 'id' "
                         f"names the images (train/img_000.jpg): pass {fix}")  # fmt: skip
    done = _cli("pack", str(manifest), str(tmp_path / "out"), *fix.split(), "--label-column",
                "breed")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _index(tmp_path / "out")["splits"]["train"]["num_records"] == 2


@pytest.mark.parametrize(
    ("name", "line", "fix"),
    [
        ("m.csv", "path;label", "separated by ';', and a CSV file's by ','; save it with commas"),
        ("m.csv", "path\tlabel", "separated by '\\t', and a CSV file's by ','; rename it .tsv"),
        ("m.tsv", "path,label", "separated by ',', and a TSV file's by '\\t'; rename it .csv"),
    ],
)
def test_a_table_of_another_separator_is_named_so(tmp_path: Path, name: str, line: str, fix):
    """A spreadsheet's ';' CSV was read as one column named 'path;label' and told to pass it as
    --path-column; now the separator is said, and what to do."""
    manifest = tmp_path / name
    manifest.write_text(f"{line}\ncat/img_000.jpg{line[4]}cat\n")
    done = _cli("pack", str(manifest), str(tmp_path / "out"))
    one_line_error(done, f"{manifest}: its first line {line!r} is one column: its cells are {fix}")


def test_an_optional_number_column_stops_the_run_before_anything_is_written(tmp_path: Path):
    """60 rows, one with "iscrowd": 1: not 59 rows skipped and exit 0, but one line, exit 2."""
    src = make_tree(tmp_path / "src", {"daisy": 30, "rose": 30}, ext=".png")
    rows = [
        {"path": f"{c}/img_{i:03d}.png", "label": c} for c in ("daisy", "rose") for i in range(30)
    ]
    rows[7]["iscrowd"] = 1
    out = tmp_path / "out"
    done = _cli("pack", str(write_jsonl(src / "crowd.jsonl", rows)), str(out))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {src / 'crowd.jsonl'}: column 'iscrowd' has no value on line 1 and 58 more "
        "lines; a column of numbers (or true/false) needs one in every row: fill it in, or "
        "leave the column out (--columns names those to keep)"
    ]
    assert not out.exists()
    for i, row in enumerate(rows):
        row["iscrowd"] = int(i == 7)  # filled in: every row packs
    result = pack(write_jsonl(src / "crowd.jsonl", rows), out, PackOptions(workers=1))
    assert result.index.split("train").num_records == 60 and _index(out)["skipped"] == []


def test_a_csv_quote_never_closed_is_one_line_naming_it(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"daisy": 1})
    (src / "quote.csv").write_text('path,label\n"daisy/img_000.jpg,daisy\n', "utf-8")
    done = _cli("pack", str(src / "quote.csv"), str(tmp_path / "out"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "quote.csv line 2: a quote opens here and is never closed" in done.stderr


def test_an_image_listed_relative_and_absolute_is_packed_once(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 2})
    rows = [
        {"path": "cat/img_000.jpg", "label": "cat"},
        {"path": "cat/img_001.jpg", "label": "cat"},
        {"path": str(src / "cat" / "img_000.jpg"), "label": "cat"},
    ]
    out = tmp_path / "out"
    pack(write_csv(src / "m.csv", rows), out, PackOptions(workers=1))
    assert _index(out)["skipped"] == [
        {
            "key": str(src / "cat" / "img_000.jpg"),
            "reason": "m.csv line 4: the same image as line 2",
        }
    ]
    assert sorted(r["key"] for r in iter_examples(out)) == ["cat/img_000.jpg", "cat/img_001.jpg"]


def test_a_root_that_is_not_a_folder_is_one_line_naming_it(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 1})
    manifest = write_csv(src / "m.csv", [{"path": "cat/img_000.jpg", "label": "cat"}])
    done = cli("pack", str(manifest), str(tmp_path / "out"), "--root", "mm", timeout=120,
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: --root {tmp_path / 'mm'}: no such folder; pass the folder the manifest's "
        "image paths are relative to"
    ]
    with pytest.raises(SourceError, match=r"root='.*m\.csv': is not a folder"):
        pack(manifest, tmp_path / "out", PackOptions(root=str(manifest)))
    assert not (tmp_path / "out").exists()


def test_a_relative_root_beside_the_manifest_run_from_elsewhere_names_that_folder(tmp_path):
    """README's Kaggle example (`train.csv` beside `train/`, `--root train`) run from the folder
    above said only 'no such folder': the one beside the manifest is named."""
    kaggle = tmp_path / "kaggle"
    make_tree(kaggle, {"train": 2})
    manifest = write_csv(kaggle / "train.csv", [{"id": "img_000", "breed": "pug"}])
    done = cli("pack", "kaggle/train.csv", "out", "--path-column", "id", "--label-column",
               "breed", "--root", "train", "--path-suffix", ".jpg", timeout=120,
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: --root {tmp_path / 'train'}: no such folder (a relative one is taken from the "
        f"current folder, not the manifest's); pass --root {kaggle / 'train'}"
    ]
    options = PackOptions(path_column="id", label_column="breed", root=str(kaggle / "train"),
                          path_suffix=".jpg", workers=1)  # fmt: skip
    pack(manifest, tmp_path / "out", options)
    assert [r["key"] for r in iter_examples(tmp_path / "out")] == ["img_000.jpg"]


def test_a_class_not_in_classes_is_a_bad_row(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 1, "dog": 1})
    rows = [
        {"path": "cat/img_000.jpg", "label": "cat"},
        {"path": "dog/img_000.jpg", "label": "dog"},
    ]
    out = tmp_path / "out"
    pack(write_csv(src / "m.csv", rows), out, PackOptions(workers=1, classes=("dog", "cow")))
    assert _index(out)["classes"] == ["dog", "cow"]
    assert [s["reason"] for s in _index(out)["skipped"]] == [
        "m.csv line 2: class 'cat' is not in --classes"
    ]
    assert [r["label"] for r in iter_examples(out)] == [0]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_class_pinned_a_typo_away_from_a_label_left_out_is_warned_of(tmp_path: Path, suffix):
    """--classes circel,square beside rows labelled circle: the circle rows were skipped, class
    'circel' kept no record, and nothing said the two were one class misspelt (a folder's
    --classes said so: nearmisses.pinned_apart)."""
    if suffix == ".parquet":
        needs("pyarrow")
    src = make_tree(tmp_path / "src", {"circle": 2, "square": 1, "star": 1})
    rows = [{"path": f"{c}/img_000.jpg", "label": c} for c in ("circle", "square", "star")]
    write = {".csv": write_csv, ".jsonl": write_jsonl, ".parquet": write_parquet}[suffix]
    manifest = write(src / f"m{suffix}", rows)
    assert scan(manifest, PackOptions(classes=("circel", "square", "yak"))).warnings == (
        "--classes names class 'circel', which no row's label is, and leaves out class "
        "'circle' (its rows skipped): if they are one class, name it 'circle'",
    )
    assert scan(manifest, PackOptions(classes=("circle", "square", "yak"))).warnings == ()
    numbered = write(src / f"n{suffix}", [{**row, "label": i} for i, row in enumerate(rows)])
    assert scan(numbered, PackOptions(classes=("circel", "square", "star"))).warnings == ()


def test_a_split_of_letters_beyond_ascii_is_a_bad_row_that_says_ascii(tmp_path: Path):
    """Before: "not a name of letters, digits and underscores", of a name of letters."""
    src = make_tree(tmp_path / "src", {"cat": 2})
    rows = [{"path": "cat/img_000.jpg", "label": "cat", "split": "train"},
            {"path": "cat/img_001.jpg", "label": "cat", "split": "validación"}]  # fmt: skip
    out = tmp_path / "out"
    pack(write_csv(src / "m.csv", rows), out, PackOptions(workers=1))
    assert [s["reason"] for s in _index(out)["skipped"]] == [
        "m.csv line 3: split 'validación' is not a name of ASCII letters, digits and "
        "underscores (like train, validation, test)"
    ]


def test_integer_labels_split_column_path_column_and_root(tmp_path: Path):
    images = make_tree(tmp_path / "images", {"a": 2, "b": 2})
    rows = [
        {"file": "a/img_000.jpg", "path": "x", "label": 2, "split": "train"},
        {"file": "a/img_001.jpg", "path": "x", "label": 0, "split": "test"},
        {"file": "b/img_000.jpg", "path": "x", "label": 1, "split": "train"},
        {"file": "b/img_001.jpg", "path": "x", "label": 2, "split": "test"},
    ]
    manifest = write_csv(tmp_path / "m.csv", rows)  # beside, not inside, the images
    out = tmp_path / "out"
    done = _cli("pack", str(manifest), str(out), "--path-column", "file", "--root", str(images),
                "--workers", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    index = _index(out)
    assert index["classes"] == ["0", "1", "2"]  # integers without names: classes 0..max
    assert index["features"]["path"] == {"dtype": "bytes", "shape": [], "text": True}
    assert {s: v["class_counts"] for s, v in index["splits"].items()} == {
        "train": [0, 1, 1],
        "test": [1, 0, 1],
    }


def test_a_hugging_face_folder_with_metadata_and_no_labels(tmp_path: Path):
    src = make_tree(tmp_path / "hf", {"train": 2})
    rows = [{"file_name": f"train/img_00{i}.jpg", "text": f"caption {i}"} for i in range(2)]
    write_csv(src / "metadata.csv", rows)
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, shuffle=False))
    index = _index(out)
    assert index["classes"] == [] and "label" not in index["features"]
    assert [r["text"] for r in iter_examples(out)] == ["caption 0", "caption 1"]
    assert verify(out).ok


@pytest.mark.heavy
def test_a_version_1_output_is_still_read(tmp_path: Path):
    """An output written by shardpack before the schema (index version 1) reads as before."""
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 2})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, index_files=True))
    index = _index(out)
    v1 = {name: feature["dtype"] for name, feature in index["features"].items()}
    (out / "index.json").write_text(json.dumps({**index, "version": 1, "features": v1}))
    records = list(iter_examples(out))
    assert sorted(r["label"] for r in records) == [0, 0, 1, 1]
    assert isinstance(records[0]["key"], str) and verify(out).ok
    assert read_record(out, "train", 0)["key"] == records[0]["key"]
    heavy_import("tensorflow")
    keys = [r["key"].numpy().decode() for r in tf_dataset(out, shuffle=False, decode=False)]
    assert keys == [r["key"] for r in records]


def test_a_file_that_is_no_manifest_is_refused(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SourceError, match="is a file"):
        pack(tmp_path / "notes.txt", tmp_path / "out")


def test_a_csv_label_column_of_numbers_made_names_by_one_cell_warns(tmp_path: Path):
    """In CSV one label that is not an integer makes every label a class name (JSON's grammar
    types a cell, as in JSONL): the run says so, naming the cell, where most labels are numbers."""
    src = make_tree(tmp_path / "src", {"a": 4})
    labels = ["1", "2", "1", "x"]  # three rows of integers, two distinct
    rows = [{"path": f"a/img_00{i}.jpg", "label": label} for i, label in enumerate(labels)]
    pack(write_csv(src / "numbers.csv", rows), tmp_path / "out", PackOptions(workers=1))
    index = _index(tmp_path / "out")
    assert index["classes"] == ["1", "2", "x"]
    assert index["warnings"] == [
        "numbers.csv: its label column reads as class names, as 'x' is not an integer: its 2 "
        "distinct integer labels are names too (sorted as text); if they are class numbers, fix "
        "the other labels"
    ]
    # A long label is shown cut short; with --classes the names are not sorted but looked up.
    rows[3]["label"] = "y" * 100_000
    pack(write_csv(src / "long.csv", rows), tmp_path / "out3",
         PackOptions(workers=1, classes=("1", "2", "y" * 100_000)))  # fmt: skip
    (warning,) = _index(tmp_path / "out3")["warnings"]
    assert warning == (
        f"long.csv: its label column reads as class names, as '{'y' * 36}... is not an integer: "
        "its 2 distinct integer labels are names too (each looked up by name in --classes); if "
        "they are class numbers, fix the other labels"
    )
    rows[1]["label"] = "cat"  # names, one of which is a number: as meant
    pack(write_csv(src / "names.csv", rows), tmp_path / "out2", PackOptions(workers=1))
    assert _index(tmp_path / "out2")["warnings"] == []


def test_a_class_named_as_pandas_writes_a_missing_value_is_named(tmp_path: Path):
    """A label column made text by astype(str) holds 'nan' where a row had none: its images
    were packed as one class 'nan' without a word (pandas and datasets read it as missing)."""
    src = make_tree(tmp_path / "src", {"a": 4})
    rows = [{"path": f"a/img_00{i}.jpg", "label": label}
            for i, label in enumerate(["cat", "nan", "dog", "nan"])]  # fmt: skip
    dataset = scan(write_csv(src / "labels.csv", rows))
    assert dataset.classes == ("cat", "dog", "nan")
    assert dataset.warnings == (
        "class 'nan' (2 images) is named as pandas writes a missing value: if those images "
        "have no label, leave their label empty (a row without one is skipped, named)",
    )
    rows[1]["label"] = rows[3]["label"] = ""  # left empty: two bad rows, named
    dataset = scan(write_csv(src / "labels.csv", rows))
    assert dataset.classes == ("cat", "dog") and len(dataset.skipped) == 2
    assert dataset.warnings == ()


def test_a_mask_column_of_file_paths_is_text_not_an_instance_map(tmp_path: Path):
    """path,mask (a segmentation list: each image's mask file) ended pack in a worker's
    traceback (TypeError: startswith first arg must be str ..., not bytes): a text feature named
    mask was taken for an instance-id PNG and decoded."""
    src = make_tree(tmp_path / "src", {"a": 2})
    rows = [{"path": f"a/img_00{i}.jpg", "mask": f"masks/{i}.png"} for i in range(2)]
    result = pack(write_csv(src / "seg.csv", rows), tmp_path / "out", PackOptions(workers=1))
    assert result.num_records == 2 and result.num_skipped == 0
    assert sorted(r["mask"] for r in iter_examples(tmp_path / "out")) == [
        "masks/0.png", "masks/1.png",
    ]  # fmt: skip
    assert verify(tmp_path / "out", decode=True).ok


def test_a_label_name_with_a_line_break_is_refused_as_a_folder_s_is(tmp_path: Path):
    """Class names are written one a line (TFDS's label.labels.txt): a manifest label holding a
    line break shifted every class after it there, and TFDS read the wrong names."""
    src = make_tree(tmp_path / "src", {"a": 2})
    rows = [{"path": "a/img_000.jpg", "label": "a"},
            {"path": "a/img_001.jpg", "label": "b\x1b]0;t\x07\nX"}]  # fmt: skip
    table = write_jsonl(src / "t.jsonl", rows)
    with pytest.raises(SourceError) as caught:
        pack(table, tmp_path / "out", PackOptions(workers=1))
    said = str(caught.value)
    assert said.startswith(f"{table}, column 'label': the class name 'b\\x1b]0;t\\x07\\nX' holds")
    assert "\n" not in said and not (tmp_path / "out").exists()


# ---- Hugging Face ImageFolder: splits from folders, as `datasets` takes them ----------------

READ_IMAGEFOLDER = """
import json, os, sys
os.environ["HF_DATASETS_OFFLINE"] = "1"
import datasets
datasets.disable_progress_bars()
data = datasets.load_dataset("imagefolder", data_dir=sys.argv[1], cache_dir=sys.argv[2])
splits = {}
for split, rows in data.items():
    label = rows.features["label"]
    names = label.names if isinstance(label, datasets.ClassLabel) else None
    splits[split] = sorted([os.path.basename(row["image"].filename),
                            names[row["label"]] if names else row["label"]] for row in rows)
print(json.dumps(splits))
"""


def _by_split(out: Path) -> dict[str, list[list[str]]]:
    """Each split's (file name, class name) pairs, read back from OUT."""
    classes = _index(out)["classes"]
    splits = {}
    for split in _index(out)["splits"]:
        splits[split] = sorted([os.path.basename(r["key"]), classes[r["label"]]]
                               for r in iter_examples(out, split))  # fmt: skip
    return splits


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_split_folders_each_with_a_metadata_file_pack_as_datasets_reads_them(tmp_path, suffix):
    needs("datasets")
    write = {"jsonl": write_jsonl, "csv": write_csv, "parquet": write_parquet}[suffix]
    src = tmp_path / "hf"
    rows = {
        "train": [("a.png", "cat"), ("b.png", "dog"), ("c.png", "cat")],
        "test": [("a.png", "dog")],
    }
    for split, pairs in rows.items():
        make_tree(src / split, {"x": len(pairs)}, ".png")
        for i, (name, _) in enumerate(pairs):
            (src / split / "x" / f"img_{i:03d}.png").rename(src / split / name)
        (src / split / "x").rmdir()
        write(src / split / f"metadata.{suffix}",
              [{"file_name": name, "label": label} for name, label in pairs])  # fmt: skip
    pack(src, tmp_path / "out", PackOptions(workers=1))
    ours = _by_split(tmp_path / "out")
    assert ours == {"train": [["a.png", "cat"], ["b.png", "dog"], ["c.png", "cat"]],
                    "test": [["a.png", "dog"]]}  # fmt: skip
    assert run_json(READ_IMAGEFOLDER, str(src), str(tmp_path / "cache")) == ours


def test_one_metadata_file_naming_split_folders_takes_those_splits_and_its_labels(tmp_path):
    needs("datasets")
    src = make_tree(tmp_path / "hf" / "train", {"cat": 2, "dog": 1}, ".png").parent
    make_tree(src / "test", {"cat": 1}, ".png", seed=5)
    files = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.png"))
    # the metadata's labels are not the folders' names: it calls every cat image a dog
    write_jsonl(src / "metadata.jsonl", [{"file_name": f, "label": "dog"} for f in files])
    pack(src, tmp_path / "out", PackOptions(workers=1))
    ours = _by_split(tmp_path / "out")
    theirs = run_json(READ_IMAGEFOLDER, str(src), str(tmp_path / "cache"))
    # the same splits and counts as `datasets`; the labels the metadata's, not the folders'
    assert {s: len(r) for s, r in ours.items()} == {s: len(r) for s, r in theirs.items()}
    assert {s: [n for n, _ in r] for s, r in ours.items()} == {
        s: [n for n, _ in r] for s, r in theirs.items()
    }
    assert {label for rows in ours.values() for _, label in rows} == {"dog"}
    assert {label for rows in theirs.values() for _, label in rows} == {"cat", "dog"}


def test_split_folders_with_and_without_metadata_or_rows_in_and_out_of_them_are_refused(tmp_path):
    src = make_tree(tmp_path / "a" / "train", {"cat": 1}, ".png").parent
    make_tree(src / "test", {"cat": 1}, ".png")
    write_jsonl(src / "train" / "metadata.jsonl",
                [{"file_name": "cat/img_000.png", "label": "cat"}])  # fmt: skip
    said = "its split folder 'train' holds a metadata file and 'test' none"
    with pytest.raises(SourceError, match=said):
        pack(src, tmp_path / "out", PackOptions(workers=1))
    (src / "train" / "metadata.jsonl").unlink()
    write_jsonl(src / "metadata.jsonl", [{"file_name": "train/cat/img_000.png", "label": "cat"},
                                         {"file_name": "cat.png", "label": "cat"}])  # fmt: skip
    with pytest.raises(SourceError, match=r"metadata.jsonl line 1: train/cat/img_000.png\) and "
                       r"outside them \(metadata.jsonl line 2: cat.png\)"):  # fmt: skip
        pack(src, tmp_path / "out", PackOptions(workers=1))


def test_box_columns_declare_other_columns_and_formats_of_boxes(tmp_path: Path):
    """The issue's photo (400x200: red x 300-380, green in the middle, blue past the top) with
    its boxes in a column of another name, as normalised [x, y, width, height]: declared, they
    are taken to yxyx and moved with the centre crop; not declared, they stay as today."""
    from tests.packing.test_boxes import BOXES, _manifest, _photo, _png

    xywh = [[x0 / 400, y0 / 200, (x1 - x0) / 400, (y1 - y0) / 200]
            for y0, x0, y1, x1 in BOXES.values()]  # fmt: skip
    src = _manifest(tmp_path / "src", [("a.png", _png(_photo()), {"det": xywh})])
    crop = {"resize": (200, 200), "resize_mode": "center-crop", "workers": 1}
    result = pack(src, tmp_path / "out", PackOptions(box_columns=("det:xywh",), **crop))
    (record,) = iter_examples(tmp_path / "out")
    # scaled to 400x200 as it is, x 100-300 kept: red is gone, green moved left, blue clipped
    green, blue = [60, 50, 140, 150], [0, 0, 30, 20]
    np.testing.assert_allclose(record["det"], np.array([green, blue]) / 200, atol=1e-6)
    assert result.to_json()["boxes_dropped"] == {"cropped away": 1}
    pack(src, tmp_path / "plain", PackOptions(**crop))
    (plain,) = iter_examples(tmp_path / "plain")
    np.testing.assert_allclose(plain["det"], xywh, atol=1e-6)  # not declared: as given


def test_a_parquet_pack_turns_upright_an_exif_turned_image_of_declared_boxes(tmp_path: Path):
    """Boxes of a --box-columns column move with an EXIF-turned image stored upright in Parquet
    (datasets shows it upright), and pack counts it as it counts built-in boxes' (it said 0)."""
    from tests.packing.test_boxes import _manifest, _photo
    from tests.sources.test_coco import _jpeg_turned

    turned = _jpeg_turned(_photo(), 6)  # shown 400x200, stored 200x400
    src = _manifest(tmp_path / "src", [("a.jpg", turned, {"det": [[0.1, 0.2, 0.3, 0.4]]})])
    options = PackOptions(box_columns=("det:xywh",), format="parquet", workers=1)
    result = pack(src, tmp_path / "out", options)
    (record,) = iter_examples(tmp_path / "out")
    assert (record["height"], record["width"]) == (200, 400)  # upright, as datasets shows it
    assert result.to_json()["turned_upright"] == 1


# One box, ymin 0.2, xmin 0.1, ymax 0.6, xmax 0.4, in each format.
FORMATS = {"yxyx": [0.2, 0.1, 0.6, 0.4], "xyxy": [0.1, 0.2, 0.4, 0.6],
           "xywh": [0.1, 0.2, 0.3, 0.4], "cxcywh": [0.25, 0.4, 0.3, 0.4]}  # fmt: skip


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_box_format_is_stored_as_yxyx(tmp_path: Path, fmt: str):
    for name in ("a.png", "b.png"):
        (tmp_path / name).write_bytes(b"")  # scanned, not read
    rows = [{"path": "a.png", "box": FORMATS[fmt]}, {"path": "b.png", "box": [0.1, 0.2, 0.3]}]
    src = write_jsonl(tmp_path / "m.jsonl", rows)
    dataset = scan(src, PackOptions(box_columns=(f"box:{fmt}",)))
    (item,) = dataset.splits["train"]
    np.testing.assert_allclose(item.fields["box"], [[0.2, 0.1, 0.6, 0.4]], atol=1e-6)
    assert dataset.schema["box"].shape == (-1, 4)
    assert "column 'box' holds 3 numbers, not boxes of 4" in dataset.skipped[0][1]


def test_boxes_taken_by_their_name_alone_are_said_and_a_declared_column_is_not(tmp_path: Path):
    """A column named bbox is moved as [ymin, xmin, ymax, xmax] normalised: a warning says so,
    and how to declare another order; declared with --box-columns, nothing is assumed."""
    (tmp_path / "a.png").write_bytes(b"")
    src = write_jsonl(tmp_path / "m.jsonl", [{"path": "a.png", "bbox": [[0.1, 0.2, 0.3, 0.4]],
                                              "tags": [[1, 2, 3, 4]]}])  # fmt: skip
    (warning,) = scan(src, PackOptions()).warnings
    assert warning.startswith("column 'bbox' is taken as boxes [ymin, xmin, ymax, xmax]")
    assert "--box-columns bbox:xyxy" in warning
    assert scan(src, PackOptions(box_columns=("bbox:yxyx",))).warnings == ()


def test_box_columns_that_are_not_boxes_are_refused_in_one_line(tmp_path: Path):
    (tmp_path / "a.png").write_bytes(b"")
    src = write_jsonl(tmp_path / "m.jsonl", [{"path": "a.png", "px": [[1, 2, 30, 40]]}])
    with pytest.raises(SourceError, match=r"'det', which is none of its columns \('px'\)"):
        scan(src, PackOptions(box_columns=("det",)))
    with pytest.raises(SourceError, match=r"column 'px' holds int64 \[-1, 4\] \(pixels\?"):
        scan(src, PackOptions(box_columns=("px",)))
    with pytest.raises(OptionError, match="boxes in pixels are not read yet") as caught:
        scan(src, PackOptions(box_columns=("px:xywh-pixels",)))  # the manifest's check
    assert caught.value.options == ("box_columns",)
    # one column in two formats: the last was taken, unsaid; in one format twice it is one
    with pytest.raises(OptionError, match=r"names column 'px' twice, as xywh and xyxy; name it"):
        scan(src, PackOptions(box_columns=("px:xywh", "px:xyxy")))
    with pytest.raises(SourceError, match=r"column 'px' holds int64"):
        scan(src, PackOptions(box_columns=("px", "px:yxyx")))
    (tmp_path / "tree" / "cat").mkdir(parents=True)
    (tmp_path / "tree" / "cat" / "a.png").write_bytes(b"")
    with pytest.raises(SourceError, match="box_columns= is for a manifest table"):
        scan(tmp_path / "tree", PackOptions(box_columns=("bbox",)))


@pytest.mark.parametrize(
    ("given", "python", "cli"),
    [
        ({"retries": -1}, "retries= must be 0 or more, got: -1", "--retries must be 0"),
        ({"url_threads": 0}, "url_threads= must be a positive integer, got: 0", "--url-threads"),
        ({"per_host": 0}, "per_host= must be a positive integer, got: 0", "--per-host must"),
        ({"url_deadline": 0}, "url_deadline= must be a number of seconds above 0, at most 86400",
         "--url-deadline must"),
        ({"url_deadline": float("nan")}, "got: nan", "--url-deadline must"),
        # an HTTP header: past ASCII or with a line break, every URL failed as 'bad answer'
        ({"user_agent": "bot \u2603"}, "user_agent= must be printable ASCII", "--user-agent must"),
        ({"user_agent": "bot\r\nX-Forwarded-For: 10.0.0.1"}, "got: 'bot\\r\\nX-Forwarded-For",
         "--user-agent must"),
        ({"box_columns": ("det:wxyz",)}, "box_columns= entries are NAME or NAME:FORMAT",
         "--box-columns entries are"),
    ],
)  # fmt: skip
def test_the_manifest_checks_the_values_of_its_own_options(tmp_path: Path, given, python, cli):
    """Its own options' values are the manifest source's to refuse (Source.check_options), by
    name, when a scan finds a manifest; PackOptions checks only those every source reads."""
    src = write_jsonl(tmp_path / "m.jsonl", [{"path": "a.png", "det": [[0.1, 0.2, 0.3, 0.4]]}])
    options = PackOptions(**given)
    with pytest.raises(OptionError) as caught:
        scan(src, options)
    assert caught.value.options == tuple(given)
    assert python in str(caught.value) and cli in as_flags(caught.value)


def test_a_url_list_s_items_hold_little_beyond_their_strings_and_pickle_whole(tmp_path: Path):
    """A URL list of N rows holds N items in the packing process: each row's fields are its
    values beside one shared name table (not a dict a row), and the rows read are freed as
    the items are made (a dict a row held ~310 bytes a row beyond the strings; now ~190)."""
    rows = [{"url": f"https://img{i % 100}.example.com/p/{i:07d}.jpg", "caption": f"photo {i}"}
            for i in range(1000)]  # fmt: skip
    manifest = write_jsonl(tmp_path / "urls.jsonl", rows)
    options = PackOptions(path_column="url")
    strings = sum(sys.getsizeof(r["url"]) + sys.getsizeof(r["caption"]) for r in rows)
    scan(str(manifest), options)  # imports and caches first: what the scan holds is the rest
    tracemalloc.start()
    try:
        dataset = scan(str(manifest), options)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert (held - strings) / len(rows) < 250
    items = dataset.splits["train"]
    assert [(i.path, dict(i.fields)) for i in items] == [(r["url"], {"caption": r["caption"]})
                                                         for r in rows]  # fmt: skip
    back = pickle.loads(pickle.dumps(items, 5))
    assert back == items and back[7].fields == {"caption": "photo 7"}
    assert len(back[7].fields) == 1 and "caption" in back[7].fields and "url" not in back[7].fields


def test_a_url_spaced_in_its_cell_is_the_url_and_a_spaced_file_name_stays(tmp_path: Path):
    """A URL cell written ', https://...' (or with a sheet's trailing space) was read as a
    local path under SRC's folder, every such image 'missing'; a file name keeps its spaces."""
    (tmp_path / " spaced.jpg").write_bytes(b"")
    rows = [{"url": " https://img.example.com/a.jpg"}, {"url": "http://img.example.com/b.jpg\t"}]
    manifest = write_jsonl(tmp_path / "urls.jsonl", rows)
    items = scan(str(manifest), PackOptions(path_column="url")).splits["train"]
    assert [i.path for i in items] == ["https://img.example.com/a.jpg",
                                       "http://img.example.com/b.jpg"]  # fmt: skip
    files = write_jsonl(tmp_path / "files.jsonl", [{"url": " spaced.jpg"}])
    assert [i.path for i in scan(str(files), PackOptions(path_column="url")).splits["train"]] == [
        " spaced.jpg"
    ]


def test_a_url_list_reads_http_urls_only_and_a_table_of_paths_reads_its_own(tmp_path: Path):
    """A URL list's row naming a file (file://, an absolute or relative path) or an object
    store was read from there: a stranger's list reached this machine's files. Each is a bad
    row now, naming its line, and nothing of it is read; a table of paths reads them as ever."""
    pets = make_tree(tmp_path / "pets", {"cat": 2})
    one, two = sorted(pets.rglob("*.jpg"))
    local = [f"file://{one}", str(two), "cat/" + one.name, "memory://bucket/a.jpg",
             "s3://bucket/b.jpg"]  # fmt: skip
    rows = [{"url": "https://img.example.com/a.jpg"}, *({"url": path} for path in local)]
    listed = scan(str(write_csv(pets / "urls.csv", rows)), PackOptions(path_column="url"))
    assert [item.path for item in listed.splits["train"]] == ["https://img.example.com/a.jpg"]
    reasons = [reason for _, reason in listed.skipped]
    assert reasons == [f"urls.csv line {line}: image {path}: {NOT_WEB}"
                       for line, path in enumerate(local, 3)]  # fmt: skip
    own = scan(str(write_csv(pets / "own.csv", [{"url": p} for p in local[:3]])),
               PackOptions(path_column="url"))  # fmt: skip
    assert len(own.splits["train"]) == 3 and not own.skipped


def test_a_manifest_away_from_its_images_is_told_to_pass_root(tmp_path):
    """A labels.csv copied out of the folder its relative paths are under: every row's image
    missing, and the error ended on the first missing file, with no word of --root."""
    pets = make_tree(tmp_path / "pets", {"cat": 2, "dog": 1})
    rows = [{"path": str(p.relative_to(pets)), "label": p.parent.name}
            for p in sorted(pets.rglob("*.jpg"))]  # fmt: skip
    (tmp_path / "elsewhere").mkdir()
    moved = write_csv(tmp_path / "elsewhere" / "labels.csv", rows)
    with pytest.raises(SourceError) as caught:
        scan(moved)
    said = as_flags(caught.value)
    assert said.startswith(f"{moved}: no row names a usable image; the first: cat/img_000.jpg")
    assert said.endswith(f"; its paths were read under {moved.parent}: if they are relative "
                         "to another folder, pass --root with that folder")  # fmt: skip
    assert scan(moved, PackOptions(root=str(pets))).classes == ("cat", "dog")
    with pytest.raises(SourceError) as caught:  # some rows bad, not every one missing: no hint
        scan(write_csv(tmp_path / "elsewhere" / "mixed.csv", [*rows, {"path": "", "label": "x"}]))
    assert "--root" not in as_flags(caught.value)
    windows = [{**row, "path": row["path"].replace("/", "\\")} for row in rows]  # cat\img_000.jpg
    with pytest.raises(SourceError) as caught:  # beside its images, written on Windows
        scan(write_csv(pets / "windows.csv", windows))
    assert as_flags(caught.value).endswith("; its paths are written with '\\' between folders, "
                                           "as on Windows: write them with '/'")  # fmt: skip


def test_a_table_of_ids_and_breeds_packs_with_its_columns_named(tmp_path):
    """Kaggle's layout: train.csv of `id,breed` beside train/<id>.jpg. Packed unlabeled (a
    text feature `breed`) with no word, and every row missing with no word of how to name its
    files; now the label column is named (--label-column) and the files (--path-suffix,
    --root), and the error and the warning say which."""
    photos = make_tree(tmp_path / "pets" / "train", {"a": 2, "b": 2})
    rows = []
    for i, path in enumerate(sorted(photos.rglob("*.jpg"))):
        path.rename(photos / f"id{i}.jpg")  # the ids' files, in one folder
        rows.append({"id": f"id{i}", "breed": ("collie", "pug")[i % 2]})
    table = write_csv(tmp_path / "pets" / "train.csv", rows)
    with pytest.raises(SourceError) as caught:
        scan(table, PackOptions(path_column="id"))
    assert as_flags(caught.value).endswith(
        "; id0 is no file there, but train/id0.jpg is: pass --root "
        f"{tmp_path / 'pets' / 'train'} --path-suffix .jpg"
    )
    with pytest.raises(SourceError) as caught:  # its folder given, not the extension
        scan(table, PackOptions(path_column="id", root=str(photos)))
    assert as_flags(caught.value).endswith("; id0 is no file there, but id0.jpg is: pass "
                                           "--path-suffix .jpg")  # fmt: skip
    named = PackOptions(path_column="id", root=str(photos), path_suffix=".jpg")
    unlabeled = scan(table, named)
    assert not unlabeled.classes and "breed" in unlabeled.schema
    assert any("pass --label-column breed" in w for w in unlabeled.warnings)
    out = tmp_path / "out"
    summary = pack(table, out, PackOptions(**{**named.__dict__, "label_column": "breed"}))
    assert summary.index.classes == ("collie", "pug")
    got = {r["key"]: r["label"] for r in iter_examples(out, "train")}
    assert got == {f"id{i}.jpg": i % 2 for i in range(4)}
    # a grow takes the dataset's own: the same columns named; its --root given again (a grow
    # reads no folder OUT's files name)
    write_csv(table, [*rows, {"id": "id0", "breed": "pug"}][1:])  # id0 relabelled
    with pytest.raises(OutputError, match=r"this run's names none; .* pass root="):
        pack(table, out, PackOptions(grow="update", workers=1))
    grown = pack(table, out, PackOptions(grow="update", workers=1, root=str(photos)))
    assert grown.grow["changed"] == 1
    assert {r["key"]: r["label"] for r in iter_examples(out, "train")}["id0.jpg"] == 1
    with pytest.raises(OutputError, match=r"label_column='id' \(the dataset's: 'breed'\)"):
        pack(table, out, PackOptions(grow="append", label_column="id", root=str(photos)))


def test_a_list_without_a_header_line_says_what_to_name_its_columns(tmp_path):
    """`images/1.jpg<TAB>cat` lines with no header (Caffe's lists, a script's): the first row
    was taken for the column names, and the error asked for `--path-column a/img_000.jpg`,
    which would have skipped that image. Now it says the line is a row and names the columns
    to write above it, with which every row packs."""
    photos = make_tree(tmp_path / "photos", {"a": 2, "b": 1})
    lines = [f"{p.relative_to(photos).as_posix()}\t{p.parent.name}" for p in
             sorted(photos.rglob("*.jpg"))]  # fmt: skip
    for kind, sep in ((".tsv", "\t"), (".csv", ",")):
        table = photos / f"list{kind}"
        table.write_text("".join(line.replace("\t", sep) + "\n" for line in lines))
        with pytest.raises(SourceError) as caught:
            scan(table)
        assert str(caught.value) == (f"{table}: its first line holds 'a/img_000.jpg', a row of "
                                     "the list, not the names of its columns; add a first line "
                                     f"that names them ({'path' + sep + 'label'!r})")  # fmt: skip
        table.write_text(f"path{sep}label\n" + table.read_text())
        named = scan(table)
        assert named.classes == ("a", "b") and len(named.splits["train"]) == 3


def test_a_column_named_in_another_case_is_the_one_the_error_names(tmp_path):
    """LAION's lists name their columns `URL` and `TEXT`; `--path-column url` (img2dataset's
    `--url_col url`, the docs' example) was told only to pass the column of image paths as
    --path-column: the error now names `URL`, as a typo's names the column a typo away."""
    table = write_csv(tmp_path / "laion.csv", [{"URL": "http://x/a.jpg", "TEXT": "a cat"}])
    for option, value, said in [
        ("path_column", "url", "names each image as --path-column URL"),
        ("label_column", "text", "labels each image as --label-column TEXT"),
    ]:
        with pytest.raises(SourceError) as caught:
            scan(table, PackOptions(**{option: value}))
        assert as_flags(caught.value).endswith(f"(columns: URL, TEXT); pass the column that {said}")


def test_a_label_column_named_is_the_label_and_is_checked(tmp_path):
    """--label-column's column holds the labels (its messages name it); one missing is
    refused with the name a typo away, and a `label` column beside it or the path column named
    as labels is refused."""
    table = write_csv(tmp_path / "t.csv", [{"path": "a.jpg", "kind": ""}])
    with pytest.raises(SourceError) as caught:
        scan(table, PackOptions(label_column="knd"))
    assert as_flags(caught.value).endswith("(columns: path, kind); pass the column that labels "
                                           "each image as --label-column kind")  # fmt: skip
    beside = write_csv(tmp_path / "b.csv", [{"path": "a.jpg", "kind": "x", "label": "y"}])
    one_line_error(
        _cli("pack", str(beside), str(tmp_path / "o"), "--label-column", "kind"),
        "has a column 'label' beside 'kind', the labels by --label-column kind",
    )
    with pytest.raises(OptionError, match="names the column of image paths"):
        scan(table, PackOptions(label_column="path", path_column="path"))
    make_tree(tmp_path / "img", {"x": 1})
    rows = [{"path": "x/img_000.jpg", "kind": ""}]
    with pytest.raises(SourceError, match="no label in column 'kind'"):
        scan(
            write_csv(tmp_path / "img" / "t.csv", rows),
            PackOptions(label_column="kind", on_error="fail"),
        )


def test_a_manifest_packed_from_a_disk_whose_pages_were_dropped_packs_as_it_does_warm(tmp_path):
    """Its images read ahead of the workers (ReadAhead: tests/storage/test_readahead.py), a
    pack of a manifest's relative and absolute paths, cold, writes the very shards of a warm
    pack."""
    src = make_tree(tmp_path / "src", {"cat": 60, "dog": 60})
    paths = sorted(src.rglob("*.jpg"))
    rows = [{"path": str(p) if i % 2 else str(p.relative_to(src)), "label": p.parent.name}
            for i, p in enumerate(paths)]  # fmt: skip
    manifest = write_csv(src / "list.csv", rows)
    options = PackOptions(workers=2, shards=3)
    pack(manifest, tmp_path / "warm", options)
    evict([str(p) for p in paths])
    pack(manifest, tmp_path / "cold", options)
    assert shard_files(tmp_path / "cold") == shard_files(tmp_path / "warm")
    assert len(shard_files(tmp_path / "cold")) == 3
