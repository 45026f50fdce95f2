"""A fresh plan's items packed as bytes in the packing process: read back as they were."""

from __future__ import annotations

import pickle
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
