"""The WebDataset container's img2dataset naming (--wds-naming img2dataset): samples that code
written for img2dataset's output reads unchanged, and that shardpack reads back as written."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from shardpack import PackOptions, ShardpackError, iter_examples, pack
from shardpack.containers import checked, get_container
from shardpack.storage import storage_at
from tests import helpers


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """A manifest of 4 JPEGs (one 20x30, the rest 24x32) with captions and a score, packed
    with img2dataset's naming, re-encoded to 16x16; and each file's row, by its path."""
    root = tmp_path_factory.mktemp("img2ds")
    rows = {}
    for i in range(4):
        size = (20, 30) if i == 0 else (24, 32)
        path = helpers.write_image(root / f"{i}.jpg", helpers.image(i, *size))
        rows[str(path)] = {"url": str(path), "caption": f"photo {i}", "score": 0.3 + i / 10,
                           "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                           "size": size}  # fmt: skip
    src = helpers.write_csv(
        root / "list.csv", [{k: r[k] for k in ("url", "caption", "score")} for r in rows.values()]
    )
    options = PackOptions(path_column="url", format="webdataset", wds_naming="img2dataset",
                          workers=1, encode="jpeg", resize=(16, 16))  # fmt: skip
    pack(src, root / "out", options)
    return root / "out", rows


def _extensions(shard: Path) -> list[str]:
    with tarfile.open(shard) as tar:
        return [name.rsplit(".", 1)[1] for name in tar.getnames()]


def test_samples_are_named_as_img2dataset_names_them(packed):
    out, rows = packed
    (shard,) = out.glob("*.tar")
    assert _extensions(shard) == ["jpg", "txt", "json"] * 4
    # and shardpack reads back the records written, img2dataset's fields aside
    records = {r["key"]: r for r in iter_examples(out)}
    assert records.keys() == rows.keys()
    for path, record in records.items():
        assert record["caption"] == rows[path]["caption"]
        assert (record["height"], record["width"]) == (16, 16)
        assert not {"url", "status", "sha256", "original_width"} & record.keys()


def test_datasets_loads_the_card_s_splits_as_its_webdataset_loader_reads_tars(packed, tmp_path):
    """The card declared the records' features (image, key, ...), which are no columns of a
    tar's samples: `datasets` cast each sample to them and gave rows of None."""
    datasets = pytest.importorskip("datasets")
    out, rows = packed
    # its own cache: datasets keys one by the card, and another run's pack has the same card
    (train,) = datasets.load_dataset(str(out), cache_dir=str(tmp_path)).values()
    assert len(train) == len(rows)
    for row in train:
        assert row["jpg"].size == (16, 16)
        assert row["txt"] == rows[row["json"]["url"]]["caption"]


def test_a_pack_of_jpegs_and_pngs_kept_says_datasets_misreads_its_samples(tmp_path):
    """--encode keep named one sample's image .jpg, the other's .png, and datasets.load_dataset
    refused the pack ("don't share the same prefix or the same types") where its first 5
    samples mixed them, else loaded the other format's images as None: pack said nothing,
    then said it refuses. One format, or a container that names no member by format, says
    nothing."""
    for i in range(5):
        helpers.write_image(tmp_path / "src" / "cat" / f"a{i}.png", helpers.image(i))
    helpers.write_image(tmp_path / "src" / "cat" / "b.jpg", helpers.image(9))

    def said(out: str, **given) -> list[str]:
        options = PackOptions(workers=1, shuffle=False, **{"format": "webdataset", **given})
        return pack(tmp_path / "src", tmp_path / out, options).to_json()["warnings"]

    (line,) = said("kept")
    assert "2 formats (jpeg, png)" in line
    assert "datasets.load_dataset(OUT) misreads: it takes its first samples' members for " \
        "every sample's, so another format's images load as None" in line  # fmt: skip
    datasets = pytest.importorskip("datasets")
    (train,) = datasets.load_dataset(str(tmp_path / "kept"), cache_dir=str(tmp_path)).values()
    assert [row["png"] is None for row in train] == [False] * 5 + [True]  # b.jpg's, last
    assert "img2dataset" not in line
    # img2dataset's naming: its readers' to_tuple("jpg", ...) failed on the PNG's sample, unsaid
    (line,) = said("named", wds_naming="img2dataset")
    assert "(to_tuple('jpg', 'txt', 'json')) finds no .jpg" in line, line
    assert line.endswith("encoding them as jpeg names each .jpg, as img2dataset's default does")
    assert said("png", encode="png") == said("tfrecord", format="tfrecord") == []


def test_only_bytes_no_member_takes_are_said_to_ride_in_the_json():
    """A feature of bytes that are no text is a member (`mask`, `objects/mask`); a list of them,
    or a name a member cannot take, stays in the .json as \\udcXX escapes: that alone is
    warned of (every one was, as datasets refused them all)."""
    from shardpack.containers.webdataset import bytes_members
    from shardpack.schema import Feature, Schema

    blob = Feature("bytes")
    crops, caption = Feature("bytes", (-1,)), Feature("bytes", text=True)
    schema = Schema.build(extra={"mask": blob, "objects/mask": blob, "crops": crops, "a b": blob,
                                 "caption": caption})  # fmt: skip
    assert bytes_members(schema) == {"mask": "mask.bin", "objects/mask": "objects.mask.bin"}
    (line,) = get_container("webdataset").naming_notes("shardpack", schema, ["png"])
    assert line.startswith("its samples' .json holds 'crops', 'a b', bytes that are no text")


def test_a_mask_is_a_member_of_its_own_that_datasets_and_webdataset_read(tmp_path):
    """A COCO pack's `mask` PNG rode in each .json as \\udcXX escapes (\\udc89PNG...):
    datasets.load_dataset(OUT) stopped in a traceback (pyarrow: 'surrogates not allowed'). Now
    it is each sample's `.mask.bin` (an empty one for a record of no objects), which datasets,
    webdataset and shardpack read as the bytes packed; a pack whose .json held it (as
    every pack before) still reads."""
    src = helpers.write_objects_parquet(tmp_path / "o.parquet", helpers.OBJECT_ROWS,
                                        helpers.OBJECT_CLASSES)  # fmt: skip
    options = PackOptions(workers=1, format="webdataset", encode="png", shuffle=False)
    warned = pack(src, tmp_path / "out", options).to_json()["warnings"]
    assert not [w for w in warned if "bytes that are no text" in w]
    masks = [r["mask"] for r in iter_examples(tmp_path / "out")]
    assert masks[0].startswith(b"\x89PNG") and masks[2] == b""
    (shard,) = (tmp_path / "out").glob("*.tar")
    with tarfile.open(shard) as tar:
        names = tar.getnames()
        assert names[:3] == ["train-000000_000000.png", "train-000000_000000.mask.bin",
                             "train-000000_000000.json"]  # fmt: skip
        assert b"mask" not in tar.extractfile(names[2]).read()
    datasets = pytest.importorskip("datasets")
    (train,) = datasets.load_dataset(str(tmp_path / "out"), cache_dir=str(tmp_path / "c")).values()
    assert [row["mask.bin"] for row in train] == masks
    helpers.needs("webdataset")
    with helpers.torch_held_out():  # wids imports torch (seconds): the same grouping by key
        import webdataset as wds

        assert [s["mask.bin"] for s in wds.WebDataset(str(shard), shardshuffle=False)] == masks
    # as packed before: the writer of no schema keeps every feature in the .json
    container = get_container("webdataset")
    (tmp_path / "old").mkdir()
    with container.writer(tmp_path / "old" / shard.name) as writer:
        for record in iter_examples(tmp_path / "out"):
            writer.write({k: v.item() if hasattr(v, "item") and v.ndim == 0 else v
                          for k, v in record.items()})  # fmt: skip
    with tarfile.open(tmp_path / "old" / shard.name) as tar:
        assert not [n for n in tar.getnames() if n.endswith(".bin")]
    with container.open(storage_at(tmp_path / "old"), shard.name) as old:
        assert [checked(old[i])["mask"] for i in range(len(old))] == [[m] for m in masks]


