"""An item skipped when packed (a damaged image) is read again by the next grow once its file
changed since (its stamp, stamps.py), packed or skipped again with the reason it has now, and
left unread while its file is the one skipped."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from shardpack.options import PackOptions
from shardpack.packing.packer import pack
from shardpack.read.stream import iter_examples
from tests.helpers import image, make_tree, run_cli, shard_files, write_image

BAD = "dog/bad.jpg"


def _damaged(src: Path, tmp_path: Path) -> bytes:
    """A good JPEG's bytes (kept aside), and its first 100 bytes as SRC's dog/bad.jpg."""
    good = write_image(tmp_path / "good.jpg", image(99)).read_bytes()
    (src / BAD).write_bytes(good[:100])
    return good


def _told(out: Path) -> tuple[list[str], dict[str, int]]:
    """The skipped keys index.json lists, and key -> label of every record."""
    doc = json.loads((out / "index.json").read_text())
    return [s["key"] for s in doc["skipped"]], {r["key"]: int(r["label"]) for r in
                                                iter_examples(out)}  # fmt: skip


@pytest.mark.parametrize("mode", ["append", "update"])
def test_a_fixed_image_is_packed_by_the_next_grow(tmp_path: Path, mode: str):
    src, out = make_tree(tmp_path / "src", {"cat": 2, "dog": 2}), tmp_path / "out"
    good = _damaged(src, tmp_path)
    packed = run_cli("pack", str(src), str(out), "--workers", "1", "--no-progress")
    assert packed.returncode == 0 and "skipped 1 item" in packed.stderr + packed.stdout
    before = shard_files(out)
    (src / BAD).write_bytes(good)  # the user puts a good copy in its place
    grown = run_cli("pack", str(src), str(out), f"--{mode}", "--workers", "1", "--no-progress")
    said = grown.stdout + grown.stderr
    assert grown.returncode == 0 and "nothing to" not in said, said
    assert "1 item skipped when packed read again (file changed since): 1 packed, " \
           "0 skipped again" in said, said  # fmt: skip
    skipped, labels = _told(out)
    assert skipped == [] and len(labels) == 5 and labels[BAD] == labels["dog/img_000.jpg"] == 1
    after = shard_files(out)
    doc = json.loads((out / "index.json").read_text())
    if mode == "append":  # a new shard of a new generation, the old one as it was
        assert {k: after[k] for k in before} == before and len(after) == 2
        assert [s["generation"] for s in doc["splits"]["train"]["shards"]] == [0, 1]
    else:  # the shard that noted the skip written again
        assert len(after) == 1 and after != before
        assert doc["history"][-1]["shards_rewritten"] == 1
    assert doc["history"][-1]["added"] == 1
    assert run_cli("verify", str(out)).returncode == 0
    assert pack(src, out, PackOptions(grow=mode, workers=1)).grow["nothing"]


def test_a_skipped_file_unchanged_is_not_read_again_and_read_once_touched(tmp_path: Path):
    """A skip's file of the noted size and mtime is not read (other bytes kept under both
    would be packed if read); once its mtime changes it is read and packed. An empty file,
    refused by the read itself, keeps its stamp too."""
    src, out = make_tree(tmp_path / "src", {"cat": 2, "dog": 2}), tmp_path / "out"
    good = write_image(tmp_path / "good.jpg", image(99)).read_bytes()
    bad = src / BAD
    bad.write_bytes(bytes(255 - b for b in good))  # no image, of the good one's size
    (src / "dog" / "empty.jpg").write_bytes(b"")
    pack(src, out, PackOptions(workers=1))
    st = bad.stat()
    bad.write_bytes(good)  # only a read tells it from the bad one
    os.utime(bad, ns=(st.st_atime_ns, st.st_mtime_ns))
    for mode in ("append", "update"):
        assert pack(src, out, PackOptions(grow=mode, workers=1)).grow["nothing"]
    os.utime(bad, ns=(time.time_ns(),) * 2)
    result = pack(src, out, PackOptions(grow="update", workers=1))
    assert result.grow["added"] == 1 and result.notes[-1].endswith("1 packed, 0 skipped again")
    assert _told(out)[0] == ["dog/empty.jpg"]


def test_a_skip_an_older_shardpack_noted_no_stamp_of_is_read_again_once(tmp_path: Path):
    """Stamps of a shardpack from before a skip's were noted: each skip is read again once,
    skipped again with the reason it has now (no shard of nothing), then noted, unread."""
    src, out = make_tree(tmp_path / "src", {"cat": 2, "dog": 2}), tmp_path / "out"
    _damaged(src, tmp_path)
    pack(src, out, PackOptions(workers=1))
    held = out / ".shardpack.stamps"
    doc = json.loads(held.read_text())
    assert doc["mtimes"].pop(BAD) == [100, (src / BAD).stat().st_mtime_ns]
    held.write_text(json.dumps(doc))  # as an older shardpack wrote it
    before = shard_files(out)
    result = pack(src, out, PackOptions(grow="append", workers=1))
    assert result.notes[-1].endswith("0 packed, 1 skipped again")
    assert result.grow["added"] == 0 and shard_files(out) == before
    assert _told(out)[0] == [BAD]
    assert json.loads(held.read_text())["mtimes"][BAD][0] == 100
    assert pack(src, out, PackOptions(grow="update", workers=1)).grow["nothing"]


def test_a_link_to_a_missing_file_is_read_again_once_the_file_is_there(tmp_path: Path):
    """A skip whose file could not be read at all has no stamp: it stays skipped, unread, while
    it has none now, and is read again once it has."""
    src, out = make_tree(tmp_path / "src", {"cat": 2, "dog": 2}), tmp_path / "out"
    target = tmp_path / "elsewhere.jpg"
    (src / BAD).symlink_to(target)
    pack(src, out, PackOptions(workers=1))
    assert _told(out)[0] == [BAD]
    assert pack(src, out, PackOptions(grow="append", workers=1)).grow["nothing"]
    write_image(target, image(5))
    assert pack(src, out, PackOptions(grow="append", workers=1)).grow["added"] == 1
    assert _told(out)[0] == []


def test_a_fixed_image_a_manifest_names_is_packed_by_the_next_grow(tmp_path: Path):
    """A manifest's rows name files on a disk: they are stamped as a folder's are (they had no
    stamp, so a mended file stayed skipped), and an unchanged one is not read by a grow."""
    src, out = make_tree(tmp_path / "src", {"cat": 2, "dog": 2}), tmp_path / "out"
    good = _damaged(src, tmp_path)
    rows = "".join(f"{p.relative_to(src)},{p.parent.name}\n" for p in sorted(src.rglob("*.jpg")))
    table = src / "labels.csv"
    table.write_text("path,label\n" + rows)
    for path in src.rglob("*.jpg"):
        os.utime(path, (time.time() - 3600,) * 2)  # settled: a grow reads it no more
    pack(table, out, PackOptions(workers=1))
    assert _told(out)[0] == [BAD]
    (src / BAD).write_bytes(good)
    grown = pack(table, out, PackOptions(workers=1, grow="update"))
    assert _told(out)[0] == [] and grown.grow["added"] == 1
    assert pack(table, out, PackOptions(workers=1, grow="update")).grow["nothing"]
