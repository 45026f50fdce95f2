"""What shardpack withstands on the OUT side: links, FIFOs and crafted journals planted in OUT.

Each test builds the hostile file for real and checks that nothing outside OUT is touched, that
the user's files in OUT survive, that nothing hangs, and that the run ends in success or one
line on stderr (exit 2), never a traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time
from contextlib import suppress
from dataclasses import replace
from pathlib import Path

import pytest

from shardpack import PackOptions, pack
from shardpack.containers import get_container
from shardpack.containers.tfrecord import TFRecordWriter
from shardpack.errors import ImageError, OutputError
from shardpack.packing.cluster import ClusterError, dask_client
from shardpack.read.verify import verify
from shardpack.storage.atomic import write_atomic
from tests.helpers import (
    PEAK_KIB,
    cli,
    image,
    make_tree,
    run_cli,
    shard_files,
    wait_for,
    write_image,
    write_jsonl,
)

shard_name = get_container("tfrecord").shard_name

VICTIM_TEXT = "the user's file outside OUT\n"
SHARDS = ["src-train.tfrecord-00000-of-00002", "src-train.tfrecord-00001-of-00002"]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "src", {"cat": 5, "dog": 4})


@pytest.fixture(scope="module")
def slow_src(tmp_path_factory) -> Path:
    """Photos large enough that re-encoding them to PNG takes a second: the progress poller
    (every 0.2 s) runs while most shards are still to be written. Read, never changed."""
    root = tmp_path_factory.mktemp("slow") / "slow"
    for i in range(48):
        write_image(root / ("cat", "dog")[i % 2] / f"{i:03d}.jpg", image(i, 480, 640))
    return root


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "victim.txt"
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    return path


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, "--no-progress")


def _process(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The run in a child of its own: one that could hang, or reaches a server."""
    return cli(*args, "--no-progress", timeout=timeout)


def _one_line_error(run: subprocess.CompletedProcess, *words: str) -> None:
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "Traceback" not in run.stderr and all(w in lines[0] for w in words), lines[0]


# ---- links planted in OUT never make pack write outside it ---------------------------------


@pytest.mark.parametrize("planted", [".shardpack.lock", ".shardpack.journal"])
def test_a_lock_or_journal_linked_outside_out_is_refused(src, victim, tmp_path, planted):
    out = tmp_path / "out"
    out.mkdir()
    (out / planted).symlink_to(victim)
    run = _cli("pack", str(src), str(out), "--workers", "1")
    _one_line_error(run, planted, "remove it")
    assert victim.read_text() == VICTIM_TEXT
    assert (out / planted).is_symlink()  # the user's link is left as it was


def test_a_lock_hard_linked_to_a_file_outside_out_is_refused(src, victim, tmp_path):
    """A hard link is a plain file to every check of links: the pid was written into the file
    outside OUT it shares, and the file was removed at the end."""
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / ".shardpack.lock")
    run = _cli("pack", str(src), str(out), "--workers", "1")
    _one_line_error(run, ".shardpack.lock", "hard link", "remove it")
    assert victim.read_text() == VICTIM_TEXT and (out / ".shardpack.lock").exists()


def test_temp_names_planted_before_the_writes_are_never_written_through(src, victim, tmp_path):
    """Links under every temporary name pack once used, planted once the shards are done and
    before the metadata, idx files and index.json are written (the progress callback's last
    call comes exactly then)."""
    out = tmp_path / "out"
    plants = [".index.json.partial", ".dataset_info.json.partial", ".features.json.partial",
              ".label.labels.txt.partial", ".shardpack.journal.partial",
              *(f"idx/.{s}.idx.partial" for s in SHARDS)]  # fmt: skip

    def plant(done: int, total: int) -> None:
        if done == total and not (out / plants[0]).is_symlink():
            (out / "idx").mkdir(exist_ok=True)
            for name in plants:
                (out / name).symlink_to(victim)

    result = pack(src, out, PackOptions(workers=1, shards=2, index_files=True), progress=plant)
    assert result.num_records == 9 and victim.read_text() == VICTIM_TEXT
    for shard in SHARDS:
        assert not (out / "idx" / f"{shard}.idx").is_symlink()
        assert (out / "idx" / f"{shard}.idx").read_text().count("\n") > 0
    assert all((out / name).is_symlink() for name in plants)  # not ours: left alone
    assert verify(out).ok


@pytest.mark.parametrize("kind", ["partial", "progress"])
def test_a_shard_temp_name_planted_mid_run_is_never_written_through(
    slow_src, victim, tmp_path, kind
):
    """Each shard's old fixed temp names, linked to a file outside OUT while the run goes."""
    out = tmp_path / "out"
    options = PackOptions(workers=1, shards=24, encode="png")
    names = [shard_name("slow", "train", i, 24) for i in range(24)]
    calls = []

    def plant(done: int, total: int) -> None:
        calls.append(done)
        for name in names:
            if not (out / name).exists():
                with suppress(FileExistsError):  # planted already, or the run's own file
                    (out / f".{name}.{kind}").symlink_to(victim)

    pack(slow_src, out, options, progress=plant)
    assert calls[0] < calls[-1]  # planted while shards were still to come
    assert victim.read_text() == VICTIM_TEXT
    assert verify(out).ok


def test_writers_never_open_a_planted_temp_name(victim, tmp_path):
    """The two writers, with a link planted at the temporary name they used to write under."""
    for final in ("a.json", "a.tfrecord"):
        (tmp_path / f".{final}.partial").symlink_to(victim)
    write_atomic(str(tmp_path / "a.json"), b"{}")
    with TFRecordWriter(tmp_path / "a.tfrecord") as writer:
        writer.write(b"record")
    assert victim.read_text() == VICTIM_TEXT
    assert (tmp_path / "a.json").read_bytes() == b"{}" and writer.result[0] == 1


