"""pack end to end: real files in, real TensorFlow reading what we wrote."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from shardpack.errors import ImageError, OptionError, OutputError, SourceError
from shardpack.options import MAX_NAME_CHARS, PackOptions
from shardpack.packing.packer import pack
from tests.helpers import (
    image as make_image,
)
from tests.helpers import (
    make_cifar10_binary,
    make_cifar10_python,
    make_cifar100_python,
    make_tree,
    planned_work,
    run_cli,
    shard_files,
    tf_records,
    write_csv,
    write_image,
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    src = make_tree(tmp_path / "src", {"cat": 7, "dog": 5}, ext=".jpg")
    make_tree(src, {"cat": 2, "dog": 2}, ext=".png", seed=100)
    for i in range(2):  # file names must differ from the JPEGs above
        (src / "cat" / f"img_{i:03d}.png").rename(src / "cat" / f"extra_{i}.png")
        (src / "dog" / f"img_{i:03d}.png").rename(src / "dog" / f"extra_{i}.png")
    return src


def _index(out: Path) -> dict:
    return json.loads((out / "index.json").read_text())


@pytest.mark.heavy
@pytest.mark.parametrize("encode", ["keep", "jpeg", "png", "webp", "raw"])
def test_every_encoding_round_trips_through_tensorflow(tree: Path, tmp_path: Path, encode: str):
    out = tmp_path / "out"
    result = pack(tree, out, PackOptions(encode=encode, shards=3, workers=1))
    index = _index(out)
    assert result.num_records == 16
    assert index["encoding"] == encode
    assert index["classes"] == ["cat", "dog"]
    records = tf_records(out)
    assert len(records) == 16
    by_key = {r["key"].decode(): r for r in records}
    for key, record in by_key.items():
        original = cv2.cvtColor(cv2.imread(str(tree / key)), cv2.COLOR_BGR2RGB)
        assert record["pixels"].shape == original.shape
        assert (record["height"], record["width"]) == original.shape[:2]
        assert record["label"] == (0 if key.startswith("cat/") else 1)
        lossy = encode in ("jpeg", "webp") or (encode == "keep" and key.endswith(".jpg"))
        diff = np.abs(record["pixels"].astype(int) - original.astype(int)).mean()
        assert diff < (8 if lossy else 0.5), (key, diff)
    if encode == "keep":
        jpeg = next(r for k, r in by_key.items() if k.endswith(".jpg"))
        assert jpeg["image"] == (tree / jpeg["key"].decode()).read_bytes()  # passthrough


def test_index_contract(tree: Path, tmp_path: Path):
    out = tmp_path / "out"
    pack(tree, out, PackOptions(shards=2, workers=1, seed=7))
    index = _index(out)
    assert index["format"] == "shardpack-index" and index["version"] == 2
    assert index["name"] == "src" and index["seed"] == 7 and index["compression"] == "none"
    assert set(index["features"]) == {"image", "label", "height", "width", "channels", "format",
                                      "key"}  # fmt: skip
    assert index["features"]["height"] == {"dtype": "int64", "shape": []}
    train = index["splits"]["train"]
    assert [s["file"] for s in train["shards"]] == [
        "src-train.tfrecord-00000-of-00002",
        "src-train.tfrecord-00001-of-00002",
    ]
    assert train["num_records"] == sum(s["num_records"] for s in train["shards"]) == 16
    assert train["class_counts"] == [9, 7]
    for shard in train["shards"]:
        assert (out / shard["file"]).stat().st_size == shard["num_bytes"]
    assert set(index["stats"]) == {"seconds", "images_per_second", "workers", "lossless"}
    hidden = {p.name for p in out.iterdir() if p.name.startswith(".")} - {".shardpack.stamps"}
    assert hidden == {".shardpack.journal"}  # no temp file, no lock file is left


def test_same_output_whatever_the_worker_count(tree: Path, tmp_path: Path):
    runs = {}
    for workers in (1, 2, 3):
        out = tmp_path / f"out{workers}"
        pack(tree, out, PackOptions(shards=4, workers=workers, encode="jpeg"))
        index = _index(out)
        index.pop("stats")
        runs[workers] = (shard_files(out), index)
    assert runs[1] == runs[2] == runs[3]


@pytest.mark.heavy
def test_seed_and_no_shuffle(tree: Path, tmp_path: Path):
    def keys(out: Path, **kw) -> list[str]:
        pack(tree, out, PackOptions(shards=1, workers=1, **kw))
        return [r["key"].decode() for r in tf_records(out)]

    sorted_keys = keys(tmp_path / "a", shuffle=False)
    assert sorted_keys == sorted(sorted_keys)
    seeded = keys(tmp_path / "b", seed=1)
    assert seeded != sorted_keys and sorted(seeded) == sorted_keys
    assert keys(tmp_path / "c", seed=1) == seeded
    assert keys(tmp_path / "d", seed=2) != seeded


@pytest.mark.heavy
def test_gzip_is_readable_by_tensorflow(tree: Path, tmp_path: Path):
    out = tmp_path / "out"
    pack(tree, out, PackOptions(compression="gzip", shards=2, workers=2))
    assert _index(out)["compression"] == "gzip"
    assert len(tf_records(out)) == 16
    assert all(data[:2] == b"\x1f\x8b" for data in shard_files(out).values())


@pytest.mark.heavy
def test_max_side_and_resize(tmp_path: Path):
    src = tmp_path / "src"
    write_image(src / "a" / "big.jpg", make_image(1, height=300, width=400))
    write_image(src / "a" / "small.png", make_image(2, height=20, width=30))
    out = tmp_path / "out"
    pack(src, out, PackOptions(max_side=100, workers=1))
    sizes = {r["key"].decode(): r["pixels"].shape for r in tf_records(out)}
    assert sizes == {"a/big.jpg": (75, 100, 3), "a/small.png": (20, 30, 3)}
    pack(src, out, PackOptions(resize=(64, 48), encode="raw", workers=1, overwrite=True))
    assert {r["pixels"].shape for r in tf_records(out)} == {(48, 64, 3)}


def test_cifar10_python_and_binary_give_identical_shards(tmp_path: Path):
    py_out, bin_out = tmp_path / "py", tmp_path / "bin"
    pack(make_cifar10_python(tmp_path / "cifar-py"), py_out, PackOptions(workers=2, encode="raw"))
    pack(make_cifar10_binary(tmp_path / "cifar-bin"), bin_out, PackOptions(workers=2, encode="raw"))
    assert shard_files(py_out) == shard_files(bin_out)
    index = _index(py_out)
    assert index["name"] == "cifar10"
    assert {s: v["num_records"] for s, v in index["splits"].items()} == {"train": 100, "test": 20}
    assert index["classes"][0] == "airplane"


@pytest.mark.heavy
def test_cifar_pixels_and_labels_survive(tmp_path: Path):
    import pickle

    src = make_cifar10_python(tmp_path / "cifar", per_batch=10, batches=1)
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1))  # keep: CIFAR becomes PNG
    batch = pickle.loads((src / "data_batch_1").read_bytes(), encoding="bytes")
    records = {r["key"].decode(): r for r in tf_records(out, "train")}
    assert len(records) == 10
    for i in range(10):
        record = records[f"data_batch_1:{i}"]
        expected = batch[b"data"][i].reshape(3, 32, 32).transpose(1, 2, 0)
        assert record["format"] == b"png"
        assert np.array_equal(record["pixels"], expected)
        assert record["label"] == batch[b"labels"][i]


@pytest.mark.heavy
def test_cifar100_packs_fine_and_coarse_labels(tmp_path: Path):
    out = tmp_path / "out"
    pack(make_cifar100_python(tmp_path / "c100"), out, PackOptions(workers=1, encode="raw"))
    index = _index(out)
    assert index["name"] == "cifar100" and len(index["classes"]) == 100
    coarse = index["features"]["coarse_label"]
    assert coarse["dtype"] == "int64" and coarse["classes"] == [f"coarse{i}" for i in range(20)]
    for record in tf_records(out):
        assert record["coarse_label"] == record["label"] // 5


def _bad_inputs(src: Path) -> None:
    good = (src / "cat" / "img_000.jpg").read_bytes()
    (src / "cat" / "empty.jpg").write_bytes(b"")
    (src / "cat" / "notes.png").write_bytes(b"this is not an image at all")
    (src / "dog" / "truncated.jpg").write_bytes(good[: len(good) // 2])


@pytest.mark.heavy
def test_bad_images_are_skipped_and_named(tree: Path, tmp_path: Path):
    _bad_inputs(tree)
    out = tmp_path / "out"
    result = pack(tree, out, PackOptions(workers=2, shards=2))
    index = _index(out)
    reasons = {s["key"]: s["reason"] for s in index["skipped"]}
    assert set(reasons) == {"cat/empty.jpg", "cat/notes.png", "dog/truncated.jpg"}
    assert "empty" in reasons["cat/empty.jpg"]
    assert "not an image" in reasons["cat/notes.png"]
    assert "truncated" in reasons["dog/truncated.jpg"]
    assert result.num_records == 16 and result.num_skipped == 3
    assert len(tf_records(out)) == 16  # TensorFlow decodes everything that was kept


@pytest.mark.parametrize("workers", [1, 2])
def test_on_error_fail_stops_without_index_or_partials(tree: Path, tmp_path: Path, workers: int):
    _bad_inputs(tree)
    out = tmp_path / "out"
    with pytest.raises(ImageError) as info:
        pack(tree, out, PackOptions(on_error="fail", workers=workers, shards=2))
    assert info.value.key in {"cat/empty.jpg", "cat/notes.png", "dog/truncated.jpg"}
    assert not (out / "index.json").exists()
    left = [p.name for p in out.iterdir()] if out.exists() else []  # empty: OUT is removed
    assert not [name for name in left if name.endswith((".partial", ".progress", ".lock"))]


def test_decompression_bomb_is_refused_by_header(tmp_path: Path):
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", 50000, 50000, 8, 2, 0, 0, 0)  # claims 2.5 gigapixels
    bomb = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 1000))
    )
    bomb += chunk(b"IEND", b"")
    src = make_tree(tmp_path / "src", {"a": 2})
    (src / "a" / "bomb.png").write_bytes(bomb)
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1))
    (skip,) = _index(out)["skipped"]
    assert skip["key"] == "a/bomb.png" and "max-pixels" in skip["reason"]


def test_bad_src_and_out(tmp_path: Path):
    with pytest.raises(SourceError, match="no such folder"):
        pack(tmp_path / "missing", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no images found"):
        pack(tmp_path / "empty", tmp_path / "out")
    assert not (tmp_path / "out").exists()  # a refused run leaves no OUT behind
    src = make_tree(tmp_path / "src", {"a": 1})
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        pack(src, tmp_path / "file")


def test_out_with_another_dataset_needs_overwrite(tmp_path: Path):
    first = make_tree(tmp_path / "first", {"a": 3})
    second = make_tree(tmp_path / "second", {"b": 4}, seed=50)
    out = tmp_path / "out"
    pack(first, out, PackOptions(workers=1, shards=3))
    (out / "my-notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="overwrite=True") as caught:
        pack(second, out, PackOptions(workers=1))
    assert f"{out}: was packed with other options (name='second' (the journal's: 'first')" in str(
        caught.value
    )  # what differs, as a refused --resume says it
    with pytest.raises(OutputError, match=r"shards=2 \(the journal's: 3\)\); pass overwrite="):
        pack(first, out, PackOptions(workers=1, shards=2))
    assert _index(out)["name"] == "first"  # untouched
    pack(first, out, PackOptions(workers=1, shards=3))  # the same job again is fine
    pack(second, out, PackOptions(workers=1, shards=1, overwrite=True))
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert names == ["README.md", "contents.json", "croissant.json", "dataset_info.json",
                     "features.json", "index.json",
                     "label.labels.txt", "my-notes.txt",
                     "second-train.tfrecord-00000-of-00001"]  # fmt: skip


def test_an_index_json_of_yours_is_named_not_taken_for_a_dataset(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"a": 2})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "index.json").write_text("my own notes")
    with pytest.raises(OutputError) as caught:
        pack(src, tmp_path / "out", PackOptions(workers=1))
    assert str(caught.value) == (
        f"{tmp_path}/out/index.json: not an index shardpack can read; pass overwrite=True to "
        "replace it, or choose another output folder"
    )
    assert (tmp_path / "out" / "index.json").read_text() == "my own notes"
    # beside a journal of a run (its index spoiled since): the index is what the line names
    pack(src, tmp_path / "run", PackOptions(workers=1))
    (tmp_path / "run" / "index.json").write_text("{")
    with pytest.raises(OutputError, match=r"run/index.json: not an index shardpack can read"):
        pack(src, tmp_path / "run", PackOptions(workers=1))


def test_a_failed_overwrite_leaves_nothing_of_the_old_dataset(tmp_path: Path):
    """--overwrite replaces the earlier dataset as the run starts, index first: a run that
    then fails leaves neither its index and TFDS metadata (TFDS read the old dataset from
    them) nor its shards that no index or journal lists any more (they stayed for good), nor
    its card and croissant.json but for what the user wrote in them."""
    first = make_tree(tmp_path / "first", {"a": 3})
    second = make_tree(tmp_path / "second", {"b": 4}, seed=50)
    (second / "b" / "img_000.jpg").write_bytes(b"not a jpeg")
    out = tmp_path / "out"
    pack(first, out, PackOptions(workers=1, shards=3))
    (out / "my-notes.txt").write_text("mine")
    with pytest.raises(ImageError):
        pack(second, out, PackOptions(workers=1, shards=1, overwrite=True, on_error="fail"))
    assert sorted(p.name for p in out.iterdir()) == [".shardpack.journal", "my-notes.txt"]
    pack(first, out, PackOptions(workers=1, shards=3, overwrite=True))
    card = (out / "README.md").read_text().replace("---\n", "---\nlicense: mit\n", 1)
    (out / "README.md").write_text(card + "Our words.\n")  # a license and text of the user's
    (out / "croissant.json").write_text('{"name": "first", "license": "mit"}')
    with pytest.raises(ImageError):
        pack(second, out, PackOptions(workers=1, shards=1, overwrite=True, on_error="fail"))
    assert json.loads((out / "croissant.json").read_text()) == {"license": "mit"}
    card = (out / "README.md").read_text()
    assert "license: mit\n---\n" in card and card.endswith("\n\nOur words.\n")
    assert "\ndataset_info:" not in card and "first" not in card
    pack(second, out, PackOptions(workers=1, shards=1, overwrite=True, resume=True))
    assert _index(out)["name"] == "second" and len(_index(out)["splits"]["train"]["shards"]) == 1
    assert json.loads((out / "croissant.json").read_text())["license"] == "mit"
    card = (out / "README.md").read_text()
    assert "license: mit\ndataset_info:" in card and card.endswith("-->\n\nOur words.\n")


@pytest.mark.parametrize("workers", [1, 2])
def test_pack_imports_neither_tensorflow_nor_distributed(tree: Path, tmp_path: Path, workers):
    """workers=1 runs the worker code in this very process, so it proves the workers too."""
    import subprocess
    import sys

    code = (
        "import sys; from shardpack.packing.packer import pack; "
        "from shardpack.options import PackOptions;"
        f"pack({str(tree)!r}, {str(tmp_path / 'o')!r}, PackOptions(workers={workers}));"
        "print('tensorflow' in sys.modules, 'distributed' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_check_decode_catches_what_the_header_check_cannot(tmp_path: Path):
    import struct
    import zlib

    src = make_tree(tmp_path / "src", {"a": 2}, ext=".png")
    data = (src / "a" / "img_000.png").read_bytes()
    start = data.index(b"IDAT") - 4
    (length,) = struct.unpack(">I", data[start : start + 4])
    garbage = bytes(range(256)) * (length // 256 + 1)
    body = b"IDAT" + garbage[:length]
    damaged = (
        data[: start + 4] + body + struct.pack(">I", zlib.crc32(body)) + data[start + 12 + length :]
    )
    (src / "a" / "img_000.png").write_bytes(damaged)  # valid chunks and CRCs, garbage pixels
    pack(src, tmp_path / "header", PackOptions(workers=1))
    assert _index(tmp_path / "header")["skipped"] == []
    pack(src, tmp_path / "decode", PackOptions(workers=1, check="decode"))
    (skip,) = _index(tmp_path / "decode")["skipped"]
    assert skip["key"] == "a/img_000.png" and "decode" in skip["reason"]


def test_progress_callback_counts_up_to_the_total(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"a": 30, "b": 30})
    seen: list[tuple[int, int]] = []
    pack(
        src,
        tmp_path / "out",
        PackOptions(workers=2, shards=4),
        progress=lambda d, t: seen.append((d, t)),
    )
    assert seen[0] == (0, 60) and seen[-1] == (60, 60)  # from the workers' start
    done = [d for d, _ in seen]
    assert done == sorted(done) and all(t == 60 for _, t in seen)


def test_a_folder_of_someone_elses_files_is_left_alone(tree: Path, tmp_path: Path):
    """A TFDS folder (no index.json of ours) holds files under names pack would write."""
    out = tmp_path / "tfds"
    out.mkdir()
    theirs = {"dataset_info.json": "{}", "label.labels.txt": "x\n",
              "mnist-train.tfrecord-00000-of-00001": "data", "notes.txt": "mine"}  # fmt: skip
    for name, text in theirs.items():
        (out / name).write_text(text)
    with pytest.raises(OutputError, match=r"was not written by shardpack \(2 such files\)"):
        pack(tree, out, PackOptions(workers=1, shards=1))
    mine = {p.name: p.read_text() for p in out.iterdir() if p.name != ".shardpack.lock"}
    assert mine == theirs  # nothing of theirs touched
    pack(tree, out, PackOptions(workers=1, shards=1, overwrite=True))
    assert (out / "mnist-train.tfrecord-00000-of-00001").read_text() == "data"  # not ours: kept
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "label.labels.txt").read_text() == "cat\ndog\n"  # replaced, as asked


def test_stale_shards_are_removed_only_if_our_index_listed_them(tree: Path, tmp_path: Path):
    out = tmp_path / "out"
    pack(tree, out, PackOptions(workers=1, shards=3))
    (out / "src-train.tfrecord-00009-of-00010").write_text("not listed anywhere")
    pack(tree, out, PackOptions(workers=1, shards=2, overwrite=True))
    shards = sorted(p.name for p in out.glob("*.tfrecord-*"))
    assert shards == ["src-train.tfrecord-00000-of-00002", "src-train.tfrecord-00001-of-00002",
                      "src-train.tfrecord-00009-of-00010"]  # fmt: skip


@pytest.mark.heavy
def test_max_pixels_applies_to_every_format_with_a_size_in_its_header(tmp_path: Path):
    src = tmp_path / "src"
    for ext in (".jpg", ".png", ".bmp", ".webp"):
        write_image(src / "a" / f"big{ext}", make_image(1, height=40, width=60))
    write_image(src / "a" / "small.bmp", make_image(2, height=8, width=8))
    out = tmp_path / "out"
    result = pack(src, out, PackOptions(workers=1, max_pixels=100))
    reasons = {s["key"]: s["reason"] for s in _index(out)["skipped"]}
    assert set(reasons) == {f"a/big{ext}" for ext in (".jpg", ".png", ".bmp", ".webp")}
    assert all("60x40 pixels is over --max-pixels 100" in r for r in reasons.values())
    assert result.num_records == 1 and tf_records(out)[0]["format"] == b"png"  # BMP -> PNG
    with pytest.raises(ImageError, match=r"; raise max_pixels= if you trust the image, or pass o"):
        pack(src, tmp_path / "fail", PackOptions(workers=1, max_pixels=100, on_error="fail"))


@pytest.mark.heavy
def test_file_names_that_are_not_utf8_keep_their_bytes(tmp_path: Path):
    import os

    cls = tmp_path / "src" / "cafe"
    write_image(Path(os.fsdecode(bytes(cls) + b"/\xff.jpg")), make_image(1))  # Latin-1 bytes
    (Path(os.fsdecode(bytes(cls) + b"/\xfe.jpg"))).write_bytes(b"")  # skipped: its name in JSON
    out = tmp_path / "out"
    result = pack(tmp_path / "src", out, PackOptions(workers=1))
    assert result.num_records == 1 and result.num_skipped == 1
    assert os.fsencode(_index(out)["skipped"][0]["key"]) == b"cafe/\xfe.jpg"
    (record,) = tf_records(out)
    assert record["key"] == b"cafe/\xff.jpg"  # the key holds the name's own bytes


def test_out_inside_src_is_refused(tree: Path):
    before = sorted(tree.rglob("*"))
    with pytest.raises(OutputError, match="is inside SRC"):
        pack(tree, tree / "shards", PackOptions(workers=1))
    said = f"{tree}: is SRC itself, where"  # said so, not "inside"
    with pytest.raises(OutputError, match=f"^{re.escape(said)}"):
        pack(tree, f"{tree}/./", PackOptions(workers=1))
    assert sorted(tree.rglob("*")) == before  # refused before anything was written


def test_out_above_a_src_folder_is_refused_naming_a_folder_of_its_own(tmp_path: Path, tree: Path):
    """`pack flowers .` (OUT the folder above SRC) wrote the shards, index.json and README.md
    beside the dataset's folder, among the user's files, without a word: OUT holds SRC's images
    below its first folders, which the swapped-SRC/OUT check does not look at."""
    before = sorted(tmp_path.rglob("*"))
    for out in (tmp_path, tmp_path.parent):
        said = (f"{out}: holds SRC {tree}, so the shards, index.json and README.md would land "
                "beside your dataset's folder; choose an output folder of their own, such as "
                f"{tree}-shards")  # fmt: skip
        with pytest.raises(OutputError, match=f"^{re.escape(said)}$"):
            pack(tree, out, PackOptions(workers=1))
    assert sorted(tmp_path.rglob("*")) == before  # refused before anything was written
    lists = tmp_path / "lists"  # a manifest SRC in OUT, its image elsewhere: no folder beside
    lists.mkdir()
    (lists / "labels.csv").write_text(f"path,label\n{tree / 'cat/img_000.jpg'},cat\n")
    assert pack(lists / "labels.csv", lists, PackOptions(workers=1)).num_records == 1


def test_out_holding_images_is_refused_as_src_and_out_swapped(tmp_path: Path, tree: Path):
    packed = tmp_path / "packed"
    pack(tree, packed, PackOptions(workers=1))
    before = sorted(tree.rglob("*"))
    for swapped in (tree, tree / "cat"):  # the class folders, or one class folder
        with pytest.raises(OutputError, match=f"^{re.escape(str(swapped))}: holds images "
                           r"\(.*\.(jpg|png), \.\.\.\), .*other way round"):  # fmt: skip
            pack(packed, swapped, PackOptions(workers=1, overwrite=True))
    assert sorted(tree.rglob("*")) == before  # nothing written among them: no index.json
    other = tmp_path / "other"  # a folder of other files takes the shards, as it did
    (other / "notes").mkdir(parents=True)
    (other / "notes" / "a.txt").write_text("x")
    assert pack(packed, other, PackOptions(workers=1)).num_records == 16
    assert pack(packed, other, PackOptions(workers=1)).num_records == 16  # and again


def _plan(n: int, size: int, options: PackOptions, cores: int):
    from shardpack.packing.plan import make_plan
    from shardpack.schema import Schema
    from shardpack.sources import Dataset, Item

    items = tuple(Item(key=f"a/{i:05d}.jpg", label=0, path=f"a/{i:05d}.jpg", size=size)
                  for i in range(n))  # fmt: skip
    dataset = Dataset("folder", "/src", Schema.build(("a",)), {"train": items})
    return make_plan(dataset, "d", options, cores)


def _not_asked() -> float:
    raise AssertionError("the load was looked up for a choice it cannot change")


def test_default_workers_follow_the_work_and_the_cores_free():
    from shardpack.packing.plan import choose_workers

    light = PackOptions()  # 1,000 small files passed through: ~0.02 s of work
    work = planned_work(_plan(1000, 1000, light, 2), light)
    assert choose_workers(*work, light, 2, _not_asked) == 1
    heavy = PackOptions(encode="png")  # 400 photos to PNG: ~4 s of work
    plan = _plan(400, 100_000, heavy, 2)
    assert len(plan.shards) == 2  # planned for the cores, whatever the load
    assert choose_workers(*planned_work(plan, heavy), heavy, 2, lambda: 0.2) == 2
    # Others keeping 1.6 cores busy share the cores with us: 2 workers get 2 x 2/3.6 of a
    # core, one worker 2/2.6: the 4 s job still divides. A 0.5 s job does not, beside one busy
    # core: its 2 workers' 2/3 of a core each no longer pays for the pool.
    assert choose_workers(*planned_work(plan, heavy), heavy, 2, lambda: 1.6) == 2
    medium = _plan(50, 100_000, heavy, 2)
    assert len(medium.shards) == 2
    assert choose_workers(*planned_work(medium, heavy), heavy, 2, lambda: 0.2) == 2
    assert choose_workers(*planned_work(medium, heavy), heavy, 2, lambda: 1.0) == 1
    explicit = PackOptions(encode="png", workers=3)
    work = planned_work(_plan(10, 10, explicit, 3), explicit)
    assert choose_workers(*work, explicit, 2, _not_asked) == 3


def test_default_run_of_a_small_folder_stays_in_process(tree: Path, tmp_path: Path):
    result = pack(tree, tmp_path / "out", PackOptions())
    assert result.index.stats.workers == 1


_FAULTS_AFTER = """
import resource, sys
if sys.argv[1:]:
    from shardpack.options import PackOptions
    from shardpack.packing.packer import pack

    pack(sys.argv[1], sys.argv[2], PackOptions(encode="jpeg", workers=1))
