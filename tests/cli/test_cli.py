"""The command line: a thin face on the library, one-line errors, no TensorFlow at start-up."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shardpack.cli import app
from shardpack.layout import LOCK_NAME
from tests import forkserver
from tests.helpers import (
    cli,
    drop_permission_override,
    image,
    make_tree,
    one_line_error,
    run_cli,
    wait_for,
    write_csv,
    write_image,
    write_jsonl,
)

runner = CliRunner()
SHARDPACK = [sys.executable, "-m", "shardpack"]
REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "src", {"a": 4, "b": 3})


def test_pack_verify_inspect(src: Path, tmp_path: Path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["pack", str(src), str(out), "--shards", "2", "--workers", "1",
                                 "--encode", "png", "--no-progress"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "packed 7 images into 2 shards" in result.output
    result = runner.invoke(app, ["verify", str(out), "--decode"])
    assert result.exit_code == 0 and result.output.startswith("OK: 2 shards, 7 records")
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 0
    assert "split train: 7 records in 2 shards" in result.output and "encoding png" in result.output


def test_inspect_counts_a_shard_of_one_record_in_the_singular(src: Path, tmp_path: Path):
    out = tmp_path / "out"
    runner.invoke(app, ["pack", str(src), str(out), "--shards", "7", "--workers", "1"])
    shown = runner.invoke(app, ["inspect", str(out)]).output
    assert re.search(r"tfrecord-00000-of-00007 +1 record  ", shown) and "1 records" not in shown


def test_inspect_counts_a_class_as_it_counts_records(tmp_path: Path):
    """A class of 1,000 records is shown '1,000', as the split's records are, not '1000'."""
    out = tmp_path / "out"
    make_tree(tmp_path / "src", {"a": 1000, "b": 1})
    packed = runner.invoke(app, ["pack", str(tmp_path / "src"), str(out), "--workers", "1",
                                 "--no-progress"])  # fmt: skip
    assert packed.exit_code == 0, packed.output
    shown = runner.invoke(app, ["inspect", str(out), "--records", "0"]).output
    assert "split train: 1,001 records" in shown
    assert re.search(r"\n    a +1,000  #{30}\n    b +1  #?\n", shown), shown


def test_json_outputs(src: Path, tmp_path: Path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["pack", str(src), str(out), "--json", "--workers", "1"])
    summary = json.loads(result.stdout)
    assert summary["records"] == 7 and summary["splits"]["train"]["num_records"] == 7
    report = json.loads(runner.invoke(app, ["verify", str(out), "--json"]).stdout)
    assert report["ok"] and report["records"] == 7 and report["faults"] == []
    described = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)
    assert described["splits"]["train"]["class_counts"] == {"a": 4, "b": 3}


def test_the_summary_counts_the_reasons_of_skipped_items_it_does_not_name(tmp_path: Path):
    """Five skipped items were named and the rest left unsaid: a class left out of --classes
    hid that another image was broken. The reasons of all are counted under them."""
    src = make_tree(tmp_path / "src", {"a": 2, "b": 6})
    (src / "a" / "z.jpg").write_bytes(b"\xff\xd8\xff\xe0cut")
    args = ["pack", str(src), str(tmp_path / "out"), "--classes", "a", "--workers", "1"]
    run = runner.invoke(app, [*args, "--no-progress"])
    assert run.exit_code == 0, run.output
    lines = run.stdout.splitlines()
    start = lines.index("skipped 7 items (all listed in index.json):")
    assert lines[start + 6] == "  by reason: class '...' is not in --classes 6, truncated JPEG 1"
    summary = json.loads(runner.invoke(app, [*args, "--json", "--no-progress"]).stdout)
    assert summary["skip_reasons"] == {"class '...' is not in --classes": 6, "truncated JPEG": 1}


def test_json_output_is_utf8_that_gives_back_a_name_of_undecodable_bytes(tmp_path: Path):
    """A skipped file named in Latin-1 (`caf\\xe9.jpg`, kept by os.fsdecode as a lone
    surrogate) was written to stdout as its raw byte: no UTF-8, so `json.load` of the output
    failed (and a locale without surrogateescape would have failed the write). It is the JSON
    escape of the surrogate, which json.loads and os.fsencode turn back into the name."""
    src = make_tree(tmp_path / "src", {"a": 2})
    name = os.fsdecode(b"caf\xe9.jpg")
    (src / "a" / name).write_bytes(b"not an image")
    args = ["pack", str(src), str(tmp_path / "out"), "--json", "--workers", "1", "--no-progress"]
    run = forkserver.start(forkserver.SHARDPACK, *args)
    stdout = run.stdout.buffer.read()  # the bytes written, not text decoded on the way
    stderr = run.communicate(timeout=120)[1]
    assert run.returncode == 0, stderr
    (skipped,) = json.loads(stdout.decode("utf-8"))["skipped_items"]
    assert os.fsencode(skipped["key"]) == b"a/caf\xe9.jpg"


# A real SIGINT (or `signal`), sent by the CLI's own process as it first imports `module`:
# Ctrl-C at a known point of a command, with no wait. typer is the first import the command
# makes that `import shardpack` does not (Ctrl-C in its first 0.3 s); a command's library
# module, inside the command.
_CTRL_C_AT_IMPORT = """
import os, runpy, signal, sys

class Finder:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.{signal})

sys.meta_path.insert(0, Finder())
sys.argv = {argv!r}
runpy.run_module("shardpack", run_name="__main__", alter_sys=True)
"""


def _ctrl_c_at_import(
    module: str, *args: str, signal: str = "SIGINT"
) -> subprocess.CompletedProcess:
    script = _CTRL_C_AT_IMPORT.format(module=module, argv=["shardpack", *args], signal=signal)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def test_ctrl_c_as_the_command_starts_ends_quietly():
    # Python's traceback of the import it stopped ('from shardpack import cli' ... 'import
    # typer' ... KeyboardInterrupt), where Ctrl-C later ends in exit 130 and no traceback
    done = _ctrl_c_at_import("typer", "--help")
    assert done.returncode == 130 and done.stderr == "", done.stderr[-2000:]
    assert done.stdout == ""


def test_ctrl_c_or_sigterm_in_a_command_says_so_in_one_line(tmp_path: Path):
    # verify ended in exit 130 with nothing said (typer's own exit), where pack says its line
    done = _ctrl_c_at_import("shardpack.read.verify", "verify", str(tmp_path))
    assert (done.returncode, done.stderr, done.stdout) == (130, "interrupted\n", "")
    # SIGTERM too: exit 143 in one line, where it said nothing either
    done = _ctrl_c_at_import("shardpack.read.verify", "verify", str(tmp_path), signal="SIGTERM")
    assert (done.returncode, done.stderr, done.stdout) == (143, "terminated\n", "")


