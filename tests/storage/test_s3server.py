"""The loopback S3 server that the object-storage tests stand on, driven through s3fs as a user's
S3 would be: what those tests assume of it holds, here and in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.s3server import Bucket

MiB = 2**20


def test_put_get_and_a_subprocess_reaches_the_same_server(s3: Bucket):
    s3.write("a/b.txt", b"hello")
    assert s3.read("a/b.txt") == b"hello"
    assert s3.fs.s3.meta.endpoint_url == s3.endpoint  # from AWS_ENDPOINT_URL, not AWS
    code = "import fsspec, sys; print(fsspec.open(sys.argv[1]).open().read().decode())"
    run = subprocess.run([sys.executable, "-c", code, s3.url("a/b.txt")], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0 and run.stdout.strip() == "hello", run.stderr


def test_a_streamed_upload_is_open_until_close_and_nothing_shows_before(s3: Bucket):
    data = os.urandom(11 * MiB)
    f = s3.fs.open(f"{s3.name}/out/shard", "wb", block_size=5 * MiB)
    f.write(data)  # two parts sent, the rest buffered
    assert s3.uploads("out/") == ["out/shard"]
    assert s3.keys("out") == []
    f.close()
    assert s3.uploads() == [] and s3.read("out/shard") == data


def test_a_discarded_upload_leaves_nothing(s3: Bucket):
    f = s3.fs.open(f"{s3.name}/out/shard", "wb", block_size=5 * MiB)
    f.write(os.urandom(6 * MiB))
    assert s3.uploads() == ["out/shard"]
    f.discard()
    f.closed = True  # s3fs leaves it open: collected, it would try to close it again
    assert s3.uploads() == [] and s3.keys() == []


def test_create_only_put_refuses_an_existing_key(s3: Bucket):
    s3.fs.pipe_file(f"{s3.name}/lock", b"first", mode="create")
    with pytest.raises(FileExistsError):
        s3.fs.pipe_file(f"{s3.name}/lock", b"second", mode="create")
    assert s3.read("lock") == b"first"


def test_each_test_has_a_bucket_of_its_own(s3: Bucket):
    assert s3.keys() == [] and s3.uploads() == []
    assert s3.fs.ls("") == [s3.name]  # what the test before left is gone
