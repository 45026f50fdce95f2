"""Where the cyclic garbage collector is held off: a packing process's start (imports, the
listing, the plan) makes many objects and no cycles, so each collection there walks them and
frees nothing; and while the shards are written, what was made before is frozen out of its
reach. Used by the command (`__main__`, the CLI's pack) and by the pipeline."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_gc() -> Iterator[None]:
    """Hold the collector off: a listing makes millions of objects and no cycles, and each full
    collection walks them all (`python -m benchmarks.listing`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def long_lived() -> Iterator[None]:
    """no_gc while importing modules (numpy, joblib, ours), then what they made is frozen out
    of the collector's reach: modules and classes live for the whole run. Their collections
    (~60 in pack's start, found next to nothing) are a few ms of it."""
    with no_gc():
        yield
        gc.freeze()


@contextmanager
def frozen() -> Iterator[None]:
    """Move every object made so far (the listing, the plan, the modules) out of the cyclic
    collector's reach while the shards are written. A forked worker then shares those pages
    with the parent instead of copying them: a full collection in a worker writes into every
    object it walks (50,000 small JPEGs, 2 workers: ~0.08 s a collection)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
