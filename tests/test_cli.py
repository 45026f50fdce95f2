"""The command line: a thin face on the library, one-line errors, no TensorFlow at start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shardpack.cli import app
from tests.helpers import make_tree

runner = CliRunner()
SHARDPACK = [sys.executable, "-m", "shardpack"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SHARDPACK, *args], capture_output=True, text=True, timeout=120)


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


def test_json_outputs(src: Path, tmp_path: Path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["pack", str(src), str(out), "--json", "--workers", "1"])
    summary = json.loads(result.stdout)
    assert summary["records"] == 7 and summary["splits"]["train"]["num_records"] == 7
    report = json.loads(runner.invoke(app, ["verify", str(out), "--json"]).stdout)
    assert report["ok"] and report["records"] == 7 and report["faults"] == []
    described = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)
    assert described["splits"]["train"]["class_counts"] == {"a": 4, "b": 3}


def test_pack_summary_names_what_it_skipped_and_ignored_and_warns_of_empty_classes(
    src: Path, tmp_path: Path
):
    (src / "a" / "broken.jpg").write_bytes(b"not a jpeg")
    (src / "a" / "notes.txt").write_text("x")
    os.mkfifo(src / "b" / "pipe.png")
    (src / "c").mkdir()
    run = _run("pack", str(src), str(tmp_path / "out"), "--workers", "1", "--no-progress")
    assert run.returncode == 0, run.stderr
    assert "skipped 2 bad files" in run.stdout
    assert "b/pipe.png: not a regular file (a FIFO)" in run.stdout
    assert "a/broken.jpg: not an image" in run.stdout
    assert "ignored 1 files that are not images: a/notes.txt" in run.stdout
    assert f"warning: class 'c' ({src / 'c'}) holds no images" in run.stderr


def test_verify_exit_code_on_fault(src: Path, tmp_path: Path):
    out = tmp_path / "out"
    runner.invoke(app, ["pack", str(src), str(out), "--shards", "1", "--workers", "1"])
    shard = next(out.glob("*.tfrecord-*"))
    shard.write_bytes(shard.read_bytes()[:-3])
    result = runner.invoke(app, ["verify", str(out)])
    assert result.exit_code == 1
    assert f"FAULT {shard.name}" in result.output and "truncated" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["pack", "{tmp}/missing", "{tmp}/out"], "no such folder"),
        (["pack", "{tmp}/empty", "{tmp}/out"], "no images found"),
        (["pack", "{src}", "{tmp}/afile"], "is a file"),
        (["pack", "{src}", "{tmp}/out", "--frobnicate"], "No such option"),
        (["pack", "{src}", "{tmp}/out", "--encode", "gif"], "gif"),
        (["pack", "{src}", "{tmp}/out", "--resize", "big"], "WIDTHxHEIGHT"),
        (["verify", "{tmp}/empty"], "index.json: not found"),
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


def test_on_error_fail_names_the_file(src: Path, tmp_path: Path):
    (src / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0garbage")
    result = _run("pack", str(src), str(tmp_path / "out"), "--on-error", "fail", "--workers", "2")
    assert result.returncode == 2
    assert "a/broken.jpg" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "index.json").exists()


def test_help_and_import_stay_free_of_tensorflow():
    code = (
        "import sys, shardpack, shardpack.cli, shardpack.packer, shardpack.worker, "
        "shardpack.verifier, shardpack.inspection, shardpack.read; "
        "print('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    result = _run("--help")
    assert result.returncode == 0 and "pack" in result.stdout and "verify" in result.stdout
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    imports = subprocess.run([*SHARDPACK, "--help"], capture_output=True, text=True, env=env)
    assert "tensorflow" not in imports.stderr and "cv2" not in imports.stderr


def test_demo(tmp_path: Path):
    result = runner.invoke(app, ["demo", str(tmp_path / "d"), "--per-class", "6", "--workers", "2",
                                 "--no-progress"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "packed 30 images into 4 shards" in result.output
    assert runner.invoke(app, ["verify", str(tmp_path / "d" / "shards")]).exit_code == 0


def test_bench_runs_the_harness(src: Path, tmp_path: Path):
    out = tmp_path / "bench.json"
    result = _run("bench", str(src), "--contenders", "shardpack,ceiling", "--workers", "1",
                  "--repeat", "1", "--json", str(out), "--no-extras", "--cache",
                  str(tmp_path / "cache"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    (case,) = json.loads(out.read_text())["cases"]
    summary = {c["kind"]: c["summary"] for c in case["contenders"]}
    assert case["workload"]["num_images"] == 7
    assert summary["shardpack"]["images_per_s"] > 0 and summary["shardpack"]["failed"] == 0
    assert summary["ceiling"]["per_core_images_per_s"] > 0
    assert (tmp_path / "bench.png").stat().st_size > 0
