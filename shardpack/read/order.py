"""Training-read arithmetic, no I/O: which records each reader of a split gets, in what order
each epoch, and which source each record of a mixed epoch comes from. Every reader gets the
same number of records; orders and draws are functions of (seed, epoch) only, so every rank
computes the same ones without talking to the others."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from shardpack.errors import ShardpackError, is_count

# How a mixed epoch ends: when the first source runs out, or when every source has.
MIX_ENDS = ("first", "all")


def share(total: int, reader: int, readers: int, drop_remainder: bool = False) -> range:
    """The positions of an ordering of `total` records that reader `reader` of `readers` reads:
    one contiguous range, the same length for every reader.

    With drop_remainder the last `total % readers` positions are read by no one; without it
    (the default) each reader reads ceil(total / readers) positions, and positions past the end
    wrap to the start (take them modulo `total`): the first records are read twice (more often
    where the readers outnumber the records), and no record is left out of the epoch. Either
    way the shares together cover positions 0..total-1 once (padding aside).
    """
    per = total // readers if drop_remainder or total == 0 else -(-total // readers)
    return range(reader * per, (reader + 1) * per)


def none_to_read(total: int, readers: int, drop_remainder: bool, where: str, who: str) -> None:
    """Refuse shares that would all be empty: with drop_remainder, a split of fewer records than
    readers gives each none (an epoch of no step, said nowhere).

    Args:
        where: the split, as the refusal names it.
        who: the readers, as the refusal names them.

    Raises:
        ShardpackError: every share would be empty.
    """
    if drop_remainder and 0 < total < readers:
        raise ShardpackError(
            f"{where} holds {total} record{'s' * (total != 1)}, fewer than the {readers} "
            f"{who}: with drop_remainder each would read none; read it without drop_remainder "
            "(a few records then come twice), or with fewer readers"
        )


def segments(counts: Sequence[int], positions: range) -> list[tuple[int, int, int]]:
    """`positions` of the split's written order (shard after shard, modulo its length) as
    (shard number, first record, end) runs within shards, in order."""
    total = sum(counts)
    starts = list(itertools.accumulate(counts, initial=0))
    runs: list[tuple[int, int, int]] = []
    p = positions.start
    while p < positions.stop and total:
        at = p % total
        k = int(np.searchsorted(starts, at, side="right")) - 1
        while counts[k] == 0:  # an empty shard holds no position
            k += 1
        take = min(starts[k + 1] - at, positions.stop - p)
        runs.append((k, at - starts[k], at - starts[k] + take))
        p += take
    return runs


def epoch_order(
    counts: Sequence[int], positions: np.ndarray, seed: int, epoch: int, block: int = 1
) -> np.ndarray:
    """The split-wide record numbers at `positions` (modulo the split's length) of epoch
    `epoch`'s order: the shards in an order drawn from (seed, epoch), taken `block` shards at a
    time, and the records of each such block in an order drawn from (seed, epoch, block
    number). Only the blocks `positions` touch are drawn: memory is one block's record numbers.
    """
    total = sum(counts)
    positions = np.asarray(positions, np.int64) % max(total, 1)
    shards = np.random.default_rng([seed, epoch]).permutation(len(counts))
    starts = np.cumsum([0, *counts])
    groups = [shards[i : i + block] for i in range(0, len(shards), block)]
    ends = np.cumsum([sum(counts[k] for k in g) for g in groups])
    which = np.searchsorted(ends, positions, side="right")
    out = np.empty_like(positions)
    for b in np.flatnonzero(np.bincount(which)):  # not np.unique: it imports numpy.ma (~0.1 s)
        records = np.concatenate([np.arange(starts[k], starts[k + 1]) for k in groups[b]])
        drawn = records[np.random.default_rng([seed, epoch, int(b)]).permutation(len(records))]
        mine = which == b
        out[mine] = drawn[positions[mine] - (ends[b - 1] if b else 0)]
    return out


def worker_part(sequence: np.ndarray, worker: int, workers: int, batch_size: int) -> np.ndarray:
    """Worker `worker`'s part of a rank's sequence: its batch_size-long chunks worker,
    worker + workers, ... A DataLoader with that batch size takes one batch from each worker
    in turn, so what it yields is `sequence` itself, in order, whatever the worker count."""
    chunks = np.arange(len(sequence)) // batch_size
    return sequence[chunks % workers == worker]


def mix_choices(weights: Sequence[float], lengths: Sequence[int], seed: int, epoch: int,
                end: str) -> np.ndarray:  # fmt: skip
    """Which source each record of a mixed epoch comes from, drawn from (seed, epoch) with the
    given weights: until the first chosen source runs out (end="first"), or on among the
    sources left, weights renormalised, until every source has given all it has (end="all")."""
    rng = np.random.default_rng([seed, epoch])
    left = np.array(lengths, np.int64)
    p = np.array(weights, float)
    chosen: list[np.ndarray] = []
    while True:
        live = left > 0
        if not live.any() or (end == "first" and not live.all()):
            break
        q = np.where(live, p, 0.0)
        draws = rng.choice(len(p), size=max(int(left[live].sum()), 1), p=q / q.sum())
        # cut where a source is drawn once more than it holds
        taken = np.zeros_like(left)
        cut = len(draws)
        for j in np.flatnonzero(live):
            hits = np.flatnonzero(draws == j)
            if len(hits) > left[j]:
                cut = min(cut, int(hits[left[j]]))
        draws = draws[:cut]
        np.add.at(taken, draws, 1)
        left -= taken
        chosen.append(draws)
    return np.concatenate(chosen) if chosen else np.zeros(0, np.int64)


def check_seed(name: str, value: object) -> int:
    """A seed or epoch: an int of at least 0 (numpy's generators take no negative)."""
    if not is_count(value, 0):
        raise ShardpackError(f"{name} must be an integer of at least 0, got: {value!r}")
    return int(value)
