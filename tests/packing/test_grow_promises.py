"""Grows keep every promise a fresh pack makes (issues 33 and 34): copies, leaks and skips are
found and told as a fresh pack of the final tree tells them, statistics cover every record, a
skip survives a rewrite, no grow writes an empty shard or a name OUT holds, an item changes
when any of its fields does, a held item keeps its split, and OUT's bookkeeping is bounded."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from shardpack.errors import OutputError
from shardpack.index import json_values, load_index
from shardpack.options import PackOptions
from shardpack.packing import stamps
from shardpack.packing.packer import pack
from shardpack.read.stream import iter_examples
from shardpack.sources import Source
from shardpack.storage import storage_at
from tests.helpers import (
    image,
    jpeg,
    make_tree,
    one_line_error,
    run_cli,
    shard_files,
    write_csv,
    write_image,
)


def _split_tree(root: Path) -> Path:
    """train/ and test/ of two classes; train/cat/img_001.jpg is a copy of a test image."""
    src = root / "src"
    for split, seed in (("train", 0), ("test", 500)):
        for cls, n, offset in (("cat", 4, 0), ("dog", 3, 5)):
            for i in range(n):
                write_image(src / split / cls / f"img_{i:03d}.jpg", image(seed + 10 * i + offset))
    _copy(src, "test/cat/img_000.jpg", "train/cat/img_001.jpg")
    return src


def _copy(src: Path, what: str, to: str) -> None:
    (src / to).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / what, src / to)


def _told(out: Path) -> dict:
    """What index.json says of the records, skips, copies and statistics, and the keys read."""
    doc = json.loads((out / "index.json").read_text())
    return {
        "classes": doc["classes"],
        "keys": {s: sorted(r["key"] for r in iter_examples(out, s)) for s in doc["splits"]},
        "class_counts": {name: split["class_counts"] for name, split in doc["splits"].items()},
        "skipped": sorted((s["key"], s["reason"]) for s in doc["skipped"]),
        "num_skipped": doc["num_skipped"],
        "duplicates": doc["duplicates"],
        "summaries": doc["summaries"],
        "warnings": doc["warnings"],  # a label conflict's among them
        "ignored": (doc["ignored"], doc["ignored_files"]),
        "lossless": doc["stats"]["lossless"],  # images made PNG: pack's "re-encoded N images"
    }


def _fresh(src: Path, root: Path, **options) -> dict:
    out = root / "fresh"
    shutil.rmtree(out, ignore_errors=True)
    pack(src, out, PackOptions(workers=1, **options))
    return _told(out)


@pytest.mark.parametrize("dedup", ["none", "exact"])
def test_a_grown_pack_tells_and_skips_copies_as_a_fresh_pack_of_the_final_tree(
    tmp_path: Path, dedup: str
):
    """Issue 33, items 1-3: new copies among the new items, new copies of held ones in their
    split and new leaks, through an --append and then an --update; a label conflict warned of
    as it comes and no more once it is gone."""
    src, out = _split_tree(tmp_path), tmp_path / "out"
    pack(src, out, PackOptions(workers=1, dedup=dedup))
    write_image(src / "train" / "eel" / "new_000.jpg", image(900))  # new, and a new class
    _copy(src, "train/eel/new_000.jpg", "train/eel/new_001.jpg")  # copies among the new
    _copy(src, "train/dog/img_000.jpg", "train/dog/zz_000.jpg")  # a new copy of a held one
    _copy(src, "test/dog/img_001.jpg", "train/cat/zz_001.jpg")  # a new leak, test's kept
    pack(src, out, PackOptions(grow="append", workers=1))
    assert _told(out) == _fresh(src, tmp_path, dedup=dedup)
    _copy(src, "train/cat/img_002.jpg", "test/cat/new_002.jpg")  # a held train image leaks
    (src / "train" / "dog" / "img_002.jpg").unlink()  # a removal: statistics subtract it
    (src / "train" / "cat" / "zz_001.jpg").unlink()  # the label conflict gone, and its warning
    pack(src, out, PackOptions(grow="update", workers=1))
    assert _told(out) == _fresh(src, tmp_path, dedup=dedup)
    doc = json.loads((out / "index.json").read_text())
    inspected = run_cli("inspect", str(out)).stdout
    for name, split in doc["splits"].items():  # statistics cover every record
        summary = doc["summaries"][name]
        assert summary["records"] == split["num_records"] == sum(summary["formats"].values())
        assert f"formats: jpeg {split['num_records']}\n" in inspected, inspected


def test_a_grown_pack_tells_srcs_other_files_empty_classes_and_pngs_made_as_a_fresh_pack(
    tmp_path: Path,
):
    """A class folder empty when packed and filled since is no more warned of, the files that
    are no image are SRC's now, whether the grow writes a shard or not, and the BMPs made PNG
    are counted over the grown dataset's shards."""
    src, out = make_tree(tmp_path / "src", {"cat": 2, "dog": 2}), tmp_path / "out"
    (src / "eel").mkdir()
    write_image(src / "dog" / "scan.bmp", image(600))
    pack(src, out, PackOptions(workers=1))
    assert "class 'eel'" in json.loads((out / "index.json").read_text())["warnings"][0]
    write_image(src / "eel" / "new_000.bmp", image(700))  # the empty class filled
    (src / "cat" / "notes.txt").write_text("mine")
    for mode in ("append", "update"):  # the second writes nothing
        pack(src, out, PackOptions(grow=mode, workers=1))
        assert _told(out) == _fresh(src, tmp_path)
    assert _told(out)["lossless"] == 2
    (src / "dog" / "Thumbs.db").write_bytes(b"\xd0\xcf")  # no image: nothing to write
    (src / "eel" / "new_000.bmp").rename(src / "cat" / "new_000.bmp")
    (src / "dog" / "scan.bmp").unlink()
    (src / "cat" / "notes.txt").unlink()
    result = pack(src, out, PackOptions(grow="update", workers=1))
    assert not result.grow.get("nothing") and _told(out) == _fresh(src, tmp_path)
    (src / "dog" / "desktop.ini").write_text("[x]")
    result = pack(src, out, PackOptions(grow="update", workers=1))
    assert result.grow["nothing"] and _told(out) == _fresh(src, tmp_path)
    (src / "fox").mkdir()  # a new class with no image yet: a class, as a fresh pack lists it
    grown = run_cli("pack", str(src), str(out), "--append", "--no-progress")
    assert "4 classes: cat, dog, eel, fox" in grown.stdout, grown.stdout
    assert _told(out) == _fresh(src, tmp_path)
    assert (out / "label.labels.txt").read_text().split() == ["cat", "dog", "eel", "fox"]


