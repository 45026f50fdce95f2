"""Orchestration: scan, plan, run one worker task per shard, follow progress, merge the index."""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from shardpack.errors import OutputError
from shardpack.index import INDEX_NAME, build_index, write_json_atomic
from shardpack.options import PackOptions
from shardpack.plan import Plan, make_plan
from shardpack.sources import Dataset, scan
from shardpack.tfrecord import partial_path
from shardpack.worker import ShardResult, progress_path, read_progress, write_shard

ProgressCallback = Callable[[int, int], None]
# Poll workers' progress files this often: a live bar without measurable cost.
_POLL_S = 0.2
# Files shardpack writes into OUT; nothing else there is ever removed.
_OURS = re.compile(r"^(index\.json|.+\.tfrecord-\d{5}-of-\d{5}|\..+\.(partial|progress))$")


@dataclass(frozen=True)
class PackResult:
    """What a pack run produced: the index document and a few headline figures."""

    out: str
    index: dict
    num_records: int
    num_skipped: int
    seconds: float


def default_name(dataset: Dataset) -> str:
    """cifar10 / cifar100 for CIFAR, else SRC's folder name made safe for file names."""
    if dataset.kind.startswith("cifar"):
        return dataset.kind.split("-")[0]
    name = re.sub(r"[^A-Za-z0-9_.]+", "_", os.path.basename(dataset.root)).strip("_.")
    return name or "dataset"


def resolve_workers(workers: int | None) -> int:
    """--workers, or every core this process may use."""
    if workers is not None:
        return workers
    from joblib import cpu_count  # joblib is heavy-ish; only a real run needs it

    return cpu_count()


def pack(
    src: str | os.PathLike,
    out: str | os.PathLike,
    options: PackOptions | None = None,
    progress: ProgressCallback | None = None,
) -> PackResult:
    """Pack SRC into sharded TFRecords and an index.json in OUT.

    Args:
        src: a class-folder tree or a folder of CIFAR batches.
        out: the output folder; created if missing.
        options: how to pack; defaults to PackOptions().
        progress: called about five times a second with (items done, items total).

    Returns:
        The index document and headline figures.

    Raises:
        ShardpackError: bad SRC or OUT, or (with on_error="fail") a bad image; in every case
            no index.json is written and no partial shard is left under a final name.
    """
    options = options or PackOptions()
    dataset = scan(src, options.source)
    name = options.name or default_name(dataset)
    workers = resolve_workers(options.workers)
    plan = make_plan(dataset, name, options, workers)
    out = os.path.abspath(os.fspath(out))
    stale = _prepare_out(out, plan, options.overwrite)
    start = time.perf_counter()
    results: list[ShardResult] = []
    sizes = {spec.file: len(spec.items) for spec in plan.shards}
    try:
        with _ProgressPoller(out, dataset.num_items, progress) as poller:
            for result in _run(plan, options, dataset, out, workers):
                results.append(result)
                poller.finished(sizes[result.file])
    except BaseException:
        _remove(partial_path(os.path.join(out, s.file)) for s in plan.shards)
        _remove(progress_path(out, s.file) for s in plan.shards)
        raise
    seconds = time.perf_counter() - start
    num_records = sum(r.num_records for r in results)
    stats = {
        "seconds": round(seconds, 3),
        "images_per_second": round(num_records / seconds, 1) if seconds else None,
        "workers": workers,
    }
    index = build_index(
        name=name, dataset=dataset, options=options, plan=plan, results=results, stats=stats
    )
    write_json_atomic(os.path.join(out, INDEX_NAME), index)
    _remove(os.path.join(out, f) for f in stale - {s.file for s in plan.shards})
    return PackResult(out, index, num_records, len(index["skipped"]), seconds)


def _run(
    plan: Plan, options: PackOptions, dataset: Dataset, out: str, workers: int
) -> Iterator[ShardResult]:
    """Yield each shard's result as it finishes: in-process for one worker, else loky."""
    args = (options, dataset.root, out, len(dataset.classes))
    if workers == 1 or len(plan.shards) == 1:
        yield from (write_shard(spec, *args) for spec in plan.shards)
        return
    from joblib import Parallel, delayed

    tasks = (delayed(write_shard)(spec, *args) for spec in plan.shards)
    parallel = Parallel(n_jobs=min(workers, len(plan.shards)), return_as="generator_unordered")
    yield from parallel(tasks)


def _prepare_out(out: str, plan: Plan, overwrite: bool) -> set[str]:
    """Make OUT ready; return the names of our old shard files that the new index will drop.

    An index of a different plan is replaced only with overwrite; our partial files from a run
    that died are cleared; files shardpack did not write are never touched.
    """
    if os.path.exists(out) and not os.path.isdir(out):
        raise OutputError(f"{out}: is a file; pass a folder for the output (it is created)")
    try:
        os.makedirs(out, exist_ok=True)
        names = os.listdir(out)
    except OSError as e:
        raise OutputError(
            f"{out}: cannot create or list ({e.strerror}); check permissions"
        ) from None
    index_path = os.path.join(out, INDEX_NAME)
    if INDEX_NAME in names and not overwrite:
        from shardpack.index import load_index

        try:
            old = load_index(out).raw
        except Exception:
            old = {}
        if old.get("plan_digest") != plan.digest:
            raise OutputError(
                f"{out}: already holds a different dataset ({index_path}); pass --overwrite "
                "to replace it, or choose another output folder"
            )
    ours = {n for n in names if _OURS.match(n)}
    if INDEX_NAME in ours:
        os.remove(index_path)  # no index may point at shards while they are being rewritten
    _remove(os.path.join(out, n) for n in ours if n.startswith("."))
    return {n for n in ours if not n.startswith(".") and n != INDEX_NAME}


def _remove(paths) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


class _ProgressPoller:
    """Sums finished shards and the counts in workers' progress files for a callback."""

    def __init__(self, out: str, total: int, callback: ProgressCallback | None) -> None:
        self.out, self.total, self.callback = out, total, callback
        self.done = 0
        self._shown = 0  # a worker's file vanishes just before its result lands: never go back
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> _ProgressPoller:
        if self.callback is not None:
            self._thread.start()
        return self

    def finished(self, items: int) -> None:
        self.done += items

    def _in_flight(self) -> int:
        try:
            names = os.listdir(self.out)
        except OSError:
            return 0
        return sum(
            read_progress(os.path.join(self.out, n)) for n in names if n.endswith(".progress")
        )

    def _poll(self) -> None:
        while not self._stop.wait(_POLL_S):
            self._shown = max(self._shown, min(self.done + self._in_flight(), self.total))
            self.callback(self._shown, self.total)

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.callback is not None and exc_type is None:
            self.callback(self.total, self.total)
