"""A reader whose OUT another process updated or packed again under it says so in one line, and to
open it again, instead of blaming a shard the new index no longer lists; with OUT's index.json
unchanged, a shard gone or resized is still a damaged shard."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import shardpack
from shardpack.errors import OutChangedError, RecordError
from tests.helpers import cli, make_tree, run_json


def _pack(src: Path, out: Path | str, *flags: str) -> None:
    """`shardpack pack SRC OUT` in a process of its own, as another user's run would be."""
    run = cli("pack", str(src), str(out), "--shards", "3", "--workers", "1", "--no-progress",
              *flags)  # fmt: skip
    assert run.returncode == 0, run.stderr


def _packed(tmp_path: Path, per_class: int = 5, *flags: str) -> tuple[Path, Path]:
    src = make_tree(tmp_path / "src", {"a": per_class, "b": per_class})
    out = tmp_path / "out"
    _pack(src, out, *flags)
    return src, out


def _listed(out: Path) -> dict[str, tuple[int, str]]:
    """Each shard OUT's index lists: its size and sha256."""
    return {s.file: (s.num_bytes, s.sha256) for s in shardpack.load_index(out).shards}


def _changed(out: Path, again: str = "open it again") -> str:
    """The line a reader says once OUT was updated under it, but for the shard's path first."""
    return (f"{out} was updated or packed again since this reader opened it (its index.json "
            f"changed): {again}")  # fmt: skip


@pytest.mark.parametrize("grow", ["--update", "--overwrite"])
def test_readers_opened_before_an_update_say_out_changed_not_a_damaged_shard(tmp_path, grow):
    """Before: 'OUT/src-train.tfrecord-00001-of-00003: missing (index.json lists it, of 3,158
    bytes); restore it from a copy or pack again', from iter_examples and Records alike."""
    src, out = _packed(tmp_path)
    examples = shardpack.iter_examples(out)
    next(examples)  # the first shard open, the others not yet
    records = shardpack.Records(out)
    records[0]
    shutil.rmtree(src / "b")
    (src / "b").mkdir()  # every shard held some of b's: each is rewritten, the old ones go
    _pack(src, out, grow, "--seed", "1") if grow == "--overwrite" else _pack(src, out, grow)
    with pytest.raises(OutChangedError) as error:
        list(examples)
    assert str(error.value).endswith(_changed(out))
    assert str(error.value).startswith(f"{out}/src-train.tfrecord-0000")
    with pytest.raises(OutChangedError) as error:
        records[len(records) - 1]
    assert str(error.value).endswith(_changed(out))
    records.close()
    assert len(list(shardpack.iter_examples(out))) == 5  # opened again: read whole


def test_readers_opened_before_a_pack_again_that_keeps_each_shards_size_say_out_changed(tmp_path):
    """Before: the shards packed again under the same names, at the same sizes, passed every
    CRC and were read on as the old index's: records came twice and others never."""
    src, out = _packed(tmp_path, 5, "--encode", "raw")  # records of one size: shards too
    before = _listed(out)
    examples = shardpack.iter_examples(out)
    next(examples)
    records = shardpack.Records(out)
    records[0]
    _pack(src, out, "--encode", "raw", "--overwrite", "--seed", "1")
    after = _listed(out)
    assert {f: size for f, (size, _) in after.items()} == {f: s for f, (s, _) in before.items()}
    assert all(after[f][1] != before[f][1] for f in before)  # every one holds other records
    for read in (lambda: list(examples), lambda: records[len(records) - 1]):
        with pytest.raises(OutChangedError) as error:
            read()
        assert str(error.value).startswith(f"{out}/src-train.tfrecord-0000")
        assert str(error.value).endswith(f": rewritten; {_changed(out)}")
    records.close()


def test_readers_opened_before_an_append_read_on_and_still_blame_a_damaged_shard(tmp_path):
    """An append keeps the shards a reader opened: read on, not told OUT changed; and one of
    them damaged in place is still a damaged shard, though index.json changed."""
    src, out = _packed(tmp_path)
    examples = shardpack.iter_examples(out)
    first = next(examples)
    records = shardpack.Records(out)
    records[0]
    make_tree(src, {"c": 2}, seed=10)
    _pack(src, out, "--append")
    assert len(_listed(out)) > 3
    keys = [first["key"], *(r["key"] for r in examples)]
    assert sorted(keys) == sorted(records[i]["key"] for i in range(len(records)))
    assert len(keys) == 10 and not any(k.startswith("c/") for k in keys)
    records.close()

    examples = shardpack.iter_examples(out)
    next(examples)
    records = shardpack.Records(out)
    shard = shardpack.load_index(out).split("train").shards[-1]
    make_tree(src, {"d": 2}, seed=20)
    _pack(src, out, "--append")  # another index.json, listing the shards as they were
    with open(out / shard.file, "r+b") as f:  # a byte of the last record's data, in place
        f.seek(shard.num_bytes - 8)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    for read in (lambda: list(examples), lambda: records[len(records) - 1]):
        with pytest.raises(RecordError) as error:
            read()
        assert not isinstance(error.value, OutChangedError)
        assert str(error.value).startswith(f"{out}/{shard.file} at byte ")
        assert "data CRC mismatch (corrupt record): the shard is damaged" in str(error.value)
    records.close()