def test_an_idx_folder_linked_outside_out_is_refused(src, tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir()
    (out / "idx").symlink_to(elsewhere)
    run = _cli("pack", str(src), str(out), "--workers", "1", "--shards", "2", "--index-files")
    _one_line_error(run, "idx", "is a link", "remove it")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("scheme", ["", "file://", "local://"])
def test_links_planted_in_out_as_a_local_url_are_never_written_through(
    src, victim, tmp_path, scheme
):
    """OUT as local:// (fsspec's name for this disk) or file:// keeps every protection of a
    plain path: a link at a shard name (--resume) or at features.json (--overwrite)."""
    out = tmp_path / "out"
    assert _cli("pack", str(src), str(out), "--workers", "1", "--shards", "2").returncode == 0
    for planted, again in ((SHARDS[0], "--resume"), ("features.json", "--overwrite")):
        (out / planted).unlink()
        (out / planted).symlink_to(victim)
        run = _cli("pack", str(src), f"{scheme}{out}", "--workers", "1", "--shards", "2", again)
        assert "Traceback" not in run.stderr and run.returncode in (0, 2), run.stderr
        assert victim.read_bytes() == VICTIM_TEXT.encode(), (planted, again)
        if run.returncode == 0:  # the link was replaced by the file, not written through
            assert not (out / planted).is_symlink() and verify(out).ok
        else:
            _one_line_error(run, planted)
            (out / planted).unlink()


# ---- --resume keeps only shards of the very same plan --------------------------------------


def test_overwrite_resume_never_reuses_another_datasets_shards(tmp_path):
    a = make_tree(tmp_path / "a" / "ds", {"cat": 4, "dog": 4}, seed=0)
    b = make_tree(tmp_path / "b" / "ds", {"bird": 4, "fish": 4}, seed=50)
    out, clean = tmp_path / "out", tmp_path / "clean"
    pack(a, out, PackOptions(workers=1, shards=2))
    pack(b, out, PackOptions(workers=1, shards=2, overwrite=True, resume=True))
    pack(b, clean, PackOptions(workers=1, shards=2))
    assert shard_files(out) == shard_files(clean)  # B's records, not A's under B's index
    assert verify(out).ok


# ---- a crafted or corrupt journal removes nothing that is not a shard ----------------------


def _entry(file: object, digest_source: dict) -> dict:
    return {**digest_source, "file": file}


def test_a_crafted_journal_removes_only_regular_shard_files(src, victim, tmp_path):
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, shards=2, index_files=True))
    lines = (out / ".shardpack.journal").read_text().splitlines()
    header, good = json.loads(lines[0]), json.loads(lines[1])
    (out / "notes.txt").write_text("mine")
    linked = "other-train.tfrecord-00000-of-00001"
    (out / linked).symlink_to(victim)
    crafted = [header] + [_entry(f, good) for f in
                          ("notes.txt", "index.json", "idx", 5, None, ["x"], linked,
                           "../elsewhere/victim.txt", str(victim))]  # fmt: skip
    crafted.append({"file": 7})
    (out / ".shardpack.journal").write_text("".join(json.dumps(e) + "\n" for e in crafted))
    for extra in (["--resume"], ["--overwrite"], ["--overwrite", "--resume"]):
        run = _cli("pack", str(src), str(out), "--workers", "1", "--shards", "2",
                   "--index-files", *extra)  # fmt: skip
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
        assert (out / "notes.txt").read_text() == "mine"
        assert (out / linked).is_symlink() and victim.read_text() == VICTIM_TEXT
        assert (out / "idx").is_dir() and (out / "index.json").is_file()
        assert verify(out).ok


def test_a_users_file_under_a_wids_list_name_is_a_clash(src, tmp_path):
    """A folder shardpack did not write: the split file pack would write is the user's."""
    out, theirs = tmp_path / "out", "src-train.shardindex.json"
    out.mkdir()
    (out / theirs).write_text("mine")
    wds = PackOptions(workers=1, shards=2, format="webdataset")
    with pytest.raises(OutputError, match=rf"{re.escape(theirs)}: exists and was not written by "
                       r"shardpack \(1 such file\); choose an empty folder"):  # fmt: skip
        pack(src, out, wds)
    assert sorted(p.name for p in out.iterdir()) == [theirs]
    assert (out / theirs).read_text() == "mine"
    pack(src, out, replace(wds, overwrite=True))  # replaced, as asked
    assert json.loads((out / theirs).read_text())["name"] == "src-train"


def test_a_crafted_index_removes_no_wids_list_outside_out(src, victim, tmp_path):
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, shards=2, format="webdataset"))
    outside = victim.parent / "v-train.shardindex.json"  # what the name below implies
    outside.write_text(VICTIM_TEXT)
    index = json.loads((out / "index.json").read_text())
    (out / "index.json").write_text(json.dumps({**index, "name": str(victim.parent / "v")}))
    pack(src, out, PackOptions(workers=1, shards=2, overwrite=True))
    assert outside.read_text() == VICTIM_TEXT


@pytest.mark.parametrize("journal", ["folder", "fifo", "binary"])
def test_a_journal_that_is_not_a_file_is_one_line(src, tmp_path, journal):
    out = tmp_path / "out"
    out.mkdir()
    path = out / ".shardpack.journal"
    if journal == "folder":
        path.mkdir()
    elif journal == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(b"\xff\xfe\x00garbage\n" * 10)
    args = ("pack", str(src), str(out), "--workers", "1")
    # a FIFO could hold the run: in a child of its own, with a time limit
    run = _process(*args, timeout=60) if journal == "fifo" else _cli(*args)
    if journal == "binary":  # no record in it: ignored, and replaced by this run's journal
        assert run.returncode == 0 and not run.stderr, run.stderr
    else:
        _one_line_error(run, ".shardpack.journal", "remove it")
    assert path.exists()


