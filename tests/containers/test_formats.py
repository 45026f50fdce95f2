"""pack --format for every container: the same plan, determinism, resume, verify, readers.

Each test runs once per container (parametrized); each container's own readers (Grain, TFDS's
data source, webdataset, wids) read what pack wrote, and shardpack's readers yield the same
records from every container.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from shardpack import PackOptions, Records, iter_examples, pack, tf_dataset, verify
from shardpack.containers import CONTAINERS
from shardpack.errors import IndexFormatError, ShardpackError
from tests.helpers import (
    READ_ARRAY_RECORD,
    READ_WEBDATASET,
    cli,
    make_tree,
    needs,
    run_cli,
    run_json,
    shard_files,
)

FORMATS = sorted(CONTAINERS)
OPTIONS = PackOptions(shards=3, workers=2)


@pytest.fixture(scope="module")
def src(shared_tree) -> Path:
    return shared_tree({"a": 5, "b": 4, "c": 3})


@pytest.fixture(scope="module")
def packed(src: Path, tmp_path_factory) -> dict[str, Path]:
    """SRC packed once per container."""
    root = tmp_path_factory.mktemp("packed")
    outs = {}
    for fmt in FORMATS:
        outs[fmt] = root / fmt
        pack(src, outs[fmt], replace(OPTIONS, format=fmt))
    return outs


def _records(out: Path) -> list[dict]:
    return list(iter_examples(out))


def _shards(out: Path) -> list[Path]:
    index = json.loads((out / "index.json").read_text())
    return [out / s["file"] for s in index["splits"]["train"]["shards"]]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_container_holds_the_same_records(packed, fmt):
    out = packed[fmt]
    index = json.loads((out / "index.json").read_text())
    assert index["container"] == fmt
    assert [p.name for p in _shards(out)] == [
        CONTAINERS[fmt].shard_name("src", "train", i, 3) for i in range(3)
    ]
    assert verify(out, decode=True).ok
    records = _records(out)
    assert records == _records(packed["tfrecord"])  # same plan, same records, same order
    with Records(out) as by_index:
        assert [by_index[i] for i in reversed(range(len(by_index)))] == records[::-1]


@pytest.mark.parametrize("fmt", FORMATS)
def test_same_input_same_bytes_and_resume_is_byte_identical(src, packed, fmt, tmp_path):
    out = tmp_path / "out"
    options = replace(OPTIONS, format=fmt)
    pack(src, out, options)
    assert shard_files(out) == shard_files(packed[fmt]) and len(shard_files(out)) == 3
    _shards(out)[1].unlink()  # an interrupted run: one shard and the index missing
    (out / "index.json").unlink()
    result = pack(src, out, replace(options, resume=True))
    assert result.num_reused == 2
    assert shard_files(out) == shard_files(packed[fmt])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "missing"])
def test_verify_names_damage_in_every_container(packed, fmt, damage, tmp_path):
    out = Path(shutil.copytree(packed[fmt], tmp_path / "out"))
    shard = _shards(out)[1]
    data = bytearray(shard.read_bytes())
    if damage == "flipped byte":
        data[len(data) // 3] ^= 0x01
        shard.write_bytes(bytes(data))
    elif damage == "truncated":
        shard.write_bytes(bytes(data[: len(data) // 2]))
    else:
        shard.unlink()
    report = verify(out)
    assert not report.ok
    assert {f.file for f in report.faults} == {shard.name}
    reasons = " / ".join(f.reason for f in report.faults)
    expected = {"flipped byte": "sha256 differs", "truncated": "records read, index.json says",
                "missing": "missing shard file"}  # fmt: skip
    assert expected[damage] in reasons


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_cli_packs_inspects_previews_and_verifies_every_container(src, fmt, tmp_path):
    out = tmp_path / "out"

    packing = run_cli("pack", str(src), str(out), "--format", fmt, "--shards", "2", "--no-progress")
    assert packing.returncode == 0, packing.stderr
    inspect = run_cli("inspect", str(out))
    assert inspect.returncode == 0 and f"{fmt} shards" in inspect.stdout, inspect.stderr
    preview = run_cli("preview", str(out), "--out", str(tmp_path / "p.png"), "--n", "4")
    assert preview.returncode == 0 and (tmp_path / "p.png").stat().st_size > 0, preview.stderr
    checked = run_cli("verify", str(out))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # it says what checked each record: TFRecord's CRCs and Parquet's page checksums cover its bytes
    framing = {
        "tfrecord": "CRC",
        "array_record": "framing",
        "webdataset": "tar headers",
        "parquet": "page checksums",
    }[fmt]
    assert checked.stdout.endswith(f"records ({framing}, counts, sha256)\n"), checked.stdout


READ_TFDS = """
import json, sys
import tensorflow_datasets as tfds
data = tfds.builder_from_directory(sys.argv[1]).as_data_source()["train"]
print(json.dumps({"labels": [int(data[i]["label"]) for i in range(len(data))],
                  "shape": list(data[0]["image"].shape)}))