faults = []
for _ in range(3):  # 24 MiB written: a decoded 8-megapixel photo
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = b"x" * (24 << 20)
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(faults[1])
"""


def test_a_pack_keeps_freed_memory_for_the_next_image(tree: Path, tmp_path: Path):
    # glibc's malloc gave each image's buffers back and page-faulted them in again (3,000
    # photos re-encoded: 354,000 faults, 1 s of system time); after a pack, the process (and
    # so the workers it forks) reuses a freed block: the second 24 MiB costs no page faults.
    def second_block_faults(*args: str) -> int:
        run = subprocess.run([sys.executable, "-c", _FAULTS_AFTER, *args], capture_output=True,
                             text=True, check=True)  # fmt: skip
        return int(run.stdout)

    assert second_block_faults() > 3000  # glibc's default: this is what the test can tell
    assert second_block_faults(str(tree), str(tmp_path / "out")) < 300


def test_packed_items_give_back_the_items_they_were_made_from():
    from shardpack.packing.forkpool import PACKED_CHUNK, _PackedItems
    from shardpack.sources import Item

    items = tuple(
        Item(f"k{i}", (i, i + 1) if i % 3 else None, f"/abs/p{i}", i, i if i % 2 else None,
             {"caption": f"c{i}", "box": (0.5, 1.0), "raw": b"\x00"} if i % 5 else {})
        for i in range(PACKED_CHUNK * 2 + 7)
    )  # fmt: skip
    for given in (items, items[:1], ()):
        packed = _PackedItems(given)
        assert len(packed) == len(given)
        assert tuple(packed) == given
        assert tuple(packed) == given  # iterated again: the same
        assert all(type(item) is Item for item in packed)


def test_the_scan_reports_to_a_callback_given_only(tmp_path: Path, monkeypatch):
    """pack(scan_progress=...) hears the running count of files listed, a manifest's rows too;
    without it nothing is printed."""
    from shardpack.sources import scanprogress

    monkeypatch.setattr(scanprogress, "EVERY", 10)
    src = make_tree(tmp_path / "src", {"a": 15, "b": 15})
    heard: list[int] = []
    pack(src, tmp_path / "out", PackOptions(workers=1), scan_progress=heard.append)
    assert heard and heard == sorted(heard) and heard[-1] <= 30, heard
    rows = [{"image": f"src/a/img_{i:03d}.jpg"} for i in range(15)]
    write_csv(tmp_path / "m.csv", rows)
    heard.clear()
    pack(tmp_path / "m.csv", tmp_path / "out2", PackOptions(workers=1), scan_progress=heard.append)
    assert heard == [15], heard


def test_a_name_too_long_for_shard_file_names_is_cut_or_refused_before_a_shard(tmp_path):
    """SRC's folder of 240 characters gave the dataset its name, and the run failed at its
    first shard's file ('File name too long'); a --name as long likewise. The name SRC gives
    is cut to MAX_NAME_CHARS; a longer --name is refused, with one to pass."""
    src = make_tree(tmp_path / ("n" * 240), {"cat": 2})
    result = pack(src, tmp_path / "out", PackOptions(workers=1))
    assert result.index.name == "n" * MAX_NAME_CHARS and result.num_records == 2
    with pytest.raises(OptionError, match=f"at most {MAX_NAME_CHARS} characters .* got 300; "):
        PackOptions(name="n" * 300)


def test_a_piped_progress_line_rates_the_images_written(tmp_path: Path, monkeypatch):
    """pack's first report came from the poller after its first interval, or at the end: a
    run whose only report past the bar's second was its last said `packing: 60/60 images, 0
    images/s, ETA unknown`. It now reports 0 as the workers start: every line after that
    rates the images written (here a line at every report: the bar's delay and interval 0)."""
    import shardpack.console

    src = make_tree(tmp_path / "src", {"a": 30, "b": 30})
    monkeypatch.setattr(shardpack.console, "_BAR_DELAY_S", 0)
    monkeypatch.setattr(shardpack.console, "_LINE_EVERY_S", 0)
    done = run_cli("pack", str(src), str(tmp_path / "out"), "--workers", "1")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("packing:")]
    said = [re.fullmatch(r"packing: (\d+)/60 images, ([\d,]+) images/s, ETA (.+)", line)
            for line in lines]  # fmt: skip
    assert said[0].groups() == ("0", "0", "unknown") and said[-1][1] == "60", lines
    assert all(int(m[2].replace(",", "")) > 0 and m[3] != "unknown" for m in said[1:]), lines


def test_a_resume_reports_its_kept_shards_done_as_the_workers_start(tmp_path: Path):
    """The bar rates from the first report: a resume's must hold the shards it kept, or their
    images would count as written this run (the rate and the ETA of the new work only)."""
    src, out = make_tree(tmp_path / "src", {"a": 30, "b": 30}), tmp_path / "out"
    pack(src, out, PackOptions(workers=1, shards=4))
    first = _index(out)["splits"]["train"]["shards"][0]
    (out / first["file"]).unlink()
    (out / "index.json").unlink()  # a run stopped before its index: the journal stays
    seen: list[tuple[int, int]] = []
    pack(src, out, PackOptions(workers=1, shards=4, resume=True),
         progress=lambda d, t: seen.append((d, t)))  # fmt: skip
    assert seen[0] == (60 - first["num_records"], 60) and seen[-1] == (60, 60)
