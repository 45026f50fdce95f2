"""The shard tasks on this machine: joblib.Parallel over workers forked from this process.

The parent has imported the worker code and made the plan before it forks, so a worker is up
in milliseconds and reads its shard's items from memory it inherited. A task is "write one
shard", taken under a lock shared by the workers: the one this worker reserved, else the
lowest free; a shard is taken once, so each is written once. A worker reserves the next free
shard once every first try of the URLs of its current one has started, and fetches it while
the current one waits for its retries; a shard reserved is written by its worker alone (taken
by another, its URLs were fetched twice). So a task that finds no shard free but some reserved
by others waits until they are taken, and the workers but one get a task more than the
shards: when a worker's current shard ends, a task is left for the one it reserved (a task
that finds every shard taken writes none). The pool is the
standard library's ProcessPoolExecutor (fork context) behind a joblib backend (pool.py's
FutureBackend, as a Dask run's): a killed worker breaks the pool and fails the run at once,
never a hang. Imported only by a run with more than
one worker: it imports joblib.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.sharedctypes
import multiprocessing.synchronize
import multiprocessing.util
import os
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import closing, suppress
from dataclasses import replace
from typing import TYPE_CHECKING

from joblib import Parallel, delayed

# PackedItems as _PackedItems, PACKED_CHUNK: the names tests and benchmarks import from here
from shardpack.containers import ShardWriter
from shardpack.errors import OutputError
from shardpack.packing.packeditems import PACKED_CHUNK  # noqa: F401
from shardpack.packing.packeditems import PackedItems as _PackedItems
from shardpack.packing.plan import ShardResult, ShardSpec
from shardpack.packing.pool import FutureBackend, unordered
from shardpack.packing.worker import next_files, write_shard
from shardpack.stops import STOPS, stops_held
from shardpack.storage.base import Files, Handover
from shardpack.storage.imageroot import close_started

if TYPE_CHECKING:
    from shardpack.sources import Source

_PR_SET_PDEATHSIG = 1  # linux/prctl.h

# The shards of the run, their items packed, set before the pool forks: the workers inherit
# them, so a task pickles no items.
_forked: list[ShardSpec] | None = None
# Each shard's state, shared by the workers (made before the fork): TAKEN, FREE, or the pid of
# the worker that reserved it; and the lowest shard never taken nor reserved (all above free).
TAKEN, FREE = -1, 0
_states: multiprocessing.sharedctypes.SynchronizedArray | None = None
_lowest_free: multiprocessing.sharedctypes.Synchronized | None = None
# Signalled (under _states' lock) as a reserved shard is taken: the tasks waiting for one look
_taken: multiprocessing.synchronize.Condition | None = None
# In a worker: the shard it reserved last
_reserved: int | None = None


def run_local(
    specs: list[ShardSpec],
    args: tuple,
    workers: int,
    complete: Callable[[Handover], None],
    prepare: Callable[[], None] | None = None,
) -> Iterator[ShardResult]:
    """Yield write_shard(spec, *args) of each spec as it finishes, on `workers` forked workers,
    each calling `prepare` first. A worker hands its shard's files over as they close
    (Sink.hand_over): each is committed here with `complete` before its result is yielded,
    while the worker writes its next shard (a disk's fsync of one shard no longer holds up the
    next: benchmarks/README.md, "Seventeenth round").

    Closing the generator early (an error, Ctrl-C) kills every worker before it returns.
    """
    global _forked, _states, _lowest_free, _taken
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # a forked worker must not write the parent's buffered text again
    # (a streamed list's range is read by its worker: nothing of it to pack)
    _forked = [replace(spec, items=_PackedItems(spec.items)) if isinstance(spec.items, tuple)
               else spec for spec in specs]  # fmt: skip
    forking = multiprocessing.get_context("fork")
    _states = forking.Array("q", len(specs))  # all FREE
    _lowest_free = forking.Value("q", 0, lock=False)  # (under _states' lock)
    _taken = forking.Condition(_states.get_lock())
    # The rest goes pickled (a few hundred bytes): a storage made in this process must not
    # be used in another (an s3fs filesystem holds an event loop: "not fork-safe"). A task
    # more a worker but one: each reservation's worker finds one left (_take)
    tasks = (delayed(_write_forked)(*args) for _ in range(len(specs) + workers - 1))
    # every task queued here, none from the pool's result thread
    results = unordered(ForkBackend(prepare), tasks, workers, pre_dispatch="all")
    try:
        with closing(results):
            for result, handed in results:
                if result is None:  # a task left no shard to write
                    continue
                for each in handed:
                    try:
                        complete(each)
                    except OSError as e:
                        raise OutputError.writing(each.final, e) from None
                yield result
    finally:
        _forked = _states = _lowest_free = _taken = None


class ForkBackend(FutureBackend):
    """A joblib backend over a pool of workers forked from this process, each tied to it
    (_tie_to_parent); aborting kills them."""

    def __init__(self, prepare: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._prepare = prepare  # what each worker calls as it starts
        self._pool: ProcessPoolExecutor | None = None
        self._others: set[multiprocessing.process.BaseProcess] = set()  # children from before

    def effective_n_jobs(self, n_jobs: int) -> int:
        return max(1, n_jobs)

    def configure(self, n_jobs: int = 1, parallel: Parallel | None = None, **_: object) -> int:
        """Start the pool (its workers fork at the first task); joblib's other settings
        (memmapping, temporary folders) are for its own pools and do not apply."""
        self.parallel = parallel
        self._others = set(multiprocessing.active_children())
        self._pool = ProcessPoolExecutor(
            self.effective_n_jobs(n_jobs),
            mp_context=multiprocessing.get_context("fork"),
            initializer=_start_worker,
            initargs=(os.getpid(), self._prepare),
        )
        return self.effective_n_jobs(n_jobs)

    def _start(self, func: Callable[[], object]) -> Future:
        with stops_held():  # the pool forks its workers in its first submit
            return self._pool.submit(func)

    def _stop_tasks(self) -> None:
        """Kill the workers (the pool's shutdown would wait for their tasks), reaped by
        terminate before the caller removes partial files: none can reappear."""
        for worker in set(multiprocessing.active_children()) - self._others:
            worker.kill()

    def terminate(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _write_forked(*args) -> tuple[ShardResult | None, tuple[Handover, ...]]:
    """In a forked worker: write a shard of the run that forked it (_take), letting its
    reading reserve the next (_reserve); returns its result and its files handed over (None
    and none where every shard is taken)."""
    source = args[-1]
    ShardWriter.handed = []  # none of a task that failed before
    if (i := _take()) is None:
        return None, ()
    result = write_shard(_forked[i], *args, then=lambda: _reserve(source))
    return result, tuple(ShardWriter.handed)


def _take() -> int | None:
    """The shard this task writes, marked TAKEN: the one this worker reserved, else the lowest
    free; None once every shard is taken. With none free but some reserved by other workers,
    it waits until they take them: a reserved shard's URLs are being fetched by its worker,
    whose next task writes it (run_local leaves one for each), so no shard is fetched twice.
    A worker killed meanwhile breaks the pool, which ends the waiting ones too."""
    global _reserved
    with _taken:
        states, held, _reserved = _states.get_obj(), _reserved, None
        while True:
            if held is not None and states[held] == os.getpid():
                i = held
                break
            if _lowest_free.value < len(states):
                i = _lowest_free.value
                _lowest_free.value += 1
                break
            if not any(state > 0 for state in states):
                return None
            _taken.wait()
        if states[i] > 0:  # another task may be waiting for this reservation to be taken
            _taken.notify_all()
        states[i] = TAKEN
    return i


def _reserve(source: Source) -> tuple[str, Files] | None:
    """Reserve the lowest free shard for this worker's next task: worker.next_files of it
    (None: none is free, or it is not read ahead)."""
    global _reserved
    with _states.get_lock():
        i = _lowest_free.value
        if i == len(_states) or (following := next_files(_forked[i], source)) is None:
            return None
        _lowest_free.value += 1
        _states.get_obj()[i], _reserved = os.getpid(), i
    return following


def _start_worker(parent: int, prepare: Callable[[], None] | None) -> None:
    """In each forked worker, first: _tie_to_parent, shards handed over, then `prepare`."""
    _tie_to_parent(parent)
    ShardWriter.handed = []  # the packing process commits the shards (run_local)
    # a reserved shard's fetching ends with the worker (the pool's shutdown), not after it
    multiprocessing.util.Finalize(None, close_started, exitpriority=0)
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
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)  # held as it forked (stops_held)
    with suppress(OSError, AttributeError):  # prctl is Linux's; elsewhere the pipes still end
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took hold
        os._exit(1)
