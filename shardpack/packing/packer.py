"""Orchestration: scan, plan, run one worker task per shard, follow progress, merge the index."""

from __future__ import annotations

import gc
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, replace
from typing import NoReturn

from shardpack.containers import CONTAINERS
from shardpack.errors import ImageError, OutputError, SourceError, WorkerDiedError, printable
from shardpack.images import OVER_MAX_PIXELS
from shardpack.index import Index, index_from_document
from shardpack.layout import CARD_NAME, CROISSANT_NAME, INDEX_NAME, METADATA_NAMES
from shardpack.options import PackOptions
from shardpack.packing import duplicates, stamps
from shardpack.packing.cluster import check_shared_storage, dask_client
from shardpack.packing.contents import entries, with_copies, write_contents
from shardpack.packing.cpuload import CpuWatch, machine_cores
from shardpack.packing.croissant import croissant
from shardpack.packing.daliindex import write_index_files
from shardpack.packing.hubcard import card
from shardpack.packing.merge import build_index
from shardpack.packing.outdir import Journal, plan_record, prepare, split_file_names
from shardpack.packing.plan import (
    SERIAL_SHARE,
    Plan,
    ShardResult,
    ShardSpec,
    best_workers,
    make_plan,
    work_seconds,
)
from shardpack.packing.stats import split_summaries
from shardpack.packing.tfdsmeta import write_tfds_metadata
from shardpack.packing.urlfailures import counts, url_failures, write_failures
from shardpack.packing.worker import read_progress, write_shard
from shardpack.schema import Feature
from shardpack.sources import Dataset, keeping, scan, source_root
from shardpack.sources.scanned import ScanCallback, reporting
from shardpack.storage import Storage, is_store_failure, storage_at
from shardpack.storage.atomic import json_bytes, temp_files

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
    notes: tuple[str, ...] = ()  # about this run alone, one line each: fewer workers than asked
    grow: dict | None = None  # --append, --update: added, changed, removed, shards rewritten

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
            "warnings": [*doc["warnings"], *self.notes],
            "splits": {
                name: {
                    "num_records": split.num_records,
                    "num_shards": len(split.shards),
                    "num_bytes": sum(s.num_bytes for s in split.shards),
                }
                for name, split in self.index.splits.items()
            },
            **(self._run_stats() if self.grow else {k: doc["stats"][k] for k in _RUN_STATS}),
            "lossless": doc["stats"].get("lossless", 0),
            "shards_kept": self.num_reused,
            "new_records": self.new_records,
            "container": self.index.container_name,
            "compression": self.index.compression,
            "tfds_metadata": self.index.tfds_readable,
            "skipped_items": doc["skipped"][:20],
            "duplicates": {**doc["duplicates"], "listed": doc["duplicates"]["listed"][:20]},
            "num_classes": len(self.index.classes),
            "classes": list(self.index.classes[:SUMMARY_CLASSES]),
            "features": {name: feature_type(f) for name, f in self.index.schema.extras.items()},
            "grow": self.grow,
            "url_failures": doc["stats"].get("url_failures", {}),
        }

    def _run_stats(self) -> dict:
        """A grow's time, rate and workers: this run's (its new items'), not the dataset's
        first pack's; a grow that wrote nothing has no rate and ran no worker."""
        wrote = self.new_records and self.seconds
        workers = self.index.raw["stats"]["workers"] if wrote else 0
        rate = round(self.new_records / self.seconds, 1) if wrote else None
        return {"seconds": round(self.seconds, 3), "images_per_second": rate, "workers": workers}


_RUN_STATS = ("seconds", "images_per_second", "workers")


# The summary names the first this many classes: enough to see a list changed, bounded for
# a dataset of thousands.
SUMMARY_CLASSES = 20


def feature_type(feature: Feature) -> str:
    """A feature's type in a word or three: "class", "class list", "text", "int64",
    "float32 list", "float32 list of 4"."""
    kind = "class" if feature.classes is not None else "text" if feature.text else feature.dtype
    if not feature.shape:
        return kind
    return f"{kind} list of {feature.row}" if feature.row else f"{kind} list"