def test_pack_summary_shows_the_classes_splits_and_features(tmp_path: Path):
    src = make_tree(tmp_path / "src", {f"class{i:02d}": 1 for i in range(10)})
    rows = [
        {
            "file": str(p.relative_to(src)),
            "label": p.parent.name,
            "split": split,
            "boxes": [[0.1, 0.2, 0.3, 0.4]],
            "caption": "a photo",
        }
        for p, split in zip(sorted(src.rglob("*.jpg")), ["train", "test"] * 5, strict=True)
    ]
    write_jsonl(src / "labels.jsonl", rows)
    run = _run("pack", str(src / "labels.jsonl"), str(tmp_path / "out"), "--workers", "1",
               "--no-progress")  # fmt: skip
    assert run.returncode == 0, run.stderr
    names = ", ".join(f"class{i:02d}" for i in range(8))
    assert f"\n10 classes: {names}, ...\n" in run.stdout
    assert re.search(r"\n  test +5 records .*\n  train +5 records", run.stdout), run.stdout
    assert "features: label (class), boxes (float32 list of 4), caption (text)" in run.stdout
    run = _run("pack", str(src / "labels.jsonl"), str(tmp_path / "out"), "--overwrite", "--json",
               "--workers", "1")  # fmt: skip
    summary = json.loads(run.stdout)
    assert summary["num_classes"] == 10 and summary["classes"][-1] == "class09"
    assert summary["features"] == {"label": "class", "boxes": "float32 list of 4",
                                   "caption": "text"}  # fmt: skip
    write_jsonl(src / "labels.jsonl", [{"file": r["file"]} for r in rows])
    run = _run("pack", str(src / "labels.jsonl"), str(tmp_path / "out"), "--overwrite",
               "--workers", "1", "--no-progress")  # fmt: skip
    assert "\nno classes: unlabeled\nfeatures: the image only\n" in run.stdout, run.stdout


def test_pack_summary_names_what_it_skipped_and_ignored_and_warns_of_empty_classes(
    src: Path, tmp_path: Path
):
    (src / "a" / "broken.jpg").write_bytes(b"not a jpeg")
    (src / "a" / "notes.txt").write_text("x")
    os.mkfifo(src / "b" / "pipe.png")
    (src / "c").mkdir()
    run = _run("pack", str(src), str(tmp_path / "out"), "--workers", "1", "--no-progress")
    assert run.returncode == 0, run.stderr
    assert "skipped 2 items" in run.stdout
    assert "b/pipe.png: not a regular file (a FIFO)" in run.stdout
    assert "a/broken.jpg: not an image" in run.stdout
    assert "ignored 1 file not taken for an image: a/notes.txt\n" in run.stdout
    # a phone's photos are told what to become
    for name in ("IMG_0001.HEIC", "IMG_0002.heic", "shot.avif"):
        (src / "b" / name).write_bytes(b"\0\0\0\x18ftypheic")
    run = _run("pack", str(src), str(tmp_path / "out"), "--workers", "1", "--no-progress",
               "--overwrite")  # fmt: skip
    assert (
        "ignored 4 files not taken for images: a/notes.txt, b/IMG_0001.HEIC, b/IMG_0002.heic, "
        "b/shot.avif\n  2 HEIC, 1 AVIF among them: photos of a format shardpack does not read; "
        "convert them to JPEG or PNG in SRC to pack them (e.g. heif-convert, ImageMagick's "
        "magick)\n"
    ) in run.stdout, run.stdout
    assert f"warning: class 'c' ({src / 'c'}) holds no images" in run.stderr


def test_inspect_shows_multi_label_unlabeled_and_extra_features(tmp_path: Path):
    for i in range(4):
        write_image(tmp_path / "img" / f"{i}.jpg", image(i, height=20, width=30))
    box = [[0.1, 0.2, 0.5, 0.25]]
    rows = [{"file_name": f"img/{i}.jpg", "label": ["cat", "dog"][: 1 + i % 2], "boxes": box,
             "caption": f"pic {i}", "notes": "x" * 80} for i in range(4)]  # fmt: skip
    write_jsonl(tmp_path / "coco.jsonl", rows)
    write_csv(tmp_path / "plain.csv", [{"path": f"img/{i}.jpg", "score": i / 4} for i in range(4)])
    for table, expected in [
        ("coco.jsonl", "(HxWxC)"),
        ("plain.csv", "no label, jpeg 20x30x3 (HxWxC)"),
    ]:
        out = tmp_path / table.replace(".", "-")
        packed = _run("pack", str(tmp_path / table), str(out), "--no-progress", "--workers", "1")
        assert packed.returncode == 0, packed.stderr
        shown = _run("inspect", str(out))
        assert shown.returncode == 0 and not shown.stderr, shown.stderr
        assert expected in shown.stdout
    assert {p.name.split("-")[0] for p in (tmp_path / "coco-jsonl").glob("*.tfrecord-*")} == {
        "coco"
    }
    coco = _run("inspect", str(tmp_path / "coco-jsonl")).stdout
    assert "boxes=[[0.1, 0.2, 0.5, 0.25]]" in coco and "caption=pic" in coco
    assert f"notes={'x' * 57}..." in coco  # a long value says it was cut
    assert "labels [0, 1] (cat, dog)" in coco or "labels [0] (cat)" in coco
    plain = _run("inspect", str(tmp_path / "plain-csv")).stdout
    assert "score=" in plain and {
        p.name.split("-")[0] for p in (tmp_path / "plain-csv").glob("*.tfrecord-*")
    } == {"plain"}


def test_a_closed_output_pipe_is_exit_141_and_silent(src: Path, tmp_path: Path):
    out = tmp_path / "out"
    assert _run("pack", str(src), str(out), "--no-progress").returncode == 0
    for args in (["inspect", str(out)], ["verify", str(out)]):  # as `shardpack ... | head -0`
        run = forkserver.start(forkserver.SHARDPACK, *args)
        run.stdout.close()  # before the command has started: its first write meets EPIPE
        stderr = run.communicate(timeout=120)[1]
        assert (run.returncode, stderr) == (141, ""), stderr


def test_a_closed_pipe_of_both_streams_is_exit_141(tmp_path: Path):
    """`shardpack pack SRC OUT --workers two 2>&1 | head -0`: the usage error's line met the
    closed pipe in main's handler, and Python's traceback (to nowhere) ended it in exit 1."""
    read, write = os.pipe()
    os.close(read)
    args = ["pack", str(tmp_path), str(tmp_path / "out"), "--workers", "two"]
    run = subprocess.run([*SHARDPACK, *args], stdout=write, stderr=write, timeout=60)
    os.close(write)
    assert run.returncode == 141


def test_the_summary_lines_up_long_split_names(tmp_path: Path):
    make_tree(tmp_path / "src" / "train", {"a": 2, "b": 1})
    make_tree(tmp_path / "src" / "validation", {"a": 1, "b": 1})
    run = _run("pack", str(tmp_path / "src"), str(tmp_path / "out"), "--no-progress")
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("  ") and "record" in line]
    assert len(rows) == 2 and len({row.index("record") for row in rows}) == 1, rows


