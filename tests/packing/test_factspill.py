"""A fresh pack folds or spills each landed shard's facts (packing/factspill.py): the packing
process keeps no result's facts, and the summaries, copies and image size read back from the
spill, out of core as at 100M records, are those of every record at once, to the byte."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from shardpack import PackOptions, pack
from shardpack.packing import factspill, stats
from shardpack.packing.fresh import FreshPack
from shardpack.packing.writing import write_shards
from shardpack.sources import source_root
from shardpack.storage import storage_at
from tests import helpers


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> Path:
    """A split tree of 3 classes whose images recur: in other classes, in the test split, and
    as a streamed JSONL list of their paths (`list`; `skips`: and a shard's worth of rows
    whose images are gone)."""
    root = tmp_path_factory.mktemp("copies")
    tree = root / "tree"
    for i in range(24):
        split, label = ("test" if i % 4 == 3 else "train"), "abc"[i % 3]
        sides = (24, 32) if i % 5 else (40, 30)  # two sizes, two aspect ratios
        helpers.write_image(tree / split / label / f"{i}.png", helpers.image(i % 9, *sides))
    for i in range(0, 24, 6):
        split = "test" if i % 4 == 3 else "train"
        shutil.copy(tree / split / "abc"[i % 3] / f"{i}.png", tree / "train" / "c" / f"copy{i}.png")
    listed = root / "list"
    listed.mkdir()
    paths = sorted(str(p) for p in tree.rglob("*.png"))
    rows = [{"path": path, "caption": f"row {n}"} for n, path in enumerate(paths)]
    for part in range(2):
        helpers.write_jsonl(listed / f"part-{part}.jsonl", rows)
    shutil.copytree(listed, root / "skips")  # and a file of rows whose images are gone
    gone = [{"path": str(root / f"gone-{i}.png"), "caption": "lost"} for i in range(3)]
    helpers.write_jsonl(root / "skips" / "part-2.jsonl", gone)
    helpers.aged(
        root
    )  # a file made within stamps.RACY_NS of a pack is unstamped in one run, not both
    return root


def _digests(out: Path) -> dict[str, str]:
    """Each OUT file's sha256, the run's timings aside (index.json's, the journal's)."""
    found = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.name == "index.json":
            doc = json.loads(data)
            for timing in ("seconds", "images_per_second", "workers"):
                doc["stats"].pop(timing)
            data = json.dumps(doc).encode()
        elif path.name.endswith(".journal"):
            lines = sorted((json.loads(line) for line in data.splitlines()), key=str)
            data = json.dumps([{k: v for k, v in li.items() if k != "seconds"} for li in lines])
            data = data.encode()
        found[str(path.relative_to(out))] = hashlib.sha256(data).hexdigest()
    return found


@pytest.mark.parametrize(
    ("src", "options"),
    [
        ("tree", PackOptions(shards=3, workers=2)),
        ("skips", PackOptions(shuffle=False, shards=5, workers=2, resize=(16, 16))),
    ],
    ids=["split-tree", "streamed-list"],
)
def test_out_of_core_merge_writes_the_same_bytes(copies, tmp_path, monkeypatch, src, options):
    held = pack(copies / src, tmp_path / "held", options)
    found = json.loads((tmp_path / "held" / "index.json").read_text())
    assert found["duplicates"]["groups"] >= 3 and len(found["summaries"]) == len(held.index.splits)
    # what 100M records do to a pack: many buckets, the summaries read and the medians
    # narrowed a few rows at a time
    monkeypatch.setattr(factspill, "BUCKET_ROWS", 1)
    monkeypatch.setattr(factspill, "CHUNK_ROWS", 3)
    monkeypatch.setattr(stats, "SELECT_ROWS", 2)
    monkeypatch.setattr(stats, "SELECT_BINS", 3)
    pack(copies / src, tmp_path / "spilled", options)
    assert _digests(tmp_path / "spilled") == _digests(tmp_path / "held")


def test_the_packing_process_keeps_no_landed_shards_facts(copies, tmp_path):
    options = PackOptions(shuffle=False, shards=4, workers=1)
    steps = FreshPack(source_root(copies / "list"), storage_at(tmp_path / "out"), options, None)
    steps.open()
    planned = steps.plan()
    results = write_shards(planned, steps.out, None, steps.landed)
    assert len(results) == 4 and all(r.num_records for r in results)
    assert [r.content for r in results] == [b""] * 4  # 44 bytes a record, held on main
    merged = steps.merge(planned, results).index
    whole = pack(copies / "list", tmp_path / "whole", options).index
    assert merged.duplicates == whole.duplicates and merged.duplicates["groups"] > 3
    assert merged.summaries == whole.summaries and merged.summaries["train"]["records"] > 20


def _chunks(values: np.ndarray, size: int) -> stats.Rows:
    return lambda: (values[i : i + size] for i in range(0, len(values), size))


@pytest.mark.parametrize(
    "values",
    [
        np.random.default_rng(0).random(1001),  # distinct
        np.random.default_rng(1).integers(0, 5, 400).astype(np.float64),  # mostly alike
        np.r_[np.full(300, 1.0), np.full(200, np.nextafter(1.0, 2.0)), [0.5, 7.0]],  # adjacent
        np.r_[np.full(50, 3.0), np.arange(40.0) / 7],  # one value in most of a bin
    ],
    ids=["distinct", "alike", "adjacent-floats", "crowded"],
)
def test_select_finds_what_np_partition_finds(monkeypatch, values):
    monkeypatch.setattr(stats, "SELECT_ROWS", 4)
    monkeypatch.setattr(stats, "SELECT_BINS", 3)
    rows = _chunks(values, 37)
    low, high = float(values.min()), float(values.max())
    ranked = np.sort(values)
    for k in {0, 1, len(values) // 3, len(values) // 2, len(values) - 1}:
        assert stats.select(rows, k, len(values), low, high) == ranked[k]
    assert stats.median(rows, len(values), low, high) == np.median(values)
    assert stats.median(_chunks(values[1:], 5), len(values) - 1, *_bounds(values[1:])) == (
        np.median(values[1:])
    )


def _bounds(values: np.ndarray) -> tuple[float, float]:
    return float(values.min()), float(values.max())
