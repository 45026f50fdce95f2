"""The shard tasks on this machine: the standard library's ProcessPoolExecutor (fork context)
over workers forked from this process.

The parent has imported the worker code and made the plan before it forks, so a worker is up
in milliseconds and reads its shard's items from memory it inherited; a task is the shard's
number. A killed worker breaks the pool and fails the run at once, never a hang. Imported only
by a run with more than one worker; it does not import joblib (~50 ms of every such run).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import suppress
from dataclasses import replace

# PackedItems as _PackedItems, PACKED_CHUNK: the names tests and benchmarks import from here
from shardpack.packing.packeditems import PACKED_CHUNK  # noqa: F401
from shardpack.packing.packeditems import PackedItems as _PackedItems
from shardpack.packing.plan import ShardResult, ShardSpec
from shardpack.packing.worker import write_shard

_PR_SET_PDEATHSIG = 1  # linux/prctl.h

# The shards of the run, their items packed, set before the pool forks: the workers inherit
# them, so a task pickles its shard's number and not its items.
_forked: list[ShardSpec] | None = None


def run_local(
    specs: list[ShardSpec], args: tuple, workers: int, prepare: Callable[[], None] | None = None
) -> Iterator[ShardResult]:
    """Yield write_shard(spec, *args) of each spec as it finishes, on `workers` forked workers,
    each calling `prepare` first.

    A worker's error, or closing the generator early (Ctrl-C), kills every worker and reaps
    it before this returns: none can write a file after the caller cleans up.
    """
    global _forked
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # a forked worker must not write the parent's buffered text again
    # (a streamed list's range is read by its worker: nothing of it to pack)
    _forked = [replace(spec, items=_PackedItems(spec.items)) if isinstance(spec.items, tuple)
               else spec for spec in specs]  # fmt: skip
    others = set(multiprocessing.active_children())  # children from before: not ours to kill
    pool = ProcessPoolExecutor(
        max(1, workers),
        mp_context=multiprocessing.get_context("fork"),
        initializer=_start_worker,
        initargs=(os.getpid(), prepare),
    )
    finished = False
    try:
        # The rest goes pickled (a few hundred bytes): a storage made in this process must not
        # be used in another (an s3fs filesystem holds an event loop: "not fork-safe").
        tasks = [pool.submit(_write_forked, i, *args) for i in range(len(specs))]
        for task in as_completed(tasks):
            yield task.result()
        finished = True
    finally:
        if not finished:  # the pool's shutdown would wait for the tasks running: kill them
            for worker in set(multiprocessing.active_children()) - others:
                worker.kill()
        pool.shutdown(wait=True, cancel_futures=True)
        _forked = None


def _write_forked(i: int, *args) -> ShardResult:
    """In a forked worker: write shard i of the run that forked it."""
    return write_shard(_forked[i], *args)


def _start_worker(parent: int, prepare: Callable[[], None] | None) -> None:
    """In each forked worker, first: _tie_to_parent, then `prepare`."""
    _tie_to_parent(parent)
    if prepare is not None:
        prepare()


def _tie_to_parent(parent: int) -> None:
    """In each forked worker: die with the parent (SIGKILLed by the OOM killer, say, it must
    not leave workers that hold OUT's lock and block --resume), leave Ctrl-C to the parent,
    which stops the pool itself, and end quietly on SIGTERM: the pool sends it to the workers
    left when one dies, and the CLI's handler they inherit would raise in them, printing a
    worker's traceback under the line that says why the run stopped."""
    import ctypes

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with suppress(OSError, AttributeError):  # prctl is Linux's; elsewhere the pipes still end
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took hold
        os._exit(1)