# ---- an S3 OUT: objects planted under the journal folder and at the lock --------------------


def test_a_folder_marker_in_the_s3_journal_folder_is_ignored(src, s3):
    """The zero-byte object that sync tools and the S3 console create for a folder."""
    out = s3.url("out")
    job = ("--workers", "1", "--shards", "2")
    assert _cli("pack", str(src), out, *job).returncode == 0
    s3.write("out/.shardpack.journal.d/", b"")
    for again in ("--resume", "--overwrite", "--resume"):
        run = _cli("pack", str(src), out, *job, again)
        assert run.returncode == 0, run.stderr
    assert verify(out).ok


def test_a_planted_s3_journal_is_capped_from_its_listing_before_any_fetch(s3, monkeypatch):
    from shardpack.storage import remote, storage_at

    monkeypatch.setattr(remote, "_MOST_RECORDS", 10)  # 100,000 objects would take minutes
    folder = "out/.shardpack.journal.d"
    s3.write(f"{folder}/head.json", b'{"plan_digest": "x"}\n')
    for i in range(1, 31):
        s3.write(f"{folder}/{i:08d}.json", b"{}\n")
    assert len(list(storage_at(s3.url("out")).read_journal(1 << 20, 100))) == 11
    wanted = [f"{folder}/head.json", *(f"{folder}/{i:08d}.json" for i in range(1, 11))]
    assert sorted(s3.fetched(folder)) == sorted(wanted)


def test_a_planted_s3_journal_flood_is_listed_once_and_its_records_left_unread(src, s3):
    from shardpack.packing import outdir

    """A flood of journal objects in an S3 OUT that holds no shard: a record vouches for a
    shard file in OUT, so at most a few are fetched (each cost a request: 3,000 planted ones
    made a pack 8x slower), and the folder is listed once, not again to replace the journal."""
    folder = "out/.shardpack.journal.d"
    s3.write(f"{folder}/head.json", b'{"plan_digest": "x"}\n')
    for i in range(1, 2 * (1 + outdir._JOURNAL_SLACK) + 1):  # twice what may be fetched
        s3.write(f"{folder}/{i:08d}.json", b'{"file": "x"}\n')
    before = len(s3.log.read_text(errors="replace").splitlines())
    run = _process("pack", str(src), s3.url("out"), "--workers", "1", "--overwrite")
    assert run.returncode == 0, run.stderr
    fetched = s3.fetched(folder)
    # fetched at once, in any order: the head and a few records at most
    assert f"{folder}/head.json" in fetched and len(fetched) <= 1 + outdir._JOURNAL_SLACK
    requests = s3.log.read_text(errors="replace").splitlines()[before:]
    listings = [line for line in requests if f"GET /{s3.name}?" in line and
                "shardpack.journal.d" in line.replace("%2F", "/").replace("%2E", ".")]  # fmt: skip
    assert len(listings) == 1, listings
    assert all(s3.read(f"{folder}/{key}") != b'{"file": "x"}\n' for key in s3.keys(folder))


@pytest.mark.parametrize("pid", [pytest.param(2**70, marks=pytest.mark.long), -1])
def test_a_planted_s3_lock_naming_this_host_and_an_impossible_pid_is_one_line(src, s3, pid):
    lock = {"pid": pid, "host": socket.gethostname(), "token": "x", "started": "t"}
    s3.write("out/.shardpack.lock", json.dumps(lock).encode())
    run = _process("pack", str(src), s3.url("out"), "--workers", "1")
    _one_line_error(run, "another shardpack run", ".shardpack.lock")


@pytest.mark.long  # make test shows a killed upload leaving nothing (tests/storage/test_remote.py)
def test_array_record_into_s3_killed_leaves_no_spool_file(slow_src, s3, tmp_path):
    """Each ArrayRecord shard is spooled to a local file the library writes by path, then
    uploaded: a SIGKILLed run (the OOM killer, a lost node) must leave none of them behind."""
    spool = tmp_path / "tmp"
    spool.mkdir()
    command = [
        sys.executable,
        "-m",
        "shardpack",
        "pack",
        str(slow_src),
        s3.url("out"),
        "--format",
        "array_record",
        "--workers",
        "2",
        "--shards",
        "4",
        "--no-progress",
    ]
    run = subprocess.Popen(command, env={**os.environ, "TMPDIR": str(spool)},
                           start_new_session=True, stderr=subprocess.PIPE)  # fmt: skip
    try:  # until a spool file shows, or a shard is uploaded (the others then being spooled)
        wait_for(lambda: any(spool.iterdir()) or any("array_record" in k for k in s3.keys("out")))
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.communicate()
    assert [p.name for p in spool.rglob("*") if "shardpack" in p.name] == []


# ---- a FIFO among the progress files does not hang pack ------------------------------------


