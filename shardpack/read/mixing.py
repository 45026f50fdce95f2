"""Mixing packs by weight: which source each record of a mixed epoch comes from (no I/O), and
shardpack.mix, which builds the PyTorch dataset (torch is imported on the call, not here)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from shardpack.torch import Mix, ShardDataset

# How a mixed stream ends: when the first source runs out, or when every source has.
MIX_ENDS = ("first", "all")


def mix(
    sources: Sequence[tuple[ShardDataset | str | os.PathLike, float]], seed: int = 0,
    end: str = "first", **options,
) -> Mix:  # fmt: skip
    """Several packs read as one PyTorch dataset, each record from a source drawn by weight:
    `mix([(a, 0.7), (b, 0.3)], seed=0)`.

    Args:
        sources: (dataset, weight) pairs: shardpack.torch.ShardDatasets (of one rank, world
            size and batch size), or packs' OUT, made into ShardDataset(out, **options).
        seed: the draws' seed, the same on every rank (the choices are then the same on
            every rank, and ranks stay equal).
        end: "first": the epoch ends when a source drawn has no record left (the weights
            hold to the last record; the other sources' rest is unread that epoch). "all":
            a spent source drops out and the rest are drawn with their weights renormalised
            until every source has given each of its records once.
        options: ShardDataset's arguments, for sources given as OUT.

    Raises:
        ShardpackError: a weight is not above 0, `end` is not one of MIX_ENDS, or the
            datasets differ in rank, world size or batch size.
    """
    from shardpack.torch import Mix, ShardDataset

    made = [(s if isinstance(s, ShardDataset) else ShardDataset(s, **options), w)
            for s, w in sources]  # fmt: skip
    return Mix(made, seed, end)


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
