"""Grows with SRC or OUT in a store (moto's S3 server on loopback: tests/s3server.py): a grow
reads no held object and a rewritten one again, and a dataset grown in a store is the one grown
on disk. Apart from test_grow.py, which loads TensorFlow, so that they run beside it."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from shardpack.options import PackOptions
from shardpack.packing import stamps
from shardpack.packing.fresh import FreshPack
from shardpack.packing.grow import GrowPack
from shardpack.packing.packer import pack
from shardpack.read.stream import iter_examples
from tests.helpers import aged, image, make_tree, object_hashes, shard_files
from tests.packing.test_grow import _add, _changed_and_removed
from tests.packing.test_grow_promises import _told


def test_a_grow_of_a_src_on_s3_reads_no_held_object_and_an_update_reads_a_rewritten_one_alone(
    tmp_path: Path, s3, monkeypatch
):
    """Each object's stamp comes from its folder's listing (size, LastModified), taken before
    the workers read it: the same pack again keeps its shards unread, `--append` of one
    object GETs that one alone, not the held ones; an object rewritten under its key (another
    stamp) is read by `--update` and its record is the new bytes, the other records of its
    shard taken from the old one (kept.py: it GETted each again), with their stamps: the
    dataset a fresh pack writes, and the next grow reads none of them."""
    monkeypatch.setattr(stamps, "RACY_NS", 0)  # objects written just now are settled now
    url = s3.put_tree(make_tree(tmp_path / "src", {"cat": 3, "dog": 3}), "src")
    out = tmp_path / "out"
    pack(url, out, PackOptions(shards=2, workers=1))
    before = len(s3.fetched("src/"))
    pack(url, out, PackOptions(shards=2, workers=1))  # stamps.unchanged: every shard kept
    assert s3.fetched("src/")[before:] == []
    s3.write("src/dog/new_000.jpg", cv2.imencode(".jpg", image(900))[1].tobytes())
    before = len(s3.fetched("src/"))
    result = pack(url, out, PackOptions(grow="append", workers=1))
    assert result.grow["added"] == 1
    assert s3.fetched("src/")[before:] == ["src/dog/new_000.jpg"]
    rewritten = cv2.imencode(".png", image(901))[1].tobytes()
    s3.write("src/cat/img_001.jpg", rewritten)
    before = len(s3.fetched("src/"))
    result = pack(url, out, PackOptions(grow="update", workers=1))
    assert result.grow["changed"] == 1 and result.grow["shards_rewritten"] == 1
    # its shard is written again, the others' records kept from it (their stamps unchanged)
    assert s3.fetched("src/")[before:] == ["src/cat/img_001.jpg"]  # by the compare alone
    images = {r["key"]: r["image"] for r in iter_examples(out)}
    assert images["cat/img_001.jpg"] == rewritten and len(images) == 7
    fresh = tmp_path / "fresh"
    pack(url, fresh, PackOptions(shards=2, workers=1))
    assert _records(out) == _records(fresh) and _told(out) == _told(fresh)
    before = len(s3.fetched("src/"))
    again = pack(url, out, PackOptions(grow="update", workers=1))  # the kept ones' stamps held
    assert again.grow["nothing"] and s3.fetched("src/")[before:] == []


@pytest.mark.parametrize(
    ("key", "grow", "packed"),
    [("cat/img_000.jpg", "update", {}), ("cat/new_000.bmp", "append", {"dedup": "exact"})],
)
def test_an_object_a_grow_read_before_its_workers_is_packed_as_read_and_got_once(
    tmp_path: Path, s3, monkeypatch, key: str, grow: str, packed: dict
):
    """The bytes a grow packs of an object it read before its workers (`--update`'s compare
    of a changed one, `--dedup`'s keys of a new one) are those it keyed, kept for the worker
    (UrlSpool), not a second GET's, with the stamp listed before that read: an object
    rewritten once more between that read and the workers is packed as read, and the next
    grow, its stamp not the noted one, reads it again."""
    monkeypatch.setattr(stamps, "RACY_NS", 0)  # objects written just now are settled now
    url = s3.put_tree(make_tree(tmp_path / "src", {"cat": 2}), "src")
    out = tmp_path / "out"
    pack(url, out, PackOptions(workers=1, **packed))
    before = len(s3.fetched("src/"))
    with monkeypatch.context() as patched:
        read, later = _rewritten_after_the_plan(patched, s3, f"src/{key}", GrowPack)
        result = pack(url, out, PackOptions(grow=grow, workers=1))
    assert result.grow["changed" if grow == "update" else "added"] == 1
    assert s3.fetched("src/")[before:] == [f"src/{key}"]
    assert _pixels(_records(out)[key]["image"]) == _pixels(read)
    assert pack(url, out, PackOptions(grow="update", workers=1)).grow["changed"] == 1
    assert _pixels(_records(out)[key]["image"]) == _pixels(later)


def test_a_fresh_pack_with_dedup_on_s3_gets_each_object_once(tmp_path: Path, s3, monkeypatch):
    """--dedup's pass keys every object before the plan, and the workers pack the bytes it read
    (kept in the run's UrlSpool), not a second GET's: each object is got once, the copy left
    out included, and each is noted with the stamp listed before that read: one rewritten
    between the pass and the workers is packed as keyed, and the next grow reads it alone; a
    grow's new copy is read once (and its held twin, to confirm it), and noted so too."""
    monkeypatch.setattr(stamps, "RACY_NS", 0)  # objects written just now are settled now
    tree = make_tree(tmp_path / "src", {"cat": 3, "dog": 2})
    (tree / "dog" / "copy.jpg").write_bytes((tree / "cat" / "img_002.jpg").read_bytes())
    url = s3.put_tree(tree, "src")
    out = tmp_path / "out"
    with monkeypatch.context() as patched:
        read, later = _rewritten_after_the_plan(patched, s3, "src/cat/img_001.jpg", FreshPack)
        result = pack(url, out, PackOptions(workers=1, dedup="exact"))
    got = s3.fetched("src/")
    assert sorted(got) == sorted(set(got)) == [f"src/{key}" for key in s3.keys("src")], got
    assert result.num_records == 5  # the copy left out
    assert _pixels(_records(out)["cat/img_001.jpg"]["image"]) == _pixels(read)
    before = len(got)
    grown = pack(url, out, PackOptions(grow="update", workers=1, dedup="exact"))
    assert grown.grow["changed"] == 1
    assert s3.fetched("src/")[before:] == ["src/cat/img_001.jpg"]
    assert _pixels(_records(out)["cat/img_001.jpg"]["image"]) == _pixels(later)
    s3.write("src/dog/zcopy.jpg", (tree / "dog" / "img_000.jpg").read_bytes())  # a new copy
    before = len(s3.fetched("src/"))
    grown = pack(url, out, PackOptions(grow="append", workers=1, dedup="exact"))
    assert grown.grow["added"] == 0  # the new copy and its held twin read (the copy confirmed)
    assert sorted(s3.fetched("src/")[before:]) == ["src/dog/img_000.jpg", "src/dog/zcopy.jpg"]
    before = len(s3.fetched("src/"))  # each copy left out noted with its stamp: none read
    assert pack(url, out, PackOptions(grow="update", workers=1, dedup="exact")).grow["nothing"]
    assert s3.fetched("src/")[before:] == []


def _rewritten_after_the_plan(monkeypatch, s3, key: str, packing: type) -> tuple[bytes, bytes]:
    """Write an image at `key` now, and another of its size once a pack or grow (`packing`:
    FreshPack, GrowPack) has planned (its compare and --dedup read what they read) in the next
    second (another LastModified: another stamp); the two images."""
    read, later = (cv2.imencode(".bmp", image(seed))[1].tobytes() for seed in (903, 904))
    assert len(read) == len(later) and read != later
    s3.write(key, read)
    written, planned = time.time(), packing.plan

    def rewritten(self):
        found = planned(self)
        time.sleep(max(0.0, math.floor(written) + 1.01 - time.time()))
        s3.write(key, later)
        return found

    monkeypatch.setattr(packing, "plan", rewritten)
    return read, later


def _pixels(encoded: bytes) -> bytes:
    return cv2.imdecode(np.frombuffer(encoded, np.uint8), cv2.IMREAD_UNCHANGED).tobytes()


def _records(out: Path) -> dict[str, dict]:
    return {r["key"]: r for r in iter_examples(out)}


def test_a_dataset_grown_on_s3_is_byte_identical_to_one_grown_on_disk(tmp_path: Path, s3):
    src = make_tree(tmp_path / "src", {"cat": 6, "dog": 6})
    aged(src)
    local, out = tmp_path / "local", s3.url("packed/pets")

    def index(url: str) -> dict:
        import fsspec  # the s3 fixture skips where s3fs (and fsspec) is missing

        with fsspec.open(f"{url}/index.json", "rb") as f:
            doc = json.load(f)
        doc.pop("stats")
        for run in doc.get("history", []):
            run.pop("when")
        return doc

    def both(**options) -> None:  # the same command into both, then the same bytes
        for where in (str(local), out):
            pack(src, where, PackOptions(workers=1, **options))
        mine, theirs = object_hashes(out), object_hashes(local.as_uri())
        assert mine.pop("index.json") and theirs.pop("index.json")  # timings differ
        assert mine == theirs
        assert index(out) == index(local.as_uri())

    both(shards=4, name="pets")
    _add(src, "eel", 3, seed=800)
    aged(src)
    both(grow="append")
    _changed_and_removed(src)
    both(grow="update")  # its gaps closed by copies on the store
    assert index(out)["retired"]  # the shards moved into the gaps, by their old names
    assert sorted(shard_files(local)) == [f"pets-train.tfrecord-{i:05d}-of-00004" for i in range(4)]
    assert s3.uploads() == []


def test_a_local_manifest_of_objects_in_s3_is_stamped_when_packed(tmp_path: Path, s3, monkeypatch):
    """A CSV on this disk naming s3:// images: the pack notes each object's listed stamp, as
    for a SRC in the bucket, so that the grow after it GETs none of them, and an object
    rewritten since is the one GETted (before, the first grow after the pack GETted them all)."""
    monkeypatch.setattr(stamps, "RACY_NS", 0)  # objects written just now are settled now
    s3.put_tree(make_tree(tmp_path / "src", {"cat": 2, "dog": 2}), "src")
    rows = [f"{s3.url(f'src/{key}')},{key.split('/')[0]}" for key in s3.keys("src")]
    manifest = tmp_path / "images.csv"
    manifest.write_text("image,label\n" + "\n".join(rows) + "\n")
    out = tmp_path / "out"
    pack(manifest, out, PackOptions(workers=1))
    before = len(s3.fetched("src/"))
    again = pack(manifest, out, PackOptions(grow="update", workers=1))
    assert again.grow["nothing"] and s3.fetched("src/")[before:] == []
    s3.write("src/dog/img_001.jpg", cv2.imencode(".png", image(902))[1].tobytes())
    before = len(s3.fetched("src/"))
    result = pack(manifest, out, PackOptions(grow="update", workers=1))
    assert result.grow["changed"] == 1  # read by the compare, its bytes kept for its worker
    assert s3.fetched("src/")[before:] == ["src/dog/img_001.jpg"]
    before = len(s3.fetched("src/"))
    assert pack(manifest, out, PackOptions(grow="update", workers=1)).grow["nothing"]
    assert s3.fetched("src/")[before:] == []
