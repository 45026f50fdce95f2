"""The Parquet container end to end: what pack writes is what `datasets` (the Hub's reader),
pandas, pyarrow, DuckDB and Polars read, with Image() and ClassLabel features and the same records
shardpack's own readers give; Croissant's reader (mlcroissant) loads croissant.json record by
record."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import shardpack
from shardpack.containers import CONTAINERS
from shardpack.errors import IndexFormatError, MissingPackageError, RecordError
from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.read.describe import describe
from shardpack.read.stream import iter_examples
from tests import helpers
from tests.helpers import at, lazy_import, make_tree, shard_files, write_jsonl
from tests.packing.test_features import _rows

datasets = lazy_import("datasets")
hub = lazy_import("huggingface_hub")
SPLITS = (("train", 0.6), ("test", 0.4))


def _options(**options) -> PackOptions:
    return PackOptions(format="parquet", workers=1, shards=2, split=SPLITS, **options)


@pytest.fixture(scope="module")
def features_pack(tmp_path_factory) -> Path:
    """A manifest's pack: several labels per image, boxes, a caption, a score, tags."""
    tmp = tmp_path_factory.mktemp("parquet")
    src = make_tree(tmp / "src", {"cat": 3, "dog": 3})
    out = tmp / "out"
    pack(write_jsonl(src / "labels.jsonl", _rows()), out, _options(shuffle=False))
    return out


@pytest.fixture(scope="module")
def folder_pack(tmp_path_factory) -> Path:
    """A class folder tree's pack: one label per image."""
    tmp = tmp_path_factory.mktemp("parquet")
    out = tmp / "out"
    pack(make_tree(tmp / "src", {"cat": 4, "dog": 3, "emu": 3}), out, _options())
    return out


def _ours(out: Path, split: str) -> dict[str, dict]:
    return {r["key"]: r for r in iter_examples(out, split)}


def _same(hub: dict, ours: dict) -> None:
    """A record of datasets' (image undecoded) equals shardpack's."""
    assert hub.keys() == ours.keys()
    assert hub["image"] == {"bytes": ours["image"], "path": None}
    for name, value in ours.items():
        if isinstance(value, np.ndarray):
            assert np.asarray(hub[name], value.dtype).reshape(value.shape).tolist() == (
                value.tolist()
            ), name
        elif name != "image":
            assert (
                hub[name] == pytest.approx(value)
                if isinstance(value, float)
                else (hub[name] == value)
            ), name


@pytest.mark.parametrize("how", ["data_dir", "card"])
def test_datasets_loads_image_and_class_label_features_and_the_same_records(
    features_pack: Path, how: str
):
    loaded = (
        datasets.load_dataset("parquet", data_dir=str(features_pack))
        if how == "data_dir"  # each file's `huggingface` metadata alone
        else datasets.load_dataset(str(features_pack))  # README.md's configs and features
    )
    assert sorted(loaded) == ["test", "train"]
    features = loaded["train"].features
    assert features["image"] == datasets.Image()
    assert features["label"] == datasets.Sequence(datasets.ClassLabel(names=["cat", "dog"]))
    assert features["boxes"] == datasets.Sequence(
        datasets.Sequence(datasets.Value("float32"), length=4)
    )
    assert features["caption"] == datasets.Value("string")
    assert features["score"] == datasets.Value("float32")
    assert features["tags"] == datasets.Sequence(datasets.Value("int64"))
    info = hub.DatasetCard.load(features_pack / "README.md").data.dataset_info
    files = sum(p.stat().st_size for p in features_pack.glob("*.parquet"))
    assert info["download_size"] == files  # the files, as push_to_hub's download_size
    # the records as Arrow holds them, as `datasets` counts num_bytes (not the files' bytes):
    # but for a validity bitmap's rounding, a byte at most a shard and column
    slack = len(features) * len(list(features_pack.glob("*.parquet")))
    arrow = sum(table.data.nbytes for table in loaded.values())
    assert abs(info["dataset_size"] - arrow) <= slack
    for split, table in loaded.items():
        (said,) = [s["num_bytes"] for s in info["splits"] if s["name"] == split]
        assert abs(said - table.data.nbytes) <= slack
        ours = _ours(features_pack, split)
        rows = table.cast_column("image", datasets.Image(decode=False))
        assert len(rows) == len(ours) > 0
        for row in rows:
            _same(row, ours[row["key"]])