def _check_arguments(
    options: object, progress: object, storage_options: object, scan_progress: object = None
) -> None:
    """A Python caller's wrong kind of argument, refused by name before anything is touched."""
    if scan_progress is not None and not callable(scan_progress):
        raise TypeError(f"scan_progress must be called with (files listed); got: "
                        f"{scan_progress!r}")  # fmt: skip
    if options is not None and not isinstance(options, PackOptions):
        raise TypeError(f"options must be a PackOptions, such as PackOptions(encode='jpeg'); "
                        f"got: {options!r}")  # fmt: skip
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be called with (done, total); got: {progress!r}")
    if storage_options is not None and not isinstance(storage_options, dict):
        raise TypeError(f"storage_options must be a dict of filesystem options; got: "
                        f"{storage_options!r}")  # fmt: skip


def default_name(dataset: Dataset, src: Storage) -> str:
    """The source's own name for it (cifar10), a manifest file's name without its extension
    (two tables in one folder are two datasets), else SRC's folder name (a URL's last segment);
    made safe for file names."""
    named = dataset.source.default_name(dataset)
    if named is not None:
        return named
    if src.kind() == "dir":
        base = os.path.basename(dataset.root.path())
    else:  # a manifest file
        base = os.path.splitext(os.path.basename(src.path()))[0]
    name = re.sub(r"[^A-Za-z0-9_.]+", "_", base).strip("_.")
    return name or "dataset"


def choose_workers(
    plan: Plan, options: PackOptions, cores: int, others_busy: Callable[[], float]
) -> int:
    """--workers if given; else the count the cost model expects to finish first on the cores
    other processes leave free (at least 1, never more than there are shards); on Dask, the
    cores.

    Args:
        plan: the shards to write.
        options: the run's options (the encoding decides the cost per item).
        cores: the cores this process may run on.
        others_busy: returns how many cores other processes keep busy; called only when the
            work is worth more than one worker.
    """
    if options.workers is not None:
        return options.workers
    if options.backend != "local":
        return cores  # a Dask LocalCluster of this machine's cores, as before; no model for it
    items = tuple(item for spec in plan.shards for item in spec.items)
    work, serial, shards = (
        work_seconds(items, options, plan.cost),
        SERIAL_SHARE[options.encode],
        len(plan.shards),
    )
    if best_workers(work, cores, shards, serial) == 1:
        return 1  # no need to look at the load
    return best_workers(work, cores, shards, serial, busy=max(0.0, others_busy()))


def _scan_and_plan(
    src_root: Storage,
    options: PackOptions,
    storage_options: dict | None,
    scan_progress: ScanCallback | None,
) -> tuple[Dataset, list | None, str, Plan]:
    """List SRC, drop copies under --dedup, and plan the shards: the dataset, the copies found
    (None: to be found in what the workers write), the dataset's name and the plan."""
    with _no_gc():
        with reporting(scan_progress):
            dataset = scan(src_root, options, storage_options)
        if options.on_error == "fail" and dataset.skipped:  # the scan's own refusals
            key, reason = dataset.skipped[0]
            raise ImageError(key, f"{reason}; fix it, or {_SKIP}")
        groups = None
        if options.dedup != "none":
            dataset, groups = duplicates.dedup(dataset, options, options.workers or machine_cores())
        name = options.name or default_name(dataset, src_root)
        return dataset, groups, name, make_plan(dataset, name, options,
                                                options.workers or machine_cores())  # fmt: skip


