"""Reading back: iter_examples without TensorFlow, tf_dataset with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shardpack.errors import IndexFormatError, RecordError
from shardpack.options import PackOptions
from shardpack.packer import pack
from shardpack.read import iter_examples, tf_dataset
from tests.helpers import packed_tree, tf_records


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    return packed_tree(tmp_path_factory.mktemp("read"), {"a": 5, "b": 4}, shards=3, workers=1)


def test_iter_examples_matches_tensorflow(packed: Path):
    ours = {r["key"]: r for r in iter_examples(packed, decode=True)}
    theirs = {r["key"].decode(): r for r in tf_records(packed)}
    assert set(ours) == set(theirs) and len(ours) == 9
    for key, record in ours.items():
        assert record["label"] == theirs[key]["label"]
        assert record["format"] == "jpeg"
        # Two JPEG decoders (OpenCV's and TensorFlow's libjpeg builds) differ by a level or two.
        diff = np.abs(record["image"].astype(int) - theirs[key]["pixels"].astype(int))
        assert record["image"].shape == theirs[key]["pixels"].shape and diff.mean() < 2


def test_iter_examples_shuffle_is_seeded(packed: Path):
    plain = [r["key"] for r in iter_examples(packed)]
    a = [r["key"] for r in iter_examples(packed, shuffle=True, seed=3)]
    b = [r["key"] for r in iter_examples(packed, shuffle=True, seed=3)]
    assert a == b and sorted(a) == sorted(plain)


def test_iter_examples_does_not_import_tensorflow(packed: Path):
    code = (
        "import sys, shardpack; n = sum(1 for _ in shardpack.iter_examples(sys.argv[1], "
        "decode=True)); print(n, 'tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(packed)], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.split() == ["9", "False"]


def test_iter_examples_checks_crc(packed: Path, tmp_path: Path):
    import shutil

    out = Path(shutil.copytree(packed, tmp_path / "copy"))
    shard = sorted(out.glob("*.tfrecord-00000-*"))[0]
    data = bytearray(shard.read_bytes())
    data[20] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(RecordError, match="at byte 0"):
        list(iter_examples(out))


def test_unknown_split(packed: Path):
    with pytest.raises(IndexFormatError, match="no split 'test'"):
        list(iter_examples(packed, "test"))


def test_tf_dataset_epochs_and_batches(packed: Path):
    ds = tf_dataset(packed, shuffle=False, epochs=3)
    keys = [r["key"].numpy().decode() for r in ds]
    once = [r["key"] for r in iter_examples(packed)]
    assert keys == once * 3
    shuffled = [[r["key"].numpy() for r in tf_dataset(packed, seed=5, epochs=1)] for _ in range(2)]
    assert shuffled[0] == shuffled[1]
    epochs = [r["key"].numpy() for r in tf_dataset(packed, seed=1, epochs=2)]
    assert sorted(epochs[:9]) == sorted(epochs[9:]) and epochs[:9] != epochs[9:]
    batch = next(iter(tf_dataset(packed, batch_size=4, image_size=(16, 16))))
    assert batch["image"].shape == (4, 16, 16, 3) and batch["image"].dtype.name == "uint8"


def test_keras_fit_on_the_demo_set(tmp_path: Path):
    """The README's training loop, on the built-in sample set."""
    import keras

    from shardpack.demo import make_sample

    out = tmp_path / "shards"
    pack(make_sample(tmp_path / "sample", per_class=20), out, PackOptions(workers=2))
    train = tf_dataset(out, "train", batch_size=32, image_size=(48, 48), seed=0).map(
        lambda r: (r["image"], r["label"])
    )
    model = keras.Sequential([
        keras.Input((48, 48, 3)),
        keras.layers.Rescaling(1 / 255),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(5),
    ])  # fmt: skip
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert int(train.cardinality()) == 4  # 100 records in batches of 32, known from the index
    history = model.fit(train, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()


@pytest.mark.parametrize("reader", ["iter_examples", "tf_dataset", "read_record", "describe",
                                    "verify", "preview"])  # fmt: skip
@pytest.mark.parametrize("bad_name", ["../secret.tfrecord-00000-of-00001", "/etc/passwd"])
def test_every_reader_refuses_an_index_that_points_outside_out(packed, tmp_path, reader, bad_name):
    import json
    import shutil

    import shardpack

    out = Path(shutil.copytree(packed, tmp_path / "copy"))
    index = json.loads((out / "index.json").read_text())
    index["splits"]["train"]["shards"][0]["file"] = bad_name
    (out / "index.json").write_text(json.dumps(index))
    calls = {
        "iter_examples": lambda: list(shardpack.iter_examples(out)),
        "tf_dataset": lambda: shardpack.tf_dataset(out),
        "read_record": lambda: shardpack.read_record(out, "train", 0),
        "describe": lambda: shardpack.describe(out),
        "verify": lambda: shardpack.verify(out),
        "preview": lambda: shardpack.make_preview(out, tmp_path / "p.png"),
    }
    with pytest.raises(IndexFormatError, match="refused shard name"):
        calls[reader]()
