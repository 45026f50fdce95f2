"""Reading back: iter_examples without TensorFlow, tf_dataset with it."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from shardpack.errors import IndexFormatError, RecordError, ShardpackError
from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.read.stream import iter_examples, tf_dataset
from tests import helpers
from tests.helpers import (
    OBJECT_ROWS,
    image,
    make_cifar10_python,
    make_tree,
    tf_records,
    write_image,
)
from tests.read.test_on_stores import _upload


@pytest.fixture(scope="module")
def packed(shared_pack) -> Path:
    return shared_pack({"a": 5, "b": 4}, shards=3, workers=1)


@pytest.mark.heavy
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
    # shuffling changes the order, and another seed gives another order
    c = [r["key"] for r in iter_examples(packed, shuffle=True, seed=4)]
    assert a != plain and c != a and sorted(c) == sorted(plain)


@pytest.fixture(scope="module")
def thousand(tmp_path_factory) -> dict[int, Path]:
    """1,000 CIFAR training records packed into 4 shards and into 1."""
    root = tmp_path_factory.mktemp("thousand")
    src = make_cifar10_python(root / "cifar", per_batch=200)
    outs = {}
    for shards in (4, 1):
        outs[shards] = root / f"out{shards}"
        pack(src, outs[shards], PackOptions(shards=shards, workers=1, encode="raw"))
    return outs


_README_DATASET = """
import sys, torch, shardpack

class Shards(torch.utils.data.IterableDataset):  # the README's class, yielding keys to count
    def __init__(self, out, split="train"):
        self.out, self.split = out, split

    def __iter__(self):
        for record in shardpack.iter_examples(self.out, self.split, decode=True, shuffle=True):
            yield record["key"]

loader = torch.utils.data.DataLoader(Shards(sys.argv[1]), num_workers=2, batch_size=None)
print("\\n".join(loader))
"""


@pytest.mark.heavy
# One shard a reader or fewer in make test; more shards than readers in test-long (the
# torch dataset's grid shows that case too: tests/test_torch.py).
@pytest.mark.parametrize("shards", [pytest.param(4, marks=pytest.mark.long), 1])
def test_torch_dataloader_with_two_workers_reads_each_record_once(thousand, shards):
    helpers.needs("torch")
    # In the kept reading Python, where torch loads once a run: torch and TensorFlow loaded
    # together in the test process would cost seconds and memory for nothing.
    keys = helpers.run_kept(_README_DATASET, str(thousand[shards])).split()
    assert len(keys) == 1000 and len(set(keys)) == 1000


@pytest.fixture(scope="module")
def small(shared_pack) -> dict[int, Path]:
    """25 records packed into 1, 3 and 5 shards."""
    return {n: shared_pack({"a": 13, "b": 12}, shards=n, workers=1) for n in (1, 3, 5)}


def check_equal_shares(
    shares: list[list[str]], everything: list[str], drop: bool, order: list[str] | None = None
) -> None:
    """Every share the same length; together each record once, but for the padding (the
    first records of `order`, the split's order the shares are ranges of: by default the
    written one) or the records dropped (fewer than the shares)."""
    per = len(everything) // len(shares) if drop else -(-len(everything) // len(shares))
    assert [len(s) for s in shares] == [per] * len(shares)
    read = Counter(k for s in shares for k in s)
    if drop:
        assert max(read.values()) == 1 and set(read) <= set(everything)
    else:
        order = everything if order is None else order
        assert sorted(order[: len(everything)]) == sorted(everything)
        padding = per * len(shares) - len(everything)
        assert sorted(read.elements()) == sorted(everything + (order * per)[:padding])


@pytest.mark.parametrize("shards", [1, 3, 5])
@pytest.mark.parametrize("drop", [False, True])
def test_every_reader_gets_the_same_number_of_records(small, shards, drop):
    """Hosts x DataLoader workers (reader_share numbers them host * workers + worker), more
    readers than shards and than records among them."""
    out = small[shards]
    everything = [r["key"] for r in iter_examples(out)]
    for hosts, workers in itertools.product((1, 2, 3), (1, 2, 4)):
        readers = hosts * workers
        shares = [[r["key"] for r in iter_examples(out, shard=(i, readers), drop_remainder=drop)]
                  for i in range(readers)]  # fmt: skip
        check_equal_shares(shares, everything, drop)
    shares = [[r["key"] for r in iter_examples(out, shard=(i, 30), shuffle=True, seed=i)]
              for i in range(30)]  # fmt: skip
    check_equal_shares(shares, everything, False)


@pytest.mark.heavy
def test_tf_dataset_says_nothing_of_autograph(thousand):
    """AutoGraph looked into the shard reader at every call and warned that it cannot convert
    the generator a store's shards stream through: a warning the user can do nothing about."""
    import io
    import logging

    said = io.StringIO()
    handler = logging.StreamHandler(said)
    logger = logging.getLogger("tensorflow")
    logger.addHandler(handler)
    try:
        for shuffle in (False, True):
            for _ in tf_dataset(thousand[4], shard=(0, 2), shuffle=shuffle, decode=False):
                break
    finally:
        logger.removeHandler(handler)
    assert "AutoGraph" not in said.getvalue(), said.getvalue()


