"""pack --append and --update: a packed dataset grows with its source, old shards untouched,
labels stable, options the dataset's, and an interrupted grow that resumes byte-identical."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shardpack.containers import CONTAINERS
from shardpack.errors import OutputError
from shardpack.index import load_index
from shardpack.options import PackOptions
from shardpack.packing import gaps
from shardpack.packing.cpuload import machine_cores
from shardpack.packing.packer import pack
from shardpack.read.stream import iter_examples
from shardpack.read.verify import verify
from shardpack.storage.local import LocalStorage
from tests.helpers import (
    aged,
    heavy_import,
    image,
    make_cifar10_binary,
    make_tree,
    one_line_error,
    run_cli,
    same_grown,
    shard_files,
    write_image,
    write_jsonl,
)

FORMATS = sorted(CONTAINERS)


def _add(src: Path, cls: str, count: int, seed: int, prefix: str = "new") -> None:
    """`count` new images in class folder `cls` (made if missing)."""
    for i in range(count):
        write_image(src / cls / f"{prefix}_{i:03d}.jpg", image(seed + i))


def _labels(out: Path) -> dict[str, int]:
    """key -> label of every record, read through iter_examples."""
    return {r["key"]: int(r["label"]) for r in iter_examples(out)}


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def test_append_after_a_rename_holds_the_image_once(tmp_path: Path):
    """cat/img_000.jpg renamed img_new.jpg, then --append: the new name was packed beside the
    old record, the image held twice, and index.json counted no copy. Now the new name is the
    held record (its bytes, by contents.json's digest, and label): left as packed, said. Moved
    to another class's folder it is a new record (its label changed), held twice: said, and
    counted among index.json's copies, the held one known by its digest unread."""
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 1})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1))
    before = shard_files(out)
    (src / "cat" / "img_000.jpg").rename(src / "cat" / "img_new.jpg")
    result = pack(src, out, PackOptions(grow="append", workers=1))
    assert result.notes[0].startswith("1 item SRC lists under a new name (a file renamed or ")
    assert result.notes[0].endswith("left as packed under that name")
    assert shard_files(out) == before and result.to_json()["records"] == 3
    (src / "cat" / "img_001.jpg").rename(src / "dog" / "img_001.jpg")
    result = pack(src, out, PackOptions(grow="append", workers=1))
    assert "its image is now held twice, one of index.json's copies" in result.notes[0]
    images = [r["image"] for r in iter_examples(out, "train")]
    assert len(images) == 4 and len(set(images)) == 3
    assert load_index(out).duplicates["listed"] == [["train/cat/img_001.jpg",
                                                     "train/dog/img_001.jpg"]]  # fmt: skip
    (src / "dog" / "img_000.jpg").unlink()  # gone, nothing new: no word of an image twice
    notes = pack(src, out, PackOptions(grow="append", workers=1)).notes
    assert not [note for note in notes if "held twice" in note]


def test_append_with_dedup_exact_skips_a_moved_file_as_a_copy_of_its_held_record(
    tmp_path: Path,
):
    """A dataset packed with --dedup exact: a file moved to another class's folder, then
    --append packed it, the image held twice though --dedup exact drops copies. Now the held
    record is known by its digest (no file of it is read: its name is gone) and the new one
    is skipped as its duplicate, counted; nothing is written."""
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 1})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, dedup="exact"))
    before = shard_files(out)
    (src / "cat" / "img_000.jpg").rename(src / "dog" / "moved.jpg")
    result = pack(src, out, PackOptions(grow="append", workers=1, dedup="exact"))
    index = load_index(out)
    assert [(s.key, s.reason) for s in index.skipped] == [
        ("dog/moved.jpg", "duplicate of train/cat/img_000.jpg, whose labels differ: this "
         "copy's are not packed")]  # fmt: skip
    assert shard_files(out) == before and result.to_json()["records"] == 3
    assert index.duplicates["removed"] == 1


def _hub_layout(src: Path, rows: int, files: int) -> None:
    """`rows` rows of a datasets Image and ClassLabel in `files` Parquet files, cut and named
    as push_to_hub cuts and names them (contiguous shards, -of-NNNNN), the older files gone."""
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=["a", "b"])})  # fmt: skip
    images = [{"bytes": (src / f"{i}.png").read_bytes(), "path": None} for i in range(rows)]
    table = datasets.Dataset.from_dict({"image": images, "label": [i % 2 for i in range(rows)]},
                                       features=features)  # fmt: skip
    shutil.rmtree(src / "data", ignore_errors=True)
    for i in range(files):
        part = table.shard(num_shards=files, index=i, contiguous=True)
        part.to_parquet(src / "data" / f"train-{i:05d}-of-{files:05d}.parquet")


def test_append_of_a_hub_dataset_re_sharded_as_it_grew_adds_only_its_new_rows(tmp_path: Path):
    """A Hub dataset grown from 6 rows in train-00000-of-00001 to 9 in two files: every row's
    key (file:row) was new and every held one vanished, so --append packed all 9 again beside
    the 6 (15 records). Now a row of a held record's bytes and label is that record: 3 added."""
    src = tmp_path / "src"
    for i in range(9):
        write_image(src / f"{i}.png", image(i))
    _hub_layout(src, 6, 1)
    out = tmp_path / "out"
    pack(src / "data", out, PackOptions(workers=1))
    before = shard_files(out)
    _hub_layout(src, 9, 2)
    result = pack(src / "data", out, PackOptions(grow="append", workers=1))
    assert result.grow["added"] == 3 and result.to_json()["records"] == 9
    assert result.notes[0].startswith("6 items SRC lists under a new name")
    images = [r["image"] for r in iter_examples(out, "train")]
    assert len(set(images)) == 9 and {k: shard_files(out)[k] for k in before} == before


