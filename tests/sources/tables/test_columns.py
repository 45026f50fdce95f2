"""--columns: a manifest's columns kept as features, named otherwise (TEXT=caption), the others
not read; on LAION-shaped lists (SAMPLE_ID, URL, TEXT, HEIGHT, WIDTH, LICENSE, NSFW,
similarity, HEIGHT and WIDTH empty on some rows), as Parquet, CSV and JSONL."""

from __future__ import annotations

import pytest

from shardpack import PackOptions, iter_examples, pack
from shardpack.errors import OptionError, OutputError, SourceError
from shardpack.options import as_flags
from shardpack.sources import scan
from tests import helpers
from tests.helpers import laion_rows, spoil_columns

KEPT = ("TEXT=caption", "similarity", "NSFW")


def test_a_laion_part_packs_with_the_columns_kept_and_the_others_unread(tmp_path):
    """A LAION part stopped the run at its first empty HEIGHT ("fill it in, or drop the
    column"), and nothing could drop one: --columns keeps the columns named, under the names
    given, and reads no other (their pages spoiled here: reading them would fail)."""
    src = helpers.write_parquet(tmp_path / "part-00000.parquet", laion_rows(tmp_path / "img"))
    with pytest.raises(SourceError) as caught:
        scan(src, PackOptions(path_column="URL"))
    assert as_flags(caught.value).endswith(
        "column 'HEIGHT' has no value on row 1; a column of numbers (or true/false) needs one "
        "in every row: fill it in, or leave the column out (--columns names those to keep)"
    )
    spoil_columns(src, "SAMPLE_ID", "HEIGHT", "WIDTH", "LICENSE")
    options = PackOptions(path_column="URL", columns=KEPT, workers=1, shuffle=False)
    done = pack(src, tmp_path / "out", options)
    assert done.to_json()["features"] == {"NSFW": "text", "caption": "text",
                                          "similarity": "float32"}  # fmt: skip
    records = list(iter_examples(tmp_path / "out"))
    assert [(r["caption"], r["NSFW"], r["similarity"]) for r in records] == [
        (f"a photo of {i}", "UNLIKELY", 0.25 + i / 8) for i in range(4)
    ]
    assert not {"TEXT", "HEIGHT", "WIDTH", "LICENSE", "SAMPLE_ID"} & set(records[0])
    # none but what is always taken: the image (its key, sizes, ...) alone
    bare = pack(src, tmp_path / "bare", PackOptions(path_column="URL", columns=(), workers=1))
    assert bare.to_json()["features"] == {}


def test_the_same_list_as_csv_jsonl_and_parquet_packs_to_the_same_shards(tmp_path):
    """CSV and JSONL have no way to skip a column's cells: theirs are parsed and dropped
    before typing (HEIGHT's empty cells say nothing), to the bytes Parquet's projection
    gives."""
    rows = laion_rows(tmp_path / "img")
    written = [helpers.write_parquet(tmp_path / "list.parquet", rows),
               helpers.write_jsonl(tmp_path / "list.jsonl", rows),
               helpers.write_csv(tmp_path / "list.csv",
                                 [{k: "" if v is None else v for k, v in r.items()}
                                  for r in rows])]  # fmt: skip
    shards = []
    for src in written:
        out = tmp_path / src.suffix[1:]
        pack(src, out, PackOptions(path_column="URL", columns=KEPT, workers=1, name="laion"))
        shards.append(helpers.shard_files(out))
    assert shards[0] and shards[0] == shards[1] == shards[2]


def test_a_column_choice_that_names_no_column_is_one_line_naming_the_one_meant(tmp_path):
    src = helpers.write_csv(tmp_path / "laion.csv", [
        {k: "" if v is None else v for k, v in row.items()} for row in laion_rows(tmp_path / "i")
    ])  # fmt: skip
    done = helpers.run_cli("pack", str(src), str(tmp_path / "out"), "--path-column", "URL",
                           "--columns", "TXET=caption,similarity")  # fmt: skip
    helpers.one_line_error(done, f"{src}: --columns names 'TXET', which is not one of its "
                           "columns: did you mean 'TEXT'? (columns: SAMPLE_ID, URL, TEXT, "
                           "HEIGHT, WIDTH, LICENSE, NSFW, similarity)")  # fmt: skip
    assert not (tmp_path / "out" / "index.json").exists()

    def refused(*columns: str, **given) -> str:
        with pytest.raises(SourceError) as caught:
            scan(src, PackOptions(path_column="URL", columns=columns, **given))
        return as_flags(caught.value).removeprefix(f"{src}: --columns names ")

    # a case away, as LAION's TEXT is from img2dataset's docs' text
    assert refused("text").startswith("'text', which is not one of its columns: did you mean "
                                      "'TEXT'?")  # fmt: skip
    assert refused("URL") == ("'URL', the column of image paths, which is always taken; leave "
                              "it out of --columns")  # fmt: skip
    assert refused("NSFW", label_column="NSFW").startswith("'NSFW', the column of labels")
    assert refused("TEXT=width") == ("TEXT=width: 'width' is a built-in feature's name; name "
                                     "that feature otherwise")  # fmt: skip
    assert refused("TEXT=caption", "NSFW=caption") == (
        "NSFW=caption: another kept column's feature is named 'caption' too; name that feature "
        "otherwise"
    )
    with pytest.raises(OptionError, match="names column 'TEXT' twice"):
        scan(src, PackOptions(path_column="URL", columns=("TEXT", "TEXT=caption")))
    with pytest.raises(OptionError, match="entries are NAME or NAME=FEATURE"):
        scan(src, PackOptions(path_column="URL", columns=("TEXT=",)))