def test_a_deduplicated_pack_grown_with_nothing_new_adds_nothing(tmp_path: Path):
    """Issue 33, item 1: copies --dedup exact skipped stay skipped."""
    src, out = _split_tree(tmp_path), tmp_path / "out"
    pack(src, out, PackOptions(workers=1, dedup="exact"))
    noted = json.loads((out / "contents.json").read_text())["dropped"]
    assert [row[:2] for row in noted] == [["train", "train/cat/img_001.jpg"]]
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for mode in ("append", "update"):
        result = pack(src, out, PackOptions(grow=mode, workers=1))
        assert result.grow["nothing"], result.grow
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    keys = sorted(r["key"] for r in iter_examples(out, "train"))
    assert "train/cat/img_001.jpg" not in keys and len(keys) == 6
    (src / "train" / "cat" / "img_001.jpg").unlink()  # the copy skipped, gone from SRC
    result = pack(src, out, PackOptions(grow="update", workers=1))
    assert result.grow["nothing"] and _told(out) == _fresh(src, tmp_path, dedup="exact")
    doc = json.loads((out / "contents.json").read_text())
    assert doc["dropped"] == []  # and noted no more
    doc["dropped"] = [["train", "cat/x.jpg", -1, 10, 0, 0, 0]]
    (out / "contents.json").write_text(json.dumps(doc))
    with pytest.raises(OutputError, match=r"contents\.json: not a contents file shardpack wrote"):
        pack(src, out, PackOptions(grow="update", workers=1))


