"""TFDS prepared directories that lie: dataset_info.json's shard counts against the files there, a
split listed twice, features.json typing `label` as a Tensor or naming a feature `height`, a
label.labels.txt of more classes than a dataset may have. Each starts from a directory TFDS
reads (shardpack's own TFRecord output, test_tfds.py) edited as a hostile one would be, and ends
in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import shardpack
from shardpack.options import PackOptions
from shardpack.sources import scan
from tests.helpers import one_line_error, run_cli
from tests.hostile.test_hf import refused


@pytest.fixture
def prepared(shared_pack, tmp_path) -> Path:
    """A TFDS prepared directory (one split of 9 records in 3 shards), a copy to edit."""
    import shutil

    return Path(shutil.copytree(shared_pack({"a": 5, "b": 4}, shards=3), tmp_path / "tfds"))


def _edit(folder: Path, name: str, change) -> None:
    doc = json.loads((folder / name).read_text())
    change(doc)
    (folder / name).write_text(json.dumps(doc))


def _refused(folder: Path, *words: str) -> str:
    return refused(folder, *words, source="tfds")


# ---- 12: dataset_info.json against the files found -------------------------------------------


def test_shard_counts_that_name_one_file_many_times_are_refused(prepared):
    """A template without the shard's number names every shard alike: 3 shards packed one file
    three times over under the same keys, 1e9 of them never ended."""
    shards = sorted(prepared.glob("*.tfrecord-*"))
    for extra in shards[1:]:
        extra.unlink()
    shards[0].rename(prepared / "src-train.tfrecord")

    def one_name(count: int):
        def change(info: dict) -> None:
            (split,) = info["splits"]
            split.pop("shardLengths", None)
            split.update(numShards=str(count), filepathTemplate="{DATASET}-{SPLIT}.{FILEFORMAT}")

        return change

    for count in (3, 10**9):
        _edit(prepared, "dataset_info.json", one_name(count))
        _refused(prepared, "dataset_info.json: split 'train' has", "shards, but its file name "
                 "template", "names them all 'src-train.tfrecord'")  # fmt: skip
    _edit(prepared, "dataset_info.json", one_name(1))
    assert len(scan(prepared, PackOptions(source="tfds")).splits["train"]) == 3


def test_shard_lengths_that_disagree_with_num_shards_are_refused(prepared):
    _edit(prepared, "dataset_info.json", lambda info: info["splits"][0].update(numShards="2"))
    _refused(prepared, "dataset_info.json: split 'train' has numShards 2 but 3 shardLengths")


def test_a_split_listed_twice_is_refused(prepared):
    def twice(info: dict) -> None:
        info["splits"].append(dict(info["splits"][0]))  # its second entry replaced the first

    _edit(prepared, "dataset_info.json", twice)
    _refused(prepared, "dataset_info.json: lists split 'train' twice")


# ---- 18: features.json naming what shardpack cannot carry --------------------------------------


def test_a_tensor_label_or_a_feature_named_height_is_one_line(prepared, tmp_path):
    """Each record holds `label` and `height` as int64s: typed as Tensors they read, and then
    did not pack (KeyError: 'label'; a ValueError for `height`)."""
    tensor = {"pythonClassName": "tensorflow_datasets.core.features.tensor_feature.Tensor",
              "tensor": {"shape": {}, "dtype": "int64", "encoding": "none"}}  # fmt: skip

    def label_tensor(doc: dict) -> None:
        doc["featuresDict"]["features"]["label"] = tensor

    _edit(prepared, "features.json", label_tensor)
    done = run_cli("pack", str(prepared), str(tmp_path / "out1"), "--source", "tfds",
                   "--workers", "1", "--no-progress")  # fmt: skip
    one_line_error(done, "features.json: feature 'label' is a TFDS Tensor", "ClassLabel")

    def height_tensor(doc: dict) -> None:
        features = doc["featuresDict"]["features"]
        features["label"] = json.loads((prepared.parent / "label.json").read_text())
        features["height"] = tensor

    (prepared.parent / "label.json").write_text(json.dumps(_label_spec()))
    _edit(prepared, "features.json", height_tensor)
    done = run_cli("pack", str(prepared), str(tmp_path / "out2"), "--source", "tfds",
                   "--workers", "1", "--no-progress")  # fmt: skip
    one_line_error(done, "features.json: feature 'height' has the name of a built-in feature")


def _label_spec() -> dict:
    return {"pythonClassName": "tensorflow_datasets.core.features.class_label_feature.ClassLabel",
            "classLabel": {"numClasses": "2"}}  # fmt: skip


# ---- 19: label.labels.txt past the class limit ------------------------------------------------


def test_a_labels_file_past_the_class_limit_is_refused(prepared, monkeypatch):
    """1.5M names passed the 1,000,000-class limit (a 68 MB index for 4 images); the limit is
    lowered here to keep the file small, as the count is what is checked."""
    from shardpack.sources import classlist

    monkeypatch.setattr(classlist, "MAX_CLASSES", 10)
    (prepared / "label.labels.txt").write_text("".join(f"c{i}\n" for i in range(11)))
    _refused(prepared, "label.labels.txt: its lines make 11 classes, over the 10")


def test_the_prepared_directory_itself_packs(prepared, tmp_path):
    """The copy these tests edit packs as it is: each refusal above is the edit's."""
    result = shardpack.pack(prepared, tmp_path / "out", PackOptions(workers=1, source="tfds"))
    assert result.num_records == 9


# ---- round 8: label.labels.txt read as TFDS reads it -------------------------------------------


@pytest.mark.parametrize("text, words", [
    # TFDS splits at "\n" alone: 'a\u2028x' is one name (builder_from_directory's names), which
    # splitlines() made two, packed as classes a, x, b, c: every label from 1 on named the one
    # before it
    ("a\u2028x\nb\n", "the class name 'a\\u2028x' holds a control character or a line break"),
    ("a\x1cx\nb\n", "the class name 'a\\x1cx' holds a control character"),
    # one name of two classes: packed as classes a, b, a (datasets' ClassLabel refuses them)
    ("a\nb\na\n", "two classes are named 'a'; give each class a name of its own"),
    # bytes that are not UTF-8: packed as 'b\ufffd' (TFDS falls back to numbers)
    (b"a\nb\xff\n", "label.labels.txt: is not UTF-8 text"),
])  # fmt: skip
def test_a_labels_file_is_read_a_line_a_name_as_tfds_reads_it(prepared, text, words):
    labels = prepared / "label.labels.txt"
    labels.write_bytes(text if isinstance(text, bytes) else text.encode())
    _refused(prepared, "label.labels.txt: ", words)
    labels.write_bytes(b"a\r\nb\r\n")  # Windows line ends: two names, as TFDS reads them
    assert scan(prepared, PackOptions(source="tfds")).classes == ("a", "b")
