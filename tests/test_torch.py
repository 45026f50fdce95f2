"""shardpack.torch: equal shares per rank and DataLoader worker, epochs, resume, mixing, DDP.

Each check runs in the kept reading Python (run_kept), where torch loads once."""

from __future__ import annotations

import inspect
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import end_workers, run_json

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def packs(shared_pack) -> dict[int, Path]:
    """25 records (13 of class a, 12 of b) packed into 1, 3 and 5 shards."""
    return {n: shared_pack({"a": 13, "b": 12}, shards=n, workers=1) for n in (1, 3, 5)}


def test_import_shardpack_loads_no_torch():
    code = "import sys, shardpack; shardpack.Records; print('torch' in sys.modules)"
    assert subprocess.check_output([sys.executable, "-c", code], text=True).strip() == "False"


_SHARES = """
import itertools, json, sys, torch
from shardpack.torch import ShardDataset
got = {}
# DataLoader workers only where they add something: each start forks them
for out, world, workers, drop in [*itertools.product(sys.argv[1:], (1, 2, 3), [0], (False, True)),
                                  (sys.argv[-1], 2, 3, False)]:
    shares = []
    for rank in range(world):
        ds = ShardDataset(out, batch_size=2, rank=rank, world_size=world, drop_remainder=drop,
                          decode=False)
        ds.set_epoch(1)
        if workers:
            loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=workers)
            shares.append([k for batch in loader for k in batch["key"]])
        else:
            shares.append([r["key"] for r in ds])
        assert len(ds) == len(shares[-1])
    got[f"{out} {world} {workers} {drop}"] = shares
print(json.dumps(got))
"""


def test_every_rank_and_worker_gets_the_same_number_of_records(packs):
    from shardpack.read.stream import iter_examples
    from tests.read.test_stream import check_equal_shares

    got = run_json(_SHARES, *map(str, packs.values()))
    for key, shares in got.items():
        out, world, workers, drop = key.split()
        everything = [r["key"] for r in iter_examples(out)]
        check_equal_shares(shares, everything, drop == "True", [k for s in shares for k in s])
        if workers == "3":  # workers change nothing: the rank's range, in its order
            assert shares == got[f"{out} {world} 0 {drop}"]


_EPOCHS = (
    inspect.getsource(end_workers)
    + """
import json, sys, torch
from shardpack.errors import ShardpackError
from shardpack.torch import ShardDataset
out, gzipped = sys.argv[1:]

def keys(epoch, **kw):
    ds = ShardDataset(out, decode=False, **kw)
    ds.set_epoch(epoch)
    return [r["key"] for r in ds]

hwc = next(iter(ShardDataset(out, layout="hwc")))
chw = next(iter(ShardDataset(out, transform=lambda r: (r["image"], r["label"]))))
errors = []
for bad in ({"layout": "xyz"}, {"seed": -1}, {"batch_size": 0}, {"rank": 2, "world_size": 2},
            {"transform": 3}, {"max_pixels": "4096"}, {"world_size": 2}, {"rank": 1},
            {"cache_limit": 1000}, {"rank": 0, "world_size": 26, "drop_remainder": True}):
    try:
        ShardDataset(out, **bad)
    except ShardpackError as e:
        errors.append(str(e))
for cache in ({}, {"cache_dir": gzipped + "-cache"}):
    try:
        ShardDataset(gzipped, **cache)
    except ShardpackError as e:
        errors.append(str(e))
persistent = []  # set_epoch cannot reach a persistent worker: refused, but where the order
for shuffle in (True, False):  # is the same every epoch
    ds = ShardDataset(out, decode=False, shuffle=shuffle)
    loader = torch.utils.data.DataLoader(ds, num_workers=1, persistent_workers=True)
    try:
        for epoch in (0, 1):
            ds.set_epoch(epoch)
            persistent.append(len(list(loader)))
    except ShardpackError as e:
        persistent.append(str(e))
        end_workers()
batches = []  # a DataLoader's batch_size not the dataset's: refused in its workers (before:
for mine, loaders in ((1, 4), (4, None), (1, None), (4, 4)):  # its batches out of order)
    ds = ShardDataset(out, decode=False, batch_size=mine)
    try:
        batches.append(len(list(torch.utils.data.DataLoader(ds, loaders, num_workers=1))))
    except ShardpackError as e:
        batches.append(str(e))
        end_workers()
print(json.dumps({
    "persistent": persistent, "batches": batches,
    "seed0": [keys(0, seed=0), keys(1, seed=0)], "again": [keys(0, seed=0), keys(1, seed=0)],
    "seed1": keys(0, seed=1), "plain": keys(5, shuffle=False), "block1": keys(0, shuffle_block=1),
    "hwc": [list(hwc["image"].shape), str(hwc["image"].dtype)],
    "chw": [list(chw[0].shape), str(chw[0].dtype), type(chw[1]).__name__],
    "errors": errors,
}))
"""
)