def test_a_list_whose_captions_are_not_named_caption_says_its_samples_hold_no_txt(tmp_path):
    """LAION's captions are its `TEXT` column: img2dataset's naming wrote no .txt for them (it
    takes `caption`'s), pack said nothing, and code written for img2dataset's output failed at
    the first sample (webdataset: "didn't find ['txt']"). A `caption` column, or no text
    column at all (a bare list of URLs, as img2dataset writes it), says nothing."""
    path = helpers.write_image(tmp_path / "0.jpg", helpers.image(0))

    def said(columns: dict[str, object], out: str) -> list[str]:
        src = helpers.write_csv(tmp_path / f"{out}.csv", [{"url": str(path), **columns}])
        options = PackOptions(path_column="url", format="webdataset", wds_naming="img2dataset",
                              workers=1)  # fmt: skip
        return pack(src, tmp_path / out, options).to_json()["warnings"]

    (line,) = said({"TEXT": "a photo", "NSFW": "UNLIKELY", "similarity": 0.3}, "laion")
    assert line.startswith("no 'caption' column, so no sample holds a .txt"), line
    assert line.endswith("the text columns ('NSFW', 'TEXT') are in each .json: name the "
                         "captions' feature 'caption' for a .txt (a list's: --columns "
                         "TEXT=caption, with the other columns to keep)")  # fmt: skip
    assert said({"caption": "a photo", "TEXT": "x"}, "captioned") == []
    assert said({"similarity": 0.3}, "bare") == []


@pytest.mark.heavy  # webdataset imports torch
def test_webdataset_reads_it_as_img2dataset_docs_show(packed):
    helpers.needs("webdataset")
    # torch held out, as write_tars holds it: reading tars needs none of its ~2 s of import
    with helpers.torch_held_out():
        import webdataset as wds

        out, rows = packed
        (shard,) = out.glob("*.tar")
        dataset = wds.WebDataset(str(shard), shardshuffle=False).decode("pil")
        seen = []
        for image, text, meta in dataset.to_tuple("jpg", "txt", "json"):
            row = rows[meta["url"]]
            seen.append(meta["url"])
            assert image.size == (16, 16) and text == row["caption"] == meta["caption"]
            assert (meta["original_height"], meta["original_width"]) == row["size"]
            assert (meta["height"], meta["width"], meta["status"]) == (16, 16, "success")
            assert meta["sha256"] == row["sha256"]  # of the bytes as they came, as img2dataset's
            # a float32 feature's shortest text, as the list had it: 0.4, not 0.4000000059604645
            assert meta["error_message"] is None and meta["score"] == row["score"]
        assert sorted(seen) == sorted(rows)
        keys = [s["__key__"] for s in wds.WebDataset(str(shard), shardshuffle=False)]
        assert [m["key"] for (m,) in dataset.to_tuple("json")] == keys  # json's key is the sample's


def test_an_append_keeps_the_datasets_naming(tmp_path):
    paths = [helpers.write_image(tmp_path / f"{i}.jpg", helpers.image(i)) for i in range(3)]
    rows = [{"url": str(p), "caption": f"photo {i}"} for i, p in enumerate(paths)]
    src = helpers.write_csv(tmp_path / "list.csv", rows[:2])
    given = {"path_column": "url", "format": "webdataset", "workers": 1}
    pack(src, tmp_path / "out", PackOptions(**given, wds_naming="img2dataset"))
    helpers.write_csv(tmp_path / "list.csv", rows)
    grown = pack(src, tmp_path / "out", PackOptions(**given, grow="append"))  # no naming said
    assert grown.new_records == 1
    shards = sorted((tmp_path / "out").glob("*.tar"))
    assert len(shards) == 2  # the new item in a new shard, named as the dataset's are
    assert all(_extensions(shard)[:3] == ["jpg", "txt", "json"] for shard in shards)
    assert {r["key"] for r in iter_examples(tmp_path / "out")} == {str(p) for p in paths}


