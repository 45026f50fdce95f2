"""pack --append stopped (Ctrl-C, SIGKILL, a kill as a shard lands): the old dataset stays
whole, and a rerun ends byte-identical to an uninterrupted append. Real processes and signals;
apart from test_grow.py, which loads TensorFlow, so that these waits run beside it."""

from __future__ import annotations

import json
import os
import shutil
import signal
from fnmatch import fnmatch
from pathlib import Path

import pytest

from shardpack.read.stream import iter_examples
from tests import forkserver
from tests.helpers import (
    aged,
    gone,
    handed_over,
    image,
    make_tree,
    one_line_error,
    run_cli,
    same_grown,
    stopped,
    wait_for,
    worker_pids,
    write_image,
)

# Enough new shards that a kill lands mid-run: PNG of these is ~200 KiB, 2 to a shard.
JOB = ["--encode", "png", "--shard-size", "400KiB", "--workers", "2", "--no-progress"]


def _grow_src(root: Path) -> Path:
    src = root / "src"
    for i in range(8):
        write_image(src / f"c{i % 2}" / f"old_{i:03d}.jpg", image(i, height=240, width=320))
    return src


def _grow_more(src: Path) -> None:
    for i in range(160):
        write_image(src / f"c{i % 3}" / f"new_{i:03d}.jpg", image(1000 + i, height=240, width=320))


@pytest.mark.slow
# Ctrl-C in make test; SIGKILL, which leaves the same journal to the rerun, in test-long.
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGKILL, marks=pytest.mark.long),
                                 signal.SIGINT])  # fmt: skip
def test_a_stopped_append_leaves_the_old_dataset_and_a_rerun_ends_identical(tmp_path, sig):
    src = _grow_src(tmp_path)
    clean, out = tmp_path / "clean", tmp_path / "out"
    for where in (clean, out):
        assert run_cli("pack", str(src), str(where), *JOB).returncode == 0
    old_index = (out / "index.json").read_bytes()
    _grow_more(src)
    assert run_cli("pack", str(src), str(clean), "--append", *JOB).returncode == 0
    run = forkserver.start(forkserver.SHARDPACK, "pack", str(src), str(out), "--append", *JOB)
    journal = out / ".shardpack.journal"

    def written() -> bool:  # the append's journal holds a finished shard
        lines = journal.read_bytes().splitlines() if journal.exists() else []
        return len(lines) >= 2 and b'"grow": "append"' in lines[0]

    wait_for(written)
    workers = worker_pids(run.pid)
    run.send_signal(sig)
    run.wait(timeout=30)
    wait_for(lambda: gone(workers))
    assert (out / "index.json").read_bytes() == old_index  # the old dataset, whole
    assert run_cli("verify", str(out)).returncode == 0
    assert len(list(iter_examples(out))) == 8
    rerun = run_cli("pack", str(src), str(out), "--append", *JOB)
    assert rerun.returncode == 0, rerun.stderr
    same_grown(out, clean)
    shutil.rmtree(clean)


@pytest.mark.slow
def test_an_append_killed_as_its_first_shard_lands_reruns(tmp_path):
    # Held, the parent cannot commit nor journal the shard a worker hands over (before, the
    # worker renamed it into place: killed then, the parent left that shard beside the old
    # journal, and the rerun refused it as a stray: 'is there, but no index lists it')
    src = _grow_src(tmp_path)
    clean, out = tmp_path / "clean", tmp_path / "out"
    for where in (clean, out):
        assert run_cli("pack", str(src), str(where), *JOB).returncode == 0
    listed = {p.name for p in out.glob("src-train.*")}
    _grow_more(src)
    assert run_cli("pack", str(src), str(clean), "--append", *JOB).returncode == 0
    run = forkserver.start(forkserver.SHARDPACK, "pack", str(src), str(out), "--append", *JOB)
    wait_for(lambda: len(worker_pids(run.pid)) == 2)
    workers = worker_pids(run.pid)
    # a worker writing a shard (forked, a worker may still wait for its task from the parent)
    wait_for(lambda: any(out.glob(".src-train.*.partial"))
             or {p.name for p in out.glob("src-train.*")} - listed)  # fmt: skip
    run.send_signal(signal.SIGSTOP)
    try:  # a new shard written whole, handed over, or committed before the stop
        wait_for(lambda: handed_over(out, ".src-train.*.partial", workers)
                 or {p.name for p in out.glob("src-train.*")} - listed)  # fmt: skip
    finally:
        run.kill()
        run.wait(timeout=30)
    wait_for(lambda: gone(workers))
    rerun = run_cli("pack", str(src), str(out), "--append", *JOB)
    assert rerun.returncode == 0, rerun.stderr
    same_grown(out, clean)