def test_epochs_differ_and_repeat_with_the_seed(packs, shared_pack):
    from shardpack.read.stream import iter_examples

    gzipped = shared_pack({"a": 2}, compression="gzip", workers=1)
    got = run_json(_EPOCHS, str(packs[5]), str(gzipped))
    written = [r["key"] for r in iter_examples(packs[5])]
    first, second = got["seed0"]
    assert sorted(first) == sorted(second) == sorted(written)
    assert first != second and got["again"] == got["seed0"] and got["seed1"] != first
    assert got["plain"] == written  # shuffle=False: the order pack wrote, every epoch
    # records are mixed within shards too: not one shard's records in their written order
    runs = sum(written.index(b) == written.index(a) + 1 for a, b in itertools.pairwise(first))
    assert runs < 5
    assert got["block1"] != first and sorted(got["block1"]) == sorted(written)
    assert got["hwc"][1] == got["chw"][1] == "torch.uint8" and got["chw"][2] == "int"
    assert got["hwc"][0][2] == 3 and got["chw"][0] == [3, *got["hwc"][0][:2]]
    out = packs[5]
    assert got["errors"][:10] == [
        "layout must be 'chw' or 'hwc', got: 'xyz'",
        "seed must be an integer of at least 0, got: -1",
        "batch_size must be a positive integer, got: 0",
        "rank must be 0 <= rank < world_size, got: rank=2, world_size=2",
        # before: a TypeError inside a DataLoader worker, at the first record
        "transform must be a function of a record (a dict), or None, got: 3",
        "max_pixels must be a positive integer, got: '4096'",
        # before: rank 0 of 2 (every rank of a job passing world_size= read rank 0's share)
        "rank and world_size go together, got: rank=None, world_size=2; pass both, or neither "
        "(torch.distributed's once init_process_group has run, else a world of one)",
        "rank and world_size go together, got: rank=1, world_size=None; pass both, or neither "
        "(torch.distributed's once init_process_group has run, else a world of one)",
        # before: no cache, nothing said
        "cache_limit bounds the copies in cache_dir, and none is given, got: cache_limit=1000; "
        "pass cache_dir= too, or no cache_limit",
        # before: every rank read none, an epoch of no step
        f"{out}: split 'train' holds 25 records, fewer than the 26 ranks: with drop_remainder "
        "each would read none; read it without drop_remainder (a few records then come "
        "twice), or with fewer readers",
    ]
    for said in got["errors"][10:]:  # with a cache, the pack named, not its copy, and none made
        assert said.startswith(f"{gzipped}: GZIP shards cannot be read at random offsets")
    assert len(got["errors"]) == 12 and not Path(f"{gzipped}-cache").exists()
    first, refused, *plain = got["persistent"]  # shuffled, then in the written order
    assert first == 25 and plain == [25, 25]
    assert refused.startswith("a DataLoader with persistent_workers=True began another epoch")
    assert refused.endswith("build the DataLoader with persistent_workers=False")
    assert got["batches"] == [*(
        f"the DataLoader's batch_size is {loaders}, the dataset's {mine}: give the dataset "
        f"batch_size={loaders} (1 for the DataLoader's batch_size=None); its workers take turns "
        "by the dataset's, so the DataLoader's batches would hold its records out of order, and "
        "a resume would read some twice and some never"
        for mine, loaders in ((1, 4), (4, 1))
    ), 25, 7]  # fmt: skip