def test_append_adds_a_class_at_the_end_and_leaves_every_shard(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 4, "dog": 4})
    out = tmp_path / "out"
    pack(src, out, PackOptions(shards=2, workers=1))
    before = shard_files(out)
    _add(src, "ant", 3, seed=100)  # sorts first: it must still get the next number
    _add(src, "dog", 2, seed=200)
    (src / "cat" / "img_000.jpg").unlink()  # left as packed, and said so: not "removed 1"
    result = pack(src, out, PackOptions(grow="append", workers=1))
    assert result.grow == {"mode": "append", "added": 5, "changed": 0, "removed": 0,
                           "shards_rewritten": 0}  # fmt: skip
    assert result.notes[0] == (
        "1 vanished item left as packed (a file renamed or moved in SRC is a vanished item and "
        "a new one: its image is now held twice, one of index.json's copies; a dataset packed "
        "with --dedup exact skips it); "
        "pack with --update to bring it in line"
    )  # one count, one item: not "0 changed and 1 ... items"
    after = shard_files(out)
    assert {k: after[k] for k in before} == before  # byte for byte, under their names
    new = sorted(set(after) - set(before))
    assert new == ["src-train.tfrecord-00002-of-00002"]
    doc = json.loads((out / "index.json").read_text())
    assert doc["classes"] == ["cat", "dog", "ant"]
    assert doc["splits"]["train"]["class_counts"] == [4, 6, 3]
    assert [s["generation"] for s in doc["splits"]["train"]["shards"]] == [0, 0, 1]
    assert doc["generation"] == 1 and doc["history"][-1]["added"] == 5
    labels = _labels(out)
    assert len(labels) == 13
    assert {labels[k] for k in labels if k.startswith("ant/")} == {2}
    assert {labels[k] for k in labels if k.startswith("cat/")} == {0}
    inspected = run_cli("inspect", str(out))
    assert "generation 1" in inspected.stdout and "append" in inspected.stdout, inspected.stdout


def test_update_rewrites_only_the_shards_of_changed_and_removed_files(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 6, "dog": 6})
    out = tmp_path / "out"
    pack(src, out, PackOptions(shards=4, workers=1, encode="png"))
    before = shard_files(out)
    doc = json.loads((out / "index.json").read_text())
    where = {k: f for f, e in json.loads((out / "contents.json").read_text())["shards"].items()
             for k in e["keys"]}  # fmt: skip
    write_image(src / "cat" / "img_000.jpg", image(999))  # changed bytes
    (src / "dog" / "img_001.jpg").unlink()  # vanished
    _add(src, "dog", 1, seed=300)
    result = pack(src, out, PackOptions(grow="update", workers=1))
    touched = {where["cat/img_000.jpg"], where["dog/img_001.jpg"]}
    assert result.grow == {"mode": "update", "added": 1, "changed": 1, "removed": 1,
                           "shards_rewritten": len(touched)}  # fmt: skip
    after = shard_files(out)
    assert not {before[f] for f in touched} & set(after.values())  # gone once the index landed
    # the others byte for byte; the highest-numbered moved into the gaps the update left
    assert {before[f] for f in set(before) - touched} < set(after.values())
    assert sorted(after) == [f"src-train.tfrecord-{i:05d}-of-00004" for i in range(3)]
    records = {r["key"]: r for r in iter_examples(out, decode=True)}
    assert sorted(records) == sorted(f"{p.parent.name}/{p.name}" for p in src.rglob("*.jpg"))
    with Image.open(src / "cat" / "img_000.jpg") as changed:  # the new bytes, losslessly
        assert (records["cat/img_000.jpg"]["image"] == np.asarray(changed.convert("RGB"))).all()
    shards = json.loads((out / "index.json").read_text())["splits"]["train"]["shards"]
    assert {s["file"] for s in shards} == set(after)
    assert len(doc["splits"]["train"]["shards"]) - len(touched) + 1 == len(shards)
    assert run_cli("verify", str(out)).returncode == 0
    stray = json.loads((out / "index.json").read_text())["retired"][0]  # as a stop between
    (out / stray).write_bytes(before[sorted(touched)[0]])  # the index and the removal leaves it
    again = pack(src, out, PackOptions(grow="update", workers=1))
    assert again.grow["nothing"] and not (out / stray).exists()