def test_an_appended_copy_of_a_held_image_is_told_and_dedup_skips_it(tmp_path: Path):
    """Issue 33, item 2: ten copies of train images appended into test, as a user met it."""
    src, out = make_tree(tmp_path / "src" / "train", {"cat": 6, "dog": 6}).parent, tmp_path / "out"
    make_tree(src / "test", {"cat": 2, "dog": 2}, seed=300)
    pack(src, out, PackOptions(workers=1))
    for i in range(5):
        for cls in ("cat", "dog"):
            _copy(src, f"train/{cls}/img_{i:03d}.jpg", f"test/{cls}/copy_{i:03d}.jpg")
    pack(src, out, PackOptions(grow="append", workers=1))
    said = run_cli("inspect", str(out)).stdout
    assert "10 images of test are also in train" in said, said
    assert _told(out) == _fresh(src, tmp_path)


def _corrupt(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xff\xd8\xff\xe0 not a JPEG at all")


def test_a_skip_survives_its_shards_rewrite_and_no_grow_writes_an_empty_shard(tmp_path: Path):
    """Issue 33, item 4."""
    src, out = make_tree(tmp_path / "src", {"cat": 3}), tmp_path / "out"
    _corrupt(src / "cat" / "bad.jpg")
    pack(src, out, PackOptions(workers=1))
    write_image(src / "cat" / "img_000.jpg", image(777))  # rewrites the shard that noted bad
    assert pack(src, out, PackOptions(grow="update", workers=1)).grow["shards_rewritten"] == 1
    assert pack(src, out, PackOptions(grow="append", workers=1)).grow["nothing"]
    _corrupt(src / "cat" / "bad_2.jpg")  # all that is new is skipped: no shard of nothing
    pack(src, out, PackOptions(grow="append", workers=1))
    doc = json.loads((out / "index.json").read_text())
    shards = [s for split in doc["splits"].values() for s in split["shards"]]
    assert all(s["num_records"] for s in shards) and set(shard_files(out)) == {
        s["file"] for s in shards
    }
    assert sorted(s["key"] for s in doc["skipped"]) == ["cat/bad.jpg", "cat/bad_2.jpg"]
    assert doc["num_skipped"] == sum(doc["summaries"]["train"]["skipped"].values()) == 2
    assert pack(src, out, PackOptions(grow="append", workers=1)).grow["nothing"]
    assert _told(out) == _fresh(src, tmp_path)
    (src / "cat" / "bad.jpg").unlink()  # a skip with no shard, gone: no longer told
    assert pack(src, out, PackOptions(grow="append", workers=1)).grow["retold"]
    assert _told(out) == _fresh(src, tmp_path)


@pytest.mark.parametrize("mode", ["append", "update"])
def test_a_skipped_item_gone_from_src_is_no_longer_told(tmp_path: Path, mode: str):
    """A skip a shard noted (as a fresh pack notes it) goes with its item, its shard kept."""
    src, out = make_tree(tmp_path / "src", {"cat": 3, "dog": 3}), tmp_path / "out"
    _corrupt(src / "cat" / "bad.jpg")
    pack(src, out, PackOptions(workers=1, shards=2))
    before = set(shard_files(out))
    (src / "cat" / "bad.jpg").unlink()
    result = pack(src, out, PackOptions(grow=mode, workers=1))
    assert result.grow["retold"] and set(shard_files(out)) == before
    assert _told(out) == _fresh(src, tmp_path, shards=2)
    assert pack(src, out, PackOptions(grow=mode, workers=1)).grow["nothing"]


def test_a_grows_summary_speaks_of_what_this_run_did(tmp_path: Path):
    """Issue 33, item 13: the count and rate of the new items; a no-op reprints no time."""
    src, out = make_tree(tmp_path / "src", {"cat": 20}), tmp_path / "out"
    assert run_cli("pack", str(src), str(out), "--no-progress").returncode == 0
    make_tree(tmp_path / "src", {"dog": 3}, seed=400)
    done = run_cli("pack", str(src), str(out), "--append", "--no-progress", "--json")
    said = json.loads(done.stdout)
    assert said["new_records"] == 3 and said["records"] == 23
    assert said["images_per_second"] == pytest.approx(3 / said["seconds"], rel=0.05)
    head = run_cli("pack", str(src), str(out), "--update", "--no-progress").stdout
    assert head.startswith("nothing to update: ") and "23 images in 2 shards" in head, head
    assert not re.search(r"\d s\b|images/s", head), head  # no time, no rate: it did nothing
    make_tree(tmp_path / "src", {"eel": 2}, seed=500)
    head = run_cli("pack", str(src), str(out), "--append", "--no-progress").stdout
    first = head.splitlines()[0]
    assert first.startswith("append: wrote 2 images in ") and "25 images" in first, head
    assert "packed 25" not in head


def test_a_grow_never_writes_a_name_an_index_or_out_holds(tmp_path: Path):
    """Issue 34, item 2: an index that says next_shard 0, a shard file no index lists, a listed
    shard removed by hand."""
    src, out = make_tree(tmp_path / "src", {"cat": 4, "dog": 4}), tmp_path / "out"
    pack(src, out, PackOptions(workers=1, shards=2))
    index = json.loads((out / "index.json").read_text())
    index["splits"]["train"]["next_shard"] = 0
    (out / "index.json").write_text(json.dumps(index))
    before = shard_files(out)
    make_tree(tmp_path / "src", {"eel": 2}, seed=600)
    pack(src, out, PackOptions(grow="append", workers=1))
    after = shard_files(out)
    assert {name: after[name] for name in before} == before
    assert sorted(set(after) - set(before)) == ["src-train.tfrecord-00002-of-00002"]
    assert len(list(iter_examples(out))) == 10
    stray = out / "src-train.tfrecord-00003-of-00002"  # put there by hand: not ours to replace
    stray.write_bytes(b"someone's bytes")
    make_tree(tmp_path / "src", {"fox": 1}, seed=700)
    one_line_error(run_cli("pack", str(src), str(out), "--append"), stray.name, "no index")
    assert shard_files(out) == {**after, stray.name: b"someone's bytes"}
    stray.unlink()
    (out / "src-train.tfrecord-00000-of-00002").unlink()  # a listed shard removed by hand
    one_line_error(run_cli("pack", str(src), str(out), "--append"),
                   "src-train.tfrecord-00000-of-00002", "not in OUT", "--overwrite")  # fmt: skip
    index = json.loads((out / "index.json").read_text())
    index["splits"]["train"]["next_shard"] = "7"
    (out / "index.json").write_text(json.dumps(index))
    one_line_error(run_cli("pack", str(src), str(out), "--append"), "next_shard")


def _tar(path: Path, labels: dict[str, int]) -> None:
    """A WebDataset tar of one JPEG and one .cls per key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for i, (key, label) in enumerate(labels.items()):
            for suffix, data in (("jpg", jpeg(i)), ("cls", str(label).encode())):
                member = tarfile.TarInfo(f"{key}.{suffix}")
                member.size, member.mtime = len(data), 1_700_000_000
                tar.addfile(member, io.BytesIO(data))


def _label_of(out: Path, ending: str) -> int:
    (label,) = [int(r["label"]) for r in iter_examples(out) if r["key"].endswith(ending)]
    return label


def _hub(src: Path, labels: list[int]) -> None:
    """data/train-00000-of-00001.parquet as pyarrow writes it: image {bytes, path}, label."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    rows = [{"image": {"bytes": jpeg(i), "path": f"{i}.jpg"}, "label": label}
            for i, label in enumerate(labels)]  # fmt: skip
    (src / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), src / "data" / "train-00000-of-00001.parquet")