def test_a_split_whose_every_image_was_skipped_is_left_out_and_the_others_load(tmp_path: Path):
    """A split whose every image was skipped was written as one empty shard, listed in the
    index, and `datasets.load_dataset("parquet", data_dir=OUT)` refused the whole dataset
    ('Instruction "test" corresponds to no data!'); a grow already left such a split out. A
    fresh pack leaves it out of the index and OUT too, its skips kept (a grow finds nothing
    new), and inspect, verify and the card say so."""
    src = tmp_path / "src"
    make_tree(src / "train", {"cat": 2})
    (src / "test" / "cat").mkdir(parents=True)
    (src / "test" / "cat" / "bad.jpg").write_bytes(b"not an image")
    out = tmp_path / "out"
    result = pack(src, out, PackOptions(format="parquet", workers=1))
    assert result.to_json()["unwritten_splits"] == ["test"]  # the pack summary says it
    index = shardpack.load_index(out)
    assert {s: e.num_records for s, e in index.splits.items()} == {"train": 2}
    assert [s.key for s in index.skipped] == ["test/cat/bad.jpg"]
    assert not [p.name for p in out.iterdir() if "-test" in p.name]  # no shard, no split file
    for loaded in (datasets.load_dataset("parquet", data_dir=str(out)),
                   datasets.load_dataset(str(out))):  # fmt: skip
        assert {split: len(rows) for split, rows in loaded.items()} == {"train": 2}
    unwritten = r"split 'test': every image skipped, not written .*; it has train: name one"
    with pytest.raises(IndexFormatError, match=unwritten):
        list(iter_examples(out, "test"))  # an evaluation of nothing fails here, said so
    said = "split test: every image skipped, not written"
    assert f"\n{said}\n" in helpers.run_cli("inspect", str(out)).stdout
    checked = helpers.run_cli("verify", str(out), "--no-progress")
    assert checked.returncode == 0 and checked.stdout.startswith(f"{said}\nOK: 1 shard, ")
    from shardpack.read.report import _splits_table
    from tests.packing.test_duplicates import _Marked

    marked = _Marked()
    marked.feed(_splits_table(index))
    assert marked.values["test", "unwritten"] == "every image skipped, not written"
    grown = helpers.run_cli("pack", str(src), str(out), "--append", "--workers", "1")
    assert grown.returncode == 0 and grown.stdout.startswith("nothing to add: "), grown.stdout


def test_a_single_label_is_a_class_label_and_images_decode(folder_pack: Path):
    loaded = datasets.load_dataset("parquet", data_dir=str(folder_pack))
    assert loaded["train"].features["label"] == datasets.ClassLabel(names=["cat", "dog", "emu"])
    index = json.loads((folder_pack / "index.json").read_text())
    for split, table in loaded.items():
        assert Counter(table["label"]) == dict(enumerate(index["splits"][split]["class_counts"]))
        first = table[0]  # a PIL image, decoded by datasets
        assert first["image"].size == (first["width"], first["height"])


def test_pandas_and_pyarrow_read_the_shards(folder_pack: Path):
    import pandas as pd
    import pyarrow.parquet as pq

    index = json.loads((folder_pack / "index.json").read_text())
    for entry in index["splits"].values():
        files = [str(folder_pack / s["file"]) for s in entry["shards"]]
        frame = pd.concat([pd.read_parquet(f, columns=["label", "key"]) for f in files])
        assert len(frame) == entry["num_records"]
        assert frame["label"].value_counts().to_dict() == {
            i: n for i, n in enumerate(entry["class_counts"]) if n
        }
        for shard in entry["shards"]:
            metadata = pq.ParquetFile(folder_pack / shard["file"]).metadata
            assert metadata.num_rows == shard["num_records"]
            assert b"huggingface" in metadata.metadata


def test_duckdb_reads_the_shards_as_the_index_counts_them(folder_pack: Path):
    import duckdb

    index = json.loads((folder_pack / "index.json").read_text())
    for split, entry in index["splits"].items():
        files = [str(folder_pack / s["file"]) for s in entry["shards"]]
        rows = duckdb.sql(f"SELECT label, count(*) FROM read_parquet({files!r}) GROUP BY label"
                          ).fetchall()  # fmt: skip
        assert dict(rows) == {i: n for i, n in enumerate(entry["class_counts"]) if n}, split
        ((width, bytes_held),) = duckdb.sql(
            f"SELECT min(width), bool_and(image.bytes IS NOT NULL) FROM read_parquet({files!r})"
        ).fetchall()
        assert width > 0 and bytes_held, (width, bytes_held)