def test_a_dataset_with_index_files_keeps_them_for_its_new_shards(tmp_path: Path):
    """DALI reads a shard through its index file: the shards a grow adds get theirs, though
    --append does not say --index-files again."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    out = tmp_path / "out"
    assert run_cli("pack", str(src), str(out), "--index-files", "--no-progress").returncode == 0
    _add(src, "eel", 3, seed=50)
    assert run_cli("pack", str(src), str(out), "--append", "--no-progress").returncode == 0
    shards = [s["file"] for split in json.loads((out / "index.json").read_text())["splits"]
              .values() for s in split["shards"]]  # fmt: skip
    assert len(shards) == 2
    assert sorted(p.name for p in (out / "idx").iterdir()) == sorted(f"{f}.idx" for f in shards)


def test_nothing_new_leaves_out_unchanged(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    (src / "cat" / "broken.jpg").write_bytes(b"\xff\xd8 not a JPEG")  # skipped: not new later
    out = tmp_path / "out"
    assert run_cli("pack", str(src), str(out), "--no-progress").returncode == 0
    before = _files(out)
    done = run_cli("pack", str(src), str(out), "--append", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "nothing to add" in done.stdout
    assert _files(out) == before
    done = run_cli("pack", str(src), str(out), "--update", "--no-progress")
    assert done.returncode == 0 and "nothing to update" in done.stdout
    assert _files(out) == before


def test_nothing_new_writes_again_the_card_and_croissant_out_lacks(tmp_path: Path):
    """A card, a croissant.json or TFDS metadata removed by hand comes back from the index as
    it was (the line says which); the shards and index.json are not touched."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    out = tmp_path / "out"
    assert run_cli("pack", str(src), str(out), "--shards", "2", "--no-progress").returncode == 0
    before = _files(out)
    kept = {name: os.stat(out / name) for name in [*shard_files(out), "index.json"]}
    for mode, removed in (("append", ("README.md", "croissant.json")),
                          ("update", ("dataset_info.json", "croissant.json"))):  # fmt: skip
        for name in removed:
            (out / name).unlink()
        done = run_cli("pack", str(src), str(out), f"--{mode}", "--no-progress")
        assert done.returncode == 0 and not done.stderr, done.stderr
        head = done.stdout.splitlines()[0]
        told = ("nothing to add" if mode == "append" else "nothing to update") + ": no shard "
        assert head.startswith(f"{told}written; wrote again what OUT lacked "
                               f"({', '.join(removed)}), "), head  # fmt: skip
        assert _files(out) == before  # byte for byte, and nothing else (no temporary file)
        for name, stat in kept.items():  # not rewritten: the same file, unmodified
            now = os.stat(out / name)
            assert (now.st_ino, now.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns), name
    done = run_cli("pack", str(src), str(out), "--append", "--no-progress", "--json")
    assert json.loads(done.stdout)["grow"]["restored"] == []  # none missing: none written


# `python -m shardpack ARGS` counting the processes it forks (os.register_at_fork), the count
# printed last.
_COUNTING_FORKS = ("import os, runpy\nforks = []\n"
                   "os.register_at_fork(before=lambda: forks.append(1))\n"
                   "try:\n    runpy.run_module('shardpack', run_name='__main__')\n"
                   "except SystemExit as e:\n    assert not e.code, e.code\n"
                   "print(len(forks))")  # fmt: skip


def _workers_and_forks(*args: str) -> tuple[int, int]:
    """The workers `pack ARGS --json` says it ran, and the processes it forked."""
    done = subprocess.run([sys.executable, "-c", _COUNTING_FORKS, "pack", *args, "--no-progress",
                           "--json"], capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    *summary, forks = done.stdout.strip().splitlines()
    return json.loads("\n".join(summary))["workers"], int(forks)


@pytest.mark.skipif(machine_cores() < 2, reason="one core: every run has one worker")
def test_a_grow_runs_as_many_workers_as_its_new_shards_are_worth(tmp_path: Path):
    """Without --workers, a grow's workers are the cost model's choice for the shards it writes,
    as a fresh pack's (not the cores): a few small images in two new shards, or one shard
    rewritten, are written in-process, no worker forked. --workers still decides."""
    src, out, twin = tmp_path / "src", tmp_path / "out", tmp_path / "twin"
    for split, seed in (("train", 0), ("test", 100)):
        make_tree(src / split, {"cat": 2, "dog": 2}, seed=seed)
    for folder in (out, twin):
        pack(src, folder, PackOptions(workers=1))
    for split, seed in (("train", 200), ("test", 300)):
        _add(src / split, "cat", 1, seed=seed)  # a new shard in each split
    assert _workers_and_forks(str(src), str(out), "--append") == (1, 0)
    assert _workers_and_forks(str(src), str(twin), "--append", "--workers", "2") == (2, 2)
    write_image(src / "train" / "dog" / "img_000.jpg", image(999))
    assert _workers_and_forks(str(src), str(out), "--update") == (1, 0)  # one shard rewritten


def test_a_differing_option_or_class_list_is_refused_naming_it(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    out = tmp_path / "out"
    assert run_cli("pack", str(src), str(out), "--no-progress", "--encode", "png").returncode == 0
    _add(src, "cat", 2, seed=50)
    before = _files(out)
    # the dataset's value as the user types it, as a resume's refusal says the journal's (it
    # was index.json's JSON: "png", null, [64, 64])
    done = run_cli("pack", str(src), str(out), "--append", "--encode", "jpeg", "--no-progress")
    one_line_error(done, "--encode jpeg (the dataset's: --encode png); drop them: --append takes")
    done = run_cli("pack", str(src), str(out), "--append", "--resize", "8x8", "--quality", "80",
                   "--no-progress")  # fmt: skip
    one_line_error(done, "--quality 80 (the dataset's: --quality 95); --resize 8x8 (the "
                   "dataset's: unset); drop them")  # fmt: skip
    with pytest.raises(OutputError) as refused:
        pack(src, out, PackOptions(grow="append", resize=(8, 8), encode="jpeg"))
    assert "encode='jpeg' (the dataset's: 'png'); " in str(refused.value)
    assert "resize=(8, 8) (the dataset's: unset); " in str(refused.value)
    done = run_cli("pack", str(src), str(out), "--append", "--classes", "dog,cat", "--no-progress")
    one_line_error(done, "--classes", "begin with the dataset's 2 classes")
    tree = make_tree(tmp_path / "tree" / "train", {"cat": 1}).parent  # another dataset
    done = run_cli("pack", str(tree), str(out), "--append", "--no-progress")
    one_line_error(done, f"{tree}: holds split folders, and {out} was packed from class folders")
    assert _files(out) == before
    nowhere = tmp_path / "nowhere"
    one_line_error(run_cli("pack", str(src), str(nowhere), "--append"), "no dataset to grow")
    assert not nowhere.exists()
    done = run_cli("pack", str(src), str(out), "--append", "--classes", "cat,dog,eel",
                   "--no-progress")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "index.json").read_text())["classes"] == ["cat", "dog", "eel"]


def test_a_split_tree_packed_with_splits_gains_a_split_when_splits_adds_it(tmp_path: Path):
    """Before: --splits on a grow was refused as another option than the dataset's, and the
    new folder was refused by the scan naming --splits as the way out: a tree packed with
    --splits could gain no split. Now --splits may add names, as --classes adds classes, and
    the grown dataset keeps them."""
    src = tmp_path / "src"
    for split in ("train", "holdout"):
        make_tree(src / split, {"cat": 2, "dog": 1}, seed=len(split))
    out = tmp_path / "out"
    first = run_cli("pack", str(src), str(out), "--splits", "train,holdout", "--no-progress")
    assert first.returncode == 0, first.stderr
    make_tree(src / "extra", {"cat": 1, "dog": 1}, seed=9)
    before = _files(out)
    done = run_cli("pack", str(src), str(out), "--append", "--no-progress")
    one_line_error(done, "--splits extra,holdout,train if every one is a split")
    done = run_cli("pack", str(src), str(out), "--append", "--splits", "train,extra",
                   "--no-progress")  # fmt: skip
    one_line_error(done, f"{out}: --splits must hold each of the dataset's splits (holdout, "
                         'train) and may add new ones; it lacks ["holdout"]')  # fmt: skip
    assert _files(out) == before
    done = run_cli("pack", str(src), str(out), "--append", "--splits", "extra,holdout,train",
                   "--no-progress")  # fmt: skip
    assert done.returncode == 0, done.stderr
    index = load_index(out)
    assert {s: index.split(s).num_records for s in index.splits} == {
        "train": 3, "holdout": 3, "extra": 2}  # fmt: skip
    assert all(shard_files(out)[name] == data for name, data in before.items()
               if name in shard_files(out))  # fmt: skip
    assert index.options["split_names"] == ["extra", "holdout", "train"]
    again = run_cli("pack", str(src), str(out), "--append", "--no-progress")  # the dataset's now
    assert again.returncode == 0 and "nothing to add" in again.stdout + again.stderr


def test_a_near_deduplicated_dataset_grows_with_its_distance(tmp_path: Path):
    """--near-distance is kept with --dedup near alone: a grow given neither, or the dataset's,
    takes the dataset's (it was refused as an older shardpack's index, or failed with a
    traceback); another distance is refused naming it."""
    src, out = make_tree(tmp_path / "src", {"cat": 2}), tmp_path / "out"
    pack(src, out, PackOptions(workers=1, dedup="near", near_distance=6))
    for given in ({}, {"dedup": "near"}, {"dedup": "near", "near_distance": 6}):
        assert pack(src, out, PackOptions(workers=1, grow="update", **given)).grow["nothing"]
    with pytest.raises(OutputError, match="the dataset's: 6"):
        pack(src, out, PackOptions(workers=1, grow="append", dedup="near", near_distance=2))


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_container_reads_the_grown_dataset_whole(tmp_path: Path, fmt: str):
    src = make_tree(tmp_path / "src", {"cat": 4, "dog": 4})
    out = tmp_path / "out"
    pack(src, out, PackOptions(format=fmt, shards=2, workers=1))
    _add(src, "eel", 4, seed=500)
    pack(src, out, PackOptions(grow="append", workers=1))
    keys = sorted(f"{p.parent.name}/{p.name}" for p in src.rglob("*.jpg"))
    assert sorted(_labels(out)) == keys
    labels = sorted(_labels(out).values())
    assert labels == [0] * 4 + [1] * 4 + [2] * 4
    if fmt == "webdataset":
        (listing,) = out.glob("*.shardindex.json")
        urls = [s["url"] for s in json.loads(listing.read_text())["shardlist"]]
        assert urls == sorted(shard_files(out))
    if fmt == "tfrecord":
        tfds = heavy_import("tensorflow_datasets")
        builder = tfds.builder_from_directory(str(out))
        assert builder.info.features["label"].names == ["cat", "dog", "eel"]
        records = list(tfds.as_numpy(builder.as_dataset(split="train")))
        assert sorted(int(r["label"]) for r in records) == labels
    if fmt == "array_record":
        from shardpack.read.random_access import Records

        with Records(out) as records:
            assert sorted(records[i]["key"] for i in range(len(records))) == keys
        tfds = heavy_import("tensorflow_datasets")
        source = tfds.builder_from_directory(str(out)).as_data_source()["train"]
        assert sorted(int(source[i]["label"]) for i in range(len(source))) == labels