@pytest.mark.parametrize("kind", ["csv", "tar", "parquet"])
def test_update_brings_in_a_new_label_with_the_same_image_bytes(tmp_path: Path, kind: str):
    """Issue 34, item 3: an item changes when any of its fields changes, not only its bytes."""
    src, out = tmp_path / "src", tmp_path / "out"
    if kind == "csv":
        make_tree(src, {"cat": 2, "dog": 2})
        rows = [{"path": f"{c}/img_{i:03d}.jpg", "label": c, "note": f"n{i}"}
                for c in ("cat", "dog") for i in range(2)]  # fmt: skip
        write_csv(src / "m.csv", rows)
        rows[0]["label"] = "dog"  # relabelled: the same image
        rows[3]["note"] = "retold"  # another field: the same image, the same label
        relabel = lambda: write_csv(src / "m.csv", rows)  # noqa: E731
        target, ending = src / "m.csv", "cat/img_000.jpg"
    elif kind == "tar":
        _tar(src / "a.tar", {"s0": 0, "s1": 1, "s2": 2})
        relabel = lambda: _tar(src / "a.tar", {"s0": 0, "s1": 2, "s2": 2})  # noqa: E731
        target, ending = src / "a.tar", "s1"
    else:  # a Hub-layout Parquet file: the label cell of row 1 changes
        _hub(src, [0, 1, 0, 1])
        relabel = lambda: _hub(src, [0, 0, 0, 1])  # noqa: E731
        target, ending = src, ":1"
    pack(target, out, PackOptions(workers=1))
    before = _label_of(out, ending)
    relabel()
    result = pack(target, out, PackOptions(grow="update", workers=1))
    assert result.grow["changed"] == (2 if kind == "csv" else 1), result.grow
    assert _label_of(out, ending) != before
    assert pack(target, out, PackOptions(grow="update", workers=1)).grow["nothing"]
    if kind == "csv":
        (note,) = [r["note"] for r in iter_examples(out) if r["key"].endswith("dog/img_001.jpg")]
        assert note in ("retold", b"retold")


