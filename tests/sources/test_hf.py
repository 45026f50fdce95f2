"""Converting what users already hold: Hugging Face Parquet datasets (written here by `datasets`
itself, compared with what datasets.load_dataset reads) and shardpack's own output, packed into
each container and read back by its own readers (TensorFlow, Grain, webdataset); determinism,
--resume, verify, and the one-line refusals."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest

import shardpack
from shardpack.containers import get_container
from shardpack.errors import RecordError, SourceError
from shardpack.options import PackOptions
from shardpack.sources import scan
from shardpack.storage import storage_at
from tests import helpers
from tests.helpers import (
    READ_WEBDATASET,
    image,
    make_tree,
    our_examples,
    peer_examples,
    run_json,
    shard_files,
    write_parquet,
)

datasets = helpers.lazy_import("datasets")

FORMATS = ("tfrecord", "array_record", "webdataset")
CLASSES = ["cat", "dog", "eel"]
SKIPPED = (3, 5, 6)  # the rows of _hf_dataset that are not packed


def _png(seed: int) -> bytes:
    return cv2.imencode(".png", image(seed, 10 + seed % 5, 12))[1].tobytes()


def _hf_dataset(n: int, seed: int = 0):
    """n rows of every kind of column; row 3 has no image, row 5 bytes that are no image and
    row 6 no label (SKIPPED)."""
    from datasets import ClassLabel, Features, Image, List, Value

    images = [{"bytes": _png(seed + i), "path": f"img{i}.png"} for i in range(n)]
    images[3] = None
    images[5] = {"bytes": b"not an image", "path": None}
    features = Features({
        "image": Image(),
        "label": ClassLabel(names=CLASSES),
        "caption": Value("string"),
        "score": Value("float32"),
        "count": Value("int32"),
        "tags": List(Value("string")),
        "boxes": List(List(Value("float32"), length=4)),
        "points": List(List(Value("int64"))),
        "thumb": Value("binary"),
    })  # fmt: skip
    return datasets.Dataset.from_dict({
        "image": images,
        "label": [(seed + i) % 3 if i != 6 else None for i in range(n)],
        "caption": [f"a photo {i}" for i in range(n)],
        "score": [i / 3 for i in range(n)],
        "count": [i * 7 for i in range(n)],
        "tags": [["x", "y"][: i % 3] for i in range(n)],
        "boxes": [[[0.1, 0.2, 0.5, 0.6 + i / 100]] * (i % 3) for i in range(n)],
        "points": [[[i, i + 1]] * (i % 2) for i in range(n)],
        "thumb": [bytes([i, 0, 255]) for i in range(n)],
    }, features=features)  # fmt: skip


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    """A Hub-layout dataset: data/{split}-00000-of-00001.parquet, row groups of 4 rows."""
    root = tmp_path_factory.mktemp("hf") / "pets"
    (root / "data").mkdir(parents=True)
    _hf_dataset(14).to_parquet(root / "data/train-00000-of-00001.parquet", batch_size=4)
    _hf_dataset(7, seed=50).to_parquet(root / "data/test-00000-of-00001.parquet", batch_size=4)
    return root


def _records(out: Path, split: str) -> list[dict]:
    """A split's records, in the order of their rows (keys end in the row number)."""

    def row(record: dict) -> tuple[str, int]:
        file, _, number = record["key"].rpartition(":")
        return file, int(number)

    return sorted(shardpack.iter_examples(out, split), key=row)


def _as_loaded(folder: Path, split: str) -> list[dict]:
    """What datasets.load_dataset reads for the split, the image as its stored bytes."""
    from datasets import Image

    ds = datasets.load_dataset(str(folder), split=split)
    return list(ds.cast_column("image", Image(decode=False)))


