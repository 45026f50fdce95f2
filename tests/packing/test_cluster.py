"""The same pack on a Dask cluster: a LocalCluster, and a scheduler and workers started as
separate processes on loopback; byte-identical to the local run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from shardpack.containers import CONTAINERS
from shardpack.options import PackOptions
from shardpack.packing.cluster import ClusterError
from shardpack.packing.packer import pack
from tests import forkserver
from tests.helpers import (
    cli,
    image,
    make_tree,
    needs,
    run_cli,
    same_output,
    shard_files,
    wait_for,
    write_image,
)

needs("distributed")  # imported by the tests: not at collection, on every worker
pytestmark = pytest.mark.slow  # a Dask cluster of its own processes
DASK = str(Path(sys.executable).with_name("dask"))


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, Path, PackOptions]:
    root = tmp_path_factory.mktemp("cluster")
    src = make_tree(root / "src", {"a": 20, "b": 20, "c": 20})
    local = root / "local"
    options = PackOptions(encode="jpeg", shards=6, workers=2)
    pack(src, local, options)
    return src, local, options


def _same(a: Path, b: Path) -> None:
    def index(out: Path) -> dict:
        doc = json.loads((out / "index.json").read_text())
        doc.pop("stats")
        return doc

    assert shard_files(a) == shard_files(b)
    assert index(a) == index(b)


def test_local_cluster_matches_local(job, tmp_path: Path, capfd):
    """A LocalCluster writes the local backend's bytes, with progress, leaving no probe file;
    and takes no fixed port: the scheduler's HTTP server took 8787 (dashboard_address=None
    means the default there), and a second run at once warned 'Port 8787 is already in use'.
    Held here, 8787 is not wanted (one cluster for both: each takes seconds to start)."""
    src, local, options = job
    out = tmp_path / "dask"
    seen = []
    with socket.socket() as held:
        try:
            held.bind(("127.0.0.1", 8787))
            held.listen()
        except OSError:
            pass  # something else holds it: the same test
        pack(src, out, replace(options, backend="dask"), progress=lambda done, _: seen.append(done))
    _same(out, local)
    assert seen[-1] == 60
    assert not list(out.glob(".probe-*"))
    assert "8787" not in capfd.readouterr().err


# Ctrl-C as a terminal sends it, to the whole process group; SIGTERM to the run alone
@pytest.mark.parametrize("stop", [
    "ctrl-c", pytest.param("sigterm", marks=pytest.mark.long),
])  # fmt: skip
def test_a_stopped_local_cluster_run_says_one_line(tmp_path: Path, stop: str):
    """Stopped mid-run, the workers' logs of the tasks cancelled ('distributed.worker.
    state_machine - WARNING - Async instruction for <Task cancelled ...> ended with
    CancelledError', one a task in flight) came under the line saying why the run stopped;
    and a Ctrl-C reached the workers too, each printing a KeyboardInterrupt traceback."""
    for i in range(240):
        write_image(tmp_path / "src" / f"c{i % 2}" / f"{i:04d}.jpg", image(i, 240, 320))
    out = tmp_path / "out"
    run = forkserver.start(forkserver.SHARDPACK, "pack", str(tmp_path / "src"), str(out),
                           "--backend", "dask", "--workers", "2", "--shards", "12", "--encode",
                           "png", "--no-progress", start_new_session=True)  # fmt: skip
    journal = out / ".shardpack.journal"
    wait_for(lambda: run.poll() is not None or (journal.exists() and len(
        journal.read_text().splitlines()) > 1))  # fmt: skip
    # shards in flight: the first of 12 just landed
    if stop == "ctrl-c":
        os.killpg(run.pid, signal.SIGINT)
    else:
        run.send_signal(signal.SIGTERM)
    stderr = run.communicate(timeout=120)[1]
    assert run.returncode == (130 if stop == "ctrl-c" else 143), stderr
    said = "interrupted" if stop == "ctrl-c" else "terminated"
    assert stderr.strip().splitlines() == [f"{said}: no index written; rerun with --resume to "
                                           "continue"], stderr  # fmt: skip


def test_a_bad_image_on_a_local_cluster_is_one_line(tmp_path: Path):
    """--on-error fail: the worker's log of the task's failure ('distributed.worker - ERROR -
    Compute Failed', the task's traceback) came above the line naming the image."""
    src = make_tree(tmp_path / "src", {"a": 3, "b": 3})
    (src / "a" / "img_001.jpg").write_bytes(b"\xff\xd8\xff")
    run = forkserver.start(forkserver.SHARDPACK, "pack", str(src), str(tmp_path / "out"),
                           "--backend", "dask", "--workers", "1", "--on-error", "fail",
                           "--no-progress")  # fmt: skip
    stderr = run.communicate(timeout=120)[1]
    assert run.returncode == 2, stderr
    (line,) = stderr.splitlines()
    assert line.startswith("error: a/img_001.jpg: ") and "--on-error skip" in line, line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _cluster(*worker_args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """A scheduler (its settings from `env`: DASK_... variables) and `dask worker *worker_args`
    as processes of their own on loopback; yields the scheduler's address once its first
    worker joined."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], stderr=subprocess.DEVNULL,
                              env={**os.environ, **(env or {})})]  # fmt: skip
    # the nannies fork their workers (a worker spawned is a fresh interpreter importing Dask:
    # ~1 s of CPU each start, restarts included); shardpack is first imported in the worker
    forked = {**os.environ, "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD": "fork"}
    procs.append(subprocess.Popen([DASK, "worker", address, "--nthreads", "1", "--no-dashboard",
                                   *worker_args], stderr=subprocess.DEVNULL,
                                  env=forked))  # fmt: skip
    from distributed import Client

    try:
        with Client(address, timeout="30s") as client:
            client.wait_for_workers(1, timeout=60)
        yield address
    finally:
        for proc in reversed(procs):  # the workers first, while the scheduler hears them go
            proc.terminate()
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def scheduler():
    """A scheduler and two workers (nannies: a killed worker is restarted) for this module."""
    with _cluster("--nworkers", "2") as address:
        from distributed import Client

        with Client(address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
        yield address


# The default container in `make test`; every other one, on the same cluster, in test-long.
@pytest.mark.parametrize("fmt", [
    fmt if fmt == PackOptions().format else pytest.param(fmt, marks=pytest.mark.long)
    for fmt in sorted(CONTAINERS)
])  # fmt: skip
def test_separate_scheduler_and_workers_match_local(job, scheduler: str, tmp_path: Path, fmt):
    """Each container, on one cluster: the Dask backend writes the local backend's bytes."""
    src, local, options = job
    reference = local if fmt == options.format else tmp_path / f"local-{fmt}"
    if fmt != options.format:
        pack(src, reference, replace(options, format=fmt))
    out = tmp_path / fmt
    result = cli("pack", str(src), str(out), "--encode", "jpeg", "--shards", "6", "--workers", "2",
                 "--backend", "dask", "--scheduler", scheduler, "--format", fmt, "--no-progress",
                 timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    _same(out, reference)


@contextmanager
def _workers_without_disk(hidden: Path, nworkers: int = 1) -> Iterator[str]:
    """A scheduler, and `dask worker` processes in a mount namespace of their own where an
    empty tmpfs covers `hidden`: a cluster that shares no disk with the client. Yields the
    scheduler's address; skips where this machine does not allow it."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to give a worker storage of its own")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                  "--no-dashboard"], stderr=subprocess.DEVNULL)  # fmt: skip
    isolated = (f"mount -t tmpfs none {hidden} && exec {DASK} worker {address} "
                f"--nworkers {nworkers} --nthreads 1 --no-dashboard")  # fmt: skip
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", isolated]
    worker = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    try:
        from distributed import Client

        with Client(address, timeout="30s") as client:
            deadline = time.monotonic() + 60
            while len(client.scheduler_info()["workers"]) < nworkers:
                if worker.poll() is not None:
                    pytest.skip("this machine does not allow mount namespaces")
                assert time.monotonic() < deadline, "the workers did not join"
                time.sleep(0.1)
        yield address
    finally:
        worker.terminate()  # first, while the scheduler hears it go
        worker.wait(timeout=30)
        scheduler.terminate()
        scheduler.wait(timeout=30)


# make test: hostile/test_out's worker with a disk of its own is refused, its probe removed
@pytest.mark.long
def test_workers_that_do_not_share_out_are_refused(job, tmp_path: Path):
    src, _, options = job
    out = tmp_path / "private"
    out.mkdir()
    # The worker sees an empty tmpfs where OUT is: the mistake of a cluster without shared disk.
    refused = pytest.raises(ClusterError, match="storage every Dask worker shares")
    with _workers_without_disk(out) as address, refused:
        pack(src, out, replace(options, backend="dask", scheduler=address))
    assert not (out / "index.json").exists()


@pytest.mark.long  # make test shows a cluster without the client's disk refused
def test_workers_without_the_clients_disk_pack_s3_to_s3(job, s3, tmp_path_factory):
    """SRC and OUT in a bucket: workers that see none of the client's files read the source
    and write the shards through the store, byte-identical to the local run."""
    src, local, _ = job
    source, out = s3.put_tree(src, "raw/src"), s3.url("packed/src")
    with _workers_without_disk(tmp_path_factory.getbasetemp(), nworkers=2) as address:
        run = subprocess.run(
            [sys.executable, "-m", "shardpack", "pack", source, out, "--encode",
             "jpeg", "--shards", "6", "--workers", "2", "--backend", "dask", "--scheduler",
             address, "--no-progress"], capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    same_output(out, local)


def test_a_worker_killed_mid_shard_is_retried_and_output_is_intact(scheduler, tmp_path: Path):
    """On Dask a lost worker's task runs again elsewhere: the run completes, byte-identical."""
    import signal

    from distributed import Client

    from tests.helpers import image, write_image

    src = tmp_path / "src"
    for i in range(240):
        write_image(src / f"c{i % 3}" / f"{i:04d}.jpg", image(i, height=120, width=160))
    args = ["--encode", "png", "--shards", "8", "--workers", "2", "--no-progress"]
    local = tmp_path / "local"
    reference = run_cli("pack", str(src), str(local), *args)
    assert reference.returncode == 0, reference.stderr
    with Client(scheduler, timeout="30s") as client:
        pids = sorted(client.run(os.getpid).values())
    out = tmp_path / "dask"
    run = forkserver.start(forkserver.SHARDPACK, "pack", str(src), str(out), *args, "--backend",
                           "dask", "--scheduler", scheduler)  # fmt: skip
    journal = out / ".shardpack.journal"
    deadline = time.monotonic() + 120
    while not (journal.exists() and len(journal.read_text().splitlines()) >= 2):
        assert time.monotonic() < deadline and run.poll() is None
        time.sleep(0.01)
    os.kill(pids[0], signal.SIGKILL)
    stderr = run.communicate(timeout=300)[1]
    assert run.returncode == 0, stderr
    _same(out, local)
    assert not [p.name for p in out.iterdir() if p.name.endswith((".partial", ".progress"))]


@pytest.mark.parametrize(
    "address", ["notaurl", "127.0.0.1:8786x", "127.0.0.1:99999", "ucx://127.0.0.1:1", "tls://h:1"]
)
def test_a_malformed_scheduler_address_is_one_line(address, tmp_path: Path):
    src = make_tree(tmp_path / "src", {"a": 2})
    run = run_cli("pack", str(src), str(tmp_path / "o"), "--backend", "dask", "--scheduler",
                  address, "--no-progress")  # fmt: skip
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    (line,) = run.stderr.splitlines()
    assert f"--scheduler {address}: not an address" in line and "HOST:PORT" in line


def _stopped(src: Path, out: Path, options: PackOptions, victim: int, expected: type) -> str:
    """What pack(src, out, options) raised, `expected`, the pid `victim` SIGKILLed as its first
    shard landed; no partial file left."""
    import threading

    journal = out / ".shardpack.journal"

    def kill_after_the_first_shard() -> None:
        wait_for(lambda: journal.exists() and len(journal.read_text().splitlines()) >= 2)
        os.kill(victim, signal.SIGKILL)

    threading.Thread(target=kill_after_the_first_shard, daemon=True).start()
    with pytest.raises(expected) as stop:
        pack(src, out, options)
    assert not [p.name for p in out.iterdir() if p.name.startswith(".") and "partial" in p.name]
    return str(stop.value)


@pytest.fixture
def slow_src(tmp_path: Path) -> Path:
    """120 photo-sized images: a PNG shard of 20 takes a worker a while."""
    src = tmp_path / "src"
    for i in range(120):
        write_image(src / f"c{i % 2}" / f"{i:04d}.jpg", image(i, 240, 320))
    return src


def test_a_shard_whose_workers_all_died_is_one_line_not_a_hang(slow_src: Path, tmp_path: Path):
    """A task the scheduler gave up on (its workers died: here the first, allowed-failures 0)
    hung joblib's dask backend for ever (a KilledWorker never reached its callback); and on a
    cluster of one thread joblib ran every shard in the client itself (n_jobs=1), so that the
    kill changed nothing."""
    from distributed import Client

    from shardpack.errors import WorkerDiedError

    with _cluster(env={"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}) as address:
        with Client(address, timeout="30s") as client:
            (worker,) = client.run(os.getpid).values()
        options = PackOptions(encode="png", shards=6, backend="dask", scheduler=address)
        said = _stopped(slow_src, tmp_path / "out", options, worker, WorkerDiedError)
    assert said.startswith(f"{address}: every Dask worker that ran {slow_src.name}-train.") and (
        "resume=True" in said
    ), said


@pytest.mark.long  # make test shows a shard whose workers all died said in one line
def test_a_cluster_left_without_workers_is_one_line(slow_src: Path, tmp_path: Path, monkeypatch):
    """Its only worker killed mid-run (no nanny to start it again): the scheduler holds the
    tasks until a worker comes; the run waits WAIT_FOR_WORKERS_S for one, then says so."""
    from distributed import Client

    from shardpack.packing import cluster

    monkeypatch.setattr(cluster, "WAIT_FOR_WORKERS_S", 0.5)
    with _cluster("--no-nanny") as address:
        with Client(address, timeout="30s") as client:
            (worker,) = client.run(os.getpid).values()
        options = PackOptions(encode="png", shards=6, backend="dask", scheduler=address)
        said = _stopped(slow_src, tmp_path / "out", options, worker, ClusterError)
    assert said.startswith(
        f"{address}: the Dask cluster lost every worker, and none came back "
        "in 0.5 s; start workers, then rerun with"
    ) and ("resume=True" in said), said


@pytest.mark.long  # seconds of waiting: the client tries to reconnect for 10 s
def test_a_lost_scheduler_is_one_line(slow_src: Path, tmp_path: Path):
    """It was a FutureCancelledError traceback, exit code 1."""
    from distributed import Client

    with _cluster() as address:
        with Client(address, timeout="30s") as client:
            scheduler = client.run_on_scheduler(os.getpid)
        options = PackOptions(encode="png", shards=6, backend="dask", scheduler=address)
        said = _stopped(slow_src, tmp_path / "out", options, scheduler, ClusterError)
    assert said.startswith(f"{address}: the Dask cluster lost its scheduler writing ") and (
        "resume=True" in said
    ), said


def test_a_scheduler_without_workers_is_one_line(tmp_path: Path, monkeypatch):
    """joblib waited 10 s, then its TimeoutError ('... increase the joblib/dask connection
    timeout with:\\n\\nparallel_config(...)') was said as an OSError: '; check the path'."""
    from distributed import LocalCluster

    from shardpack.packing import cluster

    monkeypatch.setattr(cluster, "WAIT_FOR_WORKERS_S", 0.5, raising=False)
    src = make_tree(tmp_path / "src", {"a": 2})
    empty = LocalCluster(
        n_workers=0,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    )
    with empty, pytest.raises(ClusterError) as refused:
        pack(src, tmp_path / "out", PackOptions(backend="dask", scheduler=empty.scheduler_address))
    assert str(refused.value).startswith(f"{empty.scheduler_address}: the Dask scheduler has no "
                                         "workers (waited 0.5 s); start them")  # fmt: skip
    assert not (tmp_path / "out" / "index.json").exists()


@pytest.mark.long  # the S3 server
def test_workers_without_the_stores_credentials_are_named(job, scheduler, s3):
    """The module's workers began before this test gave the store's settings to its process:
    they have no credentials. botocore's NoCredentialsError is no OSError: it left the probe as
    if this process had failed ('the object store refused or could not be reached: Unable to
    locate credentials'), which had them."""
    src, _, options = job
    source, out = s3.put_tree(src, "raw/src"), s3.url("packed/src")
    with pytest.raises(ClusterError) as refused:
        pack(source, out, replace(options, backend="dask", scheduler=scheduler))
    said = str(refused.value)
    assert f"every Dask worker shares (the cluster at {scheduler}): " in said, said
    assert f"cannot reach {source}/" in said and said.endswith("same credentials and endpoint")