def test_progress_fifos_do_not_hang_pack(slow_src, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    first = shard_name("slow", "train", 0, 2)
    for name in (".evil.progress", f".{first}.progress", f".{first}.0123456789abcdef.progress"):
        os.mkfifo(out / name)
    script = textwrap.dedent(f"""
        from shardpack import PackOptions, pack
        pack({str(slow_src)!r}, {str(out)!r}, PackOptions(workers=1, shards=2, encode="png"),
             progress=lambda done, total: print(done, flush=True))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.split()) > 1  # the poller ran while the shards were written
    assert (out / ".evil.progress").exists() and (out / "index.json").exists()


# ---- a failed run leaves OUT as it found it; a finished one leaves no lock -----------------


def test_a_finished_run_leaves_only_its_outputs_and_the_journal(src, tmp_path):
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, shards=2))
    hidden = {p.name for p in out.iterdir() if p.name.startswith(".")} - {".shardpack.stamps"}
    assert hidden == {".shardpack.journal"}


def test_a_run_failing_before_any_shard_leaves_out_as_it_was(src, tmp_path):
    (src / "cat" / "broken.jpg").write_bytes(b"\xff\xd8 not really")
    fresh, empty = tmp_path / "fresh", tmp_path / "empty"
    empty.mkdir()
    for out in (fresh, empty):
        with pytest.raises(ImageError):
            pack(src, out, PackOptions(workers=1, shards=1, on_error="fail"))
    assert not fresh.exists()  # created by the run: taken back
    assert list(empty.iterdir()) == []  # the user's: no journal, no lock left in it


def test_an_unreachable_scheduler_leaves_out_as_it_was(src, tmp_path):
    pytest.importorskip("distributed")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    run = _process("pack", str(src), str(out), "--backend", "dask", "--scheduler",
                   f"tcp://127.0.0.1:{port}")  # fmt: skip
    _one_line_error(run, "cannot reach the Dask scheduler")
    # the way on, not only what failed
    assert run.stderr.strip().endswith(
        "check the address and that a scheduler runs there "
        "(dask scheduler), or drop --scheduler for a local cluster"
    )
    assert not out.exists()


# ---- one shard-name pattern for every count -------------------------------------------------


def test_verify_notices_an_extra_shard_past_99999(src, tmp_path):
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, shards=2))
    extra = shard_name("src", "train", 100000, 100001)
    (out / extra).write_bytes(b"")
    assert [f.file for f in verify(out).faults] == [extra]


def test_stale_temp_files_go_but_a_users_hidden_files_stay(src, tmp_path):
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, shards=2))
    stale = out / f".{SHARDS[0]}.00112233445566ff.partial"  # a killed run's, by its pattern
    stale.write_bytes(b"half a shard")
    mine = [out / ".notes.partial", out / f".{SHARDS[1]}.partial.bak"]
    for path in mine:
        path.write_text("mine")
    pack(src, out, PackOptions(workers=1, shards=2, overwrite=True))
    assert not stale.exists() and all(p.read_text() == "mine" for p in mine)


def test_a_users_file_at_the_lock_name_is_not_removed_by_a_refused_run(src, tmp_path):
    """A folder holding someone's data is refused before the lock could be mistaken for ours."""
    out = tmp_path / "out"
    out.mkdir()
    (out / SHARDS[0]).write_text("theirs")
    with pytest.raises(OutputError):
        pack(src, out, PackOptions(workers=1, shards=2))
    assert sorted(p.name for p in out.iterdir()) == [SHARDS[0]]


# ---- a Dask cluster: probe files never stay behind; the local cluster is loopback only -----


@pytest.mark.slow
def test_a_refused_dask_probe_leaves_no_probe_file_on_the_workers_storage(src, tmp_path):
    """A worker whose OUT is another real folder (bind-mounted in its own mount namespace):
    the run is refused, and the probe it wrote there is removed by that worker."""
    pytest.importorskip("distributed")
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to give a worker storage of its own")
    out, theirs = tmp_path / "out", tmp_path / "worker-disk"
    out.mkdir()
    theirs.mkdir()
    dask = str(Path(sys.executable).with_name("dask"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    scheduler = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port",
                                  address.rsplit(":", 1)[1], "--no-dashboard"],
                                 stderr=subprocess.DEVNULL)  # fmt: skip
    isolated = f"mount --bind {theirs} {out} && exec {dask} worker {address} --no-dashboard"
    # its nanny forks the worker, not a fresh interpreter (~1 s of CPU; test_cluster's too)
    forked = {**os.environ, "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD": "fork"}
    worker = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               isolated], stderr=subprocess.DEVNULL, env=forked)  # fmt: skip
    try:
        from distributed import Client

        with Client(address, timeout="30s") as client:
            client.wait_for_workers(1, timeout=60)
        if worker.poll() is not None:
            pytest.skip("this machine does not allow mount namespaces")
        options = PackOptions(backend="dask", scheduler=address, shards=2)
        with pytest.raises(ClusterError, match="storage every Dask worker shares"):
            pack(src, out, options)
        assert list(theirs.iterdir()) == [] and list(out.iterdir()) == []
    finally:
        for process in (worker, scheduler):
            process.terminate()
            process.wait(timeout=30)


@pytest.mark.slow
def test_the_local_dask_cluster_listens_on_loopback_only():
    pytest.importorskip("distributed")
    with dask_client(None, 1) as client:
        addresses = [client.scheduler.address, *client.scheduler_info()["workers"]]
    assert all(a.startswith("tcp://127.0.0.1:") for a in addresses), addresses


def test_a_folder_under_a_name_pack_writes_is_refused_before_the_index_goes(src, tmp_path):
    """A folder at label.labels.txt stopped the run at its end, after the good index it was
    to replace had been removed: refused first, the dataset left as it was."""
    out = tmp_path / "out"
    assert _cli("pack", str(src), str(out), "--workers", "1").returncode == 0
    (out / "label.labels.txt").unlink()
    (out / "label.labels.txt").mkdir()
    run = _cli("pack", str(src), str(out), "--workers", "1")
    _one_line_error(run, "label.labels.txt: is a folder where pack writes a file")
    assert (out / "index.json").is_file()
    from shardpack.read.verify import verify

    assert verify(out).ok


