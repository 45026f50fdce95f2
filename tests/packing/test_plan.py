"""plan.py: shard arithmetic, names, and make_plan as a pure, seeded function of its inputs."""

from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np
import pytest

from shardpack.containers import CONTAINERS, get_container
from shardpack.images import max_file_bytes
from shardpack.options import PackOptions
from shardpack.packing.plan import (
    BYTE_S,
    GAIN_MARGIN,
    ITEM_S,
    POOL_START_S,
    RAW_EXPANSION,
    WORKER_START_S,
    best_workers,
    make_plan,
    num_shards_for,
    run_seconds,
    shard_bounds,
    work_seconds,
)
from shardpack.schema import Feature, Schema
from shardpack.sources import Dataset, Item, scan
from shardpack.sources.cifar import CIFAR_PIXELS
from tests import helpers


def _dataset(n: int = 40, classes: int = 4, size: int = 1000, splits=("train",)) -> Dataset:
    """A folder listing of n items per split, each `size` bytes on disk, sorted as scan sorts."""

    def item(split: str, i: int) -> Item:
        key = f"c{i % classes}/{split}_{i:04d}.jpg"
        return Item(key=key, label=i % classes, path=key, size=size)

    items = {
        split: tuple(sorted((item(split, i) for i in range(n)), key=lambda it: it.key))
        for split in splits
    }
    names = tuple(f"c{k}" for k in range(classes))
    return Dataset("folder", "/src", Schema.build(names), items)


def _keys(plan, split: str = "train") -> list[str]:
    return [item.key for shard in plan.shards if shard.split == split for item in shard.items]


# ---- shard_bounds --------------------------------------------------------------------------


@pytest.mark.parametrize("num_items", [*range(0, 60), 97, 1000, 12345, 1_281_167])
def test_shard_bounds_balanced_and_covering(num_items):
    for num_shards in [*range(1, 40), 64, 100, 1024]:
        bounds = shard_bounds(num_items, num_shards)
        assert len(bounds) == num_shards
        assert bounds[0][0] == 0
        assert bounds[-1][1] == num_items
        for (_, end), (start, _) in itertools.pairwise(bounds):
            assert end == start  # contiguous, no gap, no overlap
        sizes = [end - start for start, end in bounds]
        assert min(sizes) >= 0
        assert max(sizes) - min(sizes) <= 1, (num_items, num_shards, sizes)
        assert sum(sizes) == num_items