_RESUME = """
import json, sys, torch
from shardpack.errors import ShardpackError
from shardpack.torch import ShardDataset
out, grown = sys.argv[1:3]
B = 3

def dataset(rank):
    return ShardDataset(out, batch_size=B, seed=7, rank=rank, world_size=2, decode=False)

def loader(ds, workers):
    return torch.utils.data.DataLoader(ds, batch_size=B, num_workers=workers)

got = []
# (rank, batches taken, DataLoader workers before, workers after the resume, whether the loop
# calls set_epoch of the state's epoch after loading it, as a loop that calls it before each
# epoch does)
for rank, stop, before, after, again in ((0, 0, 0, 2, False), (1, 1, 2, 3, True),
                                         (1, 4, 0, 0, False), (0, 2, 3, 0, True)):
    whole = dataset(rank)
    whole.set_epoch(2)
    whole = [r["key"] for r in whole]
    ds = dataset(rank)
    ds.set_epoch(2)
    batches = iter(loader(ds, before))
    taken = [k for _ in range(stop) for k in next(batches)["key"]]
    # without workers the dataset counts what it yielded itself; with them, the loop says
    # (before: state_dict() there said consumed=0, and the resume read the taken ones again)
    uncounted = None
    if before:
        try:
            uncounted = ds.state_dict()["consumed"]
        except ShardpackError as e:
            uncounted = str(e)
    state = ds.state_dict(consumed=len(taken)) if before else ds.state_dict()
    del batches
    resumed = dataset(rank)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    if again:
        resumed.set_epoch(2)
    rest = [k for batch in loader(resumed, after) for k in batch["key"]]
    length = len(resumed)
    resumed.set_epoch(3)  # the next epoch: whole
    got.append([whole, taken, rest, state, length, len(resumed), uncounted])
for other in (ShardDataset(out, world_size=3, rank=0, seed=7),
              ShardDataset(grown, batch_size=B, seed=7, rank=0, world_size=2),
              ShardDataset(sys.argv[3], batch_size=B, seed=7, rank=0, world_size=2)):
    try:
        other.load_state_dict(state)
    except ShardpackError as e:
        got.append(str(e))
# before: each loaded, and the rest read was another order's (records twice, others never)
orders = []
for changed in ({"shuffle_block": 1}, {"shuffle": False}, {"drop_remainder": True}):
    try:
        ShardDataset(out, seed=7, rank=0, world_size=2, **changed).load_state_dict(state)
        orders.append("loaded")
    except ShardpackError as e:
        orders.append(str(e))
counts = []  # a rank's 13 records are 5 batches of 3: 15 taken at most (the last one short)
for consumed in (15, 16, 26):  # 26: both ranks' count, not this rank's (before: the rest skipped)
    try:
        counts.append(dataset(0).state_dict(consumed=consumed)["consumed"])
    except ShardpackError as e:
        counts.append(str(e))
print(json.dumps(got + [orders, counts]))
"""


def test_a_resume_yields_exactly_the_rest_with_any_worker_count(packs, shared_pack):
    grown = shared_pack({"a": 13, "b": 13}, shards=3, workers=1)  # one record more
    other = shared_pack({"a": 13, "b": 12}, shards=3, workers=1, seed=1)  # as many, shuffled
    got = run_json(_RESUME, str(packs[3]), str(grown), str(other))
    counts = got.pop()
    orders = got.pop()
    changed = got.pop()  # before, read as the rest: other records, some twice, some never
    grew = got.pop()
    refused = got.pop()
    uncounted = (
        "state_dict() cannot count the records this iteration's DataLoader workers yielded "
        "(they hold copies of the dataset): pass consumed=, the records your loop took from "
        "this rank's DataLoader since the iteration began (batches x batch_size), or use "
        "torchdata's StatefulDataLoader"
    )
    for whole, taken, rest, state, length, next_length, _ in got:
        assert taken + rest == whole and len(rest) == length and next_length == len(whole)
        assert state["epoch"] == 2 and state["consumed"] == len(taken)
    assert [u for *_, u in got if u is not None] == [uncounted] * 2  # the two with workers
    assert {len(taken) for _, taken, *_ in got} >= {0, 3, 6}  # several stopping points
    assert refused == (  # before: "build the dataset with world_size=2", not a DDP job's pick
        "the state was taken with world_size=2, this dataset has 3: each rank's share of the "
        "epoch differs, so the rest of epoch 2 cannot be found; resume on 2 ranks, or go on "
        "with set_epoch(3)"
    )
    assert grew == (
        "the state was taken over 25 records, this dataset reads 26 (the pack grew, "
        "or is another): the rest of epoch 2 cannot be found; go on with set_epoch(3)"
    )
    assert changed == (
        "the state was taken over other shards than this dataset reads (the pack was grown or "
        "updated since, or is another): the rest of epoch 2 cannot be found; go on with "
        "set_epoch(3)"
    )
    assert orders == [
        f"the state was taken with other arguments than this dataset's ({arguments}): epoch "
        "2's order differs, so its rest cannot be found; build the dataset with the arguments "
        "the state was taken with, or go on with set_epoch(3)"
        for arguments in ("shuffle=True, shuffle_block=1, drop_remainder=False",
                          "shuffle=False, drop_remainder=False",
                          "shuffle=True, shuffle_block=4, drop_remainder=True")
    ]  # fmt: skip
    assert counts[0] == 15 and counts[1:] == [
        f"consumed={n} is more than this rank's DataLoader gives this iteration (13 records in "
        "batches of 3): count the records your loop took from this rank's DataLoader since the "
        "iteration began (batches x batch_size), not every rank's nor every epoch's"
        for n in (16, 26)
    ]