def test_a_folder_at_index_json_is_named_a_folder_not_an_index_to_overwrite(src, tmp_path):
    """A folder at OUT/index.json (another tool's, holding a file) was "not an index shardpack
    can read; pass --overwrite to replace it", and --overwrite then said it is a folder to move
    away: the first refusal says so, the folder and its file left as they were."""
    out = tmp_path / "out"
    (out / "index.json").mkdir(parents=True)
    (out / "index.json" / "theirs.txt").write_text("theirs")
    run = _cli("pack", str(src), str(out), "--workers", "1")
    _one_line_error(run, "index.json: is a folder where pack writes a file")
    assert (out / "index.json" / "theirs.txt").read_text() == "theirs"


@pytest.mark.parametrize("command", ["index-files", "pack"])
def test_a_folder_at_a_dali_index_file_is_refused_by_its_name_before_any_write(
    src, tmp_path, command
):
    """index-files named its temporary file and said "pass a file"; pack --overwrite
    --index-files stopped at its end, the dataset it was to replace gone."""
    out = tmp_path / "out"
    first = ("pack", str(src), str(out), "--workers", "1", "--index-files", "--shards", "2")
    assert _cli(*first).returncode == 0
    idx = out / "idx" / f"{SHARDS[0]}.idx"
    idx.unlink()
    idx.mkdir()
    again = (*first, "--seed", "1", "--overwrite", "--no-progress")  # another dataset, replaced
    done = run_cli("index-files", str(out)) if command == "index-files" else run_cli(*again)
    _one_line_error(done, f"{idx}: is a folder where pack writes a file")
    assert [fault.file for fault in verify(out).faults] == [f"idx/{SHARDS[0]}.idx"]


_READ_STATE = f"""
import json, sys
from shardpack.packing.outdir import read_state
from shardpack.storage import storage_at
storage = storage_at(sys.argv[1])
before = {PEAK_KIB}
state = read_state(storage)
grown = {PEAK_KIB} - before
print(json.dumps([bool(state.finished), grown]))
"""