def _splits(out: Path) -> dict[str, str]:
    """key -> split of every record."""
    doc = json.loads((out / "index.json").read_text())
    return {r["key"]: s for s in doc["splits"] for r in iter_examples(out, s)}


def test_update_of_a_split_pack_keeps_each_held_item_in_its_split(tmp_path: Path):
    """Issue 34, item 4: only new items are assigned a split."""
    src, out = make_tree(tmp_path / "src", {"cat": 6, "dog": 6}), tmp_path / "out"
    split = (("train", 0.7), ("test", 0.3))
    pack(src, out, PackOptions(workers=1, split=split))
    before = _splits(out)
    make_tree(tmp_path / "src", {"cat": 3, "dog": 3}, seed=800, ext=".png")
    write_image(src / "cat" / "img_002.jpg", image(901))  # retouched
    pack(src, out, PackOptions(grow="update", workers=1))
    after = _splits(out)
    assert {key: after[key] for key in before} == before
    assert len(after) == 18 and set(after.values()) == {"train", "test"}


def test_planted_stamps_and_contents_are_bounded_by_the_items_the_index_holds(tmp_path: Path):
    """Issue 34, item 17: a planted stamps file of many values is no stamps (the bytes tell),
    a planted contents.json of many values is refused in one line, both unparsed."""
    src, out = make_tree(tmp_path / "src", {"cat": 2, "dog": 2}), tmp_path / "out"
    for path in src.rglob("*.jpg"):  # old enough to get a stamp (stamps.RACY_NS)
        os.utime(path, ns=(10**18, 10**18))
    pack(src, out, PackOptions(workers=1))
    index = load_index(out)
    stamps_doc = json.loads((out / ".shardpack.stamps").read_text())
    assert stamps.load(storage_at(out), index).mtimes  # as written: kept
    stamps_doc["mtimes"].update({f"k{i}": i for i in range(100_000)})
    (out / ".shardpack.stamps").write_text(json.dumps(stamps_doc))
    assert stamps.load(storage_at(out), index) == ({}, {})
    contents = json.loads((out / "contents.json").read_text())
    contents["padding"] = [[0] * 10 for _ in range(10_000)]
    (out / "contents.json").write_text(json.dumps(contents))
    make_tree(tmp_path / "src", {"eel": 1}, seed=90)
    one_line_error(run_cli("pack", str(src), str(out), "--append"), "contents.json", "values")