_GROWN_UNDER = """
import json, os, shutil, sys, torch
from shardpack import PackOptions, ShardpackError, pack
from shardpack.torch import ShardDataset
src, out = sys.argv[1:]

def keys(ds, epoch, workers):  # each epoch's DataLoader workers open the pack afresh
    ds.set_epoch(epoch)
    return [k for b in torch.utils.data.DataLoader(ds, batch_size=2, num_workers=workers)
            for k in b["key"]]

datasets = {workers: ShardDataset(out, batch_size=2, decode=False) for workers in (0, 1)}
got = {w: {"before": keys(ds, 1, w)} for w, ds in datasets.items()}
shutil.copy(os.path.join(src, "a", "img_000.jpg"), os.path.join(src, "a", "new.jpg"))
pack(src, out, PackOptions(grow="append", workers=1))
for w, ds in datasets.items():
    got[w]["appended"] = keys(ds, 1, w)
os.remove(os.path.join(src, "b", "img_000.jpg"))
pack(src, out, PackOptions(grow="update", workers=1))
for w, ds in datasets.items():
    try:
        got[w]["updated"] = keys(ds, 2, w)
    except ShardpackError as e:
        got[w]["updated"] = str(e)
print(json.dumps(got))
"""


def test_a_dataset_built_before_an_update_refuses_its_moved_records_and_reads_on_an_append(
    tmp_path,
):
    """Before: a DataLoader worker opened the updated index with the dataset's old counts, an
    IndexError past its end (or, at the same count, other records than the order drew);
    without workers, a rewritten shard not yet opened was blamed as 'cut short or replaced',
    with 'restore it from a copy or pack again'."""
    from shardpack import PackOptions, pack
    from tests.helpers import make_tree

    src, out = make_tree(tmp_path / "src", {"a": 5, "b": 4}), tmp_path / "out"
    pack(src, out, PackOptions(shards=3, workers=1))
    got = run_json(_GROWN_UNDER, str(src), str(out))
    assert set(got) == {"0", "1"}  # DataLoader workers
    for read in got.values():
        assert len(read["before"]) == 9 and read["appended"] == read["before"]  # as built
        assert read["updated"] == (
            f"{out}: split 'train' holds other shards than when this ShardDataset was built (the "
            "pack was updated since, or replaced): its records moved; build the ShardDataset "
            "again"
        )


_STATEFUL = (
    inspect.getsource(end_workers)
    + """
import json, sys
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader
from shardpack.errors import ShardpackError
from shardpack.torch import ShardDataset
out = sys.argv[1]
B = 3

def dataset():
    ds = ShardDataset(out, batch_size=B, seed=7, rank=1, world_size=2, decode=False)
    ds.set_epoch(2)
    return ds

whole = [r["key"] for r in dataset()]
got, workers = [], None
# (workers before, workers after, batches taken, snapshot_every_n_steps, how it resumes)
for before, after, stop, every, how in ((0, 0, 2, 1, "loader"), (2, 2, 3, 1, "loader"),
                                        (3, 1, 2, 2, "dataset"), (0, 2, 1, 1, "dataset")):
    loader = StatefulDataLoader(dataset(), batch_size=B, num_workers=before,
                                snapshot_every_n_steps=every)
    batches = iter(loader)
    taken = [k for _ in range(stop) for k in next(batches)["key"]]
    state = json.loads(json.dumps(loader.state_dict()))  # as a checkpoint keeps it
    del batches
    resumed = dataset()
    if how == "loader":  # the same worker count: the loader's own load_state_dict
        again = StatefulDataLoader(resumed, batch_size=B, num_workers=after)
        again.load_state_dict(state)
    else:  # another: the dataset takes the loader's state, a fresh loader reads the rest
        resumed.load_state_dict(state)
        again = DataLoader(resumed, batch_size=B, num_workers=after)
    got.append([taken, [k for batch in again for k in batch["key"]]])
    workers = state.get("_snapshot", {}).get("_worker_snapshots") or workers
# a checkpoint at the epoch's end, the loader's iteration over; the loop goes on with epoch 3
after_end = []
for count in (0, 2):
    loader = StatefulDataLoader(dataset(), batch_size=B, num_workers=count)
    assert len([k for batch in loader for k in batch["key"]]) == len(whole)
    state = json.loads(json.dumps(loader.state_dict()))
    resumed = dataset()
    again = StatefulDataLoader(resumed, batch_size=B, num_workers=count)
    again.load_state_dict(state)
    resumed.set_epoch(3)
    after_end.append([k for batch in again for k in batch["key"]])
errors = []
loader = StatefulDataLoader(dataset(), batch_size=B, num_workers=2)
batches = iter(loader)
next(batches)
state = loader.state_dict()
del batches
for count in (1, 3):  # another worker count, loaded into the loader (before: "a DataLoader
    again = StatefulDataLoader(dataset(), batch_size=B, num_workers=count)  # worker's state,
    again.load_state_dict(state)  # loaded outside that worker: load the whole ... state_dict()")
    try:
        errors.append(repr(len(list(again))))
    except ShardpackError as e:
        errors.append(str(e))
        end_workers()
for bad in (workers["worker_0"]["dataset_state"],  # one worker's, outside its worker
            {"_snapshot": {"_worker_snapshots": {"worker_0": {"dataset_state": None}}}}):
    try:
        dataset().load_state_dict(bad)
    except ShardpackError as e:
        errors.append(str(e))
epoch3 = dataset()
epoch3.set_epoch(3)
print(json.dumps({"whole": whole, "got": got, "errors": errors, "after_end": after_end,
                  "epoch3": [r["key"] for r in epoch3]}))
"""
)