@pytest.mark.heavy
# One shard a reader or fewer in make test; more shards than readers in test-long (the
# torch dataset's grid shows that case too: tests/test_torch.py).
@pytest.mark.parametrize("shards", [pytest.param(4, marks=pytest.mark.long), 1])
def test_tf_dataset_shares_hold_each_record_once(thousand, shards):
    import tensorflow as tf

    def keys(ds) -> list[str]:  # in one batch: ~40% less CPU than a record at a time
        return [key.decode() for batch in ds.batch(1 << 20) for key in batch["key"].numpy()]

    out = thousand[shards]
    everything = [r["key"] for r in iter_examples(out)]
    for shuffle, drop in ((False, False), (True, False), (True, True)):
        shares = []
        for i in range(3):
            ds = tf_dataset(out, shard=(i, 3), shuffle=shuffle, decode=False, drop_remainder=drop)
            shares.append(keys(ds))
            assert int(ds.cardinality()) == len(shares[-1])  # the declared length is the true one
        check_equal_shares(shares, everything, drop)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    second = keys(tf_dataset(out, input_context=context))
    first = keys(tf_dataset(out, shard=(0, 2)))
    check_equal_shares([first, second], everything, False)


@pytest.mark.heavy
@pytest.mark.parametrize("shard", [(2, 2), (-1, 2), (0, 0), "0/2", (0, 1, 2)])
def test_a_bad_shard_is_one_clear_error(packed: Path, shard):
    with pytest.raises(ShardpackError, match="shard must be"):
        list(iter_examples(packed, shard=shard))
    with pytest.raises(ShardpackError, match="shard must be"):
        tf_dataset(packed, shard=shard)


@pytest.mark.parametrize("max_pixels", ["4096", 0, -5, 1.5, True])
def test_every_reader_refuses_a_max_pixels_that_is_no_count_by_name(packed: Path, max_pixels):
    """Before: a text failed with TypeError inside the first decode, and 0 or less with a
    RecordError blaming the first record's image, as if its shard were damaged."""
    from shardpack.read.random_access import Records
    from shardpack.read.verify import verify

    said = f"max_pixels must be a positive integer, got: {max_pixels!r}"
    readers = [lambda: next(iter_examples(packed, decode=True, max_pixels=max_pixels)),
               lambda: Records(packed, decode=True, max_pixels=max_pixels)[0],
               lambda: verify(packed, decode=True, max_pixels=max_pixels)]  # fmt: skip
    for read in readers:
        with pytest.raises(ShardpackError) as refused:
            read()
        assert str(refused.value) == said and not isinstance(refused.value, RecordError)


