"""SRC and OUT as URLs, end to end, against moto's S3 server on loopback (tests/s3server.py)
driven through s3fs as a user's S3 would be, and memory://: packs local -> s3 and s3 -> s3
byte-identical to a local pack; a run stopped by SIGINT, or by SIGKILL of a worker mid-upload,
leaves no partial object under a final name and no open multipart upload, and --resume completes
byte-identical; the lock object refuses a second run; verify catches a changed object; the
readers and a manifest of s3 URLs."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

import shardpack
from shardpack.containers import is_shard_name
from shardpack.errors import StorageError
from shardpack.options import PackOptions
from shardpack.storage import parse_options, storage_at
from tests import forkserver
from tests.helpers import (
    cli,
    gone,
    image,
    make_tree,
    object_hashes,
    run_cli,
    same_output,
    wait_for,
    worker_pids,
    write_csv,
    write_image,
    write_tars,
)
from tests.s3server import Bucket

JOB = ["--name", "flowers", "--shards", "3", "--workers", "2", "--no-progress"]
# Shards streamed as multipart uploads, open for most of their writing: raw 256x256 pixels, 60 a
# shard, 11.8 MB each, past the 8 MiB parts storage.remote uploads; four shards on two workers, so
# that a run can be stopped with some finished and others uploading.
BIG_SHARDS = 4
BIG_JOB = ["--name", "big", "--encode", "raw", "--shards", str(BIG_SHARDS), "--workers", "2",
           "--no-progress"]  # fmt: skip


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


def _process(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The run in a child of its own, with an environment of its own."""
    return cli(*args, env=env, timeout=120)


def _start(*args: str) -> forkserver.Child:
    """A run stopped or held: a real process of its own, forked from tests.forkserver's server."""
    return forkserver.start(forkserver.SHARDPACK, *args)


@pytest.fixture(scope="module")
def src(shared_tree) -> Path:
    return shared_tree({"a": 8, "b": 8, "c": 8})


@pytest.fixture(scope="module")
def local(src: Path) -> Path:
    """The reference: the same job packed from a local folder into a local folder."""
    out = src.parent / "local"
    assert _cli("pack", str(src), str(out), *JOB).returncode == 0
    return out


