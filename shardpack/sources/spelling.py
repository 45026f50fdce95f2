"""Near misses: a name one or two edits from the one meant (`lable` for `label`, `dgo` beside
`dog`), for warnings that name what was probably meant."""

from __future__ import annotations

from collections.abc import Iterable


def edits(a: str, b: str) -> int:
    """The edits from `a` to `b`: characters inserted, deleted or replaced, and adjacent ones
    swapped (`dgo` -> `dog` is one), as the optimal string alignment distance counts them."""
    before, row = None, list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            cost = min(row[j] + 1, current[j - 1] + 1, row[j - 1] + (x != y))
            if before is not None and i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                cost = min(cost, before[j - 2] + 1)
            current.append(cost)
        before, row = row, current
    return row[-1]


def near(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate (not `name` itself) closest to `name` within a typo's reach: one edit for
    a name of up to 4 characters (`cat` and `car` are two words), else two; None if none is."""
    reach = 1 if len(name) <= 4 else 2
    best = None
    for other in candidates:
        if other == name or abs(len(other) - len(name)) > reach:
            continue
        distance = edits(name, other)
        if distance <= reach and (best is None or distance < best[0]):
            best = (distance, other)
    return None if best is None else best[1]
