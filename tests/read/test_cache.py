"""The shard cache of training reads: whole shards, fetched ahead, bounded, reused, and nothing
written where a planted link points."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from pathlib import Path

import pytest

from shardpack.errors import RecordError, ShardpackError
from shardpack.index import load_index
from shardpack.read.cache import STALE_SECONDS, ShardCache
from shardpack.read.random_access import Records
from shardpack.storage.atomic import create_temp


@pytest.fixture
def pack(shared_pack) -> Path:
    return shared_pack({"a": 6, "b": 5}, shards=3, workers=1)


def _shards(out: Path) -> list[str]:
    return [s.file for s in load_index(out).split("train").shards]


def test_shards_are_copied_whole_and_the_oldest_go_beyond_the_limit(pack, tmp_path):
    files = _shards(pack)
    limit = max((pack / f).stat().st_size for f in files) + 1
    cache = ShardCache(load_index(pack), tmp_path / "cache", limit)
    cache.ensure(files[0], then=files[1:])  # the other two fetched ahead
    cache.close()
    folder = Path(cache.folder)
    for f in files:  # whole or not there
        assert not (folder / f).exists() or (folder / f).read_bytes() == (pack / f).read_bytes()
    assert sum((folder / f).exists() for f in files) == 1  # room for one: the others went
    assert load_index(folder).name == load_index(pack).name  # it reads as a pack
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []


def test_a_shard_another_reader_removes_before_it_opens_is_fetched_again(pack, tmp_path):
    first, second = _shards(pack)[:2]
    mine = ShardCache(load_index(pack), tmp_path / "cache")
    other = ShardCache(load_index(pack), tmp_path / "cache", limit=1)  # a DataLoader worker's
    records = Records(mine.folder)
    made_room = []

    def reading():
        if not made_room:  # between this reader's fetch and its open, the other makes room
            other.ensure(second)
            other.done(second)
            made_room.append(not (Path(mine.folder) / first).exists())
        return records[0]

    # before: "<first> at byte 0: cannot open (No such file or directory)" mid-epoch
    with Records(pack) as source:
        assert mine.read(first, reading)["key"] == source[0]["key"]
    assert made_room == [True]
    records.close()


def test_a_shard_missing_from_the_pack_is_one_line_naming_it(pack, tmp_path):
    out = Path(shutil.copytree(pack, tmp_path / "out"))
    gone = _shards(out)[1]
    (out / gone).unlink()
    cache = ShardCache(load_index(out), tmp_path / "cache")
    with pytest.raises(RecordError, match=rf"{out / gone}: missing \(index.json lists it"):
        cache.ensure(gone)


def test_a_killed_readers_leftovers_go_and_a_fetch_under_way_stays(pack, tmp_path):
    first = ShardCache(load_index(pack), tmp_path / "cache")
    folder = Path(first.folder)
    name = _shards(pack)[0]
    stale, fresh = (
        folder / f".{name}.0123456789abcdef.partial",
        folder / f".{name}.fedcba9876543210.partial",
    )
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    old = time.time() - STALE_SECONDS - 60
    os.utime(stale, (old, old))
    ShardCache(load_index(pack), tmp_path / "cache")
    assert not stale.exists() and fresh.exists()


def _fetching(folder: str, name: str, stop) -> None:
    """Another reader of the folder fetching shards: temporary files, then their renames."""
    while not stop.is_set():
        temps = []
        for _ in range(50):
            fd, tmp = create_temp(os.path.join(folder, name))
            os.close(fd)
            temps.append(tmp)
        for tmp in temps:
            os.replace(tmp, os.path.join(folder, name))


def test_a_reader_starts_while_another_renames_its_fetches(pack, tmp_path):
    """Ranks and DataLoader workers share a cache_dir, each looking for a killed reader's
    leftovers as it starts. Before: a fetch renamed between that listing and its age check
    was FileNotFoundError, a traceback out of a DataLoader worker that ended the rank (within
    a few hundred starts here, most often within ten)."""
    index = load_index(pack)
    folder = ShardCache(index, tmp_path / "cache").folder
    stop = multiprocessing.get_context("fork").Event()
    other = multiprocessing.get_context("fork").Process(
        target=_fetching, args=(folder, _shards(pack)[0], stop)
    )
    other.start()
    try:
        for _ in range(300):
            ShardCache(index, tmp_path / "cache")
    finally:
        stop.set()
        other.join()
    assert other.exitcode == 0


def test_a_planted_link_or_a_bad_limit_is_one_clear_error(pack, tmp_path):
    folder = Path(ShardCache(load_index(pack), tmp_path / "cache").folder)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for f in folder.iterdir():
        f.unlink()
    folder.rmdir()
    folder.symlink_to(elsewhere)
    with pytest.raises(ShardpackError, match="is a link or a file, not a folder"):
        ShardCache(load_index(pack), tmp_path / "cache")
    assert list(elsewhere.iterdir()) == []
    with pytest.raises(ShardpackError, match="cache_limit must be a positive number of bytes"):
        ShardCache(load_index(pack), tmp_path / "other", 0)