def test_a_stateful_dataloader_resumes_with_exactly_the_rest(packs):
    """torchdata's StatefulDataLoader keeps the dataset's state of each of its workers."""
    got = run_json(_STATEFUL, str(packs[3]))
    whole, runs, errors = got["whole"], got["got"], got["errors"]
    assert len(whole) == 13  # rank 1 of 2 over 25 records
    for taken, rest in runs:
        assert taken + rest == whole
    assert [len(taken) for taken, _ in runs] == [6, 9, 6, 3]
    assert got["after_end"] == [got["epoch3"]] * 2 and got["epoch3"] != whole
    assert errors[:2] == [
        f"a StatefulDataLoader's state taken with num_workers=2, loaded into one with "
        f"num_workers={count}: load it into a StatefulDataLoader with num_workers=2, or into the "
        "dataset (ShardDataset.load_state_dict takes the loader's state and resumes any worker "
        "count)"
        for count in (1, 3)
    ]
    assert errors[2].startswith("a DataLoader worker's state, loaded outside that worker")
    assert errors[3].startswith("a StatefulDataLoader's state without its workers' dataset")


_MIX = """
import json, sys, collections
from shardpack import ShardpackError
from shardpack.torch import ShardDataset, mix
a, b = sys.argv[1:]

def mixed(end, epoch=0):
    m = mix([(a, 0.7), (ShardDataset(b, decode=False, seed=3), 0.3)], seed=1, end=end,
                      decode=False)
    m.set_epoch(epoch)
    return m

def sources(m):
    return [r["key"].split("/")[0] for r in m]

first = mixed("first")
keys = [r["key"] for r in first]
again = [r["key"] for r in mixed("first")]
resumed = mixed("first")
resumed.load_state_dict(first.state_dict(consumed=5))
rest = [r["key"] for r in resumed]
try:  # other weights draw another sequence (before: loaded, the rest another mix's)
    mix([(a, 0.5), (ShardDataset(b, decode=False, seed=3), 0.5)], seed=1,
        decode=False).load_state_dict(first.state_dict(consumed=5))
    reweighted = "loaded"
except ShardpackError as e:
    reweighted = str(e)
try:
    mix([(a, 0.7), (ShardDataset(b, decode=False, seed=4), 0.3)], seed=1,
        decode=False).load_state_dict(first.state_dict(consumed=5))
    reseeded = "loaded"
except ShardpackError as e:
    reseeded = str(e)
later = mixed("first", 1)  # the state of an epoch read to its end, loaded after a later one is
later.load_state_dict(first.state_dict())  # set: that later epoch is read whole
refused = []
for weight in (float("inf"), float("nan"), 0):  # refused when mixed, not at the first draw
    try:
        refused.append(repr(len(mix([(a, weight), (b, 1.0)], decode=False))))
    except ShardpackError as e:
        refused.append(str(e))
unpaired = []  # before: "too many values to unpack" from inside mix
for given in ([a, b], [(a,)], a):
    try:
        unpaired.append(repr(mix(given, decode=False)))
    except ShardpackError as e:
        unpaired.append(str(e))
print(json.dumps({"first": keys, "again": again, "rest": rest, "refused": refused,
                  "unpaired": unpaired, "reweighted": reweighted,
                  "reseeded": reseeded,
                  "later": [r["key"] for r in later],
                  "all": sources(mixed("all")), "epoch1": [r["key"] for r in mixed("first", 1)]}))
"""


