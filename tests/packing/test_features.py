"""Extra features end to end: a manifest's columns -> Example bytes -> index -> every reader.

The items come from real manifests (JSONL written with json, CSV with csv, Parquet with
pyarrow) holding boxes, a caption, a score, tags and several labels per image; what pack wrote
is read back by real TensorFlow and TFDS, and without them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardpack.containers.example import encode_example
from shardpack.containers.tfrecord import TFRecordWriter
from shardpack.errors import OutputError, RecordError
from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.read.describe import describe
from shardpack.read.preview import make_preview
from shardpack.read.stream import iter_examples, tf_dataset
from shardpack.read.verify import verify
from tests import helpers
from tests.helpers import make_tree, tf_records, write_csv, write_jsonl, write_parquet


def _fields(i: int, caption: str = "café") -> dict:
    return {
        "boxes": tuple((0.1 * k, 0.2, 0.5 + 0.1 * k, 0.75) for k in range(i % 3)),  # 0..2 boxes
        "caption": f"photo {i} {caption}",
        "score": i / 4,
        "tags": tuple(range(i % 4)),
    }


def _labels(i: int) -> tuple[int, ...]:
    return ((), (0,), (0, 1))[i % 3]


KEYS = [f"{c}/img_{n:03d}.jpg" for c in ("cat", "dog") for n in range(3)]
CLASSES = ("cat", "dog")


def _rows(caption: str = "café") -> list[dict]:
    """The manifest's rows: a path, several labels by name, boxes, a caption, a score, tags."""
    return [
        {"path": key, "label": [CLASSES[k] for k in _labels(i)],
         **{k: list(map(list, v)) if k == "boxes" else list(v) if k == "tags" else v
            for k, v in _fields(i, caption).items()}}
        for i, key in enumerate(KEYS)
    ]  # fmt: skip


def _pack(manifest: Path, out: Path, **options) -> None:
    pack(manifest, out, PackOptions(workers=1, shards=2, shuffle=False, **options))


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("features")
    src = make_tree(tmp / "src", {"cat": 3, "dog": 3})
    _pack(write_jsonl(src / "labels.jsonl", _rows()), tmp / "out")
    return tmp / "out"


def test_resume_is_refused_when_a_manifest_value_changed(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    out = tmp_path / "out"
    manifest = write_jsonl(src / "labels.jsonl", _rows())
    _pack(manifest, out)
    (out / "index.json").unlink()  # as if interrupted before the index
    write_jsonl(manifest, _rows(caption="cafe"))  # the same files, one value changed
    with pytest.raises(OutputError, match="changed source"):
        _pack(manifest, out, resume=True)
    write_jsonl(manifest, _rows())
    _pack(manifest, out, resume=True)  # the same values resume


def _shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecord-*"))}


def test_the_same_table_as_csv_jsonl_and_parquet_packs_to_identical_shards(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    # CSV cells hold scalars: the scalar columns of the table, in all three formats
    rows = [{"path": key, "label": CLASSES[i % 2], "caption": f"photo {i} café", "score": i / 4,
             "n": i - 2, "ok": i % 2 == 0} for i, key in enumerate(KEYS)]  # fmt: skip
    shards = []
    for write, name in (
        (write_csv, "t.csv"),
        (write_jsonl, "t.jsonl"),
        (write_parquet, "t.parquet"),
    ):
        out = tmp_path / name.replace(".", "_")
        _pack(write(src / name, rows), out, name="t")
        shards.append(_shards(out))
    assert shards[0] and shards[0] == shards[1] == shards[2]
    # and the list columns (boxes, tags, several labels) alike in JSONL and Parquet
    lists = []
    for write, name in ((write_jsonl, "l.jsonl"), (write_parquet, "l.parquet")):
        out = tmp_path / name.replace(".", "_")
        _pack(write(src / name, _rows()), out, name="l")
        lists.append(_shards(out))
    assert lists[0] and lists[0] == lists[1]


@pytest.mark.parametrize("fmt", ["array_record", "webdataset", "parquet"])
def test_every_container_holds_the_list_features_as_tfrecord_does(packed, tmp_path, fmt):
    """Boxes, several labels, number lists: read back from every container as from TFRecord
    (a WebDataset's .json met numpy arrays, and its pack ended in a traceback)."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    out = tmp_path / fmt
    _pack(write_jsonl(src / "labels.jsonl", _rows()), out, format=fmt)
    want = {r["key"]: r for r in iter_examples(packed)}
    got = {r["key"]: r for r in iter_examples(out)}
    assert got.keys() == want.keys()
    for key, record in got.items():
        for name, value in record.items():
            if isinstance(value, np.ndarray):
                assert value.dtype == want[key][name].dtype, (key, name)
                assert value.tolist() == want[key][name].tolist(), (key, name)
            else:
                assert value == want[key][name], (key, name)
    if fmt == "webdataset":  # and the .json as any tar reader sees it
        import tarfile

        with tarfile.open(next(out.glob("*.tar"))) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith(".json"))
            saved = json.loads(tar.extractfile(member).read())
        record = got[saved["key"]]
        assert saved["boxes"] == np.asarray(record["boxes"]).reshape(-1).tolist()
        assert saved["label"] == record["label"].tolist()


def _expected() -> dict[str, dict]:
    return {key: {**_fields(i), "label": _labels(i)} for i, key in enumerate(KEYS)}


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


@pytest.mark.heavy
def test_tensorflow_parses_every_feature(packed: Path):
    records = {r["key"].decode(): r for r in tf_records(packed)}
    for key, want in _expected().items():
        record = records[key]
        assert record["boxes"].shape == (len(want["boxes"]), 4)
        assert record["caption"].decode() == want["caption"]
        assert record["tags"].tolist() == list(want["tags"])


@pytest.mark.heavy
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
        width = max(len(expected[k]["label"]) for k in keys)
        padded = [
            list(expected[k]["label"]) + [-1] * (width - len(expected[k]["label"])) for k in keys
        ]
        assert batch["label"].numpy().tolist() == padded  # class lists pad with -1: 0 is a class
    assert [c.decode() for c in batch["caption"].numpy()] == [expected[k]["caption"] for k in keys]


@pytest.mark.heavy
def test_tf_dataset_single_records_hold_boxes_as_n_by_4(packed: Path):
    for record in tf_dataset(packed, shuffle=False, decode=False):
        key = record["key"].numpy().decode()
        assert record["boxes"].shape == (len(_expected()[key]["boxes"]), 4)


@pytest.mark.heavy
def test_tfds_builder_from_directory_loads_every_feature(packed: Path):
    tfds = helpers.heavy_import("tensorflow_datasets")
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
    helpers.vouch_size(out, shard["file"])  # readers refuse a shard of another size at once
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
