"""Stamps (packing/stamps.py): what a resume takes as unchanged without reading it."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from shardpack.options import PackOptions
from shardpack.packing import stamps
from shardpack.packing.facts import facts_of
from shardpack.packing.fresh import FreshPack
from shardpack.packing.worker import write_shard
from shardpack.sources import source_root
from shardpack.storage import storage_at
from tests.helpers import make_tree


def test_a_file_of_mtime_0_has_no_stamp_and_its_shard_is_written_again(tmp_path: Path):
    """A file whose mtime is 0 (the epoch, as a reproducible archive unpacks its files) gets
    no stamp: 0 is what the facts note for none, and a resume took the shard as unchanged
    because the two zeros agreed, even after a file was rewritten at its size."""
    src = make_tree(tmp_path / "src", {"cat": 2})
    for path in src.rglob("*.jpg"):
        os.utime(path, ns=(0, 0))
    steps = FreshPack(source_root(str(src)), storage_at(str(tmp_path / "out")),
                      PackOptions(shards=1, workers=1), None)  # fmt: skip
    steps.open()
    planned = steps.plan()
    dataset, (spec,) = planned.dataset, planned.plan.shards
    result = write_shard(spec, planned.options, dataset.root, steps.out, dataset.schema,
                         dataset.source)  # fmt: skip
    assert facts_of(result.content, len(spec.items))["mtime"].tolist() == [0, 0]
    path = src / spec.items[0].path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # other pixels, the same size and mtime
    path.write_bytes(data)
    os.utime(path, ns=(0, 0))
    held = replace(spec, items=tuple(spec.items))  # as a rerun's plan holds them when it asks
    assert stamps.unchanged([result], {held.file: held}, dataset.source, dataset.root) == [False]
    assert stamps.take_stamps(dataset.source, dataset.root, spec.items) == [None, None]
