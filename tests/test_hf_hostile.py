"""Hugging Face datasets that lie: a card naming files outside SRC, globs `datasets` reads
otherwise, YAML aliases that expand to millions of patterns, folders nested past any walk, a
NUL in a row's image path, a file rewritten after the scan, rows naming image files it does not
hold. Each is built for real (pyarrow writes the Parquet, `datasets` where its own reading is
the reference) and ends in one line or a skip with its reason."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from shardpack.errors import SourceError
from shardpack.options import PackOptions
from shardpack.sources import scan
from shardpack.sources.hflayout import data_files
from shardpack.storage import storage_at
from tests.helpers import jpeg

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

CLASSES = ["cat", "dog"]


def write_hf(path: Path, labels: list[int], paths: list[str | None] | None = None,
             images: list[bytes | None] | None = None) -> Path:  # fmt: skip
    """A Parquet file as `datasets` writes one: an Image column (struct<bytes, path>) and a
    ClassLabel `label`, its features in the schema's huggingface metadata."""
    images = images if images is not None else [jpeg(i) for i in range(len(labels))]
    paths = paths if paths is not None else [f"img{i}.jpg" for i in range(len(labels))]
    image = pa.StructArray.from_arrays(
        [pa.array(images, pa.binary()), pa.array(paths, pa.string())], ["bytes", "path"]
    )
    features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": CLASSES}}
    table = pa.table({"image": image, "label": pa.array(labels, pa.int64())})
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features":
                                                                       features}})})  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def card(src: Path, data_files_yaml: str) -> Path:
    """SRC/README.md with a default config whose data_files are the YAML given."""
    src.mkdir(parents=True, exist_ok=True)
    (src / "README.md").write_text(
        f"---\nconfigs:\n- config_name: default\n  data_files: {data_files_yaml}\n---\n# Card\n"
    )
    return src


def refused(src: Path, *words: str) -> str:
    with pytest.raises(SourceError) as error:
        scan(src, PackOptions(source="hf"))
    message = str(error.value)
    assert "\n" not in message and all(w in message for w in words), message
    return message


# ---- 1: data files outside SRC ---------------------------------------------------------------


def test_a_card_naming_parquet_outside_src_is_refused_by_name(tmp_path):
    elsewhere = write_hf(tmp_path / "elsewhere/x.parquet", [0, 1, 0])
    src = card(tmp_path / "src", f"'{elsewhere.parent}/*.parquet'")
    write_hf(src / "data/train-00000-of-00001.parquet", [1])
    refused(src, "README.md: data_files pattern", f"'{elsewhere.parent}/*.parquet'",
            "outside the dataset's folder")  # fmt: skip
    for pattern in (f"file://{elsewhere}", "../elsewhere/x.parquet"):
        card(src, f"'{pattern}'")
        refused(src, "README.md: data_files pattern", "outside" if ":" in pattern else "climbs")


# ---- 14: datasets' glob semantics -------------------------------------------------------------


def test_card_patterns_match_the_files_datasets_resolves(tmp_path):
    """Each pattern resolves to the files `datasets` itself resolves (its resolve_pattern): a
    `*` stays within a folder, `**` spans folders, hidden and `__` folders are left out unless
    the pattern names them."""
    resolve_pattern = pytest.importorskip("datasets.data_files").resolve_pattern
    src = tmp_path / "src"
    for name in ("data/a.parquet", "data/b-1.parquet", "data/other/c.parquet",
                 "data/other/deep/d.parquet", "data/.hidden/e.parquet", "data/__x__/f.parquet",
                 "top.parquet", "data/[x].parquet"):  # fmt: skip
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(b"")  # layout only: nothing here opens them
    patterns = ["data/*.parquet", "data/*", "data/**/*.parquet", "data/**", "**/*.parquet",
                "*.parquet", "data/?-1.parquet", "data/[ab]*.parquet", "data/[!a]*.parquet",
                "data/*/*.parquet", "data/.hidden/*.parquet", "data/__x__/*.parquet",
                "data/a.parquet", "data/**/deep/*.parquet"]  # fmt: skip
    for pattern in patterns:
        card(src, json.dumps(pattern))
        ours = (data_files(storage_at(src), required=True) or {}).get("train", [])
        theirs = [Path(p).relative_to(src).as_posix() for p in resolve_pattern(pattern, str(src))]
        assert sorted(ours) == sorted(theirs), pattern


def test_a_card_glob_packs_the_rows_load_dataset_reads(tmp_path):
    datasets = pytest.importorskip("datasets")
    src = card(tmp_path / "src", "data/*.parquet")
    write_hf(src / "data/a.parquet", [0, 1])
    write_hf(src / "data/other/b.parquet", [1, 1, 0, 0])
    loaded = datasets.load_dataset(str(src), split="train")
    dataset = scan(src, PackOptions(source="hf"))
    assert len(dataset.splits["train"]) == loaded.num_rows == 2


# ---- 13: YAML aliases -------------------------------------------------------------------------


def test_a_card_of_yaml_aliases_is_refused_quickly(tmp_path):
    """A 15 KB card whose aliases expand to 400,000 patterns: refused in a moment (each
    pattern walked the folder again: it ran for minutes)."""
    src = tmp_path / "src"
    write_hf(src / "data/train-00000-of-00001.parquet", [0, 1])
    patterns = ", ".join(f"data/t{i}*.parquet" for i in range(200))
    entries = ", ".join(["*e"] * 2000)
    src.joinpath("README.md").write_text(
        f"---\npatterns: &p [{patterns}]\nentry: &e {{split: train, path: *p}}\nconfigs:\n"
        f"- config_name: default\n  data_files: [{entries}]\n---\n"
    )
    assert src.joinpath("README.md").stat().st_size < 16 << 10
    start = time.perf_counter()
    refused(src, "README.md: its configs expand to over 100,000 values", "YAML aliases")
    assert time.perf_counter() - start < 5


def test_many_wildcard_patterns_are_refused(tmp_path):
    src = tmp_path / "src"
    write_hf(src / "data/train-00000-of-00001.parquet", [0, 1])
    card(src, json.dumps([f"data/t{i}*.parquet" for i in range(1001)]))
    refused(src, "README.md: its configs hold 1,001 wildcard patterns (over 1,000)")