@pytest.fixture(scope="module")
def big_src(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("big") / "src"
    for i in range(BIG_SHARDS * 60):
        write_image(root / f"c{i % 4}" / f"{i:04d}.jpg", image(i, height=256, width=256))
    return root


@pytest.fixture(scope="module")
def big_local(big_src: Path) -> Path:
    out = big_src.parent / "local"
    assert _cli("pack", str(big_src), str(out), *BIG_JOB).returncode == 0
    return out


def _nothing_partial(s3: Bucket, prefix: str, reference: Path) -> int:
    """After a failed run: no open upload under prefix, no index.json, and every object under a
    shard name is that shard, complete (the reference's bytes); the number of such shards."""
    assert s3.uploads(prefix) == []
    wanted = object_hashes(reference.as_uri())
    found = {k: v for k, v in object_hashes(s3.url(prefix)).items() if is_shard_name(k)}
    assert "index.json" not in object_hashes(s3.url(prefix))
    assert {k: wanted[k] for k in found} == found
    return len(found)


def _journaled(s3: Bucket, prefix: str) -> int:
    """Shards the run's journal records (one object each, beside the journal's head)."""
    records = [k for k in s3.keys(prefix) if "/.shardpack.journal.d/" in f"/{k}"]
    return max(0, len(records) - 1)


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_local_to_s3_is_byte_identical_to_a_local_pack(src, local, s3: Bucket):
    out = s3.url("packed/flowers")
    run = _cli("pack", str(src), out, *JOB)
    assert run.returncode == 0, run.stderr
    same_output(out, local)
    assert s3.uploads() == []
    again = _cli("pack", str(src), out, *JOB, "--resume", "--json")  # the lock was given back
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["records"] == 24
    same_output(out, local)


def test_python_api_packs_s3_to_s3_and_reads_it_back(src, local, s3: Bucket):
    source, out = s3.put_tree(src, "raw/flowers"), s3.url("packed/flowers")
    result = shardpack.pack(source, out, PackOptions(name="flowers", shards=3, workers=2))
    assert result.num_records == 24
    same_output(out, local)

    def contents(records) -> list[tuple]:
        return sorted((r["key"], r["label"], hashlib.sha256(r["image"]).digest()) for r in records)

    expected = contents(shardpack.iter_examples(str(local), "train"))
    assert contents(shardpack.iter_examples(out, "train")) == expected
    with shardpack.Records(out, "train") as records:
        assert len(records) == 24
        assert contents(records[i] for i in range(24)) == expected
    report = shardpack.verify(out)
    assert report.ok and report.records == 24, report.faults


def test_readers_on_the_command_line_take_the_url(local, s3: Bucket, tmp_path: Path):
    out = s3.put_tree(local, "packed/flowers")  # what a pack there writes (the test above)
    verify = _cli("verify", out)
    assert verify.returncode == 0 and verify.stdout.startswith("OK: 3 shards, 24 records")
    inspect = _cli("inspect", out, "--json")
    assert inspect.returncode == 0, inspect.stderr
    train = json.loads(inspect.stdout)["splits"]["train"]
    assert train["num_records"] == 24 and len(train["samples"]) == 3  # records read back
    sheet = tmp_path / "sheet.png"
    preview = _cli("preview", out, "--out", str(sheet), "--n", "8")
    assert preview.returncode == 0, preview.stderr
    assert sheet.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_verify_names_a_changed_object(local, s3: Bucket):
    out = s3.put_tree(local, "packed/flowers")
    victim = "flowers-train.tfrecord-00001-of-00003"
    data = bytearray(s3.read(f"packed/flowers/{victim}"))
    data[len(data) // 2] ^= 0x01  # same size: only the sha256 and a CRC can tell
    s3.write(f"packed/flowers/{victim}", bytes(data))
    run = _cli("verify", out)
    assert run.returncode == 1 and f"FAULT {victim}" in run.stderr, run.stderr
    report = shardpack.verify(out)
    assert not report.ok and {f.file for f in report.faults} == {victim}


def test_storage_options_reach_the_run_and_its_workers(src, local, s3: Bucket, monkeypatch):
    """--storage-option (and storage_options=) win over the environment, in every process: the
    environment here points at a closed loopback port, the option at the server."""
    import s3fs

    out = s3.url("packed/flowers")
    option = f"endpoint_url={s3.endpoint}"
    env = {**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1"}
    run = _process("pack", str(src), out, *JOB, "--storage-option", option, env=env)
    assert run.returncode == 0, run.stderr
    same_output(out, local)
    verify = _process("verify", out, "--storage-option", option, env=env)
    assert verify.returncode == 0, verify.stderr
    for name in ("AWS_ENDPOINT_URL", "AWS_MAX_ATTEMPTS"):
        monkeypatch.setenv(name, env[name])
    s3fs.S3FileSystem.clear_instance_cache()  # one made before would still know the server
    options = {"endpoint_url": s3.endpoint}
    assert len(list(shardpack.iter_examples(out, "train", storage_options=options))) == 24
    assert shardpack.verify(out, storage_options=options).ok
    s3fs.S3FileSystem.clear_instance_cache()  # none that knows only the closed port stays


def test_a_lock_the_store_will_not_remove_after_a_complete_run_says_so(src, monkeypatch):
    """The store fails as the lock goes, after index.json: one line that says the run is
    complete and which object to remove (it was the store's error alone, as if the run had
    failed)."""
    memory_fs = type(fsspec.filesystem("memory"))
    remove = memory_fs.rm_file

    def refuse_the_lock(self, path, *args, **kwargs):
        if path.endswith(".shardpack.lock"):
            raise ConnectionResetError("connection reset by peer")
        return remove(self, path, *args, **kwargs)

    monkeypatch.setattr(memory_fs, "rm_file", refuse_the_lock)
    out = "memory://shardpack-lock/flowers"
    try:
        with pytest.raises(shardpack.OutputError) as caught:
            shardpack.pack(src, out, PackOptions(name="flowers", shards=2, workers=1))
        assert str(caught.value) == (
            f"{out}/.shardpack.lock: the run is complete (index.json written), but its lock "
            "could not be removed (connection reset by peer); remove it, or a later run on "
            "this host takes it over"
        )
        assert shardpack.verify(out).ok
    finally:
        monkeypatch.undo()
        memory = fsspec.filesystem("memory")
        if memory.exists("/shardpack-lock"):
            memory.rm("/shardpack-lock", recursive=True)


def test_a_manifest_on_s3_of_s3_urls(src, s3: Bucket, tmp_path: Path):
    s3.put_tree(src, "raw/flowers")
    files = sorted(p for p in src.rglob("*.jpg"))
    rows = [{"path": s3.url(f"raw/flowers/{p.relative_to(src).as_posix()}"),
             "label": p.parent.name} for p in files]  # fmt: skip
    s3.write("manifests/flowers.csv", write_csv(tmp_path / "flowers.csv", rows).read_bytes())
    out = s3.url("packed/flowers")
    run = _cli("pack", s3.url("manifests/flowers.csv"), out, "--shards", "2", "--no-progress")
    assert run.returncode == 0, run.stderr
    classes = json.loads(s3.read("packed/flowers/index.json"))["classes"]
    packed = sorted((classes[r["label"]], hashlib.sha256(r["image"]).hexdigest())
                    for r in shardpack.iter_examples(out, "train"))  # fmt: skip
    assert packed == sorted((p.parent.name, hashlib.sha256(p.read_bytes()).hexdigest())
                            for p in files)  # fmt: skip


@pytest.fixture(scope="module")
def slowed(tmp_path_factory) -> Iterator[tuple[str, dict[str, str]]]:
    """A server of its own whose every GET of an object is answered 0.2 s late (a remote
    store's round trip, made long) and counted (tests/s3server.py): its endpoint, and the
    environment that reaches it."""
    pytest.importorskip("moto.server")
    from tests.s3server import environment, start_server

    tmp = tmp_path_factory.mktemp("slowed")
    server, endpoint = start_server(tmp / "moto.log", latency=0.2)
    try:
        yield endpoint, environment(endpoint, tmp)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _manifest_of_objects(slowed, src: Path, tmp_path: Path, bucket: str, monkeypatch,
                         copies: int = 1) -> tuple[Path, int]:  # fmt: skip
    """A CSV on the disk naming `copies` objects of each image of src, uploaded to `bucket` on
    the slowed server, reached from here and the processes a test starts; how many it names."""
    import s3fs

    for name, value in slowed[1].items():
        monkeypatch.setenv(name, value)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir(bucket)
    files = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.jpg"))
    named = [f"{bucket}/{n}/{name}" for n in range(copies) for name in files]
    fs.pipe({key: (src / key.split("/", 2)[2]).read_bytes() for key in named})
    rows = [{"path": f"s3://{key}", "label": key.split("/")[2]} for key in named]
    return write_csv(tmp_path / "images.csv", rows), len(named)


def test_a_manifest_s_objects_are_fetched_several_at_once_within_the_bound(
    slowed, src, tmp_path, monkeypatch
):
    """A manifest on the disk naming s3:// images, each GET answered late: one worker has more
    than one in flight but never more than ObjectsAhead's _AHEAD (its client allowed 64),
    fetches each object once, and skips the one the store will not give (a GLACIER object's
    read is refused) naming it as a read of it alone does."""
    import s3fs

    from shardpack.storage.imageroot import ImageRoot
    from shardpack.storage.remote import _AHEAD
    from tests.s3server import gets

    endpoint = slowed[0]
    manifest, count = _manifest_of_objects(slowed, src, tmp_path, "counted", monkeypatch)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.pipe_file("counted/cold.jpg", manifest.read_bytes(), StorageClass="GLACIER")
    rows = manifest.read_text().splitlines()
    manifest.write_text("\n".join([*rows[:5], "s3://counted/cold.jpg,a", *rows[5:]]) + "\n")
    gets(endpoint, reset=True)
    pool = 'config_kwargs={"max_pool_connections": 64}'  # s3fs's client: 10 at once
    run = _process("pack", str(manifest), str(tmp_path / "out"), "--workers", "1",
                   "--no-progress", "--json", "--storage-option", pool,
                   env=dict(os.environ))  # fmt: skip
    served = gets(endpoint)
    with pytest.raises(PermissionError) as alone:
        fresh = {"skip_instance_cache": True}  # not one made for another server
        ImageRoot(storage_at(tmp_path), fresh).read("s3://counted/cold.jpg", 1 << 20)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["records"] == count
    assert served["gets"] == count + 1, served  # each object once
    assert 1 < served["most"] <= _AHEAD < count, served
    skipped = json.loads((tmp_path / "out" / "index.json").read_text())["skipped"]
    assert len(skipped) == 1 and "s3://counted/cold.jpg" in json.dumps(skipped)
    assert f"cannot read ({alone.value.strerror})" in json.dumps(skipped), skipped


def test_a_slow_object_holds_up_the_reads_not_the_fetching_of_the_objects_after_it(
    slowed, src, tmp_path, monkeypatch
):
    """The server holds a manifest's first object until 2 x _AHEAD other GETs have been
    answered (and counts them): they are, a request starting as each ends. (Fetched a batch of
    _AHEAD at a time, the next batch waited for the slow one: 15 were, and the hold ran out.)"""
    from shardpack.storage.remote import _AHEAD
    from tests.s3server import gets, hold

    endpoint = slowed[0]
    manifest, count = _manifest_of_objects(slowed, src, tmp_path, "held", monkeypatch, 4)
    first = manifest.read_text().splitlines()[1].split(",")[0].removeprefix("s3:/")
    gets(endpoint, reset=True)
    hold(endpoint, first, 2 * _AHEAD)
    pool = 'config_kwargs={"max_pool_connections": 64}'
    run = _process("pack", str(manifest), str(tmp_path / "out"), "--workers", "1", "--shards",
                   "1", "--no-shuffle", "--no-progress", "--json", "--storage-option", pool,
                   env=dict(os.environ))  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["records"] == count
    served = gets(endpoint)
    assert served["held"] is not None and served["held"] >= 2 * _AHEAD, served
    assert served["gets"] == count, served  # each object once
    assert served["most"] <= _AHEAD, served


def test_ctrl_c_while_a_manifest_s_objects_are_fetched_ahead_stops_the_run(
    slowed, src, tmp_path, monkeypatch
):
    """SIGINT while a worker's objects are in flight: the run ends as a stopped run does (130,
    one line), its fetching thread waiting out only the requests in flight, and no GET is sent
    after it ended."""
    from tests.s3server import gets

    endpoint = slowed[0]
    manifest, count = _manifest_of_objects(slowed, src, tmp_path, "stopped", monkeypatch, 4)
    gets(endpoint, reset=True)
    run = _start("pack", str(manifest), str(tmp_path / "out"), "--workers", "1", "--no-progress")
    wait_for(lambda: gets(endpoint)["gets"] >= 1, 60)
    run.send_signal(signal.SIGINT)
    stderr = run.communicate(timeout=30)[1]
    assert run.returncode == 130, stderr
    assert "--resume" in _one_line(stderr)
    after = gets(endpoint)["gets"]
    assert after < count
    time.sleep(0.5)  # a thread left fetching would be heard from within a round trip or two
    assert gets(endpoint)["gets"] == after


def test_a_run_aborts_uploads_left_open_under_its_shard_names(src, local, s3: Bucket):
    """What a run killed outright (SIGKILL, a lost machine) leaves: an upload that nobody
    completed or aborted, under a name this run writes."""
    key = "packed/flowers/flowers-train.tfrecord-00000-of-00003"
    upload = s3.fs.call_s3("create_multipart_upload", Bucket=s3.name, Key=key)
    s3.fs.call_s3("upload_part", Bucket=s3.name, Key=key, UploadId=upload["UploadId"],
                  PartNumber=1, Body=b"left by a killed run")  # fmt: skip
    assert s3.uploads("packed/") == [key]
    run = _cli("pack", str(src), s3.url("packed/flowers"), *JOB)
    assert run.returncode == 0, run.stderr
    assert s3.uploads() == []
    same_output(s3.url("packed/flowers"), local)


def _uploading(s3: Bucket, prefix: str) -> bool:
    return bool(s3.uploads(prefix))


def test_sigint_mid_upload_leaves_nothing_partial_and_resume_completes(
    big_src, big_local, s3: Bucket
):
    out = s3.url("packed/big")
    run = _start("pack", str(big_src), out, *BIG_JOB)
    # A shard recorded in the journal (a finished one whose result has not reached the parent
    # yet is removed on the way out: OUT keeps only what the journal vouches for).
    wait_for(lambda: _journaled(s3, "packed/big") >= 1 and _uploading(s3, "packed/big/"), 30)
    run.send_signal(signal.SIGINT)
    stderr = run.communicate(timeout=30)[1]
    assert run.returncode == 130, stderr
    assert "--resume" in _one_line(stderr)
    assert 1 <= _nothing_partial(s3, "packed/big", big_local) < BIG_SHARDS
    resumed = _cli("pack", str(big_src), out, *BIG_JOB, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert s3.uploads() == []
    same_output(out, big_local)


@pytest.mark.long  # the Ctrl-C of an upload is make test's
def test_worker_killed_mid_upload_leaves_nothing_partial_and_resume_completes(
    big_src, big_local, s3: Bucket
):
    out = s3.url("packed/big")
    run = _start("pack", str(big_src), out, *BIG_JOB)
    pids: list[int] = []

    def uploading() -> bool:  # a shard's multipart upload is open, and its workers are known
        pids[:] = worker_pids(run.pid)
        return bool(pids) and _uploading(s3, "packed/big/")

    wait_for(uploading, 30)
    os.kill(pids[0], signal.SIGKILL)
    stderr = run.communicate(timeout=60)[1]
    assert run.returncode == 2, stderr
    assert "worker died" in _one_line(stderr)
    _nothing_partial(s3, "packed/big", big_local)
    resumed = _cli("pack", str(big_src), out, *BIG_JOB, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert s3.uploads() == []
    same_output(out, big_local)


# make test's planted S3 locks (hostile/test_out) and a held local run show the refusal
@pytest.mark.long
def test_a_second_run_is_refused_while_the_first_holds_the_lock(src, local, s3: Bucket):
    out = s3.url("packed/flowers")
    first = _start("pack", str(src), out, *JOB)
    wait_for(lambda: bool(s3.keys("packed/flowers")), 30)  # the lock object comes first
    first.send_signal(signal.SIGSTOP)  # hold the first run mid-way, deterministically
    try:
        before = s3.keys("packed/flowers")
        second = _cli("pack", str(src), out, *JOB)
        after = s3.keys("packed/flowers")
    finally:
        first.send_signal(signal.SIGCONT)
    first.communicate(timeout=120)
    assert second.returncode == 2, second.stderr
    assert "another shardpack run" in _one_line(second.stderr)
    assert set(before) <= set(after)  # the refused run took away nothing, the lock included
    assert first.returncode == 0
    same_output(out, local)


@pytest.mark.long  # a dead run's lock on this host: tests/hostile/test_out.py plants one
def test_a_killed_run_leaves_uploads_that_resume_aborts(big_src, big_local, s3: Bucket):
    """SIGKILL of the run (the OOM killer): no cleanup runs, its workers die with it, their
    uploads stay open and so does the lock object. The next run on this host sees the lock's
    run is dead and takes it over; --resume aborts the uploads and completes."""
    out = s3.url("packed/big")
    run = _start("pack", str(big_src), out, *BIG_JOB)
    wait_for(lambda: _uploading(s3, "packed/big/") and len(worker_pids(run.pid)) == 2, 30)
    workers = worker_pids(run.pid)
    run.kill()
    run.wait(timeout=30)
    wait_for(lambda: gone(workers), 10)
    assert s3.uploads("packed/big/")  # nobody was left to abort them
    resumed = _cli("pack", str(big_src), out, *BIG_JOB, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert s3.uploads() == []
    same_output(out, big_local)


def test_a_lock_from_another_host_is_honoured_until_removed(src, local, s3: Bucket):
    """This host cannot tell whether a run elsewhere is alive: its lock holds until a person
    removes it, as the one-line refusal says."""
    out, lock = s3.url("packed/flowers"), "packed/flowers/.shardpack.lock"
    held = {"pid": 4242, "host": "another-host", "started": "2026-01-01T00:00:00Z", "token": "x"}
    s3.write(lock, json.dumps(held).encode())
    refused = _cli("pack", str(src), out, *JOB)
    assert refused.returncode == 2
    line = _one_line(refused.stderr)
    assert "another-host" in line and s3.url(lock) in line
    assert json.loads(s3.read(lock)) == held  # the refused run left it alone
    s3.fs.rm_file(f"{s3.name}/{lock}")
    again = _cli("pack", str(src), out, *JOB)
    assert again.returncode == 0, again.stderr
    same_output(out, local)


def test_a_dead_runs_lock_taken_over_by_two_runs_at_once_lets_one_in(s3: Bucket, monkeypatch):
    """Two runs on this host find a dead run's lock; one takes it over between the other's
    look at it and its own takeover. That removed the first's lock and created its own: both
    ran. Now the takeover replaces only the lock it looked at (If-Match): the second is
    refused, and the first's lock stays."""
    import socket

    from shardpack.errors import OutputError
    from shardpack.storage import remote

    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    dead = {"pid": gone.pid, "host": socket.gethostname(), "token": "dead", "started": "t"}
    s3.write("out/.shardpack.lock", json.dumps(dead).encode())
    first, looked = storage_at(s3.url("out")).lock(), remote._owner

    def raced(storage, key):
        owner = looked(storage, key)
        if owner == dead:  # (once: the other run looks with the real one)
            monkeypatch.setattr(remote, "_owner", looked)
            first.__enter__()  # the other run takes it over now
        return owner

    monkeypatch.setattr(remote, "_owner", raced)
    second = storage_at(s3.url("out")).lock()
    with pytest.raises(OutputError, match=r"another shardpack run \(pid \d+ on .*\) is writing"):
        second.__enter__()
    held = json.loads(s3.read("out/.shardpack.lock"))
    assert held["pid"] == os.getpid() and held["token"] != "dead"
    first.__exit__(None, None, None)
    assert s3.keys("out") == []  # released by the run that held it


def test_what_the_store_client_raises_is_one_line(src, local, s3: Bucket):
    """An unreachable endpoint, a malformed bucket name and an option the client does not take
    come out of botocore/s3fs as their own exceptions, not OSErrors: each is still one line,
    exit code 2, saying what to check."""
    out = s3.put_tree(local, "packed/flowers")
    closed = {**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1"}
    cases = [
        (["verify", out], closed, "the object store refused or could not be reached: Could not "
                                  "connect to the endpoint URL"),
        (["verify", "s3://bu cket/out"], None, "Invalid bucket name"),
        # botocore's ValueError, once read as a broken index ("rerun pack to rewrite it")
        (["verify", out], {**os.environ, "AWS_ENDPOINT_URL": "not a url"},
         "the object store refused or could not be reached: Invalid endpoint: not a url"),
        (["inspect", out, "--storage-option", "bogus_opt=1"], None,
         "a --storage-option is not one the filesystem takes"),
        (["pack", str(src), out + "2", "--storage-option", "bogus_opt=1"], None,
         "a --storage-option is not one the filesystem takes"),
    ]  # fmt: skip
    for args, env, said in cases:  # in this process where the environment is the test's
        run = _cli(*args) if env is None else _process(*args, env=env)
        assert run.returncode == 2, (args, run.stderr)
        assert said in _one_line(run.stderr), (args, run.stderr)


def test_a_switch_given_as_no_boolean_is_refused_naming_what_it_takes(local, s3: Bucket):
    """`--storage-option anon=maybe` stayed the string 'maybe', which s3fs takes as true: the
    run went anonymous (Forbidden, naming index.json). A filesystem's switch is true or false;
    an option whose value is a string by design is still passed as given."""
    out = s3.put_tree(local, "packed/flowers")
    for pair in ("anon=maybe", "use_ssl=1", "skip_instance_cache=yes"):
        run = _cli("verify", out, "--storage-option", pair)
        key = pair.partition("=")[0]
        assert run.returncode == 2, run.stderr
        assert _one_line(run.stderr) == (f"error: {out}: --storage-option {pair}: {key} is true or "
                                         f"false; pass {key}=true or {key}=false")  # fmt: skip
    for pair in ("anon=false", "anon=False", f"endpoint_url={s3.endpoint}"):
        run = _cli("verify", out, "--storage-option", pair)
        assert run.returncode == 0 and "OK: 3 shards" in run.stdout, (pair, run.stderr)


def test_s3fs_switches_its_signature_fsspec_and_aiobotocore_take_reach_it_as_bools():
    """The string 'False' (Python's spelling, or given in Python) was true to s3fs; a switch
    s3fs hands on to aiobotocore's session (include_builtin_handlers) went unchecked."""
    pairs = ["anon=False", "use_ssl=FALSE", "requester_pays=false", "use_listings_cache=False"]
    fs = storage_at("s3://bucket/x", parse_options(pairs)).fs
    assert (fs.anon, fs.use_ssl, fs.requester_pays, fs.req_kw) == (False, False, False, {})
    assert fs.dircache.use_listings_cache is False
    assert storage_at("s3://bucket/x", {"version_aware": "true"}).fs.version_aware is True
    with pytest.raises(StorageError) as refused:
        storage_at("s3://bucket/x", parse_options(["include_builtin_handlers=no"]))
    assert "include_builtin_handlers is true or false" in str(refused.value)


def test_a_bug_of_ours_under_fsspec_is_not_taken_for_the_store_s_answer():
    """What fsspec raises that is no OSError comes from what its caller passed: a traceback
    for us to see, not "the object store refused" sending the user after the endpoint."""
    import fsspec

    from shardpack.storage import store_failure

    memory = fsspec.filesystem("memory")
    for call in (lambda: memory.cat_file(None), lambda: memory.pipe_file("x", "text")):
        with pytest.raises(Exception) as caught:
            call()
        assert store_failure(caught.value) is None


def test_a_store_gone_down_mid_run_says_why_the_run_stopped(big_src, tmp_path, s3: Bucket):
    """The server dies while shards upload: the line names the shard that could not be written
    and the way on (--resume), and cleanup that fails against the dead store too is not shown
    in its place (a chain of tracebacks before)."""
    from tests.s3server import environment, start_server

    server, endpoint = start_server(tmp_path / "moto.log")
    env = {**os.environ, **environment(endpoint, tmp_path), "AWS_MAX_ATTEMPTS": "1"}
    try:
        import s3fs

        fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
        fs.mkdir("doomed")
        run = forkserver.start(forkserver.SHARDPACK, "pack", str(big_src), "s3://doomed/out",
                               *BIG_JOB, env=env)  # fmt: skip
        deadline = time.monotonic() + 60
        while not (fs.exists("doomed/out") and fs.ls("doomed/out", refresh=True)):  # started
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.05)
    finally:
        server.kill()
        server.wait()
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 2, stderr
    line = _one_line(stderr)
    assert "rerun with --resume" in line or "the object store refused" in line, line


def test_objects_are_stamped_from_their_folders_listings_and_hostile_values_are_none(s3):
    """stamps() gives each object's size and LastModified from one listing of its folder (a
    missing object, and one object asked alone, none); a listing's value out of range is no
    stamp, never an error."""
    import datetime

    from shardpack.storage.remote import _listed_stamp

    for key, data in (("src/a/x.jpg", b"12345"), ("src/a/y.jpg", b"1"), ("src/b/z.jpg", b"")):
        s3.write(key, data)
    store = storage_at(s3.url("src"))
    found = store.stamps(["a/x.jpg", "b/z.jpg", "a/missing.jpg", "a/y.jpg"])
    assert [stamp and stamp[0] for stamp in found] == [5, 0, None, 1]
    listed = s3.fs.ls(f"{s3.name}/src/a", detail=True, refresh=True)
    assert found[0][1] == int(listed[0]["LastModified"].timestamp()) * 10**9 + (
        listed[0]["LastModified"].microsecond * 1000)  # fmt: skip
    assert store.stamp("a/x.jpg") is None  # one object's would be a request of its own
    utc = datetime.timezone.utc
    good = {"name": "b/a.jpg", "type": "file", "size": 3, "mtime": 1.5}
    assert _listed_stamp(good) == ("a.jpg", (3, 1_500_000_000))
    far, naive = datetime.datetime(9999, 1, 1, tzinfo=utc), datetime.datetime(2020, 1, 1)
    for bad in ({"size": -1}, {"size": True}, {"size": 1 << 70}, {"type": "directory"},
                {"mtime": float("nan")}, {"mtime": 0}, {"mtime": 10.0**30}, {"mtime": "1"},
                {"LastModified": naive}, {"LastModified": far}, {"name": None},
                {"LastModified": datetime.datetime(1, 1, 1, tzinfo=utc)}):  # fmt: skip
        assert _listed_stamp({**good, **bad}) is None, bad


# What reads an object, in IAM's words (s3:GetObject covers a HEAD on AWS) and in moto's from
# 5.2.6, which names the action of a HEAD s3:HeadObject (and a listing s3:ListObjectsV2, which
# s3:List* covers, as it covers AWS's s3:ListBucket and s3:ListBucketMultipartUploads).
_READ = ["s3:GetObject", "s3:HeadObject"]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory) -> Iterator[dict]:
    """A moto server of its own on loopback that checks signatures and IAM policies (after its
    first 9 requests: the users below), a bucket `guarded`, and the environment of a process
    of each user: `admin` may do anything, `nodelete` get, put and list but not delete (a
    common guard), `listonly` list, and get the objects under `refused/` (what a SRC's
    checks ask for) but its JPEGs, tars and TFRecords."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    from tests.s3server import environment, start_server

    tmp = tmp_path_factory.mktemp("guarded")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "9")
        server, endpoint = start_server(tmp / "moto.log")
    try:
        env = {**os.environ, **environment(endpoint, tmp)}
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        users = {}
        for user, actions in (
            ("admin", ["*"]),
            ("nodelete", [*_READ, "s3:PutObject", "s3:List*"]),
            ("listonly", ["s3:List*"]),
        ):
            iam.create_user(UserName=user)
            statements = [{"Effect": "Allow", "Action": actions, "Resource": "*"}]
            if user == "listonly":
                statements += [
                    {"Effect": "Allow", "Action": _READ,
                     "Resource": "arn:aws:s3:::guarded/refused*"},
                    {"Effect": "Deny", "Action": _READ,
                     "Resource": [f"arn:aws:s3:::guarded/refused/*.{kind}"
                                  for kind in ("jpg", "tar", "tfrecord*")]},
                ]  # fmt: skip
            iam.put_user_policy(
                UserName=user,
                PolicyName="p",
                PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
            )
            made = iam.create_access_key(UserName=user)["AccessKey"]
            users[user] = {
                **env,
                "AWS_ACCESS_KEY_ID": made["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": made["SecretAccessKey"],
            }
        admin = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=users["admin"]["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=users["admin"]["AWS_SECRET_ACCESS_KEY"],
        )
        admin.create_bucket(Bucket="guarded")
        yield {**users, "client": admin}
    finally:
        server.terminate()
        server.wait(timeout=30)


def _put(guarded: dict, folder: Path, prefix: str) -> None:
    """Upload a local folder's files under prefix in the bucket `guarded`, as its admin."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key = f"{prefix}/{path.relative_to(folder).as_posix()}"
        guarded["client"].put_object(Bucket="guarded", Key=key, Body=path.read_bytes())


@pytest.mark.slow  # guarded's S3 server, as make test-fast skips the others'
def test_objects_the_store_refuses_to_delete_stop_an_overwrite_before_any_shard(
    src, local, guarded
):
    """S3's bulk delete answers 200 with the keys it refused in `Errors`, which s3fs drops. So
    an --overwrite by a user who may not delete went on as if the old index.json were gone,
    rewrote the shards under their names, and a run stopped before its new index left the old
    one listing changed shards (verify: FAULTs). The refusal now stops the run in one line
    before any object is written."""
    client = guarded["client"]

    def objects(prefix: str) -> dict[str, str]:
        listed = client.list_objects_v2(Bucket="guarded", Prefix=f"{prefix}/")
        return {o["Key"].split("/", 1)[1]: o["ETag"] for o in listed.get("Contents", ())}

    _put(guarded, local, "flowers")  # the admin's dataset: the local pack of the same job
    out, before = "s3://guarded/flowers", objects("flowers")
    again = _process(
        "pack", str(src), out, *JOB, "--seed", "1", "--overwrite", env=guarded["nodelete"]
    )
    assert again.returncode == 2
    assert _one_line(again.stderr).startswith(f"error: {out}/index.json: Access Denied")
    kept = {name: tag for name, tag in objects("flowers").items() if name[0] != "."}
    assert kept == {name: tag for name, tag in before.items() if name[0] != "."}  # nor index
    # a fresh pack deletes only names that are not there (TFDS's, refused too): its index
    # lands, and its lock, which the store will not delete, is named
    fresh = _process(
        "pack", str(src), f"{out}-2", *JOB, "--format", "parquet", env=guarded["nodelete"]
    )
    assert "its lock could not be removed (Access Denied)" in _one_line(fresh.stderr)
    assert "index.json" in objects("flowers-2")


@pytest.mark.slow
def test_a_src_the_credentials_cannot_read_is_one_plain_line(src, guarded):
    """Credentials the store refuses at SRC said "cannot read ([Errno None] Forbidden:
    's3://...')": the store's word alone now, and what to check."""
    url = "s3://guarded/raw"
    wrong = {**guarded["admin"], "AWS_SECRET_ACCESS_KEY": "wrong"}
    run = _process("pack", url, "s3://guarded/out", *JOB, env=wrong)
    assert run.returncode == 2
    assert _one_line(run.stderr) == (
        f"error: {url}: cannot read (Forbidden); check its permissions and the credentials"
    )


@pytest.mark.slow
def test_readers_the_credentials_cannot_read_name_the_credentials(local, guarded):
    """verify and iter_examples with a wrong secret said "Forbidden; check the path and its
    permissions": the likely cause, the credentials, went unsaid."""
    out = "s3://guarded/read"
    _put(guarded, local, "read")  # what a pack there writes (test_local_to_s3_...)
    wrong = {**guarded["admin"], "AWS_SECRET_ACCESS_KEY": "wrong"}
    said = f"{out}/index.json: Forbidden; check its permissions and the credentials"
    run = _process("verify", out, "--no-progress", env=wrong)
    assert run.returncode == 2
    assert _one_line(run.stderr) == f"error: {said}"
    code = "import shardpack, sys\nnext(shardpack.iter_examples(sys.argv[1]))"
    run = forkserver.run(code, out, timeout=120, env=wrong)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == f"shardpack.errors.FileAccessError: {said}"


@pytest.mark.slow
def test_a_src_whose_every_read_is_refused_says_to_check_the_credentials(src, guarded, tmp_path):
    """Credentials that may list SRC but read none of its objects ended "N items skipped (the
    first, ...: Access Denied ...); fix or remove them": the files were blamed."""
    url = "s3://guarded/refused"
    _put(guarded, src, "refused")
    run = _process("pack", url, str(tmp_path / "out"), *JOB, env=guarded["listonly"])
    assert run.returncode == 2
    assert _one_line(run.stderr) == (
        f"error: no image was packed from {url}: the store refused each of its 24 items (cannot "
        "read (Access Denied)); check the credentials, and that they may read its objects"
    )


@pytest.mark.slow
def test_tars_and_tfds_shards_the_store_refuses_are_named_with_the_credentials(guarded, tmp_path):
    """A WebDataset tar or a TFDS dataset's shard that the store lists but refuses to read
    ended "error: Access Denied; check its permissions and the credentials": no file named."""
    from shardpack import PackOptions, pack

    tars = write_tars(tmp_path / "tars", count=2)
    tfds = tmp_path / "tfds"  # our TFRecords, their TFDS metadata, and no index: a TFDS dir
    pack(make_tree(tmp_path / "src", {"a": 2}), tfds, PackOptions(workers=1, shards=1))
    (tfds / "index.json").unlink()
    for local, url in ((tars, "s3://guarded/refused/tars"), (tfds, "s3://guarded/refused/tfds")):
        _put(guarded, local, url[len("s3://guarded/") :])
        run = _process("pack", url, str(tmp_path / "out"), "--no-progress", env=guarded["listonly"])
        (shard,) = [p.name for p in local.iterdir() if p.suffix == ".tar" or ".tfrecord" in p.name]
        assert run.returncode == 2 and _one_line(run.stderr) == (
            f"error: {url}/{shard}: cannot read (Access Denied); check its permissions and the "
            "credentials"
        )
        assert not (tmp_path / "out").exists()
