"""Extra features end to end: fields of items -> Example bytes -> index -> every reader.

The items come from a class-folder scan given extra fields by hand (boxes, a caption, a score,
several labels per image), standing in for a manifest source; everything after the scan is
the real pipeline, and what it wrote is read back by real TensorFlow and TFDS.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from shardpack import packer
from shardpack.errors import OutputError, RecordError
from shardpack.inspection import describe
from shardpack.options import PackOptions
from shardpack.packer import pack
from shardpack.preview import make_preview
from shardpack.read import iter_examples, tf_dataset
from shardpack.schema import Feature, Schema
from shardpack.sources import scan
from shardpack.tfrecord import TFRecordWriter, encode_example
from shardpack.verifier import verify
from tests.helpers import make_tree, tf_records

EXTRA = {
    "boxes": Feature("float32", (-1, 4)),
    "caption": Feature("bytes", text=True),
    "score": Feature("float32"),
    "tags": Feature("int64", (-1,)),
}


def _fields(i: int, caption: str = "café") -> dict:
    return {
        "boxes": tuple((0.1 * k, 0.2, 0.5 + 0.1 * k, 0.75) for k in range(i % 3)),  # 0..2 boxes
        "caption": f"photo {i} {caption}",
        "score": i / 4,
        "tags": tuple(range(i % 4)),
    }


def _labels(i: int) -> tuple[int, ...]:
    return ((), (0,), (0, 1))[i % 3]


def _dataset(src: Path, caption: str = "café"):
    """The class-folder scan of src with every item given extra fields and several labels."""
    found = scan(src)
    items = tuple(
        dataclasses.replace(item, label=_labels(i), fields=_fields(i, caption))
        for i, item in enumerate(found.splits["train"])
    )
    schema = Schema.build(found.classes, EXTRA, multi_label=True)
    return dataclasses.replace(found, schema=schema, splits={"train": items})


def _pack(src: Path, out: Path, dataset, **options) -> None:
    with pytest.MonkeyPatch.context() as mp:  # the source is the stand-in; the rest is real
        mp.setattr(packer, "scan", lambda root, options: dataset)
        pack(src, out, PackOptions(workers=1, shards=2, shuffle=False, **options))


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("features")
    src = make_tree(tmp / "src", {"cat": 3, "dog": 3})
    _pack(src, tmp / "out", _dataset(src))
    return tmp / "out"


def test_resume_is_refused_when_a_field_value_changed(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    out = tmp_path / "out"
    _pack(src, out, _dataset(src))
    (out / "index.json").unlink()  # as if interrupted before the index
    with pytest.raises(OutputError, match="changed source"):
        _pack(src, out, _dataset(src, caption="cafe"), resume=True)
    _pack(src, out, _dataset(src), resume=True)  # the same fields resume


def _expected() -> dict[str, dict]:
    keys = [f"{c}/img_{n:03d}.jpg" for c in ("cat", "dog") for n in range(3)]
    return {key: {**_fields(i), "label": _labels(i)} for i, key in enumerate(keys)}


def test_index_declares_the_typed_schema(packed: Path):
    features = json.loads((packed / "index.json").read_text())["features"]
    assert features["boxes"] == {"dtype": "float32", "shape": [-1, 4]}
    assert features["caption"] == {"dtype": "bytes", "shape": [], "text": True}
    assert features["label"] == {"dtype": "int64", "shape": [-1], "classes": ["cat", "dog"]}


def test_iter_examples_gives_numpy_arrays_of_the_declared_dtype_and_shape(packed: Path):
    records = {r["key"]: r for r in iter_examples(packed)}
    assert set(records) == set(_expected())
    for key, want in _expected().items():
        record = records[key]
        assert record["boxes"].dtype == np.float32 and record["boxes"].shape == (
            len(want["boxes"]),
            4,
        )
        np.testing.assert_allclose(
            record["boxes"], np.array(want["boxes"]).reshape(-1, 4), rtol=1e-6
        )
        assert record["caption"] == want["caption"]  # text as str
        assert isinstance(record["score"], float) and record["score"] == want["score"]
        assert record["tags"].dtype == np.int64 and record["tags"].tolist() == list(want["tags"])
        assert record["label"].tolist() == list(want["label"])


def test_tensorflow_parses_every_feature(packed: Path):
    records = {r["key"].decode(): r for r in tf_records(packed)}
    for key, want in _expected().items():
        record = records[key]
        assert record["boxes"].shape == (len(want["boxes"]), 4)
        assert record["caption"].decode() == want["caption"]
        assert record["tags"].tolist() == list(want["tags"])


@pytest.mark.parametrize("lists", ["ragged", "padded"])
def test_tf_dataset_batches_list_features(packed: Path, lists: str):
    batch = next(iter(tf_dataset(packed, shuffle=False, batch_size=6, decode=False, lists=lists)))
    keys = [k.decode() for k in batch["key"].numpy()]
    expected = _expected()
    boxes, tags = batch["boxes"], batch["tags"]
    if lists == "ragged":
        assert boxes.shape.as_list() == [6, None, 4]
        assert [len(b) for b in boxes.to_list()] == [len(expected[k]["boxes"]) for k in keys]
        assert tags.to_list() == [list(expected[k]["tags"]) for k in keys]
    else:
        assert boxes.shape == (6, 2, 4) and tags.shape == (6, 3)  # padded to the longest
        assert tags.numpy()[keys.index("cat/img_000.jpg")].tolist() == [0, 0, 0]
    assert [c.decode() for c in batch["caption"].numpy()] == [expected[k]["caption"] for k in keys]


def test_tf_dataset_single_records_hold_boxes_as_n_by_4(packed: Path):
    for record in tf_dataset(packed, shuffle=False, decode=False):
        key = record["key"].numpy().decode()
        assert record["boxes"].shape == (len(_expected()[key]["boxes"]), 4)


def test_tfds_builder_from_directory_loads_every_feature(packed: Path):
    tfds = pytest.importorskip("tensorflow_datasets")
    builder = tfds.builder_from_directory(str(packed))
    features = builder.info.features
    assert features["label"].feature.names == ["cat", "dog"]
    assert isinstance(features["caption"], tfds.features.Text)
    assert isinstance(features["boxes"].feature, tfds.features.BBoxFeature)
    expected = {v["caption"]: v for v in _expected().values()}
    for record in tfds.as_numpy(builder.as_dataset(split="train")):
        want = expected[record["caption"].decode()]
        assert record["boxes"].shape == (len(want["boxes"]), 4)
        assert record["tags"].tolist() == list(want["tags"])
        assert record["label"].tolist() == list(want["label"])
        assert record["image"].shape == (24, 32, 3)


def test_verify_checks_records_against_the_schema(packed: Path, tmp_path: Path):
    assert verify(packed).ok
    out = tmp_path / "copy"
    out.mkdir()
    for path in packed.iterdir():
        if path.is_file():
            (out / path.name).write_bytes(path.read_bytes())
    index = json.loads((out / "index.json").read_text())
    shard = index["splits"]["train"]["shards"][0]
    record = {
        "image": b"x",
        "height": 1,
        "width": 1,
        "channels": 3,
        "format": "raw",
        "key": "k",
        "label": [0],
        "caption": "c",
        "score": 1.0,
        "tags": [1],
        "boxes": [0.1, 0.2, 0.3, 0.4, 0.5],
    }  # fmt: skip  (a ragged box)
    with TFRecordWriter(out / shard["file"]) as writer:
        writer.write(encode_example(record))
    reasons = " ".join(f.reason for f in verify(out).faults)
    assert "feature 'boxes' holds 5 values, not rows of 4" in reasons
    with pytest.raises(RecordError, match="not rows of 4"):
        list(iter_examples(out))


def test_inspect_and_preview_show_extra_features(packed: Path, tmp_path: Path):
    summary = describe(packed, num_records=6)
    json.dumps(summary)  # JSON-ready: arrays became lists
    samples = {s["key"]: s for s in summary["splits"]["train"]["samples"]}
    boxes = [[0.0, 0.2, 0.5, 0.75], [0.1, 0.2, 0.6, 0.75]]
    np.testing.assert_allclose(samples["cat/img_002.jpg"]["boxes"], boxes, rtol=1e-6)
    assert samples["cat/img_002.jpg"]["class"] == ["cat", "dog"]
    assert summary["features"]["boxes"]["shape"] == [-1, 4]
    dest = make_preview(packed, tmp_path / "grid.png", n=6)
    import cv2

    sheet = cv2.imread(dest)
    green = (sheet[:, :, 1] > 200) & (sheet[:, :, 0] < 60) & (sheet[:, :, 2] < 60)
    assert green.sum() > 50  # the boxes were drawn
