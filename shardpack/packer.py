"""Orchestration: scan, plan, run one worker task per shard, follow progress, merge the index."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass

from shardpack.atomic import remove_files, remove_temp_files, temp_files, write_json_atomic
from shardpack.errors import ImageError, OutputError, WorkerDiedError, os_error_fix
from shardpack.index import INDEX_NAME, METADATA_NAMES, Index, build_index, index_from_document
from shardpack.options import PackOptions
from shardpack.outdir import Journal, locked, prepare
from shardpack.plan import Plan, ShardResult, ShardSpec, make_plan
from shardpack.sources import Dataset, scan, source_root
from shardpack.sources.cifar import cifar_layout
from shardpack.tfdsmeta import write_tfds_metadata
from shardpack.worker import read_progress, write_shard

ProgressCallback = Callable[[int, int], None]
# Poll workers' progress files this often: a live bar without measurable cost.
_POLL_S = 0.2


@dataclass(frozen=True)
class PackResult:
    """What a pack run produced: the index it wrote and a few headline figures."""

    out: str
    index: Index
    num_records: int
    num_skipped: int
    seconds: float
    num_reused: int = 0  # shards kept from an earlier run by resume
    num_shards: int = 0  # shards in the plan, kept ones included
    new_records: int = 0  # records this run wrote (not kept): what images_per_second rates

    def to_json(self) -> dict:
        """The run's summary as a JSON-ready dict (what `pack --json` prints)."""
        doc = self.index.raw
        return {
            "out": self.out,
            "name": self.index.name,
            "records": self.num_records,
            "skipped": self.num_skipped,
            "ignored": doc["ignored"],
            "ignored_files": doc["ignored_files"][:20],
            "warnings": doc["warnings"],
            "splits": {
                name: {
                    "num_records": split.num_records,
                    "num_shards": len(split.shards),
                    "num_bytes": sum(s.num_bytes for s in split.shards),
                }
                for name, split in self.index.splits.items()
            },
            "seconds": doc["stats"]["seconds"],
            "images_per_second": doc["stats"]["images_per_second"],
            "workers": doc["stats"]["workers"],
            "shards_kept": self.num_reused,
            "new_records": self.new_records,
            "tfds_metadata": self.index.tfds_readable,
            "skipped_items": doc["skipped"][:20],
        }


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
    with locked(out, created):
        workers = resolve_workers(options.workers)
        # A CIFAR scan unpickles ~180 MB: the workers boot meanwhile (2.18 -> 2.00 s for
        # CIFAR-10 on 2 cores). A folder's scan is too short to hide a boot, and a small folder
        # may need no worker at all (7 images: 0.37 s in-process, 1.05 s with a warmed pool).
        warming = None
        if options.backend == "loky" and workers > 1 and cifar_layout(src_root, options.source):
            warming = _warm_workers(workers)
        try:
            dataset = scan(src_root, options)
            if options.on_error == "fail" and dataset.skipped:  # the scan's own refusals
                raise ImageError(*dataset.skipped[0])
            name = options.name or default_name(dataset)
            plan = make_plan(dataset, name, options, workers)
            stale, reused = prepare(out, plan, options.overwrite, options.resume)
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
        document = build_index(
            name=name, dataset=dataset, options=options, plan=plan, results=results, stats=stats
        )
        index = index_from_document(out, document)
        if index.tfds_readable:
            write_tfds_metadata(out, document)
        else:  # an earlier run's metadata would point TFDS at shards it cannot read
            remove_files(os.path.join(out, name) for name in METADATA_NAMES)
        if options.index_files:
            from shardpack.recordindex import write_index_files

            write_index_files(out, document, {r.file: r.offsets for r in results})
        write_json_atomic(os.path.join(out, INDEX_NAME), document)  # last: the run is complete
        remove_files(os.path.join(out, f) for f in stale - {s.file for s in plan.shards})
    return PackResult(
        out,
        index,
        num_records,
        len(document["skipped"]),
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
            _ProgressPoller(out, sum(sizes.values()), progress, {s.file for s in todo}) as poller,
            closing(_run(todo, options, dataset, out, workers)) as finished,
        ):
            poller.finished(sum(sizes[f] for f in done))
            for result in finished:
                journal.add(result)
                results.append(result)
                poller.finished(sizes[result.file], result.file)
    except BaseException as e:
        # Workers remove their own temp files; these are a killed worker's (random names).
        in_flight = remove_temp_files(out, {s.file for s in todo})
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
    finally:
        journal.close()
    remove_temp_files(out, {s.file for s in todo})  # those of a killed worker Dask retried
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
    args = (options, dataset.root, out, dataset.schema, dataset.kind)
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

    def __init__(
        self, out: str, total: int, callback: ProgressCallback | None, pending: set[str]
    ) -> None:
        self.out, self.total, self.callback = out, total, callback
        self.pending = pending  # shards not finished yet: only their progress files are read
        self.done = 0
        self._shown = 0  # a worker's file vanishes just before its result lands: never go back
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> _ProgressPoller:
        if self.callback is not None:
            self._thread.start()
        return self

    def finished(self, items: int, file: str = "") -> None:
        self.done += items
        self.pending.discard(file)

    def _in_flight(self) -> int:
        found = temp_files(self.out, set(self.pending), kinds=("progress",))
        return sum(max(map(read_progress, paths)) for paths in found.values())

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