def _writing(pid: int, pattern: str) -> bool:
    """Whether the process holds a file matching `pattern` open: a shard's temporary file."""
    try:
        return any(fnmatch(os.readlink(fd), pattern) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


# One worker (the packing process itself), two shards: an --update of one edited file writes
# one shard, and held while it writes that, it has finished none.
UPDATE_JOB = ["--encode", "png", "--shards", "2", "--workers", "1", "--no-progress"]


def _update_held_mid_shard(
    root: Path,
) -> tuple[Path, Path, Path, forkserver.Child, dict]:
    """SRC packed twice (OUT, and a clean copy it then --update's), one file edited to its own
    size (the pack's plan unchanged), and an --update of OUT stopped (SIGSTOP) mid-shard; with
    OUT's index.json and journal as it began."""
    src = root / "src"
    for i in range(16):  # BMP: an edit keeps the file's size
        write_image(src / f"c{i % 2}" / f"{i:03d}.bmp", image(i, height=240, width=320))
    aged(src)
    clean, out = root / "clean", root / "out"
    for where in (clean, out):
        assert run_cli("pack", str(src), str(where), *UPDATE_JOB).returncode == 0
    write_image(src / "c0" / "000.bmp", 255 - image(0, height=240, width=320))
    assert run_cli("pack", str(src), str(clean), "--update", *UPDATE_JOB).returncode == 0
    before = {name: (out / name).read_bytes() for name in ("index.json", ".shardpack.journal")}
    run = forkserver.start(
        forkserver.SHARDPACK, "pack", str(src), str(out), "--update", *UPDATE_JOB
    )
    partial = f"{out}/.src-train.tfrecord-*.partial"
    wait_for(lambda: _writing(run.pid, partial))
    run.send_signal(signal.SIGSTOP)
    wait_for(lambda: stopped(run.pid))  # checked after, none of its threads can land it
    assert _writing(run.pid, partial)  # held mid-shard: no shard of it can land
    return src, out, clean, run, before


@pytest.mark.slow
def test_an_update_stopped_before_a_shard_lands_leaves_the_datasets_journal(tmp_path):
    # A grow begins its journal before its first shard lands; stopped before one did, it
    # removed that journal, the dataset's own gone with it: the pack's plain rerun over the
    # dataset then wrote every shard again, where it keeps those whose files are unchanged
    src, out, clean, run, before = _update_held_mid_shard(tmp_path)
    run.send_signal(signal.SIGINT)
    run.send_signal(signal.SIGCONT)
    assert run.wait(timeout=30) == 130, run.stderr.read()
    # not "no index written; rerun with --resume": the dataset's index stands, and the same
    # command resumes
    assert run.stderr.read().splitlines()[-1] == (
        "interrupted: the dataset in OUT stays whole; run the same command again to finish (the "
        "shards this run finished are kept)"
    )
    # the dataset whole, and its journal as the update found it (the old code: none)
    assert {name: (out / name).read_bytes() for name in before} == before
    assert run_cli("verify", str(out)).returncode == 0
    again = Path(shutil.copytree(out, tmp_path / "again"))
    plain = run_cli("pack", str(src), str(again), *UPDATE_JOB, "--json")
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout)["shards_kept"] == 1  # the shard of unchanged files
    rerun = run_cli("pack", str(src), str(out), "--update", *UPDATE_JOB)
    assert rerun.returncode == 0, rerun.stderr
    same_grown(out, clean)


@pytest.mark.slow
def test_the_pack_again_over_a_killed_update_is_told_the_update_stopped(tmp_path):
    # Killed, the update leaves its journal (its head: a kill as a shard lands leaves no shard
    # that no journal vouches for); the pack's plain rerun was told the dataset had grown by
    # it, which it had not
    src, out, clean, run, _ = _update_held_mid_shard(tmp_path)
    run.kill()
    run.wait(timeout=30)
    _told_then_finished(src, out, clean, "--update", UPDATE_JOB)