"""


@pytest.mark.heavy
def test_grain_and_tfds_read_array_record_output(packed):
    needs("grain")
    needs("tensorflow_datasets")
    out = packed["array_record"]
    ours = _records(out)
    read = run_json(READ_ARRAY_RECORD, *map(str, _shards(out)))
    assert read["records"] == [[hashlib.sha256(r["image"]).hexdigest(), r["label"]] for r in ours]
    assert run_json(READ_TFDS, str(out)) == {"labels": [r["label"] for r in ours],
                                             "shape": [24, 32, 3]}  # fmt: skip


@pytest.mark.heavy
def test_webdataset_and_wids_read_webdataset_output(packed, tmp_path):
    needs("webdataset")
    needs("wids")
    out = packed["webdataset"]
    ours = _records(out)
    read = run_json(READ_WEBDATASET, str(out / "src-train.shardindex.json"),
                    str(tmp_path / "cache"), *map(str, _shards(out)))  # fmt: skip
    assert [d["label"] for d in read["decoded"]] == [r["label"] for r in ours]
    assert [d["json"]["key"] for d in read["decoded"]] == [r["key"] for r in ours]
    assert read["decoded"][0]["shape"] == [24, 32, 3]
    assert read["stored"] == [hashlib.sha256(r["image"]).hexdigest() for r in ours]
    assert read["by_index"] == [[r["label"], r["height"]] for r in ours]


READ_KEYS = """
import json, sys, warnings
warnings.simplefilter("ignore")
import contextlib, io, os
import webdataset as wds
import wids
from wids import wids_index
streamed = [s["__key__"] for s in wds.WebDataset(sys.argv[2:], shardshuffle=False)]
dataset = wids.ShardListDataset(sys.argv[1], cache_dir=sys.argv[1] + ".cache")
info = io.StringIO()  # what `widsindex info` prints of the split list
with contextlib.redirect_stdout(info), open(sys.argv[1]) as listed:
    wids_index.print_long_info(json.load(listed), sys.argv[1])
trains = sum(os.path.getsize(p) for p in sys.argv[2:] if "-train-" in p)
print(json.dumps({"streamed": streamed, "by_index": [dataset[i]["__key__"]
                                                     for i in range(len(dataset))],
                  "info": info.getvalue(), "size": wids_index.format_with_suffix(trains)}))
