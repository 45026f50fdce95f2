"""The read-ahead of a shard's local files: asked of the disk ahead of the worker once the page
cache lost them, only looked at while it holds them; never a read of its own, never a hang;
a shard of each source whose files are on the disk (a folder, a split tree, COCO, YOLO, VOC, a
manifest's relative or absolute paths) read so."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from shardpack.sources import scan
from shardpack.storage.readahead import AHEAD, SAMPLE, ReadAhead
from tests.helpers import (
    evict,
    image,
    in_page_cache,
    make_tree,
    until,
    write_csv,
    write_image,
)

SIZE = 64 << 10


def _files(folder, count: int) -> list[str]:
    paths = []
    for i in range(count):
        path = folder / f"{i:04d}.jpg"
        path.write_bytes(os.urandom(SIZE))
        paths.append(str(path))
    return paths


def _cold(tmp_path, count: int) -> list[str]:
    paths = _files(tmp_path, count)
    evict(paths)
    return paths


def test_files_the_page_cache_lost_are_asked_of_the_disk_ahead_of_the_worker(tmp_path):
    paths = _cold(tmp_path, AHEAD + 40)
    ahead = ReadAhead(((os.path.basename(p), SIZE) for p in paths), lambda n: str(tmp_path / n),
                      limit=1 << 20)  # fmt: skip
    try:
        ahead.read()  # the worker starts on the first
        # the first file looked at was not cached: the next AHEAD files are asked for...
        # (the first file, read, may be cached when looked at: then the next looked at says)
        assert until(lambda: all(in_page_cache(p) for p in paths[SAMPLE:AHEAD]))
        assert ahead.cold
        # ...and none past the window
        assert not any(in_page_cache(p) for p in paths[AHEAD + 1 :])
        for _ in range(20):  # the worker moves on: so does the window
            ahead.read()
        assert until(lambda: all(in_page_cache(p) for p in paths[AHEAD + 1 : AHEAD + 20]))
        assert not any(in_page_cache(p) for p in paths[AHEAD + 22 :])
    finally:
        ahead.close()


def test_cached_files_are_only_looked_at(tmp_path):
    paths = _files(tmp_path, 3 * AHEAD)
    ahead = ReadAhead(((os.path.basename(p), SIZE) for p in paths), lambda n: str(tmp_path / n),
                      limit=1 << 20)  # fmt: skip
    for _ in paths:
        ahead.read()
    ahead.close()
    assert not ahead.cold


def test_a_fifo_a_folder_a_missing_file_one_on_no_disk_and_one_over_the_limit_are_left_alone(
    tmp_path,
):
    paths = _cold(tmp_path, 8)
    os.mkfifo(tmp_path / "fifo.jpg")  # opened, it would wait for a writer without O_NONBLOCK
    (tmp_path / "folder.jpg").mkdir()
    big = tmp_path / "big.jpg"
    big.write_bytes(os.urandom(2 * SIZE))
    evict([str(big)])
    names = ["fifo.jpg", "folder.jpg", "gone.jpg", "https://example.com/a.jpg",
             *(os.path.basename(p) for p in paths)]  # fmt: skip
    ahead = ReadAhead([*((n, SIZE) for n in names), ("big.jpg", 2 * SIZE)],
                      lambda n: None if "://" in n else str(tmp_path / n),  # (a URL: no path)
                      limit=SIZE)  # fmt: skip
    try:
        ahead.read()
        assert until(lambda: all(in_page_cache(p) for p in paths))
    finally:
        ahead.close()  # returns: the thread waits on nothing the files do
    assert not in_page_cache(str(big))  # listed over the limit: the worker refuses it unread


def test_a_reading_closed_before_its_files_are_read_ends_the_thread(tmp_path):
    paths = _files(tmp_path, 2 * AHEAD)
    ahead = ReadAhead(((os.path.basename(p), SIZE) for p in paths), lambda n: str(tmp_path / n),
                      limit=1 << 20)  # fmt: skip
    ahead.close()
    assert not ahead._thread.is_alive()
    empty = ReadAhead(iter(()), str, limit=1)  # no files: no thread
    empty.read()
    empty.close()
    assert not empty._thread.is_alive()


def _tree(src: Path) -> None:
    make_tree(src, {"cat": _COUNT // 2, "dog": _COUNT // 2})


def _split_tree(src: Path) -> None:
    make_tree(src / "train", {"cat": _COUNT // 2, "dog": _COUNT // 2})
    make_tree(src / "val", {"cat": 1, "dog": 1}, seed=_COUNT)


def _coco(src: Path) -> None:
    _images(src / "train2017")
    doc = {"images": [{"id": i + 1, "file_name": f"{i:03d}.jpg", "width": 32, "height": 24}
                      for i in range(_COUNT)],
           "annotations": [], "categories": [{"id": 1, "name": "cat"}]}  # fmt: skip
    (src / "annotations").mkdir()
    (src / "annotations/instances_train2017.json").write_text(json.dumps(doc))


def _yolo(src: Path) -> None:
    _images(src / "images/train")
    for i in range(_COUNT):
        (src / f"labels/train/{i:03d}.txt").parent.mkdir(parents=True, exist_ok=True)
        (src / f"labels/train/{i:03d}.txt").write_text("0 0.5 0.5 0.25 0.25\n")


def _voc(src: Path) -> None:
    _images(src / "JPEGImages")
    (src / "Annotations").mkdir()
    for i in range(_COUNT):
        (src / f"Annotations/{i:03d}.xml").write_text(
            "<annotation><size><width>32</width><height>24</height><depth>3</depth></size>"
            "<object><name>cat</name><bndbox><xmin>2</xmin><ymin>2</ymin><xmax>20</xmax>"
            "<ymax>20</ymax></bndbox></object></annotation>"
        )


def _manifest(src: Path) -> Path:
    paths = _images(src / "images")
    return write_csv(src / "list.csv", [{"path": f"images/{p.name}", "label": "cat"}
                                        for p in paths])  # fmt: skip


def _absolute_manifest(src: Path) -> Path:
    paths = _images(src / "images")
    (src / "lists").mkdir()
    return write_csv(src / "lists/list.csv", [{"path": str(p), "label": "cat"} for p in paths])


def _images(folder: Path) -> list[Path]:
    return [write_image(folder / f"{i:03d}.jpg", image(i)) for i in range(_COUNT)]


_COUNT = AHEAD + 16
_LAYOUTS = {"folder": _tree, "split tree": _split_tree, "coco": _coco, "yolo": _yolo, "voc": _voc,
            "manifest": _manifest, "absolute manifest": _absolute_manifest}  # fmt: skip


@pytest.mark.parametrize("layout", _LAYOUTS)
def test_each_source_s_shard_of_files_on_the_disk_is_read_ahead(tmp_path, layout):
    src = tmp_path / "src"
    dataset = scan(_LAYOUTS[layout](src) or src)
    items = max(dataset.splits.values(), key=len)
    paths = [dataset.root.local_path(item.path) for item in items]
    evict(paths)
    with dataset.root.reading(dataset.source.item_files(items), 1 << 20) as reads:
        data, _ = reads.read_stamped(items[0].path, 1 << 20)  # the worker's first read
        assert data == Path(paths[0]).read_bytes()
        # (the first file, read, may be cached when looked at: then the next looked at says)
        assert until(lambda: all(in_page_cache(p) for p in paths[SAMPLE:AHEAD]))
