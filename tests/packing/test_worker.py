"""The worker (packing/worker.py): what a shard's result carries back to the packing process."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardpack import PackOptions
from shardpack.packing.fresh import FreshPack
from shardpack.packing.worker import write_shard
from shardpack.sources import source_root
from shardpack.storage import storage_at
from tests.helpers import make_tree


@pytest.mark.parametrize("index_files", [False, True])
def test_record_offsets_come_back_only_for_dali_index_files(tmp_path: Path, index_files: bool):
    """The parent holds every shard's result until the merge: each record's offset (a Python
    int, ~36 bytes) is carried only where the merge writes DALI index files from them."""
    src = make_tree(tmp_path / "src", {"cat": 2, "dog": 2})
    options = PackOptions(shards=1, index_files=index_files)
    steps = FreshPack(source_root(str(src)), storage_at(str(tmp_path / "out")), options, None)
    steps.open()
    planned = steps.plan()
    dataset, (spec,) = planned.dataset, planned.plan.shards
    result = write_shard(spec, planned.options, dataset.root, steps.out, dataset.schema,
                         dataset.source)  # fmt: skip
    assert result.num_records == 4
    assert len(result.offsets) == (4 if index_files else 0)
