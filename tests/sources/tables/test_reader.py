"""Manifests: real CSV, TSV, JSONL and Parquet files, written by csv, json and pyarrow."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pyarrow as pa
import pyarrow.json
import pyarrow.parquet as pq
import pytest

from shardpack.errors import SourceError
from shardpack.options import as_flags
from shardpack.schema import Feature
from shardpack.sources.tables import chunks as manifest
from shardpack.sources.tables.cells import MAX_TEXT_CHARS
from shardpack.sources.tables.chunks import MAX_LINE_BYTES
from shardpack.sources.tables.files import manifest_file
from shardpack.sources.tables.kinds import LabelInfo
from shardpack.sources.tables.reader import read_manifest
from tests.helpers import write_csv, write_jsonl, write_parquet

# One table with every scalar kind: ints, whole-number floats, bools, text (one empty), names.
TABLE = [
    {"path": "a.jpg", "label": "cat", "split": "train", "n": 3, "score": 1.0, "ok": True,
     "caption": "a cat"},
    {"path": "img/b.jpg", "label": "dog", "split": "test", "n": -7, "score": 0.1, "ok": False,
     "caption": ""},
    {"path": "c.jpg", "label": "cat", "split": "train", "n": 0, "score": 2.5e-3, "ok": True,
     "caption": "3"},
]  # fmt: skip
COLUMNS = list(TABLE[0])


def comparable(manifest) -> list[tuple]:
    """The rows without their line numbers, arrays as (dtype, shape, values)."""

    def plain(v):
        return (v.dtype.name, v.shape, v.tolist()) if isinstance(v, np.ndarray) else v

    return [(r.path, r.label, r.split, tuple(plain(v) for v in r.values)) for r in manifest.rows]


# ---- typed columns ---------------------------------------------------------------------------


def test_a_csv_manifest_types_each_column_over_all_its_cells(tmp_path):
    m = read_manifest(write_csv(tmp_path / "labels.csv", TABLE))
    assert m.columns == {
        "caption": Feature("bytes", text=True),  # "3" among words is text
        "n": Feature("int64"),
        "ok": Feature("int64"),  # booleans
        "score": Feature("float32"),  # 1.0 is a float, as json and pyarrow read it
    }
    assert m.label == LabelInfo("names", False, ("cat", "dog"))
    assert m.has_split and m.path_column == "path" and m.bad == []
    assert m.root == str(tmp_path)
    first = m.rows[0]
    assert (first.line, first.path, first.label, first.split) == (2, "a.jpg", "cat", "train")
    assert m.fields(first) == {"caption": "a cat", "n": 3, "ok": 1, "score": 1.0}
    assert m.fields(m.rows[1])["score"] == float(np.float32(0.1))  # rounded to float32
    assert m.fields(m.rows[1])["caption"] == ""


def test_the_same_table_as_csv_tsv_jsonl_and_parquet_gives_equal_typed_rows(tmp_path):
    manifests = [
        read_manifest(write_csv(tmp_path / "t.csv", TABLE)),
        read_manifest(write_csv(tmp_path / "t.tsv", TABLE, delimiter="\t")),
        read_manifest(write_jsonl(tmp_path / "t.jsonl", TABLE)),
        read_manifest(write_parquet(tmp_path / "t.parquet", TABLE)),
    ]
    first = manifests[0]
    for m in manifests[1:]:
        assert (m.columns, m.label, m.has_split, m.bad) == (
            first.columns, first.label, first.has_split, [],
        )  # fmt: skip
        assert comparable(m) == comparable(first)
    assert [r.line for r in manifests[2].rows] == [1, 2, 3]  # JSONL lines
    assert [r.line for r in manifests[3].rows] == [0, 1, 2]  # Parquet rows


def test_a_float32_parquet_column_reads_as_the_same_float32_values(tmp_path):
    table = pa.table({"path": ["a.jpg", "b.jpg"], "w": pa.array([0.1, 1 / 3], pa.float32())})
    pq.write_table(table, tmp_path / "t.parquet")
    write_jsonl(tmp_path / "t.jsonl", [{"path": "a.jpg", "w": 0.1}, {"path": "b.jpg", "w": 1 / 3}])
    assert comparable(read_manifest(tmp_path / "t.parquet")) == comparable(
        read_manifest(tmp_path / "t.jsonl")
    )


LISTS = [
    {"file_name": "a.jpg", "label": ["cat", "dog"], "boxes": [[0.1, 0.2, 0.5, 0.6]],
     "points": [[1, 2, 1], [3, 4, 0]], "tags": [1, 2, 3], "weights": [1, 2.5],
     "captions": ["one", "two"]},
    {"file_name": "b.jpg", "label": [], "boxes": [], "points": [[5, 6, 1]], "tags": [],
     "weights": [0.5], "captions": []},
    {"file_name": "c.jpg", "label": ["bird"], "boxes": [[0, 0, 1, 1], [0.5, 0.5, 1, 1]],
     "points": [], "tags": [7], "weights": [], "captions": ["three"]},
]  # fmt: skip


def test_jsonl_and_parquet_lists_become_list_features_and_multi_labels(tmp_path):
    m = read_manifest(write_jsonl(tmp_path / "t.jsonl", LISTS))
    assert m.columns == {
        "boxes": Feature("float32", (-1, 4)),
        "captions": Feature("bytes", (-1,), text=True),
        "points": Feature("int64", (-1, 3)),
        "tags": Feature("int64", (-1,)),
        "weights": Feature("float32", (-1,)),
    }
    assert m.label == LabelInfo("names", True, ("bird", "cat", "dog"))
    assert [r.label for r in m.rows] == [("cat", "dog"), (), ("bird",)]
    a, b, c = (m.fields(r) for r in m.rows)
    assert a["boxes"].dtype == np.float32 and a["boxes"].shape == (1, 4)
    assert b["boxes"].shape == (0, 4) and c["boxes"].shape == (2, 4)
    assert c["points"].shape == (0, 3) and c["points"].dtype == np.int64
    assert a["captions"] == ("one", "two") and b["captions"] == ()
    np.testing.assert_array_equal(a["weights"], np.array([1, 2.5], np.float32))
    parquet = read_manifest(write_parquet(tmp_path / "t.parquet", LISTS))
    assert (parquet.columns, parquet.label) == (m.columns, m.label)
    assert comparable(parquet) == comparable(m)


def test_integer_labels_and_an_unlabeled_manifest(tmp_path):
    rows = [{"path": "a.jpg", "label": 2}, {"path": "b.jpg", "label": 0}]
    m = read_manifest(write_csv(tmp_path / "t.csv", rows))
    assert m.label == LabelInfo("integers", False, (0, 2))
    assert [r.label for r in m.rows] == [2, 0]
    assert read_manifest(write_jsonl(tmp_path / "t.jsonl", rows)).label == m.label
    bare = read_manifest(write_csv(tmp_path / "bare.csv", [{"path": "a.jpg", "x": 1}]))
    assert bare.label is None and not bare.has_split and bare.rows[0].label is None


def test_a_folder_with_metadata_jsonl_reads_like_hugging_face_imagefolder(tmp_path):
    write_jsonl(tmp_path / "metadata.jsonl", [{"file_name": "x/a.png", "text": "hi"}])
    assert manifest_file(tmp_path).path() == str(tmp_path / "metadata.jsonl")
    m = read_manifest(tmp_path)
    assert (m.path_column, m.root, m.rows[0].path) == ("file_name", str(tmp_path), "x/a.png")
    assert manifest_file(tmp_path / "x") is None  # a folder without one: not a manifest


def test_an_explicit_path_column_and_root(tmp_path):
    write_csv(tmp_path / "t.csv", [{"img": "./a/../b.jpg", "path_to_nothing": "z"}])
    m = read_manifest(tmp_path / "t.csv", path_column="img", root=tmp_path / "images")
    assert (m.rows[0].path, m.root) == ("b.jpg", str(tmp_path / "images"))
    assert list(m.columns) == ["path_to_nothing"]


# ---- bad rows --------------------------------------------------------------------------------


def reasons(manifest) -> dict[int, str]:
    return {b.line: b.reason for b in manifest.bad}


@pytest.fixture(params=["whole", "tiny chunks"])
def chunking(request, monkeypatch):
    """Read as usual, or 2 rows a chunk and 5 bytes a read: every row and line then meets the
    edge of a chunk (of columns) or a block (of lines), which the reader handles at once."""
    if request.param == "tiny chunks":
        monkeypatch.setattr(manifest, "CHUNK_ROWS", 2)
        monkeypatch.setattr(manifest, "READ_BYTES", 5)


def test_columns_of_one_kind_convert_as_each_cell_would(tmp_path, chunking):
    # A column all of one kind is typed and converted at once (a regex over the column, C
    # conversions); it must give what the rules give each cell.
    paths = ["a.jpg", "./b.jpg", "c//d.jpg", "e/../f.jpg", "g/.h.jpg", "i/j/", "k/..l/./m.jpg"]
    scores = ["1e5", "-0.0", "NaN", "-inf", "3.4028234e38", "0.1", "2.5E-3"]
    ns = ["0", "-5", "123456789012345678", "7", "-0", "10", "9"]
    labels = ["1", "2", "1", "1", "2", "1", "2"]
    rows = [
        {"path": p, "label": lab, "score": s, "n": n}
        for p, lab, s, n in zip(paths, labels, scores, ns, strict=True)
    ]
    m = read_manifest(write_csv(tmp_path / "t.csv", rows))
    assert m.bad == []
    assert m.columns == {"n": Feature("int64"), "score": Feature("float32")}
    assert [r.path for r in m.rows] == [os.path.normpath(p) for p in paths]
    assert [r.label for r in m.rows] == [1, 2, 1, 1, 2, 1, 2]
    assert [r.values[0] for r in m.rows] == [int(n) for n in ns]
    got = np.array([r.values[1] for r in m.rows], np.float32)
    want = np.array([float(s) for s in scores], np.float32)
    assert got.tobytes() == want.tobytes()  # float32 bits, nan and -0.0 included
    assert all(type(r.values[1]) is float and type(r.values[0]) is int for r in m.rows)


def test_bad_csv_rows_name_their_line(tmp_path, chunking):
    path = tmp_path / "t.csv"
    path.write_text(
        "path,label,split,n\n"
        "a.jpg,cat,train,1\n"  # 2: good
        ",cat,train,2\n"  # 3: no path
        "b.jpg,,train,3\n"  # 4: no label
        "c.jpg,cat,train\n"  # 5: a cell short
        "d.jpg,cat,../x,4\n"  # 6: a split that is not a name
        "e.jpg,cat,train,99999999999999999999\n"  # 7: beyond int64
        "f.jpg,cat,,8\n"  # 8: no split
        '"g\n.jpg",cat,train,5\n'  # 9-10: a quoted newline; the row starts at line 9
        "./a.jpg,dog,train,6\n",  # 11: the same image as line 2
        encoding="utf-8",
    )
    m = read_manifest(path)
    assert [r.line for r in m.rows] == [2, 9]
    got = reasons(m)
    assert got[3] == "t.csv line 3: no image path in column 'path'"
    assert got[4] == "t.csv line 4: no label in column 'label'"
    assert got[5] == "t.csv line 5: has 3 cells, the header has 4"
    assert "split '../x' is not a name" in got[6]
    assert got[7] == "t.csv line 7: column 'n' holds an integer beyond the int64 range"
    assert got[8] == "t.csv line 8: no split in column 'split'"
    # labelled otherwise: once only "the same image as line 2", as if repeated by mistake
    assert got[11] == ("t.csv line 11: the same image as line 2, labelled 'cat' there and 'dog' "
                       "here: for an image of several labels, one row with a list of them "
                       "(JSONL or Parquet)")  # fmt: skip
    assert m.columns["n"] == Feature("int64")


def test_the_same_image_written_relative_and_absolute_is_listed_twice(tmp_path, chunking):
    # One file, written as a path under the manifest's folder, absolute, and climbing out and
    # back in: each after the first is the same image. Rows keep their path as written.
    folder = tmp_path / "src"
    folder.mkdir()
    absolute = str(folder / "cat" / "a.jpg")
    rows = [
        {"path": "cat/a.jpg", "label": "cat"},  # 2
        {"path": "cat/b.jpg", "label": "cat"},  # 3
        {"path": absolute, "label": "cat"},  # 4: the same file as line 2
        {"path": "../src/cat/b.jpg", "label": "cat"},  # 5: the same file as line 3
        {"path": str(tmp_path / "elsewhere" / "a.jpg"), "label": "cat"},  # 6: another file
        {"path": "../elsewhere/./a.jpg", "label": "cat"},  # 7: the same file as line 6
    ]
    m = read_manifest(write_csv(folder / "t.csv", rows))
    assert [(r.line, r.path) for r in m.rows] == [
        (2, "cat/a.jpg"), (3, "cat/b.jpg"), (6, str(tmp_path / "elsewhere" / "a.jpg")),
    ]  # fmt: skip
    assert reasons(m) == {
        4: "t.csv line 4: the same image as line 2",
        5: "t.csv line 5: the same image as line 3",
        7: "t.csv line 7: the same image as line 6",
    }
    # --root moves what relative paths name: there, the absolute one is another file.
    other = read_manifest(folder / "t.csv", root=tmp_path / "elsewhere")
    assert reasons(other) == {7: "t.csv line 7: the same image as line 6"}


def test_bad_jsonl_rows_name_their_line(tmp_path, chunking):
    rows = [
        {"path": "a.jpg", "label": "cat", "score": 1.5, "boxes": [[1, 2, 3, 4]]},
        {"label": "cat", "score": 1.5, "boxes": []},  # 2: no path key
        {"path": "", "label": "cat", "score": 1.5, "boxes": []},  # 3: empty path
        {"path": 7, "label": "cat", "score": 1.5, "boxes": []},  # 4: path not text
        {"path": "b.jpg", "label": "cat", "score": "high", "boxes": []},  # 5: text for a number
        {"path": "c.jpg", "label": "cat", "score": 1, "boxes": [[1, 2, 3, 4], [1, 2]]},  # 6
        {"path": "d.jpg", "label": "cat", "score": 1, "boxes": [[1, 2, 3]]},  # 7: k = 3
        {"path": "e.jpg", "label": 4, "score": 1, "boxes": []},  # 8: an integer among names
        {"path": "f.jpg", "label": "cat", "score": 2**70, "boxes": []},  # 9: beyond int64
        {"path": "g.jpg", "label": "cat", "score": 1e39, "boxes": []},  # 10: beyond float32
        {"path": "h.jpg", "label": "cat", "score": 2, "boxes": [[1, 2, 3, 4]]},  # 11: good
    ]
    m = read_manifest(write_jsonl(tmp_path / "t.jsonl", rows))
    assert m.columns == {"boxes": Feature("int64", (-1, 4)), "score": Feature("float32")}
    assert [r.line for r in m.rows] == [1, 11]
    got = reasons(m)
    assert (
        got[2]
        == got[3].replace("line 3", "line 2")
        == "t.jsonl line 2: no image path in column 'path'"
    )
    assert "is 7, not text" in got[4]
    assert got[5] == (
        "t.jsonl line 5: column 'score' holds float32 numbers, got 'high'; fix the value or "
        "remove the row"
    )
    assert "ragged list of lists (lengths [2, 4])" in got[6]
    assert "holds lists of 4-number lists (int64), got [[1, 2, 3]]" in got[7]
    assert "label 4 is not a class name" in got[8]
    assert "beyond the int64 range" in got[9]
    assert "beyond the float32 range" in got[10]
    assert m.bad[3].path == "b.jpg"


def test_a_nul_in_an_image_path_says_whether_it_is_a_file_name_or_a_url(tmp_path, chunking):
    """A URL holding a NUL was "not a usable file name"."""
    rows = [{"path": "a.jpg"}, {"path": "b\0.jpg"}, {"path": "https://h/c\0.png"},
            {"path": "data:image/png;base64,\0"}]  # fmt: skip
    got = reasons(read_manifest(write_jsonl(tmp_path / "t.jsonl", rows)))
    said = "the image path in column 'path' is not a usable"
    assert got == {2: f"t.jsonl line 2: {said} file name (it holds a NUL)",
                   3: f"t.jsonl line 3: {said} URL (it holds a NUL)",
                   4: f"t.jsonl line 4: {said} URL (it holds a NUL)"}  # fmt: skip


def test_an_integer_literal_too_long_for_python_is_a_bad_row_not_a_bad_file(tmp_path):
    path = tmp_path / "t.jsonl"
    huge = "9" * 5000  # int() refuses over 4,300 digits
    path.write_text(f'{{"path": "a.jpg", "n": 1}}\n{{"path": "b.jpg", "n": {huge}}}\n', "utf-8")
    m = read_manifest(path)
    assert [r.path for r in m.rows] == ["a.jpg"]
    assert reasons(m) == {2: "t.jsonl line 2: column 'n' holds an integer beyond the int64 range"}


def test_lists_that_no_column_can_hold_are_bad_rows(tmp_path, chunking):
    rows = [
        {"path": "a.jpg", "tags": [1, 2], "notes": ["", "x"]},
        {"path": "b.jpg", "tags": [1, "a"], "notes": []},
        {"path": "c.jpg", "tags": [None], "notes": []},
        {"path": "d.jpg", "tags": [{"a": 1}], "notes": []},
        {"path": "e.jpg", "tags": [], "notes": ["y", 3]},
    ]
    m = read_manifest(write_jsonl(tmp_path / "t.jsonl", rows))
    assert m.columns == {
        "notes": Feature("bytes", (-1,), text=True),
        "tags": Feature("int64", (-1,)),
    }
    assert m.fields(m.rows[0])["notes"] == ("", "x")
    assert reasons(m) == {
        2: "t.jsonl line 2: column 'tags' holds a list mixing int and text",
        3: "t.jsonl line 3: column 'tags' holds a list holding null",
        4: "t.jsonl line 4: column 'tags' holds a JSON object",
        5: "t.jsonl line 5: column 'notes' holds a list mixing int and text",
    }


def test_bad_parquet_rows_name_their_row_across_row_groups(tmp_path, chunking):
    rows = [{"path": f"{i}.jpg", "label": i % 3} for i in range(10)]
    rows[7]["path"] = None
    rows[8]["label"] = -1
    m = read_manifest(write_parquet(tmp_path / "t.parquet", rows, row_group_size=3))
    assert pq.ParquetFile(tmp_path / "t.parquet").num_row_groups == 4
    assert [r.line for r in m.rows] == [0, 1, 2, 3, 4, 5, 6, 9]
    assert reasons(m) == {
        7: "t.parquet row 7: no image path in column 'path'",
        8: "t.parquet row 8: label -1 is negative; integer labels count classes from 0",
    }


# ---- missing values --------------------------------------------------------------------------


def test_an_optional_number_column_is_refused_naming_its_first_empty_line(tmp_path, chunking):
    # 60 rows, one of which says "iscrowd": 1: skipping the other 59 (exit 0) would lose the
    # dataset; a number is not made up either. One line names the column, the first line
    # without a value and how many more there are, before any row is converted.
    rows = [{"path": f"{i}.jpg", "label": "cat"} for i in range(60)]
    rows[5]["iscrowd"] = 1
    with pytest.raises(SourceError) as caught:
        read_manifest(write_jsonl(tmp_path / "t.jsonl", rows))
    assert str(caught.value) == (
        f"{tmp_path / 't.jsonl'}: column 'iscrowd' has no value on line 1 and 58 more lines; "
        "a column of numbers (or true/false) needs one in every row: fill it in, or leave the "
        "column out (columns= names those to keep)"
    )
    rows[0]["iscrowd"], rows[1]["iscrowd"] = 0, None  # a JSON null is missing too
    with pytest.raises(SourceError, match="'iscrowd' has no value on line 2 and 57 more lines"):
        read_manifest(write_jsonl(tmp_path / "t.jsonl", rows))


def test_a_parquet_number_column_with_nulls_is_refused_naming_its_row(tmp_path, chunking):
    rows = [{"path": f"{i}.jpg", "area": float(i), "n": i} for i in range(5)]
    rows[3]["n"] = None
    path = write_parquet(tmp_path / "t.parquet", rows, row_group_size=2)
    with pytest.raises(SourceError, match=r"t\.parquet: column 'n' has no value on row 3;"):
        read_manifest(path)
    # A column the file types as int64 but holding no value at all is refused too (by its
    # values alone it would be a text column of empty strings)...
    table = pa.table({"path": ["a.jpg", "b.jpg"], "n": pa.array([None, None], pa.int64())})
    pq.write_table(table, tmp_path / "typed.parquet")
    with pytest.raises(SourceError, match="column 'n' has no value on row 0 and 1 more rows"):
        read_manifest(tmp_path / "typed.parquet")
    # ...while a column of no type (all nulls) is an empty text, as in JSONL and CSV.
    table = pa.table({"path": ["a.jpg", "b.jpg"], "note": pa.array([None, None], pa.null())})
    pq.write_table(table, tmp_path / "untyped.parquet")
    m = read_manifest(tmp_path / "untyped.parquet")
    assert m.columns == {"note": Feature("bytes", text=True)}
    assert [m.fields(r) for r in m.rows] == [{"note": ""}, {"note": ""}]


def test_an_empty_csv_cell_refuses_a_number_column_but_not_a_text_or_list_one(tmp_path, chunking):
    rows = [
        {"path": "a.jpg", "n": "3", "caption": "a cat"},
        {"path": "b.jpg", "n": "", "caption": ""},
        {"path": "c.jpg", "n": "4", "caption": ""},
    ]
    with pytest.raises(SourceError, match=r"t\.csv: column 'n' has no value on line 3; a column"):
        read_manifest(write_csv(tmp_path / "t.csv", rows))
    for row in rows:
        del row["n"]
    m = read_manifest(write_csv(tmp_path / "t.csv", rows))
    assert [m.fields(r)["caption"] for r in m.rows] == ["a cat", "", ""] and m.bad == []
    # A list left out (absent key, null) is an empty list; a text left out is "".
    lists = [{"path": "a.jpg", "boxes": [[1, 2, 3, 4]], "note": "x"}, {"path": "b.jpg"},
             {"path": "c.jpg", "boxes": None, "note": None}]  # fmt: skip
    m = read_manifest(write_jsonl(tmp_path / "t.jsonl", lists))
    assert m.bad == [] and [m.fields(r)["note"] for r in m.rows] == ["x", "", ""]
    assert [m.fields(r)["boxes"].shape for r in m.rows] == [(1, 4), (0, 4), (0, 4)]


# ---- manifests that cannot be read -----------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"name": "a.jpg", "label": "x"}], "no image column (columns: name, label); name the"),
        ([{"path": "a", "image": "b"}], "several image columns (columns: path, image)"),
        ([{"path": "a", "height": 3}], "column 'height' has the name of a built-in feature"),
    ],
)
def test_a_manifest_without_one_image_column_or_with_a_built_in_name_is_refused(
    tmp_path, rows, message
):
    for path in (write_csv(tmp_path / "t.csv", rows), write_parquet(tmp_path / "t.parquet", rows)):
        with pytest.raises(SourceError, match=message.replace("(", r"\(").replace(")", r"\)")):
            read_manifest(path)


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("t.xlsx", b"PK", r"t\.xlsx: is a file of unknown kind; pass a folder of images, or a"),
        ("t.csv", b"", r"t\.csv: is empty; the first line must name the columns"),
        ("t.csv", b"path,label\n", r"t\.csv: holds no rows"),
        # every line bad: it said 'holds no rows; add one row per image', of a file of rows
        ("t.jsonl", b'{"path": "a.jpg",}\n' * 2, r"t\.jsonl: no line of it is a row; the first"),
        ("t.csv", b"path,label,path\na,b,c\n", r"\['path', 'label', 'path'\] include an empty or"),
        ("t.jsonl", b'{"path": "a.jpg", "": 1}\n', r"include an empty or repeated name"),
        # pandas' to_csv of a DataFrame kept its index: it said 'include an empty or repeated
        # name', of the column every pandas user has written once
        (
            "t.csv",
            b",path,label\n0,a.jpg,cat\n",
            r"t\.csv: its first column has no name, as "
            r"pandas' to_csv writes a DataFrame's index: save it with to_csv\(\.\.\., index=",
        ),
        ("t.csv", b",path,\n0,a.jpg,cat\n", r"\['', 'path', ''\] include an empty or repeated"),
        ("t.parquet", b"PAR1 not really", r"t\.parquet: not a readable Parquet file"),
        (  # written as the test runs: pyarrow imports pandas to write it (1 s, every worker)
            "t.parquet",
            lambda: _parquet_bytes(pa.table({"path": ["a"], "blob": [b"\x00"]})),
            r"column 'blob' is of Parquet type binary; shardpack reads numbers",
        ),
    ],
)
def test_unreadable_manifests_raise_one_line_naming_the_problem(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content() if callable(content) else content)
    with pytest.raises(SourceError, match=message) as caught:
        read_manifest(tmp_path / name)
    assert "\n" not in str(caught.value)


def test_a_pandas_index_in_a_parquet_manifest_is_warned_of_naming_how_to_leave_it_out(tmp_path):
    """pandas' to_parquet of a filtered or sorted DataFrame writes its index as a column,
    `__index_level_0__`, which was packed as a feature without a word; datasets loads it as a
    column too (tests/sources/test_hf.py), so it is kept, and warned of."""
    import pandas as pd

    frame = pd.DataFrame(TABLE)
    kept = frame.sort_values("n")  # rows 1, 2, 0: no range, so to_parquet writes the index
    kept.to_parquet(tmp_path / "kept.parquet")
    assert pq.read_schema(tmp_path / "kept.parquet").names[-1] == "__index_level_0__"
    read = read_manifest(tmp_path / "kept.parquet")
    assert read.columns["__index_level_0__"].dtype == "int64"  # packed, as datasets loads it
    assert read.warnings == (
        f"{tmp_path / 'kept.parquet'}: column '__index_level_0__' holds a pandas DataFrame's "
        "index (pandas' name for an unnamed index: to_parquet and datasets' from_pandas write "
        "it of a filtered or reordered frame), packed as a feature, as datasets loads it; to "
        "leave it out, write the frame without it (to_parquet(..., index=False), "
        "from_pandas(..., preserve_index=False)), or pass --columns naming the columns to keep",
    )
    assert read_manifest(tmp_path / "kept.parquet", columns={"n": "n"}).warnings == ()
    kept.to_parquet(tmp_path / "plain.parquet", index=False)
    assert read_manifest(tmp_path / "plain.parquet").warnings == ()
    frame.to_parquet(tmp_path / "whole.parquet")  # a plain range: kept in the metadata alone
    assert "__index_level_0__" not in pq.read_schema(tmp_path / "whole.parquet").names
    assert read_manifest(tmp_path / "whole.parquet").warnings == ()
    two = kept.set_index([kept.index, kept.index * 2])  # two unnamed levels
    two.to_parquet(tmp_path / "two.parquet")
    (said,) = read_manifest(tmp_path / "two.parquet").warnings
    assert "columns '__index_level_0__', '__index_level_1__' hold a pandas DataFrame's " in said
    assert "packed as features, as datasets loads them; to leave them out, write" in said


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ('path,label\n"daisy/0.png,daisy\n', 2),  # the one row: else "holds no rows"
        ('path,label\na.png,x\n"daisy/0.png,daisy\nb.png,y\nc.png,z\n', 3),
        ('path,label\n"a\n.png",x\n\nb.png,"y\n\nc.png,z\n', 5),  # after a closed one
        ('"path,label\na.png,x\n', 1),  # in the header
        ('path,label\r\na.png,x\r\nb.png,"y\r\nc.png,z\r\n', 3),
    ],
)
def test_a_csv_quote_never_closed_names_the_line_it_opens_on(tmp_path, chunking, content, line):
    path = tmp_path / "quote.csv"
    path.write_bytes(content.encode())
    with pytest.raises(SourceError) as caught:
        read_manifest(path)
    assert str(caught.value) == (
        f"{path} line {line}: a quote opens here and is never closed, so the rest of the file "
        'reads as one cell; close it (a quote inside a quoted cell is written "")'
    )


def test_a_csv_quote_never_closed_in_a_long_file_names_its_row(tmp_path):
    path = tmp_path / "quote.csv"
    path.write_text('path,label\na.png,x\nb.png,"y\n' + "c.png,z\n" * 20_000, "utf-8")
    with pytest.raises(SourceError, match=r"quote\.csv line 3: malformed CSV \(a cell of the "
                       r"row on this line runs past 131072 characters, to line \d+\); check its "
                       r"quoting: is a quote never closed\?"):  # fmt: skip
        read_manifest(path)


@pytest.mark.parametrize(("name", "sep"), [("cc3m.tsv", "\t"), ("urls.csv", ",")])
def test_a_list_with_no_header_line_is_told_to_add_one(tmp_path, name, sep):
    """CC3M's TSV (caption, then URL; img2dataset's docs add a header) was read as columns
    named after its first row: 'no image column (columns: a dog, http://...)'."""
    path = tmp_path / name
    path.write_text(f"a dog{sep}http://x.example/1.jpg\na cat{sep}http://x.example/2.jpg\n")
    with pytest.raises(SourceError) as caught:
        read_manifest(path)
    assert as_flags(caught.value) == (
        f"{path}: its first line holds 'http://x.example/1.jpg', a row of the list, not the "
        f"names of its columns; add a first line that names them ({f'caption{sep}url'!r}), "
        "then pass --path-column url"
    )


def test_a_folder_with_two_metadata_files_is_refused(tmp_path):
    write_jsonl(tmp_path / "metadata.jsonl", [{"path": "a"}])
    write_csv(tmp_path / "metadata.csv", [{"path": "a"}])
    with pytest.raises(SourceError, match=r"holds metadata\.csv and metadata\.jsonl; keep one"):
        read_manifest(tmp_path)


def test_without_pyarrow_a_parquet_manifest_says_which_extra_to_install(tmp_path):
    write_parquet(tmp_path / "t.parquet", [{"path": "a.jpg"}])
    code = (
        "import sys; sys.modules['pyarrow'] = None\n"  # as if it were not installed
        "from shardpack.sources.tables.reader import read_manifest\n"
        f"read_manifest({str(tmp_path / 't.parquet')!r})\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    line = run.stderr.strip().splitlines()[-1]  # the error, naming both ways to install
    assert "pip install '.[parquet]' from shardpack's checkout" in line
    assert "pip install 'shardpack[parquet]'" in line


def test_reading_a_csv_manifest_does_not_import_pyarrow(tmp_path):
    write_csv(tmp_path / "t.csv", TABLE)
    code = (
        "import sys\nfrom shardpack.sources.tables.reader import read_manifest\n"
        f"read_manifest({str(tmp_path / 't.csv')!r})\nprint('pyarrow' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"


# ---- hostile manifests -----------------------------------------------------------------------


def test_a_symlinked_manifest_is_refused_even_when_its_target_is_fine(tmp_path):
    """...and names where it leads (a DVC checkout's manifest is a link into its cache, named
    by a hash): it said 'pass the file it points to' without saying which."""
    target = write_csv(tmp_path / "real.csv", TABLE)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "link.csv").symlink_to("../real.csv")  # relative, as DVC makes them
    with pytest.raises(SourceError, match=rf"link\.csv: is a symbolic link to {target}; "):
        read_manifest(tmp_path / "cache" / "link.csv")
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "metadata.csv").symlink_to(target)
    with pytest.raises(SourceError, match=r"metadata\.csv: is a symbolic link"):
        read_manifest(folder)


def test_a_fifo_manifest_is_refused_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "t.csv")
    errors: list[SourceError] = []

    def read() -> None:
        with pytest.raises(SourceError) as caught:
            read_manifest(tmp_path / "t.csv")
        errors.append(caught.value)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert "t.csv: is not a regular file" in str(errors[0])


@pytest.mark.parametrize("sep", [",", "\t"])
def test_a_carriage_return_inside_a_line_says_so_and_the_way_on_works(tmp_path, sep):
    """A Windows CSV given a column with sed ('s/$/,x/' writes after each line's \\r) stopped
    the run with the csv module's own words: 'new-line character seen in unquoted field - do
    you need to open the file in universal-newline mode?'; a TSV's header named a column
    'label\\r', which took the labels as text."""
    path = tmp_path / ("m.csv" if sep == "," else "m.tsv")
    path.write_bytes(f"path{sep}label\r{sep}note\r\na.jpg{sep}cat\r{sep}x\r\n".encode())
    with pytest.raises(SourceError) as caught:
        read_manifest(path)
    said = str(caught.value)
    assert said.startswith(f"{path} line 1: a carriage return (\\r) inside the line"), said
    fix = said.split("remove them (")[1].split("), then")[0]
    subprocess.run(["sh", "-c", fix], check=True)  # as the message says
    fixed = read_manifest(path)
    assert "note" in fixed.columns and fixed.bad == [] and fixed.label.values == ("cat",)


def test_a_giant_line_stops_the_read_without_loading_it(tmp_path, chunking):
    path = tmp_path / "t.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"path": "a.jpg"}\n')
        f.write(b'{"path": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n')
    with pytest.raises(SourceError, match=rf"line 2: longer than {MAX_LINE_BYTES} bytes"):
        read_manifest(path)
    big_cell = tmp_path / "t.csv"
    big_cell.write_text('path,caption\na.jpg,"' + "y\n" * MAX_TEXT_CHARS + '"\n', "utf-8")
    with pytest.raises(SourceError, match=r"t\.csv line \d+: malformed CSV"):
        read_manifest(big_cell)


@pytest.mark.parametrize(
    ("name", "write"),
    [("t.jsonl", write_jsonl), ("t.csv", write_csv), ("t.tsv", lambda p, r: write_csv(p, r, "\t"))],
)
def test_a_long_text_value_is_a_bad_row(tmp_path, chunking, name, write):
    """A scraped caption past the limit, on its own line (quoted or not), is its row's bad value
    in a CSV as in JSONL (the csv module's own field limit stopped the whole read), the rows
    after it read on; one quoted over many lines still stops it (a quote never closed)."""
    rows = [{"path": "a.jpg", "caption": "ok"}, {"path": "b.jpg", "caption": "z" * 200_000},
            {"path": "c.jpg", "caption": "a, \"quoted\" " + "y" * 200_000},
            {"path": "d.jpg", "caption": "after"}]  # fmt: skip
    m = read_manifest(write(tmp_path / name, rows))
    header = name != "t.jsonl"  # a CSV's first line names the columns
    assert reasons(m) == {
        line + header: f"{name} line {line + header}: column 'caption' holds a text of {size} "
        f"characters (over {MAX_TEXT_CHARS})"
        for line, size in [(2, 200_000), (3, 200_012)]
    }
    assert [row.path for row in m.rows] == ["a.jpg", "d.jpg"] and m.columns["caption"].text


def test_non_utf8_bytes_name_their_line(tmp_path, chunking):
    path = tmp_path / "t.csv"
    path.write_bytes("path,label\na.jpg,chat\nb.jpg,caf\xe9\n".encode("latin-1"))
    with pytest.raises(SourceError, match=r"t\.csv line 3: not UTF-8 text \(byte 10 of the line\)"):
        read_manifest(path)


@pytest.mark.parametrize(("name", "codec"), [("t.tsv", "utf-16"), ("t.csv", "utf-16-be"),
                                             ("t.jsonl", "utf-16-le")])  # fmt: skip
def test_a_utf16_manifest_says_it_is_utf16_and_how_to_make_it_utf8(tmp_path, name, codec):
    """Excel's 'Unicode Text' (a TSV) and Windows PowerShell's Out-File save UTF-16 with a
    byte-order mark: it was 'line 1: not UTF-8 text (byte 1 of the line)', right but no way on
    for a user who saved it so; now it names UTF-16 and the iconv that makes it UTF-8."""
    text = {"t.jsonl": '{"path": "a.jpg"}\r\n'}.get(name, "path\r\na.jpg\r\n")
    path = tmp_path / name
    path.write_bytes((text if codec == "utf-16" else "\ufeff" + text).encode(codec))  # a BOM
    stem, ext = name.split(".")
    with pytest.raises(SourceError) as caught:
        read_manifest(path)
    assert str(caught.value) == (
        f"{path}: is UTF-16 text (it starts with UTF-16's byte-order mark, as Excel's 'Unicode "
        "Text' and Windows PowerShell's Out-File save it); save the manifest as UTF-8: iconv -f "
        f"UTF-16 -t UTF-8 {name} > {stem}-utf8.{ext}"
    )
    converted = tmp_path / f"{stem}-utf8.{ext}"  # as the command says: read
    subprocess.run(["iconv", "-f", "UTF-16", "-t", "UTF-8", str(path)], check=True,
                   stdout=converted.open("wb"))  # fmt: skip
    assert [row.path for row in read_manifest(converted).rows] == ["a.jpg"]


@pytest.mark.parametrize("rows", [2, 100_000])  # a small file; one past the 1 MiB of a line
def test_a_csv_whose_lines_end_in_a_carriage_return_alone_says_so(tmp_path, rows):
    """Excel for Mac once saved CSV so (pandas reads it): a small one said 'new-line character
    seen in unquoted field - do you need to open the file in universal-newline mode?', a large
    one 'longer than 1048576 bytes ... is this really a manifest?'."""
    path = tmp_path / "mac.csv"
    path.write_bytes(b"path,label\r" + b"a.jpg,cat\r" * rows)
    said = r"mac\.csv: its lines end in a carriage return alone \(as Excel for Mac once saved"
    with pytest.raises(SourceError, match=said):
        read_manifest(path)
    path.write_bytes(b'path,caption\na.jpg,"one\rtwo"\r\n')  # a CR inside a cell: a row
    assert [row.path for row in read_manifest(path).rows] == ["a.jpg"]


def test_lines_that_are_not_json_objects_are_bad_rows_naming_their_line(tmp_path):
    path = tmp_path / "t.jsonl"
    nested = '{"path": "c.jpg", "x": ' + "[" * 200_000 + "]" * 200_000 + "}"
    path.write_text('\n'.join(['{"path": "a.jpg"}', '{"path": "b",', '["b.jpg"]', nested,
                               '{"path": "d.jpg"}']) + "\n", "utf-8")  # fmt: skip
    manifest = read_manifest(path)
    assert [row.path for row in manifest.rows] == ["a.jpg", "d.jpg"]
    assert [(bad.line, bad.reason.split(" (")[0]) for bad in manifest.bad] == [
        (2, "t.jsonl line 2: not valid JSON"),
        (3, 't.jsonl line 3: holds a JSON list, not an object like {"file_name": "a.jpg"}'),
        (4, "t.jsonl line 4: not valid JSON"),
    ]
    assert "nested too deeply" in manifest.bad[2].reason


def test_a_float_label_says_it_is_a_float_not_that_other_labels_are_names(tmp_path):
    """pandas writes an integer label column with a gap as doubles: every row said 'label 0.0
    is not a class name, as the column's other labels', of a column holding no name."""
    table = pa.table({"path": ["a.jpg", "b.jpg", "c.jpg"], "label": [0.0, None, 2.0]})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    m = read_manifest(path)
    assert m.rows == [] and [bad.line for bad in m.bad] == [0, 1, 2]
    assert m.bad[0].reason == (
        "t.parquet row 0: label 0.0 is a float, but a label is an integer (a class number) or "
        "text (a class name): write it as one (pandas makes integers with a gap floats: "
        "astype('Int64'))"
    )


def test_a_jsonl_line_holding_a_key_twice_is_a_bad_row_as_pyarrow_refuses_it(tmp_path):
    """json.loads keeps the last of two `label`s (so a row read 'dog' where pyarrow's reader,
    and datasets' with it, refuse the line: 'Column(/label) was specified twice')."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"path": "a.jpg", "label": "cat", "label": "dog"}\n'
                    '{"path": "b.jpg", "label": "cat", "x": {"n": 1, "n": 2}}\n'
                    '{"path": "c.jpg", "label": "dog", "n": 1}\n'
                    '{"path": "d.jpg", "label": "cat", "big": 1%s, "path": "e.jpg"}\n'
                    % ("0" * 30), "utf-8")  # fmt: skip
    with pytest.raises(pa.ArrowInvalid, match="specified twice"):
        pa.json.read_json(path)  # the reference
    manifest = read_manifest(path)
    assert [row.path for row in manifest.rows] == ["c.jpg"]
    assert [(bad.line, bad.reason.split(" twice")[0]) for bad in manifest.bad] == [
        (1, "t.jsonl line 1: holds the key 'label'"),
        (2, "t.jsonl line 2: holds the key 'n'"),
        (4, "t.jsonl line 4: holds the key 'path'"),  # read again for its huge integer
    ]


# ---- near misses: warned of by name ----------------------------------------------------------


def test_a_column_a_typo_away_from_label_or_split_or_the_image_is_named(tmp_path):
    rows = [{"filepath": "a.jpg", "lable": "cat"}]
    with pytest.raises(SourceError, match=r"no image column: did you mean 'filepath'\? .*"
                       "pass path_column='filepath'"):  # fmt: skip
        read_manifest(write_csv(tmp_path / "a.csv", rows))
    rows = [{"path": "a.jpg", "lable": "cat", "splt": "train"}]
    table = read_manifest(write_jsonl(tmp_path / "b.jsonl", rows))
    assert table.label is None and "lable" in table.columns  # packed as asked, but said
    assert table.warnings == (
        "b.jsonl: no 'label' column: did you mean 'lable'? (taken as a feature; rename it "
        "'label' to label the images)",
        "b.jsonl: no 'split' column: did you mean 'splt'? (taken as a feature; rename it "
        "'split' to split them)",
    )


def test_a_url_lists_url_column_is_named_as_the_image_column(tmp_path):
    """LAION's columns (URL, TEXT), img2dataset's url_col: the error named no column."""
    rows = [{"URL": "http://example.com/a.jpg", "TEXT": "a cat"}]
    with pytest.raises(SourceError, match=r"no image column: did you mean 'URL'\? .*"
                       "pass path_column='URL'"):  # fmt: skip
        read_manifest(write_csv(tmp_path / "laion.csv", rows))


def test_a_csv_number_column_made_text_by_a_few_cells_is_named(tmp_path):
    rows = [{"path": f"{i}.jpg", "score": "n/a" if i in (3, 5) else str(i / 2),
             "caption": f"photo {i}"} for i in range(8)]  # fmt: skip
    table = read_manifest(write_csv(tmp_path / "s.csv", rows))
    assert table.columns["score"].text  # as before: one text cell makes the column text
    assert table.warnings == (
        "s.csv: column 'score' reads as text, as 'n/a' on line 5 is not a number: its 6 number "
        "cells are text too; if it is a number column, fix the 2 other cells",
    )  # a text column (caption) is not named


def test_a_csv_label_that_looks_like_a_json_list_says_multi_label_needs_jsonl(tmp_path):
    rows = [{"path": "a.jpg", "label": '["cat","dog"]'}, {"path": "b.jpg", "label": "cat"}]
    table = read_manifest(write_csv(tmp_path / "m.csv", rows))
    assert table.warnings == (
        'm.csv: label \'["cat","dog"]\' looks like a list of labels, but a CSV label is one '
        "class name (each list is a class of its own); multi-label needs JSONL or Parquet, "
        "whose label can hold a list",
    )
