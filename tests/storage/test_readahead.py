"""The read-ahead of a shard's local files: asked of the disk ahead of the worker once the page
cache lost them, only looked at while it holds them; never a read of its own, never a hang."""

from __future__ import annotations

import ctypes
import mmap
import os
import time

import pytest

from shardpack.storage.readahead import AHEAD, ReadAhead

SIZE = 64 << 10
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]  # fmt: skip


def _cached(path: str) -> bool:
    """Whether the page cache holds every page of the file: asked by mincore(2), which reads
    nothing (a read that may not wait would start the very read-ahead looked for)."""
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vector = (ctypes.c_ubyte * pages)()
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        try:
            assert _libc.mincore(ctypes.c_void_p(address), size, vector) == 0
        finally:
            _libc.munmap(ctypes.c_void_p(address), size)
    finally:
        os.close(fd)
    return all(v & 1 for v in vector)


def _evict(paths: list[str]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _files(folder, count: int) -> list[str]:
    paths = []
    for i in range(count):
        path = folder / f"{i:04d}.jpg"
        path.write_bytes(os.urandom(SIZE))
        paths.append(str(path))
    return paths


def _cold(tmp_path, count: int) -> list[str]:
    paths = _files(tmp_path, count)
    _evict(paths)
    if any(_cached(p) for p in paths):
        pytest.skip("this filesystem keeps the files in memory (tmpfs?): nothing to read ahead")
    return paths


def _until(check, tries: int = 3000) -> bool:
    """Whether `check()` comes true within `tries` looks 10 ms apart (the disk's time, not
    ours: a loaded machine only takes more of the tries)."""
    for _ in range(tries):
        if check():
            return True
        time.sleep(0.01)
    return False


def test_files_the_page_cache_lost_are_asked_of_the_disk_ahead_of_the_worker(tmp_path):
    paths = _cold(tmp_path, AHEAD + 40)
    ahead = ReadAhead(((os.path.basename(p), SIZE) for p in paths), lambda n: str(tmp_path / n),
                      limit=1 << 20)  # fmt: skip
    try:
        ahead.read()  # the worker starts on the first
        # the first file looked at was not cached: the next AHEAD files are asked for...
        assert _until(lambda: all(_cached(p) for p in paths[1:AHEAD]))
        assert ahead.cold
        # ...and none past the window
        assert not any(_cached(p) for p in paths[AHEAD + 1 :])
        for _ in range(20):  # the worker moves on: so does the window
            ahead.read()
        assert _until(lambda: all(_cached(p) for p in paths[AHEAD + 1 : AHEAD + 20]))
        assert not any(_cached(p) for p in paths[AHEAD + 22 :])
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


def test_a_fifo_a_folder_a_missing_file_and_one_over_the_limit_are_left_alone(tmp_path):
    paths = _cold(tmp_path, 8)
    os.mkfifo(tmp_path / "fifo.jpg")  # opened, it would wait for a writer without O_NONBLOCK
    (tmp_path / "folder.jpg").mkdir()
    big = tmp_path / "big.jpg"
    big.write_bytes(os.urandom(2 * SIZE))
    _evict([str(big)])
    names = ["fifo.jpg", "folder.jpg", "gone.jpg", *(os.path.basename(p) for p in paths)]
    ahead = ReadAhead([*((n, SIZE) for n in names), ("big.jpg", 2 * SIZE)],
                      lambda n: str(tmp_path / n), limit=SIZE)  # fmt: skip
    try:
        ahead.read()
        assert _until(lambda: all(_cached(p) for p in paths))
    finally:
        ahead.close()  # returns: the thread waits on nothing the files do
    assert not _cached(str(big))  # listed over the limit: the worker refuses it unread


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