def test_polars_reads_the_shards_as_the_index_counts_them(folder_pack: Path):
    import polars as pl

    index = json.loads((folder_pack / "index.json").read_text())
    for split, entry in index["splits"].items():
        frame = pl.read_parquet([str(folder_pack / s["file"]) for s in entry["shards"]])
        assert frame.height == entry["num_records"], split
        counts = dict(frame["label"].value_counts().iter_rows())
        assert counts == {i: n for i, n in enumerate(entry["class_counts"]) if n}, split


def test_the_output_repacks_as_a_hub_dataset(folder_pack: Path, tmp_path: Path):
    """--source hf takes our Parquet as any Hub dataset: its height, width, channels, format
    and key columns (integers and text, as pack writes them) are derived anew from the image,
    not refused as a user's columns with a built-in's name."""
    again = pack(folder_pack, tmp_path / "again", PackOptions(source="hf", workers=1))
    assert again.to_json()["features"] == {"label": "class"}
    index = json.loads((folder_pack / "index.json").read_text())
    for split, entry in index["splits"].items():
        assert list(again.index.splits[split].class_counts) == entry["class_counts"]
        mine = sorted(r["image"] for r in iter_examples(folder_pack, split))
        assert sorted(r["image"] for r in iter_examples(tmp_path / "again", split)) == mine


def test_verify_inspect_and_random_access_read_it_as_any_container(folder_pack: Path):
    report = shardpack.verify(folder_pack, decode=True)
    assert report.ok and report.records == 10 and report.framing == "page checksums"
    assert describe(folder_pack)["container"] == "parquet"
    records = list(iter_examples(folder_pack, "train"))
    with shardpack.Records(folder_pack, "train") as random:
        assert len(random) == len(records)
        for i in reversed(range(len(records))):
            assert random[i]["key"] == records[i]["key"]
            assert random[i]["image"] == records[i]["image"]


@pytest.mark.parametrize(("rows", "size", "groups"), [(3, 1 << 20, [3, 3, 1]), (100, 1, [1] * 7)])
def test_row_groups_close_at_the_row_count_or_the_byte_count(
    tmp_path: Path, monkeypatch, rows: int, size: int, groups: list[int]
):
    import pyarrow.parquet as pq

    from shardpack.containers import parquet

    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", rows)
    monkeypatch.setattr(parquet, "ROW_GROUP_BYTES", size)
    out = tmp_path / "out"
    pack(make_tree(tmp_path / "src", {"cat": 7}), out,
         PackOptions(format="parquet", workers=1, shards=1))  # fmt: skip
    (shard,) = out.glob("*.parquet")
    metadata = pq.ParquetFile(shard).metadata
    assert [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)] == groups
    with shardpack.Records(out) as random:  # across row groups, backwards
        keys = [random[i]["key"] for i in reversed(range(7))]
    assert keys == [r["key"] for r in iter_examples(out)][::-1]


def test_a_resumed_pack_is_byte_identical(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 4, "dog": 4})
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    pack(src, whole, _options())
    pack(src, cut, _options())
    shards = sorted(cut.glob("*.parquet"))
    (cut / "index.json").unlink()  # as a run stopped before its end leaves it
    shards[0].unlink()
    result = pack(src, cut, _options(resume=True))
    assert result.num_reused == len(shards) - 1
    assert shard_files(cut) == shard_files(whole)
    assert (cut / "croissant.json").read_bytes() == (whole / "croissant.json").read_bytes()


