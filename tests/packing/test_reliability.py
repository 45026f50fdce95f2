"""Faults injected for real: signals to the run and its workers, a file-size limit, a held lock,
and resume proving that an interrupted run ends byte-identical to an uninterrupted one."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shardpack.errors import OutputError
from shardpack.layout import LOCK_NAME
from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.read.stream import iter_examples
from tests import forkserver
from tests.helpers import (
    gone,
    handed_over,
    image,
    make_tree,
    one_line_error,
    run_cli,
    shard_files,
    stopped,
    wait_for,
    worker_pids,
    write_image,
    writing_a_shard,
)

pytestmark = pytest.mark.slow  # real signals and kills, each a pack of its own
JOB = ["--encode", "png", "--shards", "12", "--workers", "2", "--no-progress"]
# The runs stopped mid-write: a shard written through a stream (TFRecord; WebDataset and
# Parquet write the same way) and, in `make test-long`, one a library writes by path
# (ArrayRecord). What each container's writer leaves when it fails is the conformance suite's,
# every container (tests/containers/test_conformance.py).


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reliability") / "src"
    settled = time.time() - 60  # a user's photos: older than a stamp's racy window
    for i in range(480):
        write_image(path := root / f"c{i % 4}" / f"{i:04d}.jpg", image(i, height=120, width=160))
        os.utime(path, (settled, settled))
    return root


@pytest.fixture(scope="module")
def clean_as(src: Path, tmp_path_factory):
    """An uninterrupted run's output in a given --format, packed once per format."""
    outs: dict[str, Path] = {}

    def get(fmt: str) -> Path:
        if fmt not in outs:
            out = tmp_path_factory.mktemp(f"clean-{fmt}") / "out"
            assert _cli("pack", str(src), str(out), *JOB, "--format", fmt).returncode == 0
            outs[fmt] = out
        return outs[fmt]

    return get


@pytest.fixture(scope="module")
def clean(clean_as) -> Path:
    """An uninterrupted run's output in the default format (TFRecord): clean_as's own."""
    return clean_as("tfrecord")


def _cli(*args: str) -> subprocess.CompletedProcess:
    """A run that is not the one stopped (the reference, a resume, a second run): in this
    process (helpers.run_cli), without an interpreter's start; those stopped are _start's."""
    return run_cli(*args)


def _start(src: Path, out: Path, *extra: str) -> forkserver.Child:
    """The run stopped: a real process of its own, forked from tests.forkserver's server."""
    return forkserver.start(forkserver.SHARDPACK, "pack", str(src), str(out), *JOB, *extra)