def test_shard_bounds_examples():
    assert shard_bounds(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert shard_bounds(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert shard_bounds(5, 1) == [(0, 5)]


@pytest.mark.parametrize("num_shards", [0, -1])
def test_shard_bounds_refuses_non_positive(num_shards):
    with pytest.raises(ValueError, match=repr(num_shards)):
        shard_bounds(10, num_shards)


# ---- shard_name ----------------------------------------------------------------------------


def test_shard_name_format():
    shard_name = get_container("tfrecord").shard_name
    assert shard_name("cifar10", "train", 0, 8) == "cifar10-train.tfrecord-00000-of-00008"
    assert shard_name("x.y", "test", 41, 100) == "x.y-test.tfrecord-00041-of-00100"
    assert shard_name("big", "train", 123456, 200000) == "big-train.tfrecord-123456-of-200000"


@pytest.mark.parametrize("fmt", sorted(CONTAINERS))
def test_shard_names_sort_in_shard_order(fmt):
    names = [get_container(fmt).shard_name("d", "train", i, 1500) for i in range(1500)]
    assert sorted(names) == names


@pytest.mark.parametrize("fmt", sorted(CONTAINERS))
def test_the_plan_names_shards_through_the_container(fmt):
    plan = make_plan(_dataset(n=9), "d", PackOptions(shards=3, format=fmt), workers=1)
    container = get_container(fmt)
    assert [s.file for s in plan.shards] == [container.shard_name("d", "train", i, 3)
                                             for i in range(3)]  # fmt: skip
    other = make_plan(_dataset(n=9), "d", PackOptions(shards=3), workers=1)
    assert (plan.digest == other.digest) == (fmt == "tfrecord")  # the format is in the digest


# ---- make_plan -----------------------------------------------------------------------------


def test_make_plan_is_pure():
    dataset = _dataset(splits=("train", "test"))
    options = PackOptions(seed=3, shards=4)
    a = make_plan(dataset, "d", options, workers=2)
    b = make_plan(_dataset(splits=("train", "test")), "d", PackOptions(seed=3, shards=4), 2)
    assert a == b
    assert a.digest == b.digest
    assert re.fullmatch(r"[0-9a-f]{64}", a.digest)


def test_make_plan_from_a_real_scan_is_pure(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"cats": 7, "dogs": 5, "owls": 3})
    options = PackOptions(shards=3)
    a = make_plan(scan(src), "pets", options, workers=2)
    b = make_plan(scan(src), "pets", options, workers=2)
    assert a == b
    assert sorted(_keys(a)) == [i.key for i in scan(src).splits["train"]]


def test_plan_covers_every_item_once_per_split():
    dataset = _dataset(n=37, splits=("train", "test"))
    plan = make_plan(dataset, "d", PackOptions(shards=5), workers=1)
    for split in ("train", "test"):
        assert sorted(_keys(plan, split)) == sorted(i.key for i in dataset.splits[split])
    assert [s.split for s in plan.shards] == ["test"] * 5 + ["train"] * 5  # splits sorted
    for shard in plan.shards:
        assert shard.num_shards == 5
        assert shard.file == get_container("tfrecord").shard_name("d", shard.split, shard.index, 5)
        assert len(shard.items) in (7, 8)
    assert [s.index for s in plan.shards if s.split == "train"] == [0, 1, 2, 3, 4]


def test_seed_changes_order_and_digest():
    dataset = _dataset()
    a = make_plan(dataset, "d", PackOptions(seed=0, shards=4), 1)
    b = make_plan(dataset, "d", PackOptions(seed=1, shards=4), 1)
    assert _keys(a) != _keys(b)
    assert sorted(_keys(a)) == sorted(_keys(b))
    assert a.digest != b.digest


def test_shuffle_really_shuffles():
    keys = _keys(make_plan(_dataset(), "d", PackOptions(seed=0, shards=1), 1))
    assert keys != sorted(keys)


def test_no_shuffle_keeps_sorted_order():
    dataset = _dataset()
    plan = make_plan(dataset, "d", PackOptions(shuffle=False, shards=3), 1)
    assert _keys(plan) == [i.key for i in dataset.splits["train"]]
    assert [len(s.items) for s in plan.shards] == [13, 14, 13]


def test_shards_cap_at_item_count():
    plan = make_plan(_dataset(n=3), "d", PackOptions(shards=10), workers=1)
    assert len(plan.shards) == 3
    assert all(len(s.items) == 1 for s in plan.shards)
    assert plan.shards[0].file == "d-train.tfrecord-00000-of-00003"
    plan = make_plan(_dataset(n=3), "d", PackOptions(), workers=16)
    assert len(plan.shards) == 1  # a worker per shard would cost more than 3 images take


# 1 KB files passed through cost ~53 us each (50,000: 2.6 s, a tenth of it not divided by
# more workers); 100 KB files encoded to PNG ~10.6 ms each.
@pytest.mark.parametrize("n, size, encode, workers, shards", [
    (255, 1000, "keep", 16, 1), (2000, 1000, "keep", 16, 1), (50_000, 1000, "keep", 16, 6),
    (20, 100_000, "png", 16, 1), (40, 100_000, "png", 16, 3), (200, 100_000, "png", 2, 2),
])  # fmt: skip
def test_default_shards_follow_what_the_work_costs_not_the_item_count(
    n, size, encode, workers, shards
):
    options = PackOptions(encode=encode)
    assert num_shards_for(_dataset(n=n, size=size).splits["train"], options, workers) == shards


def test_cost_model_is_a_pure_function_of_its_inputs():
    items = _dataset(n=100, size=50_000).splits["train"]
    keep, png = (work_seconds(items, PackOptions(encode=e)) for e in ("keep", "png"))
    assert keep == pytest.approx(100 * (ITEM_S["keep"] + 50_000 * BYTE_S["keep"]))
    assert png > 20 * keep  # encoding costs far more per byte than passing bytes through
    decode = work_seconds(items, PackOptions(check="decode"))
    assert decode > keep


def test_best_workers_weighs_the_pool_start_against_the_work():
    assert best_workers(0.0, 16) == 1
    assert best_workers(POOL_START_S, 16) == 1  # a pool that costs what the work does
    assert best_workers(60.0, 2) == 2
    assert 16 < best_workers(60.0, 64) < 64  # forking the 64th costs more than it saves
    assert best_workers(60.0, 16, shards=3) == 3  # no more workers than shards
    assert best_workers(60.0, 16, shards=5) == 5
    assert best_workers(60.0, 1) == 1
    # 3 shards on 2 workers: the busiest does 2/3 of the work; a third worker saves a third.
    assert run_seconds(3.0, 2, shards=3) == pytest.approx(2.0 + POOL_START_S + 2 * WORKER_START_S)
    assert run_seconds(3.0, 1, shards=3) == 3.0
    # Passthrough: half the work is copying to one disk, which more workers do not divide.
    assert run_seconds(3.0, 2, serial=0.5) == pytest.approx(
        2.25 + POOL_START_S + 2 * WORKER_START_S
    )
    assert best_workers(60.0, 16, serial=0.5) < best_workers(60.0, 16)


def test_others_load_shares_the_cores_instead_of_taking_one():
    """Two workers beside another process keeping 0.7 of a core busy get 2/2.7 of a core each,
    1.5 cores in all, against 1 core for one worker: worth the pool (CIFAR raw, 60,000
    records, measured 0.84x the wall of --workers 1 under such load)."""
    from shardpack.packing.plan import choose_workers

    cifar = Dataset(
        "cifar10-python",
        "/src",
        _dataset().schema,
        {"train": tuple(Item(f"b:{i}", 0, "b", CIFAR_PIXELS, i) for i in range(60_000))},
    )
    options = PackOptions(encode="raw")
    plan = make_plan(cifar, "d", options, 2)
    work = helpers.planned_work(plan, options)
    assert choose_workers(*work, options, 2, lambda: 0.0) == 2
    assert choose_workers(*work, options, 2, lambda: 0.7) == 2
    assert choose_workers(*work, options, 2, lambda: 1.6) == 2  # 2/3.6 x 2 > 2/2.6 x 1
    assert best_workers(2.0, 2, busy=0.0) == best_workers(2.0, 2)  # no load: as before
    tiny = make_plan(cifar, "d", PackOptions(encode="raw", shards=1), 2)
    tiny_work = helpers.planned_work(tiny, options)
    assert choose_workers(*tiny_work, options, 2, lambda: 0.7) == 1  # one shard: one worker


def test_a_thousand_small_jpegs_to_raw_stay_on_one_worker():
    """1,000 96x96 JPEGs of ~5.8 KB to raw pixels are ~0.26 s of one core's work: a second
    worker's pool costs about what it saves (measured 1.14x the wall of --workers 1)."""
    from shardpack.packing.plan import choose_workers

    options = PackOptions(encode="raw")
    plan = make_plan(_dataset(n=1000, size=5_800), "d", options, 2)
    assert choose_workers(*helpers.planned_work(plan, options), options, 2, lambda: 0.0) == 1


def test_a_worker_more_must_save_the_margin():
    # Find the smallest job two workers are chosen for: there they save at least GAIN_MARGIN.
    work = next(w / 100 for w in range(1, 1000) if best_workers(w / 100, 2) == 2)
    assert run_seconds(work, 2) < (1 - GAIN_MARGIN) * run_seconds(work, 1)
    assert run_seconds(work - 0.01, 2) >= (1 - GAIN_MARGIN) * run_seconds(work - 0.01, 1)


def test_each_split_gets_its_own_shard_count():
    dataset = Dataset(
        "folder",
        "/src",
        _dataset().schema,
        {"train": _dataset(n=50).splits["train"], "test": _dataset(n=2).splits["train"]},
    )
    plan = make_plan(dataset, "d", PackOptions(shards=4), 1)
    assert [(s.split, s.num_shards) for s in plan.shards] == [("test", 2)] * 2 + [("train", 4)] * 4


def test_default_shard_count_respects_shard_size():
    # 40 items of 1000 bytes = 40_000 bytes; 8_000 per shard -> 5 shards.
    options = PackOptions(shard_size=8_000)
    assert num_shards_for(_dataset().splits["train"], options, workers=1) == 5
    assert len(make_plan(_dataset(), "d", options, workers=1).shards) == 5
    # 7_000 per shard -> ceil(40_000 / 7_000) = 6
    assert num_shards_for(_dataset().splits["train"], PackOptions(shard_size=7_000), 1) == 6


def test_default_shard_count_is_at_least_the_workers_the_work_is_worth():
    items = _dataset(n=2000, size=100_000).splits["train"]
    png = PackOptions(encode="png")  # ~21 s of one core's work
    assert num_shards_for(items, png, workers=1) == 2  # 200 MB: two 128 MiB shards
    assert num_shards_for(items, png, workers=6) == 6
    # 200 MB in 40 MB shards is 5, rounded up to whole rounds of 2 workers: 6
    assert num_shards_for(items, PackOptions(encode="png", shard_size=40_000_000), 2) == 6


def test_shards_beyond_the_workers_come_in_whole_rounds():
    """6 shards on 4 workers leave 2 idle for the last round (a 16-core scaling run measured
    0.74 parallel efficiency at 4 workers for that): 8 shards keep all 4 busy to the end."""
    items = _dataset(n=2000, size=100_000).splits["train"]  # 200 MB, ~21 s of PNG work
    options = PackOptions(encode="png", shard_size=35_000_000)  # 6 shards by size
    assert num_shards_for(items, options, workers=1) == 6
    assert num_shards_for(items, options, workers=4) == 8
    assert num_shards_for(items, options, workers=3) == 6  # already whole rounds


def test_explicit_shards_win_over_workers_and_size():
    items = _dataset().splits["train"]
    assert num_shards_for(items, PackOptions(shards=3, shard_size=1), workers=16) == 3


def test_raw_encoding_estimates_larger_shards():
    items = _dataset(n=40, size=1000).splits["train"]
    keep = num_shards_for(items, PackOptions(shard_size=40_000), 1)
    raw = num_shards_for(items, PackOptions(shard_size=40_000, encode="raw"), 1)
    assert (keep, raw) == (1, RAW_EXPANSION)
    resized = PackOptions(shard_size=40 * 10 * 10 * 3, encode="raw", resize=(10, 10))
    assert num_shards_for(items, resized, 1) == 1  # 10x10x3 bytes each, not size x 10


def test_cifar_records_are_estimated_at_their_pixels(tmp_path):
    dataset = scan(helpers.make_cifar10_python(tmp_path / "c", per_batch=10, batches=1))
    items = dataset.splits["train"]
    cost = dataset.source.record_cost
    assert num_shards_for(items, PackOptions(shard_size=CIFAR_PIXELS * 2), 1, cost=cost) == 5
    plan = make_plan(dataset, "cifar10", PackOptions(shard_size=CIFAR_PIXELS * 2), 1)
    assert [s.num_shards for s in plan.shards if s.split == "test"] == [5] * 5


# ---- the digest ----------------------------------------------------------------------------


def _digest(options: PackOptions, workers: int = 2, name: str = "d", dataset=None) -> str:
    return make_plan(dataset or _dataset(), name, options, workers).digest


BASE = PackOptions(shards=4)


@pytest.mark.parametrize(
    "change",
    [
        {"encode": "jpeg"},
        {"encode": "raw"},
        {"quality": 90},
        {"compression": "gzip"},
        {"check": "decode"},
        {"max_side": 64},
        {"resize": (32, 32)},
        {"max_pixels": 1000},
        {"shards": 5},
        {"name": "other"},
    ],
    ids=lambda c: next(iter(c)),
)
def test_digest_changes_when_an_output_option_changes(change):
    assert _digest(dataclasses.replace(BASE, **change)) != _digest(BASE)


@pytest.mark.parametrize(
    "change",
    [
        {"workers": 1},
        {"workers": 8},
        {"backend": "dask"},
        {"on_error": "fail"},
        {"overwrite": True},
    ],
    ids=lambda c: f"{next(iter(c))}={next(iter(c.values()))}",
)
def test_digest_ignores_options_that_change_only_speed(change):
    assert _digest(dataclasses.replace(BASE, **change)) == _digest(BASE)


def test_seed_does_not_matter_without_shuffle():
    unshuffled = dataclasses.replace(BASE, shuffle=False)
    assert _digest(dataclasses.replace(unshuffled, seed=1)) == _digest(unshuffled)


def test_digest_ignores_worker_count_when_shards_are_fixed():
    assert _digest(BASE, workers=1) == _digest(BASE, workers=16)
    plans = [make_plan(_dataset(), "d", BASE, w) for w in (1, 3, 16)]
    assert plans[0] == plans[1] == plans[2]


def test_worker_count_changes_the_digest_when_it_changes_the_shards():
    options = PackOptions(encode="png")  # shards sized by shard_size, at least `workers`
    dataset = _dataset(n=1000, size=100_000)
    plans = [make_plan(dataset, "d", options, w) for w in (2, 3)]
    assert plans[0].digest != plans[1].digest


def test_digest_changes_with_the_listing():
    dataset = _dataset()
    first, *rest = dataset.splits["train"]
    relabelled = dataclasses.replace(dataset, splits={"train": (first._replace(label=3), *rest)})
    renamed = dataclasses.replace(dataset, schema=Schema.build(("w", "x", "y", "z")))
    assert _digest(BASE, dataset=relabelled) != _digest(BASE, dataset=dataset)
    assert _digest(BASE, dataset=renamed) != _digest(BASE, dataset=dataset)


@pytest.mark.parametrize(
    "fields", [{"caption": "b"}, {"caption": "a", "score": 1.0}, {"caption": "a", "score": 0.5}]
)
def test_digest_covers_every_field_of_every_item(fields):
    # --resume must refuse a source whose values changed, not only its file list.
    extra = {"caption": Feature("bytes", text=True), "score": Feature("float32")}
    dataset = dataclasses.replace(_dataset(), schema=Schema.build(_dataset().classes, extra))
    first, *rest = dataset.splits["train"]

    def with_fields(values: dict):
        item = first._replace(fields=values)
        return dataclasses.replace(dataset, splits={"train": (item, *rest)})

    before = with_fields({"caption": "a", "score": 0.5})
    assert _digest(BASE, dataset=before) == _digest(
        BASE, dataset=with_fields({"score": 0.5, "caption": "a"})
    )
    if fields != {"caption": "a", "score": 0.5}:
        assert _digest(BASE, dataset=with_fields(fields)) != _digest(BASE, dataset=before)


def test_digest_tells_which_item_holds_a_field():
    # Fields are hashed a name at a time over a shard's items: the item without one must count.
    first, second, *rest = _dataset().splits["train"]

    def holding(a: dict, b: dict):
        items = (first._replace(fields=a), second._replace(fields=b))
        return dataclasses.replace(_dataset(), splits={"train": (*items, *rest)})

    unshuffled = dataclasses.replace(BASE, shards=1)
    digests = {
        _digest(unshuffled, dataset=holding(a, b))
        for a, b in [({"n": 1}, {}), ({}, {"n": 1}), ({"n": 1}, {"n": 1}), ({"m": 1}, {})]
    }
    assert len(digests) == 4


def test_digest_does_not_depend_on_where_src_is():
    dataset = _dataset()
    moved = dataclasses.replace(dataset, root="/elsewhere")
    assert _digest(BASE, dataset=moved) == _digest(BASE, dataset=dataset)


@pytest.mark.parametrize(
    "change",
    [
        {"key": "other.jpg"},
        {"label": (0, 1)},
        {"label": None},
        {"path": "elsewhere/a.jpg"},
        {"size": 1001},
        {"size": 2**64},  # past int64: hashed as JSON
        {"position": 0},
        {"fields": {"boxes": np.array([0.0, 0.0, 1.0, 1.0], dtype=np.float32)}},
    ],
    ids=lambda c: next(iter(c)),
)
def test_digest_changes_when_any_field_of_any_item_changes(change):
    # The digest hashes items a field (column) at a time: each column must still count.
    dataset = _dataset()
    *rest, last = dataset.splits["train"]
    changed = dataclasses.replace(dataset, splits={"train": (*rest, last._replace(**change))})
    assert _digest(BASE, dataset=changed) != _digest(BASE, dataset=dataset)


def test_a_shard_size_that_leaves_few_images_per_shard_is_warned_about():
    dataset = _dataset(n=40)  # 40 files of 1,000 bytes
    tiny = make_plan(dataset, "d", PackOptions(shard_size=2_000), 1)
    assert len(tiny.shards) == 20
    (warning,) = tiny.warnings
    assert "split train" in warning and "about 2.0 images per shard" in warning
    assert "20 shards for 40 images" in warning
    assert make_plan(dataset, "d", PackOptions(shard_size=8_000), 1).warnings == ()  # 8 a shard
    assert make_plan(dataset, "d", PackOptions(shards=20), 1).warnings == ()  # asked for
    assert make_plan(dataset, "d", PackOptions(), 1).warnings == ()
    (warning,) = make_plan(_dataset(n=4000), "d", PackOptions(shard_size=2_000), 1).warnings
    assert "(2,000 shards for 4,000 images)" in warning  # counted as the summary counts


def test_a_file_too_large_to_be_an_image_does_not_count_towards_the_shards():
    """A file past the most an image of --max-pixels can take is skipped unread: an 8 GiB one
    among 40 small files cut the split into one shard per image, warned of as a shard size to
    raise."""
    dataset = _dataset(n=40)

    def first_of(size: int) -> Dataset:
        first, *rest = dataset.splits["train"]
        big = Item(key=first.key, label=first.label, path=first.path, size=size)
        return dataclasses.replace(dataset, splits={"train": (big, *rest)})

    plan = make_plan(first_of(8 << 30), "d", PackOptions(), 1)
    assert len(plan.shards) == 1 and plan.warnings == ()
    limit = max_file_bytes(PackOptions().max_pixels)  # it may be an image: counted
    assert len(make_plan(first_of(limit), "d", PackOptions(), 1).shards) > 1


def _cifar_like(train: int, test: int) -> Dataset:
    """CIFAR records: `train` and `test` of them, in one batch file each."""

    def items(split: str, n: int) -> tuple[Item, ...]:
        return tuple(Item(key=f"{split}:{i}", label=i % 10, path=split, size=CIFAR_PIXELS,
                          position=i) for i in range(n))  # fmt: skip

    splits = {"train": items("train", train), "test": items("test", test)}
    return Dataset("cifar10-python", "/src", Schema.build([f"c{k}" for k in range(10)]), splits)


def test_splits_sharing_the_workers_get_shards_of_equal_work():
    """CIFAR-10 raw on 2 workers was planned 25,000 + 25,000 + 10,000 records: one worker wrote
    35,000 and 2 workers were no faster than 1 (3.22 s against 3.19 s in make bench)."""
    options = PackOptions(encode="raw")
    plan = make_plan(_cifar_like(50_000, 10_000), "c", options, workers=2)
    sizes = [len(s.items) for s in plan.shards]
    assert sizes == [10_000] * 6  # test 1 + train 5: three rounds of 2 workers
    one = make_plan(_cifar_like(50_000, 10_000), "c", options, workers=1)
    assert len(one.shards) == 3  # one worker: shards by size alone, as before
    explicit = make_plan(_cifar_like(50_000, 10_000), "c", PackOptions(shards=2), workers=2)
    assert [len(s.items) for s in explicit.shards] == [5_000, 5_000, 25_000, 25_000]
