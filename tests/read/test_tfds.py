"""TensorFlow Datasets loads what pack wrote, through the real tensorflow-datasets package."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.storage import storage_at
from tests import helpers
from tests.helpers import make_cifar100_python, make_tree

pytestmark = pytest.mark.heavy
tfds = helpers.lazy_import("tensorflow_datasets")


@pytest.mark.parametrize("encode", ["keep", "jpeg", "png"])
def test_builder_from_directory_loads_image_encodings(tmp_path: Path, encode: str):
    src = make_tree(tmp_path / "src", {"cat": 4, "dog": 3})
    out = tmp_path / "out"
    pack(src, out, PackOptions(encode=encode, shards=2, workers=1))
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.splits["train"].num_examples == 7
    assert builder.info.features["label"].names == ["cat", "dog"]
    records = list(tfds.as_numpy(builder.as_dataset(split="train")))
    assert len(records) == 7 and sorted(r["label"] for r in records) == [0, 0, 0, 0, 1, 1, 1]
    assert all(r["image"].shape == (24, 32, 3) and r["image"].dtype == np.uint8 for r in records)


def test_raw_records_come_as_bytes_with_their_shape(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"a": 2})
    out = tmp_path / "out"
    pack(src, out, PackOptions(encode="raw", workers=1))
    (record,) = list(tfds.as_numpy(tfds.builder_from_directory(str(out)).as_dataset("train")))[:1]
    pixels = np.frombuffer(record["image"], np.uint8)
    assert pixels.reshape(record["height"], record["width"], record["channels"]).shape == (
        24,
        32,
        3,
    )


def test_cifar100_coarse_labels_have_names(tmp_path: Path):
    out = tmp_path / "out"
    pack(make_cifar100_python(tmp_path / "c100"), out, PackOptions(workers=1))
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.features["coarse_label"].names[:2] == ["coarse0", "coarse1"]
    assert builder.info.splits["test"].num_examples == 10
    for record in tfds.as_numpy(builder.as_dataset(split="train").take(5)):
        assert record["coarse_label"] == record["label"] // 5


def test_gzip_shards_get_no_tfds_metadata_because_tfds_cannot_read_them(tmp_path: Path):
    from shardpack.packing.tfdsmeta import write_tfds_metadata

    src = make_tree(tmp_path / "src", {"a": 2, "b": 1})
    out = tmp_path / "out"
    result = pack(src, out, PackOptions(compression="gzip", workers=1))
    assert not (out / "dataset_info.json").exists() and not (out / "features.json").exists()
    assert result.to_json()["tfds_metadata"] is False
    # Why: written anyway, the metadata makes TFDS read GZIP bytes as plain TFRecords.
    write_tfds_metadata(storage_at(out), result.index, "tfrecord")
    builder = tfds.builder_from_directory(str(out))
    with pytest.raises(Exception, match=r"corrupted record|DataLoss|TFRecord"):
        list(builder.as_dataset(split="train"))


@pytest.mark.parametrize("container", ["tfrecord", "array_record"])
def test_a_split_left_with_no_records_leaves_the_others_readable(tmp_path: Path, container):
    src = tmp_path / "src"
    make_tree(src / "train", {"a": 2, "b": 1})
    (src / "test" / "a").mkdir(parents=True)
    (src / "test" / "a" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")  # skipped
    out = tmp_path / "out"
    pack(src, out, PackOptions(format=container, workers=1))
    builder = tfds.builder_from_directory(str(out))
    # TFDS refused the whole dataset: "Instruction [] corresponds to no data!" (TFRecord),
    # "Paths sequence can not be of 0 length" (ArrayRecord)
    if container == "tfrecord":
        assert {k: len(list(v)) for k, v in builder.as_dataset().items()} == {"train": 3}
    else:
        assert {k: len(v) for k, v in builder.as_data_source().items()} == {"train": 3}


def test_a_split_tfds_cannot_name_is_left_out_and_said_leaving_the_others_readable(tmp_path):
    """A split name may hold '.' (as datasets reads them); TFDS's may not. Before: listed in
    dataset_info.json, it made as_dataset() refuse every split ("Unrecognized split format:
    'test.v2'"), and pack said nothing."""
    src = tmp_path / "src"
    make_tree(src / "train", {"a": 2, "b": 1})
    make_tree(src / "test.v2", {"a": 1, "b": 1}, seed=10)
    out = tmp_path / "out"
    result = pack(src, out, PackOptions(split_names=("train", "test.v2"), workers=1))
    assert result.to_json()["warnings"] == [
        "the TFDS metadata leaves out 1 split ('test.v2'): TFDS reads no '.' in a split name; "
        "name it with '_' instead ('test_v2') for TFDS"
    ]
    builder = tfds.builder_from_directory(str(out))
    assert {k: len(list(v)) for k, v in builder.as_dataset().items()} == {"train": 3}