def test_a_tiny_shard_size_is_warned_about_on_stderr(src: Path, tmp_path: Path):
    run = _run("pack", str(src), str(tmp_path / "out"), "--shard-size", "1kb", "--no-progress")
    assert run.returncode == 0, run.stderr
    assert "warning: split train: a shard size of 1,024 bytes leaves about 1.0 images" in run.stderr


def test_verify_exit_code_on_fault(src: Path, tmp_path: Path):
    out = tmp_path / "out"
    runner.invoke(app, ["pack", str(src), str(out), "--shards", "1", "--workers", "1"])
    shard = next(out.glob("*.tfrecord-*"))
    shard.write_bytes(shard.read_bytes()[:-3])
    result = runner.invoke(app, ["verify", str(out)])
    assert result.exit_code == 1
    assert f"FAULT {shard.name}" in result.output and "truncated" in result.output
    # the mend said once, after the faults, naming the shard
    assert f"damaged: 1 shard ({shard.name}); for each, restore it from a copy" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["pack", "{tmp}/missing", "{tmp}/out"], "no such folder"),
        (["pack", "{tmp}/empty", "{tmp}/out"], "no images found"),
        (["pack", "{src}", "{tmp}/afile"], "is a file"),
        (["pack", "{src}", "{tmp}/out", "--frobnicate"], "No such option"),
        # a resize mode typed as an option: click named --root for --crop, nothing for --corp
        (
            ["pack", "{src}", "{tmp}/out", "--corp"],
            "No such option: --corp; for that resize, write --resize WxH --resize-mode center-crop",
        ),
        (["pack", "{src}", "{tmp}/out", "--pad"], "write --resize WxH --resize-mode pad (see:"),
        (["pack", "{src}", "{tmp}/out", "--resize-modes"], "(Possible options: --resize, "),
        (
            ["pack", "{src}", "-weird"],
            "No such option: -w; for a path that starts with '-', write "
            "'./-weird' (or put '--' before the paths)",
        ),
        (["pack", "{src}", "{tmp}/out", "--encode", "gif"], "gif"),
        # what a number flag takes, where click said "'two' is not a valid int range"
        (["pack", "{src}", "{tmp}/out", "--workers", "two"], "'two' is not a whole number of 1 or"),
        (["pack", "{src}", "{tmp}/out", "--quality", "x"], "'x' is not a whole number from 1 to"),
        (
            ["pack", "{src}", "{tmp}/out", "--min-visibility", "x"],
            "'x' is not a number (see:",
        ),
        (["pack", "{src}", "{tmp}/out", "--resize", "big"], "WIDTHxHEIGHT"),
        (["pack", "{src}", "{tmp}/out", "--resize", "0x0"], "got: '0x0'"),
        (["verify", "{tmp}/empty"], "index.json: not found"),
        # given empty: refused, not taken for the option left out
        (["pack", "{src}", "{tmp}/out", "--classes", ""], "--classes: names no class"),
        (["pack", "{src}", "{tmp}/out", "--splits", " , "], "--splits names no split"),
        (["pack", "{src}", "{tmp}/out", "--split", ""], "--split must look like train=0.9"),
        (["pack", "{src}", "{tmp}/out", "--split", "a=0,b=1"], "must be above 0 and at most 1"),
        (["preview", "{tmp}/empty", "--seed", "-1"], "-1 is not in the range x>=0"),
        (["pack", "{tmp}/labels.csv", "{tmp}/out"], "labels.csv: no such file; check the manifest"),
        (["verify", "{tmp}/afile"], "afile: is a file, not a pack output; pass the folder that"),
        (["inspect", "{tmp}/afile"], "afile: is a file, not a pack output; pass the folder that"),
        # every command that reads OUT refuses a folder that is none with the same code
        (["report", "{tmp}/missing"], "missing: no such folder; pass the OUT of a pack run"),
        (["preview", "{tmp}/missing"], "missing: no such folder; pass the OUT of a pack run"),
        (["index-files", "{tmp}/empty"], "index.json: not found"),
        (["report", "{tmp}/empty", "--frobnicate"], "No such option"),
        # PackOptions says `resize_mode='pad'` to Python callers; the CLI names its flags
        (
            ["pack", "{src}", "{tmp}/out", "--resize-mode", "pad"],
            "--resize-mode pad needs --resize",
        ),
        (["pack", "{src}", "{tmp}/out", "--no-upscale"], "error: --no-upscale needs --resize"),
        (
            ["pack", "{src}", "{tmp}/out", "--format", "webdataset", "--compression", "gzip"],
            "--compression gzip is for --format tfrecord only; drop --compression",
        ),
        (
            ["pack", "{src}", "{tmp}/out", "--format", "webdataset", "--index-files"],
            "--format webdataset needs none: drop --index-files",
        ),
        (
            ["pack", "{src}", "{tmp}/out", "--resize", "40x40", "--max-pixels", "100"],
            "--resize 40x40 is over --max-pixels 100; pass a smaller size or raise --max-pixels",
        ),
        (["pack", "{src}", "{tmp}/out", "--scheduler", "x"], "--scheduler needs --backend dask"),
    ],
)
def test_bad_input_is_one_line_exit_2(src: Path, tmp_path: Path, args: list[str], message: str):
    (tmp_path / "empty").mkdir()
    (tmp_path / "afile").write_text("x")
    args = [a.format(tmp=tmp_path, src=src) for a in args]
    result = _run(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_options_left_out_this_time_are_named_in_one_line(src: Path, tmp_path: Path):
    """Packing again without the --split and --resize OUT was packed with ended in a traceback
    (a left-out option's value, None, shown as a split or a size); then said the journal's
    values in Python's form, `(('train', 0.5), ('test', 0.5))`: now as the user types them."""
    out = tmp_path / "out"
    first = _run("pack", str(src), str(out), "--split", "train=0.5,test=0.5", "--resize", "8x8")
    assert first.returncode == 0, first.stderr
    result = _run("pack", str(src), str(out), "--no-progress")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "no --resize (the journal's: --resize 8x8)" in result.stderr
    assert "no --split (the journal's: --split train=0.5,test=0.5)" in result.stderr
    again = _run("pack", str(src), str(tmp_path / "plain"), "--no-progress")
    assert again.returncode == 0, again.stderr
    added = _run("pack", str(src), str(tmp_path / "plain"), "--split", "a=0.5,b=0.5")
    assert "--split a=0.5,b=0.5 (the journal's: unset)" in added.stderr  # not Python's None


def test_an_empty_src_or_out_is_refused_not_taken_for_the_current_folder(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """`shardpack pack SRC "$OUT"` with OUT unset packed into the current folder, among what it
    held; an empty SRC packed the current folder."""
    here = make_tree(tmp_path / "here", {"a": 2, "b": 1})
    monkeypatch.chdir(here)
    for args, said in [((str(src), ""), "OUT is an empty string"),
                       (("", str(tmp_path / "out")), "SRC is an empty string")]:  # fmt: skip
        result = _run("pack", *args, "--no-progress")
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
        assert said in result.stderr and "'.' for the current folder" in result.stderr
    assert sorted(p.name for p in here.iterdir()) == ["a", "b"]
    assert not (tmp_path / "out").exists()


def test_a_quoted_tilde_is_refused_not_made_a_folder_named_so(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """`shardpack pack SRC "~/out"` (quoted: the shell left the `~`) packed into a new folder
    named `~` in the current one."""
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    for args, said in [((str(src), "~/out"), "OUT '~/out' starts with '~'"),
                       (("~/src", "out"), "SRC '~/src' starts with '~'")]:  # fmt: skip
        result = run_cli("pack", *args, "--no-progress", env={"HOME": str(home)})
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
        assert said in result.stderr and f"pass '{home}/" in result.stderr, result.stderr
    assert not (tmp_path / "~").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("no_color, coloured", [("", True), ("1", False)])
def test_no_color_turns_the_colour_of_errors_off_in_a_terminal(
    tmp_path: Path, no_color: str, coloured: bool
):
    import pty

    main, terminal = pty.openpty()
    env = {**os.environ, "NO_COLOR": no_color}
    done = subprocess.run([*SHARDPACK, "verify", str(tmp_path)], stdin=subprocess.DEVNULL,
                          stdout=terminal, stderr=terminal, env=env, timeout=60)  # fmt: skip
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # EIO: all read, the terminal's other end closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    assert done.returncode == 2 and b"index.json: not found" in shown, shown
    assert (b"\x1b[" in shown) == coloured, shown


def test_on_error_fail_names_the_file(src: Path, tmp_path: Path):
    (src / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0garbage")
    result = _run("pack", str(src), str(tmp_path / "out"), "--on-error", "fail", "--workers", "2")
    assert result.returncode == 2
    assert "a/broken.jpg" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "index.json").exists()


def test_help_and_import_stay_free_of_tensorflow():
    code = (
        "import sys, shardpack, shardpack.cli, shardpack.packing.packer, shardpack.packing.worker, "
        "shardpack.read.verify, shardpack.read.describe, shardpack.read.stream; "
        "print('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    result = _run("--help")
    assert result.returncode == 0 and "pack" in result.stdout and "verify" in result.stdout
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    imports = subprocess.run([*SHARDPACK, "--help"], capture_output=True, text=True, env=env)
    assert "tensorflow" not in imports.stderr and "cv2" not in imports.stderr


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in Linux's /proc")
def test_the_command_starts_numpy_with_one_blas_thread_unless_the_user_set_it():
    """OpenBLAS's idle threads spun ~0.1 s of CPU in every run; the user's own setting wins.
    The CLI's imports are frozen out of the collector's walks, which stays on."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    code = ("import gc, os, shardpack.__main__, numpy\nthreads = os.listdir('/proc/self/task')\n"
            "print(len(threads), gc.isenabled(), gc.get_freeze_count() > 0)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "1 True True", out.stderr
    code = "import os, shardpack.__main__; print(os.environ['OPENBLAS_NUM_THREADS'])"
    env["OPENBLAS_NUM_THREADS"] = "3"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "3", out.stderr


def test_a_folder_pack_imports_nothing_only_other_runs_read(tmp_path: Path):
    """Start-up: the network, VOC's XML, the copies' thread pool, grow, Dask's and the URL
    stores' code, a streamed list's columns, the containers not asked for, tarfile, the Parquet
    readers and --split's module stay unimported, and the near-duplicate hash's DCT matrix
    unmade."""
    src = make_tree(tmp_path / "src", {"a": 2})
    code = ("import runpy, sys\nnames = sys.argv.pop().split()\ntry:\n"
            "    runpy.run_module('shardpack', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print(sorted(m for m in names if m in sys.modules))\n"
            "print(sys.modules['shardpack.packing.near']._dct.cache_info().currsize)")  # fmt: skip
    unread = ("socket xml.etree.ElementTree concurrent.futures logging shardpack.packing.grow "
              "shardpack.containers.array_record shardpack.containers.webdataset "
              "shardpack.containers.parquet shardpack.packing.cluster shardpack.storage.remote "
              "shardpack.sources.tables.columns tarfile shardpack.sources.tables.chunks "
              "shardpack.sources.tables.parquet_reader shardpack.sources.splitting")  # fmt: skip
    argv = ["pack", str(src), str(tmp_path / "out"), "--workers", "1", unread]
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-2:] == ["[]", "0"], out.stdout + out.stderr


def test_a_pack_runs_no_collection_from_its_start_to_the_workers_fork(tmp_path: Path):
    """The start makes only what lives for the run (numpy's, joblib's and our modules, the
    listing, the plan): ~60 collections there found next to nothing. The workers fork with
    the collector on."""
    src = make_tree(tmp_path / "src", {"a": 3, "b": 3})
    code = ("import gc, os, runpy, sys\ncounts = [0]\n"
            "gc.callbacks.append(lambda phase, info: phase == 'start' and counts.__setitem__(0, "
            "counts[0] + 1))\nforked = []\n"
            "os.register_at_fork(before=lambda: forked or forked.append((counts[0], "
            "gc.isenabled())))\n"
            "try:\n    runpy.run_module('shardpack', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\nprint(forked[0])")  # fmt: skip
    argv = ["pack", str(src), str(tmp_path / "out"), "--workers", "2", "--shards", "2",
            "--no-progress", "--json"]  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    collections, enabled = eval(out.stdout.strip().splitlines()[-1])
    assert collections <= 5 and enabled, out.stdout + out.stderr


def test_demo(tmp_path: Path):
    result = runner.invoke(app, ["demo", str(tmp_path / "d"), "--per-class", "6", "--workers", "2",
                                 "--no-progress"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "packed 30 images into 4 shards" in result.output
    assert runner.invoke(app, ["verify", str(tmp_path / "d" / "shards")]).exit_code == 0


@pytest.mark.slow  # a benchmark run: seconds
def test_the_benchmark_harness_runs_from_the_checkout(src: Path, tmp_path: Path):
    """`shardpack bench` could not work from an installed package: the harness stays behind
    `make bench` / `python -m benchmarks.run`, and the CLI no longer offers it."""
    listing = _run("--help").stdout
    assert "bench" not in listing
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", str(src), "--contenders",
         "shardpack,ceiling,ceiling-parallel", "--workers", "1,2", "--repeat", "1", "--json",
         str(out), "--no-extras", "--cache", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (case,) = json.loads(out.read_text())["cases"]
    summary = {c["kind"]: c["summary"] for c in case["contenders"]}
    assert case["workload"]["num_images"] == 7
    assert summary["shardpack"]["images_per_s"] > 0 and summary["shardpack"]["failed"] == 0
    assert summary["ceiling"]["per_core_images_per_s"] > 0
    # the loop run in 2 processes at once, timed from their common start to the last end
    assert summary["ceiling-parallel"]["images"] == 7
    assert summary["ceiling-parallel"]["images_per_s"] > 0
    assert "ceiling (2 at once, measured)" in out.with_suffix(".md").read_text()
    assert (tmp_path / "bench.png").stat().st_size > 0


@pytest.mark.long  # a benchmark run and five fresh Pythons importing numpy: seconds
def test_the_io_ceiling_row_says_what_the_fixed_imports_take(src: Path, tmp_path: Path):
    """The passthrough-against-the-I/O-ceiling row gives, beside the ratio, what a fresh Python
    importing the libraries the design fixes (typer, numpy, joblib) takes of shardpack's wall:
    the part of its start-up the ceiling's loop does not pay and no code of ours can remove."""
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", str(src), "--encode", "keep", "--contenders",
         "shardpack,io-ceiling", "--workers", "2", "--repeat", "1", "--json", str(out),
         "--no-extras", "--cache", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    fixed = json.loads(out.read_text())["extras"]["fixed_imports"]
    assert fixed["imports"] == "import typer, numpy, numpy.random, joblib"
    assert 0 < fixed["wall_s"] < 60
    (row,) = [line for line in out.with_suffix(".md").read_text().splitlines()
              if "passthrough against the I/O ceiling" in line]  # fmt: skip
    assert f"importing typer, numpy and joblib alone (the design's): {fixed['wall_s']:.2f} s" in row


def test_the_benchmark_harness_passes_format_to_shardpack(src: Path, tmp_path: Path):
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", str(src), "--contenders", "shardpack",
         "--format", "webdataset", "--workers", "1", "--repeat", "1", "--json", str(out),
         "--no-extras", "--cache", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (case,) = json.loads(out.read_text())["cases"]
    (contender,) = case["contenders"]
    (run,) = contender["runs"]
    assert case["format"] == "webdataset" and run["ok"] and run["images"] == 7  # tar shards
    argv = run["steps"][0]["argv"]
    assert argv[argv.index("--format") + 1] == "webdataset"
    assert "--format webdataset" in (tmp_path / "bench.md").read_text()


def test_the_listing_benchmark_scans_and_plans_a_tree(src: Path):
    """benchmarks.listing calls the library's scan and plan directly (make bench-long): it broke
    once, unnoticed until the long run, when a signature it uses changed."""
    result = subprocess.run([sys.executable, "-m", "benchmarks.listing", str(src)],
                            capture_output=True, text=True, timeout=120, cwd=REPO)  # fmt: skip
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["files"] == 7 and figures["shards"] >= 1 and figures["files_per_s"] > 0


# ---- help, version, usage ------------------------------------------------------------------


def test_bare_shardpack_prints_usage_and_no_empty_error():
    result = _run()
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage:") and "pack" in result.stdout
    assert "error" not in result.stderr


def test_version():
    from shardpack import __version__

    result = _run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"shardpack {__version__}"


def test_the_help_says_what_each_exit_code_means():
    """README's exit codes, where a user of the command line looks: 2 is a usage error and
    refused input alike (click's usage code), 1 verify's fault."""
    flat = " ".join(_run("--help").stdout.split())
    assert "Exit codes, every command: 0 done; 1 verify found a fault; 2 a usage error, input " \
        "refused or a run that failed" in flat, flat  # fmt: skip
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    assert "exit code 2, as does a usage error" in readme and "1: `verify` found a fault" in readme


def test_the_help_names_every_container():
    """`shardpack --help` says what it packs into: every container --format takes."""
    from shardpack.containers import CONTAINERS

    flat = "".join(_run("--help").stdout.split()).lower()
    assert [name for name in CONTAINERS if name.replace("_", "") not in flat] == []


def test_verify_s_help_names_the_check_of_every_container():
    """verify's help said "record CRCs" of every shard: tars and Parquet files have none."""
    from shardpack.containers import CONTAINERS

    flat = " ".join(_run("verify", "--help").stdout.split())
    assert "record CRCs" not in flat
    assert [c.name for c in CONTAINERS.values() if c.framing not in flat] == []


@pytest.mark.parametrize(
    "command", ["pack", "verify", "inspect", "preview", "index-files", "demo", "report"]
)
def test_help_reads_plainly(command: str):
    """Flags take no <bool>; usage names SRC and OUT plainly; every default is shown, with no
    stray space where a default was eaten."""
    result = _run(command, "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "<bool>" not in text and "{" not in text
    assert re.search(rf"Usage: .* {command} \[OPTIONS\] (SRC )?OUT\n", text), text
    assert not re.search(r"\w \.(\s|$)", text), text  # "Worker processes ." had lost its default
    if command == "pack":  # compared without white space: help wraps at a hyphen too
        flat = "".join(text.split())
        name = ("SRC's name, without a manifest's extension; each run of characters other "
                "than ASCII letters, digits, '_' and '.' made one '_'")  # fmt: skip
        for default in ("by the work", name, "by --shard-size", "128MiB", "keep"):
            assert f"[default:{default}]".replace(" ", "") in flat, default


def test_help_loads_no_heavy_module():
    """--help imports typer and the CLI, not rich (its markdown renderer cost 0.18 s), numpy,
    OpenCV, joblib or the packer."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    run = subprocess.run([*SHARDPACK, "pack", "--help"], capture_output=True, text=True, env=env)
    assert run.returncode == 0
    imported = {line.split("|")[-1].strip() for line in run.stderr.splitlines() if "|" in line}
    heavy = {
        "rich",
        "numpy",
        "cv2",
        "joblib",
        "shardpack.packing.packer",
        "markdown_it",
        "tensorflow",
    }
    assert not imported & heavy, imported & heavy


def test_pack_imports_only_what_it_uses(tmp_path: Path):
    """A pack on forked workers imports no importlib.metadata (the crc32c package's __init__
    asks it its version: 25-50 ms of every command), and one in a single worker no joblib."""
    src = make_tree(tmp_path / "src", {"a": 3, "b": 3})
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    argv = [*SHARDPACK, "pack", str(src), str(tmp_path / "out"), "--shards", "2", "--workers", "2"]
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in run.stderr.splitlines() if "|" in line}
    assert "shardpack.packing.forkpool" in imported  # the run did fork its workers
    assert not imported & {"importlib.metadata", "tensorflow"}
    argv = [*SHARDPACK, "pack", str(src), str(tmp_path / "out1"), "--shards", "2", "--workers", "1"]
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in run.stderr.splitlines() if "|" in line}
    assert not imported & {"joblib", "importlib.metadata", "tensorflow"}


def test_backend_loky_packs_as_local(tmp_path: Path):
    """--backend loky, the old name of local, runs the same workers to the same output."""
    src = make_tree(tmp_path / "src", {"a": 3, "b": 3})
    docs = []
    for backend in ("loky", "local"):
        out = tmp_path / backend
        run = _run("pack", str(src), str(out), "--shards", "2", "--workers", "2", "--backend",
                   backend, "--no-progress")  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
        doc = json.loads((out / "index.json").read_text())
        assert doc.pop("stats")["workers"] == 2
        docs.append(doc)
    assert docs[0] == docs[1]


def test_a_choice_s_other_names_pack_as_it(tmp_path: Path):
    """--encode jpg and --format tfrecords (JPEG's file extension, the name TensorFlow's guides
    give the files) pack as --encode jpeg --format tfrecord; OUT keeps the choices' own names."""
    src = make_tree(tmp_path / "src", {"a": 2, "b": 2})
    for given in (("jpg", "tfrecords"), ("jpeg", "tfrecord")):
        out = tmp_path / given[1]
        run = _run("pack", str(src), str(out), "--encode", given[0], "--format", given[1],
                   "--workers", "1", "--no-progress")  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
    said = [
        json.loads((tmp_path / f / "index.json").read_text()) for f in ("tfrecords", "tfrecord")
    ]
    assert said[0]["options"] == said[1]["options"]
    assert (said[0]["options"]["encode"], said[0]["options"]["format"]) == ("jpeg", "tfrecord")


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        (("--format", "webdatasets"), "--format webdataset"),
        (("--encode", "jpgg"), "--encode jpeg"),
        (("--source", "Folder"), "--source folder"),
    ],
)
def test_a_near_miss_of_a_choice_names_the_flag_meant(tmp_path: Path, given, meant):
    """A misspelt choice is refused in one line that names every choice and the one meant,
    as the flag to type, before OUT is touched; help lists the choices' own names alone."""
    src = make_tree(tmp_path / "src", {"a": 1})
    done = cli("pack", str(src), str(tmp_path / "out"), *given)
    line = one_line_error(done, f"{given[0]} must be one of ", f"got: {given[1]!r}")
    assert line.endswith(f"; did you mean {meant}?")
    assert not (tmp_path / "out").exists()


def test_the_help_lists_each_choice_by_its_own_name():
    flat = "".join(_run("pack", "--help").stdout.split())
    assert "--encode<keep|jpeg|png|webp|raw>" in flat and "--backend<local|dask>" in flat
    assert "--format<tfrecord|array_record|webdataset|parquet>" in flat


_LINE = re.compile(r"^packing: [\d,]+/100 images, [\d,]+ images/s, ETA ([\d,]+ s|unknown)$")
_SCAN_LINE = re.compile(r"^scanning: [\d,]+ files listed$")


def test_without_a_terminal_progress_comes_as_lines(tmp_path: Path):
    """stderr a pipe (a log file, CI): plain progress lines with the rate and ETA, no bar's
    escape codes; the first once the run passes a second, then every 10 s. The run is held
    (SIGSTOP) for that second once it holds OUT's lock, past where its bar starts counting:
    a run that long at no cost in CPU."""
    src = tmp_path / "src"
    for i in range(100):
        write_image(src / f"c{i % 2}" / f"{i:03d}.jpg", image(i, height=48, width=64))
    out = tmp_path / "out"
    run = forkserver.start(forkserver.SHARDPACK, "pack", str(src), str(out), "--workers", "1")
    wait_for(lambda: (out / LOCK_NAME).exists() or run.poll() is not None)
    run.send_signal(signal.SIGSTOP)
    time.sleep(1.2)
    run.send_signal(signal.SIGCONT)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stderr[-2000:]
    lines = stderr.splitlines()
    # held in the scan (the lock comes first), it says the files listed instead: a line too
    assert lines and all(_LINE.match(line) or _SCAN_LINE.match(line) for line in lines), (
        stderr, stdout)  # fmt: skip
    assert "\x1b" not in stderr


def test_a_progress_line_survives_a_decoder_holding_fd_2(tmp_path: Path):
    """A decode in the packing process points fd 2 at its sink for a moment (images._imdecode,
    to catch libjpeg's warnings): a progress line printed by the bar meanwhile still reaches
    stderr, whole, and is no warning of that image's."""
    code = textwrap.dedent("""
        import os, sys
        from shardpack.console import Bar
        bar = Bar(True)
        bar.start -= 5  # past the second a bar waits for
        bar.line_due = 0
        saved, sink = os.dup(2), os.open(os.devnull, os.O_WRONLY)
        os.dup2(sink, 2)  # what _imdecode does around cv2.imdecode
        bar(50, 100)
        os.dup2(saved, 2)
        bar.close()
    """)
    run = forkserver.run(code, timeout=60)
    assert run.returncode == 0, run.stderr
    assert _LINE.match(run.stderr.rstrip("\n")), run.stderr


def test_the_progress_rate_counts_new_work_only(capsys):
    """A resume's first report holds the kept shards' images: the rate leaves them out."""
    from shardpack.console import Bar

    bar = Bar(True)
    bar(900, 1000)  # 900 images kept from an earlier run
    time.sleep(1.2)
    bar(1000, 1000)  # 100 written since
    line = capsys.readouterr().err.strip()
    rate = int(re.search(r"([\d,]+) images/s", line)[1].replace(",", ""))
    assert line.startswith("packing: 1,000/1,000 images") and rate < 100 / 1.2 + 1, line


def test_without_a_terminal_the_scan_reports_files_listed(tmp_path: Path):
    """A big tree's listing says how far it is, as lines on a piped stderr; here the tree is
    small and the child lowers the report's step and the line's delay and interval."""
    src = make_tree(tmp_path / "src", {f"c{i}": 12 for i in range(5)})
    code = (
        "import sys; import shardpack.console as c, shardpack.sources.scanprogress as s; "
        "s.EVERY = 10; c._BAR_DELAY_S = 0; c._LINE_EVERY_S = 0; "
        "from shardpack.cli import main; sys.argv = ['shardpack'] + sys.argv[1:]; main()"
    )
    run = forkserver.run(code, "pack", str(src), str(tmp_path / "out"), "--workers", "1",
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    scans = [line for line in run.stderr.splitlines() if line.startswith("scanning:")]
    counts = [int(re.fullmatch(r"scanning: ([\d,]+) files listed", line)[1]) for line in scans]
    assert counts and counts == sorted(counts) and counts[-1] <= 60, run.stderr
    assert run.stderr.index("scanning:") < run.stderr.index("packing:"), run.stderr


def test_a_refused_resume_names_the_flags(tmp_path: Path):
    """pack says encode='jpeg' to Python callers; the CLI's line names --encode and
    --overwrite."""
    src, out = make_tree(tmp_path / "src", {"a": 2, "b": 2}), str(tmp_path / "out")
    assert _run("pack", str(src), out, "--encode", "png", "--no-progress").returncode == 0
    run = _run("pack", str(src), out, "--encode", "jpeg", "--resume", "--no-progress")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert (f"{out}: was packed with other options (--encode jpeg (the journal's: --encode png)); "
            "pass --overwrite to start over") in run.stderr, run.stderr  # fmt: skip


def test_a_refused_shard_size_is_said_as_the_flag_takes_it(tmp_path: Path):
    """--shard-size 1GB against a pack of the default was said as 1073741824 and 134217728."""
    src, out = make_tree(tmp_path / "src", {"a": 2, "b": 2}), str(tmp_path / "out")
    assert _run("pack", str(src), out, "--no-progress").returncode == 0
    for given, said in (("1GB", "1GiB"), ("1.5M", "1536KiB"), ("1000", "1000")):
        run = _run("pack", str(src), out, "--shard-size", given, "--no-progress")
        assert run.returncode == 2
        assert (f"(--shard-size {said} (the journal's: --shard-size 128MiB)); pass --overwrite"
                in run.stderr), run.stderr  # fmt: skip


def test_fewer_workers_or_shards_than_asked_say_why(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"a": 3, "b": 3})
    run = _run("pack", str(src), str(tmp_path / "out"), "--workers", "64", "--shards", "1000000",
               "--no-progress")  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr.splitlines() == [
        "warning: split train: 6 shards, not the 1,000,000 asked: a shard holds one image at least",
        "warning: 6 of the 64 workers asked ran: 6 shards to write, a worker each at most",
    ]


# ---- messages --------------------------------------------------------------------------------


def test_counts_read_as_english(tmp_path: Path):
    """One image, one shard, one worker: no "1 shards"; two workers asked for a one-shard job
    report the one that ran."""
    src = make_tree(tmp_path / "src", {"a": 1})
    out = tmp_path / "out"
    result = runner.invoke(app, ["pack", str(src), str(out), "--workers", "2", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "packed 1 image into 1 shard (" in result.output
    assert "with 1 worker\n" in result.output and "1 shards" not in result.output
    assert runner.invoke(app, ["verify", str(out)]).output.startswith("OK: 1 shard, 1 record ")
    described = runner.invoke(app, ["inspect", str(out)]).output
    assert "1 record in 1 shard" in described and "1 class)" in described


def test_resume_says_what_it_kept_and_rates_the_new_work(tmp_path: Path):
    src = make_tree(tmp_path / "src", {"a": 8, "b": 8})
    out = tmp_path / "out"
    job = ["pack", str(src), str(out), "--shards", "4", "--workers", "1", "--no-progress"]
    assert runner.invoke(app, job).exit_code == 0
    # An interrupted run: no index yet, and one shard not finished.
    (out / "index.json").unlink()
    lost = sorted(out.glob("*.tfrecord-*"))[1]
    lost.unlink()
    result = runner.invoke(app, [*job, "--resume"])
    assert result.exit_code == 0, result.output
    assert "kept 3 of 4 shards" in result.output and "wrote 4 images at" in result.output
    summary = json.loads(runner.invoke(app, [*job, "--resume", "--json"]).stdout)
    assert summary["shards_kept"] == 4 and summary["new_records"] == 0
    assert summary["images_per_second"] == 0  # kept shards are no work done
    # nothing left to write: no word of workers that did not run
    idle = runner.invoke(app, [*job[:6], "2", "--no-progress", "--resume"])
    assert idle.exit_code == 0, idle.output
    assert "kept 4 of 4 shards from an earlier run, nothing left to write\n" in idle.output
    assert "workers asked ran" not in idle.output, idle.output
    # A fresh folder (a typo in OUT, say): nothing is kept, and the line says so.
    fresh = runner.invoke(app, [*job[:2], str(tmp_path / "fresh"), *job[3:], "--resume"])
    assert "found no finished shard of this job to keep, packed from the start" in fresh.output
    assert "wrote 16 images at" in fresh.output


# ---- every OSError: one line, the path, the fix, exit 2 -------------------------------------

COMMANDS_ON = {
    "pack into an existing OUT": ["pack", "{src}", "{ro}/out", "--workers", "1"],
    "pack into a new OUT": ["pack", "{src}", "{ro}/new", "--workers", "1"],
    "index-files": ["index-files", "{ro}/packed"],
    "preview": ["preview", "{ro}/packed", "--out", "{ro}/sheet.png"],
    "report": ["report", "{ro}/packed", "--no-progress"],  # a slow run: a progress line too
    "demo": ["demo", "{ro}/demo", "--per-class", "2"],
    "pack --overwrite": ["pack", "{src}", "{ro}/packed", "--workers", "1", "--overwrite"],
}


def _one_line_naming(stderr: str, path: str, fix: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith("error: ") and path in lines[0] and fix in lines[0], stderr


# unshare(2)'s flag for a mount namespace of the caller's own (sched.h)
_CLONE_NEWNS = 0x00020000


def _read_only_mount(ro: Path, src: Path) -> None:
    """In a child: a mount namespace of its own, where `ro` is a tmpfs holding src packed as
    ro/packed and an empty ro/out, then remounted read-only (OSError where not allowed)."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    for command in (["mount", "--make-rprivate", "/"], ["mount", "-t", "tmpfs", "none", str(ro)]):
        if subprocess.run(command, capture_output=True).returncode != 0:
            raise OSError(f"{shlex.join(command)} failed")
    packed = runner.invoke(app, ["pack", str(src), str(ro / "packed"), "--workers", "1"])
    assert packed.exit_code == 0, packed.output
    (ro / "out").mkdir()
    if subprocess.run(["mount", "-o", "remount,ro", str(ro)], capture_output=True).returncode:
        raise OSError(f"cannot remount {ro} read-only")


@pytest.mark.slow  # a mount namespace: root, and a tmpfs mounted
def test_read_only_file_system(src: Path, tmp_path: Path):
    """A real read-only mount (a tmpfs of the test's own mount namespace, in a forked child)."""
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("needs root and mount(8) to mount a tmpfs")
    ro = tmp_path / "ro"
    ro.mkdir()
    reads = [["verify", "{ro}/packed"], ["inspect", "{ro}/packed"]]
    commands = [[a.format(src=src, ro=ro) for a in args]
                for args in [*COMMANDS_ON.values(), *reads]]  # fmt: skip
    ran = _in_a_child(lambda: _read_only_mount(ro, src), commands,
                      "this machine does not allow mounting a tmpfs")  # fmt: skip
    for what, (code, _, stderr) in zip(COMMANDS_ON, ran[: len(COMMANDS_ON)], strict=True):
        assert code == 2, (what, code, stderr)
        _one_line_naming(stderr, str(ro), "writable file system")
    for code, output, _ in ran[len(COMMANDS_ON) :]:  # verify and inspect only read: they work on it
        assert code == 0, output


def _in_a_child(
    prepare: Callable[[], None], commands: list[list[str]], refused: str
) -> list[tuple[int, str, str]]:
    """Run CLI commands in a forked child, once prepare() has changed that child alone (dropped
    a capability, taken a mount namespace): each one's exit code, output and stderr (a
    traceback in the output where one escaped). Skips saying `refused` where prepare raises
    OSError: this machine does not allow it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: prepare, run the commands, report, and leave at once
        report: object = "the child ended without a report"
        try:
            os.close(read)
            try:
                prepare()
            except OSError as e:
                report = {"refused": str(e)}
                raise
            report = []
            for args in commands:
                result = runner.invoke(app, args)
                output = result.output
                if result.exception is not None and not isinstance(result.exception, SystemExit):
                    output += "".join(traceback.format_exception(result.exception))
                report.append([result.exit_code, output, result.stderr])
        except BaseException:
            if not isinstance(report, dict):
                report = traceback.format_exc()
        finally:
            os.write(write, json.dumps(report).encode())
            os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    report = json.loads(data)
    if isinstance(report, dict):
        pytest.skip(f"{refused} ({report['refused']})")
    assert isinstance(report, list), report
    return [tuple(r) for r in report]


def _without_permission(args: list[str]) -> tuple[int, str]:
    """Run the CLI in a forked child that has dropped root's file-permission override
    (helpers.drop_permission_override): a file or folder with no permission bits for its owner
    is refused to it as to any user, while the checkout stays reachable wherever it lies."""
    if os.geteuid() != 0:
        pytest.skip("needs root, whose file-permission override the child drops")
    refused = "this machine does not allow dropping capabilities"
    ((code, output, _),) = _in_a_child(drop_permission_override, [args], refused)
    return code, output


def test_as_a_user_without_permission(tmp_path: Path):
    base = tmp_path / "base"
    src = make_tree(base / "src", {"a": 3, "b": 2})
    out = base / "packed"
    assert runner.invoke(app, ["pack", str(src), str(out), "--workers", "1"]).exit_code == 0
    (base / "out").mkdir()
    # read-only to its owner too: the child, without root's override, may read but not write
    for path in (base, *base.rglob("*")):
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        fix = "check the permissions"
        for what, args in COMMANDS_ON.items():
            code, output = _without_permission([a.format(src=src, ro=base) for a in args])
            assert code == 2, (what, output)
            _one_line_naming(output, str(base), fix)
        (out / "index.json").chmod(0o000)
        for command in ("verify", "inspect"):
            code, output = _without_permission([command, str(out)])
            assert code == 2, output
            _one_line_naming(output, str(out / "index.json"), fix)
        (out / "index.json").chmod(0o444)
        next(out.glob("*.tfrecord-*")).chmod(0o000)
        code, output = _without_permission(["verify", str(out)])  # not a damaged shard: exit 2
        assert code == 2, output
        _one_line_naming(output, ".tfrecord-", fix)
    finally:
        for path in (base, *base.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)


def test_a_run_that_packs_nothing_says_so_and_fails(tmp_path: Path):
    """Every image bad: the exit code is 2 with one error line naming the first, as when the scan
    finds nothing (a pipeline must notice)."""
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "x.jpg").write_bytes(b"\xff\xd8 not really")
    (src / "a" / "y.png").write_bytes(b"neither")
    run = _run("pack", str(src), str(tmp_path / "out"), "--no-progress")
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"error: no image was packed from {src}, 2 items skipped (the first, "
                           "a/x.jpg: ")  # fmt: skip
    assert not (tmp_path / "out").exists()  # it made OUT, and leaves none
    listed = tmp_path / "list.csv"  # a manifest: named itself, not the folder it lies in
    listed.write_text("path,label\nsrc/a/x.jpg,a\nsrc/a/y.png,a\n")
    run = _run("pack", str(listed), str(tmp_path / "out"), "--no-progress")
    assert run.stderr.startswith(f"error: no image was packed from {listed}, 2 items"), run.stderr


@pytest.mark.slow
def test_ctrl_c_in_a_terminal_ends_on_the_line_that_says_so(tmp_path: Path):
    """In a terminal the progress bar is drawn; Ctrl-C (SIGINT) stops the run with exit code 130
    and the 'interrupted' line is the last thing on the screen (the bar is not drawn after it)."""
    import pty
    import select
    import signal
    import time

    # Many seconds of PNG encoding after the bar shows (it waits a second), so that the Ctrl-C
    # lands mid-run even on a busy machine; hard links to one photo, as encoding is the cost.
    photo = write_image(tmp_path / "photo.jpg", image(0, height=480, width=640))
    for i in range(3000):
        (tmp_path / "src" / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        os.link(photo, tmp_path / "src" / f"c{i % 2}" / f"{i:04d}.jpg")
    args = [*SHARDPACK, "pack", str(tmp_path / "src"), str(tmp_path / "out"), "--workers", "1",
            "--encode", "png"]  # fmt: skip
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI, on the terminal
        os.execv(sys.executable, args)
    seen, deadline = b"", time.monotonic() + 60

    def read_until(done) -> None:  # what the terminal shows, until done() or the child ends
        nonlocal seen
        while not done() and time.monotonic() < deadline:
            if select.select([fd], [], [], 1)[0]:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the child closed the terminal (it ended)
                    return
                if not chunk:
                    return
                seen += chunk

    started = time.monotonic()
    try:  # the bar is up, or the run is well under way (a busy machine may draw it late)
        read_until(lambda: b"packing" in seen or time.monotonic() - started > 5)
        os.kill(pid, signal.SIGINT)
        read_until(lambda: False)
    finally:
        if time.monotonic() >= deadline:  # hung: ended here, and failed below
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 130, seen
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", seen).decode(errors="replace")
    lines = [line for line in re.split(r"[\r\n]+", text) if line.strip()]
    assert b"packing" in seen and lines[-1].startswith("interrupted: no index written"), lines


@pytest.mark.parametrize("command", ["verify", "inspect", "index-files"])
def test_a_storage_option_for_a_local_out_warns_that_it_is_not_used(tmp_path: Path, command):
    out = tmp_path / "out"
    assert _run("pack", str(make_tree(tmp_path / "src", {"a": 2})), str(out), "--no-progress")\
        .returncode == 0  # fmt: skip
    run = _run(command, str(out), "--storage-option", "anon=true")
    assert run.returncode == 0, run.stderr
    assert run.stderr == (f"warning: --storage-option is for a URL (s3://...), and {out} is a "
                          "local path: it is not used\n")  # fmt: skip


def test_the_options_annotations_are_evaluated_once_a_process():
    """The CLI's declarations and PackOptions' type check read one evaluation of them (typing
    evaluates every annotation on each call: ~1 ms of a pack's start)."""
    code = ("import sys, typing\ncalls = []\nhints = typing.get_type_hints\n"
            "typing.get_type_hints = lambda obj, *a, **k: calls.append(obj) or hints(obj, *a, "
            "**k)\n"
            "import shardpack.cli\nfrom shardpack.options import PackOptions\n"
            "PackOptions(workers=2)\nprint(calls.count(PackOptions))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "1", out.stdout + out.stderr