def test_mixing_two_packs_is_deterministic_resumable_and_ends_by_its_rule(shared_pack):
    a = shared_pack({"a": 40}, workers=1, shards=2)
    b = shared_pack({"b": 30}, workers=1, shards=3)
    got = run_json(_MIX, str(a), str(b))
    keys = got["first"]
    assert keys == got["again"] and keys[5:] == got["rest"] and keys != got["epoch1"]
    assert got["later"] == got["epoch1"]
    assert got["reweighted"].startswith(
        "the state was taken with other arguments than this dataset's (weights=[0.5, 0.5], "
        "end='first', sources: seed=0, shuffle=True, shuffle_block=4, drop_remainder=False; "
        "seed=3, shuffle=True, shuffle_block=4, drop_remainder=False): epoch 0's order differs"
    )
    assert got["reseeded"] == got["reweighted"].replace("[0.5, 0.5]", "[0.7, 0.3]").replace(
        "seed=3", "seed=4"
    )  # a source's own seed: before, loaded, the rest another order's
    from_a = sum(k.startswith("a/") for k in keys)
    assert from_a == 40 or len(keys) - from_a == 30  # it ended when one source ran out
    assert len(set(keys)) == len(keys)
    assert sorted(got["all"]) == ["a"] * 40 + ["b"] * 30  # every record once
    for said, weight in zip(got["refused"], ("inf", "nan", "0"), strict=True):
        assert said.startswith("mix takes [(dataset, weight), ...]") and f"got: {weight}" in said
    for said, source in zip(got["unpaired"], (str(a), (str(a),), str(a)), strict=True):
        assert said.startswith("mix takes [(dataset, weight), ...]")
        assert said.endswith(f"got: {source!r}")


_DDP = """
import json, multiprocessing, socket, sys, torch, torch.distributed as dist
from shardpack.errors import ShardpackError
from shardpack.torch import ShardDataset
out, report = sys.argv[1:]

def rank(r, port):
    torch.set_num_threads(1)
    early = ShardDataset(out, decode=False)  # before the group: a world of one
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=r, world_size=2)
    try:  # it would read every record on every rank: refused
        next(iter(early))
    except ShardpackError as e:
        early = str(e)
    ds = ShardDataset(out, batch_size=2)  # rank and world size from torch.distributed
    # one given, the other the group's (before: world_size alone made every rank rank 0)
    partial = [ShardDataset(out, decode=False, world_size=2).rank,
               ShardDataset(out, decode=False, rank=r).world_size]
    try:  # a data-parallel group's size, without its rank: the global rank is past it
        partial.append(ShardDataset(out, decode=False, world_size=1).rank)
    except ShardpackError as e:
        partial.append(str(e))
    everyone = [None, None]
    dist.all_gather_object(everyone, partial)
    partial = everyone
    counts = {}
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        keys = [k for batch in torch.utils.data.DataLoader(ds, batch_size=2) for k in batch["key"]]
        everyone = [None, None]
        dist.all_gather_object(everyone, keys)
        counts[epoch] = everyone
    if r == 0:
        with open(report, "w") as f:
            json.dump({"rank": ds.rank, "world": ds.world_size, "epochs": counts,
                       "partial": partial,
                       "early": early if isinstance(early, str) else None}, f)
    dist.destroy_process_group()

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
# forked from this Python, where torch is loaded already: processes of their own all the same
ranks = [multiprocessing.get_context("fork").Process(target=rank, args=(r, port)) for r in (0, 1)]
for p in ranks:
    p.start()
for p in ranks:
    p.join(120)
print(json.dumps([p.exitcode for p in ranks]))
"""


@pytest.mark.slow
def test_two_ranks_on_gloo_read_equal_disjoint_shares(packs, tmp_path):
    """A real torch.distributed run: two processes on loopback, each a rank."""
    from shardpack.read.stream import iter_examples

    report = tmp_path / "ranks.json"
    assert run_json(_DDP, str(packs[3]), str(report)) == [0, 0]
    got = json.loads(report.read_text())
    assert (got["rank"], got["world"]) == (0, 2)
    assert got["partial"] == [  # (rank, world size) of each rank's datasets
        [0, 2, 0],
        [1, 2, "rank must be 0 <= rank < world_size, got: rank=1, world_size=1 "
                "(torch.distributed's rank; pass rank= too)"],
    ]  # fmt: skip
    assert got["early"] is not None
    assert got["early"].startswith("this ShardDataset was built before init_process_group")
    everything = sorted(r["key"] for r in iter_examples(packs[3]))
    for zero, one in got["epochs"].values():
        assert len(zero) == len(one) == 13  # 25 records: the first one read twice
        assert sorted(set(zero + one)) == everything and len(set(zero) & set(one)) == 1
    assert got["epochs"]["0"] != got["epochs"]["1"]


_SAMPLER = """
import json, sys, torch
from torch.utils.data import DataLoader, DistributedSampler
import shardpack
records = shardpack.Records(sys.argv[1], decode=True)
records[0], records[len(records) - 1]  # shards opened here, before the workers fork
keys = []
for rank in (0, 1):
    sampler = DistributedSampler(records, num_replicas=2, rank=rank, seed=0)
    sampler.set_epoch(1)
    loader = DataLoader(records, sampler=sampler, batch_size=4, num_workers=2,
                        collate_fn=lambda batch: [r["key"] for r in batch])
    keys.append([k for batch in loader for k in batch])
print(json.dumps({"keys": keys, "length": len(records)}))
"""