def _check_like_load_dataset(out: Path, folder: Path) -> None:
    index = json.loads((out / "index.json").read_text())
    loaded = datasets.load_dataset(str(folder))
    assert index["classes"] == loaded["train"].features["label"].names == CLASSES
    assert set(index["splits"]) == set(loaded)
    for split in loaded:
        expected = [(i, row) for i, row in enumerate(_as_loaded(folder, split))
                    if i not in SKIPPED]  # fmt: skip
        records = _records(out, split)
        assert [int(r["key"].rpartition(":")[2]) for r in records] == [i for i, _ in expected]
        for record, (_, row) in zip(records, expected, strict=True):
            assert record["image"] == row["image"]["bytes"]  # untouched under --encode keep
            assert record["label"] == row["label"]
            assert record["caption"] == row["caption"] and record["count"] == row["count"]
            assert record["score"] == pytest.approx(row["score"])
            assert record["tags"] == row["tags"] and record["thumb"] == row["thumb"]
            np.testing.assert_allclose(record["boxes"], np.reshape(row["boxes"], (-1, 4)))
            np.testing.assert_array_equal(record["points"], np.reshape(row["points"], (-1, 2)))
    skipped = {s["key"]: s["reason"] for s in index["skipped"]}
    name = "data/train-00000-of-00001.parquet"
    assert skipped[f"{name}:3"] == f"{name} row 3: no image (neither bytes nor a path)"
    assert "not an image" in skipped[f"{name}:5"]
    assert skipped[f"{name}:6"] == f"{name} row 6: no label"


# TensorFlow and TFDS read the TFRecords (Grain the ArrayRecords, webdataset the tars).
@pytest.mark.parametrize("fmt", [pytest.param("tfrecord", marks=pytest.mark.heavy), *FORMATS[1:]])
def test_hf_folder_packs_into_each_container_as_load_dataset_reads_it(hf_folder, tmp_path, fmt):
    out = tmp_path / "out"
    result = shardpack.pack(hf_folder, out, PackOptions(workers=2, shards=2, format=fmt))
    assert result.num_records == 14 + 7 - 2 * len(SKIPPED)
    index = json.loads((out / "index.json").read_text())
    assert index["source"] == "hf" and index["name"] == "pets"
    assert index["features"]["boxes"] == {"dtype": "float32", "shape": [-1, 4]}
    assert index["features"]["tags"] == {"dtype": "bytes", "shape": [-1], "text": True}
    _check_like_load_dataset(out, hf_folder)
    assert shardpack.verify(out, decode=True).ok
    summary = shardpack.describe(out)
    assert summary["source"] == "hf" and summary["num_skipped"] == 2 * len(SKIPPED)
    assert summary["splits"]["train"]["samples"][0]["class"] in CLASSES
    sheet = shardpack.make_preview(out, tmp_path / "sheet.png", n=8)
    assert cv2.imread(sheet) is not None  # boxes drawn from the [-1, 4] column
    # The container's own readers read every feature alike (and so as load_dataset does).
    assert peer_examples(out) == our_examples(out)
    if fmt == "tfrecord":
        import tensorflow_datasets as tfds

        by_key = {r["key"]: r for r in _records(out, "train")}
        builder = tfds.builder_from_directory(str(out))
        assert builder.info.features["label"].names == CLASSES
        read = tfds.as_numpy(builder.as_dataset(split="train", shuffle_files=False))
        assert sorted((int(r["label"]), r["caption"].decode()) for r in read) == sorted(
            (r["label"], r["caption"]) for r in by_key.values()
        )


def test_hf_is_deterministic_across_worker_counts_and_resumes(hf_folder, tmp_path):
    outs = []
    for workers in (1, 2):
        outs.append(tmp_path / f"out{workers}")
        shardpack.pack(hf_folder, outs[-1], PackOptions(workers=workers, shards=3, source="hf"))
    assert shard_files(outs[0]) == shard_files(outs[1])
    _resumes(hf_folder, outs[1], PackOptions(workers=2, shards=3, source="hf"))


def _resumes(src: Path, out: Path, options: PackOptions) -> None:
    """A run stopped before its last shard (no index, one shard gone) resumes to the same
    output, keeping the shards it finished."""
    whole = shard_files(out)
    names = sorted(whole)
    kept = os.stat(out / names[0]).st_ino
    (out / "index.json").unlink()
    (out / names[-1]).unlink()
    shardpack.pack(src, out, PackOptions(**{**options.__dict__, "resume": True}))
    assert shard_files(out) == whole
    assert os.stat(out / names[0]).st_ino == kept
    assert shardpack.verify(out).ok