def test_an_append_grows_a_pack_the_card_loads_whole(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    out = tmp_path / "out"
    pack(src, out, PackOptions(format="parquet", workers=1, shards=2))
    make_tree(tmp_path / "more", {"dog": 2}, seed=50)
    (tmp_path / "more" / "dog").rename(src / "eel")  # a class the append adds at the end
    described = json.loads((out / "croissant.json").read_text())
    license_ = "https://creativecommons.org/licenses/by/4.0/"
    (out / "croissant.json").write_text(json.dumps(described | {"license": license_}))
    card = hub.DatasetCard.load(out / "README.md")  # the card edited as the Hub's client edits it
    card.data.license, card.data.pretty_name, card.data.tags = "cc-by-4.0", "Pets", ["pets"]
    card.text = f"Photos of our pets.\n{card.text}\nCite us.\n"
    card.save(out / "README.md")
    pack(src, out, PackOptions(format="parquet", workers=1, grow="append"))
    described = json.loads((out / "croissant.json").read_text())
    assert described["license"] == license_  # added as docs ask before publishing: kept
    card = hub.DatasetCard.load(out / "README.md")  # the grown card: the user's keys and text kept
    assert (card.data.license, card.data.pretty_name, card.data.tags) == ("cc-by-4.0", "Pets",
                                                                          ["pets"])  # fmt: skip
    assert card.text.startswith("Photos of our pets.\n") and card.text.endswith("\nCite us.\n")
    assert card.text.count("Packed by shardpack") == 1 and "train 8 images" in card.text
    (split,) = card.data.dataset_info["splits"]
    assert split["num_examples"] == 8
    assert len(described["distribution"]) == 3 + 1  # the new shard, and the split's FileSet
    assert sorted(p.name for p in out.glob("*.parquet")) == [
        "src-train-00000-of-00002.parquet", "src-train-00001-of-00002.parquet",
        "src-train-00002-of-00002.parquet",
    ]  # fmt: skip
    loaded = datasets.load_dataset(str(out))["train"]
    assert sorted(loaded["key"]) == sorted(r["key"] for r in iter_examples(out))
    assert len(loaded) == 8
    assert loaded.features["label"].names == ["cat", "dog", "eel"]
    # as a Hub dataset, its older files naming fewer classes: the same labels
    again = pack(out, tmp_path / "again", PackOptions(source="hf", workers=1))
    assert again.index.classes == ("cat", "dog", "eel")
    assert list(again.index.splits["train"].class_counts) == [3, 3, 2]


@pytest.mark.parametrize(
    ("table", "options", "reason"),
    [
        ({"text": ["a", "b"]}, {}, "not a Parquet shard of shardpack's"),
        ({"image": [{"bytes": b"x" * 100, "path": None}] * 50}, {"compression": "zstd"},
         "'image.bytes' is compressed or dictionary-encoded"),
        ({"image": [{"bytes": b"x" * 100, "path": None}] * 50}, {"use_dictionary": True},
         "'image.bytes' is compressed or dictionary-encoded"),
        ({"image": [{"bytes": b"", "path": None}] * 20_000}, {}, "20,000 rows claims"),
        # an Image() of a path and no bytes, as `datasets` writes one: an IndexError's traceback
        ({"image": [{"bytes": None, "path": "/etc/passwd"}]}, {}, "a record without image bytes"),
        # an unsigned column holds what no int64 feature does (2**64 - 1 reached torch's collate)
        ({"image": [{"bytes": b"x", "path": None}], "height": ("uint64", [2**64 - 1])}, {},
         "not a Parquet shard of shardpack's"),
    ],
)  # fmt: skip
def test_a_parquet_file_shardpack_does_not_write_is_refused_by_name(
    tmp_path: Path, table: dict, options: dict, reason: str
):
    """Someone else's columns; and what would let a small file decode to far more than its
    size (a codec, a dictionary, a row count past ours), before a row group is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "ds-train-00000-of-00001.parquet"
    # a column given as (type, values) is made here, not as the file is collected: pyarrow's
    # arrays load pandas (~0.4 s of CPU in each pytest-xdist worker)
    table = {name: pa.array(column[1], getattr(pa, column[0])()) if isinstance(column, tuple)
             else column for name, column in table.items()}  # fmt: skip
    pq.write_table(pa.table(table), path, **{"compression": "none", "use_dictionary": False,
                                             "row_group_size": 1 << 20, **options})  # fmt: skip
    with pytest.raises(RecordError, match=reason) as caught:
        CONTAINERS["parquet"].check(*at(path))
    assert caught.value.path == str(path)


def test_without_pyarrow_the_format_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # what import finds when it is missing
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingPackageError, match=r"needs pyarrow: pip install '\.\[parquet\]'"):
        pack(make_tree(tmp_path / "src", {"cat": 1}), tmp_path / "out",
             PackOptions(format="parquet", workers=1))  # fmt: skip
    assert not list((tmp_path / "out").glob("*.parquet"))


def _croissant_records(out: Path, record_set: str) -> list[dict]:
    mlc = pytest.importorskip("mlcroissant")
    dataset = mlc.Dataset(str(out / "croissant.json"))  # validates, or raises
    return [{k.split("/", 1)[1]: v for k, v in r.items()} for r in dataset.records(record_set)]


def test_mlcroissant_loads_every_split_with_the_same_values(features_pack: Path):
    for split in ("train", "test"):
        ours = _ours(features_pack, split)
        read = _croissant_records(features_pack, split)
        assert sorted(r["key"].decode() for r in read) == sorted(ours)
        for record in read:
            want = ours[record["key"].decode()]
            assert record["image"].size == (want["width"], want["height"])
            assert record["caption"].decode() == want["caption"]
            assert record["score"] == pytest.approx(want["score"])
            assert list(record["tags"]) == want["tags"].tolist()
            assert list(record["label"]) == want["label"].tolist()
            assert np.asarray(record["boxes"], np.float32).reshape(-1, 4).tolist() == (
                want["boxes"].tolist()
            )
    classes = _croissant_records(features_pack, "classes-label")
    assert [(c["index"], c["name"]) for c in classes] == [(0, "cat"), (1, "dog")]


def test_a_feature_named_with_a_space_keeps_croissant_json_loadable(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 2})
    rows = [
        {"path": str(p), "sun hours": i, "50%": "x"}
        for i, p in enumerate(sorted(src.rglob("*.jpg")))
    ]
    out = tmp_path / "out"
    pack(write_jsonl(tmp_path / "rows.jsonl", rows), out, PackOptions(format="parquet", workers=1))
    read = _croissant_records(out, "train")  # mlcroissant refused an @id with whitespace
    assert sorted((r["sun%20hours"], r["50%25"]) for r in read) == [(0, b"x"), (1, b"x")]


def test_croissant_lists_every_shard_with_its_sha256(folder_pack: Path):
    document = json.loads((folder_pack / "croissant.json").read_text())
    index = json.loads((folder_pack / "index.json").read_text())
    objects = {d["@id"]: d for d in document["distribution"] if d["@type"] == "cr:FileObject"}
    shards = [s for entry in index["splits"].values() for s in entry["shards"]]
    assert {f: o["sha256"] for f, o in objects.items()} == {s["file"]: s["sha256"] for s in shards}
    assert {o["encodingFormat"] for o in objects.values()} == {"application/x-parquet"}
    labels = [r["label"] for r in _croissant_records(folder_pack, "train")]
    assert Counter(labels) == dict(enumerate(index["splits"]["train"]["class_counts"]))


def test_a_tfrecord_pack_s_croissant_describes_its_files_and_classes(tmp_path: Path):
    out = tmp_path / "out"
    pack(make_tree(tmp_path / "src", {"cat": 2, "dog": 1}), out, PackOptions(workers=1))
    document = json.loads((out / "croissant.json").read_text())
    (shard,) = [d for d in document["distribution"] if d["@type"] == "cr:FileObject"]
    assert shard["encodingFormat"] == "application/x-tfrecord"
    assert [r["@id"] for r in document["recordSet"]] == ["classes-label"]
    classes = _croissant_records(out, "classes-label")
    assert [c["name"] for c in classes] == ["cat", "dog"]


def test_object_storage_and_repacking_to_and_from_parquet(tmp_path: Path):
    """Workers write through a store's Sink and readers read its Blobs (memory:// here, as any
    fsspec store); `--source shardpack` repacks Parquet into TFRecord and back."""
    import uuid

    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 2})
    url = f"memory://parquet-{uuid.uuid4().hex[:12]}/out"
    pack(src, url, PackOptions(format="parquet", workers=1, shards=2))
    assert shardpack.verify(url, decode=True).ok
    want = {r["key"]: (r["label"], r["image"]) for r in iter_examples(url)}
    assert len(want) == 5
    pack(url, tmp_path / "tf", PackOptions(source="shardpack", workers=1, shards=1))
    pack(tmp_path / "tf", tmp_path / "pq", PackOptions(source="shardpack", format="parquet",
                                                       workers=1, shards=1))  # fmt: skip
    for out in (tmp_path / "tf", tmp_path / "pq"):
        assert {r["key"]: (r["label"], r["image"]) for r in iter_examples(out)} == want


def test_raw_pixels_are_refused_for_parquet_in_one_line(tmp_path: Path):
    from typer.testing import CliRunner

    from shardpack.cli import app

    with pytest.raises(shardpack.ShardpackError, match="pass encode='png'"):
        PackOptions(format="parquet", encode="raw")
    src = make_tree(tmp_path / "src", {"cat": 1})
    result = CliRunner().invoke(app, ["pack", str(src), str(tmp_path / "out"), "--format",
                                      "parquet", "--encode", "raw", "--no-progress"])  # fmt: skip
    assert result.exit_code == 2 and "--encode png" in result.output, result.output


def test_a_file_of_another_named_like_a_shard_is_not_in_the_card_nor_croissant(tmp_path: Path):
    """A Parquet file in OUT that is no shard of the pack but matches a split's pattern
    (`src-train-*.parquet`: a copy of another pack's shard, left there by hand) was in the
    card's configs and croissant.json's FileSet: `load_dataset(OUT)` read its rows too (or
    failed on its schema) and mlcroissant gave its records. Such a split lists its shards by
    name."""
    other = tmp_path / "other"
    pack(make_tree(tmp_path / "other-src" / "src", {"emu": 2}), other, PackOptions(
        format="parquet", workers=1))  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    foreign = out / "src-train-00000-of-00009.parquet"
    foreign.write_bytes((other / "src-train-00000-of-00001.parquet").read_bytes())
    pack(make_tree(tmp_path / "src", {"cat": 2, "dog": 1}), out, PackOptions(
        format="parquet", workers=1, shards=2))  # fmt: skip
    ours = sorted(r["key"] for r in iter_examples(out, "train"))
    assert foreign.exists() and len(ours) == 3  # the user's file is left as it was
    loaded = datasets.load_dataset(str(out), download_mode="force_redownload")["train"]
    assert sorted(loaded["key"]) == ours
    assert sorted(r["key"].decode() for r in _croissant_records(out, "train")) == ours


@pytest.mark.long  # ~13 s of CPU (PyYAML, datasets); make test: test_hubcard's grow of such a card
def test_a_card_over_a_mib_of_class_names_grows_and_repacks(tmp_path: Path):
    """Thousands of long class names (iNaturalist's are ~80 characters) make a card of over a
    MiB: pack's own card is read back by the next run and by --source hf, not refused as more
    than a card holds (a traceback, for --source hf)."""
    names = tuple(f"{i:04d}_Plantae" + ("_x" * 500 if i % 7 else "") for i in range(1300))
    src = make_tree(tmp_path / "src", {names[0]: 2, names[7]: 2})
    out = tmp_path / "out"
    pack(src, out, PackOptions(format="parquet", workers=1, classes=names))
    assert (out / "README.md").stat().st_size > 1 << 20
    card = hub.DatasetCard.load(out / "README.md")
    card.data.license = "cc-by-4.0"
    card.save(out / "README.md")
    make_tree(src, {names[1295]: 1}, seed=50)
    pack(src, out, PackOptions(format="parquet", workers=1, grow="append",
                               classes=names))  # fmt: skip
    card = hub.DatasetCard.load(out / "README.md")
    assert card.data.license == "cc-by-4.0"
    assert card.data.dataset_info["splits"][0]["num_examples"] == 5
    loaded = datasets.load_dataset(str(out))["train"]
    assert loaded.features["label"].names == list(names)
    again = pack(out, tmp_path / "again", PackOptions(source="hf", workers=1))
    assert again.index.classes == names
    assert again.index.splits["train"].num_records == 5


@pytest.mark.parametrize(
    ("name", "split"),
    [("src", SPLITS), ("train", SPLITS), ("my_training", None), ("coco2017_val", SPLITS),
     ("ds.v1", (("train", 0.5), ("holdout", 0.5)))],
)  # fmt: skip
def test_a_name_data_dir_misreads_is_warned_of(tmp_path: Path, name: str, split):
    """datasets' data_dir= reads a file into each split once a pattern of the split's its name
    matches: a name holding a split's word (train, _val, ...) reads records twice or into
    another split. The warning is given exactly where datasets misreads the files."""
    out = tmp_path / "out"
    options = PackOptions(format="parquet", workers=1, name=name, split=split)
    result = pack(make_tree(tmp_path / "src", {"cat": 3, "dog": 3}), out, options)
    warned = [w for w in result.to_json()["warnings"] if "data_dir=OUT) misreads" in w]
    loaded = datasets.load_dataset("parquet", data_dir=str(out), download_mode="force_redownload")
    renamed = {"train": "train", "test": "test"}  # as datasets names them; holdout: left out
    counts = {renamed[s]: e.num_records for s, e in result.index.splits.items() if s in renamed}
    assert bool(warned) == ({s: len(d) for s, d in loaded.items()} != counts), warned
    assert bool(warned) == (name not in ("src", "ds.v1"))
