"""The shard tasks on a Dask cluster: joblib.Parallel over DaskBackend, one distributed future a
shard, as the local run's over its forked workers (pool.py).

Not joblib's own dask backend: it ran every task in the client where the cluster had one thread
(joblib runs n_jobs=1 in-process), waited for ever for a task whose workers all died (an erred
future never reached its callback), and scattered large arguments, lost with the worker that
held them (every task needing them cancelled: 'already forgotten'). Imported by a dask run
alone: it imports joblib (distributed is the client's, made by cluster.dask_client).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, Future
from contextlib import suppress

from joblib import delayed

from shardpack.errors import RESUME_KEEPS, Option, WorkerDiedError
from shardpack.packing import cluster
from shardpack.packing.plan import ShardResult, ShardSpec
from shardpack.packing.pool import FutureBackend, unordered

# How often a run asks whether the cluster still has workers.
_LOOK_S = 1.0
# Tasks queued per worker thread: one running, one waiting (a plan of thousands of shards is
# not all sent to the scheduler at once).
_QUEUED_PER_THREAD = 2


def run_on_cluster(
    client, task: Callable[..., ShardResult], specs: Sequence[ShardSpec], args: tuple
) -> Iterator[ShardResult]:
    """Yield task(spec, *args) of each spec as it finishes on the cluster's workers, a few
    queued per worker thread; `args` go with each task. Closing the generator early (an
    error, Ctrl-C) cancels every task not finished.

    Raises:
        WorkerDiedError: every worker that ran a task died (the scheduler gave up on it).
        ClusterError: the scheduler was lost mid-run, or every worker for longer than
            cluster.WAIT_FOR_WORKERS_S.
    """
    tasks = (delayed(task)(spec, *args) for spec in specs)
    yield from unordered(DaskBackend(client), tasks, -1, f"{_QUEUED_PER_THREAD} * n_jobs")


class DaskBackend(FutureBackend):
    """A joblib backend over a distributed.Client: a task is a future of the cluster's, named
    by its shard; a task the scheduler gave up on, or lost with it, raises as such; a cluster
    left without workers (watched while the tasks run) cancels them."""

    def __init__(self, client) -> None:
        super().__init__()
        self._client = client
        self._token = uuid.uuid4().hex  # this run's keys: a shard of another run is another
        self._running: dict[Future, str] = {}  # each task in flight, and its shard
        self._lock = threading.Lock()  # _running is joblib's threads' and the watch's
        self._stopped = threading.Event()
        self._alone = ""  # why the watch cancelled the tasks (no worker came back)

    def effective_n_jobs(self, n_jobs: int) -> int:
        """The cluster's threads, and 2 at least: joblib runs a call of 1 in this process."""
        return max(2, sum(self._client.nthreads().values()))

    def start_call(self) -> None:
        threading.Thread(target=self._watch, daemon=True, name="shardpack-dask-watch").start()

    def stop_call(self) -> None:
        self._stopped.set()  # not joined: it may be waiting on a scheduler that is gone

    def _start(self, batch) -> Future:
        # one write_shard(spec, ...) a batch (pool.unordered's batch_size=1), sent as itself:
        # a worker imports none of joblib (retrieve_result_callback makes its result a batch's)
        ((task, (spec, *args), kwargs),) = batch.items
        future = self._client.submit(
            task, spec, *args, **kwargs, key=f"shard-{spec.file}-{self._token}", pure=False
        )
        with self._lock:
            self._running[future] = spec.file
        return future

    def retrieve_result_callback(self, future) -> list[ShardResult]:
        """The task's result (its own exception raised again); a task the scheduler gave up
        on, or lost with the scheduler or every worker, said as such."""
        from distributed import KilledWorker

        with self._lock:
            file = self._running.pop(future, "a shard")
        try:
            result = future.result()
        except KilledWorker:
            raise WorkerDiedError(f"{self._client.scheduler.address}: every Dask worker that "
                                  f"ran {file} died (killed, perhaps by the out-of-memory "
                                  "killer: give the workers more memory, or use more ",
                                  Option("shards"), "); ", *RESUME_KEEPS) from None  # fmt: skip
        except CancelledError:  # not by us: joblib calls back no task it aborted
            lost = "its scheduler" if self._client.status != "running" else "the task"
            what = self._alone or (f"{lost} writing {file}; check that its scheduler and "
                                   "workers run")  # fmt: skip
            raise cluster.ClusterError(f"{self._client.scheduler.address}: the Dask cluster "
                                       f"lost {what}, then ", *RESUME_KEEPS) from None  # fmt: skip
        future.release()  # the result is ours now: the worker may drop it
        return [result]  # what joblib takes from a batch: its tasks' results

    def _stop_tasks(self) -> None:
        with self._lock:
            running = list(self._running)
        if running:
            with suppress(Exception):  # a scheduler gone: nothing left to cancel
                self._client.cancel(running)

    def _watch(self) -> None:
        """While the tasks run: cancel them once the cluster has had no worker for
        cluster.WAIT_FOR_WORKERS_S (the scheduler would hold them for ever)."""
        alone = None  # since when the cluster has had no worker
        while not self._stopped.wait(_LOOK_S):
            try:
                threads = self._client.nthreads()
            except Exception:  # a scheduler lost: the client cancels the tasks itself
                continue
            alone = None if threads else alone or time.monotonic()
            if alone is not None and time.monotonic() - alone > cluster.WAIT_FOR_WORKERS_S:
                self._alone = (f"every worker, and none came back in "
                               f"{cluster.WAIT_FOR_WORKERS_S} s; start workers")  # fmt: skip
                self._stop_tasks()
                return
