"""What the workers note of each record (packing/facts.py), as a pack's index reports it."""

from __future__ import annotations

import json
import os
import struct
import time
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest

from shardpack import PackOptions, pack
from shardpack.packing.facts import FACT_DTYPE, facts_of
from shardpack.packing.fresh import FreshPack
from shardpack.packing.worker import write_shard
from shardpack.read.stream import iter_examples
from shardpack.sources import source_root
from shardpack.storage import storage_at
from tests.helpers import image, make_tree, pack_objects, run_cli, write_image


def _app1(body: bytes) -> bytes:
    return b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body


def _exif(orientation: int) -> bytes:
    """An APP1 segment of EXIF whose first IFD holds one tag: Orientation (a SHORT)."""
    tiff = b"II" + struct.pack("<HIH", 42, 8, 1) + struct.pack("<HHIHHI", 0x0112, 3, 1,
                                                                orientation, 0, 0)  # fmt: skip
    return _app1(b"Exif\x00\x00" + tiff)


@pytest.mark.parametrize("encode", ["keep", "png"])
def test_orientations_are_the_sources_read_by_the_header_probe(tmp_path: Path, encode: str):
    """Each JPEG's EXIF orientation as OpenCV reads it (the first EXIF APP1, past an XMP one),
    whether the bytes pass through or are re-encoded upright; a PNG has none counted."""
    plain = cv2.imencode(".jpg", image(1, 24, 32))[1].tobytes()
    xmp = _app1(b"http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta/>")
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    for name, segments in {"plain": b"", "six": _exif(6), "eight": xmp + _exif(8) + _exif(3),
                           "six_too": _exif(6)}.items():  # fmt: skip
        (src / f"{name}.jpg").write_bytes(plain[:2] + segments + plain[2:])
    write_image(src / "p.png", image(2))
    out = tmp_path / "out"
    pack(tmp_path / "src", out, PackOptions(encode=encode))
    summary = json.loads((out / "index.json").read_text())["summaries"]["train"]
    assert summary["records"] == 5
    assert summary["orientations"] == {"1": 1, "6": 2, "8": 1}


_OBJECT_TALLIES = ("objects", "objects_per_image", "object_classes", "box_sizes")


def _objects_summary(out: Path) -> dict:
    summary = json.loads((out / "index.json").read_text())["summaries"]["train"]
    return {what: summary.get(what) for what in _OBJECT_TALLIES}


def test_objects_are_counted_by_class_size_and_image_and_a_grow_keeps_the_counts(tmp_path):
    """a.png's two small boxes, b.png's large and medium one (COCO's sizes in pixels of the
    stored image), c.png without objects: packed with a.png and c.png, then b.png appended."""
    from tests.helpers import OBJECT_CLASSES, OBJECT_ROWS, write_objects_parquet

    a, b, c = OBJECT_ROWS
    out = pack_objects(tmp_path, [a, c])
    assert _objects_summary(out)["box_sizes"] == {"small": 2}
    write_objects_parquet(tmp_path / "objects.parquet", [a, c, b], OBJECT_CLASSES)
    pack(tmp_path / "objects.parquet", out, PackOptions(workers=1, grow="append"))
    assert _objects_summary(out) == {
        "objects": {"objects": 4, "images without objects": 1},
        "objects_per_image": {"0": 1, "2": 2},
        "object_classes": {"0": 2, "1": 1, "2": 1},  # class ids: inspect names them
        "box_sizes": {"small": 2, "medium": 1, "large": 1},
    }


def test_a_stamp_is_its_reads_own_and_no_image_is_stat_again(tmp_path: Path, monkeypatch):
    """Each record's stamp (size, mtime) is what its read's fstat saw, with no stat of the
    image's path of its own: the mtimes noted are the files', and no image path is stat'ed."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    when = time.time_ns() - 3600 * 10**9  # settled: stamps.RACY_NS
    for path in src.rglob("*.jpg"):
        os.utime(path, ns=(when, when))
    steps = FreshPack(source_root(str(src)), storage_at(str(tmp_path / "out")),
                      PackOptions(shards=1), None)  # fmt: skip
    steps.open()
    planned = steps.plan()
    dataset, (spec,) = planned.dataset, planned.plan.shards
    stat, looked = os.stat, []

    def counted(path, *args, **kwargs):
        looked.append(os.fspath(path))
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counted)
    result = write_shard(spec, planned.options, dataset.root, steps.out, dataset.schema,
                         dataset.source)  # fmt: skip
    monkeypatch.undo()
    assert not [p for p in looked if p.endswith(".jpg")]
    rows = facts_of(result.content, len(spec.items))
    assert rows["mtime"].tolist() == [when] * len(spec.items)
    assert rows["size"].tolist() == [(src / item.path).stat().st_size for item in spec.items]


def _sizes(values: list[int]) -> dict[str, float]:
    """min, median (numpy's) and max of byte counts, and their total, as a summary holds them."""
    ordered, middle = sorted(values), len(values) // 2
    median = ordered[middle] if len(values) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"min": ordered[0], "median": median, "max": ordered[-1], "total": sum(values)}


