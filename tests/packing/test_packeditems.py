"""A fresh plan's items packed as bytes in the packing process: read back as they were."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from shardpack import PackOptions
from shardpack.packing.fresh import FreshPack
from shardpack.packing.packeditems import PACKED_CHUNK, PackedItems, columns, picked
from shardpack.packing.plan import make_plan
from shardpack.sources import Item, scan, source_root
from shardpack.storage import storage_at
from tests.helpers import make_tree

ITEMS = tuple(
    Item(f"k{i}", (i, i + 1) if i % 3 else None, f"/abs/p{i}", i, i if i % 2 else None,
         {"caption": f"c{i}"} if i % 5 else {})
    for i in range(PACKED_CHUNK * 2 + 7)
)  # fmt: skip


@pytest.mark.parametrize("packed", [False, True])
def test_columns_picks_and_positions_read_what_the_items_hold(packed: bool) -> None:
    given = PackedItems(ITEMS) if packed else ITEMS
    assert columns(given, "key", "fields") == ([i.key for i in ITEMS], [i.fields for i in ITEMS])
    at = [0, 5, PACKED_CHUNK - 1, PACKED_CHUNK, PACKED_CHUNK * 2 + 6]
    assert picked(given, at, "label", "path") == ([ITEMS[p].label for p in at],
                                                  [ITEMS[p].path for p in at])  # fmt: skip
    assert [given[p] for p in at] == [ITEMS[p] for p in at]
    assert given[-1] == ITEMS[-1] and type(given[-1]) is Item
    assert columns(PackedItems(()) if packed else (), "key") == ([],)


def test_a_packed_shard_refuses_a_position_outside_it_and_pickles_as_its_bytes() -> None:
    packed = PackedItems(ITEMS[:3])
    for outside in (3, -4):
        with pytest.raises(IndexError):
            packed[outside]
    again = pickle.loads(pickle.dumps(packed))  # to a Dask worker
    assert tuple(again) == ITEMS[:3] and len(again) == 3


def test_a_fresh_plan_holds_its_items_packed_and_the_dataset_none(tmp_path: Path) -> None:
    # The packing process held every Item (and its key) in the dataset and the plan's shards
    # for the whole run: ~170 bytes a file, 33 MB of a 200,000-file pack's peak.
    src = make_tree(tmp_path / "src", {"a": 6, "b": 5})
    options = PackOptions(workers=2, shards=3)
    steps = FreshPack(source_root(src), storage_at(tmp_path / "out"), options, None)
    steps.open()
    planned = steps.plan()
    dataset = scan(source_root(src), options)
    listed = make_plan(dataset, steps.name, options, 2)
    assert [type(spec.items) for spec in planned.plan.shards] == [PackedItems] * 3
    assert [tuple(spec.items) for spec in planned.plan.shards] == [
        spec.items for spec in listed.shards
    ]
    assert planned.plan.digest == listed.digest
    assert planned.dataset.splits == {"train": ()}


_COPIED_BY_A_FORKED_READER = """
import gc, os, random, sys
from shardpack.packing.forkpool import _PackedItems
from shardpack.sources import Item

def private_kb():
    with open("/proc/self/smaps_rollup") as f:
        fields = dict(line.split(":", 1) for line in f.read().splitlines()[1:])
    return sum(int(fields[k].split()[0]) for k in ("Private_Clean", "Private_Dirty"))

listing = [Item(f"c{i % 10}/{i:06d}.jpg", i % 10, f"c{i % 10}/{i:06d}.jpg", 1000 + i)
           for i in range(50_000)]
random.Random(0).shuffle(listing)  # a shard's items lie all over the listing
shard = tuple(listing[:25_000])
given = shard if sys.argv[1] == "tuple" else _PackedItems(shard)
read, write = os.pipe()
gc.freeze()  # as pack does before it forks: no collection in the worker walks the listing
if os.fork() == 0:  # a worker reading its shard's items
    before = private_kb()
    assert sum(item.size for item in given) == sum(1000 + int(item.key[3:9]) for item in given)
    os.write(write, str(private_kb() - before).encode())
    os._exit(0)
os.close(write)
_, status = os.wait()
assert os.waitstatus_to_exitcode(status) == 0
print(int(os.read(read, 64)))
"""


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="Linux's /proc only")
def test_a_forked_worker_does_not_copy_the_listing_it_reads():
    # A worker that read the inherited Items wrote their reference counts: every page of the
    # listing it touched (all, after the shuffle) became its own copy. Packed, the items are
    # bytes it only reads.
    def copied_kb(given: str) -> int:
        run = subprocess.run([sys.executable, "-c", _COPIED_BY_A_FORKED_READER, given],
                             capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
        return int(run.stdout)

    assert copied_kb("tuple") > 4000  # what the test can tell: ~200 bytes an item
    assert copied_kb("packed") < 2000  # a chunk of items at a time, made in the worker
