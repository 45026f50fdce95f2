"""--split: cut a one-split dataset into named splits, seeded and stratified by label (pure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from shardpack.errors import Option, SourceError

if TYPE_CHECKING:  # planning data only: the names are needed for type hints
    from shardpack.sources.source import Dataset


def _stratum(label: int | tuple[int, ...] | None) -> tuple[int, ...]:
    """A label as a sortable stratum key: () unlabeled, (i,) one class, the tuple multi-label."""
    if label is None:
        return ()
    return tuple(label) if isinstance(label, tuple) else (label,)


def stratified_split(
    labels: Sequence[int | tuple[int, ...] | None], fractions: Sequence[float], seed: int
) -> list[list[int]]:
    """Assign each position of `labels` to one of len(fractions) splits.

    Within each label (stratum, in sorted order) the items are shuffled with the seed, then
    dealt one by one to the split furthest below its share of all items dealt so far. So each
    label is spread over the splits in proportion (to within one item), every split's total is
    within one item of its fraction, the splits are disjoint and together cover every item,
    and the same inputs always give the same result.

    Returns:
        For each split, its positions in ascending order.
    """
    strata: dict[tuple[int, ...], list[int]] = {}
    for i, label in enumerate(labels):
        strata.setdefault(_stratum(label), []).append(i)
    rng = np.random.default_rng(seed)
    dealt = [0] * len(fractions)
    splits: list[list[int]] = [[] for _ in fractions]
    total = 0
    for key in sorted(strata):
        for i in rng.permutation(strata[key]).tolist():
            total += 1
            k = max(range(len(fractions)), key=lambda k: total * fractions[k] - dealt[k])
            dealt[k] += 1
            splits[k].append(i)
    return [sorted(s) for s in splits]


def split_dataset(
    dataset: Dataset, split: tuple[tuple[str, float], ...], seed: int, src: str
) -> Dataset:
    """The dataset with its one split cut into the named splits (see stratified_split); `src`
    is SRC as messages name it (a manifest's file, where the dataset's root is its folder).

    Raises:
        SourceError: the dataset already has several splits (named with what gives them,
            its source's splits_from), or a split would get no item.
    """
    if len(dataset.splits) != 1:
        raise SourceError(
            f"{src}: already has splits {', '.join(sorted(dataset.splits))} "
            f"({dataset.source.splits_from}); ",
            Option("split"),
            " cuts a one-split source: drop ",
            Option("split"),
            " to pack them as they are",
        )
    (items,) = dataset.splits.values()
    positions = stratified_split([item.label for item in items], [f for _, f in split], seed)
    splits = {}
    for (name, fraction), chosen in zip(split, positions, strict=True):
        if not chosen:
            raise SourceError(
                f"{dataset.root.path()}: ",
                Option("split", ((name, fraction),)),
                f" of {len(items)} items gives {name} no item; raise its fraction or drop it",
            )
        splits[name] = tuple(items[i] for i in chosen)
    return dataclasses.replace(dataset, splits=splits)
