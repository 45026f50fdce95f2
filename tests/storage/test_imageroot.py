"""storage/imageroot.py: a manifest's images read and sized from where each row says, on real
files and fsspec's in-process memory:// store."""

from __future__ import annotations

import os
import pickle
import threading
import uuid

import fsspec
import pytest

from shardpack.storage import storage_at
from shardpack.storage.imageroot import (
    INLINE,
    NOT_WEB,
    URL_BYTES,
    ImageRoot,
    ImageSizes,
    ImageUnusable,
    UrlRows,
    missing_root,
)

MEMORY = fsspec.filesystem("memory")


@pytest.fixture
def url() -> str:
    """A fresh memory:// prefix, removed afterwards."""
    prefix = f"memory://images-{uuid.uuid4().hex}"
    yield prefix
    MEMORY.rm(prefix, recursive=True) if MEMORY.exists(prefix) else None


def _said(sizes: ImageSizes, path: str) -> int | str:
    try:
        return sizes.of(path)
    except ImageUnusable as e:
        return str(e)


def test_sizes_at_scan_on_a_disk_and_a_store_say_why_an_image_is_unusable(tmp_path, url):
    (tmp_path / "a.jpg").write_bytes(b"abc")
    (tmp_path / "sub").mkdir()
    os.mkfifo(tmp_path / "pipe.jpg")
    MEMORY.pipe_file(f"{url}/b.jpg", b"bb")
    MEMORY.pipe_file(f"{url}/sub/c.jpg", b"c")
    sizes = ImageSizes(ImageRoot(storage_at(tmp_path)))
    try:
        paths = ["a.jpg", "sub", "pipe.jpg", "gone.jpg", f"{url}/b.jpg", f"{url}/sub",
                 f"{url}/gone.jpg", "https://example.invalid/x.jpg", "ftp://h/x.jpg"]  # fmt: skip
        said = {path: _said(sizes, path) for path in paths}
    finally:
        sizes.close()
    assert said == {
        "a.jpg": 3,
        "sub": f"image {tmp_path}/sub: not a regular file (a folder)",
        "pipe.jpg": f"image {tmp_path}/pipe.jpg: not a regular file (a FIFO)",
        "gone.jpg": f"image {tmp_path}/gone.jpg: No such file or directory",
        f"{url}/b.jpg": 2,
        f"{url}/sub": f"image {url}/sub: not a regular file (a folder)",
        f"{url}/gone.jpg": f"image {url}/gone.jpg: No such file or directory",
        "https://example.invalid/x.jpg": URL_BYTES,  # no request at scan
        "ftp://h/x.jpg": "image ftp://h/x.jpg: refused scheme: ftp:// is not http(s), "
        "the local disk's or an object store's",
    }


def test_a_root_reads_each_path_where_it_says_and_pickles_without_its_rows(tmp_path, url):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "a.jpg").write_bytes(b"in root")
    (tmp_path / "elsewhere.jpg").write_bytes(b"absolute")
    MEMORY.pipe_file(f"{url}/o.jpg", b"object")
    images = ImageRoot(storage_at(tmp_path / "root"))
    rows = UrlRows()
    rows.file("list/part-0.csv")
    rows.add(0, "https://example.invalid/1.jpg", 2)
    images.rows = rows.done()
    reads = [
        images.read(p, 100) for p in ["a.jpg", str(tmp_path / "elsewhere.jpg"), f"{url}/o.jpg"]
    ]
    assert reads == [b"in root", b"absolute", b"object"]
    # a grow keeps the held record of an image whose read is a request (packing/kept.py)
    paths = [
        "a.jpg",
        str(tmp_path / "elsewhere.jpg"),
        f"{url}/o.jpg",
        "https://example.invalid/1.jpg",
    ]
    assert [images.read_is_request(p) for p in paths] == [False, False, True, True]
    assert images.rows_of(["https://example.invalid/1.jpg", "https://example.invalid/2.jpg"]) == {
        "https://example.invalid/1.jpg": ("part-0.csv", 2)
    }
    copy = pickle.loads(pickle.dumps(images))
    assert copy == images and copy.rows_of(["https://example.invalid/1.jpg"]) == {}
    assert missing_root(str(tmp_path / "root")) is None and missing_root(url) is None
    assert missing_root(str(tmp_path / "elsewhere.jpg")) == "is not a folder"
    assert missing_root(str(tmp_path / "nowhere")) == "no such folder"


