"""An item's stamp: the size and modification time (ns) of its image file just before a worker
read it. contents.json keeps the mtime beside the content key's size, so that `pack --append`
and `--update` take a file whose size and mtime are unchanged as unchanged without reading it
(rsync's quick check: a rewrite that keeps both goes unseen).

Only an item that is a whole file on this machine's disk, read whole by the default loader (a
folder tree's image, a manifest's local image), gets one. A record inside a file (a table's
row, a CIFAR batch's, a tar member, a shard's) or an object in a store gets none: its bytes are
read and keyed as the workers key them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from stat import S_ISREG

from shardpack.packing.plan import Plan
from shardpack.sources import Dataset, Item, Source

Stamp = tuple[int, int] | None  # (size, mtime_ns); None: none taken, the bytes tell
# A file modified this close before its stamp was taken gets none: a rewrite just after the
# worker read it could fall in the same tick of the filesystem's clock (2 s on FAT) and keep
# the mtime the stamp holds.
RACY_NS = 2_000_000_000


def taken(dataset: Dataset, items: Iterable[Item]) -> list[Stamp]:
    """The stamp of each item's file now (None for one that has none, see above)."""
    whole = type(dataset.source).load is Source.load  # the file's bytes are the item's
    local_path, oldest = dataset.root.local_path, time.time_ns() - RACY_NS
    found: list[Stamp] = []
    for item in items:
        path = local_path(item.path) if whole and item.position is None else None
        try:  # links followed, as the worker's read follows them (to a regular file only)
            st = os.stat(path) if path is not None else None
        except (OSError, ValueError):  # gone, or a name the disk cannot hold: the read says
            st = None
        ok = st is not None and S_ISREG(st.st_mode) and st.st_mtime_ns < oldest
        found.append((st.st_size, st.st_mtime_ns) if ok else None)
    return found


def of_plan(dataset: Dataset, plan: Plan) -> dict[str, list[Stamp]]:
    """The stamps of each planned shard's items, in order: taken before the workers read them,
    so that a file changed while packing has a stamp that no longer matches."""
    return {spec.file: taken(dataset, spec.items) for spec in plan.shards}


def kept(stamp: Stamp, size: int) -> int | None:
    """The mtime contents.json keeps for an item whose content key's size is `size`: the
    stamp's, where the stamp's size is that (else the file changed as it was read: none)."""
    return stamp[1] if stamp is not None and stamp[0] == size else None
