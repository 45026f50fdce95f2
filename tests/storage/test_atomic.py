"""atomic.py: a file appears under its final name only when complete; a failure leaves the old
file and no temporary file behind."""

from __future__ import annotations

import json
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