@pytest.mark.parametrize(
    ("given", "said"),
    [({"batch_size": 0}, "batch_size must be a positive integer or None, got: 0"),
     ({"image_size": 224}, "image_size must be (height, width) in pixels, got: 224"),
     ({"image_size": (224, 0)}, "image_size must be (height, width) in pixels"),
     ({"epochs": 0}, "epochs must be a positive integer, or None to repeat forever, got: 0"),
     ({"epochs": -1}, "epochs must be a positive integer"),
     ({"epochs": 1.5}, "epochs must be a positive integer")],
)  # fmt: skip
def test_tf_dataset_refuses_a_bad_batch_or_image_size_by_name(packed: Path, given, said):
    """Before: a TensorFlow error at iteration, or autograph's 'ValueError in user code'."""
    with pytest.raises(ShardpackError, match=re.escape(said)):
        tf_dataset(packed, **given)


def test_shares_that_would_all_be_empty_are_refused(packed: Path):
    """drop_remainder over fewer records than readers: before, every reader read none (a
    Keras fit of no step, a DataLoader of no batch), said nowhere."""
    total = sum(1 for _ in iter_examples(packed))
    said = (
        f"{packed}: split 'train' holds {total} records, fewer than the {total + 1} readers "
        "(hosts x DataLoader workers): with drop_remainder each would read none; read it "
        "without drop_remainder (a few records then come twice), or with fewer readers"
    )
    many = (0, total + 1)
    for read in (lambda: next(iter_examples(packed, shard=many, drop_remainder=True)),
                 lambda: tf_dataset(packed, shard=many, drop_remainder=True)):  # fmt: skip
        with pytest.raises(ShardpackError) as refused:
            read()
        assert str(refused.value) == said
    assert len(list(iter_examples(packed, shard=(0, total), drop_remainder=True))) == 1


@pytest.mark.parametrize("seed", [-1, 1.5, "3", True])
def test_the_shuffling_readers_refuse_a_seed_that_is_no_count_by_name(packed: Path, seed):
    """Before: iter_examples took -1 for 1 (random.Random's abs: the same order as seed=1, where
    shardpack.torch refuses it), and a float or a text as a seed of its own; tf_dataset failed
    inside tf.data with a TypeError."""
    said = f"seed must be an integer of at least 0, got: {seed!r}"
    for read in (lambda: next(iter_examples(packed, shuffle=True, seed=seed)),
                 lambda: tf_dataset(packed, seed=seed)):  # fmt: skip
        with pytest.raises(ShardpackError) as refused:
            read()
        assert str(refused.value) == said


@pytest.fixture(scope="module")
def mixed_sizes(tmp_path_factory) -> Path:
    """A pack of 24x32 images and one 40x40: the index knows the sizes vary."""
    root = tmp_path_factory.mktemp("mixed")
    src = make_tree(root / "src", {"a": 3, "b": 3})
    write_image(src / "b" / "big.jpg", image(99, 40, 40))
    pack(src, root / "out", PackOptions(workers=1))
    return root / "out"


def test_tf_dataset_refuses_to_batch_images_of_different_sizes(mixed_sizes: Path):
    """Before: tf.data's 'Cannot batch tensors with different shapes' at the first batch."""
    with pytest.raises(ShardpackError, match=re.escape("pass image_size=(height, width)")) as e:
        tf_dataset(mixed_sizes, batch_size=4)
    assert str(e.value).startswith(f"{mixed_sizes}: the images differ in size, so batch_size=4")


