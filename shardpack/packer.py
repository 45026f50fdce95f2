"""Orchestration: scan, plan, run one worker task per shard, follow progress, merge the index."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from dataclasses import dataclass

from shardpack.atomic import partial_path, remove_files, write_json_atomic
from shardpack.errors import ImageError, OutputError, WorkerDiedError, os_error_fix
from shardpack.index import INDEX_NAME, build_index
from shardpack.options import PackOptions
from shardpack.outdir import LOCK_NAME, Journal, locked, prepare
from shardpack.plan import Plan, ShardSpec, make_plan
from shardpack.sources import Dataset, cifar_layout, scan, source_root
from shardpack.tfdsmeta import write_tfds_metadata
from shardpack.worker import ShardResult, progress_path, read_progress, write_shard

ProgressCallback = Callable[[int, int], None]
# Poll workers' progress files this often: a live bar without measurable cost.
_POLL_S = 0.2


@dataclass(frozen=True)
class PackResult:
    """What a pack run produced: the index document and a few headline figures."""

    out: str
    index: dict
    num_records: int
    num_skipped: int
    seconds: float
    num_reused: int = 0  # shards kept from an earlier run by --resume
    num_shards: int = 0  # shards in the plan, kept ones included
    new_records: int = 0  # records this run wrote (not kept): what images_per_second rates


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
    start = time.perf_counter()  # the whole call: scan, plan, workers' start, writing, merge
    options = options or PackOptions()
    src_root = source_root(src)  # a missing SRC is refused before OUT is created
    real_src = os.path.realpath(src_root)
    if os.path.commonpath([real_src, os.path.realpath(out)]) == real_src:
        raise OutputError(
            f"{os.path.abspath(out)}: is inside SRC {src_root}, where it would be scanned as "
            "data; choose an output folder outside SRC"
        )
    out, created = _make_out(os.fspath(out))
    with locked(out):
        workers = resolve_workers(options.workers)
        # A CIFAR scan unpickles ~180 MB: the workers boot meanwhile (2.18 -> 2.00 s for
        # CIFAR-10 on 2 cores). A folder's scan is too short to hide a boot, and a small folder
        # may need no worker at all (7 images: 0.37 s in-process, 1.05 s with a warmed pool).
        warming = None
        if options.backend == "loky" and workers > 1 and cifar_layout(src_root, options.source):
            warming = _warm_workers(workers)
        try:
            dataset = scan(src_root, options.source)
            name = options.name or default_name(dataset)
            plan = make_plan(dataset, name, options, workers)
            stale, reused = prepare(out, plan, options.overwrite, options.resume)
        except BaseException:
            if created:  # refused before anything was written: leave no OUT behind
                _remove_empty_out(out)
            raise
        finally:
            if warming is not None:
                warming.join()
        results = _write_shards(plan, reused, options, dataset, out, workers, progress)
        seconds = time.perf_counter() - start
        num_records = sum(r.num_records for r in results)
        new_records = num_records - sum(r.num_records for r in reused)
        stats = {
            "seconds": round(seconds, 3),
            "images_per_second": round(new_records / seconds, 1) if seconds else None,
            # no more workers than shards this run wrote: one shard runs in-process
            "workers": min(workers, max(1, len(plan.shards) - len(reused))),
        }
        index = build_index(
            name=name, dataset=dataset, options=options, plan=plan, results=results, stats=stats
        )
        write_tfds_metadata(out, index)
        if options.index_files:
            from shardpack.recordindex import write_index_files

            write_index_files(out, index)
        write_json_atomic(os.path.join(out, INDEX_NAME), index)  # last: the run is complete
        remove_files(os.path.join(out, f) for f in stale - {s.file for s in plan.shards})
    return PackResult(
        out,
        index,
        num_records,
        len(index["skipped"]),
        seconds,
        len(reused),
        len(plan.shards),
        new_records,
    )


def _write_shards(
    plan: Plan,
    reused: list[ShardResult],
    options: PackOptions,
    dataset: Dataset,
    out: str,
    workers: int,
    progress: ProgressCallback | None,
) -> list[ShardResult]:
    """Write every shard not reused, journal each as it lands; on any failure (a bad image, a
    signal, a dead worker) remove the partial files and say which shards were in flight."""
    journal = Journal(out, plan.digest, reused)
    done = {r.file for r in reused}
    todo = [spec for spec in plan.shards if spec.file not in done]
    sizes = {spec.file: len(spec.items) for spec in plan.shards}
    results = list(reused)
    try:
        with (
            _ProgressPoller(out, sum(sizes.values()), progress) as poller,
            closing(_run(todo, options, dataset, out, workers)) as finished,
        ):
            poller.finished(sum(sizes[f] for f in done))
            for result in finished:
                journal.add(result)
                results.append(result)
                poller.finished(sizes[result.file])
    except BaseException as e:
        in_flight = sorted(
            s.file for s in todo if os.path.exists(partial_path(os.path.join(out, s.file)))
        )
        remove_files(partial_path(os.path.join(out, s.file)) for s in todo)
        remove_files(progress_path(out, s.file) for s in todo)
        if isinstance(e, ImageError):  # --on-error fail: say where the file is and what to do
            raise ImageError(
                e.key,
                f"{e.reason} (in {dataset.root}); repair or remove the file, or pass "
                "--on-error skip to leave it out",
            ) from None
        if type(e).__name__ == "TerminatedWorkerError":  # joblib's; its import is lazy
            raise WorkerDiedError(
                f"{out}: a worker died while writing {', '.join(in_flight) or 'a shard'} "
                "(killed, perhaps by the out-of-memory killer: try fewer --workers); "
                "rerun with --resume to keep the shards already finished"
            ) from None
        raise
    return results


def _make_out(out: str) -> tuple[str, bool]:
    """OUT as an absolute path, created if missing; and whether this call created it."""
    out = os.path.abspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise OutputError(f"{out}: is a file; pass a folder for the output (it is created)")
    created = not os.path.exists(out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{out}: cannot create ({e.strerror}); {os_error_fix(e)}") from None
    return out, created


def _remove_empty_out(out: str) -> None:
    """Take back an OUT this run created, once the lock is its only content."""
    remove_files([os.path.join(out, LOCK_NAME)])
    with suppress(OSError):
        os.rmdir(out)


def _import_worker() -> None:
    import shardpack.worker  # noqa: F401 (the import is the work: numpy, OpenCV, crc32c)


def _warm_workers(workers: int) -> threading.Thread:
    """Start the loky worker processes while the parent scans (~0.4 s for two to boot and
    import on 2 cores); the real run then reuses the same pool."""
    from joblib import Parallel, delayed

    def warm() -> None:
        Parallel(n_jobs=workers)(delayed(_import_worker)() for _ in range(workers))

    thread = threading.Thread(target=warm, daemon=True)
    thread.start()
    return thread


def _run(
    specs: list[ShardSpec], options: PackOptions, dataset: Dataset, out: str, workers: int
) -> Iterator[ShardResult]:
    """Yield each shard's result as it finishes: in-process, on loky workers, or on Dask.

    Closing the generator early (an error, Ctrl-C) makes joblib stop every worker.
    """
    args = (options, dataset.root, out, len(dataset.classes))
    if options.backend == "loky" and (workers == 1 or len(specs) <= 1):
        yield from (write_shard(spec, *args) for spec in specs)
        return
    from joblib import Parallel, delayed, parallel_config

    tasks = (delayed(write_shard)(spec, *args) for spec in specs)
    if options.backend == "loky":
        parallel = Parallel(n_jobs=min(workers, len(specs)), return_as="generator_unordered")
        yield from parallel(tasks)
        return
    from shardpack.cluster import check_shared_storage, dask_client

    with dask_client(options.scheduler, workers) as client:
        if specs:
            check_shared_storage(client, dataset.root, out, specs[0].items[0].path)
        with parallel_config(backend="dask"):
            yield from Parallel(n_jobs=-1, return_as="generator_unordered")(tasks)


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