def _told_then_finished(src: Path, out: Path, clean: Path, grow: str, job: list[str]) -> None:
    """Over a killed grow, the pack's own command is refused naming the one command to run
    (it said "run it again", naming none); that command finishes it as `clean` was grown."""
    one_line_error(run_cli("pack", str(src), str(out), *job),
                   f"{out}: holds an {grow} stopped before it finished (the dataset is as it "
                   f"was before it); run the pack again with {grow} to finish it")  # fmt: skip
    rerun = run_cli("pack", str(src), str(out), grow, *job)
    assert rerun.returncode == 0, rerun.stderr
    same_grown(out, clean)


@pytest.mark.slow
def test_an_append_killed_after_a_shard_of_skips_leaves_no_empty_file_under_a_shard_name(
    tmp_path,
):
    # A grow's shard whose every item is skipped held no record: it landed as a 0-byte file
    # under its final name, journaled, for the merge to remove; killed before the merge, the
    # run left it there beside the old dataset, a file no index lists under a shard's name
    job = ["--encode", "png", "--shard-size", "1KiB", "--workers", "1", "--no-progress"]
    src = _grow_src(tmp_path)
    clean, out = tmp_path / "clean", tmp_path / "out"
    for where in (clean, out):
        assert run_cli("pack", str(src), str(where), *job).returncode == 0
    listed = {p.name for p in out.glob("src-train.*")}
    old_index = (out / "index.json").read_bytes()
    cut = (src / "c0" / "old_000.jpg").read_bytes()
    for i in range(200):  # each skipped as its worker reads it: a shard of none a file
        (src / "c1" / f"bad_{i:03d}.jpg").write_bytes(cut[: len(cut) // 2])
    assert run_cli("pack", str(src), str(clean), "--append", *job).returncode == 0
    run = forkserver.start(forkserver.SHARDPACK, "pack", str(src), str(out), "--append", *job)
    journal = out / ".shardpack.journal"

    def journaled() -> bool:  # the append's journal holds a finished shard (one of skips)
        lines = journal.read_bytes().splitlines() if journal.exists() else []
        return len(lines) >= 2 and b'"grow": "append"' in lines[0]

    wait_for(journaled)
    run.kill()
    run.wait(timeout=30)
    assert (out / "index.json").read_bytes() == old_index  # killed before its merge
    assert {p.name for p in out.glob("src-train.*")} == listed  # no empty shard left
    _told_then_finished(src, out, clean, "--append", job)


def test_a_full_disk_at_the_grows_index_leaves_it_and_the_same_command_finishes(tmp_path):
    """A real EFBIG (RLIMIT_FSIZE, in a process of its own) as a grow writes index.json, the one
    file over the limit (it names SRC's 1,000 long-named notes as ignored): the files written
    before it (the card, croissant.json, TFDS's metadata, contents.json) tell the grown dataset,
    index.json the old one, which commits the grow. The line said only to free some space: it
    says now that the same command finishes the grow, and it does, as if never stopped."""
    import resource

    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    clean, out = tmp_path / "clean", tmp_path / "out"
    job = ("--workers", "1", "--no-progress")
    for where in (clean, out):
        assert run_cli("pack", str(src), str(where), *job).returncode == 0
    old = (out / "index.json").read_bytes()
    for i in range(1000):
        (src / "cat" / f"note_{i:04d}_{'x' * 150}.txt").write_text("not an image")
    write_image(src / "cat" / "new.jpg", image(77))
    assert run_cli("pack", str(src), str(clean), "--append", *job).returncode == 0
    sizes = {p.name: p.stat().st_size for p in clean.iterdir()}
    limit = 2 * max(size for name, size in sizes.items() if name != "index.json")
    assert limit < sizes["index.json"]

    run = forkserver.run(forkserver.SHARDPACK, "pack", str(src), str(out), "--append", *job,
                         timeout=120, limits=((resource.RLIMIT_FSIZE, limit),))  # fmt: skip
    one_line_error(run, f"{out / 'index.json'}: File too large", "free some space",
                   "then run the same command again to finish the grow")  # fmt: skip
    assert (out / "index.json").read_bytes() == old
    assert len(list(iter_examples(out))) == 6  # the old dataset, whole
    rerun = run_cli("pack", str(src), str(out), "--append", *job)
    assert rerun.returncode == 0, rerun.stderr
    same_grown(out, clean)