def test_hf_warns_when_shuffled_images_outgrow_what_a_worker_keeps(hf_folder, monkeypatch):
    from shardpack.sources import hf

    monkeypatch.setattr(hf, "KEPT_GROUP_BYTES", 1000)
    (warning,) = scan(hf_folder).warnings
    assert "the files are read up to once per shard; --no-shuffle reads them once" in warning
    assert scan(hf_folder, PackOptions(shuffle=False)).warnings == ()


def test_hf_split_folders_parquet_file_and_path_rows(tmp_path, monkeypatch):
    from datasets import ClassLabel, Features, Image

    folder = tmp_path / "split_folders"
    for split, seed in (("train", 0), ("validation", 30)):
        (folder / split).mkdir(parents=True)
        _hf_dataset(8, seed).to_parquet(folder / split / "part-0.parquet")
    _check_like_load_dataset_splits(folder, ("train", "validation"))
    # A config's folder above them (the Hub's {config}/{split}/...), which was not found:
    # read as `datasets` reads it; a second config's beside it, which `datasets` would mix
    # into the same splits, refused naming both and the fix.
    configs = tmp_path / "configs"
    configs.mkdir()
    folder.rename(configs / "plain")
    _check_like_load_dataset_splits(configs, ("train", "validation"))
    (configs / "small" / "train").mkdir(parents=True)
    _hf_dataset(8).to_parquet(configs / "small" / "train" / "0000.parquet")
    with pytest.raises(
        SourceError,
        match=r"holds configs 'plain', 'small' in folders of their "
        r"own .* pass one config's folder as SRC \(.*/configs/plain\)$",
    ):
        scan(configs)
    # One file as SRC; a row holding only a path reads the file beside it; one climbing out
    # of SRC's folder is skipped.
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.png").write_bytes(_png(1))
    (tmp_path / "outside.png").write_bytes(_png(2))
    rows = {"image": [{"bytes": None, "path": "a.png"}, {"bytes": None, "path": "../outside.png"},
                      {"bytes": _png(3), "path": None}], "label": [0, 1, 0]}  # fmt: skip
    features = Features({"image": Image(), "label": ClassLabel(names=["a", "b"])})
    monkeypatch.chdir(tmp_path / "one")  # where datasets looks for the paths it is given
    datasets.Dataset.from_dict(rows, features=features).to_parquet(tmp_path / "one/x.parquet")
    out = tmp_path / "out"
    shardpack.pack(tmp_path / "one/x.parquet", out, PackOptions(workers=1, shuffle=False))
    import pyarrow.parquet as pq

    stored = pq.read_table(tmp_path / "one/x.parquet").column("image").to_pylist()
    assert [row["bytes"] is None for row in stored] == [True, True, False]
    records = _records(out, "train")
    assert [r["image"] for r in records] == [_png(1), _png(3)]
    index = json.loads((out / "index.json").read_text())
    assert index["skipped"][0]["key"] == "x.parquet:1"
    assert "not a file under SRC" in index["skipped"][0]["reason"]


def _check_like_load_dataset_splits(folder: Path, splits: tuple[str, ...]) -> None:
    dataset = scan(folder)
    assert dataset.kind == "hf" and sorted(dataset.splits) == sorted(splits)
    for split in splits:
        loaded = datasets.load_dataset(str(folder), split=split)
        # rows 3 and 5 have no image: the workers, which read the images, skip them
        labels = [label for i, label in enumerate(loaded["label"]) if i != 6]
        assert [item.label for item in dataset.splits[split]] == labels


def test_hf_readme_configs_name_the_files_and_splits(tmp_path):
    folder = tmp_path / "card"
    (folder / "stuff").mkdir(parents=True)
    _hf_dataset(8).to_parquet(folder / "stuff/a.parquet")
    _hf_dataset(8, 9).to_parquet(folder / "stuff/b.parquet")
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
        "    path: stuff/a.parquet\n  - split: holdout\n    path: stuff/b*\n---\n# Card\n"
    )
    _check_like_load_dataset_splits(folder, ("train", "holdout"))


def test_hf_pandas_index_column_is_packed_as_datasets_loads_it_and_warned_of(tmp_path):
    """A dataset filtered in pandas and saved (to_parquet, or datasets' from_pandas, which
    writes no pandas metadata) holds `__index_level_0__`; datasets loads it as a column, so it
    is packed as one, with a warning of what it is and how to leave it out."""
    frame = datasets.Dataset.from_dict(
        {"image": [{"bytes": _png(i), "path": f"{i}.png"} for i in range(4)], "n": [3, 1, 2, 0]}
    ).to_pandas()
    kept = frame[frame["n"] != 2]  # rows 0, 1, 3: to_parquet writes the index as a column
    from_pandas = datasets.Dataset.from_pandas
    for name, write in [
        ("pandas", lambda p: kept.to_parquet(p)),
        ("hf", lambda p: from_pandas(kept).cast_column("image", datasets.Image()).to_parquet(p)),
    ]:
        folder = tmp_path / name
        (folder / "data").mkdir(parents=True)
        write(folder / "data/train-00000-of-00001.parquet")
        assert "__index_level_0__" in datasets.load_dataset(str(folder), split="train").features
        dataset = scan(folder)
        assert "__index_level_0__" in dict(dataset.schema.features)
        (said,) = dataset.warnings
        assert said.startswith(
            f"{folder / 'data/train-00000-of-00001.parquet'}: column "
            "'__index_level_0__' holds a pandas DataFrame's index "
        )
        assert said.endswith(
            "to leave it out, write the frame without it (to_parquet(..., "
            "index=False), from_pandas(..., preserve_index=False)), or save "
            "the dataset after datasets' remove_columns"
        )
    kept.to_parquet(tmp_path / "pandas/data/train-00000-of-00001.parquet", index=False)
    assert scan(tmp_path / "pandas").warnings == ()


def test_a_parquet_file_without_an_image_column_is_one_line(tmp_path):
    table = write_parquet(tmp_path / "plain.parquet", [{"x": 1, "name": "a"}])
    with pytest.raises(SourceError) as error:
        scan(table, PackOptions(source="hf"))
    assert str(error.value).startswith(f"{table}: has no image column")
    assert "\n" not in str(error.value)
    (tmp_path / "nothing").mkdir()
    with pytest.raises(SourceError, match="no Parquet files found"):
        scan(tmp_path / "nothing", PackOptions(source="hf"))


def test_hf_bad_layouts_are_one_line(hf_folder, tmp_path, monkeypatch):
    def refused(src: Path, match: str) -> None:
        with pytest.raises(SourceError, match=match) as error:
            scan(src, PackOptions(source="hf"))
        assert "\n" not in str(error.value)

    card = tmp_path / "card"
    (card / "data").mkdir(parents=True)
    _hf_dataset(6).to_parquet(card / "data/train-00000-of-00001.parquet")
    (card / "README.md").write_text("---\nconfigs: [unclosed\n---\n")
    refused(card, "README.md: its YAML header does not parse")
    (card / "README.md").write_text("\n\n---\nlicense: mit\nconfigs: [unclosed\n---\n")
    refused(card, r"README.md: its YAML header does not parse \(.* on line 5\); fix it$")
    (card / "README.md").write_text(
        "---\nconfigs:\n- config_name: a\n  data_files: data/*\n"
        "- config_name: b\n  data_files: data/*\n---\n"
    )
    refused(card, "holds configs a, b and none is the default")
    (card / "README.md").unlink()
    _hf_dataset(6).remove_columns("caption").to_parquet(card / "data/test-00000-of-00001.parquet")
    refused(card, "test-00000-of-00001.parquet: its columns differ from the first file's")
    # classes in another order (not added at the end, as a grown pack's): other labels
    reordered = datasets.ClassLabel(names=CLASSES[::-1])
    _hf_dataset(6).cast_column("label", reordered).to_parquet(
        card / "data/test-00000-of-00001.parquet"
    )
    refused(card, "test-00000-of-00001.parquet: its columns differ from the first file's")
    from shardpack.sources import classlist

    with monkeypatch.context() as patched:
        patched.setattr(classlist, "MAX_CLASSES", 2)
        refused(hf_folder, "column 'label': its ClassLabel names make 3 classes, over the 2")
    from shardpack.sources.tables import parquet_reader

    monkeypatch.setattr(parquet_reader, "MAX_ROW_GROUP_BYTES", 100)
    refused(
        hf_folder,
        "row group 0 holds .* bytes by its footer's sizes and counts \\(over the 100 bytes "
        "limit for one row group\\); write it with smaller row groups \\(datasets: ",
    )
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    refused(tmp_path / "junk.parquet", "junk.parquet: not a readable Parquet file")


def test_a_save_to_disk_folder_says_how_to_write_it_as_parquet_and_that_works(tmp_path):
    """datasets' save_to_disk (Arrow files and JSON) was 'no images found; ... its 7 files have
    none of those (.json 5, .arrow 2): convert the images to one of those formats'."""
    import shlex

    dataset = _hf_dataset(8)
    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": dataset, "test": dataset}).save_to_disk(str(saved))
    for src in (saved, saved / "train"):  # a DatasetDict's folder, or one Dataset's
        with pytest.raises(SourceError) as caught:
            scan(src)
        said = str(caught.value)
        assert said.startswith(f"{src}: no images found; it is a Hugging Face dataset written "
                               "by save_to_disk (Arrow files), which shardpack does not read: "
                               "write it as Parquet, python -c ")  # fmt: skip
        assert said.endswith(f", then pack {src}-parquet")
    code = shlex.split(said.split("write it as Parquet, ")[1].split(", then pack")[0])[2]
    exec(code, {})  # as the message says, without another interpreter's datasets import
    written = scan(f"{src}-parquet")
    assert list(written.splits) == ["train"] and written.num_items == 7  # row 6 has no label


def test_a_card_of_another_kind_of_dataset_leaves_its_folder_to_the_others(tmp_path):
    src = make_tree(tmp_path / "src", {"a": 2, "b": 2})
    (src / "README.md").write_text(  # an ImageFolder's card: its configs name images
        "---\nconfigs:\n- config_name: default\n  data_files: '**/*.jpg'\n---\n"
    )
    assert scan(src).kind == "folder"
    (src / "README.md").write_text("---\n# notes: [a\n---\n")  # a header that is not YAML
    assert scan(src).kind == "folder"
    (src / "train.parquet").write_bytes(b"PAR1 not really")  # a stray file among the classes
    assert scan(src).kind == "folder"


# ---- shardpack's own output --------------------------------------------------------------------


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    """A class-folder tree packed into TFRecords, with a train and a test split."""
    root = tmp_path_factory.mktemp("own")
    src = root / "src"
    make_tree(src / "train", {"cat": 9, "dog": 7})
    make_tree(src / "test", {"cat": 3, "dog": 2}, seed=5)
    out = root / "tfrecord"
    shardpack.pack(src, out, PackOptions(workers=2, shards=2))
    return out


def _all(out: Path) -> dict[str, dict[str, dict]]:
    """split -> key -> record (image bytes, label and the rest), read by shardpack."""
    index = json.loads((out / "index.json").read_text())
    return {s: {r["key"]: r for r in shardpack.iter_examples(out, s)} for s in index["splits"]}