def test_an_index_from_before_the_naming_grows_with_shardpacks(tmp_path):
    paths = [helpers.write_image(tmp_path / f"{i}.jpg", helpers.image(i)) for i in range(3)]
    rows = [{"url": str(p), "caption": f"photo {i}"} for i, p in enumerate(paths)]
    src = helpers.write_csv(tmp_path / "list.csv", rows[:2])
    given = {"path_column": "url", "format": "webdataset", "workers": 1}
    pack(src, tmp_path / "out", PackOptions(**given))
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    del index["options"]["wds_naming"]  # as an index written before --wds-naming
    (tmp_path / "out" / "index.json").write_text(json.dumps(index))
    helpers.write_csv(tmp_path / "list.csv", rows)
    assert pack(src, tmp_path / "out", PackOptions(**given, grow="append")).new_records == 1
    shards = sorted((tmp_path / "out").glob("*.tar"))
    assert [_extensions(shard) for shard in shards] == [["jpg", "json"] * 2, ["jpg", "json"]]


def test_shardpacks_naming_keeps_features_named_as_img2dataset_fields(tmp_path):
    """A url and a status column of a dataset packed with shardpack's naming stay features:
    only a .json whose key is its sample's is img2dataset's."""
    data = helpers.write_image(tmp_path / "a.jpg", helpers.image(0)).read_bytes()
    record = {"image": data, "height": 24, "width": 32, "channels": 3, "format": b"jpeg",
              "key": b"a.jpg", "url": b"http://example.com/a.jpg", "status": b"ok"}  # fmt: skip
    container = get_container("webdataset")
    (tmp_path / "old").mkdir()
    with container.writer(tmp_path / "d-train-000000.tar") as writer:
        writer.write(record)
    (read,) = [checked(e) for _, e in container.iter_records(*helpers.at(writer.path))]
    assert read["key"] == [b"a.jpg"] and read["url"] == [b"http://example.com/a.jpg"]
    assert read["status"] == [b"ok"]


def test_img2dataset_naming_refuses_a_column_its_json_takes_and_other_formats(tmp_path):
    path = helpers.write_image(tmp_path / "a.jpg", helpers.image(0))
    src = helpers.write_csv(tmp_path / "l.csv", [{"url": str(path), "status": "ok"}])
    options = PackOptions(path_column="url", format="webdataset", wds_naming="img2dataset")
    with pytest.raises(ShardpackError, match=r"'status'.*rename that column"):
        pack(src, tmp_path / "out", options)
    with pytest.raises(ShardpackError, match=r"format=.tfrecord. has none: drop wds_naming="):
        PackOptions(wds_naming="img2dataset")


@pytest.mark.heavy  # webdataset imports torch
def test_a_laion_list_s_text_is_each_sample_s_txt_with_its_columns_renamed(tmp_path):
    """LAION's captions are its `TEXT` column, and img2dataset's naming writes a .txt of a
    `caption` feature only: --columns TEXT=caption (img2dataset's --caption_col TEXT) names it
    so, and the columns kept (its --save_additional_columns) are in the .json, the others not."""
    helpers.needs("webdataset")
    rows = helpers.laion_rows(tmp_path / "img")
    src = helpers.write_parquet(tmp_path / "part-00000.parquet", rows)
    options = PackOptions(path_column="URL", columns=("TEXT=caption", "similarity"),
                          format="webdataset", wds_naming="img2dataset", workers=1)  # fmt: skip
    assert pack(src, tmp_path / "out", options).to_json()["warnings"] == []
    (shard,) = (tmp_path / "out").glob("*.tar")
    with helpers.torch_held_out():
        import webdataset as wds

        dataset = wds.WebDataset(str(shard), shardshuffle=False).decode("pil")
        samples = dataset.to_tuple("jpg", "txt", "json")
        got = {meta["url"]: (text, meta) for _, text, meta in samples}
    assert got.keys() == {row["URL"] for row in rows}
    for row in rows:
        text, meta = got[row["URL"]]
        assert text == meta["caption"] == row["TEXT"]
        assert meta["similarity"] == row["similarity"]
        assert not {"TEXT", "HEIGHT", "WIDTH", "NSFW", "LICENSE", "SAMPLE_ID"} & set(meta)
