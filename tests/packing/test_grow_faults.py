"""pack --append stopped (Ctrl-C, SIGKILL, a kill as a shard lands): the old dataset stays
whole, and a rerun ends byte-identical to an uninterrupted append. Real processes and signals;
apart from test_grow.py, which loads TensorFlow, so that these waits run beside it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shardpack.read.stream import iter_examples
from tests.helpers import (
    gone,
    handed_over,
    image,
    run_cli,
    same_grown,
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
    run = subprocess.Popen([sys.executable, "-m", "shardpack", "pack", str(src), str(out),
                            "--append", *JOB], stderr=subprocess.PIPE, text=True)  # fmt: skip
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
    run = subprocess.Popen([sys.executable, "-m", "shardpack", "pack", str(src), str(out),
                            "--append", *JOB], stderr=subprocess.PIPE, text=True)  # fmt: skip
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