@pytest.mark.parametrize(
    "planted",
    [{"generation": "x"}, {"options": {"encode": 5}}, {"splits": {"train": {"name_count": -1}}}],
)
def test_a_planted_index_is_refused_in_one_line(tmp_path: Path, planted: dict):
    src = make_tree(tmp_path / "src", {"cat": 2})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1))
    doc = json.loads((out / "index.json").read_text())
    for key, value in planted.items():
        if key == "splits":
            doc["splits"]["train"].update(value["train"])
        elif key == "options":
            doc["options"].update(value)
        else:
            doc[key] = value
    (out / "index.json").write_text(json.dumps(doc))
    _add(src, "cat", 1, seed=9)
    one_line_error(run_cli("pack", str(src), str(out), "--append", "--no-progress"), str(out))


@pytest.mark.parametrize("name", ["croissant.json", "features.json"])
def test_a_folder_under_a_name_a_grow_writes_is_refused_before_a_shard(tmp_path: Path, name):
    # the append wrote its shard, then failed naming its temporary file ('.croissant.json.<hex>
    # .partial: Is a directory; it is a folder: pass a file'), as a fresh pack refuses it first
    src = make_tree(tmp_path / "src", {"cat": 2})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1))
    (out / name).unlink()
    (out / name).mkdir()
    before = sorted(p.name for p in out.iterdir())
    _add(src, "cat", 1, seed=9)
    said = one_line_error(run_cli("pack", str(src), str(out), "--append", "--no-progress"),
                          f"{out / name}: is a folder where pack writes a file")  # fmt: skip
    assert ".partial" not in said
    assert sorted(p.name for p in out.iterdir()) == before  # no shard, no journal written


def test_a_readme_of_the_users_in_out_is_kept_by_a_grow(tmp_path: Path):
    # an --append replaced it with its card (the user's text gone); then it refused it
    src = make_tree(tmp_path / "src", {"cat": 2})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1))
    (out / "README.md").write_text("# Cats\nOur own description of the dataset.\n")
    _add(src, "cat", 1, seed=9)
    pack(src, out, PackOptions(workers=1, grow="append"))
    text = (out / "README.md").read_text()
    assert text.startswith("---\n# written by shardpack pack")
    assert "\n---\n# Cats\nOur own description of the dataset.\n\n<!-- shardpack: begin" in text
    assert "train 3 images" in text


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("README.md", "---\nlicense: mit\ntags: [a\n---\nprose\n", "YAML header does not parse"),
        ("README.md", "---\nlicense: mit\nprose\n", "no closing '---' line"),
        ("README.md", "---\nlicense: mit\n---\n<!-- shardpack: end -->\n", "one '<!-- shardpack"),
        ("README.md", "---\nlicense: mit\nlicense: gpl\n---\n", "each written once"),
        ("croissant.json", "{license: mit}", "is no JSON object"),
    ],
)  # fmt: skip
def test_a_card_whose_users_part_cannot_be_kept_is_refused_untouched(tmp_path, name, text, said):
    src = make_tree(tmp_path / "src", {"cat": 2})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1))
    (out / name).write_text(text)
    _add(src, "cat", 1, seed=9)
    for args in (["--append"], ["--overwrite"]):  # a grow, and a fresh pack over it
        one_line_error(run_cli("pack", str(src), str(out), *args, "--no-progress"),
                       f"{out / name}: ", said)  # fmt: skip
        assert (out / name).read_text() == text
    assert load_index(out).generation == 0


def test_the_first_pack_again_into_a_grown_dataset_is_told_it_grew(tmp_path: Path):
    # refused with the grow's journal read as a fresh pack's options: 'was packed with other
    # options (--shards 1 (the journal's: None); --classes None (the journal's: ('cat',)))'
    src = make_tree(tmp_path / "src", {"cat": 2})
    out = tmp_path / "out"
    first = ("pack", str(src), str(out), "--shards", "1", "--workers", "1", "--no-progress")
    assert run_cli(*first).returncode == 0
    _add(src, "cat", 1, seed=9)
    assert run_cli("pack", str(src), str(out), "--append", "--no-progress").returncode == 0
    told = f"{out}: holds a dataset grown by --append since it was packed; grow it with "
    said = one_line_error(run_cli(*first), told + "--append or --update; pass --overwrite")
    assert "journal" not in said


def _mtimes(out: Path) -> dict[str, int]:
    """key -> the file's mtime OUT keeps (its stamp), of every record that has one."""
    return json.loads((out / ".shardpack.stamps").read_text())["mtimes"]


def _rewrite_keeping_stamp(path: Path) -> None:
    """Other bytes in `path`, of its size, under its old mtime: only a read tells them apart."""
    st = path.stat()
    path.write_bytes(bytes(255 - b for b in path.read_bytes()))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_held_file_of_its_recorded_size_and_mtime_is_not_read_nor_a_shard(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 4, "dog": 4})
    aged(src)
    out = tmp_path / "out"
    pack(src, out, PackOptions(shards=2, workers=1))
    assert len(_mtimes(out)) == 8
    _rewrite_keeping_stamp(src / "cat" / "img_000.jpg")  # a read would find it changed
    touched = src / "dog" / "img_001.jpg"  # same bytes, a new mtime
    _add(src, "dog", 2, seed=700)
    for path in (touched, *src.glob("dog/new_*")):
        os.utime(path, ns=(time.time_ns() - 600 * 10**9,) * 2)
    # the old shards' records past the first out of reach: an --append reads only the first
    # (held to contents.json's first key), a record past it would fail its CRC
    held = shard_files(out)
    for shard, data in held.items():
        (out / shard).write_bytes(data[:-5] + bytes([data[-5] ^ 1]) + data[-4:])
    result = pack(src, out, PackOptions(grow="append", workers=1))
    assert result.grow == {"mode": "append", "added": 2, "changed": 0, "removed": 0,
                           "shards_rewritten": 0}  # fmt: skip
    for shard, data in held.items():
        (out / shard).write_bytes(data)
    assert run_cli("verify", str(out)).returncode == 0  # the grown dataset, whole
    mtimes = _mtimes(out)
    assert mtimes["dog/img_001.jpg"] == touched.stat().st_mtime_ns  # read once, then trusted
    assert mtimes["dog/new_000.jpg"] == (src / "dog" / "new_000.jpg").stat().st_mtime_ns
    # a rewrite keeping size and mtime is taken as unchanged, as rsync takes it ...
    assert pack(src, out, PackOptions(grow="update", workers=1)).grow["nothing"]
    os.utime(src / "cat" / "img_000.jpg", ns=(time.time_ns() - 60 * 10**9,) * 2)
    result = pack(src, out, PackOptions(grow="update", workers=1))  # ... a new mtime is not
    assert (result.grow["changed"], result.grow["shards_rewritten"]) == (1, 1)
    assert run_cli("verify", str(out)).returncode == 0


