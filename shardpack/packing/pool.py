"""The one way a pack runs its shard tasks in parallel: joblib.Parallel, its results as they
finish, over a backend whose tasks are futures (forkpool's forked workers, daskpool's cluster).

Imported only by a run with more than one worker, or on Dask: it imports joblib.
"""

from __future__ import annotations

import warnings
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future

from joblib import Parallel
from joblib.parallel import ParallelBackendBase


class FutureBackend(ParallelBackendBase):
    """A joblib backend whose `_start` runs a task and returns its future, which calls joblib
    back when it ends however it ends (done, erred, cancelled): an error reaches the run at
    once, never a hang. Aborting stops every task not finished."""

    supports_retrieve_callback = True  # what return_as="generator_unordered" needs
    uses_threads = False
    supports_sharedmem = False

    @abstractmethod
    def _start(self, func: Callable[[], object]) -> Future:
        """Run func() on a worker; its future."""

    @abstractmethod
    def _stop_tasks(self) -> None:
        """Stop every task not finished: the run stopped, and wants none of their results."""

    def submit(self, func: Callable[[], object], callback: Callable | None = None) -> Future:
        future = self._start(func)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def retrieve_result_callback(self, future: Future) -> object:
        return future.result()

    def abort_everything(self, ensure_ready: bool = True) -> None:
        """Stop the tasks, then the backend, before the caller removes partial files."""
        self._stop_tasks()
        self.terminate()


def unordered(
    backend: FutureBackend, tasks: Iterable, n_jobs: int, pre_dispatch: int | str
) -> Iterator[object]:
    """Yield each task's result as it finishes, `n_jobs` at a time on `backend`, one task a
    batch, `pre_dispatch` of them sent ahead. Closing the generator early (an error, Ctrl-C)
    aborts the tasks not finished."""
    results = Parallel(
        n_jobs=n_jobs,
        backend=backend,
        return_as="generator_unordered",
        pre_dispatch=pre_dispatch,
        batch_size=1,  # a task is a shard: daskpool names each future by its batch's shard
    )(tasks)
    try:
        for result in results:  # noqa: UP028 (`yield from` closes it outside the filter)
            yield result
    finally:
        with warnings.catch_warnings():  # joblib warns of the tasks a close cancels: meant
            warnings.simplefilter("ignore")
            results.close()