def test_records_serve_a_distributed_sampler_in_forked_workers(shared_pack):
    """Map-style random access over ArrayRecord shards, files opened before the fork."""
    out = shared_pack({"a": 6, "b": 5}, shards=3, workers=1, format="array_record")
    got = run_json(_SAMPLER, str(out))
    zero, one = got["keys"]
    assert len(zero) == len(one) == 6 and len(set(zero + one)) == got["length"] == 11


_CACHED = """
import json, os, sys
from shardpack.torch import ShardDataset
url, local, cache, limit = sys.argv[1:]
ds = ShardDataset(url, decode=False, seed=3, cache_dir=cache, cache_limit=int(limit) or None)
ds.set_epoch(1)
keys = [r["key"] for r in ds]
here = ShardDataset(local, decode=False, seed=3)
here.set_epoch(1)
files = [os.path.relpath(os.path.join(folder, f), cache)
         for folder, _, names in os.walk(cache) for f in names]
print(json.dumps({"same": keys == [r["key"] for r in here], "files": sorted(files)}))
"""


def test_a_pack_in_object_storage_reads_through_a_bounded_cache_kept_for_a_restart(
    s3, shared_pack, tmp_path
):
    out = shared_pack({"a": 13, "b": 12}, shards=5, workers=1)
    url = s3.put_tree(out, "packed")
    shards = sorted(p.name for p in out.iterdir() if ".tfrecord-" in p.name)
    biggest = max((out / name).stat().st_size for name in shards)

    def shards_fetched(since: int) -> list[str]:
        return [k.split("/")[-1] for k in s3.fetched("packed/")[since:] if ".tfrecord-" in k]

    bounded = run_json(_CACHED, url, str(out), str(tmp_path / "small"), str(biggest))
    kept = [f for f in bounded["files"] if ".tfrecord-" in f]
    assert bounded["same"] and len(kept) <= 1  # one shard's room: one left at the end
    assert all(f.endswith("/index.json") or f.split("/")[1] in shards for f in bounded["files"])

    mark = len(s3.fetched())
    first = run_json(_CACHED, url, str(out), str(tmp_path / "kept"), "0")
    assert first["same"] and sorted(set(shards_fetched(mark))) == shards
    mark = len(s3.fetched())
    again = run_json(_CACHED, url, str(out), str(tmp_path / "kept"), "0")  # a reader restarted
    assert again["same"] and shards_fetched(mark) == [] and again["files"] == first["files"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "small"]  # nothing else


_OPEN_FILES = """
import gc, json, os, sys
from shardpack.torch import ShardDataset, mix
five, three, cache = sys.argv[1:]

def shards_open():
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed since
            pass
    return sum(".tfrecord-" in name for name in names)

gc.collect()
before = shards_open()
most = {}
for name, ds in (("one", ShardDataset(five, decode=False, shuffle_block=1)),
                 ("mixed", mix([(five, 1.0), (three, 1.0)], end="all", decode=False,
                               shuffle_block=1))):
    ds.set_epoch(1)
    counts = [shards_open() - before for _ in ds]
    most[name] = [max(counts), len(counts)]
cached = mix([(five, 1.0), (three, 1.0)], end="all", decode=False, cache_dir=cache,
             cache_limit=1)
cached.set_epoch(1)
most["cached"] = [0, len(list(cached))]
kept = sorted(f for _, _, names in os.walk(cache) for f in names)
print(json.dumps({"most": most, "kept": kept}))
"""


def test_a_reader_keeps_a_shard_open_only_while_it_reads_it(packs, tmp_path):
    """A rank's range spans shards / ranks shards: all kept open for the epoch, a large pack
    ran past the open-file limit (1,024 by default on Linux: 'Too many open files'). A mix read
    each record through its source's read alone, so its shards stayed open too, and in use in
    the cache, whose cache_limit then held nothing back (every shard of both packs kept)."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("counts open files in /proc/self/fd (Linux)")
    got = run_json(_OPEN_FILES, str(packs[5]), str(packs[3]), str(tmp_path / "cache"))
    # shuffle_block=1: one shard a source at a time (before: 5, and 8 for the mix)
    assert got["most"] == {"one": [1, 25], "mixed": [2, 50], "cached": [0, 50]}
    assert got["kept"] == ["index.json", "index.json"]  # cache_limit=1: no shard kept


_BROKEN = (
    inspect.getsource(end_workers)
    + """
import json, sys, torch
from shardpack.torch import ShardDataset
got = []
for out, workers in zip(sys.argv[1:], (1, 0)):
    try:
        ds = ShardDataset(out, decode=False, shuffle=False)
        list(torch.utils.data.DataLoader(ds, num_workers=workers))
    except Exception as e:
        got.append([type(e).__name__, str(e), getattr(e, "offset", None)])
        end_workers()
