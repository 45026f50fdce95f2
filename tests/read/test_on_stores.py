"""Reading a pack output in object storage: every reader over a memory:// URL gives what it
gives over the local folder (tf_dataset's in test_stream.py, which loads TensorFlow); a remote
shard streams; a missing filesystem package is one line."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from pathlib import Path

import fsspec
import pytest
from typer.testing import CliRunner

import shardpack
from shardpack.cli import app
from shardpack.packing.daliindex import write_index_files
from shardpack.read.describe import describe
from shardpack.read.preview import make_preview
from tests.helpers import cli, packed_tree

FORMATS = ["tfrecord", "array_record", "webdataset"]


def _upload(out: Path) -> str:
    """OUT copied into a fresh memory:// prefix; its URL."""
    url = f"memory://{uuid.uuid4().hex}/out"
    fs = fsspec.filesystem("memory")
    for path in sorted(out.rglob("*")):
        if path.is_file():
            fs.pipe(f"{url}/{path.relative_to(out).as_posix()}", path.read_bytes())
    return url


@pytest.fixture(scope="module", params=FORMATS)
def packed(request, shared_pack) -> tuple[Path, str]:
    """(a local pack output of the container, the same bytes under a memory:// URL)."""
    if request.param == "array_record":
        pytest.importorskip("array_record")
    out = shared_pack({"a": 4, "b": 3}, workers=1, shards=2, format=request.param)
    return out, _upload(out)


def _equal(left: object, right: object) -> bool:
    """==, for records whose values may be numpy arrays."""
    import numpy as np

    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_equal(left[k], right[k]) for k in left)
    if isinstance(left, np.ndarray):
        return np.array_equal(left, right)
    return left == right


def test_iter_examples_and_records_over_a_url_equal_the_local_folder(packed):
    out, url = packed
    local = list(shardpack.iter_examples(out, "train", decode=True))
    remote = list(shardpack.iter_examples(url, "train", decode=True))
    assert len(local) == 7 and all(_equal(a, b) for a, b in zip(local, remote, strict=True))
    with shardpack.Records(url, "train") as records:
        assert len(records) == 7
        assert all(_equal(records[i], shardpack.read_record(out, "train", i)) for i in range(7))


def test_verify_over_a_url_then_a_modified_object_names_its_shard(packed):
    out, url = packed
    report = shardpack.verify(url, decode=True)
    assert report.ok and report.out == url and report.records == 7
    index = shardpack.load_index(url)
    assert index.out == url and index.shard_path(index.split("train").shards[0]).startswith(url)
    shard = index.split("train").shards[-1].file
    fs = fsspec.filesystem("memory")
    data = bytearray(fs.cat(f"{url}/{shard}"))
    data[len(data) // 2] ^= 0xFF
    changed = _upload(out)
    fs.pipe(f"{changed}/{shard}", bytes(data))
    fs.pipe(f"{changed}/{shard.replace('00001', '00007')}", b"x")  # an extra shard, listed
    faults = shardpack.verify(changed).faults
    assert {f.file for f in faults} == {shard, shard.replace("00001", "00007")}
    assert any("sha256 differs" in f.reason for f in faults if f.file == shard)


def test_inspect_and_preview_over_a_url_equal_the_local_folder(packed, tmp_path):
    out, url = packed
    local, remote = describe(out), describe(url)
    assert remote.pop("out") == url and local.pop("out") == str(out)
    assert local == remote
    make_preview(out, tmp_path / "local.png", n=7)
    make_preview(url, tmp_path / "remote.png", n=7)
    assert (tmp_path / "local.png").read_bytes() == (tmp_path / "remote.png").read_bytes()


def test_index_files_over_a_url_equal_the_local_ones(tmp_path):
    out = packed_tree(tmp_path, {"a": 4, "b": 3}, workers=1, shards=2)
    url = _upload(out)
    written = write_index_files(url)
    local = write_index_files(out)
    fs = fsspec.filesystem("memory")
    assert written == [f"{url}/idx/{os.path.basename(p)}" for p in local]
    assert [fs.cat(w) for w in written] == [Path(p).read_bytes() for p in local]
    with shardpack.Records(url, "train") as records:  # now read at the offsets they give
        assert records[6] == shardpack.read_record(out, "train", 6)


def test_the_cli_reads_a_url(packed, tmp_path):
    _, url = packed
    runner = CliRunner()
    run = runner.invoke(app, ["verify", url, "--storage-option", "skip_instance_cache=true"])
    assert run.exit_code == 0 and "OK: 2 shards, 7 records" in run.output
    run = runner.invoke(app, ["inspect", url, "--json"])
    assert run.exit_code == 0 and f'"out": "{url}"' in run.output
    run = runner.invoke(app, ["preview", url, "--out", str(tmp_path / "p.png"), "--n", "4"])
    assert run.exit_code == 0 and (tmp_path / "p.png").stat().st_size > 0


@pytest.mark.parametrize("command", ["verify", "inspect", "preview", "index-files"])
def test_a_url_whose_package_is_missing_is_one_line(command):
    if _has("gcsfs"):  # not a test dependency: this checks the machine without it
        pytest.skip("gcsfs is installed")
    run = cli(command, "gs://bucket/out", timeout=120)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().count("\n") == 0 and "pip install 'shardpack[gcs]'" in run.stderr


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def s3_bucket():
    """A bucket on moto's S3 server on loopback, through s3fs as a user's S3 is."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {"key": "test", "secret": "test",
               "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}",
                                 "region_name": "eu-west-1"}}  # fmt: skip
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **options)
    fs.mkdir("readers")
    yield options
    server.stop()


def test_a_remote_shard_streams_its_first_record(s3_bucket, tmp_path, caplog):
    """The first record of a 24 MiB shard arrives after fetching a few MiB (the read-ahead), not
    the whole object: counted from s3fs's own log of each ranged GET."""
    from shardpack.containers.tfrecord import TFRecordWriter, iter_records
    from shardpack.storage import storage_at

    path = tmp_path / "big.tfrecord"
    with TFRecordWriter(path) as writer:
        for i in range(24):
            writer.write(bytes([i]) * (1 << 20))
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_bucket)
    fs.put_file(str(path), "readers/out/big.tfrecord")
    storage = storage_at("s3://readers/out", s3_bucket)
    caplog.set_level(logging.DEBUG, logger="s3fs")
    records = iter_records(storage, "big.tfrecord")
    offset, first = next(records)
    fetched = [r for r in caplog.records if r.getMessage().startswith("Fetch:")]
    spans = [tuple(map(int, r.getMessage().rsplit(" ", 1)[1].split("-"))) for r in fetched]
    assert offset == 0 and first == b"\0" * (1 << 20)
    assert 0 < sum(end - start for start, end in spans) <= 8 << 20  # of 24 MiB
    assert sum(1 for _ in records) == 23  # and the rest streams on