@pytest.mark.heavy
def test_tf_dataset_batches_images_of_different_sizes_when_told_how(mixed_sizes: Path):
    """image_size, lists='padded', decode=False or batch_size=1 stack them; an index from before
    `image_size` cannot tell, and is read as before."""
    for given in ({"image_size": (8, 8)}, {"lists": "padded"}, {"decode": False}):
        batch = next(iter(tf_dataset(mixed_sizes, batch_size=7, shuffle=False, **given)))
        assert batch["label"].shape == (7,), given
    assert len(list(tf_dataset(mixed_sizes, batch_size=1))) == 7
    index = mixed_sizes / "index.json"
    document = json.loads(index.read_text())
    del document["image_size"]
    index.write_text(json.dumps(document))
    tf_dataset(mixed_sizes, batch_size=4)  # built; stacking fails in tf.data, as it did


def test_tf_dataset_without_tensorflow_says_what_to_install(packed: Path):
    code = (
        "import sys; sys.modules['tensorflow'] = None  # as if TensorFlow were not installed\n"
        "import shardpack\n"
        "try:\n    shardpack.tf_dataset(sys.argv[1])\n"
        "except shardpack.ShardpackError as e:\n    print(e)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(packed)], capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert "pip install 'shardpack[tf]'" in done.stdout and len(done.stdout.splitlines()) == 1


@pytest.mark.heavy
def test_every_reader_handles_an_empty_shard(tmp_path: Path):
    """Three images in three shards, one of them not an image: its shard holds no record."""
    import shardpack

    src = make_tree(tmp_path / "src", {"a": 1, "b": 1})
    (src / "b" / "broken.jpg").write_bytes(b"not an image at all")
    out = tmp_path / "out"
    pack(src, out, PackOptions(shards=3, workers=1, index_files=True))
    sizes = [s.num_records for s in shardpack.load_index(out).split("train").shards]
    assert sorted(sizes) == [0, 1, 1]
    assert shardpack.verify(out, decode=True).ok
    assert shardpack.describe(out)["splits"]["train"]["num_records"] == 2
    assert len(list(iter_examples(out, decode=True))) == 2
    assert [len(list(iter_examples(out, shard=(i, 3)))) for i in range(3)] == [1, 1, 1]
    assert len(list(tf_dataset(out, epochs=1))) == 2
    with shardpack.Records(out) as records:
        assert len(records) == 2 and {records[0]["key"], records[1]["key"]} == {
            "a/img_000.jpg", "b/img_000.jpg"}  # fmt: skip
    assert shardpack.read_record(out, "train", 1)["label"] in (0, 1)
    shardpack.make_preview(out, tmp_path / "p.png")
    tfds = helpers.heavy_import("tensorflow_datasets")
    builder = tfds.builder_from_directory(str(out))
    assert len(list(builder.as_dataset(split="train"))) == 2


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


def test_a_tfrecord_cut_at_a_record_s_end_is_refused_not_read_short(packed: Path, tmp_path: Path):
    import shutil

    out = Path(shutil.copytree(packed, tmp_path / "copy"))
    shard = sorted(out.glob("*.tfrecord-00001-*"))[0]
    data = shard.read_bytes()
    kept = 8 + 4 + int.from_bytes(data[:8], "little") + 4  # its first record whole
    shard.write_bytes(data[:kept])
    # tf.data read it short: TensorFlow's error after an epoch, or with epochs=None none
    said = rf"{shard.name}: size {kept:,} bytes, index.json says {len(data):,} \(cut short or"
    with pytest.raises(RecordError, match=said):
        tf_dataset(out, epochs=None)  # refused before TensorFlow loads
    with pytest.raises(RecordError, match=said):
        list(iter_examples(out))
    helpers.vouch_size(out, shard.name)  # an index that lies about its size too
    said = f"{shard.name}: holds 1 records, index.json says 3"
    with pytest.raises(RecordError, match=said):
        list(iter_examples(out))
    with pytest.raises(RecordError, match=said):  # a reader whose share ends in that shard
        list(iter_examples(out, shard=(0, 2)))


def _overfilled(packed: Path, tmp_path: Path) -> tuple[Path, Path, bytes]:
    """A copy of `packed` whose first shard holds the second's records after its own: OUT,
    that shard, and its own bytes."""
    import shutil

    out = Path(shutil.copytree(packed, tmp_path / "copy"))
    first, second, _ = sorted(out.glob("*.tfrecord-*"))
    data = first.read_bytes()
    first.write_bytes(data + second.read_bytes())
    return out, first, data


def test_a_tfrecord_holding_more_than_the_index_says_is_refused_not_read_as_whole(
    packed: Path, tmp_path: Path
):
    out, first, data = _overfilled(packed, tmp_path)
    helpers.vouch_size(out, first.name)  # its size refuses it at once: past that, its count
    said = f"{first.name}: holds more than 3 records, index.json says 3"
    with pytest.raises(RecordError, match=said):
        list(iter_examples(out))
    first.write_bytes(data + b"junk" * 8)  # bytes after its last record
    helpers.vouch_size(out, first.name)
    with pytest.raises(RecordError, match=f"{first.name} at byte {len(data)}: length CRC"):
        list(iter_examples(out))
    assert len(list(iter_examples(out, shard=(1, 2)))) == 5  # a share ending before it: unread


@pytest.mark.heavy
def test_tensorflow_reads_such_a_tfrecord_whole_or_fails_without_a_name(
    packed: Path, tmp_path: Path
):
    """Why shardpack's readers refuse it themselves: tf.data reads the other shard's records as
    this one's, and stops at junk after them with an error that names no file."""
    import tensorflow as tf

    _, first, data = _overfilled(packed, tmp_path)
    assert sum(1 for _ in tf.data.TFRecordDataset(str(first))) == 6  # TensorFlow reads 6
    first.write_bytes(data + b"junk" * 8)
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(str(first)))