print(json.dumps(got))
"""
)


def test_a_damaged_shard_is_our_one_line_error_from_a_dataloader_worker(shared_pack, tmp_path):
    """A worker's RecordError came back as torch's RuntimeError, a traceback for its message;
    a shard claiming 10**12 records in as many bytes, as a MemoryError (8 bytes a record)."""
    import shutil

    packed = shared_pack({"a": 13, "b": 12}, shards=3, workers=1)
    damaged, liar = (Path(shutil.copytree(packed, tmp_path / n)) for n in ("damaged", "liar"))
    shard = sorted(damaged.glob("*.tfrecord-*"))[1]
    data = bytearray(shard.read_bytes())
    data[40] ^= 0xFF  # inside the first record's bytes: its data CRC fails
    shard.write_bytes(bytes(data))
    index = json.loads((liar / "index.json").read_text())
    index["splits"]["train"]["shards"][0].update(num_records=10**12, num_bytes=10**13 * 2)
    (liar / "index.json").write_text(json.dumps(index))
    (worker, big) = run_json(_BROKEN, str(damaged), str(liar))
    assert worker == ["RecordError", f"{shard} at byte 0: data CRC mismatch (corrupt record): "
                      "the shard is damaged; restore it from a copy or pack again", 0]  # fmt: skip
    first = index["splits"]["train"]["shards"][0]["file"]
    # a size fault, of the whole file: no byte named, and no offset rebuilt (a RecordError's
    # subclass, which readers tell from OUT updated under them: test_changed.py)
    assert big[0] == "ShardSizeError" and big[1].startswith(f"{liar / first}: size ")
    assert f"index.json says {10**13 * 2:,} (cut short or replaced)" in big[1] and big[2] is None


_OBJECTS = """
import json, sys, numpy as np, torch
from torch.utils.data import DataLoader
from shardpack.torch import ShardDataset, collate_objects
ds = ShardDataset(sys.argv[1], shuffle=False, batch_size=3)
images, targets = next(iter(DataLoader(ds, batch_size=3, collate_fn=collate_objects)))
_, with_masks = collate_objects([ds.read(i) for i in range(3)], masks="mask")
image = torch.zeros((3, 4, 4), dtype=torch.uint8)
named = {"image": image, "height": 4, "width": 4, "objects/bbox": np.zeros((0, 4), np.float32)}
try:  # text names are no class ids: said in one line, after a record of no objects
    collate_objects([{**named, "key": "none", "objects/label": []},
                     {**named, "key": "k", "objects/label": ["cat", "dog", "cat"]}])
except Exception as e:
    refused = f"{type(e).__name__}: {e}"
print(json.dumps({"refused": refused,
                  "images": [[list(i.shape), str(i.dtype), float(i.max())] for i in images],
                  "boxes": [t["boxes"].tolist() for t in targets], "has_masks": [
                      "masks" in t for t in targets], "masks": [[list(t["masks"].shape),
                      str(t["masks"].dtype), t["masks"].sum(dim=(1, 2)).tolist()]
                      for t in with_masks],
                  "labels": [[str(t["labels"].dtype), t["labels"].tolist()] for t in targets]}))
"""


def test_collate_objects_gives_what_torchvision_detection_models_take(objects_out):
    read = run_json(_OBJECTS, str(objects_out))
    assert read["images"][0][:2] == [[3, 40, 60], "torch.float32"]
    assert read["images"][0][2] == pytest.approx(128 / 255)
    # a.png's cat [0.1, 0.1, 0.6, 0.5] of 40 x 60 pixels: x 6..30, y 4..24
    assert [round(v, 3) for v in read["boxes"][0][0]] == [6.0, 4.0, 30.0, 24.0]
    assert read["boxes"][1] == [[0.0, 0.0, 100.0, 120.0], [0.0, 0.0, 50.0, 60.0]]
    assert read["boxes"][2] == [] and read["labels"][2] == ["torch.int64", []]
    assert read["labels"][:2] == [["torch.int64", [0, 1]], ["torch.int64", [2, 0]]]
    assert read["refused"] == (  # before: "holds <U3 values" (numpy's dtype), and an empty
        # list of names was refused as "float64 values"
        "ShardpackError: collate_objects: record 'k': 'objects/label' holds text ('cat', 'dog', "
        "...), not class ids; map the names to ids in ShardDataset's transform"
    )
    # with masks="mask": a.png's id map split into its 2 objects' masks (12 x 16, 12 x 20 pixels)
    assert read["has_masks"] == [False] * 3
    assert read["masks"] == [[[2, 40, 60], "torch.uint8", [192, 240]],
                             [[2, 120, 100], "torch.uint8", [0, 0]],  # no map: none known
                             [[0, 30, 30], "torch.uint8", []]]  # fmt: skip