def pack(
    src: str | os.PathLike,
    out: str | os.PathLike,
    options: PackOptions | None = None,
    progress: ProgressCallback | None = None,
    storage_options: dict | None = None,
    scan_progress: ScanCallback | None = None,
) -> PackResult:
    """Pack SRC into shards (options.format: TFRecord, ArrayRecord or WebDataset) and an
    index.json in OUT.

    Args:
        src: a folder, file or URL that a registered source recognises (shardpack.sources:
            class or split folders, a manifest table, ...).
        out: the output folder; created if missing.
        options: how to pack; defaults to PackOptions().
        progress: called about five times a second with (items done, items total).
        storage_options: options for the filesystem of a URL SRC or OUT (s3fs, gcsfs, ...).
        scan_progress: called while SRC is listed with the count of files (or manifest rows)
            listed so far, every few thousand.

    Returns:
        The index document and headline figures.

    Raises:
        ShardpackError: bad SRC or OUT, the format's package missing, or (with
            on_error="fail") a bad image; in every case
            no index.json is written and no partial shard is left under a final name.

    On glibc, the calling process keeps glibc's malloc set to reuse freed memory afterwards
    (see _keep_freed_memory: up to 64 MiB held for reuse).
    """
    start = time.perf_counter()  # the whole call: scan, plan, workers' start, writing, merge
    _check_arguments(options, progress, storage_options, scan_progress)
    options = options or PackOptions()
    if options.grow != "none":  # --append, --update: into the dataset OUT holds
        from shardpack.packing.grow import grow

        with reporting(scan_progress):
            return grow(src, out, options, progress, storage_options)
    CONTAINERS[options.format].require()  # a missing package: refused before OUT is created
    src_root = source_root(src, storage_options)  # refused before OUT is created if missing
    out = storage_at(out, storage_options)
    _refuse_out_inside_src(src_root, out)
    created = out.make_root()
    with out.lock(created), keeping():  # what sources load once a run
        watch = CpuWatch()  # the scan and plan are the window that measures others' load
        dataset, groups, name, plan = _scan_and_plan(
            src_root, options, storage_options, scan_progress
        )
        splits = {spec.split for spec in plan.shards}
        beside = split_file_names(CONTAINERS[options.format], name, splits)
        record = plan_record(plan, replace(options, name=name))  # the name SRC gave, if unset
        reused = prepare(out, plan, options.overwrite, options.resume, beside, record)
        workers = choose_workers(plan, options, machine_cores(), watch.others_busy)
        in_process = out.in_process or src_root.in_process  # memory:// is this process's own
        if in_process:
            workers, options = 1, replace(options, backend="local")
        results = _write_shards(plan, record, reused, options, dataset, out, workers, progress)
        num_records = sum(r.num_records for r in results)
        if num_records == 0:  # a dataset of nothing is no success, and leaves no dataset
            _leave_nothing(out, plan, dataset, results)
        seconds = time.perf_counter() - start
        new_records = num_records - sum(r.num_records for r in reused)
        to_write = len(plan.shards) - len(reused)
        stats = {
            "seconds": round(seconds, 3),
            "images_per_second": round(new_records / seconds, 1) if seconds else None,
            # no more workers than shards this run wrote: one shard runs in-process
            "workers": min(workers, max(1, to_write)),
            "lossless": sum(r.lossless for r in results),  # --encode keep's images made PNG
        }
        failures = url_failures([*((None, *s) for s in dataset.skipped),
                                 *((r.split, *s) for r in results for s in r.skipped)])  # fmt: skip
        if failures:
            stats["url_failures"] = counts(failures)
        notes = _fewer_workers(options.workers, stats["workers"], to_write, in_process)
        document = build_index(
            name=name, dataset=dataset, options=options, plan=plan, results=results, stats=stats
        )
        removed = {} if groups is None else duplicates.removed(groups)
        if groups is None:
            groups = duplicates.found_in_shards(plan, results, dataset, options)
        document["duplicates"] = duplicates.summary(groups, sum(removed.values()), options)
        document["warnings"] += duplicates.warnings(document["duplicates"])
        document["summaries"] = split_summaries(plan, results, removed)
        index = write_outputs(out, document, results, options.index_files)
        write_contents(out, with_copies(entries(plan, results), groups, frozenset()))
        write_failures(out, failures)
        out.put(INDEX_NAME, json_bytes(document))  # the run is complete
        stamps.save(out, document, stamps.written(plan, results))
    return PackResult(
        out.root,
        index,
        num_records,
        document["num_skipped"],
        seconds,
        len(reused),
        len(plan.shards),
        new_records,
        notes,
    )


