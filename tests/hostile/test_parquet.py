"""Parquet that decodes far past its size on disk: a dictionary page holding one long caption,
referenced by every row. Built for real with pyarrow and packed in a child process under an
address-space limit (test_hostile_src's): one line naming the limit and exit 2, bounded memory.
A legitimate manifest of several row groups still packs, identically."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import make_tree, shard_files, write_parquet
from tests.hostile.test_src import _pack, _refused

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

_CAPTION_CHARS = 100_000
_GROUP_ROWS = 20_000  # 2 GB of caption a row group, decoded


def _one_caption_everywhere(
    path: Path, groups: int, store_schema: bool, rows: int = _GROUP_ROWS
) -> Path:
    """`groups` row groups of `rows` rows, each naming one image and holding the same
    100,000-character caption: a dictionary page of one value, indices run-length encoded."""
    table = pa.table({
        "path": pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()),
                                               pa.array(["a/img_000.jpg"])),
        "caption": pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()),
                                                  pa.array(["x" * _CAPTION_CHARS])),
    })  # fmt: skip
    with pq.ParquetWriter(path, table.schema, store_schema=store_schema) as writer:
        for _ in range(groups):
            writer.write_table(table)
    return path


@pytest.mark.parametrize("store_schema", [True, False], ids=["arrow-dictionary", "plain-string"])
def test_a_dictionary_caption_that_decodes_to_gigabytes_is_refused_by_name(
    tmp_path: Path, store_schema: bool
):
    from shardpack.sources.tables.parquet_reader import MAX_ROW_GROUP_BYTES

    src = make_tree(tmp_path / "src", {"a": 1})
    manifest = _one_caption_everywhere(src / "captions.parquet", 8, store_schema)
    assert manifest.stat().st_size < 64 << 10  # about 40 KB on disk
    assert MAX_ROW_GROUP_BYTES == 1 << 30
    run = _pack(tmp_path, manifest)
    line = _refused(run, "captions.parquet: row group 0 decodes to 1.9 GiB", "1 GiB limit",
                    "smaller row groups")  # fmt: skip
    assert "not a readable Parquet file" not in line
    assert run.peak_mib < 1024, run.peak_mib  # the caption is never decoded
    assert not (tmp_path / "out").exists()


def test_a_manifest_of_several_row_groups_packs_as_one_of_a_single_group_does(tmp_path: Path):
    import json

    runs = []
    for name, group_rows in (("many", 2), ("one", None)):
        src = make_tree(tmp_path / name / "src", {"cat": 5, "dog": 4})
        paths = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.jpg"))
        rows = [{"path": p, "label": p.split("/")[0], "caption": f"photo {i} " * (i + 1),
                 "tags": ["x", p[:3]], "n": i} for i, p in enumerate(paths)]  # fmt: skip
        write_parquet(src / "labels.parquet", rows, row_group_size=group_rows)
        runs.append(_pack(tmp_path / name, src / "labels.parquet", "--seed", "3"))
    assert pq.ParquetFile(tmp_path / "many/src/labels.parquet").num_row_groups == 5
    assert [r.rc for r in runs] == [0, 0], [r.stderr for r in runs]
    many, one = tmp_path / "many/out", tmp_path / "one/out"
    assert shard_files(many) == shard_files(one) != {}
    index = json.loads((many / "index.json").read_text())
    assert {"caption", "n", "tags"} <= set(index["features"])
    assert sum(s["num_records"] for s in index["splits"]["train"]["shards"]) == 9


def test_a_hugging_face_file_whose_caption_decodes_to_gigabytes_is_refused_by_name(
    tmp_path: Path,
):
    src = make_tree(tmp_path / "src", {"a": 1})
    jpeg = (src / "a/img_000.jpg").read_bytes()
    rows = _GROUP_ROWS
    image = pa.StructArray.from_arrays(
        [pa.array([jpeg] * rows, pa.binary()), pa.array(["img_000.jpg"] * rows)], ["bytes", "path"]
    )
    caption = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()),
                                             pa.array(["x" * _CAPTION_CHARS]))  # fmt: skip
    table = pa.table({"image": image, "caption": caption})
    data = tmp_path / "hf/data"
    data.mkdir(parents=True)
    with pq.ParquetWriter(data / "train-00000-of-00001.parquet", table.schema) as writer:
        for _ in range(4):
            writer.write_table(table)
    run = _pack(tmp_path, tmp_path / "hf", "--source", "hf")
    _refused(run, "train-00000-of-00001.parquet: row group 0 decodes to 1.9 GiB", "1 GiB limit")
    assert run.peak_mib < 1024, run.peak_mib


def test_row_groups_each_under_the_limit_are_refused_past_the_file_limit(tmp_path, monkeypatch):
    from shardpack.errors import SourceError
    from shardpack.sources.tables import parquet_reader
    from shardpack.sources.tables.reader import read_manifest

    manifest = _one_caption_everywhere(tmp_path / "captions.parquet", 4, True, rows=500)
    decoded = 500 * _CAPTION_CHARS  # a row group's captions: 50 MB
    monkeypatch.setattr(parquet_reader, "MAX_FILE_DECODED_BYTES", 2 * decoded + decoded // 2)
    with pytest.raises(
        SourceError,
        match=r"captions.parquet: row groups 0 to 2 decode to 143.1 "
        r"MiB \(over the 119.2 MiB limit for one file, held in memory whole\)",
    ):
        read_manifest(manifest)


def test_a_run_length_encoded_list_is_refused_by_its_count_before_it_decodes(tmp_path, monkeypatch):
    from shardpack.errors import SourceError
    from shardpack.sources.tables import parquet_reader
    from shardpack.sources.tables.reader import read_manifest

    n = 2_000_000  # zeros, one list: 16 MB decoded, under 1 KB on disk
    zeros = pa.ListArray.from_arrays([0, n], pa.nulls(n, pa.int64()).fill_null(0))
    manifest = tmp_path / "zeros.parquet"
    pq.write_table(pa.table({"path": ["a/img_000.jpg"], "v": zeros}), manifest)
    del zeros
    assert manifest.stat().st_size < 4096
    monkeypatch.setattr(parquet_reader, "MAX_ROW_GROUP_BYTES", 10 << 20)
    with pytest.raises(SourceError, match=r"zeros.parquet: row group 0 holds 15.3 MiB by its "
                       r"footer's sizes and counts \(over the 10 MiB limit"):  # fmt: skip
        read_manifest(manifest)