@pytest.mark.heavy
@pytest.mark.parametrize("shuffle", [False, True])
def test_tf_dataset_names_a_local_shard_with_a_damaged_record(
    packed: Path, tmp_path: Path, shuffle: bool
):
    """TensorFlow's DataLossError ("corrupted record at 12") names no file: tf_dataset's names
    the shard and the command that names the record."""
    import shutil

    import tensorflow as tf

    out = Path(shutil.copytree(packed, tmp_path / "copy"))
    damaged = sorted(out.glob("*.tfrecord-*"))[1]
    data = bytearray(damaged.read_bytes())
    data[40] ^= 0xFF  # in the first record's bytes: its size stays, its CRC fails
    damaged.write_bytes(data)
    said = f"{re.escape(str(damaged))}: TensorFlow could not read .* `shardpack verify {out}`"
    with pytest.raises(tf.errors.InvalidArgumentError, match=said):
        list(tf_dataset(out, shuffle=shuffle, decode=False))


@pytest.mark.heavy
@pytest.mark.parametrize("label", [12, -1])
def test_tf_dataset_refuses_a_class_id_past_the_class_list(tmp_path: Path, label: int):
    """TensorFlow's parser knows no classes: a record (good CRC) labelled 12 in a dataset of
    2 classes was served as it was, where every other reader refuses it by name."""
    import tensorflow as tf

    from shardpack.containers.example import encode_example
    from shardpack.containers.tfrecord import frame
    from tests.hostile.test_read import _good, _out

    out = _out(tmp_path, frame(encode_example(_good())) + frame(encode_example(_good(label=label))),
               num_records=2)  # fmt: skip
    said = f"{out}: a record holds a label class id outside its 2 classes; `shardpack verify"
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(said)):
        list(tf_dataset(out, shuffle=False, decode=False))


@pytest.mark.heavy
@pytest.mark.parametrize("lie", [{"height": -24}, {"width": 0}, {"height": 1 << 40},
                                 {"channels": -3}])  # fmt: skip