def test_append_keeps_a_held_copy_and_says_update_keeps_the_evaluation_splits(tmp_path: Path):
    """An --append never rewrites a shard: a new test copy of a held train image is skipped
    and the run says so; --update then keeps test's, as a fresh pack does."""
    src, out = _split_tree(tmp_path), tmp_path / "out"
    pack(src, out, PackOptions(workers=1, dedup="exact"))
    _copy(src, "train/dog/img_002.jpg", "test/dog/new_000.jpg")
    result = pack(src, out, PackOptions(grow="append", workers=1))
    assert result.grow["nothing"] and result.grow["retold"]
    assert any("--update" in note and "1 new cop" in note for note in result.notes), result.notes
    doc = json.loads((out / "index.json").read_text())
    assert {
        "key": "test/dog/new_000.jpg",
        "reason": "duplicate of train/dog/img_002.jpg",
    } in (doc["skipped"])
    said = run_cli("pack", str(src), str(out), "--append", "--no-progress")
    assert said.stdout.startswith("nothing to add: ") and "is unchanged" in said.stdout, said
    assert "pack with --update" in said.stdout + said.stderr
    pack(src, out, PackOptions(grow="update", workers=1))
    assert _told(out) == _fresh(src, tmp_path, dedup="exact")


def _counted(value: object) -> int:
    """The `,`, `[` and `{` json.dumps writes for `value` outside its strings."""
    if isinstance(value, dict):
        return 1 + max(0, len(value) - 1) + sum(map(_counted, value.values()))
    if isinstance(value, list):
        return 1 + max(0, len(value) - 1) + sum(map(_counted, value))
    return 0


def test_the_value_count_passes_over_what_strings_hold(monkeypatch):
    """json_values is exact past its quick count: keys holding quotes, escapes, commas and
    brackets (file names may) count nothing, across the chunks it reads."""
    monkeypatch.setattr("shardpack.index._CHUNK", 5)
    doc = {'a,"[{\\': [1, '\\\\"', {"x": [], "y{": ["\\", ",", '"']}], "é,\n": {}}
    for ascii_only in (True, False):
        text = json.dumps(doc, ensure_ascii=ascii_only).encode()
        assert json_values(text, 0) == _counted(doc) == 12


def test_a_grow_reads_one_held_copy_of_each_group(tmp_path: Path, monkeypatch):
    """contents.json numbers the confirmed copies: a tree of many links to one image is not
    read whole on each grow (one held copy stands for its group), and they are still told."""
    src, out = make_tree(tmp_path / "src", {"cat": 1, "dog": 2}), tmp_path / "out"
    for i in range(6):
        (src / "cat" / f"link_{i}.jpg").hardlink_to(src / "cat" / "img_000.jpg")
    for path in src.rglob("*.jpg"):  # old enough to get a stamp (stamps.RACY_NS)
        os.utime(path, ns=(10**18, 10**18))
    pack(src, out, PackOptions(workers=1))
    _copy(src, "cat/img_000.jpg", "dog/zz_copy.jpg")  # one more copy, new
    read = []
    load = Source.load

    def counted(self, item, *args):
        read.append(item.key)
        return load(self, item, *args)

    monkeypatch.setattr(Source, "load", counted)
    pack(src, out, PackOptions(grow="append", workers=1))
    monkeypatch.undo()
    held = [key for key in read if key.startswith("cat/")]
    assert len(held) == 1, read
    assert _told(out) == _fresh(src, tmp_path)
    assert json.loads((out / "index.json").read_text())["duplicates"]["images"] == 8