def test_a_url_lists_row_naming_no_web_url_is_told_what_it_names(tmp_path):
    """A data: URL in a URL list was told to list local and object-store images in a manifest
    of their own: it holds its image inline, and is told so (the URL shortened, which may be
    megabytes long); a path or file:// URL is still told that."""
    sizes = ImageSizes(ImageRoot(storage_at(tmp_path)), urls_only=True)
    inline = "data:image/png;base64," + "A" * 10_000
    try:
        said = [_said(sizes, path) for path in (inline, "a.jpg", "file:///etc/hostname")]
    finally:
        sizes.close()
    assert said[0] == (f"image {inline[:37]}...: {INLINE}") and "decode it to a file" in INLINE
    assert said[1:] == [f"image a.jpg: {NOT_WEB}", f"image file:///etc/hostname: {NOT_WEB}"]


def _outcome(read, name: str, limit: int) -> bytes | tuple[type, str]:
    """What a read gives: its bytes, or its error's class and message."""
    try:
        return read(name, limit)
    except Exception as e:
        return type(e), str(e)


def test_a_manifest_s_objects_are_read_ahead_in_order_and_fail_as_their_reads_alone(tmp_path, url):
    """Rows naming objects in two folders of a store, and a file on the disk between them:
    the objects come from an ObjectsAhead in the rows' order (its threads ended with the
    reading), the file from the disk (through a ReadAhead); an
    object gone since its listing fails as a read of it alone does, and one listed over the
    limit too, unfetched."""
    from shardpack.storage.remote import ObjectsAhead

    (tmp_path / "local.jpg").write_bytes(b"on the disk")
    objects = {f"{url}/{folder}/{i}.jpg": f"{folder} {i}".encode()
               for folder in ("a", "b") for i in range(20)}  # fmt: skip
    for path, data in objects.items():
        MEMORY.pipe_file(path, data)
    names = [*list(objects)[:25], str(tmp_path / "local.jpg"), *list(objects)[25:]]
    files = [(name, len(objects.get(name, b"on the disk"))) for name in names]
    gone, big = f"{url}/a/gone.jpg", f"{url}/b/big.jpg"
    MEMORY.pipe_file(gone, b"listed, then removed")
    MEMORY.pipe_file(big, b"x" * 64)
    files[3:3] = [(gone, 20), (big, 64)]
    names[3:3] = [gone, big]
    images = ImageRoot(storage_at(tmp_path))
    MEMORY.rm_file(gone)
    with images.reading(files, limit=32) as ahead:
        read = [_outcome(ahead.read, name, 32) for name in names]
        assert isinstance(ahead._objects, ObjectsAhead) and ahead._disk is not None
    assert not [t for t in threading.enumerate() if t.name.startswith("shardpack-objects")]
    alone = [_outcome(images.read, name, 32) for name in names]
    # refused unfetched, as a folder's object listed over the limit is: its listed size said
    assert read[4] == (alone[4][0], f"64 bytes, {alone[4][1]}") and "limit of 32" in read[4][1]
    assert read[:4] + read[5:] == alone[:4] + alone[5:]
    assert read[3][0] is FileNotFoundError and gone in read[3][1]
    assert [r for r in read if isinstance(r, bytes)] == [
        objects.get(name, b"on the disk") for name in names if name not in (gone, big)
    ]
