"""Class names and labels from SRC as hostile input: manifests whose text JSON allows but UTF-8
does not, --classes files that are not regular files or name classes with line breaks, names
that differ invisibly, and labels that would build millions of classes. Each is packed for real
through the CLI: one line and exit 2, or a skip with its reason, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import make_tree


def _cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardpack", *args], capture_output=True,
                          text=True, timeout=180, **kwargs)  # fmt: skip


def _pack(src: Path, out: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return _cli("pack", str(src), str(out), "--workers", "1", "--no-progress", *args, **kwargs)


def _one_line_error(done: subprocess.CompletedProcess, *words: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert all(w in line for w in words), line
    return line


def _index(out: Path) -> dict:
    return json.loads((out / "index.json").read_text())


# Each a JSONL line as json.dumps writes it (ASCII, with \u escapes): valid JSON, not UTF-8.
SURROGATES = {
    "label": {"path": "cat/img_000.jpg", "label": "a\ud800"},
    "column name": {"path": "cat/img_000.jpg", "label": "cat", "x\udfff": "v"},
    "text value": {"path": "cat/img_000.jpg", "label": "cat", "caption": "v\ud800"},
}


@pytest.mark.parametrize("where", sorted(SURROGATES))
def test_a_lone_surrogate_in_a_jsonl_manifest_is_a_bad_row(tmp_path: Path, where: str):
    src = make_tree(tmp_path / "src", {"cat": 2})
    good = {"path": "cat/img_001.jpg", "label": "cat", "caption": "ok"}
    manifest = src / "labels.jsonl"
    manifest.write_text(json.dumps(SURROGATES[where]) + "\n" + json.dumps(good) + "\n")
    assert "\\ud" in manifest.read_text() or "\\udfff" in manifest.read_text()
    done = _pack(manifest, tmp_path / "fail", "--on-error", "fail")
    _one_line_error(done, "labels.jsonl line 1", "lone surrogate")
    done = _pack(manifest, tmp_path / "skip", "--on-error", "skip")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (skipped,) = _index(tmp_path / "skip")["skipped"]
    assert "labels.jsonl line 1" in skipped["key"] + skipped["reason"]
    assert "lone surrogate" in skipped["reason"]