def test_a_journal_of_millions_of_short_lines_is_read_in_bounded_memory(src, tmp_path):
    """Every line of a planted journal became a parsed object before any was checked: 63 MB
    of "[]" lines held 2.7 GB. Now a line at a time, kept only as a shard entry. Measured as
    a fresh process's peak RSS (tracemalloc made this test take 10x as long)."""
    out = tmp_path / "out"
    assert _cli("pack", str(src), str(out), "--workers", "1").returncode == 0
    with open(out / ".shardpack.journal", "ab") as f:
        f.write(b"[]\n" * 1_000_000)
    read = subprocess.run([sys.executable, "-c", _READ_STATE, str(out)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert read.returncode == 0, read.stderr
    finished, grown_kib = json.loads(read.stdout)
    assert finished and grown_kib < 20 * 1024, grown_kib  # the real entries kept, little else


def test_resume_stops_at_a_shard_whose_size_disagrees_with_the_journal(src, tmp_path):
    """A finished shard grown sparse to 32 GiB was hashed to its end before it was rewritten
    (~20 s; a 15 TiB sparse file, hours): its size alone says it is not the shard written."""
    out = tmp_path / "out"
    options = PackOptions(workers=1, shards=2)
    pack(src, out, options)
    (out / "index.json").unlink()  # an interrupted run
    shard = sorted(out.glob("*.tfrecord-*"))[0]
    os.truncate(shard, 32 << 30)
    started = time.monotonic()
    result = pack(src, out, replace(options, resume=True))
    assert time.monotonic() - started < 10
    assert result.num_reused == 1 and shard.stat().st_size < 1 << 20


def test_a_repeated_journal_line_is_one_shard(tmp_path: Path):
    """A journal line written twice (crafted, or a copy mishap) must not count its records
    twice on --resume."""
    src = make_tree(tmp_path / "src", {"a": 3, "b": 3})
    out = tmp_path / "out"
    first = pack(src, out, PackOptions(workers=1, shards=2))
    journal = out / ".shardpack.journal"
    last = journal.read_text().splitlines()[-1]
    with journal.open("a") as f:
        f.write(last + "\n")
    again = pack(src, out, PackOptions(workers=1, shards=2, resume=True))
    assert again.num_records == first.num_records == 6 and again.num_reused == 2


@pytest.mark.parametrize(
    ("field", "lie"),
    [("width", 1 << 62), ("height", 1 << 32), ("size", 1 << 64), ("stored", 1 << 64),
     ("lossless", 10**20), ("digest", "zz" * 16), ("digest", 7)],
)  # fmt: skip
def test_a_planted_size_in_contents_json_is_refused_before_the_grow_writes(
    src, tmp_path, field, lie
):
    """A record's side past uint32 or a size past 2**64 in contents.json ended `--append` in
    numpy's OverflowError as it summed them, after the new shard was written; a shard's
    `lossless` past index.json's counts was written into an index every reader refused.
    Refused now as any other lie of contents.json, before anything is written."""
    out = tmp_path / "out"
    assert _cli("pack", str(src), str(out), "--workers", "1").returncode == 0
    contents = json.loads((out / "contents.json").read_text())
    entry = next(iter(contents["shards"].values()))
    entry[field] = [lie] * len(entry[field])
    (out / "contents.json").write_text(json.dumps(contents))
    written = sorted(p.name for p in out.iterdir())
    index = (out / "index.json").read_bytes()
    write_image(src / "cat" / "new.jpg", image(99))
    run = _cli("pack", str(src), str(out), "--append", "--workers", "1")
    _one_line_error(run, "contents.json", "does not agree with index.json", "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == written
    assert (out / "index.json").read_bytes() == index


@pytest.mark.parametrize("where", ["shards", "dropped"])
def test_a_planted_crc_past_32_bits_in_contents_json_is_refused_before_a_dedup_grow(
    src, tmp_path, where
):
    """A record's CRC-32C of 2**32 in contents.json (a shard's, or a copy --dedup left out)
    ended `--append --dedup exact` in numpy's OverflowError as it sought copies by it."""
    shutil.copy(src / "cat" / sorted(os.listdir(src / "cat"))[0], src / "dog" / "copy.jpg")
    for path in src.rglob("*.jpg"):  # settled: stamped, so a grow keys them by contents.json
        os.utime(path, ns=(time.time_ns() - 600 * 10**9,) * 2)
    out = tmp_path / "out"
    assert _cli("pack", str(src), str(out), "--workers", "1", "--dedup", "exact").returncode == 0
    contents = json.loads((out / "contents.json").read_text())
    assert contents["dropped"]  # the copy, left out
    rows = contents["dropped"] if where == "dropped" else contents["shards"].values()
    for row in rows:
        if where == "dropped":
            row[2] = 1 << 32
        else:
            row["crc"] = [1 << 32] * len(row["crc"])
    (out / "contents.json").write_text(json.dumps(contents))
    index = (out / "index.json").read_bytes()
    write_image(src / "cat" / "new.jpg", image(99))
    run = _cli("pack", str(src), str(out), "--append", "--workers", "1")
    _one_line_error(run, "contents.json", "--overwrite")
    assert (out / "index.json").read_bytes() == index


@pytest.mark.parametrize(
    ("field", "lie"),
    [("num_records", 1 << 53), ("lossless", 1 << 64), ("lossless", -1),
     ("label_counts", [-1, 7]), ("label_counts", [1 << 60, 0]), ("label_counts", [1]),
     ("label_counts", [1, 1, 1]), ("arrow_bytes", 10**30)],
)  # fmt: skip
def test_a_journal_line_lying_about_its_counts_is_no_shard_to_keep(src, tmp_path, field, lie):
    """A journal line vouches for its shard by its sha256 alone: the counts beside it went into
    index.json as they were, so `--resume` wrote an index every reader refused (2**53 records,
    a lossless past 2**53, a negative or huge class count, counts of fewer or more classes
    than the dataset's: summed class by class, cut to the shorter) or a lie `verify` faults. A line
    whose counts its planned shard cannot hold is no finished shard now: it is written again."""
    out = tmp_path / "out"
    assert _cli("pack", str(src), str(out), "--workers", "1", "--shards", "2").returncode == 0
    (out / "index.json").unlink()  # an interrupted run
    journal = out / ".shardpack.journal"
    head, *lines = journal.read_text().splitlines()
    entry = json.loads(lines[0])
    entry[field] = lie
    journal.write_text("\n".join([head, json.dumps(entry), *lines[1:]]) + "\n")
    run = _cli("pack", str(src), str(out), "--workers", "1", "--shards", "2", "--resume")
    assert run.returncode == 0, run.stderr
    checked = verify(out)
    assert checked.ok and checked.records == 9 and not checked.faults


def test_a_journal_line_with_its_label_counts_swapped_is_no_shard_to_keep(src, tmp_path):
    """A journal line's label_counts swapped between classes (the right length, each count in
    bounds, the shard's sha256 as it was) went into index.json as they were: `--resume` wrote
    class counts its records do not hold, exit 0, for `verify` to fault. The counts are the
    labels of the planned items its facts table notes written, or the shard is written again."""
    out = tmp_path / "out"
    job = ("--workers", "1", "--shards", "2")
    assert _cli("pack", str(src), str(out), *job).returncode == 0
    counts = json.loads((out / "index.json").read_text())["splits"]["train"]["class_counts"]
    (out / "index.json").unlink()  # an interrupted run
    journal = out / ".shardpack.journal"
    head, *lines = journal.read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    # the shard of 5 (9 images in 2 shards): its classes' counts differ, so a swap changes them
    entry = next(e for e in entries if e["label_counts"] != e["label_counts"][::-1])
    entry["label_counts"] = entry["label_counts"][::-1]
    journal.write_text("\n".join([head, *map(json.dumps, entries)]) + "\n")
    run = _cli("pack", str(src), str(out), *job, "--resume")
    assert run.returncode == 0, run.stderr
    assert "kept 1 of 2 shards" in run.stdout, run.stdout  # the other line's shard kept
    assert json.loads((out / "index.json").read_text())["splits"]["train"]["class_counts"] == (
        counts
    )
    checked = verify(out)
    assert checked.ok and checked.records == 9 and not checked.faults, checked.faults


@pytest.mark.parametrize("fewer", [1, 2])
def test_a_journal_line_counting_fewer_records_than_its_facts_note_is_no_shard_to_keep(
    src, tmp_path, fewer
):
    """A journal line whose num_records is under what its shard holds (an edit, the rest of
    the line and the shard's sha256 as they were) fits the planned shard's items: `--resume`
    kept it and wrote that count into index.json, exit 0, for `verify` to fault ("3 records
    read, index.json says 2"). Its facts table notes each record written: a count that is not
    theirs is no finished shard now, and the shard is written again."""
    out = tmp_path / "out"
    assert _cli("pack", str(src), str(out), "--workers", "1", "--shards", "2").returncode == 0
    journal = out / ".shardpack.journal"
    head, *lines = journal.read_text().splitlines()
    entry = json.loads(lines[0])
    entry["num_records"] -= fewer
    journal.write_text("\n".join([head, json.dumps(entry), *lines[1:]]) + "\n")
    run = _cli("pack", str(src), str(out), "--workers", "1", "--shards", "2", "--resume")
    assert run.returncode == 0, run.stderr
    assert "kept 1 of 2 shards" in run.stdout, run.stdout
    checked = verify(out)
    assert checked.ok and checked.records == 9 and not checked.faults, checked.faults


def test_contents_json_entries_swapped_between_shards_are_refused_before_an_update(tmp_path):
    """Two shards' entries in contents.json swapped (each still agreeing with index.json's
    counts): `--update` took the changed image for one held by the other shard, rewrote that
    one from its listed keys and kept the shard that held it, exit 0: the dataset held one
    shard's images twice and lost the other's, for `verify` to fault its class counts. Each
    entry names its shard's sha256 now, and one under another shard's name is refused."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})  # two shards of 3: alike counts
    out = tmp_path / "out"
    assert _cli("pack", str(src), str(out), "--workers", "1", "--shards", "2").returncode == 0
    contents = json.loads((out / "contents.json").read_text())
    first, second = contents["shards"]
    shards = contents["shards"]
    shards[first], shards[second] = shards[second], shards[first]
    (out / "contents.json").write_text(json.dumps(contents))
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    changed = sorted((src / "cat").iterdir())[0]
    write_image(changed, image(77))
    run = _cli("pack", str(src), str(out), "--update", "--workers", "1", "--shards", "2")
    _one_line_error(run, "contents.json", "does not agree with index.json", "--overwrite")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == written


@pytest.mark.parametrize("grow", ["--append", "--update"])
def test_a_key_listed_twice_in_contents_json_is_refused_before_a_grow(src, tmp_path, grow):
    """One record's key in contents.json written over with another record's (each entry
    still agreeing with index.json's counts and sha256): `--update` took the record for the
    other key's, exit 0, and the dataset held one image twice (10 records of SRC's 9). Pack
    keys each item once in a dataset: a key listed twice is refused, OUT untouched."""
    out = tmp_path / "out"
    assert _cli("pack", str(src), str(out), "--workers", "1", "--shards", "2").returncode == 0
    contents = json.loads((out / "contents.json").read_text())
    first, second = contents["shards"].values()
    twice = second["keys"][0]
    first["keys"][0] = twice
    (out / "contents.json").write_text(json.dumps(contents))
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    write_image(src / "cat" / "new.jpg", image(79))
    run = _cli("pack", str(src), str(out), grow, "--workers", "1")
    _one_line_error(run, "contents.json", f"lists record {twice!r} more than once", "--overwrite")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == written


def test_verify_faults_a_key_in_contents_json_that_is_not_its_records(src, tmp_path):
    """A record's key in contents.json renamed (to a key no record holds): a grow, which reads
    no shard it keeps, took the record's image for new and packed it again, exit 0, and
    `verify` said OK before and after. verify holds every record to the key listed for its
    place, as the run that reads a stranger's OUT before growing it."""
    out = tmp_path / "out"
    assert _cli("pack", str(src), str(out), "--workers", "1", "--shards", "2").returncode == 0
    contents = json.loads((out / "contents.json").read_text())
    file, entry = next(iter(contents["shards"].items()))
    held, entry["keys"][1] = entry["keys"][1], "cat/ghost.jpg"
    (out / "contents.json").write_text(json.dumps(contents))
    report = verify(out)
    assert not report.ok and [str(f) for f in report.faults] == [
        f"contents.json: lists 'cat/ghost.jpg' as record 1 of {file}, which holds {held!r}; a "
        "grow would keep a record twice or drop one; pack again to write it anew"
    ]
    assert report.damaged == ()  # no shard is at fault


@pytest.mark.parametrize("grow", ["--append", "--update"])
def test_a_shard_of_another_size_than_the_index_says_is_refused_before_a_grow(tmp_path, grow):
    """index.json's num_bytes of a shard one off its file's: a grow keeps the shards unread,
    so it went on (exit 0) and wrote an index carrying the fault on for `verify` to find. The
    listing gives each shard's size: one that differs is refused in one line, OUT untouched."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    out = tmp_path / "out"
    assert _cli("pack", str(src), str(out), "--workers", "1", "--shards", "2").returncode == 0
    doc = json.loads((out / "index.json").read_text())
    shard = doc["splits"]["train"]["shards"][0]
    shard["num_bytes"] += 1
    (out / "index.json").write_text(json.dumps(doc))
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    write_image(src / "cat" / "new.jpg", image(78))
    run = _cli("pack", str(src), str(out), grow, "--workers", "1")
    size = (out / shard["file"]).stat().st_size
    _one_line_error(run, shard["file"], f"holds {size:,} bytes where index.json says "
                    f"{size + 1:,}", "--overwrite")  # fmt: skip
    assert {p.name: p.read_bytes() for p in out.iterdir()} == written


@pytest.mark.parametrize("grow", ["--append", "--update"])
def test_a_shard_another_pack_wrote_in_its_place_is_refused_before_a_grow(tmp_path, grow):
    """A grow keeps its shards unread: another pack's shard of the same size (a tar comes in
    10 KiB records) under a listed name went on (exit 0), its records' items taken as packed
    and the grown index carrying the lie (verify then found it). So did a contents.json entry
    whose first key names no record. Each shard's first record is held to contents.json's
    first key, refused in one line, OUT untouched."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    out, other = tmp_path / "out", tmp_path / "other"
    for folder, seed in ((out, "0"), (other, "1")):
        assert _cli("pack", str(src), str(folder), "--workers", "1", "--shards", "2", "--format",
                    "webdataset", "--seed", seed).returncode == 0  # fmt: skip
    shard = out / next(iter(shard_files(out)))
    theirs = other / shard.name
    ours = shard.read_bytes()
    assert theirs.stat().st_size == len(ours) and theirs.read_bytes() != ours
    shutil.copyfile(theirs, shard)
    write_image(src / "cat" / "new.jpg", image(77))
    keys = json.loads((out / "contents.json").read_text())["shards"][shard.name]["keys"]
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    run = _cli("pack", str(src), str(out), grow, "--workers", "1")
    _one_line_error(run, f"{shard}: holds '", f"' first, where contents.json lists '{keys[0]}': "
                    "not the shard index.json lists", "verify", "--overwrite")  # fmt: skip
    assert {p.name: p.read_bytes() for p in out.iterdir()} == written
    shard.write_bytes(ours)  # the shard back, its entry's first key one no record holds
    contents = json.loads((out / "contents.json").read_text())
    contents["shards"][shard.name]["keys"][0] = "cat/ghost.jpg"
    (out / "contents.json").write_text(json.dumps(contents))
    run = _cli("pack", str(src), str(out), grow, "--workers", "1")
    _one_line_error(run, "where contents.json lists 'cat/ghost.jpg'")
    shard.write_bytes(b"X" + ours[1:])  # a damaged head: the grow's mend, said once
    run = _cli("pack", str(src), str(out), grow, "--workers", "1")
    _one_line_error(run, f"{shard} at byte 0: bad tar header (bad checksum); restore it from a "
                    "copy, or repack with --overwrite")  # fmt: skip
    assert "pack again" not in run.stderr


# ---- a grow takes no looser limit and no read location from OUT's files ---------------------


def _png_bomb(path: Path, side: int) -> None:
    """A real grayscale PNG of side x side black pixels: a few hundred KB of deflate."""
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    deflate, row = zlib.compressobj(1), bytes(side + 1)  # each row: filter byte 0, then pixels
    pixels = b"".join([*(deflate.compress(row) for _ in range(side)), deflate.flush()])
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
                     + chunk(b"IEND", b""))  # fmt: skip


def _plant_option(out: Path, name: str, value: object) -> dict[str, bytes]:
    """index.json's options[name] set to `value`, as a stranger's OUT would hold it; OUT's
    files after it."""
    doc = json.loads((out / "index.json").read_text())
    doc["options"][name] = value
    (out / "index.json").write_text(json.dumps(doc))
    return {p.name: p.read_bytes() for p in out.iterdir()}


def test_a_planted_looser_max_pixels_is_refused_not_taken_by_a_grow(src, tmp_path):
    """index.json's options are a grow's: a planted `max_pixels` of 10^13 let a PNG of
    13,400² pixels (over the default 178,956,970) into the dataset with exit 0. A limit looser
    than the run's is refused now, naming index.json and the flag that takes it knowingly;
    one as tight or tighter is still the dataset's."""
    out = tmp_path / "out"
    assert _cli("pack", str(src), str(out), "--workers", "1").returncode == 0
    _png_bomb(src / "cat" / "bomb.png", 13_400)
    written = _plant_option(out, "max_pixels", 10**13)
    run = _cli("pack", str(src), str(out), "--append", "--workers", "1")
    _one_line_error(run, str(out / "index.json"), "--max-pixels 10000000000000, a looser limit "
                    "than this run's --max-pixels 178956970", "--overwrite")  # fmt: skip
    assert {p.name: p.read_bytes() for p in out.iterdir()} == written
    _plant_option(out, "max_pixels", 10**6)  # tighter than the default: the dataset's, taken
    run = _cli("pack", str(src), str(out), "--append", "--workers", "1")
    assert run.returncode == 0, run.stderr
    skipped = json.loads((out / "index.json").read_text())["skipped"]
    assert [s["key"] for s in skipped] == ["cat/bomb.png"]
    assert "over --max-pixels 1000000" in skipped[0]["reason"]


def test_a_planted_root_is_refused_and_never_read_by_a_grow(tmp_path):
    """index.json's `root` was a grow's: planted, it made `--append` read the manifest's
    relative paths under a folder the user never named (a stranger's image went in, exit 0).
    A grow reads only where its command line says: a dataset packed with --root is grown with
    it given again (its own pack's command line), any other refused in one line."""
    src, elsewhere = tmp_path / "src", tmp_path / "elsewhere"
    make_tree(src / "img", {"cat": 2})
    make_tree(elsewhere / "img", {"cat": 3}, seed=50)  # the same names, other images
    rows = [{"image": f"img/cat/img_{i:03d}.jpg", "label": "cat"} for i in range(2)]
    manifest = write_jsonl(src / "list.jsonl", rows)
    out, packed = tmp_path / "out", tmp_path / "packed"
    assert _cli("pack", str(manifest), str(out), "--workers", "1").returncode == 0
    run = _cli("pack", str(manifest), str(packed), "--workers", "1", "--root", str(src))
    assert run.returncode == 0, run.stderr
    written = _plant_option(out, "root", str(elsewhere))
    write_jsonl(manifest, [*rows, {"image": "img/cat/img_002.jpg", "label": "cat"}])
    write_image(src / "img" / "cat" / "img_002.jpg", image(7))
    for given in ((), ("--root", str(tmp_path / "other"))):
        run = _cli("pack", str(manifest), str(out), "--append", "--workers", "1", *given)
        _one_line_error(run, str(out / "index.json"), f"read under --root {elsewhere}",
                        "pass --root with the folder of SRC's images")  # fmt: skip
        assert {p.name: p.read_bytes() for p in out.iterdir()} == written
    # the user's own --root, given again as the dataset was packed, is taken
    run = _cli("pack", str(manifest), str(packed), "--append", "--workers", "1")
    _one_line_error(run, str(packed / "index.json"), "this run's names none")
    run = _cli("pack", str(manifest), str(packed), "--append", "--workers", "1", "--root", str(src))
    assert run.returncode == 0, run.stderr
    assert json.loads((packed / "index.json").read_text())["splits"]["train"]["num_records"] == 3
