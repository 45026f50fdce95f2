"""The write step: every planned shard not kept from before, one worker task each (in-process,
on forked workers, or on Dask), journaled as each lands, with progress followed and a failed
run tidied."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial

from shardpack.containers import HashingFile
from shardpack.errors import RESUME_KEEPS, ImageError, Option, WorkerDiedError, way_past
from shardpack.options import PackOptions
from shardpack.packing import stamps
from shardpack.packing.collector import frozen, long_lived
from shardpack.packing.cpuload import machine_cores
from shardpack.packing.outdir import Found, Journal
from shardpack.packing.plan import Plan, ShardResult, ShardSpec
from shardpack.packing.worker import next_files, read_progress, write_shard
from shardpack.signatures import OVER_MAX_PIXELS
from shardpack.sources import Dataset
from shardpack.storage import Storage, is_store_failure
from shardpack.storage.atomic import temp_files
from shardpack.storage.imageroot import close_started
from shardpack.storage.urlpolicy import is_transient, is_web_url


@dataclass(frozen=True)
class Planned:
    """What a pack's or a grow's plan step hands the write step."""

    dataset: Dataset
    plan: Plan
    options: PackOptions  # as the workers pack: the dataset's own, for a grow
    record: dict[str, object]  # plan_record's: heads the journal
    reused: list[ShardResult]  # shards an earlier run of this plan finished (--resume)
    workers: int
    # the journal's head lands before any shard: OUT holds no journal, or one no run of this
    # plan wrote (a grow's strays, a fresh pack's shards, are told by the journal alone)
    journal_first: bool = False
    # the journal OUT held as the run began (a grow's: the dataset's), put back by a run that
    # begins its own and finishes no shard; None: none, or none worth keeping
    found: Found | None = None
    # key -> the stamp listed before a read ahead of the workers, whose bytes they take from
    # its UrlSpool (a grow's compare): stamps.with_listed's `read`
    stamped: Mapping[str, stamps.Stamp] = field(default_factory=dict)


ProgressCallback = Callable[[int, int], None]


# Poll workers' progress files this often: a live bar without measurable cost.
_POLL_S = 0.2


def write_shards(
    planned: Planned,
    out: Storage,
    progress: ProgressCallback | None,
    landed: Callable[[ShardResult], ShardResult] | None = None,
) -> list[ShardResult]:
    """Write every shard not reused, journal each as it lands (then hand it to `landed`, which
    returns what of it to keep: the results returned are those); on any failure (a bad image, a
    signal, a dead worker) remove the partial files and say which shards were in flight. The
    planned `record` (plan_record's) heads the journal."""
    plan, reused, dataset = planned.plan, planned.reused, planned.dataset
    journal = Journal(out, plan.digest, planned.record, reused, planned.found)
    done = {r.file for r in reused}
    todo = stamps.with_listed([spec for spec in plan.shards if spec.file not in done],
                              dataset.source, dataset.root, planned.stamped)  # fmt: skip
    sizes = {spec.file: len(spec.items) for spec in plan.shards}
    results = list(reused)
    journaled = set(done)  # what the journal vouches for, or may: kept whatever stops the run
    try:
        if planned.journal_first:
            journal.begin()
        with (
            _ProgressPoller(out, sizes, done, progress) as poller,
            closing(_run(todo, planned.options, dataset, out, planned.workers)) as finished,
        ):
            for result in finished:
                # kept from here on: a stop (Ctrl-C) inside add, its line already written,
                # must not remove the file it vouches for; a line not written costs a rewrite
                journaled.add(result.file)
                journal.add(result)
                if landed is not None:
                    result = landed(result)
                results.append(result)
                poller.finished(result.file)
    except BaseException as e:
        # a journal this run began, of no shard: the one OUT held put back, or none
        undo = journal.put_back if planned.journal_first and not journaled else None
        in_flight = _tidy_after_failure(out, todo, journaled, undo)
        if isinstance(e, ImageError):  # --on-error fail: say where the file is and what to do
            raise ImageError(e.key, *e.reason_parts, f" (in {dataset.root.path()})",
                             *way_past(e.reason, *_fix(e))) from None  # fmt: skip
        if type(e).__name__ == "BrokenProcessPool":  # concurrent.futures's; imported lazily
            raise WorkerDiedError(
                f"{out.root}: a worker died while writing {', '.join(in_flight) or 'a shard'} "
                "(killed, perhaps by the out-of-memory killer: try fewer ",
                Option("workers"),
                "); ",
                *RESUME_KEEPS,
            ) from None
        raise
    finally:
        journal.close()
    out.remove_partial({s.file for s in todo})  # those of a killed worker Dask retried
    return results


def _fix(error: ImageError) -> tuple[str | Option, ...]:
    """What to do about an item a worker refused, where its reason names no fix of its own."""
    if OVER_MAX_PIXELS in error.reason:
        return ("raise ", Option("max_pixels"), " if you trust the image")
    if is_web_url(error.key):  # an image URL: no file of the user's to repair
        return ("try again later",) if is_transient(error.reason) else ("fix or remove its row",)
    return ("repair or remove the file",)


def _tidy_after_failure(
    out: Storage, todo: list[ShardSpec], recorded: set[str], undo: Callable[[], None] | None
) -> list[str]:
    """After a failed run: remove what a killed worker left (workers remove their own partial
    files; these have random names, or are multipart uploads left open) and any shard finished
    but not journaled (its result never reached us), so that OUT holds only what the journal
    vouches for; and the journal, where this run began it and journaled nothing (`undo`: put
    back the one OUT held as the run began, or remove it). Returns the shards that had partial
    files. Best effort: a disk or store that fails here too (gone down) must not bury why the
    run stopped; --resume removes the rest. Any other exception is a bug of ours, and shows."""
    in_flight: list[str] = []
    for tidy in (
        lambda: in_flight.extend(out.remove_partial({s.file for s in todo})),
        lambda: out.remove(s.file for s in todo if s.file not in recorded),
        lambda: undo() if undo is not None else None,
    ):
        try:
            tidy()
        except Exception as e:
            if not is_store_failure(e):
                raise
    return in_flight


# glibc's malloc options (malloc.h) and the values set: its largest mmap threshold, and a trim
# threshold twice that, as glibc's own dynamic thresholds would pair them.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


_KEEP = ((_M_TRIM_THRESHOLD, 64 * 2**20), (_M_MMAP_THRESHOLD, 32 * 2**20))
# And for a packing process that forks workers: glibc's first thresholds, held there. glibc
# raises its threshold to each mmapped block freed, so that a result's buffers of megabytes
# then come from the heap and stay in it: 200,000 files, the packing process's peak 128 -> 122
# MB (distinct), 143 -> 136 (copies) (`python -m benchmarks.listing --pack`).
_GIVE_BACK = ((_M_TRIM_THRESHOLD, 256 * 2**10), (_M_MMAP_THRESHOLD, 128 * 2**10))


def _in_turn(specs: list[ShardSpec], args: tuple) -> Iterator[ShardResult]:
    """Yield write_shard(spec, *args) of each spec in turn, in this process, each shard's
    reading told of the next (fetched during its retries); a stop between shards ends that."""
    source = args[-1]
    try:
        for spec, following in itertools.pairwise([*specs, None]):
            then = None if following is None else lambda f=following: next_files(f, source)
            yield write_shard(spec, *args, then=then)
    finally:
        close_started()


def _keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory for the next image instead of handing it back.

    By default each image's decode and encode buffers are fresh pages, page-faulted in one by
    one: a large share of re-encoding's system time (benchmarks/README.md). The price: the
    process keeps up to 64 MiB of freed memory for reuse, and setting the thresholds turns off
    glibc's own adjusting of them, for the rest of the process.
    """
    _mallopt(_KEEP)


def _prepare_worker(spare_core: bool) -> None:
    """In each forked worker, first: keep freed memory, and hash and write a shard's bytes on
    a thread of their own only where the workers leave a core to spare."""
    _keep_freed_memory()
    HashingFile.threaded = spare_core


def _mallopt(settings: tuple[tuple[int, int], ...]) -> None:
    """Set these of glibc's malloc options; elsewhere (no glibc) nothing is done."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return
    for option, value in settings:
        mallopt(option, value)


def _run(
    specs: list[ShardSpec], options: PackOptions, dataset: Dataset, out: Storage, workers: int
) -> Iterator[ShardResult]:
    """Yield each shard's result as it finishes: in-process, on forked workers, or on Dask.

    Closing the generator early (an error, Ctrl-C) stops every worker before it returns.
    """
    args = (options, dataset.root, out, dataset.schema, dataset.source)
    if options.backend == "local":
        with frozen():
            if workers == 1 or len(specs) <= 1:
                _keep_freed_memory()  # this process decodes the images
                yield from _in_turn(specs, args)
            else:
                with long_lived():
                    from shardpack.packing.forkpool import run_local  # joblib: not for 1 worker

                # in the workers alone: the packing process gives back what it frees
                _mallopt(_GIVE_BACK)
                workers = min(workers, len(specs))
                prepare = partial(_prepare_worker, spare_core=workers < machine_cores())
                yield from run_local(specs, args, workers, out.complete, prepare)
        return
    from shardpack.packing import cluster, daskpool  # a dask run's alone: distributed, joblib

    with cluster.dask_client(options.scheduler, workers) as client:
        if specs:
            cluster.check_shared_storage(client, dataset.root, out, specs[0].items[0].path)
        with closing(daskpool.run_on_cluster(client, write_shard, specs, args)) as tasks:
            yield from tasks


class _ProgressPoller:
    """Sums finished shards and the counts in workers' progress files for a callback."""

    def __init__(
        self,
        out: Storage,
        sizes: dict[str, int],
        kept: set[str],
        callback: ProgressCallback | None,
    ) -> None:
        self.folder = out.progress_folder()  # None: the bar moves a shard at a time
        self.sizes, self.total, self.callback = sizes, sum(sizes.values()), callback
        self.pending = set(sizes) - kept  # shards not finished: only their progress files are read
        self.done = sum(sizes[file] for file in kept)  # a resume's kept shards: done already
        self._shown = self.done  # a worker's file vanishes as its result lands: never go back
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> _ProgressPoller:
        if self.callback is not None:
            # as the workers start, the kept shards counted: a bar rates what comes after this
            # (the CLI's said "0 images/s" where its first report was the run's last)
            self.callback(self.done, self.total)
            self._thread.start()
        return self

    def finished(self, file: str) -> None:
        self.done += self.sizes[file]
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