def test_a_column_named_with_a_comma_or_an_equals_sign_is_written_escaped(tmp_path):
    """--columns cut every ',' and the first '=' of an entry, so a column named 'rate, %' or
    'k=v' could not be kept, and where the pieces were columns too ('k' beside 'k=v') the
    entry kept them instead, silently. `\\,` and `\\=` write them in a name now; an entry
    that cuts such a column into names of no column is refused naming the way to write it,
    and one that cuts it into columns there are is warned of."""
    folder = tmp_path / "img"
    rows = [{"path": str(helpers.write_image(folder / f"{i}.jpg", helpers.image(i))),
             "rate, %": 0.5 + i, "k=v": f"kv {i}", "k": i, "caption": f"photo {i}"}
            for i in range(2)]  # fmt: skip
    src = helpers.write_csv(tmp_path / "list.csv", rows)
    done = helpers.run_cli("pack", str(src), str(tmp_path / "out"), "--no-shuffle",
                           "--columns", "rate\\, %,k\\=v=kv,caption", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = list(iter_examples(tmp_path / "out"))
    assert [(r["rate, %"], r["kv"], r["caption"]) for r in records] == [
        (0.5, "kv 0", "photo 0"), (1.5, "kv 1", "photo 1"),
    ]  # fmt: skip
    assert "k" not in records[0]
    done = helpers.run_cli("pack", str(src), str(tmp_path / "cut"), "--columns", "rate, %")
    helpers.one_line_error(
        done,
        f"{src}: --columns cuts column 'rate, %' at its comma; write it "
        "rate\\, %: a ',' or '=' in a column's name is written \\, or \\=",
    )
    assert not (tmp_path / "cut").exists()
    warned = scan(src, PackOptions(columns=("k=v",))).warnings
    assert (
        "list.csv: column 'k=v' is not kept, though the columns kept ('k=v') spell its "
        in (warned[0])
    )
    assert warned[0].endswith("is written \\, or \\=: k\\=v")


def test_a_box_column_is_always_taken_and_keeps_its_name(tmp_path):
    folder = tmp_path / "img"
    path = helpers.write_image(folder / "0.jpg", helpers.image(0))
    rows = [{"path": str(path), "det": [[0.1, 0.2, 0.3, 0.4]], "note": "x", "score": 1}]
    src = helpers.write_jsonl(tmp_path / "boxes.jsonl", rows)
    options = PackOptions(box_columns=("det:xyxy",), columns=("note",))
    assert set(scan(src, options).schema.extras) == {"det", "note"}
    with pytest.raises(SourceError, match="det=boxes: boxes are found by their feature's name"):
        scan(src, PackOptions(box_columns=("det",), columns=("det=boxes",)))


def test_a_grow_keeps_the_datasets_columns_and_refuses_others(tmp_path):
    rows = laion_rows(tmp_path / "img", count=5)
    src = helpers.write_parquet(tmp_path / "list.parquet", rows[:3])
    out = tmp_path / "out"
    pack(src, out, PackOptions(path_column="URL", columns=KEPT[:2], workers=1))
    with pytest.raises(OutputError) as caught:
        pack(src, out, PackOptions(grow="append", columns=("TEXT",)))
    assert as_flags(caught.value).endswith(
        "the dataset was packed with other options: --columns TEXT (the dataset's: --columns "
        "TEXT=caption,similarity); drop them: --append takes the dataset's own"
    )
    helpers.write_parquet(src, rows)  # two rows more, HEIGHT empty on row 1 still
    grown = pack(src, out, PackOptions(grow="append", workers=1))
    assert grown.grow["added"] == 2
    records = {r["caption"]: r for r in iter_examples(out)}
    assert sorted(records) == [f"a photo of {i}" for i in range(5)]
    assert set(records["a photo of 4"]) >= {"caption", "similarity"}
    assert not {"NSFW", "TEXT"} & set(records["a photo of 4"])
