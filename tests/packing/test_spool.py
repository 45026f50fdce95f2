"""A fresh pack's contents.json entries and stamps, rendered as each shard lands
(packing/spool.py) and written a shard at a time: the same bytes as the whole-document writers
that grows use."""

from __future__ import annotations

import os
from pathlib import Path

from shardpack.index import load_index
from shardpack.options import PackOptions
from shardpack.packing import contents, stamps
from shardpack.packing.packer import pack
from shardpack.storage import storage_at
from tests.helpers import jpeg


def test_the_spooled_contents_and_stamps_are_what_the_whole_document_writers_write(
    tmp_path: Path,
):
    src = tmp_path / "src"
    picture = jpeg(0)
    for i in range(30):  # a JPEG comment makes each distinct but every third: copies of one
        (src / "abc"[i % 3]).mkdir(parents=True, exist_ok=True)
        data = picture[:2] + b"\xff\xfe\x00\x0c" + b"%010d" % (i if i % 3 else 0) + picture[2:]
        (src / "abc"[i % 3] / f"{i:02d}.jpg").write_bytes(data)
        os.utime(src / "abc"[i % 3] / f"{i:02d}.jpg", ns=(10**18 + i, 10**18 + i))  # stamped
    (src / "b" / "bad.jpg").write_bytes(b"\xff\xd8 not a JPEG")  # skipped, and noted so
    out = storage_at(tmp_path / "out")
    pack(src, out.root, PackOptions(workers=2, shards=4))
    index = load_index(out)
    held = contents.load_contents(out, index)
    assert sum(len(entry["skipped"]) for entry in held.shards.values()) == 1
    held_stamps = stamps.load(out, index)
    assert len(held_stamps.mtimes) == 30 and list(held_stamps.skips) == ["b/bad.jpg"]
    fields = ["keys", "crc", "size", "width", "height", "stored", "meta", "digest",
              "label_counts", "tally", "lossless", "sha256", "skipped", "reasons",
              "copy"]  # fmt: skip
    assert all(list(entry) == fields for entry in held.shards.values())  # as with_copies has them
    copies = [n for entry in held.shards.values() for n in entry["copy"]]
    assert copies.count(1) == 10 and copies.count(0) == 20
    again = storage_at(tmp_path / "again")
    again.make_root()
    contents.write_contents(again, held.shards, held.loose)
    stamps.save(again, index, *held_stamps)
    name = "contents.json"
    assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "out" / name).read_bytes()
    assert stamps.load(again, index) == held_stamps  # (a skip's stamp beside its shard's)
