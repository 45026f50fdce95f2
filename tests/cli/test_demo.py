"""The built-in demo: its sample folder holds exactly what was asked, and it prints next steps
that work as printed."""

from __future__ import annotations

import errno
import json
import resource
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shardpack.cli import app
from shardpack.demo import SHAPES, make_sample
from shardpack.errors import OutputError
from tests import forkserver
from tests.helpers import ctrl_c_as_opencv_loads, wait_for

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_a_smaller_sample_replaces_a_larger_one(tmp_path: Path):
    out = tmp_path / "d"
    first = ["demo", str(out), "--per-class", "6", "--workers", "1", "--no-progress"]
    assert runner.invoke(app, first).exit_code == 0
    result = runner.invoke(app, ["demo", str(out), "--per-class", "2", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "drew 10 sample images" in result.output and "packed 10 images" in result.output
    assert len(_images(out / "sample")) == 10
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no build folder left


def test_the_demo_s_out_read_for_its_shards_names_them(tmp_path: Path):
    """`shardpack inspect demo-out` (the demo's OUT, not OUT/shards): one line naming the pack."""
    out = tmp_path / "d"
    made = runner.invoke(app, ["demo", str(out), "--per-class", "1", "--no-progress"])
    assert made.exit_code == 0, made.output
    for command in ("inspect", "verify"):
        result = runner.invoke(app, [command, str(out)])
        assert result.exit_code == 2
        assert result.output.splitlines() == [
            f"error: {out / 'index.json'}: not found; {out} is no shardpack output, but its "
            f"folder shards is one: pass {out / 'shards'}"
        ]


def test_a_sample_folder_holding_other_files_is_refused_and_kept(tmp_path: Path):
    dest = tmp_path / "sample"
    make_sample(dest, per_class=1)
    mine = dest / SHAPES[0] / "holiday.jpg"
    mine.write_bytes(b"not the demo's")
    with pytest.raises(OutputError, match=r"holiday\.jpg: not a file the demo wrote"):
        make_sample(dest, per_class=1)
    assert mine.read_bytes() == b"not the demo's" and len(_images(dest)) == 6
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(OutputError, match=r"notes\.txt: not a file the demo wrote"):
        make_sample(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "x"


def test_the_next_line_works_as_printed(tmp_path: Path):
    """Run as `.venv/bin/shardpack` is (a console script, not on PATH), the demo's "next:"
    commands run as printed, from the same folder."""
    bin_dir = tmp_path / "venv-bin"
    bin_dir.mkdir()
    script = bin_dir / "shardpack"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom shardpack.cli import main\nmain()\n")
    script.chmod(0o755)
    run = subprocess.run(["venv-bin/shardpack", "demo", "d", "--per-class", "2", "--no-progress"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("next: ")]
    commands = line.removeprefix("next: ").split("  |  ")
    assert commands[0] == "venv-bin/shardpack verify d/shards"
    for command in commands:
        done = subprocess.run(shlex.split(command), cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, (command, done.stderr)


def test_make_demo_installs_the_runtime_only_and_make_test_adds_the_extras():
    if subprocess.run(["which", "make"], capture_output=True).returncode != 0:
        pytest.skip("make is not installed")
    plan = {
        target: subprocess.run(
            ["make", "-n", "-B", target], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout
        for target in ("demo", "test")
    }
    pinned = "pip install --quiet -c constraints.txt -e"  # the versions make test passed with
    assert f"{pinned} .\n" in plan["demo"] and "[test]" not in plan["demo"]
    assert f"{pinned} '.[test]'" in plan["test"]


def test_files_of_yours_in_the_shards_folder_are_refused_and_kept(tmp_path: Path):
    """A rerun replaces the demo's own shards; an index.json and a labels file of the user's
    under those names are refused (exit 2, one line) and kept, unless --overwrite."""
    shards = tmp_path / "d" / "shards"
    shards.mkdir(parents=True)
    (shards / "index.json").write_text('{"my": "index"}')
    (shards / "label.labels.txt").write_text("mine\n")
    args = ["demo", str(tmp_path / "d"), "--per-class", "2", "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "--overwrite" in result.output, result.output
    assert (shards / "index.json").read_text() == '{"my": "index"}'
    assert (shards / "label.labels.txt").read_text() == "mine\n"
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0
    assert json.loads((shards / "index.json").read_text())["splits"]["train"]["num_records"] == 10
    again = runner.invoke(app, [*args[:3], "3", "--no-progress"])  # an earlier demo's: replaced
    assert again.exit_code == 0, again.output
    assert json.loads((shards / "index.json").read_text())["splits"]["train"]["num_records"] == 15


def test_a_dataset_of_yours_in_the_shards_folder_is_refused_and_kept(tmp_path: Path):
    """shardpack's own output, but not the demo's (another dataset packed there): kept."""
    from tests.helpers import make_tree

    shards = tmp_path / "d" / "shards"
    src = make_tree(tmp_path / "mine", {"cat": 2})
    assert runner.invoke(app, ["pack", str(src), str(shards), "--no-progress"]).exit_code == 0
    before = {p.name: p.read_bytes() for p in shards.iterdir()}
    result = runner.invoke(app, ["demo", str(tmp_path / "d"), "--per-class", "2", "--no-progress"])
    assert result.exit_code == 2 and "--overwrite" in result.output, result.output
    assert {p.name: p.read_bytes() for p in shards.iterdir()} == before


@pytest.mark.parametrize("planted", ["shards", "sample"])
def test_a_link_at_the_demo_s_folders_is_refused_not_written_through(tmp_path: Path, planted):
    """The demo writes OUT/shards and OUT/sample as its own: a link planted there had it pack a
    whole dataset into the folder the link pointed at."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / planted).symlink_to(elsewhere)
    result = runner.invoke(app, ["demo", str(tmp_path / "d"), "--per-class", "2", "--no-progress"])
    assert result.exit_code == 2 and "is a link; the demo writes into" in result.output
    assert list(elsewhere.iterdir()) == [] and (tmp_path / "d" / planted).is_symlink()


def test_an_out_that_is_a_file_is_named_itself(tmp_path: Path):
    """`shardpack demo FILE` names FILE, not FILE/sample (which is no file: it cannot be)."""
    mine = tmp_path / "notes.txt"
    mine.write_text("mine")
    result = runner.invoke(app, ["demo", str(mine), "--per-class", "1", "--no-progress"])
    assert result.exit_code == 2
    assert f"error: {mine}: is a file; the demo needs a folder there" in result.output
    assert mine.read_text() == "mine" and sorted(tmp_path.iterdir()) == [mine]


def test_an_empty_out_is_refused_not_taken_for_the_current_folder(tmp_path: Path, monkeypatch):
    """`shardpack demo "$OUT"` with OUT unset drew the sample and packed it in the current
    folder (typer made '' the path '.'), as pack did before it refused an empty OUT."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["demo", "", "--per-class", "1", "--no-progress"])
    assert result.exit_code == 2
    assert "error: OUT is an empty string (''); pass a folder or URL, or '.'" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_demo_stopped_as_it_draws_leaves_nothing_it_made(tmp_path: Path, sig, code):
    """`timeout -s INT 1 shardpack demo d2` left an empty d2/ behind (the sample's build
    folder was removed, not the folder made for it); the folders it made above OUT too."""
    out = tmp_path / "new" / "d2"
    demo = ["demo", str(out), "--per-class", "100000", "--no-progress"]
    run = forkserver.start(forkserver.SHARDPACK, *demo)
    try:  # stopped once the sample's first images are drawn
        wait_for(lambda: any(p.is_file() for p in out.glob(".sample-*/*/*")))
        run.send_signal(sig)
        stderr = run.communicate(timeout=60)[1]
    finally:
        run.kill()
    assert run.returncode == code, stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert list(tmp_path.iterdir()) == []


def test_a_demo_stopped_as_it_packs_keeps_only_what_was_there(tmp_path: Path):
    """Stopped as the workers fork (Ctrl-C then), the demo left OUT/sample and a half-made
    OUT/shards to resume, which the demo cannot: both go, and a file of the user's in OUT
    stays."""
    out = tmp_path / "d2"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    code = ("import os, signal, sys\n"
            "os.register_at_fork(before=lambda: os.kill(os.getpid(), signal.SIGINT))\n"
            "from shardpack.__main__ import main\n"
            f"sys.argv = ['shardpack', 'demo', {str(out)!r}, '--per-class', '2', '--workers', "
            "'2', '--no-progress']\n"
            "main()\n")  # fmt: skip
    run = forkserver.run(code, timeout=120, start_new_session=True)
    assert run.returncode == 130, run.stderr
    assert run.stderr.strip() == "interrupted" and "drew 10 sample images" in run.stdout
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    assert (out / "mine.txt").read_text() == "mine"


@pytest.mark.parametrize("made", [True, False])
def test_a_demo_that_fails_leaves_nothing_it_made_and_says_to_run_it_again(tmp_path: Path, made):
    """A demo whose pack failed (a full disk; here the file size limit) left OUT/sample and a
    half-made OUT/shards, and said to rerun with --resume, a flag the demo does not take: what
    it made goes, as on a stop, and the line says to run the demo again."""
    out = tmp_path / "new" / "d" if made else tmp_path / "d"
    if not made:
        out.mkdir()
        (out / "mine.txt").write_text("mine")

    # room for each drawn image, not for a shard of 40 of them
    run = forkserver.run(forkserver.SHARDPACK, "demo", str(out), "--per-class", "40", "--workers",
                         "1", "--no-progress", timeout=120,
                         limits=((resource.RLIMIT_FSIZE, 32_000),))  # fmt: skip
    assert run.returncode == 2 and "drew 200 sample images" in run.stdout, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert "cannot write (File too large)" in line and line.endswith("then run the demo again")
    assert "--resume" not in line and "Traceback" not in run.stderr
    if made:
        assert list(tmp_path.iterdir()) == []  # OUT and the folder above it it made
    else:
        assert [p.name for p in out.iterdir()] == ["mine.txt"]
        assert (out / "mine.txt").read_text() == "mine"


def test_without_resume_replaces_only_the_advice_to_resume():
    full = OutputError.writing("d/shards/x.partial", OSError(errno.ENOSPC, "No space left"))
    assert full.options == ("resume",)
    said = full.without_resume("run the demo again")
    assert type(said) is OutputError and said.options == ()
    assert str(said) == ("d/shards/x.partial: cannot write (No space left); free some space, "
                         "then run the demo again")  # fmt: skip
    other = OutputError("d: is locked by another run")
    assert other.without_resume("run the demo again") is other


@pytest.mark.slow
def test_a_ctrl_c_as_opencv_loads_stops_the_demo(tmp_path: Path):
    """shardpack.demo imported OpenCV at its top, outside stops_held: a Ctrl-C as the demo
    started was swallowed by OpenCV's loader, and it drew and packed the sample, exit 0."""
    out = tmp_path / "d"
    run = ctrl_c_as_opencv_loads("", "demo", str(out), "--per-class", "2", "--workers", "1",
                                 "--no-progress")  # fmt: skip
    assert run.returncode == 130, run.stdout + run.stderr
    assert not out.exists() or not any(out.iterdir())  # a stopped demo leaves nothing it made