def test_a_shard_gone_beside_an_unchanged_index_is_still_a_damaged_shard(tmp_path):
    _, out = _packed(tmp_path)
    examples = shardpack.iter_examples(out)
    next(examples)
    shard = shardpack.load_index(out).split("train").shards[-1]
    (out / shard.file).unlink()
    with pytest.raises(RecordError) as error:
        list(examples)
    assert str(error.value) == (
        f"{out}/{shard.file}: missing (index.json lists it, of {shard.num_bytes:,} bytes); "
        "restore it from a copy or pack again"
    )


def test_verify_of_an_out_updated_while_it_reads_says_so(tmp_path):
    """Before: verify listed the shards the update removed as 'missing shard file' and the
    CLI said to restore them from a copy."""
    src, out = _packed(tmp_path, per_class=50)  # progress is told every 64 records
    updated = []

    def progress(done: int, total: int) -> None:
        if done and not updated:  # (the first call, 0, comes as reading starts)
            updated.append(done)
            shutil.rmtree(src / "b")
            (src / "b").mkdir()
            _pack(src, out, "--update")

    with pytest.raises(OutChangedError) as error:
        shardpack.verify(out, progress=progress)
    assert updated == [64]
    assert str(error.value) == (
        f"{out}: was updated or packed again while verify read it (its index.json changed); "
        "run verify again"
    )
    assert shardpack.verify(out).ok


@pytest.mark.heavy
def test_a_tf_dataset_read_across_an_update_says_out_changed(tmp_path):
    """Before: TensorFlow's reader met the shards the update removed and retried them for ever
    (a core busy, nothing said); a shard of another size was 'could not read its records
    whole (a record is damaged ...)'."""
    import tensorflow as tf

    src, out = _packed(tmp_path)
    ds = shardpack.tf_dataset(out, shuffle=False, decode=False)  # its shards checked: whole
    shutil.rmtree(src / "b")
    (src / "b").mkdir()
    _pack(src, out, "--update")
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        list(ds)  # each shard opened now, after the update (tf.data reads ahead: not mid-way)
    said = re.search(r"assertion failed: \[(.*)\]", error.value.message)
    assert said and said[1].startswith(f"{out}/src-train.tfrecord-0000")
    assert said[1].endswith(_changed(out, "call tf_dataset again"))


_EPOCH_UNDER_UPDATE = """
import json, os, shutil, subprocess, sys
from shardpack.errors import ShardpackError
from shardpack.torch import ShardDataset
src, out = sys.argv[1:]
ds = ShardDataset(out, shuffle=False, decode=False)
ds.set_epoch(1)
records = iter(ds)
got = [next(records)["key"]]
shutil.rmtree(os.path.join(src, "b"))
os.mkdir(os.path.join(src, "b"))
subprocess.run([sys.executable, "-m", "shardpack", "pack", src, out, "--update", "--workers",
                "1", "--no-progress"], check=True, capture_output=True)
try:
    got += [r["key"] for r in records]
except ShardpackError as e:
    got.append(f"{type(e).__name__}: {e}")
print(json.dumps(got))
"""


@pytest.mark.heavy
def test_a_shard_dataset_mid_epoch_under_an_update_says_to_build_it_again(tmp_path):
    """As ShardDataset says when an epoch opens the updated pack (test_torch.py)."""
    pytest.importorskip("torch")
    src, out = _packed(tmp_path)
    got = run_json(_EPOCH_UNDER_UPDATE, str(src), str(out))
    assert len(got) == 2 and got[1].startswith(f"OutChangedError: {out}/src-train.tfrecord-0000")
    assert got[1].endswith(_changed(out, "build the ShardDataset again"))


@pytest.mark.long  # the local readers' rule, shown again on a store
def test_a_reader_of_s3_opened_before_an_update_says_out_changed(tmp_path, s3):
    """As seen on S3: iter_examples and Records over s3:// blamed the shard the update removed."""
    src = make_tree(tmp_path / "src", {"a": 5, "b": 5})
    out = s3.url("packed")
    _pack(src, out)
    examples = shardpack.iter_examples(out)
    next(examples)
    records = shardpack.Records(out)
    records[0]
    shutil.rmtree(src / "b")
    (src / "b").mkdir()
    _pack(src, out, "--update")
    with pytest.raises(OutChangedError) as error:
        list(examples)
    assert str(error.value).endswith(_changed(out))
    with pytest.raises(OutChangedError) as error:
        records[len(records) - 1]
    assert str(error.value).endswith(_changed(out))