def write_outputs(
    out: Storage, document: dict, results: list[ShardResult], index_files: bool, tfds: bool = True
) -> Index:
    """Write what goes beside the shards of `document` (TFDS metadata unless not `tfds`, the
    container's split files, the index files of the shards in `results`, the Hub card,
    croissant.json);
    index.json not yet."""
    index = index_from_document(out, document)
    if index.tfds_readable and tfds:
        write_tfds_metadata(out, document, index.container.tfds_file_format)
    else:  # an earlier run's metadata would point TFDS at shards it cannot read
        out.remove(METADATA_NAMES)
    for split, entry in document["splits"].items():  # the container's files beside them
        shards = [(s["file"], s["num_records"]) for s in entry["shards"]]
        for file, listing in index.container.split_files(index.name, split, shards).items():
            out.put(file, json_bytes(listing))
    if index_files:
        offsets = {r.file: r.offsets for r in results}  # only these shards' files: new ones
        written = {split: {**entry, "shards": [s for s in entry["shards"] if s["file"] in offsets]}
                   for split, entry in document["splits"].items()}  # fmt: skip
        write_index_files(out, {**document, "splits": written}, offsets)
    out.put(CARD_NAME, card(document))  # the Hub's dataset card
    out.put(CROISSANT_NAME, croissant(document, index.container))
    return index


def _leave_nothing(out: Storage, plan: Plan, dataset: Dataset, results: list) -> NoReturn:
    """Remove the empty shards and the journal of a run that packed nothing, then say why."""
    out.remove(spec.file for spec in plan.shards)
    out.remove_journal()
    skipped = [*dataset.skipped, *(s for r in results for s in r.skipped)]
    key, reason = min(skipped, default=("", ""))
    first = f" (the first, {printable(key)}: {printable(reason)})" if skipped else ""
    raise SourceError(f"no image was packed from {dataset.root.path()}, {len(skipped):,} "
                      f"item{'s' if len(skipped) != 1 else ''} skipped{first}; fix or remove "
                      "them")  # fmt: skip


def _fewer_workers(asked: int | None, ran: int, to_write: int, in_process: bool) -> tuple[str, ...]:
    """A line saying why the run used fewer workers than --workers asked, if it did."""
    if asked is None or ran >= asked:
        return ()
    why = (
        "memory:// storage is this process's own"
        if in_process
        else f"{to_write:,} shard{'' if to_write == 1 else 's'} to write, a worker each at most"
    )
    return (f"{ran} of the {asked} workers asked ran: {why}",)


def _write_shards(
    plan: Plan,
    record: dict[str, object],
    reused: list[ShardResult],
    options: PackOptions,
    dataset: Dataset,
    out: Storage,
    workers: int,
    progress: ProgressCallback | None,
) -> list[ShardResult]:
    """Write every shard not reused, journal each as it lands; on any failure (a bad image, a
    signal, a dead worker) remove the partial files and say which shards were in flight.
    `record` (plan_record's) heads the journal."""
    journal = Journal(out, plan.digest, record, reused)
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
        in_flight = _tidy_after_failure(out, todo, {r.file for r in results})
        if isinstance(e, ImageError):  # --on-error fail: say where the file is and what to do
            fix = (
                "raise --max-pixels if you trust the image"
                if OVER_MAX_PIXELS in e.reason
                else "repair or remove the file"
            )
            raise ImageError(
                e.key, f"{e.reason} (in {dataset.root.path()}); {fix}, or {_SKIP}"
            ) from None
        if type(e).__name__ == "BrokenProcessPool":  # concurrent.futures's; imported lazily
            raise WorkerDiedError(
                f"{out.root}: a worker died while writing {', '.join(in_flight) or 'a shard'} "
                "(killed, perhaps by the out-of-memory killer: try fewer --workers); "
                "rerun with --resume to keep the shards already finished"
            ) from None
        raise
    finally:
        journal.close()
    out.remove_partial({s.file for s in todo})  # those of a killed worker Dask retried
    return results


