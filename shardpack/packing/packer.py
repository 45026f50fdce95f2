"""The one pipeline of pack, --append and --update: lock, scan and plan, write, merge, commit.

A fresh pack (fresh.FreshPack) and a grow (grow.GrowPack) differ in their plan and merge steps
only; the sequence, the lock, the sources' once-a-run context and the write step are one.
"""

from __future__ import annotations

import os
from contextlib import closing
from typing import Protocol

from shardpack.errors import OutputError, SourceError, check_progress
from shardpack.options import PackOptions, refuse_idle
from shardpack.packing.boxes import refuse_boxless, refuse_unmoved
from shardpack.packing.collector import no_gc
from shardpack.packing.fresh import FreshPack
from shardpack.packing.plan import ShardResult
from shardpack.packing.result import PackResult
from shardpack.packing.writing import Planned, ProgressCallback, write_shards
from shardpack.sources import keeping, source_root
from shardpack.sources.scanprogress import ScanCallback, reporting
from shardpack.storage import Storage, storage_at
from shardpack.storage.locations import shell_slip


class Steps(Protocol):
    """What a fresh pack and a grow each supply to the pipeline."""

    def open(self) -> bool:
        """Before the lock: refuse what can be refused untouched; whether OUT was made."""

    def plan(self) -> Planned | PackResult:
        """Under the lock: scan SRC and plan the shards; a PackResult when none is to be
        written (a grow with nothing new)."""

    def landed(self, result: ShardResult) -> ShardResult:
        """A shard of this run landed (journaled): note what the merge needs of it, and return
        what of it the pipeline keeps until the merge."""

    def merge(self, planned: Planned, results: list[ShardResult]) -> PackResult:
        """Merge the shards written into the index and commit it (index.json last)."""

    def close(self) -> None:
        """The run ended, however it ended (done, failed, stopped): remove what was kept for
        it alone (the URLs --dedup fetched, kept for the workers)."""


def pack(
    src: str | os.PathLike,
    out: str | os.PathLike,
    options: PackOptions | None = None,
    progress: ProgressCallback | None = None,
    storage_options: dict | None = None,
    scan_progress: ScanCallback | None = None,
) -> PackResult:
    """Pack SRC into shards (options.format: TFRecord, ArrayRecord, WebDataset or Parquet) and an
    index.json in OUT.

    Args:
        src: a folder, file or URL that a registered source recognises (shardpack.sources:
            class or split folders, a manifest table, ...).
        out: the output folder; created if missing.
        options: how to pack; defaults to PackOptions().
        progress: called with (items done, items total) as the workers start (a resume's kept
            shards done), then about five times a second.
        storage_options: options for the filesystem of a URL SRC or OUT (s3fs, gcsfs, ...).
        scan_progress: called while SRC is listed with the count of files (or manifest rows)
            listed so far, every few thousand.

    Returns:
        The index document and headline figures.

    Raises:
        ShardpackError: bad SRC or OUT, the format's package missing, or (with
            on_error="fail") a bad image; in every case
            no index.json is written and no partial shard is left under a final name.

    On glibc, a run whose one worker is the calling process keeps glibc's malloc set to reuse
    freed memory afterwards (see packing.writing: up to 64 MiB held for reuse); a run that
    forks workers leaves it set to glibc's first thresholds, which give freed memory back.
    """
    _check_arguments(options, progress, storage_options, scan_progress)
    refuse_shell_slips(src, "SRC")
    refuse_shell_slips(out, "OUT")
    options = options or PackOptions()
    if options.grow == "none":  # a grow takes the dataset's own, which an older pack kept
        refuse_idle(options)
    src_root = source_root(src, storage_options)  # refused before OUT is created if missing
    out = storage_at(out, storage_options)
    refuse_out_inside_src(src_root, out)
    steps: Steps
    if options.grow != "none":  # --append, --update: into the dataset OUT holds
        from shardpack.packing.grow import GrowPack  # here: a fresh pack never reads it

        steps = GrowPack(src_root, out, options, storage_options)
    else:
        steps = FreshPack(src_root, out, options, storage_options)
    created = steps.open()
    with out.lock(created), keeping(), closing(steps):  # what sources load once a run
        out.clear_scratch()  # dead runs' spools (never a live run's: urlspool)
        # the listing and the plan: millions of objects and no cycles, the Items freed (packed)
        # before the collector is back
        with no_gc(), reporting(scan_progress):
            planned = steps.plan()
        if isinstance(planned, PackResult):
            return planned
        refuse_unmoved(planned.dataset.schema, planned.options)
        if options.grow == "none":  # a grow takes the dataset's own, which an older pack kept
            refuse_boxless(planned.dataset.schema, planned.options, src_root.path())
        results = write_shards(planned, out, progress, steps.landed)
        return steps.merge(planned, results)


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
    check_progress(progress)
    if storage_options is not None and not isinstance(storage_options, dict):
        raise TypeError(f"storage_options must be a dict of filesystem options; got: "
                        f"{storage_options!r}")  # fmt: skip


def refuse_shell_slips(given: str | os.PathLike, name: str) -> None:
    """What a shell left as it was (locations.shell_slip) as SRC or OUT (`name`), refused before
    anything is touched: an empty one would get the shards among whatever the current folder
    holds."""
    why = shell_slip(given, name, "a folder or URL, or '.' for the current folder")
    if why is not None:
        raise (SourceError if name == "SRC" else OutputError)(why)


def refuse_out_inside_src(src: Storage, out: Storage) -> None:
    """OUT inside SRC would be scanned as data by the next run: refuse it (local disks: real
    paths compared; object stores: the URLs' prefixes). So is OUT above a SRC folder
    (`pack flowers .`): the pack's files would land beside the dataset's folder, among the
    user's own, and a pack of that folder would take them for data."""
    if out.holds(src) and not src.holds(out) and src.kind() == "dir":
        own = f"{src.root.rstrip('/')}-shards"
        raise OutputError(f"{out.root}: holds SRC {src.path()}, so the shards, index.json and "
                          "README.md would land beside your dataset's folder; choose an output "
                          f"folder of their own, such as {own}")  # fmt: skip
    if not src.holds(out):
        return
    where = "is SRC itself" if out.holds(src) else f"is inside SRC {src.path()}"
    raise OutputError(f"{out.root}: {where}, where it would be scanned as data; choose an output "
                      "folder outside SRC")  # fmt: skip
