"""A fresh pack's own steps: scan and plan SRC into a new OUT (or over an earlier run of the
same job: --resume, --overwrite), then merge what the workers wrote into a new index."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import NoReturn

from shardpack.containers import CONTAINERS
from shardpack.errors import (
    STORE_REFUSED_FIX,
    ImageError,
    Option,
    OptionError,
    OutputError,
    SourceError,
    printable,
    way_past,
)
from shardpack.index import Index, PackStats
from shardpack.options import MAX_NAME_CHARS, PackOptions, safe_name
from shardpack.packing import duplicates, stamps
from shardpack.packing.contents import Noted, copy_numbers
from shardpack.packing.cpuload import CpuWatch, machine_cores
from shardpack.packing.daliindex import refuse_index_file_folders
from shardpack.packing.factspill import FactSpill
from shardpack.packing.hubcard import size_notes
from shardpack.packing.merge import build_index, commit_index, json_value, write_outputs
from shardpack.packing.outdir import plan_record, prepare, refuse_images, split_file_names
from shardpack.packing.packeditems import packed_plan
from shardpack.packing.plan import (
    Plan,
    ShardResult,
    choose_workers,
    fewer_workers,
    make_plan,
    plan_seconds,
    work_seconds,
)
from shardpack.packing.rangeplan import (
    failure_rows,
    make_range_plan,
    ranges_list_urls,
    streamed_rows,
)
from shardpack.packing.result import PackResult
from shardpack.packing.spool import EntrySpool
from shardpack.packing.urlfailures import (
    RowsOf,
    counts,
    first_listed,
    lists_urls,
    rows_of,
    url_failures,
    write_failures,
)
from shardpack.packing.writing import Planned
from shardpack.sources import Dataset, scan
from shardpack.storage import Storage
from shardpack.storage.urlpolicy import is_web_url, proxy_ignored
from shardpack.storage.urlspool import UrlSpool


class FreshPack:
    """pack() into a new dataset: the plan and merge steps (packer.pack runs them)."""

    def __init__(
        self, src: Storage, out: Storage, options: PackOptions, storage_options: dict | None
    ) -> None:
        self.src, self.out, self.options, self.storage_options = src, out, options, storage_options
        self.start = time.perf_counter()  # scan, plan, workers' start, writing, merge
        self.fetched = UrlSpool(out.scratch_folder())  # what --dedup fetched, for the workers

    def open(self) -> bool:
        """Before the lock: a missing package refused before OUT is made; OUT made. Returns
        whether it was."""
        CONTAINERS[self.options.format].require()
        refuse_images(self.out)
        return self.out.make_root()

    def plan(self) -> Planned:
        """Scan SRC, drop copies under --dedup, plan the shards and find those a stopped run of
        this plan finished."""
        watch = CpuWatch()  # the scan and plan are the window that measures others' load
        options, out = self.options, self.out
        self.in_process = out.in_process or self.src.in_process  # memory:// is ours alone

        def choose(work: float, shards: int | None) -> int:
            if self.in_process:
                return 1
            return choose_workers(work, shards, options, machine_cores(), watch.others_busy)

        dataset, found, self.name, plan, workers = _scan_and_plan(
            self.src, options, self.storage_options, self.fetched, choose)  # fmt: skip
        self.groups, self.noted, stamped = found or (None, Noted(), {})
        CONTAINERS[options.format].check_naming(options.wds_naming, list(dataset.schema))
        splits = {spec.split for spec in plan.shards}
        beside = split_file_names(CONTAINERS[options.format], self.name, splits)
        record = plan_record(plan, replace(options, name=self.name))  # the name SRC gave
        specs = {spec.file: spec for spec in plan.shards}

        def unchanged(results: list[ShardResult]) -> list[bool]:
            return stamps.unchanged(results, specs, dataset.source, dataset.root)

        if options.index_files:
            refuse_index_file_folders(out, specs)
        reused, ours = prepare(out, plan, options.overwrite, options.resume, beside, record,
                               unchanged)  # fmt: skip
        if workers is None:  # (chosen before the --dedup pass, where it ran)
            workers = choose(plan_seconds(plan, options), len(plan.shards))
        if self.in_process:
            options = replace(options, backend="local")
        # a streamed list's items are ranges, not held: no contents.json nor stamps
        self.spool = None
        if streamed_rows(dataset) is None:
            plan, dataset = packed_plan(plan, dataset)  # from here the items are bytes
            self.spool = EntrySpool(plan)
        self.facts = FactSpill(plan, out, copies=self.groups is None)
        return Planned(dataset, plan, options, record, reused, workers, journal_first=not ours,
                       stamped=stamped)  # fmt: skip

    def landed(self, result: ShardResult) -> ShardResult:
        """A shard of this run landed: its contents entry and stamps, rendered and spooled, its
        facts folded and spilled; returns it without them."""
        if self.spool is not None:
            self.spool.add(result)
        return self.facts.add(result)

    def close(self) -> None:
        """The run ended: the URLs --dedup fetched are removed from the disk."""
        self.fetched.remove()

    def merge(self, planned: Planned, results: list[ShardResult]) -> PackResult:
        """The index of what the workers wrote, with what goes beside it; index.json last."""
        try:
            return self._merge(planned, results)
        finally:
            self.facts.close()
            if self.spool is not None:
                self.spool.close()

    def _merge(self, planned: Planned, results: list[ShardResult]) -> PackResult:
        out, dataset, plan, options = self.out, planned.dataset, planned.plan, planned.options
        # the shards that did not land here (an earlier run's, --resume) spooled and folded as
        # those that did (once each): no result holds its records' facts from here
        results = [self.landed(result) for result in results]
        num_records = sum(r.num_records for r in results)
        streamed = streamed_rows(dataset) is not None
        listed = failure_rows(plan, results) if streamed else rows_of(dataset)
        if num_records == 0:  # a dataset of nothing is no success, and leaves no dataset
            _leave_nothing(out, plan, dataset, results, self.src, listed)
        seconds = time.perf_counter() - self.start
        new_records = num_records - sum(r.num_records for r in planned.reused)
        to_write = len(plan.shards) - len(planned.reused)
        skipped = [*duplicates.with_splits(dataset.skipped, self.groups),
                   *((r.split, *s) for r in results for s in r.skipped)]  # fmt: skip
        urls = lists_urls(dataset, skipped) or (streamed and ranges_list_urls(plan, results))
        failures = url_failures(skipped, listed, urls)
        stats = PackStats(
            seconds=round(seconds, 3),
            images_per_second=round(new_records / seconds, 1) if seconds else None,
            # no more workers than shards this run wrote: one shard runs in-process
            workers=min(planned.workers, max(1, to_write)),
            lossless=sum(r.lossless for r in results),  # --encode keep's images made PNG
            url_failures=counts(failures) if failures else None,
        )
        index = build_index(
            out=out, name=self.name, dataset=dataset, options=options, plan=plan,
            results=results, stats=stats,
        )  # fmt: skip
        index, left_out = _without_unwritten(out, index, results)
        groups, self.groups = self.groups, None  # held here alone: freed once numbered
        removed = {} if groups is None else duplicates.removed(groups)
        summaries = json_value(self.facts.summaries(removed))
        if groups is None:
            groups = duplicates.found_in_shards(plan, self.facts.copy_sets())
        found = duplicates.summary(groups, sum(removed.values()), options)
        # by plan position where found in the shards (a number each), else a key each
        found_here = isinstance(groups, duplicates.PlanCopies)
        numbers = groups.numbers() if found_here else copy_numbers(groups)
        groups = None
        index = replace(
            index,
            duplicates=json_value(found),
            warnings=(*index.warnings, *duplicates.warnings(found)),
            summaries=summaries,
            image_size=self.facts.image_size(),  # the results hold no facts to tell it
        )
        if streamed:  # the ranges are read no more
            streamed_rows(dataset).release()
        with _kept_for_a_resume(out):
            write_outputs(out, index, results, options.index_files)
            if not streamed:  # a streamed list's keys are not held: it keeps no list to grow from
                self.spool.write_contents(out, numbers, self.noted, left_out)
            write_failures(out, failures)
            commit_index(out, index)  # the run is complete
        if not streamed:
            self.spool.write_stamps(out, index)
        notes = fewer_workers(self.options.workers, stats.workers, to_write, self.in_process)
        notes += tuple(filter(None, [proxy_ignored(row["reason"] for row in failures)]))
        notes += size_notes(out, index)
        return PackResult(
            out=out.root, index=index, num_records=num_records,
            num_skipped=index.num_skipped, seconds=seconds,
            num_reused=len(planned.reused), num_shards=len(plan.shards),
            new_records=new_records, notes=notes,
        )  # fmt: skip


@contextmanager
def _kept_for_a_resume(out: Storage) -> Iterator[None]:
    """Around the writes of the files beside a fresh pack's shards, then of index.json, which
    completes it: one that fails (a full disk) says, as a shard's failed write does, that a
    rerun with resume keeps the finished shards (the journal holds them)."""
    try:
        yield
    except OSError as e:
        where = os.fsdecode(e.filename) if e.filename is not None else out.path()
        raise OutputError.writing(where, e) from None


def default_name(dataset: Dataset, src: Storage) -> str:
    """The source's own name for it (cifar10), a manifest file's name without its extension
    (two tables in one folder are two datasets), else SRC's folder name (a URL's last segment);
    made safe for file names, and cut to MAX_NAME_CHARS."""
    named = dataset.source.default_name(dataset)
    if named is not None:
        return named[:MAX_NAME_CHARS]
    if src.kind() == "dir":
        base = os.path.basename(dataset.root.path())
    else:  # a manifest file
        base = os.path.splitext(os.path.basename(src.path()))[0]
    return safe_name(base)[:MAX_NAME_CHARS] or "dataset"


def _scan_and_plan(
    src_root: Storage,
    options: PackOptions,
    storage_options: dict | None,
    fetched: UrlSpool,
    choose: Callable[[float, int | None], int],
) -> tuple[Dataset, tuple[list, Noted] | None, str, Plan, int | None]:
    """List SRC, drop copies under --dedup, and plan the shards: the dataset, what the --dedup
    pass found (None: no pass; the copies are found in what the workers write): the copies,
    what contents.json notes of them (duplicates.dedup) and the stamps of the objects it read
    as listed before (Planned.stamped), the dataset's name, the plan, and the workers `choose`
    (work, shards) gave the pass (None: they are chosen from the plan). What the pass fetches,
    an image URL's body or an object's, is kept in `fetched`, whence the workers read it: each
    is fetched once, and what is packed is what was keyed."""
    dataset = scan(src_root, options, storage_options)
    if options.on_error == "fail" and dataset.skipped:  # the scan's own refusals
        key, reason = dataset.skipped[0]
        raise ImageError(key, reason, *way_past(reason))
    found = workers = None
    if options.dedup != "none":
        # the pass reads as the workers that write the shards, chosen now from the work it
        # reads (no less than they write): no host is asked harder by it than by them
        cost = dataset.source.record_cost
        workers = choose(sum(work_seconds(items, options, cost)
                             for items in dataset.splits.values()), None)  # fmt: skip
        items = (item for split in dataset.splits.values() for item in split)
        stamped = stamps.listed_before_read(dataset.source, dataset.root, items)
        dataset.root.keep_fetched(fetched, objects=True)
        dataset, *copies = duplicates.dedup(dataset, options, workers, stamped)
        fetched.seal()  # the workers fetch the rest unkept
        found = (*copies, stamped)
    name = options.name or default_name(dataset, src_root)
    if streamed_rows(dataset) is not None:
        return dataset, found, name, make_range_plan(dataset, name, options), workers
    if options.shuffle_window:
        raise OptionError(f"{src_root.path()}: ", Option("shuffle_window"), " streams a "
                          "folder or pattern of Parquet or JSONL lists with no label or "
                          "split column (and no ", Option("split"), " or ", Option("dedup"),
                          "); this SRC is read whole: drop ",
                          Option("shuffle_window"))  # fmt: skip
    plan = make_plan(dataset, name, options, options.workers or machine_cores())
    return dataset, found, name, plan, workers


def _leave_nothing(
    out: Storage, plan: Plan, dataset: Dataset, results: list, src: Storage,
    listed: RowsOf | None,
) -> NoReturn:  # fmt: skip
    """Remove the empty shards and the journal of a run that packed nothing, then say why,
    naming SRC as given (a manifest, not the folder its paths are read from) and the skip
    listed first (`listed`: where each URL is listed, url_failures's)."""
    out.remove(spec.file for spec in plan.shards)
    out.remove_journal()
    skipped = [*dataset.skipped, *(s for r in results for s in r.skipped)]
    reasons = {reason for _, reason in skipped}
    if len(reasons) == 1 and (only := reasons.pop()).endswith(f"; {STORE_REFUSED_FIX}"):
        raise SourceError(f"no image was packed from {src.path()}: the store refused each of its "
                          f"{len(skipped):,} items ({printable(only.partition('; ')[0])}); "
                          "check the credentials, and that they may read its objects")  # fmt: skip
    key, reason = first_listed(skipped, listed) if skipped else ("", "")
    first = f" (the first, {printable(key)}: {printable(reason)})" if skipped else ""
    proxy = proxy_ignored(reason for key, reason in skipped if is_web_url(key))
    raise SourceError(f"no image was packed from {src.path()}, {len(skipped):,} "
                      f"item{'s' if len(skipped) != 1 else ''} skipped{first}; fix or remove "
                      f"them{f'; {proxy}' if proxy else ''}")  # fmt: skip


def _without_unwritten(
    out: Storage, index: Index, results: list[ShardResult]
) -> tuple[Index, list[ShardResult]]:
    """The index without the splits none of whose images was written (index.UNWRITTEN, as a
    grow leaves them out), their empty shards removed from OUT; and those shards' results."""
    gone = {s.file for split in index.splits.values() if not split.num_records
            for s in split.shards}  # fmt: skip
    if not gone:
        return index, []
    out.remove(sorted(gone))
    kept = {name: split for name, split in index.splits.items() if split.num_records}
    return replace(index, splits=kept), [r for r in results if r.file in gone]