"""


def test_webdataset_keys_are_unique_in_the_dataset_and_the_same_on_every_pack(tmp_path):
    needs("webdataset")
    needs("wids")
    src = tmp_path / "src"
    for split in ("train", "test"):
        make_tree(src / split, {"a": 4, "b": 3})
    outs = [tmp_path / "out0", tmp_path / "out1"]
    for out in outs:
        pack(src, out, replace(OPTIONS, format="webdataset"))
    assert shard_files(outs[0]) == shard_files(outs[1])  # the same tars, so the same keys
    urls = [str(p) for p in sorted(outs[0].glob("*.tar"))]
    assert len(urls) == 6  # 3 shards a split
    read = run_json(READ_KEYS, str(outs[0] / "src-train.shardindex.json"), *urls)
    keys = read["streamed"]
    assert read["by_index"] == [k for k in keys if k.startswith("train-")]
    assert len(set(keys)) == len(keys) == 14 and all("." not in key for key in keys)
    assert keys[:2] == ["test-000000_000000", "test-000000_000001"]
    assert f"total size: {read['size']}\n" in read["info"]  # wids' own `widsindex info`


def test_a_tar_of_another_split_put_in_a_shard_s_place_is_refused_by_its_keys(tmp_path):
    import tarfile

    src = tmp_path / "src"
    for split in ("train", "test"):
        make_tree(src / split, {"a": 2})
    out = tmp_path / "out"
    pack(src, out, PackOptions(format="webdataset", shards=1, workers=1))
    train, test = out / "src-train-000000.tar", out / "src-test-000000.tar"
    train.write_bytes(test.read_bytes())  # as many records: the index's counts hold
    with tarfile.open(train) as tar:  # what webdataset and wids give as __key__
        assert tar.getnames()[0] == "test-000000_000000.jpg"
    said = f"{train.name} at byte 0: sample 'test-000000_000000' is not this shard's record 0"
    with pytest.raises(ShardpackError, match=said):  # read as train's records before
        list(iter_examples(out, "train"))
    with pytest.raises(ShardpackError, match=said):
        Records(out, "train")[0]


def test_a_tar_an_update_renumbered_keeps_its_keys_and_reads(tmp_path):
    import tarfile

    src = make_tree(tmp_path / "src", {"a": 6})
    out = tmp_path / "out"
    options = PackOptions(format="webdataset", shards=3, workers=1, shuffle=False)
    pack(src, out, options)
    for name in ("img_000.jpg", "img_001.jpg"):  # shard 0's: shard 2 moves into its name
        (src / "a" / name).unlink()
    pack(src, out, replace(options, shards=None, grow="update"))
    with tarfile.open(out / "src-train-000000.tar") as tar:
        assert tar.getnames()[0] == "train-000002_000000.jpg"
    records = Records(out, "train")
    assert len(list(iter_examples(out))) == len([records[i] for i in range(len(records))]) == 4


def test_a_split_name_too_long_for_a_tar_member_name_keys_by_shard_index(tmp_path, monkeypatch):
    """As a version before split names were held to options.MAX_SPLIT_CHARS wrote it (they
    still read): a split name too long for tar's names keys the samples by the shard's index."""
    import tarfile

    import shardpack.options

    monkeypatch.setattr(shardpack.options, "MAX_SPLIT_CHARS", 100)
    split = "s" * 90  # with the shard's index and the record's number: over tar's 100 bytes
    src = make_tree(tmp_path / "src" / split, {"a": 2}).parent
    out = tmp_path / "out"
    pack(src, out, PackOptions(format="webdataset", split_names=(split,), shards=1))
    (shard,) = out.glob("*.tar")
    with tarfile.open(shard) as tar:
        assert tar.getnames()[:2] == ["000000_000000.jpg", "000000_000000.cls"]
    assert len(list(iter_examples(out, split))) == 2


def test_an_index_without_a_container_is_tfrecord_and_an_unknown_one_is_refused(packed, tmp_path):
    out = Path(shutil.copytree(packed["tfrecord"], tmp_path / "out"))
    index = json.loads((out / "index.json").read_text())
    del index["container"]  # as every index written before containers
    (out / "index.json").write_text(json.dumps(index))
    assert _records(out) == _records(packed["tfrecord"]) and verify(out).ok
    (out / "index.json").write_text(json.dumps({**index, "container": "hdf5"}))
    with pytest.raises(IndexFormatError, match="unknown container 'hdf5'; upgrade shardpack"):
        verify(out)


def _lists(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.endswith(".shardindex.json"))


def test_a_repack_leaves_no_wids_list_of_the_old_dataset(src, tmp_path):
    """Each re-pack with --overwrite: another name, other splits, another container."""
    out, victim = tmp_path / "out", tmp_path / "victim.json"
    victim.write_text("the user's")
    wds = replace(OPTIONS, format="webdataset", overwrite=True)
    pack(src, out, wds)
    assert _lists(out) == ["src-train.shardindex.json"]
    pack(src, out, replace(wds, name="other"))
    assert _lists(out) == ["other-train.shardindex.json"]
    pack(src, out, replace(wds, name="other", split=(("fit", 0.5), ("val", 0.5))))
    assert _lists(out) == ["other-fit.shardindex.json", "other-val.shardindex.json"]
    (out / "other-val.shardindex.json").unlink()
    (out / "other-val.shardindex.json").symlink_to(victim)  # not a file of ours: never followed
    pack(src, out, replace(OPTIONS, overwrite=True))  # tfrecord
    assert _lists(out) == ["other-val.shardindex.json"] and victim.read_text() == "the user's"
    assert (out / "other-val.shardindex.json").is_symlink() and verify(out).ok


def test_a_repack_into_a_url_leaves_no_wids_list_of_the_old_dataset(src, tmp_path):
    import fsspec

    memory, url = fsspec.filesystem("memory"), f"memory://wids-{uuid.uuid4().hex}"
    try:
        pack(src, url, replace(OPTIONS, format="webdataset"))
        assert memory.isfile(f"{url}/src-train.shardindex.json")
        pack(src, url, replace(OPTIONS, overwrite=True))
        assert not memory.glob(f"{url}/*.shardindex.json") and verify(url).ok
    finally:
        memory.rm(url, recursive=True)


def test_tf_dataset_refuses_other_containers_in_one_line(packed):
    with pytest.raises(ShardpackError, match="tf_dataset reads tfrecord shards; these are "
                                             "webdataset"):  # fmt: skip
        tf_dataset(packed["webdataset"])


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "tfrecord"])
def test_index_files_refuse_other_containers_before_making_their_folder(packed, fmt, tmp_path):
    out = Path(shutil.copytree(packed[fmt], tmp_path / fmt))
    run = cli("index-files", str(out), timeout=120)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert f"these are {fmt}, which need none" in run.stderr
    assert not (out / "idx").exists()


def test_array_record_without_its_package_is_one_line_and_touches_nothing(packed, src, tmp_path):
    """`pip install shardpack` brings no array-record: --format array_record (and reading such
    shards) is then one line naming the extra, exit code 2, and OUT is not even created."""
    blocked = ("import sys, runpy; sys.modules['array_record'] = None; sys.argv[0] = 'shardpack';"
               " runpy.run_module('shardpack', run_name='__main__')")  # fmt: skip
    out = tmp_path / "out"
    for args in (["pack", str(src), str(out), "--format", "array_record", "--workers", "2"],
                 ["verify", str(packed["array_record"])],
                 ["inspect", str(packed["array_record"])]):  # fmt: skip
        run = subprocess.run([sys.executable, "-c", blocked, *args],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert run.returncode == 2 and "Traceback" not in run.stderr, (args, run.stderr)
        assert run.stderr.count("\n") == 1, run.stderr
        assert "pip install 'shardpack[array_record]'" in run.stderr, run.stderr
        assert "pip install '.[array_record]' from shardpack's checkout" in run.stderr
    assert not out.exists()