def test_tf_dataset_refuses_a_record_of_no_images_size(tmp_path: Path, lie: dict):
    """TensorFlow's parser served a record's height -24 or 2^40 as it was (without decode;
    with it, beside the pixels its header gave), where every other reader refuses it."""
    import tensorflow as tf

    from shardpack.containers.example import encode_example
    from shardpack.containers.tfrecord import frame
    from tests.hostile.test_read import _good, _out

    out = _out(tmp_path, frame(encode_example(_good())) + frame(encode_example(_good(**lie))),
               num_records=2)  # fmt: skip
    said = f"{out}: a record holds a height, width or channels that no image has"
    for decode in (False, True):
        with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(said)):
            list(tf_dataset(out, shuffle=False, decode=decode))


@pytest.mark.parametrize("container", ["tfrecord", "webdataset", "parquet"])
def test_a_shard_gone_from_out_is_said_missing_by_every_reader_with_the_mend(
    tmp_path: Path, container: str
):
    """Before: iter_examples and Records said "cannot open (No such file or directory); check
    the path" of it, a path index.json gave them; shardpack.torch said it missing."""
    from shardpack.read.random_access import Records

    out = helpers.packed_tree(tmp_path, {"a": 3, "b": 2}, format=container, shards=2, workers=1)
    gone = json.loads((out / "index.json").read_text())["splits"]["train"]["shards"][1]
    (out / gone["file"]).unlink()
    said = (f"{out / gone['file']}: missing (index.json lists it, of {gone['num_bytes']:,} "
            "bytes); restore it from a copy or pack again")  # fmt: skip
    with pytest.raises(RecordError) as refused:
        list(iter_examples(out))
    assert str(refused.value) == said
    with Records(out) as records, pytest.raises(RecordError) as refused:
        records[len(records) - 1]  # in the last shard
    assert str(refused.value) == said