@pytest.mark.heavy  # TensorFlow (and wids, torch) read what it wrote
def test_own_output_converts_between_containers_with_records_kept(packed, tmp_path):
    before = _all(packed)
    index = json.loads((packed / "index.json").read_text())
    out_ar, out_wds, back = tmp_path / "ar", tmp_path / "wds", tmp_path / "back"
    shardpack.pack(packed, out_ar, PackOptions(workers=2, shards=3, format="array_record"))
    shardpack.pack(out_ar, out_wds, PackOptions(workers=2, format="webdataset"))
    shardpack.pack(out_wds, back, PackOptions(workers=2, shards=2, source="shardpack"))
    for out in (out_ar, out_wds, back):
        converted = json.loads((out / "index.json").read_text())
        assert converted["source"] == "shardpack" and converted["name"] == index["name"]
        assert converted["features"] == index["features"]
        assert converted["classes"] == index["classes"]
        assert _all(out) == before
        assert shardpack.verify(out, decode=True).ok
        assert peer_examples(out) == our_examples(packed)  # TensorFlow, Grain, webdataset
    # wids reads the tars by index, across shards.
    by_hash = {_sha(r["image"]): r["label"] for r in before["train"].values()}
    wds_index = json.loads((out_wds / "index.json").read_text())
    tars = [str(out_wds / s["file"]) for s in wds_index["splits"]["train"]["shards"]]
    wids_index = out_wds / f"{index['name']}-train.shardindex.json"
    read = run_json(READ_WEBDATASET, str(wids_index), str(tmp_path / "cache"), *tars)
    assert sorted(read["stored"]) == sorted(by_hash)
    assert sorted(label for label, _ in read["by_index"]) == sorted(by_hash.values())


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_own_raw_output_repacks_its_pixels(tmp_path):
    src = make_tree(tmp_path / "src", {"a": 4, "b": 3})
    raw = tmp_path / "raw"
    shardpack.pack(src, raw, PackOptions(workers=1, encode="raw"))
    out = tmp_path / "out"
    shardpack.pack(raw, out, PackOptions(workers=1, encode="raw", format="array_record"))
    assert _all(out) == _all(raw)


def test_own_output_is_deterministic_across_worker_counts_and_resumes(packed, tmp_path):
    outs = []
    for workers in (1, 2):
        outs.append(tmp_path / f"out{workers}")
        options = PackOptions(workers=workers, shards=3, format="webdataset")
        shardpack.pack(packed, outs[-1], options)
    assert shard_files(outs[0]) == shard_files(outs[1])
    _resumes(packed, outs[1], PackOptions(workers=2, shards=3, format="webdataset"))


def test_an_index_of_another_tool_is_one_line(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "index.json").write_text(json.dumps({"format": "litdata", "chunks": []}))
    run = helpers.cli("pack", str(other), str(tmp_path / "out"), "--source", "shardpack",
                      timeout=120,
                      env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})  # fmt: skip
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert f"{other / 'index.json'}" in lines[0] and "not an index shardpack wrote" in lines[0]
    assert "--source shardpack reads the output folder" in lines[0]
    # Without --source, another tool's index.json among class folders is not ours to refuse.
    make_tree(other, {"a": 2, "b": 2})
    assert scan(other).kind == "folder"


# ---- object storage ----------------------------------------------------------------------------


def test_both_sources_read_from_object_storage_as_from_disk(hf_folder, packed, tmp_path):
    import uuid

    import fsspec

    fs = fsspec.filesystem("memory")
    for local in (hf_folder, packed):
        url = f"memory://bucket-{uuid.uuid4().hex[:12]}/{local.name}"
        for path in sorted(local.rglob("*")):
            if path.is_file():
                fs.pipe_file(f"{url}/{path.relative_to(local).as_posix()}", path.read_bytes())
        try:
            options = PackOptions(workers=1, shards=2, format="webdataset")
            shardpack.pack(
                local, tmp_path / "disk", PackOptions(**{**options.__dict__, "overwrite": True})
            )
            shardpack.pack(
                url, tmp_path / "url", PackOptions(**{**options.__dict__, "overwrite": True})
            )
            assert shard_files(tmp_path / "url") == shard_files(tmp_path / "disk")
        finally:
            fs.rm(url.rpartition("/")[0], recursive=True)