def test_a_copy_dedup_left_out_of_its_noted_size_and_mtime_is_not_read(tmp_path: Path):
    """A folder's copy --dedup exact left out is known by its stamp, as a held file is: a grow
    reads it no more while its size and mtime are the ones noted (each grow read it), and
    reads it once its mtime changed."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 2})
    copy = src / "dog" / "copy.jpg"
    shutil.copy(src / "cat" / "img_000.jpg", copy)
    aged(src)
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, dedup="exact"))
    _rewrite_keeping_stamp(copy)  # a read would find it no copy, nor an image
    assert pack(src, out, PackOptions(grow="update", workers=1)).grow["nothing"]
    os.utime(copy, ns=(time.time_ns() - 60 * 10**9,) * 2)
    assert pack(src, out, PackOptions(grow="update", workers=1)).grow["added"] == 1
    skipped = json.loads((out / "index.json").read_text())["skipped"]
    assert [s["reason"].startswith("duplicate of") for s in skipped] == [False]


def test_records_inside_files_are_compared_by_their_bytes(tmp_path: Path):
    src = make_cifar10_binary(tmp_path / "cifar", per_batch=6, batches=1)
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, encode="png"))
    assert _mtimes(out) == {}  # a batch's row has no file of its own
    batch = src / "data_batch_1.bin"
    st, data = batch.stat(), bytearray(batch.read_bytes())
    data[3073 + 1 : 3073 + 100] = bytes(99)  # the second row's first pixels, in place
    batch.write_bytes(bytes(data))
    os.utime(batch, ns=(st.st_atime_ns, st.st_mtime_ns))
    result = pack(src, out, PackOptions(grow="update", workers=1))
    assert (result.grow["changed"], result.grow["removed"]) == (1, 0)


def _changed_and_removed(src: Path) -> None:
    """A changed file and a removed one: an --update rewrites their shards."""
    write_image(src / "cat" / "img_000.jpg", image(999))
    (src / "dog" / "img_005.jpg").unlink()
    aged(src)


def test_a_stop_between_an_updates_two_indexes_leaves_a_whole_dataset(tmp_path, monkeypatch):
    src = make_tree(tmp_path / "src", {"cat": 6, "dog": 6})
    aged(src)
    clean, out = tmp_path / "clean", tmp_path / "out"
    for where in (clean, out):
        pack(src, where, PackOptions(shards=4, workers=1, index_files=True))
    _changed_and_removed(src)
    pack(src, clean, PackOptions(grow="update", workers=1, index_files=True))
    copied = []

    def stopped(self, *args) -> None:  # Ctrl-C once the first shard is copied into a gap
        if copied:
            raise KeyboardInterrupt
        copied.append(args)
        link_or_copy(self, *args)

    link_or_copy = LocalStorage.link_or_copy
    monkeypatch.setattr(LocalStorage, "link_or_copy", stopped)
    with pytest.raises(KeyboardInterrupt):
        pack(src, out, PackOptions(grow="update", workers=1, index_files=True))
    monkeypatch.undo()
    assert gaps.gap_moves(load_index(out))  # the update's index, its gaps open
    assert run_cli("verify", str(out)).returncode == 0
    assert len(list(iter_examples(out))) == 11
    rerun = pack(src, out, PackOptions(grow="update", workers=1, index_files=True))
    assert rerun.grow["nothing"]
    same_grown(out, clean)
    assert sorted(p.name for p in (out / "idx").iterdir()) == sorted(
        f"{f}.idx" for f in shard_files(out)
    )
    assert run_cli("verify", str(out)).returncode == 0


@pytest.mark.heavy
def test_tfds_reads_the_dataset_an_update_left(tmp_path: Path):
    tfds = heavy_import("tensorflow_datasets")
    src = make_tree(tmp_path / "src", {"cat": 6, "dog": 6})
    out = tmp_path / "out"
    pack(src, out, PackOptions(shards=4, workers=1))
    _changed_and_removed(src)
    result = pack(src, out, PackOptions(grow="update", workers=1))
    assert result.grow["shards_rewritten"] == 2 and not result.notes
    records = list(tfds.as_numpy(tfds.builder_from_directory(str(out)).as_dataset(split="train")))
    assert sorted(int(r["label"]) for r in records) == [0] * 6 + [1] * 5


@pytest.mark.parametrize(
    "planted",
    [b"{", b'{"format": "shardpack-stamps", "plan_digest": null, "mtimes": {}}',
     b'{"format": "shardpack-stamps", "plan_digest": "%s", "mtimes": {"cat/img_000.jpg": "x"}}',
     b'{"format": "shardpack-stamps", "plan_digest": "%s", "mtimes": {"cat/img_000.jpg": 1, '
     b'"cat/img_001.jpg": [1, "x"]}}'],
)  # fmt: skip
def test_stamps_not_of_this_index_are_no_stamps_and_the_bytes_tell(tmp_path: Path, planted):
    src = make_tree(tmp_path / "src", {"cat": 3})
    aged(src)
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1))
    digest = json.loads((out / "index.json").read_text())["plan_digest"]
    (out / ".shardpack.stamps").write_bytes(planted.replace(b"%s", digest.encode()))
    _rewrite_keeping_stamp(src / "cat" / "img_000.jpg")
    result = pack(src, out, PackOptions(grow="update", workers=1))
    assert result.grow["changed"] == 1  # read, as no stamp vouched for it
    assert run_cli("verify", str(out)).returncode == 0


def test_a_touched_file_is_read_once_also_when_nothing_is_new(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 3})
    aged(src)
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1))
    before = _files(out)
    touched = src / "cat" / "img_001.jpg"
    os.utime(touched, ns=(time.time_ns() - 600 * 10**9,) * 2)  # same bytes, a new mtime
    assert pack(src, out, PackOptions(grow="append", workers=1)).grow["nothing"]
    assert _mtimes(out)["cat/img_001.jpg"] == touched.stat().st_mtime_ns
    after = _files(out)
    assert after.pop(".shardpack.stamps") != before.pop(".shardpack.stamps")
    assert after == before  # the dataset as it was


def test_an_index_listing_a_shard_twice_is_refused_in_one_line(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"cat": 4})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, shards=2))
    doc = json.loads((out / "index.json").read_text())
    shards = doc["splits"]["train"]["shards"]
    shards[1] = shards[0]  # a gap at 1, and 0 twice: no shard could be moved into it
    (out / "index.json").write_text(json.dumps(doc))
    (src / "cat" / "img_000.jpg").unlink()
    one_line_error(run_cli("pack", str(src), str(out), "--update", "--no-progress"),
                   f"shard {shards[0]['file']!r} is listed 2 times")  # fmt: skip


def test_class_counts_that_are_not_the_shards_are_refused_not_carried_on(tmp_path: Path):
    """An index whose class counts disagree with its shards' (index.json's own, or
    contents.json's beside consistent ones) was grown with them added to: a lie carried on
    into every next index. Refused now in one line naming the file; so is a contents.json of
    other lies (a shard's tally naming more records that lost boxes than the shard holds)."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 2})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1))
    _add(src, "cat", 1, seed=9)
    index, contents = (
        json.loads((out / name).read_text()) for name in ("index.json", "contents.json")
    )
    entry = next(iter(contents["shards"].values()))
    assert index["splits"]["train"]["class_counts"] == entry["label_counts"] == [3, 2]
    lies = [("index.json", "class_counts", [30, 2]), ("index.json", "num_records", 50),
            ("contents.json", "label_counts", [5, 5]), ("contents.json", "lossless", ["2"]),
            ("contents.json", "lossless", [-1]),
            # more records named that lost boxes for a reason than the shard holds
            ("contents.json", "tally", [["boxes_dropped_in", f"outside the image: k{i}", 1]
                                        for i in range(6)])]  # fmt: skip
    for i, (name, key, lie) in enumerate(lies):
        lied = tmp_path / f"lied-{i}"
        shutil.copytree(out, lied)
        doc = index if name == "index.json" else contents
        told = doc["splits"]["train"] if name == "index.json" else entry
        was, told[key] = told[key], lie
        (lied / name).write_text(json.dumps(doc))
        told[key] = was
        said = "does not agree with index.json" if name == "contents.json" else "counts other"
        with pytest.raises(OutputError, match=f"^{lied / name}: .*{said}"):
            pack(src, lied, PackOptions(workers=1, grow="append"))
    grown = pack(src, out, PackOptions(workers=1, grow="append"))
    assert grown.index.splits["train"].class_counts == (4, 2)


def test_a_multi_label_dataset_listing_a_label_twice_grows_with_its_counts(tmp_path: Path):
    """A record counts each label its list names, one named twice twice: its shard's count of
    that class is over its records, and that is no lie."""
    src = make_tree(tmp_path / "src", {"a": 3})
    images = sorted(src.rglob("*.jpg"))
    rows = [{"path": str(p.relative_to(src)), "label": ["x", "x", "y"]} for p in images]
    write_jsonl(src / "m.jsonl", rows[:2])
    pack(src / "m.jsonl", tmp_path / "out", PackOptions(workers=1))
    write_jsonl(src / "m.jsonl", rows)
    grown = pack(src / "m.jsonl", tmp_path / "out", PackOptions(workers=1, grow="append"))
    assert grown.index.splits["train"].class_counts == (6, 3)
    assert verify(tmp_path / "out").ok  # its records' labels counted so too


def test_an_append_moves_declared_box_columns_and_an_index_from_before_them_grows(tmp_path):
    """--box-columns is the dataset's: an append takes it from index.json and moves the new
    rows' boxes alike; an index written before the option existed grows as packed."""
    from tests.packing.test_boxes import BOXES, _photo, _png

    src = tmp_path / "src"
    src.mkdir()
    xywh = [[x0 / 400, y0 / 200, (x1 - x0) / 400, (y1 - y0) / 200]
            for y0, x0, y1, x1 in BOXES.values()]  # fmt: skip
    for name in "abc":
        (src / f"{name}.png").write_bytes(_png(_photo()))
    rows = [{"path": f"{name}.png", "det": xywh} for name in "abc"]
    write_jsonl(src / "m.jsonl", rows[:1])
    out = tmp_path / "out"
    options = {"resize": (200, 200), "resize_mode": "center-crop", "workers": 1}
    pack(src / "m.jsonl", out, PackOptions(box_columns=("det:xywh",), **options))
    write_jsonl(src / "m.jsonl", rows[:2])
    pack(src / "m.jsonl", out, PackOptions(grow="append", workers=1))
    records = {r["key"]: r for r in iter_examples(out)}
    assert len(records["a.png"]["det"]) == 2  # red cropped away
    np.testing.assert_array_equal(records["b.png"]["det"], records["a.png"]["det"])
    index = json.loads((out / "index.json").read_text())
    del index["options"]["box_columns"]  # as an index written before --box-columns
    (out / "index.json").write_text(json.dumps(index))
    write_jsonl(src / "m.jsonl", rows)
    pack(src / "m.jsonl", out, PackOptions(grow="append", workers=1))
    assert sum(1 for _ in iter_examples(out)) == 3


def _as_packed_before(out: Path, fields: tuple[str, ...]) -> None:
    """OUT as an older shardpack left it: its contents.json entries without `fields` (that
    version did not write them), its summaries without stored bytes nor totals."""
    contents = json.loads((out / "contents.json").read_text())
    for entry in contents["shards"].values():
        for field in fields:
            del entry[field]
    (out / "contents.json").write_text(json.dumps(contents, separators=(",", ":")))
    index = json.loads((out / "index.json").read_text())
    for summary in index["summaries"].values():
        for what in ("stored_bytes", "stored_bytes_histogram"):
            del summary[what]
        del summary["bytes"]["total"]
    (out / "index.json").write_text(json.dumps(index))


def test_a_grow_over_contents_without_stored_bytes_says_them_unknown(tmp_path: Path):
    """A dataset packed before the facts noted stored bytes (its contents.json entries without
    "stored", its summaries without "stored_bytes" or totals) grows; the split holding its old
    records says their stored bytes unknown, never a sum of the new records' alone, and the new
    records' are kept for when every record has them."""
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 2})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, encode="png"))
    _as_packed_before(out, ("stored",))
    assert "stored unknown" in run_cli("inspect", str(out)).stdout
    _add(src, "dog", 2, seed=300)
    pack(src, out, PackOptions(grow="append", workers=1))
    summary = json.loads((out / "index.json").read_text())["summaries"]["train"]
    assert summary["records"] == 6 and "stored_bytes" not in summary
    assert summary["bytes"]["total"] == sum(p.stat().st_size for p in src.rglob("*.jpg"))
    assert "stored unknown" in run_cli("inspect", str(out)).stdout
    entries = json.loads((out / "contents.json").read_text())["shards"]
    stored = {k: n for e in entries.values() for k, n in zip(e["keys"], e["stored"], strict=True)}
    assert stored == {r["key"]: len(r["image"]) if r["key"].startswith("dog/new_") else 0
                      for r in iter_examples(out)}  # fmt: skip