def test_a_tar_whose_end_is_cut_is_refused_by_every_reader(tmp_path: Path):
    import tarfile

    from shardpack.read.random_access import Records

    out = helpers.packed_tree(tmp_path, {"a": 2, "b": 1}, format="webdataset", shards=1)
    (tar,) = out.glob("*.tar")
    with tarfile.open(tar) as archive:
        last = archive.getmembers()[-1]
    end = -(-(last.offset_data + last.size) // 512) * 512  # where the end-of-archive begins
    tar.write_bytes(tar.read_bytes()[: end + 100])  # tarfile and webdataset read it as whole
    helpers.vouch_size(out, tar.name)  # its size refuses it at once: past that, its end
    said = f"{tar.name} at byte {end}: file ends inside a tar header"
    records = Records(out, "train")
    with pytest.raises(RecordError, match=said):
        records[len(records) - 1]
    with pytest.raises(RecordError, match=said):
        list(iter_examples(out))


def test_unknown_split(packed: Path):
    with pytest.raises(IndexFormatError, match="no split 'test'"):
        list(iter_examples(packed, "test"))


@pytest.mark.heavy
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


@pytest.mark.heavy
def test_tf_dataset_over_a_url_equals_the_local_folder(tmp_path):
    helpers.heavy_import("tensorflow")
    out = helpers.packed_tree(tmp_path, {"a": 4, "b": 3}, workers=1, shards=2)
    url = _upload(out)  # into memory://

    def keys(location, **kw):
        ds = tf_dataset(location, shuffle=False, decode=True, **kw)
        return [(r["key"].numpy(), r["label"].numpy(), r["image"].numpy().tobytes()) for r in ds]

    assert keys(url) == keys(out) and len(keys(url)) == 7
    assert keys(url, shard=(1, 2)) == keys(out, shard=(1, 2))  # a share: every other shard


@pytest.mark.heavy
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


def _sideways_photo(src: Path) -> Path:
    """src/rot/a.jpg: 80 wide and 64 high as stored, red along its top, and an EXIF Orientation
    of 6: upright (turned a quarter clockwise) it is 64 wide and 80 high, red on the right."""
    from PIL import Image

    pixels = np.full((64, 80, 3), 128, np.uint8)
    pixels[:10] = (255, 0, 0)
    exif = Image.Exif()
    exif[0x0112] = 6
    (src / "rot").mkdir(parents=True)
    Image.fromarray(pixels).save(src / "rot" / "a.jpg", exif=exif.tobytes(), quality=95)
    return src


def _only_shapes(out: Path) -> tuple[tuple, tuple, tuple]:
    """One record's (height, width) fields, and the shapes iter_examples and tf_dataset decode."""
    (record,) = iter_examples(out, decode=True)
    (tf_record,) = tf_dataset(out, shuffle=False)
    fields = (record["height"], record["width"], record["channels"])
    return fields, record["image"].shape, tuple(tf_record["image"].shape)


@pytest.mark.heavy
def test_passed_through_exif_orientation_is_left_as_a_tag_by_every_reader(tmp_path: Path):
    from shardpack.read.verify import verify

    out = tmp_path / "out"
    pack(_sideways_photo(tmp_path / "src"), out, PackOptions(check="decode"))  # --encode keep
    assert verify(out, decode=True).ok
    fields, ours, tensorflow = _only_shapes(out)
    assert fields == ours == tensorflow == (64, 80, 3)  # as stored: the header's size
    (record,) = iter_examples(out, decode=True)
    assert record["image"][:5, :, 0].min() > 200  # the red still along the top


@pytest.mark.parametrize(
    ("options", "shape"),
    [
        ({"encode": "jpeg"}, (80, 64, 3)),
        ({"encode": "raw"}, (80, 64, 3)),
        # decoded scaled down by libjpeg, then turned: the size keeps the upright aspect
        ({"max_side": 40}, (40, 32, 3)),
    ],
)
@pytest.mark.heavy
def test_reencoding_turns_an_exif_orientation_upright(tmp_path: Path, options, shape):
    from shardpack.read.verify import verify

    out = tmp_path / "out"
    pack(_sideways_photo(tmp_path / "src"), out, PackOptions(check="decode", **options))
    assert verify(out, decode=True).ok
    fields, ours, tensorflow = _only_shapes(out)
    assert fields == ours == tensorflow == shape
    (record,) = iter_examples(out, decode=True)
    right, left = record["image"][:, -3:], record["image"][:, :3]
    assert right[..., 0].min() > 200 and right[..., 1].max() < 60  # the red now on the right
    assert np.abs(left.astype(int) - 128).max() < 20


def test_iter_examples_gives_objects_as_numpy_arrays(objects_out):
    a, b, c = iter_examples(objects_out)
    assert a["objects/bbox"].dtype == np.float32 and a["objects/bbox"].shape == (2, 4)
    np.testing.assert_allclose(a["objects/bbox"], OBJECT_ROWS[0]["boxes"], atol=1e-6)
    assert a["objects/label"].dtype == np.int64 and a["objects/label"].tolist() == [0, 1]
    assert b["objects/is_crowd"].shape == (2,)
    assert c["objects/bbox"].shape == (0, 4) and c["objects/label"].shape == (0,)  # kept


@pytest.mark.heavy
def test_tf_dataset_gives_objects_ragged_or_padded(objects_out):
    """Batched, as docs/reading.md says: ragged by default, padded on request."""
    pytest.importorskip("tensorflow")
    ragged = next(iter(tf_dataset(objects_out, shuffle=False, batch_size=3, decode=False)))
    boxes = ragged["objects/bbox"]
    assert type(boxes).__name__ == "RaggedTensor" and boxes.row_lengths().numpy().tolist() == [
        2, 2, 0]  # fmt: skip
    assert boxes.to_tensor().shape == (3, 2, 4)
    padded = next(iter(tf_dataset(objects_out, shuffle=False, batch_size=3, decode=False,
                                  lists="padded")))  # fmt: skip
    assert padded["objects/bbox"].shape == (3, 2, 4)
    assert padded["objects/label"].numpy().tolist() == [[0, 1], [2, 0], [-1, -1]]  # -1: none
