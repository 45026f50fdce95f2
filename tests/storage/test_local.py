"""storage/local.py: what the disk's own verbs promise beyond the store-wide tests."""

from __future__ import annotations

import os

import pytest

from shardpack.storage import local, storage_at
from shardpack.storage.srcfiles import RefusedFile


def test_a_sink_writes_parts_in_order_between_buffered_writes(tmp_path):
    """FileSink.write_parts (a shard's chunk in one writev: more parts than one writev takes
    here) lands after what write() buffered before it and before what it buffers after."""
    sink = storage_at(str(tmp_path)).create("s.bin")
    parts = [bytes([i % 251]) * (1 + i % 300) for i in range(2500)]
    sink.write(b"head")
    sink.write_parts(parts)
    sink.write(b"tail")
    sink.commit()
    assert (tmp_path / "s.bin").read_bytes() == b"head" + b"".join(parts) + b"tail"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _refusal(storage, name: str, limit: int) -> tuple[type, str]:
    with pytest.raises(RefusedFile) as refused:
        storage.read(name, limit)
    return type(refused.value), str(refused.value)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts this process's fds")
def test_a_reading_opens_each_file_in_its_folders_fd_and_refuses_as_a_read_does(tmp_path):
    """LocalStorage.reading reads each file relative to its folder's fd, held from its first
    file to the reading's end (one a folder: the kernel walks one name a file); it reads and
    stamps what read_stamped does, and refuses a FIFO, a folder and a file over the limit with
    the same words."""
    for folder in ("a", "b/c"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "x.jpg").write_bytes(folder.encode() * 10)
    (tmp_path / "top.jpg").write_bytes(b"top")
    os.mkfifo(tmp_path / "a" / "pipe.jpg")
    (tmp_path / "a" / "dir.jpg").mkdir()
    (tmp_path / "a" / "gone.jpg").symlink_to(tmp_path / "nowhere.jpg")  # dangling
    src = storage_at(str(tmp_path))
    said = f"a link to a missing file ({tmp_path}/nowhere.jpg): restore the file or remove"
    assert _refusal(src, "a/gone.jpg", 100)[1].startswith(said)
    names = ["a/x.jpg", "b/c/x.jpg", "top.jpg", "a/x.jpg"]
    before = _open_fds()
    with src.reading(iter([]), 100) as reading:
        assert [reading.read_stamped(n, 100) for n in names] == [
            src.read_stamped(n, 100) for n in names
        ]
        assert _open_fds() == before + 3  # a, b/c and the root: one fd each, kept
        refused = (("a/pipe.jpg", 100), ("a/dir.jpg", 100), ("b/c/x.jpg", 5), ("a/gone.jpg", 9))
        for name, limit in refused:
            assert _refusal(reading, name, limit) == _refusal(src, name, limit)
        with pytest.raises(FileNotFoundError):
            reading.read("gone/x.jpg", 100)  # a folder not there: its file's whole path says
    assert _open_fds() == before


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts this process's fds")
def test_a_reading_of_more_folders_than_it_holds_reads_the_rest_by_whole_path(tmp_path):
    """Past _HELD_FOLDERS folders a reading holds no more fds (a tree of thousands of class
    folders), and still reads every file."""
    count = local._HELD_FOLDERS + 5
    for i in range(count):
        (tmp_path / f"{i}").mkdir()
        (tmp_path / f"{i}" / "x.jpg").write_bytes(b"%d" % i)
    before = _open_fds()
    with storage_at(str(tmp_path)).reading(iter([]), 100) as reading:
        assert [reading.read(f"{i}/x.jpg", 100) for i in range(count)] == [
            b"%d" % i for i in range(count)
        ]
        assert _open_fds() == before + local._HELD_FOLDERS
    assert _open_fds() == before


def _told(storage, name: str = "") -> tuple[list, list]:
    """(entry_names sorted, each Folder of walk_folders as a tuple) of a folder of `storage`."""
    return sorted(storage.entry_names(name)), [tuple(f) for f in storage.walk_folders(name)]


def test_a_folder_listed_once_tells_what_it_tells_listed_anew(tmp_path, monkeypatch):
    """In a listing_once block (a scan's), entry_names and walk_folders of the store and its
    children tell what they tell outside one (a link to a folder no folder to entry_names, a
    walked one to walk_folders; a FIFO, a dangling link, a folder that cannot be listed), each
    folder listed once; after the block, each is listed anew."""
    src = tmp_path / "src"
    for name in ("a/x.jpg", "a/b/y.jpg", "c.txt"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(b"x")
    (src / "a" / "up").symlink_to(src / "a" / "b", target_is_directory=True)
    (src / "a" / "gone.jpg").symlink_to(tmp_path / "nowhere")
    os.mkfifo(src / "a" / "pipe.jpg")
    store = storage_at(str(src))
    outside = {name: _told(store, name) for name in ("", "a", "a/b")}
    with pytest.raises(FileNotFoundError):
        list(store.entry_names("missing"))
    listed, real = [], os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": (listed.append(path), real(path))[1])
    with store.listing_once():
        for _ in range(2):  # as sources recognising SRC ask: names, and a walk's top alone
            assert sorted(store.child("a").entry_names()) == outside["a"][0]
            assert sorted(store.entry_names()) == outside[""][0]
            assert sorted(store.entry_names("a/b")) == outside["a/b"][0]
            assert tuple(next(store.walk_folders("a"))) == outside["a"][1][0]
            with pytest.raises(FileNotFoundError):
                list(store.entry_names("missing"))
        assert [tuple(f) for f in store.walk_folders()] == outside[""][1]  # a scan's, last
        assert sorted(listed) == sorted(str(store.path(p)) for p in ("", "a", "a/b", "missing"))
    (src / "a" / "new.jpg").write_bytes(b"n")
    assert ("new.jpg", False) in store.child("a").entry_names()
    assert "new.jpg" in next(store.walk_folders("a")).files