# What the first contents.json lacked: an entry held keys, crc, size, label_counts and skipped.
_FIRST_LACKED = ("width", "height", "stored", "meta", "copy", "tally", "lossless", "reasons")


def test_a_grow_over_the_first_contents_leaves_out_what_it_did_not_note(tmp_path: Path):
    """A dataset whose contents.json the first shardpack to write one wrote (no sides, digests,
    copies, tallies nor reasons, no loose skips) grows: its split's sizes and aspect ratios are
    unknown, never figures over the zeros its old records read as; its formats and channels
    count those records as not noted; and the copies are those a fresh pack of SRC finds (old
    records alike in size and CRC are confirmed by their bytes, not taken as copies)."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 2}, ext=".png")
    shutil.copy(src / "cat" / "img_000.png", src / "dog" / "copy.png")
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1))
    _as_packed_before(out, _FIRST_LACKED)
    contents = json.loads((out / "contents.json").read_text())
    del contents["loose"]
    (out / "contents.json").write_text(json.dumps(contents, separators=(",", ":")))
    _add(src, "dog", 2, seed=300)
    shutil.copy(src / "cat" / "img_001.png", src / "dog" / "new_copy.png")
    pack(src, out, PackOptions(grow="append", workers=1))
    index = json.loads((out / "index.json").read_text())
    summary = index["summaries"]["train"]
    assert summary["records"] == 9 and summary["bytes"]["min"] > 0
    sizes = {"width", "height", "aspect", "aspect_histogram", "size_histogram", "stored_bytes"}
    assert not sizes & summary.keys()
    assert summary["formats"] == {"jpeg": 2, "png": 1, "(not noted)": 6}
    assert summary["channels"] == {"3": 3, "(not noted)": 6}
    assert "lossless" not in index["stats"]  # not a count of the new records alone
    said = run_cli("inspect", str(out)).stdout
    assert "images: unknown (packed before shardpack noted it)" in said
    assert "formats: (not noted) 6, jpeg 2, png 1" in said
    fresh = tmp_path / "fresh"
    pack(src, fresh, PackOptions(workers=1))
    assert index["duplicates"] == json.loads((fresh / "index.json").read_text())["duplicates"]
    assert index["duplicates"]["groups"] == 2