def _signal(pid: int, sig: int) -> bool:
    """Send sig to pid unless it is gone (ended and reaped); whether it was there."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _hold_a_worker_mid_shard(run: forkserver.Child) -> int:
    """SIGSTOP a worker of the run as it writes a shard (seen again once it has stopped): held,
    it keeps that shard unfinished, so the run cannot end however fast the others go."""
    held: list[int] = []

    def hold() -> bool:
        for pid in worker_pids(run.pid):
            if writing_a_shard(pid) and _signal(pid, signal.SIGSTOP):
                wait_for(lambda pid=pid: stopped(pid) or run.poll() is not None, timeout=10)
                if writing_a_shard(pid):
                    held.append(pid)
                    return True
                _signal(pid, signal.SIGCONT)  # it finished that shard first: another
        assert run.poll() is None, "the run ended before a worker could be held mid-shard"
        return False

    wait_for(hold)
    return held[0]


def _finished_shards(out: Path) -> int:
    journal = out / ".shardpack.journal"
    return max(0, len(journal.read_text().splitlines()) - 1) if journal.exists() else 0


def _leftovers(out: Path) -> list[str]:
    names = [p.name for p in out.iterdir()] if out.exists() else []  # a failed first run: none
    return [n for n in names if n.endswith((".partial", ".progress", ".lock"))]


def _same_output(a: Path, b: Path) -> bool:
    def index(out: Path) -> dict:
        doc = json.loads((out / "index.json").read_text())
        doc.pop("stats")
        return doc

    return shard_files(a) == shard_files(b) and index(a) == index(b)


# SIGTERM takes the parent's same path as Ctrl-C to another exit code: one container shows it.
# `make test` shows TFRecord's Ctrl-C; the others are `make test-long`'s.
@pytest.mark.parametrize(
    ("fmt", "sig", "code"),
    [pytest.param("array_record", signal.SIGINT, 130, marks=pytest.mark.long),
     ("tfrecord", signal.SIGINT, 130),
     pytest.param("tfrecord", signal.SIGTERM, 143, marks=pytest.mark.long)],
)  # fmt: skip
def test_signal_stops_cleanly_and_resume_completes(src, clean_as, tmp_path, sig, code, fmt):
    out = tmp_path / "out"
    run = _start(src, out, "--format", fmt)
    # The workers held, so the signal lands mid-run and not as the run ends (one mid-shard
    # before the first shard lands, the run cannot end); kept held, so a run that waited for
    # them instead of killing them would hang here.
    workers = [_hold_a_worker_mid_shard(run)]
    try:
        wait_for(lambda: _finished_shards(out) >= 1)
        workers = worker_pids(run.pid)
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        assert _finished_shards(out) < 12
        sent = time.monotonic()
        run.send_signal(sig)
        stderr = run.communicate(timeout=30)[1]
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert run.returncode == code, stderr
    assert time.monotonic() - sent < 5.0
    assert "--resume" in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not (out / "index.json").exists() and not _leftovers(out)
    finished = _finished_shards(out)
    assert 1 <= finished < 12
    resumed = _cli("pack", str(src), str(out), *JOB, "--format", fmt, "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert _same_output(out, clean_as(fmt))


# A Ctrl-C as the workers fork: the packing process's, sent as it forks (where an at-fork
# handler swallowed it: the run went on to exit 0), and the group's, sent from a worker just
# forked (before it ignores SIGINT: its traceback, and "a worker died ... out-of-memory").
_AT_FORK = {
    "parent": "os.register_at_fork(before=lambda: os.kill(os.getpid(), signal.SIGINT))",
    "group": "os.register_at_fork(after_in_child=lambda: os.killpg(0, signal.SIGINT))",
}


@pytest.mark.parametrize("whom", sorted(_AT_FORK))
def test_a_ctrl_c_as_the_workers_fork_stops_the_run_in_one_line(src, tmp_path, whom):
    out = tmp_path / "out"
    code = ("import os, signal, sys\n"
            f"{_AT_FORK[whom]}\n"
            "from shardpack.__main__ import main\n"
            f"sys.argv = ['shardpack', 'pack', *{[str(src), str(out), *JOB]!r}]\n"
            "main()\n")  # fmt: skip
    run = forkserver.run(code, timeout=120, start_new_session=True)
    assert run.returncode == 130, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "--resume" in run.stderr, run.stderr
    assert not (out / "index.json").exists() and not _leftovers(out)


# SIGTERM too: the pool sends it to the workers left when one dies, and a worker that raised
# on it (the CLI's handler, inherited) printed its traceback under the one line.
@pytest.mark.parametrize(
    ("fmt", "sig"),
    [pytest.param("array_record", signal.SIGKILL, marks=pytest.mark.long),
     ("tfrecord", signal.SIGKILL),
     pytest.param("tfrecord", signal.SIGTERM, marks=pytest.mark.long)],
)  # fmt: skip
def test_worker_killed_mid_shard(src, clean_as, tmp_path, fmt, sig):
    out = tmp_path / "out"
    run = _start(src, out, "--format", fmt)
    # held mid-shard (not between two shards, where no file names the shard) till one landed
    victim = _hold_a_worker_mid_shard(run)
    try:
        wait_for(lambda: _finished_shards(out) >= 1)
    finally:
        os.kill(victim, sig)
        _signal(victim, signal.SIGCONT)  # a SIGTERM is taken once it runs again
    stderr = run.communicate(timeout=60)[1]
    assert run.returncode == 2, stderr
    assert "worker died while writing src-train" in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert not (out / "index.json").exists() and not _leftovers(out)
    assert _cli("pack", str(src), str(out), *JOB, "--format", fmt, "--resume").returncode == 0
    assert _same_output(out, clean_as(fmt))


def test_workers_die_with_a_killed_parent_and_resume_completes(src, clean, tmp_path):
    out = tmp_path / "out"
    run = _start(src, out)
    held = _hold_a_worker_mid_shard(run)  # so the run is mid-way when killed
    wait_for(lambda: _finished_shards(out) >= 1 and len(worker_pids(run.pid)) == 2)
    workers = worker_pids(run.pid)
    run.kill()  # as the out-of-memory killer would: no cleanup runs in the parent
    run.wait(timeout=30)
    _signal(held, signal.SIGCONT)  # (gone already: the kernel's parent-death SIGKILL)
    wait_for(lambda: gone(workers), timeout=10)
    resumed = _cli("pack", str(src), str(out), *JOB, "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr  # no orphan holds OUT's lock
    assert _same_output(out, clean)


@pytest.mark.long  # a handed-over shard (the test above) and a killed parent's resume (below)
def test_a_parent_killed_as_its_first_shard_lands_is_resumed(src, clean, tmp_path):
    # Held, the parent cannot commit nor journal the shard a worker hands over (before, the
    # worker renamed it into place: killed then, the parent left that shard and no journal,
    # and every rerun, --resume too, was refused: 'exists and was not written by shardpack')
    out = tmp_path / "out"
    run = _start(src, out)
    wait_for(lambda: len(worker_pids(run.pid)) == 2)
    workers = worker_pids(run.pid)
    # a worker writing a shard (forked, a worker may still wait for its task from the parent)
    wait_for(lambda: any(out.glob(".src-train.tfrecord-*.partial"))
             or any(out.glob("src-train.tfrecord-*")))  # fmt: skip
    run.send_signal(signal.SIGSTOP)
    try:  # a shard written whole, handed over, or committed before the stop
        wait_for(lambda: handed_over(out, ".src-train.tfrecord-*.partial", workers)
                 or any(out.glob("src-train.tfrecord-*")))  # fmt: skip
    finally:
        run.kill()
        run.wait(timeout=30)
    wait_for(lambda: gone(workers), timeout=10)
    resumed = _cli("pack", str(src), str(out), *JOB, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert _same_output(out, clean)


def test_a_shard_is_final_only_once_the_packing_process_commits_it(src, clean, tmp_path):
    # A forked worker hands its written shard over (closed, not yet fsynced nor renamed) and
    # goes on with the next: the packing process makes it durable, final, then journals it.
    # Held, it commits nothing: no worker puts a shard at its final name behind its back.
    out = tmp_path / "out"
    run = _start(src, out)
    wait_for(lambda: len(worker_pids(run.pid)) == 2)
    workers = worker_pids(run.pid)
    run.send_signal(signal.SIGSTOP)
    try:
        final = set(out.glob("src-train.tfrecord-*"))  # committed before the stop: a few ms
        wait_for(lambda: handed_over(out, ".src-train.tfrecord-*.partial", workers))
        assert set(out.glob("src-train.tfrecord-*")) == final
        assert _finished_shards(out) == len(final)
    finally:
        run.send_signal(signal.SIGCONT)
    assert run.wait(timeout=300) == 0, run.stderr.read()
    assert _same_output(out, clean) and not _leftovers(out)


def test_file_size_limit_is_one_line_and_keeps_finished_shards(src, clean, tmp_path):
    out = tmp_path / "out"
    largest = max(len(b) for b in shard_files(clean).values())
    limit = largest * 3  # room for a few shards, then EFBIG (Python ignores SIGXFSZ)

    job = [a if a != "2" else "1" for a in JOB]  # one worker: the limit applies in-process
    run = forkserver.run(forkserver.SHARDPACK, "pack", str(src), str(out), *job, "--shards", "3",
                         timeout=300, limits=((resource.RLIMIT_FSIZE, limit),))  # fmt: skip
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "cannot write" in lines[0] and "free some space" in lines[0] and ".partial" in lines[0]
    assert not (out / "index.json").exists() and not _leftovers(out)


def test_a_full_disk_at_a_fresh_pack_s_index_says_to_resume_and_the_resume_finishes(tmp_path):
    """A real EFBIG (RLIMIT_FSIZE, in a process of its own) as a fresh pack writes index.json,
    the one file over the limit (it names SRC's 1,000 long-named notes as ignored): the line
    said only to free some space (a grow's says the same command finishes it); it says now, as
    a shard's failed write does, to rerun with --resume, which finishes the pack as if it had
    never stopped, its shard kept."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    for i in range(1000):
        (src / "cat" / f"note_{i:04d}_{'x' * 150}.txt").write_text("not an image")
    clean, out = tmp_path / "clean", tmp_path / "out"
    job = ("--workers", "1", "--no-progress")
    assert _cli("pack", str(src), str(clean), *job).returncode == 0
    sizes = {p.name: p.stat().st_size for p in clean.iterdir()}
    limit = 2 * max(size for name, size in sizes.items() if name != "index.json")
    assert limit < sizes["index.json"]

    run = forkserver.run(forkserver.SHARDPACK, "pack", str(src), str(out), *job, timeout=120,
                         limits=((resource.RLIMIT_FSIZE, limit),))  # fmt: skip
    one_line_error(run, f"{out / 'index.json'}: cannot write (File too large); free some space",
                   "then rerun with --resume to keep the shards already finished")  # fmt: skip
    assert not (out / "index.json").exists() and not _leftovers(out)
    assert _finished_shards(out) == 1
    resumed = _cli("pack", str(src), str(out), *job, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "kept 1 of 1 shard from an earlier run" in resumed.stdout
    assert _same_output(out, clean)


def test_resume_refuses_changed_options(src, tmp_path):
    src = Path(shutil.copytree(src, tmp_path / "src"))  # the module's own is shared: not changed
    out = tmp_path / "out"
    pack(src, out, PackOptions(encode="png", shards=12, workers=2))
    said = (  # in Python's terms: the CLI names the flags (test_cli)
        r"was packed with other options \(encode='jpeg' \(the journal's: 'png'\); "
        r"seed=7 \(the journal's: 0\)\); pass overwrite=True"
    )
    with pytest.raises(OutputError, match=said):
        pack(src, out, PackOptions(encode="jpeg", shards=12, workers=2, resume=True, seed=7))
    result = pack(src, out, PackOptions(encode="png", shards=12, workers=2, resume=True))
    assert result.num_reused == 12
    (src / "extra").mkdir()
    shutil.copy(next(src.rglob("*.jpg")), src / "extra" / "new.jpg")  # one more image
    with pytest.raises(OutputError, match=r"was packed from a changed source \(other files"):
        pack(src, out, PackOptions(encode="png", shards=12, workers=2, resume=True))


def test_resume_with_other_workers_says_the_shard_count_followed_them(tmp_path):
    """Without --shards the count follows --workers: a resume with other workers is refused
    naming the counts and the way on, not blaming the (untouched) source."""
    # photos of noise: bytes enough that the cost model finds them worth two workers (the
    # module's smooth ones are not), few enough to pack in a moment
    src, out = tmp_path / "src", tmp_path / "out"
    noise = np.random.default_rng(0)
    for i in range(96):
        write_image(src / "c" / f"{i:02d}.jpg", noise.integers(0, 256, (180, 240, 3), np.uint8))
    pack(src, out, PackOptions(encode="png", workers=1))
    with pytest.raises(OutputError, match=r"was planned into other shard counts \(then "
                       r"\{\"train\": 1\}, now \{\"train\": 2\}: without shards= the count "
                       r"follows workers="):  # fmt: skip
        pack(src, out, PackOptions(encode="png", workers=2, resume=True))


def _packed_with_a_journal_of(src: Path, out: Path, **options: object) -> Path:
    """`out` packed from `src`, its journal then saying these options of another plan."""
    pack(src, out, PackOptions(shards=2, workers=1))
    journal = out / ".shardpack.journal"
    lines = journal.read_text().splitlines()
    header = json.loads(lines[0])
    header["plan_digest"] = "0" * 64
    header["options"].update(options)
    journal.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    return out


def test_a_journal_that_lies_about_its_options_is_shown_cut_short(src, tmp_path):
    """The journal is OUT's, so untrusted: options of any shape or size in its header end in a
    one-line refusal that shows them cut short, never a crash."""
    out = _packed_with_a_journal_of(src, tmp_path / "out", quality=["\n" * 5000],
                                    encode={"a": None}, nonsense=1)  # fmt: skip
    with pytest.raises(OutputError) as refused:
        pack(src, out, PackOptions(shards=2, workers=1, resume=True))
    message = str(refused.value)
    assert "encode='keep' (the journal's: {'a': None})" in message and "nonsense" not in message
    assert "(the journal's: ('\\n" in message and "\n" not in message and len(message) < 400


def test_a_journal_s_option_of_another_shape_is_said_as_its_flag_without_a_crash(src, tmp_path):
    """The CLI says a journal's option as the flag that gives it (`--split train=0.5`); a
    journal's --split that is no list of (name, fraction) is said as its bare values."""
    out = _packed_with_a_journal_of(src, tmp_path / "out", split=["a", "b", "c"], resize=[9, "x"])
    done = run_cli("pack", str(src), str(out), "--shards", "2", "--workers", "1", "--resume")
    line = one_line_error(done, "no --split (the journal's: --split a,b,c)")
    assert "no --resize (the journal's: --resize 9x" in line


def test_the_same_job_again_stopped_leaves_the_dataset_whole(src, clean, tmp_path):
    # The same command again over its finished dataset keeps its intact shards and its index
    # until the new one lands: it removed the index as it started, then, stopped, every
    # shard it had not yet written again, leaving the journal alone in OUT
    out = Path(shutil.copytree(clean, tmp_path / "out"))
    run = _start(src, out)
    wait_for(lambda: run.poll() is not None or not (out / "index.json").exists())
    run.send_signal(signal.SIGTERM)  # (a run that ended ignores it)
    stderr = run.communicate(timeout=60)[1]
    assert _same_output(out, clean), stderr
    assert run.returncode == 0 and not _leftovers(out), stderr


def test_the_same_job_again_packs_a_file_edited_to_the_same_size_again(tmp_path):
    # A plain rerun keeps a finished shard only while its files' sizes and mtimes are those its
    # worker read: an image rewritten in place at the same size (the plan, which holds sizes,
    # unchanged) was kept as it was packed, the new pixels never read
    src, out = tmp_path / "src", tmp_path / "out"
    old, new = (np.full((24, 24, 3), value, np.uint8) for value in (40, 200))
    write_image(src / "a" / "x.png", old)
    write_image(src / "b" / "y.png", old)
    edited = tmp_path / "edited.png"
    write_image(edited, new)
    assert edited.stat().st_size == (src / "a" / "x.png").stat().st_size
    for path in (src / "a" / "x.png", src / "b" / "y.png"):
        os.utime(path, (time.time() - 60,) * 2)
    options = PackOptions(encode="keep", shards=2, workers=1)
    pack(src, out, options)
    (src / "a" / "x.png").write_bytes(edited.read_bytes())
    os.utime(src / "a" / "x.png", (time.time() - 30,) * 2)
    result = pack(src, out, options)
    assert result.num_reused == 1  # y.png's shard
    images = {r["key"]: r["image"] for r in iter_examples(out, "train", decode=False)}
    assert images["a/x.png"] == edited.read_bytes()


def test_the_same_job_again_after_a_stop_keeps_its_unchanged_shards(src, clean, tmp_path):
    """A stop leaves the journal and the shards it finished, no index: the same command again
    without --resume wrote every shard anew (--resume alone kept them; img2dataset's rerun
    resumes); it keeps those whose files are unchanged, as over a finished dataset."""
    out = Path(shutil.copytree(clean, tmp_path / "out"))
    (out / "index.json").unlink()
    for unfinished in sorted(out.glob("*.tfrecord-0001[01]-*")):
        unfinished.unlink()
    result = pack(src, out, PackOptions(encode="png", shards=12, workers=2))
    assert result.num_reused == 10
    assert _same_output(out, clean)


def test_resume_redoes_a_damaged_shard(src, clean, tmp_path):
    out = Path(shutil.copytree(clean, tmp_path / "out"))
    victim = sorted(out.glob("*.tfrecord-00003-*"))[0]
    victim.write_bytes(victim.read_bytes()[:-1])
    (out / "index.json").unlink()
    result = pack(src, out, PackOptions(encode="png", shards=12, workers=2, resume=True))
    assert result.num_reused == 11
    assert _same_output(out, clean)


# make test: a held run refuses the next (concurrent runs); a killed run's lock frees (resumes)
@pytest.mark.long
def test_second_run_into_the_same_out_is_refused(src, tmp_path):
    import fcntl

    out = tmp_path / "out"
    out.mkdir()
    with open(out / LOCK_NAME, "w") as held:  # this test process holds OUT's lock
        held.write("4242")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX)
        result = _cli("pack", str(src), str(out), *JOB)
    assert result.returncode == 2 and "another shardpack run (pid 4242)" in result.stderr
    assert not (out / "index.json").exists()
    # Released (as when its process dies, however it dies): the next run proceeds.
    assert _cli("pack", str(src), str(out), *JOB).returncode == 0


def test_a_torn_or_foreign_journal_does_not_stop_a_resume(src, clean, tmp_path):
    out = Path(shutil.copytree(clean, tmp_path / "out"))
    journal = out / ".shardpack.journal"
    lines = journal.read_text().splitlines()
    bad = ['{"file": "x"}', "[1]", '{"file": "../../etc/passwd", "sha256": 1}']
    journal.write_text("\n".join(lines[:4] + bad + lines[4:6]) + "\n" + lines[6][:10])
    (out / "index.json").unlink()
    result = pack(src, out, PackOptions(encode="png", shards=12, workers=2, resume=True))
    assert result.num_reused == 5  # the three good entries, then two after the bad ones
    assert _same_output(out, clean)


def _lock_owner(out: Path) -> str:
    try:
        return (out / LOCK_NAME).read_text().strip()
    except OSError:
        return ""


def test_concurrent_runs_one_wins_intact(src, tmp_path):
    out = tmp_path / "out"
    first = _start(src, out)
    wait_for(lambda: _lock_owner(out) == str(first.pid))  # written once the flock is held
    first.send_signal(signal.SIGSTOP)  # hold the first run mid-way, deterministically
    try:
        second = _cli("pack", str(src), str(out), *JOB)
    finally:
        first.send_signal(signal.SIGCONT)
    first.communicate(timeout=120)
    assert second.returncode == 2 and "another shardpack run" in second.stderr
    assert first.returncode == 0
    assert _cli("verify", str(out)).returncode == 0


@pytest.mark.parametrize("fmt", [pytest.param("array_record", marks=pytest.mark.long), "tfrecord"])
def test_disk_full_keeps_finished_shards_and_resume_completes(src, clean_as, tmp_path, fmt):
    """A real tmpfs too small for the output, in a mount namespace of the test's own."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to mount a small tmpfs")
    clean = clean_as(fmt)
    total = sum(len(b) for b in shard_files(clean).values())
    out, kept, log = tmp_path / "small-disk", tmp_path / "kept", tmp_path / "log"
    out.mkdir()
    pack_cmd = " ".join([sys.executable, "-m", "shardpack", "pack", str(src), str(out), *JOB,
                         "--format", fmt])  # fmt: skip
    script = f"""
        mount -t tmpfs -o size={total // 2} none {out} || exit 77
        {pack_cmd} 2> {log}.first; echo $? > {log}.first-rc
        cp -a {out} {kept}.after-failure
        mount -o remount,size={total * 2} {out}
        {pack_cmd} --resume --json > {log}.resume; echo $? > {log}.resume-rc
        cp -a {out} {kept}
    """
    run = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    if run.returncode == 77:
        pytest.skip("this machine does not allow mounting a tmpfs")
    first = Path(f"{log}.first").read_text().strip().splitlines()
    assert Path(f"{log}.first-rc").read_text().strip() == "2"
    assert len(first) == 1 and "No space left on device" in first[0] and "--resume" in first[0]
    failed = Path(f"{kept}.after-failure")
    assert not (failed / "index.json").exists() and not _leftovers(failed)
    assert 1 <= _finished_shards(failed) < 12  # what finished before the disk filled stays
    assert Path(f"{log}.resume-rc").read_text().strip() == "0"
    assert json.loads(Path(f"{log}.resume").read_text())["records"] == 480
    assert _same_output(kept, clean)


def test_json_nested_too_deeply_in_a_journal_or_index_is_one_line(src, tmp_path):
    """json's parser recurses: a crafted journal or index.json nested 100,000 deep raised
    RecursionError (a traceback). A journal line so nested ends the journal there, as a torn
    line does (a first line so: no journal at all, and OUT's files are then not shardpack's to
    replace); such an index is unreadable, in one line."""
    out = tmp_path / "out"
    pack(src, out, PackOptions(shards=2, workers=1))
    deep = "[" * 100_000 + "]" * 100_000
    journal = out / ".shardpack.journal"
    journal.write_text(deep + "\n" + journal.read_text())
    (out / "index.json").unlink()
    with pytest.raises(OutputError, match="exists and was not written by shardpack"):
        pack(src, out, PackOptions(shards=2, workers=1, resume=True))
    (out / "index.json").write_text(deep)
    run = _cli("verify", str(out))
    assert run.returncode == 2 and "index.json: unreadable" in run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr
