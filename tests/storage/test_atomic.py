"""atomic.py: a file appears under its final name only when complete; a failure leaves the old
file and no temporary file behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shardpack.storage.atomic import json_bytes, write_atomic


def test_write_json_atomic_leaves_no_temp_file(tmp_path: Path):
    path = tmp_path / "index.json"
    write_atomic(str(path), json_bytes({"v": [1, 2]}))
    assert [p.name for p in tmp_path.iterdir()] == ["index.json"]
    assert json.loads(path.read_text(encoding="utf-8")) == {"v": [1, 2]}
    assert path.read_text(encoding="utf-8").endswith("}\n")


def test_write_json_atomic_replaces_and_keeps_unicode(tmp_path: Path):
    path = tmp_path / "index.json"
    path.write_text("old")
    document = {"classes": ["chats é", "猫"]}
    write_atomic(str(path), json_bytes(document))
    assert "猫" in path.read_text(encoding="utf-8")  # written as text, not \\u escapes
    assert json.loads(path.read_text(encoding="utf-8")) == document
    assert [p.name for p in tmp_path.iterdir()] == ["index.json"]


def test_a_document_that_is_not_json_keeps_the_old_file(tmp_path: Path):
    path = tmp_path / "index.json"
    write_atomic(str(path), json_bytes({"v": 1}))
    with pytest.raises(TypeError):
        write_atomic(str(path), json_bytes({"v": object()}))  # refused before any file is opened
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["index.json"]


def test_a_failed_write_removes_its_temp_file_and_keeps_the_old_file(tmp_path: Path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_atomic(str(path), 12345)  # the temp file is open when the write fails
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]


def test_a_failed_rename_removes_its_temp_file(tmp_path: Path):
    target = tmp_path / "taken"
    target.mkdir()
    (target / "inside").write_text("keep")  # a non-empty folder cannot be replaced by a file
    with pytest.raises(OSError):
        write_atomic(str(target), b"new bytes, fully written and fsynced before the rename")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    assert (target / "inside").read_text() == "keep"


_FILE_SIZE_LIMIT = """
import resource, sys
from shardpack.storage.atomic import write_atomic
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # Python ignores SIGXFSZ: EFBIG
try:
    write_atomic(sys.argv[1], bytes(100_000))
except OSError as e:
    print(e.filename, e.strerror)
"""


def test_a_write_cut_by_a_full_disk_names_the_file(tmp_path: Path):
    """A real EFBIG from the kernel (RLIMIT_FSIZE), in a process of its own. os.write's and
    os.fsync's errors name no file: a full disk as index.json was written said only "No space
    left on device; free some space", naming nothing."""
    path = tmp_path / "index.json"
    path.write_bytes(b"old")
    run = subprocess.run([sys.executable, "-c", _FILE_SIZE_LIMIT, str(path)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split(" ", 1)[0] == str(path), run.stdout
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["index.json"]