def test_stored_bytes_are_the_records_image_payloads_and_source_bytes_the_files(tmp_path):
    """A re-encoded and resized pack: each split's stored bytes are those of the images read
    back from its shards, its source bytes those of the files it came from (the summary held
    the source's alone, and inspect showed no figure of what the records take per image)."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 4})
    out = tmp_path / "out"
    pack(src, out, PackOptions(workers=1, encode="jpeg", max_side=16, quality=50))
    summary = json.loads((out / "index.json").read_text())["summaries"]["train"]
    records = list(iter_examples(out, "train"))
    stored = [len(r["image"]) for r in records]
    files = [(src / r["key"]).stat().st_size for r in records]
    assert summary["stored_bytes"] == _sizes(stored)
    assert summary["bytes"] == _sizes(files)
    assert all(a != b for a, b in zip(stored, files, strict=True))  # not the source's again
    assert sum(summary["stored_bytes_histogram"]["counts"]) == len(records)
    said = run_cli("inspect", str(out)).stdout
    assert (
        f"  bytes per image: source {_sizes(files)['median']:,} median, {sum(files):,} in "
        f"all; stored {_sizes(stored)['median']:,} median, {sum(stored):,} in all"
    ) in said


def test_a_journal_of_the_version_before_stored_bytes_is_merged_with_them_unknown(tmp_path):
    """A resume from a journal written before the facts noted stored bytes: its rows (44
    bytes, no "stored") are read for what they hold, every record is listed, and the stored
    bytes are left unknown, never summed over some records or read as another column."""
    src = make_tree(tmp_path / "src", {"cat": 3, "dog": 3})
    steps = FreshPack(source_root(str(src)), storage_at(str(tmp_path / "out")),
                      PackOptions(shards=2, workers=1, encode="png"), None)  # fmt: skip
    steps.open()
    planned = steps.plan()
    dataset, results = planned.dataset, []
    for spec in planned.plan.shards:
        result = write_shard(spec, planned.options, dataset.root, steps.out, dataset.schema,
                             dataset.source)  # fmt: skip
        rows = facts_of(result.content, len(spec.items))
        before = [(n, FACT_DTYPE[n]) for n in FACT_DTYPE.names if n != "stored"]
        old = np.empty(len(rows), before)
        for name, _ in before:
            old[name] = rows[name]
        read = facts_of(old.tobytes(), len(spec.items))
        assert read["stored"].tolist() == [0] * len(spec.items)
        assert read[[n for n, _ in before]].tolist() == rows[[n for n, _ in before]].tolist()
        results.append(replace(result, content=old.tobytes()))
    steps.merge(planned, results)
    out = tmp_path / "out"
    summary = json.loads((out / "index.json").read_text())["summaries"]["train"]
    assert summary["records"] == 6 and "stored_bytes" not in summary
    assert summary["bytes"]["total"] == sum(p.stat().st_size for p in src.rglob("*.jpg"))
    entries = json.loads((out / "contents.json").read_text())["shards"].values()
    assert sorted(k for e in entries for k in e["keys"]) == sorted(
        r["key"] for r in iter_examples(out)
    )
    assert "stored unknown" in run_cli("inspect", str(out)).stdout


def test_a_noted_row_reads_back_as_its_columns_and_an_item_not_written_as_zeros():
    """Each record's row is packed into the shard's table in the place of its item: read back
    as FACT_DTYPE's columns, at each column's extremes, and the items not written all zeros."""
    from shardpack.packing.facts import ShardFacts, content_digest, content_key

    facts = ShardFacts(3)
    loaded = b"\xff\xd8" + bytes(range(256)) * 64  # past three stripes: the key of a JPEG's
    features = {"image": bytes(5), "width": 2**32 - 1, "height": 1, "format": "jpeg",
                "channels": 3}  # fmt: skip
    facts.add(1, loaded, features, 6, (len(loaded), -(2**63)))
    rows = facts_of(facts.content(), 3)
    crc, size = content_key(loaded)
    assert rows[1].tolist() == (crc, size, content_digest(loaded), 2**32 - 1, 1, -(2**63), 5)
    assert rows[[0, 2]].tobytes() == bytes(2 * FACT_DTYPE.itemsize)