def test_own_gzip_output_repacks_its_records(tmp_path, monkeypatch):
    src = make_tree(tmp_path / "src", {"a": 5, "b": 4})
    gzipped, out = tmp_path / "gzip", tmp_path / "out"
    shardpack.pack(src, gzipped, PackOptions(workers=1, shards=2, compression="gzip"))
    shardpack.pack(gzipped, out, PackOptions(workers=2, shards=3, format="webdataset"))
    assert _all(out) == _all(gzipped)  # each record read at random from its shard's copy
    from shardpack.containers import tfrecord
    from shardpack.sources import repack

    monkeypatch.setattr(repack, "KEEP_SHARDS", 1)  # the 2 shards outgrow what a worker keeps
    (warning,) = scan(gzipped).warnings
    assert "each shard draws from all 2 gzip shards and a worker keeps 1 decompressed" in warning
    assert warning.endswith("--no-shuffle decompresses each once (shuffle when reading instead)")
    assert scan(gzipped, PackOptions(shuffle=False)).warnings == ()

    # Bounded: a shard over the index's size, or inflating past what deflate can, is refused.
    shard = json.loads((gzipped / "index.json").read_text())["splits"]["train"]["shards"][0]
    container, at = get_container("tfrecord"), storage_at(gzipped)
    with pytest.raises(RecordError, match=f"{shard['file']}: .* index.json says 100 "):
        container.open(at, shard["file"], "gzip", num_bytes=100)
    monkeypatch.setattr(tfrecord, "_MAX_INFLATION", 1)
    with pytest.raises(RecordError, match=f"{shard['file']}.*: inflates past what gzip can"):
        container.open(at, shard["file"], "gzip", num_bytes=shard["num_bytes"])


def test_own_output_with_a_miscounted_shard_is_one_line(packed, tmp_path):
    miscounted = tmp_path / "miscounted"
    shutil.copytree(packed, miscounted)
    index = json.loads((miscounted / "index.json").read_text())
    shard = index["splits"]["train"]["shards"][0]
    shard["num_records"] += 1
    (miscounted / "index.json").write_text(json.dumps(index))
    with pytest.raises(SourceError, match=f"{shard['file']}: holds .* records, the index says"):
        scan(miscounted)


@pytest.mark.slow
@pytest.mark.long  # a folder on Dask is make test's (tests/packing/test_cluster.py)
def test_every_source_packs_alike_on_a_dask_cluster(hf_folder, packed, tmp_path):
    pytest.importorskip("distributed")
    helpers.needs("webdataset")
    from shardpack.packing.cluster import dask_client

    # shardpack's TFRecord output is also a TFDS prepared directory (its dataset_info.json).
    sources = {"hf": hf_folder, "shardpack": packed, "tfds": packed,
               "webdataset": helpers.write_tars(tmp_path / "tars"),
               "cifar": helpers.make_cifar10_python(tmp_path / "cifar", per_batch=4)}  # fmt: skip
    with dask_client(None, workers=2) as client:  # one cluster for all: each takes seconds to start
        for source, src in sources.items():
            options = PackOptions(workers=2, shards=3, format="array_record", source=source)
            local, dask = tmp_path / f"{source}-local", tmp_path / f"{source}-dask"
            shardpack.pack(src, local, options)
            address = client.scheduler.address
            shardpack.pack(src, dask, replace(options, backend="dask", scheduler=address))
            assert shard_files(dask) == shard_files(local)


def test_each_source_reports_its_scan(hf_folder, packed, tmp_path, monkeypatch):
    """pack(scan_progress=...) hears the running count of rows, records or samples found, as
    it does for files and manifest rows."""
    helpers.needs("webdataset")
    from shardpack.sources import scanprogress

    monkeypatch.setattr(scanprogress, "EVERY", 1)
    sources = {"hf": hf_folder, "shardpack": packed, "tfds": packed,
               "webdataset": helpers.write_tars(tmp_path / "tars"),
               "cifar": helpers.make_cifar10_python(tmp_path / "cifar", per_batch=4)}  # fmt: skip
    for source, src in sources.items():
        heard: list[int] = []
        options = PackOptions(workers=1, source=source)
        out = tmp_path / "out" / source
        result = shardpack.pack(src, out, options, scan_progress=heard.append)
        assert heard and heard == sorted(heard), (source, heard)
        assert heard[-1] >= result.num_records, (source, heard)
