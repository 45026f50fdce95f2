"""Training-read arithmetic: equal shares, epoch orders, worker parts, mixing draws."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from shardpack.errors import ShardpackError
from shardpack.read.order import check_seed, epoch_order, mix_choices, segments, share, worker_part


@pytest.mark.parametrize("drop", [False, True])
def test_every_reader_gets_as_many_positions_and_together_they_cover_the_split(drop):
    for total, readers in itertools.product(range(0, 40), range(1, 13)):
        shares = [share(total, i, readers, drop) for i in range(readers)]
        assert len({len(s) for s in shares}) == 1, (total, readers)
        covered = Counter(p % max(total, 1) for s in shares for p in s)
        if drop:
            assert len(shares[0]) == total // readers and max(covered.values(), default=1) == 1
        else:  # every record, and the first ones again to fill the last shares
            assert len(shares[0]) == -(-total // readers) and set(covered) == set(range(total))
            repeated = [p for p, n in covered.items() for _ in range(n - 1)]
            assert sorted(repeated) == sorted(
                p % max(total, 1) for p in range(total, len(shares[0]) * readers)
            )


def test_segments_are_the_positions_as_runs_of_shards():
    for counts in ([5], [3, 0, 4, 2], [0, 1], [2, 2, 2, 2, 2]):
        total = sum(counts)
        starts = list(itertools.accumulate(counts, initial=0))
        for start, stop in itertools.combinations(range(0, 3 * total + 1), 2):
            runs = segments(counts, range(start, stop))
            flat = [starts[k] + n for k, first, end in runs for n in range(first, end)]
            assert flat == [p % total for p in range(start, stop)], (counts, start, stop)
            assert all(counts[k] and 0 <= first < end <= counts[k] for k, first, end in runs)


def test_an_epoch_order_is_a_permutation_of_seed_and_epoch_only():
    counts = [7, 0, 5, 9, 3]
    everything = np.arange(24)
    orders = {
        (s, e): epoch_order(counts, everything, s, e, block=2) for s in (0, 1) for e in (0, 1)
    }
    for order in orders.values():
        assert sorted(order) == list(range(24))
    assert len({tuple(o) for o in orders.values()}) == 4  # each (seed, epoch) its own
    assert (epoch_order(counts, everything, 1, 1, block=2) == orders[1, 1]).all()
    # any slice of positions is that slice of the whole order, wrapping past the end
    assert (
        epoch_order(counts, np.arange(20, 30), 1, 1, 2) == orders[1, 1][np.arange(20, 30) % 24]
    ).all()


def test_records_of_one_block_are_mixed_and_shards_reordered():
    counts = [100] * 8
    order = epoch_order(counts, np.arange(800), seed=0, epoch=0, block=2)
    shards = order // 100
    # a block is two whole shards, in a drawn order, their records interleaved
    blocks = [set(shards[i : i + 200]) for i in range(0, 800, 200)]
    assert all(len(b) == 2 for b in blocks) and [min(b) for b in blocks] != [0, 2, 4, 6]
    neighbours = sum(abs(int(a) - int(b)) == 1 for a, b in itertools.pairwise(order))
    assert neighbours < 20  # about 2/200 of 800 pairs stay neighbours


@pytest.mark.parametrize("length", [0, 1, 7, 64, 65])
def test_workers_in_turn_give_back_the_sequence(length):
    sequence = np.arange(100, 100 + length)
    for workers, batch in itertools.product((1, 2, 3, 5), (1, 4)):
        parts = [list(worker_part(sequence, w, workers, batch)) for w in range(workers)]
        batches = [[p[i : i + batch] for i in range(0, len(p), batch)] for p in parts]
        # what a DataLoader does: one batch from each worker in turn, skipping finished ones
        yielded = [
            x for row in itertools.zip_longest(*batches, fillvalue=[]) for b in row for x in b
        ]
        assert yielded == list(sequence)


def test_mixing_proportions_hold_over_ten_thousand_records():
    choices = mix_choices([0.7, 0.3], [20_000, 20_000], seed=3, epoch=0, end="first")
    first = choices[:10_000]
    assert abs((first == 0).mean() - 0.7) < 0.02
    assert (mix_choices([0.7, 0.3], [20_000, 20_000], 3, 0, "first") == choices).all()
    other = mix_choices([0.7, 0.3], [20_000, 20_000], 3, 1, "first")  # another epoch
    assert (other[:10_000] != first).any()


def test_a_mixed_epoch_ends_as_its_rule_says():
    first = mix_choices([0.5, 0.5], [100, 1000], seed=0, epoch=0, end="first")
    assert (first == 0).sum() == 100 and (first == 1).sum() < 200  # ends when 0 runs out
    every = mix_choices([0.5, 0.5], [100, 1000], seed=0, epoch=0, end="all")
    assert Counter(every.tolist()) == {0: 100, 1: 1000}
    assert (every[-100:] == 1).all()  # once 0 is spent, only 1 is left to draw
    assert len(mix_choices([1.0, 1.0], [0, 10], 0, 0, "first")) == 0


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3", None])
def test_a_bad_seed_is_one_clear_error(bad):
    with pytest.raises(
        ShardpackError, match=f"seed must be an integer of at least 0, got: {bad!r}"
    ):
        check_seed("seed", bad)


def test_an_epoch_order_loads_no_more_of_numpy():
    """Each DataLoader worker draws its epoch's order when it starts: numpy.ma, which
    np.unique imports, cost ~0.1-1 s of the first batch after a resume."""
    import subprocess
    import sys

    code = (
        "import sys; from shardpack.read.order import epoch_order; "
        "epoch_order([3, 4, 5], range(12), 0, 1, 2); print('numpy.ma' in sys.modules)"
    )
    assert subprocess.check_output([sys.executable, "-c", code], text=True).strip() == "False"