def _tidy_after_failure(out: Storage, todo: list[ShardSpec], recorded: set[str]) -> list[str]:
    """After a failed run: remove what a killed worker left (workers remove their own partial
    files; these have random names, or are multipart uploads left open) and any shard finished
    but not journaled (its result never reached us), so that OUT holds only what the journal
    vouches for. Returns the shards that had partial files. Best effort: a disk or store that
    fails here too (gone down) must not bury why the run stopped; --resume removes the rest.
    Any other exception is a bug of ours, and shows."""
    in_flight: list[str] = []
    for tidy in (
        lambda: in_flight.extend(out.remove_partial({s.file for s in todo})),
        lambda: out.remove(s.file for s in todo if s.file not in recorded),
    ):
        try:
            tidy()
        except Exception as e:
            if not is_store_failure(e):
                raise
    return in_flight


@contextmanager
def _no_gc() -> Iterator[None]:
    """Hold the cyclic garbage collector off: a listing makes millions of objects and no
    cycles, and each full collection walks them all (`python -m benchmarks.listing`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def _gc_frozen() -> Iterator[None]:
    """Move every object made so far (the listing, the plan, the modules) out of the cyclic
    collector's reach while the shards are written. A forked worker then shares those pages
    with the parent instead of copying them: a full collection in a worker writes into every
    object it walks (50,000 small JPEGs, 2 workers: ~0.08 s a collection)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# glibc's malloc options (malloc.h) and the values set: its largest mmap threshold, and a trim
# threshold twice that, as glibc's own dynamic thresholds would pair them.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEEP = ((_M_TRIM_THRESHOLD, 64 * 2**20), (_M_MMAP_THRESHOLD, 32 * 2**20))


def _keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory for the next image instead of handing it back.

    By default each image's decode and encode buffers are fresh pages, page-faulted in one by
    one: a large share of re-encoding's system time (benchmarks/README.md). The price: the
    process keeps up to 64 MiB of freed memory for reuse, and setting the thresholds turns off
    glibc's own adjusting of them, for the rest of the process. Elsewhere (no glibc) nothing
    is done.
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return
    for option, value in _KEEP:
        mallopt(option, value)


def _refuse_out_inside_src(src: Storage, out: Storage) -> None:
    """OUT inside SRC would be scanned as data by the next run: refuse it (local disks: real
    paths compared; object stores: the URLs' prefixes)."""
    if not src.holds(out):
        return
    raise OutputError(
        f"{out.root}: is inside SRC {src.path()}, where it would be scanned as data; choose an "
        "output folder outside SRC"
    )


def _run(
    specs: list[ShardSpec], options: PackOptions, dataset: Dataset, out: Storage, workers: int
) -> Iterator[ShardResult]:
    """Yield each shard's result as it finishes: in-process, on forked workers, or on Dask.

    Closing the generator early (an error, Ctrl-C) stops every worker before it returns.
    """
    args = (options, dataset.root, out, dataset.schema, dataset.source)
    if options.backend == "local":
        _keep_freed_memory()  # in this process, and so in the workers it forks
        with _gc_frozen():
            if workers == 1 or len(specs) <= 1:
                yield from (write_shard(spec, *args) for spec in specs)
            else:
                from shardpack.packing.forkpool import run_local  # imports joblib

                yield from run_local(specs, args, min(workers, len(specs)))
        return
    from joblib import Parallel, delayed, parallel_config

    tasks = (delayed(write_shard)(spec, *args) for spec in specs)

    with dask_client(options.scheduler, workers) as client:
        if specs:
            check_shared_storage(client, dataset.root, out, specs[0].items[0].path)
        with parallel_config(backend="dask"):
            yield from Parallel(n_jobs=-1, return_as="generator_unordered")(tasks)


# The way past a bad item that --on-error fail stopped at.
_SKIP = "pass --on-error skip to leave it out"


class _ProgressPoller:
    """Sums finished shards and the counts in workers' progress files for a callback."""

    def __init__(
        self, out: Storage, total: int, callback: ProgressCallback | None, pending: set[str]
    ) -> None:
        self.folder = out.progress_folder()  # None: the bar moves a shard at a time
        self.total, self.callback = total, callback
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
        if self.folder is None:
            return 0
        found = temp_files(self.folder, set(self.pending), kinds=("progress",))
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
