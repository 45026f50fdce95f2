"""`pack --append` and `pack --update`: a packed dataset grows and changes as its source does.

New items go into new shards of a new generation; a shard already in OUT is never rewritten in
place. Shard names keep the count the split was first packed with (`...-00004-of-00004` is the
fifth shard of a split first packed into four): no name depends on the shard count of the
moment, so nothing is renamed as a split grows, and TFDS reads the split through one template
whose count is that fixed text. `--update` writes the shards that held a changed or vanished
item anew under new names and removes the old files only after the new index.json landed,
then closes the gaps that leaves in the numbering (gaps.py). Class numbers never change
meaning: a class SRC adds, of `label` or of an object feature (objects/label), goes at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import chain, count, repeat

from shardpack.containers import CONTAINERS, is_shard_name
from shardpack.errors import (
    RESTORE_SHARD,
    IndexFormatError,
    Option,
    OutputError,
    RecordError,
    ShardpackError,
    earlier,
    is_count,
    os_error_fix,
    plural,
    printable,
    python_value,
    shortened,
)
from shardpack.index import Index, Run, ShardInfo, SplitInfo, load_index
from shardpack.layout import (
    CONTENTS_NAME,
    INDEX_FILES_DIR,
    INDEX_NAME,
    index_file_name,
)
from shardpack.options import SPLIT_NAMES, PackOptions
from shardpack.packing import boxes, duplicates, gaps, stamps
from shardpack.packing.contents import (
    Contents,
    Dropped,
    Entry,
    Noted,
    Skip,
    entries,
    load_contents,
    meta,
    with_copies,
    write_contents,
)
from shardpack.packing.cpuload import CpuWatch, machine_cores
from shardpack.packing.duplicates import content_keys
from shardpack.packing.facts import facts_of
from shardpack.packing.hubcard import size_notes
from shardpack.packing.kept import Kept, kept_records
from shardpack.packing.merge import (
    commit_index,
    json_value,
    named_skipped,
    restore_outputs,
    shard_info,
    uniform_size,
    write_outputs,
)
from shardpack.packing.outdir import (
    OUTPUTS,
    OutState,
    check_kept,
    plan_record,
    prepare_growth,
    read_state,
    refuse_folders,
    split_file_names,
)
from shardpack.packing.plan import (
    Plan,
    ShardResult,
    ShardSpec,
    choose_workers,
    fewer_workers,
    make_plan,
    plan_seconds,
)
from shardpack.packing.result import PackResult
from shardpack.packing.stats import entry_summaries
from shardpack.packing.urlfailures import (
    counts,
    lists_urls,
    retried,
    rows_of,
    url_failures,
    write_failures,
)
from shardpack.packing.writing import Planned
from shardpack.schema import LABEL, Schema
from shardpack.sources import Dataset, Item, scan, source_of
from shardpack.storage import Storage
from shardpack.storage.urlpolicy import is_web_url
from shardpack.storage.urlspool import UrlSpool

# index.json's `history` keeps the last this many runs.
MAX_HISTORY = 100
# Options a grow takes from the run, not the dataset: they decide no byte of the old shards.
_RUN_OPTIONS = frozenset({"shards", "classes"})
# Options whose JSON form is a list where PackOptions holds a tuple.
_TUPLES = ("resize", "pad_color", "split_names", "box_columns", "columns")
# Options added since indexes kept their options, with what an index without them was packed
# with: such an index grows as it was packed.
_ADDED = {"box_columns": None, "wds_naming": "shardpack", "min_visibility": 0.0,
          "label_column": None, "path_suffix": None, "columns": None}  # fmt: skip

# Kept shards whose first records a grow reads at once (_first_records): 4,000 shards in a
# store 20 ms away are 5 s, not the 40 s of one request a core on 2 cores.
_HEADS_AT_ONCE = 16
# The way out of an OUT a grow cannot take, as a message's parts.
_REPACK = ("repack with ", Option("overwrite", True))


@dataclass(frozen=True)
class Change:
    """What SRC holds that OUT does not, and the other way round."""

    new: dict[str, list[Item]]  # per split
    changed: dict[str, list[Item]]  # items whose bytes, label or fields differ, per split
    vanished: int  # packed items SRC no longer has (or, --update, copies it drops)
    touched: frozenset[str]  # shards holding a changed or vanished item
    # the content keys of the held items read (the others taken as unchanged unread: kept.py)
    read: dict[str, duplicates.ContentKey]
    held: dict[str, tuple[str, int, int, int | None]]  # key -> (shard, position, size, meta)
    left: dict[str, Dropped]  # key -> the copy --dedup left out, its URL's row unchanged
    near: dict[str, int]  # key -> the perceptual hash noted (contents.Noted)
    reread: frozenset[str] = frozenset()  # skipped when packed, their files changed: new again
    # key -> the stamp of each held item read, as listed before its read (stamps.with_listed)
    listed: dict[str, stamps.Stamp] = field(default_factory=dict)
    # --append: items SRC lists under a new key that are held records it no longer lists (their
    # bytes, label and fields): a file renamed or moved, a Hub dataset's rows as it re-shards
    moved: int = 0

    def summary(self, mode: str, rewritten: int) -> dict[str, object]:
        """The run's counts, as the history and the summary give them: --append changes and
        removes nothing (what it leaves as packed is a note of its own, _said)."""
        added = sum(map(len, self.new.values()))
        changed = sum(map(len, self.changed.values())) if mode == "update" else 0
        return {"mode": mode, "added": added, "changed": changed,
                "removed": self.vanished if mode == "update" else 0,
                "shards_rewritten": rewritten}  # fmt: skip


@dataclass(frozen=True)
class Copies:
    """The copies among what the grown dataset holds and is given, as a fresh pack finds them."""

    groups: list[duplicates.Group]  # each its kept copy first
    dropped: dict[tuple[str, str], str]  # (split, key) -> reason: the copies --dedup leaves out
    yielded: int = 0  # new items --append skipped where a fresh pack keeps them: a held copy
    crowded: int = 0  # images --dedup near found in crowded buckets (duplicates.find_groups)
    noted: Noted = field(default_factory=Noted)  # what contents.json notes, for the next grow

    def summary(self, options: PackOptions) -> dict:
        """index.json's `duplicates`."""
        return duplicates.summary(self.groups, len(self.dropped), options)

    def per_split(self) -> dict[str, int]:
        """The copies left out of each split."""
        return dict(Counter(split for split, _ in self.dropped))


class GrowPack:
    """pack() with options.grow "append" or "update": the plan and merge steps (packer.pack
    runs them) of a dataset in OUT that grows with SRC."""

    def __init__(
        self, src: Storage, out: Storage, given: PackOptions, storage_options: dict | None
    ) -> None:
        self.src, self.out, self.given, self.storage_options = src, out, given, storage_options
        self.start = time.perf_counter()
        self.fetched = UrlSpool(out.scratch_folder())  # what --dedup fetched, for the workers

    def close(self) -> None:
        """The run ended: the URLs --dedup fetched are removed from the disk."""
        self.fetched.remove()

    def open(self) -> bool:
        """A grow needs the dataset it grows: OUT is there (before the lock, made in it)."""
        if self.out.kind() is None:
            raise OutputError(f"{self.out.root}: no such folder, no dataset to grow; pack it "
                              "without ", Option("grow"), " first")  # fmt: skip
        return False

    def plan(self) -> Planned | PackResult:
        """What SRC holds that OUT does not (and, --update, the other way round), its copies and
        skips told as a fresh pack would; the new shards' plan, or the result of a grow that
        has none to write."""
        watch = CpuWatch()  # the scan and plan are the window that measures others' load
        out = self.out
        old = self.old = _old_index(out)
        _refuse_streamed(out, old)
        _remove_retired(out, old)
        self.listed, state = _checked_names(out, old)
        options = dataset_options(old, self.given)
        CONTAINERS[options.format].require()
        # the compare and the --dedup pass read on this many threads (the workers that write
        # the shards are chosen once they are planned: _writers)
        self.in_process = out.in_process or self.src.in_process  # memory:// is ours alone
        self.workers = 1 if self.in_process else self.given.workers or machine_cores()
        dataset, change = self._compare(options)
        options = replace(options, classes=dataset.classes or None)
        update = options.grow == "update"
        touched = self.touched = change.touched if update else frozenset()
        todo = {s: [*change.new.get(s, ()), *(change.changed.get(s, ()) if update else ())]
                for s in dataset.splits}  # fmt: skip
        if update:
            _add_survivors(todo, dataset, self.contents, touched, change)
        self.loose = _loose(dataset, old, self.held, touched)
        if not any(todo.values()) and not touched:  # (gaps a stop left are closed still)
            return self._nothing_to_write(dataset, change, options)
        self.generation = old.generation + 1
        changed = frozenset(item.key for items in change.changed.values() for item in items)
        kept = kept_records(chain.from_iterable(todo.values()), change.held, self.contents,
                            changed, bool(boxes.packed_moved(dataset.schema, options)),
                            change.read, self.known, dataset.root)  # fmt: skip
        plan = grow_plan(dataset, todo, old, options, self.generation, touched, self.listed, kept)
        if state.journal_digest != plan.digest:  # (a stopped run of this plan wrote its own)
            _refuse_strays(out, (spec.file for spec in plan.shards), _unlisted(state, self.listed))
        record = {**plan_record(plan, options), "grow": options.grow,
                  "generation": self.generation}  # fmt: skip
        reused = prepare_growth(out, plan, set(self.listed))
        workers = self._writers(plan, options, reused, watch)
        # the journal the dataset had is put back by a stop before a new shard lands: a plain
        # rerun of its pack keeps its unchanged shards by it, as before the grow
        return Planned(dataset, plan, options, record, reused, workers, journal_first=True,
                       stamped=self.stamped, found=state.journal)  # fmt: skip

    def _writers(
        self, plan: Plan, options: PackOptions, reused: list[ShardResult], watch: CpuWatch
    ) -> int:
        """The workers that write the plan's shards not `reused`: --workers if given, else the
        count the cost model picks for them as a fresh pack's (never more than the shards)."""
        if self.in_process:
            return 1
        done = {r.file for r in reused}
        todo = replace(plan, shards=tuple(s for s in plan.shards if s.file not in done))
        return choose_workers(plan_seconds(todo, options), len(todo.shards), options,
                              machine_cores(), watch.others_busy)  # fmt: skip

    def _compare(self, options: PackOptions) -> tuple[Dataset, Change]:
        """SRC scanned and compared with what OUT holds, its copies against the held ones."""
        out, old = self.out, self.old
        self.held, (self.loaded, self.skips) = load_contents(out, old), stamps.load(out, old)
        _first_records(out, old, self.held.shards)
        self.again: frozenset[str] = frozenset()  # failed URLs asked again: new to the compare
        if options.grow == "update":
            self.held, self.again = retried(self.held)
        self.contents, self.known = self.held.shards, dict(self.loaded)
        dataset = _scan(self.src, options, old, self.storage_options)
        # what the compare and --dedup read before the workers (an object, an image URL) is
        # kept for them: they pack the bytes keyed, an object's with the stamp listed before
        dataset.root.keep_fetched(self.fetched, objects=True)
        options = replace(options, classes=dataset.classes or None)
        if options.split is not None:  # a held item keeps its split; new ones are cut
            dataset = _keep_splits(dataset, old, self.held)
        # a skipped item gone from SRC goes from what OUT tells (no shard is rewritten for it)
        gone = _gone(frozenset(key for key, _ in self.held.skips()), dataset)
        self.held = self.held.without_skips(gone)
        self.contents = self.held.shards
        change = _compare(dataset, self.held, self.known, self.skips, options, self.workers)
        change = _moved(dataset, change, self.contents, options, self.workers)
        self.stamped = dict(change.listed)  # what a worker notes of an item read before it
        # a skip read again is noted again by the shard that reads it (or none)
        self.held = self.held.without_skips(change.reread)
        self.contents = self.held.shards
        self.copies = None  # SRC as packed: the copies, skips and statistics told stand
        # no --dedup: the copies among new items are found in merge, by their workers' keys
        # (not each new item read here, then again by its worker: a URL fetched twice)
        self.later = options.dedup == "none" and any(change.new.values())
        if not self.later and (change.new or change.changed or change.vanished or change.left or
                               dataset.skipped or gone or _dropped_copies(old)):  # fmt: skip
            update = options.grow == "update"
            new = (item for items in change.new.values() for item in items)  # read by --dedup
            self.stamped.update(stamps.listed_before_read(dataset.source, dataset.root, new))
            self.copies = _copies(dataset, self.contents, change, options, update, self.workers,
                                  listed=self.stamped, splits=_shard_splits(old))  # fmt: skip
            dataset, change = _without(dataset, change, self.copies, self.contents, update)
            change = _kept_now(dataset, change, self.copies)
        self.fetched.seal()  # the workers fetch the rest unkept
        self.change = change
        return dataset, change

    def _noted(self, copies: Copies | None) -> Noted:
        """What contents.json notes of the copies: as found now, else as held."""
        return self.held.noted if copies is None else copies.noted

    def _nothing_to_write(
        self, dataset: Dataset, change: Change, options: PackOptions
    ) -> PackResult:
        """A grow with no shard to write: what it read again, and new copies or skips, told."""
        out, contents, loose = self.out, self.contents, self.loose
        old = _with_classes(self.old, dataset)
        classed = old is not self.old  # new classes of no record: as a fresh pack's
        if self.known != self.loaded:  # files read again, their bytes unchanged: read no more
            stamps.save(out, old, stamps.mtimes_to_save(contents.values(), self.known),
                        stamps.skips_to_save(contents.values(), loose, self.skips))  # fmt: skip
        copies = self.copies
        warned = duplicates.rewarned(old.warnings, old.duplicates or {}, dataset.warnings)
        rescanned = warned != old.warnings or any(
            v != getattr(old, k) for k, v in _listed(dataset).items())  # fmt: skip
        # a skipped item gone from SRC, or what the scan says of SRC's other files changed
        if copies is None and (loose != self.held.loose or rescanned or classed):
            update = options.grow == "update"
            copies = _copies(dataset, contents, change, options, update, self.workers,
                             splits=_shard_splits(old))  # fmt: skip
        told = copies and _told(old, dataset, contents, loose, copies, options)
        retold = bool(told) and (told != {k: getattr(old, k) for k in told} or
                                 loose != self.held.loose or classed)  # fmt: skip
        noted = self._noted(copies)
        if retold:  # new copies or skips to report
            _retell(out, old, told, contents, loose, copies, noted, dataset)
            old = load_index(out)
        elif noted != self.held.noted:  # an older pack's copies noted: read no more
            write_contents(out, with_copies(contents, copies.groups, frozenset()), loose, noted)
        old = close_gaps(out, old, contents, loose, noted)
        restored = restore_outputs(out, old)  # a card or croissant.json removed by hand
        return _nothing(out.root, old, change, copies, options.grow, self.start, retold, restored)

    def landed(self, result: ShardResult) -> ShardResult:
        """A new shard landed: nothing to note yet (the merge joins the new shards' entries
        with the held ones'), so it is kept whole."""
        return result

    def merge(self, planned: Planned, results: list[ShardResult]) -> PackResult:
        """The grown index: the new shards added, the rewritten ones retired, copies, skips and
        statistics recounted; index.json, then the gaps closed."""
        out, old, dataset, options = self.out, self.old, planned.dataset, planned.options
        contents, touched, change, copies = self.contents, self.touched, self.change, self.copies
        fresh = entries(planned.plan, results)
        # the skips' stamps: the held ones but of those read again, and those the workers noted
        skips = {key: stamp for key, stamp in self.skips.items() if key not in change.reread}
        skips.update(stamps.skipped(planned.plan, results))
        plan, results, loose = _without_empty(out, planned.plan, results, fresh, self.loose)
        fresh = {spec.file: fresh[spec.file] for spec in plan.shards}
        if self.later:
            copies = _copies(dataset, contents, change, options, options.grow == "update",
                             self.workers, written_keys(plan, results),
                             splits=_shard_splits(old))  # fmt: skip
        summary = change.summary(options.grow, len(touched))
        mended = _packed_again(self.again, fresh)
        summary["added"] -= len(self.again) - mended  # failing again: listed already, not added
        # (those read again still new: none --dedup leaves out)
        reread = frozenset(item.key for items in change.new.values() for item in items
                           if item.key in change.reread)  # fmt: skip
        fixed = _packed_again(reread, fresh)
        summary["added"] -= len(reread) - fixed  # skipped again: listed already, not added
        seconds = time.perf_counter() - self.start
        reused = planned.reused
        written = sum(r.num_records for r in results) - sum(r.num_records for r in reused)
        to_write = len(planned.plan.shards) - len(reused)
        ran = min(planned.workers, max(1, to_write))  # one shard runs in-process (writing._run)
        stats = {"seconds": round(seconds, 3), "workers": ran,
                 "images_per_second": round(written / seconds, 1) if seconds else None}  # fmt: skip
        index, kept = _grown(old, dataset, plan, results, fresh, contents, touched)
        numbered = with_copies({**contents, **fresh}, copies.groups, touched)
        now = {file: numbered[file] for file in {**kept, **fresh}}  # the new index's shards
        told = _told(index, dataset, {**kept, **fresh}, loose, copies, options)
        run = Run(generation=self.generation, when=_now(), **summary)
        failures = _failures(index.splits, now, loose, dataset, copies)
        stats = replace(old.stats, **stats, url_failures=counts(failures) if failures else None,
                        lossless=_lossless(now.values()))  # fmt: skip
        index = replace(index, **told, history=(*old.history, run)[-MAX_HISTORY:], stats=stats,
                        options=_with_split_names(old.options, options))  # fmt: skip
        moved = gaps.gap_moves(index)  # the gaps the update leaves
        # what a stop leaves there
        index = replace(index, retired=tuple(sorted({*index.retired, *moved.values()})))
        noted = copies.noted
        with _finished_by_a_rerun():
            write_outputs(out, index, results, options.index_files, tfds=not moved)
            write_contents(out, numbered, loose, noted)  # agrees with the old index and the new
            commit_index(out, index)  # the grown dataset is there from now on
        write_failures(out, failures)  # after: a stop before leaves the old, a superset
        if touched:  # the next grow removes what a stop here leaves (index.retired)
            write_contents(out, now, loose, noted)
            _remove_retired(out, index)
        self.known.update(stamps.written(plan, results))  # the planned items' own, or none
        stamps.save(out, index, stamps.mtimes_to_save(now.values(), self.known),
                    stamps.skips_to_save(now.values(), loose, skips))  # fmt: skip
        index = close_gaps(out, index, now, loose, noted)
        return PackResult(
            out=out.root, index=index,
            num_records=sum(s.num_records for s in index.splits.values()),
            num_skipped=index.num_skipped, seconds=time.perf_counter() - self.start,
            num_reused=len(reused), num_shards=sum(len(s.shards) for s in index.splits.values()),
            new_records=written, notes=(*_said(change, options.grow, copies),
                                        *_asked_again(self.again, mended),
                                        *_read_again(len(reread), fixed),
                                        *fewer_workers(self.given.workers, ran, to_write,
                                                       self.in_process),
                                        *size_notes(out, index)),
            grow=summary,
        )  # fmt: skip


def _with_classes(old: Index, dataset: Dataset) -> Index:
    """`old` with the classes SRC adds at the end (a grow with no shard to write finds them
    only as empty class folders, or object classes no object has yet: a category or a name
    in data.yaml), each split counting none of them; `old` itself if none."""
    classes = dataset.classes
    if classes == old.classes and dataset.schema == old.schema:
        return old
    splits = {name: replace(split, class_counts=(*split.class_counts,
                                                 *[0] * (len(classes) - len(split.class_counts))))
              for name, split in old.splits.items()}  # fmt: skip
    return replace(old, schema=dataset.schema, splits=splits)


def _lossless(shards: Iterable[Entry]) -> int | None:
    """The images --encode keep made PNG in these shards (None: a shard from before they were
    noted in contents.json)."""
    noted = [entry.get("lossless") for entry in shards]
    return None if None in noted else sum(n for (n,) in noted)


def close_gaps(
    out: Storage, index: Index, contents: dict[str, Entry], loose: tuple[Skip, ...],
    noted: Noted = Noted(),
) -> Index:  # fmt: skip
    """Close the gaps in the numbering of `index`, which is in place (gaps.py), with the DALI
    index files of the shards moved; `contents`: the entries of its shards, `loose`: its skips
    with no shard, `noted`: what it notes of --dedup's copies (contents.py). Returns the index
    in place after."""
    moved = gaps.gap_moves(index)
    if not moved:
        return index
    listed = {s.file for split in index.splits.values() for s in split.shards}
    _refuse_strays(out, moved.values(), _unlisted(read_state(out), listed))
    idx = out.child(INDEX_FILES_DIR)
    held = {e.name for e in idx.listdir()} if out.kind(INDEX_FILES_DIR) == "dir" else set()
    for name, to in moved.items():
        out.link_or_copy(name, to)
        if f"{name}.idx" in held:
            idx.link_or_copy(f"{name}.idx", f"{to}.idx")
    closed = gaps.close_gaps(index, moved)
    renamed = {moved.get(file, file): entry for file, entry in contents.items()}
    with _finished_by_a_rerun():
        write_contents(out, {**contents, **renamed}, loose, noted)  # agrees with both indexes
        write_outputs(out, closed, [], False)  # TFDS metadata now
        commit_index(out, closed)
    write_contents(out, {s.file: renamed[s.file] for split in closed.splits.values()
                         for s in split.shards}, loose, noted)  # fmt: skip
    _remove_retired(out, closed)
    return closed


@contextmanager
def _finished_by_a_rerun() -> Iterator[None]:
    """Around the writes of the files beside a grow's shards, then of index.json, which commits
    it: one that fails (a full disk) says that the same command finishes the grow, index.json
    being the old dataset's until then (the files before it already tell the grown one)."""
    try:
        yield
    except OSError as e:
        where = f"{os.fsdecode(e.filename)}: " if e.filename is not None else ""
        raise OutputError(f"{where}{e.strerror or e}; {os_error_fix(e)}, then run the same "
                          "command again to finish the grow (until then index.json holds the "
                          "dataset as it was)") from None  # fmt: skip


def _remove_retired(out: Storage, index: Index) -> None:
    """Remove the shards (and their index files) an --update replaced, once its index is in
    place; only names that are shards and that the index does not list."""
    listed = {s.file for split in index.splits.values() for s in split.shards}
    files = {f for f in index.retired or () if is_shard_name(f)} - listed
    out.remove(sorted(files))
    if files and INDEX_FILES_DIR in {e.name for e in out.listdir() if e.is_dir}:
        out.child(INDEX_FILES_DIR).remove(f"{f}.idx" for f in sorted(files))


def _old_index(out: Storage) -> Index:
    """OUT's index, or an error saying a grow needs a packed dataset there (load_index
    refuses one that lists a shard twice, which no pack writes: its gaps could not be
    closed)."""
    try:
        return load_index(out)
    except IndexFormatError as e:
        raise OutputError(f"{out.root}: no dataset to grow here (", *e.args, "); pack it "
                          "without ", Option("grow"), " first") from None  # fmt: skip


def _checked_names(out: Storage, old: Index) -> tuple[frozenset[str], OutState]:
    """The shard names `old` lists and what OUT holds, once the index is found to agree with
    OUT.

    Raises:
        OutputError: the index contradicts OUT: it lists a shard that is not there or of
            another size (a grow reads only their first records, and would carry the fault
            on), or holds a shard count that no pack writes; or a folder, or a README.md of
            the user's, is where the grow writes a file.
    """
    where = out.path(INDEX_NAME)
    state = read_state(out)
    refuse_folders(out, state, OUTPUTS | split_file_names(old.container, old.name, old.splits))
    check_kept(out, state)
    listed = frozenset(s.file for split in old.splits.values() for s in split.shards)
    missing = sorted(listed - state.names)
    if missing:
        raise OutputError(f"{where}: lists {printable(missing[0])}, which is not in OUT "
                          f"({len(missing):,} listed shards missing); put it back, or ",
                          *_REPACK)  # fmt: skip
    for shard in old.shards:  # a listing's 0: a link or another special file, no size to ask
        if state.sizes.get(shard.file, 0) not in (0, shard.num_bytes):
            raise OutputError(f"{out.path(shard.file)}: holds {state.sizes[shard.file]:,} bytes "
                              f"where {INDEX_NAME} says {shard.num_bytes:,}; restore it "
                              "(`shardpack verify` tells what is wrong), or ",
                              *_REPACK)  # fmt: skip
    return listed, state


def _first_records(out: Storage, old: Index, contents: Mapping[str, Entry]) -> None:
    """Refuse a listed shard whose first record is not the one contents.json lists first.

    A grow keeps its shards unread on contents.json's word, and their sizes alone let in a
    shard of another pack of the same size (ArrayRecord's 64 KiB blocks, a tar's 10 KiB
    records): its items would be taken as packed, and the lie carried on into the grown index.
    The first record costs a read of each shard's head, _HEADS_AT_ONCE at a time (in a store
    each is a request's latency, not CPU); every record and sha256 is `shardpack verify`'s.

    Raises:
        OutputError: a shard whose head is damaged, holds no record, or another key.
    """
    shards = [s for s in old.shards if contents[s.file]["keys"]]

    def first(shard: ShardInfo) -> object:
        try:
            example = old.container.first_record(out, shard.file, old.compression,
                                                 shard.num_bytes)  # fmt: skip
        except RecordError as e:  # its mend, said as a grow's
            said = str(e).replace(f"; {RESTORE_SHARD}", "")
            raise OutputError(f"{said}; restore it from a copy, or ", *_REPACK) from None
        return None if example is None else example.get("key", [None])[0]

    with ThreadPoolExecutor(max(1, min(_HEADS_AT_ONCE, len(shards)))) as pool:
        for shard, key in zip(shards, pool.map(first, shards), strict=True):
            listed = contents[shard.file]["keys"][0]
            if key != listed.encode("utf-8", "surrogateescape"):
                held = "no record" if key is None else f"'{printable(_text(key))}' first"
                raise OutputError(f"{out.path(shard.file)}: holds {held}, where {CONTENTS_NAME} "
                                  f"lists '{printable(listed)}': not the shard {INDEX_NAME} lists "
                                  "(another pack's, or moved from another name); restore it "
                                  "(`shardpack verify` tells what is wrong), or ",
                                  *_REPACK)  # fmt: skip


def _text(key: object) -> str:
    """A record's key as text (its bytes as a file name's: undecodable ones kept)."""
    return key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else str(key)


def _refuse_strays(out: Storage, names: Iterable[str], held: frozenset[str]) -> None:
    """Refuse to write any of `names` that OUT holds (`held`) unasked: a file no index lists
    and no stopped run of this plan wrote."""
    strays = sorted(set(names) & held)
    if strays:
        raise OutputError(f"{out.path(strays[0])}: is there, but no index lists it, and the "
                          "grow would write that name; move it away (then grow again), or ",
                          *_REPACK)  # fmt: skip


def _unlisted(state: OutState, listed: Iterable[str]) -> frozenset[str]:
    """The shard names OUT holds that `listed` lacks (a stopped run's journaled shards are
    its rerun's own: prepare_growth keeps or removes them)."""
    ours = {r.file for r in state.finished}
    return frozenset(n for n in state.names if is_shard_name(n)) - set(listed) - ours


def _has_index_files(old: Index) -> bool:
    """Whether the dataset's shards have DALI index files (its first shard has): a grow writes
    them for its new shards too, asked or not."""
    first = next((s.file for split in old.splits.values() for s in split.shards), None)
    return first is not None and old.storage.kind(index_file_name(first)) == "file"


def dataset_options(old: Index, given: PackOptions) -> PackOptions:
    """The dataset's options (index.json's `options`) for this run; an option given that
    differs from the dataset's is refused, naming it. `--classes` must extend its class list.

    Raises:
        OutputError: an option differs, or the index keeps no options (an older shardpack).
    """
    kept = old.options
    if isinstance(kept, dict):
        kept = {**_ADDED, **kept}
    # (--near-distance and --shuffle-window are kept where used: a grow given neither takes
    # the dataset's)
    ours = json_value(given.output_fields(every=True))
    if not isinstance(kept, dict) or not set(PackOptions().output_fields()) <= set(kept) <= set(
        ours
    ):
        raise OutputError(
            f"{old.storage.path(INDEX_NAME)}: keeps no options to grow the "
            "dataset with (an older shardpack's); ",
            *_REPACK,
        )
    _refuse_untrusted(old, given, kept)
    defaults = json_value(PackOptions().output_fields(every=True))
    kept = {**kept, "name": old.name}  # None in it: the name SRC gave
    ours["name"] = given.name or old.name
    differ = [k for k in ours if k not in (*_RUN_OPTIONS, "split_names")
              and ours[k] not in (defaults[k], kept.get(k, ours[k]))]  # fmt: skip
    if differ:
        said: list[str | Option] = []
        for k in differ:
            said += [Option(k, python_value(ours[k])), " (the dataset's: ", earlier(k, kept[k]),
                     "); "]  # fmt: skip
        raise OutputError(f"{old.out}: the dataset was packed with other options: ", *said,
                          "drop them: ", Option("grow", given.grow), " takes the dataset's "
                          "own")  # fmt: skip
    classes = given.classes
    if classes is not None and tuple(classes[: len(old.classes)]) != old.classes:
        gone = [c for c in old.classes if c not in classes]
        what = (f"it lacks {_shown(gone[:5])}" if gone else "it orders the dataset's classes "
                "otherwise")  # fmt: skip
        raise OutputError(f"{old.out}: ", Option("classes"), " must begin with the dataset's "
                          f"{len(old.classes)} classes in their order, then add new ones at "
                          f"the end; {what}")  # fmt: skip
    taken = {k: kept[k] for k in kept if k not in _RUN_OPTIONS}
    taken["split_names"] = _grown_split_names(old, given, kept["split_names"])
    try:  # read as untrusted: PackOptions checks each value's type and range
        taken.update({k: tuple(taken[k]) for k in _TUPLES if taken[k] is not None})
        if taken["split"] is not None:
            taken["split"] = tuple(map(tuple, taken["split"]))
        taken["name"] = old.name
        taken["seed"] = kept["seed"] if kept["seed"] is not None else 0
        return replace(given, **taken, index_files=given.index_files or _has_index_files(old))
    except (TypeError, ValueError, ShardpackError) as e:
        where = old.storage.path(INDEX_NAME)
        raise OutputError(f"{where}: its options are not ones shardpack wrote "
                          f"({printable(str(e))}); ", *_REPACK) from None  # fmt: skip


def _refuse_untrusted(old: Index, given: PackOptions, kept: dict) -> None:
    """A grow takes from OUT's files (anyone may have written them) no pixel limit looser than
    the run's, given or default, and no folder to read a manifest's relative paths under: a
    dataset packed with either grows with it given again, as its pack was. Taken, a stranger's
    index would let a decompression bomb in, or read the manifest's paths under /etc."""
    where = old.storage.path(INDEX_NAME)
    limit = kept.get("max_pixels")
    if is_count(limit) and limit > given.max_pixels:
        raise OutputError(f"{where}: the dataset was packed with ", earlier("max_pixels", limit),
                          ", a looser limit than this run's ",
                          Option("max_pixels", given.max_pixels), "; a grow takes none from "
                          "OUT's files: pass the dataset's ", Option("max_pixels"), " again if "
                          "you trust SRC's images, else ", *_REPACK)  # fmt: skip
    root = kept.get("root")
    if isinstance(root, str) and root != given.root:
        now = ("names none",) if given.root is None else ("is ", Option("root", given.root))
        # (no path is longer than Linux's PATH_MAX: a longer one is cut, not a folder to pass)
        raise OutputError(f"{where}: the dataset's manifest paths were read under ",
                          Option("root", shortened(root, 4096)), ", and this run's ", *now,
                          "; a grow reads SRC where its command line says, never where OUT's "
                          "files do: pass ", Option("root"), " with the folder of SRC's "
                          "images")  # fmt: skip


def _grown_split_names(old: Index, given: PackOptions, kept: object) -> object:
    """The split folder names a grow scans SRC with: the dataset's, or a --splits given that
    holds each of the dataset's splits, so that a new split folder of SRC packs as a new split
    (as a new class folder packs as a new class). Before, a tree packed with --splits could
    gain none: --splits was refused as another option than the dataset's, and the scan's
    refusal of the new folder named --splits as the way out."""
    if given.split_names == SPLIT_NAMES:  # none given
        return kept
    lacking = [split for split in old.splits if split not in given.split_names]
    if lacking:
        raise OutputError(f"{old.out}: ", Option("split_names"), " must hold each of the "
                          f"dataset's splits ({', '.join(old.splits)}) and may add new ones; "
                          f"it lacks {_shown(lacking[:5])}")  # fmt: skip
    return list(given.split_names)


def _with_split_names(kept: dict | None, options: PackOptions) -> dict | None:
    """The dataset's options as the grown index keeps them: a --splits that added split names
    (_grown_split_names) is the dataset's from now on."""
    if not isinstance(kept, dict) or "split_names" not in kept:
        return kept
    return {**kept, "split_names": list(options.split_names)}


def _shown(value: object) -> str:
    """A value for a message: JSON, escaped, cut short."""
    return shortened(printable(json.dumps(value)))


def _refuse_streamed(out: Storage, old: Index) -> None:
    """A streamed list's pack (no global shuffle, and no contents.json: its keys were never
    held) cannot grow yet: refused in one line before anything is read."""
    if old.shuffle in ("window", "none") and not out.lexists(CONTENTS_NAME):
        how = "in a window shuffle" if old.shuffle == "window" else "in their order"
        raise OutputError(f"{out.root}: holds a list packed streamed ({how}: its rows were "
                          "never held, so it keeps no list of its items to grow from); pack the "
                          "new rows into another folder, or pack the whole list again with ",
                          Option("overwrite", True))  # fmt: skip


def _scan(src: Storage, options: PackOptions, old: Index, storage_options) -> Dataset:
    """SRC's items labelled by the dataset's classes, new classes numbered after them."""
    dataset = scan(src, replace(options, classes=options.classes or None), storage_options)
    _refuse_other_source(src, old, dataset)
    found = dataset.classes
    grown = _at_the_end(old.classes, found)
    if options.classes is None and found != grown and old.classes:
        dataset = scan(src, replace(options, classes=grown), storage_options)
    dataset = _held_numbers(dataset, old)
    old_features = {k: v for k, v in old.schema.to_json().items() if k != "label"}
    features = {k: v for k, v in dataset.schema.to_json().items() if k != "label"}
    for name, held in old_features.items():  # classes added at the end (_held_numbers) fit
        classes = features.get(name, {}).get("classes")
        if "classes" in held and classes and classes[: len(held["classes"])] == held["classes"]:
            features[name] = {**features[name], "classes": held["classes"]}
    if features != old_features:
        raise OutputError(f"{src.path()}: {_feature_change(features, old_features)}: the "
                          "dataset's shards cannot take its records; pack it into a new output "
                          "folder")  # fmt: skip
    return dataset


def _at_the_end(held: tuple[str, ...], found: Iterable[str]) -> tuple[str, ...]:
    """The held classes, then those found that they lack, in the order found: a class keeps
    its number as the dataset grows."""
    return (*held, *(c for c in found if c not in held))


def _held_numbers(dataset: Dataset, old: Index) -> Dataset:
    """SRC's other class features (objects/label: a COCO JSON's categories, data.yaml's names)
    numbered as the dataset numbers them, the classes SRC adds after them, as a folder's new
    class is: each item's values renumbered from SRC's order, which a category inserted by id
    or a class sorted in by name would change."""
    features, renumber = [], {}
    for name, feature in dataset.schema.features:
        held = old.schema.get(name)
        if (name != LABEL and feature.classes is not None and held is not None
                and held.classes is not None and feature.classes != held.classes):  # fmt: skip
            grown = _at_the_end(held.classes, feature.classes)
            renumber[name] = [grown.index(c) for c in feature.classes]
            feature = replace(feature, classes=grown)
        features.append((name, feature))
    if not renumber:
        return dataset
    splits = {split: tuple(_renumbered(item, renumber) for item in items)
              for split, items in dataset.splits.items()}  # fmt: skip
    return replace(dataset, schema=Schema(tuple(features)), splits=splits)


def _renumbered(item: Item, renumber: dict[str, list[int]]) -> Item:
    """The item with each class feature in `renumber` given its new numbers (new = list[old])."""
    fields = dict(item.fields)
    for name, numbers in renumber.items():
        value = fields.get(name)
        if isinstance(value, int):
            fields[name] = numbers[value]
        elif value is not None:
            fields[name] = tuple(numbers[v] for v in value)
    return item._replace(fields=fields)


def _refuse_other_source(src: Storage, old: Index, dataset: Dataset) -> None:
    """Refuse a SRC of another source than the dataset's (a split tree for class folders):
    most likely another dataset, whose every item would be new and every held one vanished."""
    if old.source is None or old.source in dataset.source.kinds:  # (None: an older index)
        return
    try:
        packed = source_of(old.source).described
    except ValueError:  # a source not registered in this process
        packed = repr(old.source)
    raise OutputError(f"{src.path()}: holds {dataset.source.described}, and {old.out} was "
                      f"packed from {packed}; pass the SRC it was packed from, or pack this one "
                      "into another output folder")  # fmt: skip


def _feature_change(features: dict, old: dict) -> str:
    """What SRC's features change of the dataset's: those it adds, lacks or types otherwise."""
    added = sorted(features.keys() - old.keys())
    lacked = sorted(old.keys() - features.keys())
    retyped = sorted(k for k in features.keys() & old.keys() if features[k] != old[k])
    said = [
        f"{what} {_shown(names)}"
        for what, names in (
            ("it adds", added),
            ("it lacks", lacked),
            ("it types otherwise", retyped),
        )
        if names
    ]
    return "; ".join(said)


def _compare(
    dataset: Dataset, held_: Contents, known: dict[str, int], skips: dict[str, tuple[int, int]],
    options: PackOptions, threads: int,
) -> Change:  # fmt: skip
    """What is new in SRC, what changed and what vanished, by (split, key). A held item whose
    file has its content key's size and the mtime `known` (stamps.py) and whose label and
    fields are the packed ones is unchanged, unread; the others are read and keyed as workers
    key them (on `threads` threads: the run's workers; an object's bytes kept for its worker,
    the stamp listed before the read in Change.listed), and where the bytes are the packed
    ones their file's new mtime goes into `known` (the next run reads them no more). An item
    changes when its bytes, label or fields do. A copy --dedup left out whose URL's row is
    unchanged is no new item: it is `left`, unread. An item skipped when packed is new again
    where its file's stamp now is not the one its skip noted (`skips`; _reread). A held item
    left unread (not in Change.read) whose read is a request keeps its record when --update
    rewrites its shard (kept.py)."""
    contents = held_.shards
    dropped = {row[1]: row for row in held_.noted.dropped}
    left = {}
    held = {}  # key -> (shard, position, content size, meta); keys are unique across the splits
    tried = {key for _, key, _ in held_.loose}  # skipped when packed: not new, nor a rewrite
    for file, entry in contents.items():
        held.update(zip(entry["keys"], zip(repeat(file), count(), entry["size"], entry["meta"]),
                        strict=True))  # fmt: skip
        tried.update(entry["skipped"])
    new: dict[str, list[Item]] = {}
    present: list[tuple[str, Item]] = []
    recorded = []  # the stamp of each present item's file, if unchanged: (size, mtime)
    relabelled = set()  # keys of the held items whose label or fields differ
    changed: dict[str, list[Item]] = {}
    touched = set()
    retry = []  # (split, item) of each item skipped when packed: read again if its file changed
    for name, items in dataset.splits.items():
        for item in items:
            found = held.get(item.key)
            if found is not None:
                present.append((name, item))
                recorded.append((found[2], known.get(item.key)))
                if found[3] is not None and found[3] != meta(item):
                    relabelled.add(item.key)
                    if is_web_url(item.path):  # its image unchanged: changed, unread
                        changed.setdefault(name, []).append(item)
                        touched.add(found[0])
            elif item.key in tried:
                retry.append((name, item))
            elif _unchanged_copy(dropped.get(item.key), name, item, dataset):
                left[item.key] = dropped[item.key]
            else:
                new.setdefault(name, []).append(item)
    now = stamps.take_stamps(dataset.source, dataset.root, (item for _, item in present))
    # (split, item, stamp) of the files whose stamp differs or whose row's values do; an image
    # URL has no stamp and names its image, taken as unchanged: no held URL is fetched again
    unsure = [(name, item, stamp)
              for (name, item), stamp, was in zip(present, now, recorded, strict=True)
              if not is_web_url(item.path)
              and (stamp != was or item.key in relabelled)]  # fmt: skip
    keys = content_keys([(name, item) for name, item, _ in unsure], dataset, options, threads)
    for (name, item, stamp), key in zip(unsure, keys, strict=True):
        file, i, size, _ = held[item.key]
        if key[:2] != (contents[file]["crc"][i], size) or item.key in relabelled:
            changed.setdefault(name, []).append(item)
            touched.add(file)
        elif (mtime := stamps.mtime_to_keep(stamp, key[1])) is not None:
            known[item.key] = mtime
    vanished = len(held) - len(present)  # keys are unique: each held one is present once
    gone = set()
    if vanished:
        seen = {item.key for _, item in present}
        gone = {file for key, (file, *_) in held.items() if key not in seen}
    read = {item.key: key for (_, item, _), key in zip(unsure, keys, strict=True)}
    near = dict(held_.noted.near)
    reread = _reread(retry, skips, dataset)
    for name, item in reread:
        new.setdefault(name, []).append(item)
    again = frozenset(item.key for _, item in reread)
    if again and options.grow == "update":  # the shard that noted its skip is written again
        touched.update(file for file, entry in contents.items()
                       if not again.isdisjoint(entry["skipped"]))  # fmt: skip
    listed = {item.key: stamp for _, item, stamp in unsure}
    return Change(new, changed, vanished, frozenset(touched | gone), read, held, left, near,
                  again, listed)  # fmt: skip


def _moved(
    dataset: Dataset, change: Change, contents: dict[str, Entry], options: PackOptions,
    threads: int,
) -> Change:  # fmt: skip
    """--append: the change without the new items that are held records SRC no longer lists
    by their key (a file renamed or moved; a Hub dataset whose Parquet files are renamed as it
    grows, `train-00000-of-00001` to `-of-00002`, every row's key `file:row` new): an item of
    the bytes (contents.json's digest) and the label and fields (meta) of such a record is it,
    left as packed, not packed twice. Where a held record vanished, each new item is read for
    it (on `threads` threads; its worker reads it again), but a whole file whose stat gives
    another size than every such record's: a table's new rows, once more."""
    if options.grow != "append" or not change.vanished or not any(change.new.values()):
        return change
    listed = {item.key for items in dataset.splits.values() for item in items}
    gone: Counter[tuple] = Counter()  # (crc, size, digest, meta) of the records SRC lost
    for _, file, i, size, said in _lost(change, contents, listed):
        gone[contents[file]["crc"][i], size, contents[file]["digest"][i], said] += 1
    if not gone:  # packed before contents.json noted digests: nothing to know them by
        return change
    new = [(split, item) for split, items in change.new.items() for item in items]
    # a whole file of another size than every lost record's is none of them: not read
    sizes = {size for _, size, _, _ in gone}
    now = stamps.take_stamps(dataset.source, dataset.root, (item for _, item in new))
    new = [entry for entry, stamp in zip(new, now, strict=True) if not stamp or stamp[0] in sizes]
    found = set()
    for (_, item), key in zip(new, content_keys(new, dataset, options, threads), strict=True):
        alike = (key.crc, key.size, key.digest.hex() if key.digest else "", meta(item))
        if gone[alike] > 0:
            gone[alike] -= 1
            found.add(item.key)
    if not found:
        return change
    kept = {split: [item for item in items if item.key not in found]
            for split, items in change.new.items()}  # fmt: skip
    return replace(change, new={split: items for split, items in kept.items() if items},
                   vanished=change.vanished - len(found), moved=len(found))  # fmt: skip


def _reread(
    tried: list[tuple[str, Item]], skips: dict[str, tuple[int, int]], dataset: Dataset
) -> list[tuple[str, Item]]:
    """Those of the items skipped when packed (`tried`: split, item) to read again: a file
    whose stamp now (a stat each, an object's listing: no read) is not the one its skip noted
    (`skips`, stamps.py; none noted: it could not be opened, or an older shardpack noted none).
    One with no stamp now (missing, no regular file, inside a file, an object whose store lists
    no mtime) is not read again, nor is an image URL (its failures have their own rules:
    urlfailures.py)."""
    tried = [(name, item) for name, item in tried if not is_web_url(item.path)]
    now = stamps.skip_stamps(dataset.source, dataset.root, (item for _, item in tried))
    return [(name, item) for (name, item), stamp in zip(tried, now, strict=True)
            if stamp is not None and stamp != skips.get(item.key)]  # fmt: skip


def _unchanged_copy(row: Dropped | None, split: str, item: Item, dataset: Dataset) -> bool:
    """Whether a copy --dedup left out (`row`, None: none) is this item as it was: in its
    split, its label and fields the same, and an image URL (it names its image, taken as
    unchanged) or a file of the size and mtime noted (stamps.py)."""
    if row is None or row[0] != split or row[4] != meta(item):
        return False
    if is_web_url(item.path):
        return True
    (stamp,) = stamps.take_stamps(dataset.source, dataset.root, (item,))
    return row[6] != 0 and stamp == (row[3], row[6])


def _kept_now(dataset: Dataset, change: Change, copies: Copies) -> Change:
    """The change with the copies left out that --dedup keeps now (their kept copy gone or
    changed) as new items, fetched as a fresh pack fetches them."""
    back = set(change.left) - {key for _, key in copies.dropped}
    if not back:
        return change
    new = {name: list(items) for name, items in change.new.items()}
    for name, items in dataset.splits.items():
        new.setdefault(name, []).extend(item for item in items if item.key in back)
    return replace(change, new={name: items for name, items in new.items() if items},
                   left={k: v for k, v in change.left.items() if k not in back})  # fmt: skip


def _copies(
    dataset: Dataset, contents: dict[str, Entry], change: Change, options: PackOptions,
    update: bool, threads: int, written: dict[str, duplicates.ContentKey] | None = None,
    listed: Mapping[str, stamps.Stamp] | None = None, splits: Mapping[str, str] | None = None,
) -> Copies:  # fmt: skip
    """The copies among the items the grown dataset will hold, as a fresh pack of SRC finds
    them: the held items keyed by contents.json (or as _compare read them), as are the copies
    left out it found unchanged (Change.left), the new ones read now; --dedup near compares
    the held items unread by their bytes alone. With --dedup, each group keeps its copy as a
    fresh pack would (the evaluation split's), save that --append, which never rewrites a
    shard, keeps the held copy of a group that has one. `written`: the new items' keys as
    their workers took them (then one they skipped is no member). Those read now are read on
    `threads` threads, fetching as that many workers (the run's); `listed`: the stamps listed
    before their reads (content_keys'). --append keeps the records SRC no longer lists (a file
    renamed or moved): those whose digest contents.json notes are members too, known unread
    (`splits`: each shard's split), so that a new name of a held image is its copy."""
    held, read = change.held, change.read
    new = {item.key for items in change.new.values() for item in items}
    changed = {item.key for items in change.changed.values() for item in items}
    members: list[duplicates.Entry] = []
    keys: list[duplicates.ContentKey | None] = []
    known = []  # the number each held item shares with its known copies (0: none, or changed)
    for split in sorted(dataset.splits):
        for item in dataset.splits[split]:
            if item.key in new and written is not None:
                if item.key not in written:
                    continue  # skipped by its worker: not in the dataset
                keys.append(written[item.key])
                known.append(0)
            elif item.key in new:
                keys.append(None)
                known.append(0)
            elif (row := change.left.get(item.key)) is not None:  # known with its copies
                keys.append(duplicates.ContentKey(row[2], row[3], change.near.get(item.key)))
                known.append(row[5])
            elif (found := held.get(item.key)) is not None:
                file, i, size, _ = found
                entry = contents[file]
                anew = read.get(item.key)
                keys.append(anew or duplicates.ContentKey(entry["crc"][i], size,
                                                          change.near.get(item.key)))  # fmt: skip
                # its held copies stand unless its bytes were read and changed (an image URL's
                # row changed in its values alone keeps them)
                known.append(0 if anew and item.key in changed else entry["copy"][i])
            else:
                continue  # skipped when packed: not in the dataset
            members.append((split, item))
    labelled = {}  # the held records SRC no longer lists: each one's meta, as its labelling
    listed_now = () if update else {item.key for items in dataset.splits.values() for item in items}
    for split, item, key, number, said in _vanished(change, contents, splits, listed_now):
        members.append((split, item))
        keys.append(key)
        known.append(number)
        labelled[item.key] = said
    unread = [i for i, key in enumerate(keys) if key is None]
    marks: list[stamps.Stamp] = [(row[3], row[6]) if (row := change.left.get(item.key)) and
                                 row[6] else None for _, item in members]  # fmt: skip
    read = duplicates.content_keys([members[i] for i in unread], dataset, options, threads,
                                   listed)  # fmt: skip
    for i, key in zip(unread, read, strict=True):
        keys[i], marks[i] = key, key.stamp
    groups, same, crowded = duplicates.find_groups(members, keys, dataset, options, known,
                                                   labelled)  # fmt: skip
    if options.dedup == "none":
        return Copies(groups, {})
    # (split, key) of the copies --append must keep: held ones
    ours = new | set(change.left)  # not in a shard
    fixed = set() if update else {(s, item.key) for s, item in members if item.key not in ours}
    yielded = 0
    if fixed:
        yielded = sum(g[0][:2] not in fixed and any(m[:2] in fixed for m in g) for g in groups)
        groups = [_held_first(group, fixed) for group in groups]
        groups.sort(key=lambda group: duplicates._kept_first(group[0]))
    dropped = {m: r for m, r in duplicates.drop_reasons(groups, same).items() if m not in fixed}
    noted = duplicates.noted(members, keys, groups, dropped, marks)
    return Copies(groups, dropped, yielded, crowded, noted)


def _lost(
    change: Change, contents: Mapping[str, Entry], listed: Collection[str]
) -> Iterator[tuple[str, str, int, int, int]]:  # fmt: skip
    """(key, file, row, size, meta) of each held record whose key SRC no longer lists
    (`listed`: those it does) and whose digest and meta contents.json notes (an older pack's
    record has none: nothing to know it by)."""
    for key, (file, i, size, said) in change.held.items():
        entry = contents.get(file)
        if key not in listed and entry is not None and said is not None and entry["digest"][i]:
            yield key, file, i, size, said


def _shard_splits(index: Index) -> dict[str, str]:
    """Each shard's split, by its file."""
    return {shard.file: name for name, split in index.splits.items() for shard in split.shards}


def _vanished(
    change: Change, contents: dict[str, Entry], splits: Mapping[str, str] | None,
    listed: Collection[str],
) -> Iterator[tuple[str, Item, duplicates.ContentKey, int, int]]:  # fmt: skip
    """(split, item, content key, known copy number, meta) of each held record whose key SRC
    no longer lists (`listed`: those it does; none: --update, which drops them) and whose
    digest and meta contents.json notes (an older pack's: none), never read (its item names no
    file: the digest confirms it)."""
    if not change.vanished or splits is None or not listed:
        return
    for key, file, i, size, said in _lost(change, contents, listed):
        if file not in splits:
            continue
        entry = contents[file]
        yield (splits[file], Item(key, None, "", size),
               duplicates.ContentKey(entry["crc"][i], size, change.near.get(key),
                                     bytes.fromhex(entry["digest"][i])),
               entry["copy"][i], said)  # fmt: skip


def written_keys(plan: Plan, results: list[ShardResult]) -> dict[str, duplicates.ContentKey]:
    """The content key and digest of each record the workers wrote, as they took them."""
    by_file = {r.file: r for r in results}
    found = {}
    for spec in plan.shards:
        rows = facts_of(by_file[spec.file].content, len(spec.items))
        for item, row in zip(spec.items, rows.tolist(), strict=True):
            crc, size, digest = row[:3]
            if size:  # (0: skipped)
                found[item.key] = duplicates.ContentKey(crc, size, None, digest)
    return found


def _held_first(group: duplicates.Group, fixed: set[tuple[str, str]]) -> duplicates.Group:
    """A group with its first held member first (the copy --append keeps), if it has one."""
    first = next((m for m in group if m[:2] in fixed), None)
    return group if first is None else [first, *(m for m in group if m != first)]


def _without(
    dataset: Dataset, change: Change, copies: Copies, contents: dict[str, Entry], update: bool
) -> tuple[Dataset, Change]:
    """The dataset and the change without the copies --dedup leaves out: a held one (--update
    alone) leaves its shard, which is rewritten."""
    drop = {key for _, key in copies.dropped}
    if not drop:
        return dataset, change
    where = {key: file for file, entry in contents.items() for key in entry["keys"]}
    out_of = {where[key] for key in drop if key in where}
    keep = lambda items: [item for item in items if item.key not in drop]  # noqa: E731
    splits = {split: tuple(keep(items)) for split, items in dataset.splits.items()}
    new = {split: keep(items) for split, items in change.new.items()}
    changed = {split: keep(items) for split, items in change.changed.items()}
    removed = sum(key in where for key in drop)
    return replace(dataset, splits=splits), replace(
        change, new=new, changed=changed, vanished=change.vanished + removed,
        touched=change.touched | out_of)  # fmt: skip


def _keep_splits(dataset: Dataset, old: Index, held: Contents) -> Dataset:
    """The dataset --split cut anew with each held item (packed or skipped) in its split."""
    split_of = {key: split for split, key, _ in held.loose}
    split_of.update((key, split) for split, key, *_ in held.noted.dropped)
    for name, split in old.splits.items():
        for shard in split.shards:
            entry = held.shards[shard.file]
            split_of.update(dict.fromkeys([*entry["keys"], *entry["skipped"]], name))
    splits: dict[str, list[Item]] = {name: [] for name in dataset.splits}
    for name, items in dataset.splits.items():
        for item in items:
            splits.setdefault(split_of.get(item.key, name), []).append(item)
    return replace(dataset, splits={name: tuple(items) for name, items in splits.items()})


def _gone(keys: frozenset[str], dataset: Dataset) -> frozenset[str]:
    """Those of `keys` (a held dataset's skips, usually few) that SRC no longer holds: no set
    of every item's key made for them, and no pass over the items where there are none."""
    if not keys:
        return keys
    present = {item.key for items in dataset.splits.values() for item in items
               if item.key in keys}  # fmt: skip
    return keys - present


def _dropped_copies(old: Index) -> bool:
    """Whether the dataset's --dedup skipped copies: they are in no shard, so one gone from SRC
    is no held item that vanished; its copies are found again to say so (a copy contents.json
    notes, its row unchanged, from what it noted: unread)."""
    removed = (old.duplicates or {}).get("removed")
    return is_count(removed)


def _loose(
    dataset: Dataset, old: Index, held: Contents, touched: frozenset[str]
) -> tuple[Skip, ...]:
    """The skips no shard will note: the held ones (those of the shards --update rewrites
    among them) of items SRC still has."""
    present = {item.key for items in dataset.splits.values() for item in items}
    found = [skip for skip in held.loose if skip[1] in present]
    for name, split in old.splits.items():
        for shard in split.shards:
            if shard.file in touched:
                entry = held.shards[shard.file]
                found += [(name, key, reason) for key, reason
                          in zip(entry["skipped"], entry["reasons"], strict=True)
                          if key in present]  # fmt: skip
    return tuple(found)


def _without_empty(
    out: Storage, plan: Plan, results: list[ShardResult], fresh: dict[str, Entry],
    loose: tuple[Skip, ...],
) -> tuple[Plan, list[ShardResult], tuple[Skip, ...]]:  # fmt: skip
    """The plan and results without the shards whose every item was skipped (removed: no grow
    lists an empty shard), their skips kept as loose ones."""
    empty = {r.file for r in results if r.num_records == 0}
    if not empty:
        return plan, results, loose
    out.remove(sorted(empty))
    loose += tuple((spec.split, key, reason) for spec in plan.shards if spec.file in empty
                   for key, reason in zip(fresh[spec.file]["skipped"],
                                          fresh[spec.file]["reasons"], strict=True))  # fmt: skip
    shards = tuple(spec for spec in plan.shards if spec.file not in empty)
    return replace(plan, shards=shards), [r for r in results if r.file not in empty], loose


def _told(
    index: Index,
    dataset: Dataset,
    shards: dict[str, Entry],
    loose: tuple[Skip, ...],
    copies: Copies,
    options: PackOptions,
) -> dict[str, object]:
    """The Index fields that say what the grown dataset's skips, copies, statistics and label
    conflicts are, as a fresh pack of SRC says it: `index` (the grown one, its skips, copies
    and warnings still the held ones) and `shards` (its shards' contents.json entries)."""
    by_split = {name: [shards[s.file] for s in split.shards]
                for name, split in index.splits.items()}  # fmt: skip
    noted = [pair for entries_ in by_split.values() for entry in entries_
             for pair in zip(entry["skipped"], entry["reasons"], strict=True)]  # fmt: skip
    every = [*dataset.skipped, *((key, why) for (_, key), why in copies.dropped.items()), *noted,
             *((key, why) for _, key, why in loose)]  # fmt: skip
    reasons: dict[str, list[str]] = {}
    for split, _, why in loose:
        reasons.setdefault(split, []).append(why)
    found = json_value(copies.summary(options))
    return {
        "skipped": named_skipped(every),
        "num_skipped": len(every),
        "duplicates": found,
        "summaries": json_value(entry_summaries(by_split, reasons, copies.per_split())),
        "warnings": duplicates.rewarned(index.warnings, found, dataset.warnings),
        **_listed(dataset),
    }


def _listed(dataset: Dataset) -> dict[str, object]:
    """The Index fields of the files SRC holds that are no image, as the grow's scan found
    them (a fresh pack's: not the held ones)."""
    return {"ignored": dataset.ignored, "ignored_files": tuple(dataset.ignored_files)}


def _retell(
    out: Storage,
    old: Index,
    told: dict,
    contents: dict[str, Entry],
    loose: tuple[Skip, ...],
    copies: Copies,
    noted: Noted,
    dataset: Dataset,
) -> None:
    """Write the index of a grow that wrote no shard but has new copies or skips to report (the
    same plan: the stamps still hold), and failures.jsonl just after, as a grow writing one."""
    index = replace(old, **told)
    failures = _failures(index.splits, contents, loose, dataset, copies)
    index = replace(index, stats=replace(index.stats, url_failures=counts(failures) or None))
    with _finished_by_a_rerun():
        write_contents(out, with_copies(contents, copies.groups, frozenset()), loose, noted)
        write_outputs(out, index, [], False, tfds=not gaps.gap_moves(index))
        commit_index(out, index)
    write_failures(out, failures)


def _add_survivors(
    todo: dict[str, list[Item]],
    dataset: Dataset,
    contents: dict[str, Entry],
    touched: frozenset[str],
    change: Change,
) -> None:
    """Add to `todo` the unchanged items of the shards --update rewrites."""
    changed = {item.key for items in change.changed.values() for item in items}
    moved = {key for file in touched for key in contents[file]["keys"]} - changed
    for name, items in dataset.splits.items():
        todo[name] = [*todo.get(name, ()), *(item for item in items if item.key in moved)]


def grow_seed(seed: int, generation: int) -> int:
    """The shuffle seed of a generation's new items: from the dataset's seed and the number."""
    digest = hashlib.sha256(f"{seed}/{generation}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def grow_plan(
    dataset: Dataset,
    todo: dict[str, list[Item]],
    old: Index,
    options: PackOptions,
    generation: int,
    touched: frozenset[str],
    taken: frozenset[str] = frozenset(),
    kept: Mapping[str, Kept] | None = None,
) -> Plan:
    """The new shards: each split's items shuffled with the generation's seed, cut by the
    dataset's shard size (never by the worker count: any machine plans alike), numbered after
    the split's last shard, past any `taken` name, and named with the count the split was
    first packed with; each with the `kept` records among its items (kept.py)."""
    sub = replace(dataset, splits={s: tuple(items) for s, items in todo.items() if items})
    seed = grow_seed(options.seed, generation) if options.shuffle else options.seed
    plan = make_plan(sub, old.name, replace(options, seed=seed, shards=None), 1)
    container = CONTAINERS[options.format]
    shards, following = [], {}
    for spec in plan.shards:
        split = old.splits.get(spec.split)  # a split new to the dataset: named as packed
        count = split.names_count if split is not None and split.names_count else spec.num_shards
        index = following.get(spec.split, split.next_number if split is not None else 0)
        while (file := container.shard_name(old.name, spec.split, index, count)) in taken:
            index += 1  # never a name an index lists or OUT holds
        following[spec.split] = index + 1
        ours = {item.key: kept[item.key] for item in spec.items if item.key in kept} if kept else {}
        shards.append(ShardSpec(spec.split, index, count, file, spec.items, ours or None))
    digest = hashlib.sha256(json.dumps(
        [plan.digest, old.plan_digest, generation, options.grow, sorted(touched),
         [s.file for s in shards]]).encode()).hexdigest()  # fmt: skip
    return replace(plan, shards=tuple(shards), digest=digest)


def _grown(
    old: Index,
    dataset: Dataset,
    plan: Plan,
    results: list[ShardResult],
    fresh: dict[str, Entry],
    contents: dict[str, Entry],
    touched: frozenset[str],
) -> tuple[Index, dict[str, Entry]]:
    """The grown index (its skips, copies and statistics still the old ones: _told), and the
    contents entries of the shards it keeps (`fresh`: those of the new shards)."""
    by_file = {r.file: r for r in results}
    generation = old.generation + 1
    shards = {name: list(split.shards) for name, split in old.splits.items()}
    named = {name: split.names_count for name, split in old.splits.items()}  # as grow_plan
    following = {name: split.next_shard for name, split in old.splits.items()}
    for spec in plan.shards:
        shards.setdefault(spec.split, []).append(shard_info(by_file[spec.file], generation))
        named.setdefault(spec.split, spec.num_shards)
        following[spec.split] = spec.index + 1
    kept, splits, classes = {}, {}, dataset.classes
    for name, listed in shards.items():
        listed = [s for s in listed if s.file not in touched]
        per_class = [0] * len(classes)
        for shard in listed:
            found = fresh.get(shard.file) or contents[shard.file]
            kept.update({} if shard.file in fresh else {shard.file: found})
            for label, n in enumerate(found["label_counts"][: len(classes)]):
                per_class[label] += n
        if listed:
            splits[name] = SplitInfo(
                num_records=sum(s.num_records for s in listed), class_counts=tuple(per_class),
                shards=tuple(listed), name_count=named[name], next_shard=following.get(name),
            )  # fmt: skip
    # the new records' size is not the dataset's one size
    size = {"image_size": None} if results and uniform_size(plan, results) != old.image_size else {}
    grown = replace(
        old, splits=splits, schema=dataset.schema, plan_digest=plan.digest,
        generation=generation, retired=tuple(sorted(touched)),  # removed once this is in place
        **size, image_size_told=old.image_size_told or bool(size),
    )  # fmt: skip
    return grown, kept


def _failures(
    splits: dict[str, SplitInfo], shards: dict[str, Entry], loose: tuple[Skip, ...],
    dataset: Dataset, copies: Copies,
) -> list[dict]:  # fmt: skip
    """failures.jsonl's rows for the grown dataset: every URL skip its shards (`splits`:
    the index's, `shards`: their entries) and the scan note, the copies --dedup leaves out and
    the loose ones (the skips _told counts)."""
    noted = [(name, key, why) for name, split in splits.items() for shard in split.shards
             for key, why in zip(shards[shard.file]["skipped"],
                                 shards[shard.file]["reasons"], strict=True)]  # fmt: skip
    skipped = [*((None, key, why) for key, why in dataset.skipped),
               *((split, key, why) for (split, key), why in copies.dropped.items()), *noted,
               *loose]  # fmt: skip
    return url_failures(skipped, rows_of(dataset), lists_urls(dataset, skipped))


def _packed_again(again: frozenset[str], fresh: dict[str, Entry]) -> int:
    """How many of the failed URLs --update asked again the new shards hold."""
    return sum(key in again for entry in fresh.values() for key in entry["keys"]) if again else 0


def _asked_again(again: frozenset[str], packed: int) -> tuple[str, ...]:
    """A line saying how many failed URLs --update asked again, and how many it packed."""
    if not again:
        return ()
    return (f"{plural(len(again), 'URL')} that had failed for a reason a retry may mend (HTTP "
            f"5xx or 429, a timeout, a reset) asked again: {packed:,} packed",)  # fmt: skip


def _read_again(reread: int, packed: int) -> tuple[str, ...]:
    """A line saying how many items skipped when packed were read again (their files changed
    since), and what became of them."""
    if not reread:
        return ()
    return (f"{plural(reread, 'item')} skipped when packed read again (file changed "
            f"since): {packed:,} packed, {reread - packed:,} skipped again",)  # fmt: skip


def _now() -> str:
    """The time of day in UTC, as the history records it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _said(change: Change, mode: str, copies: Copies | None) -> tuple[str, ...]:
    """What --append left alone, pointing to --update."""
    changed = sum(map(len, change.changed.values()))
    said = []
    if mode == "append" and (changed or change.vanished):
        kinds = [plural(count, f"{kind} item") for count, kind in
                 ((changed, "changed"), (change.vanished, "vanished")) if count]  # fmt: skip
        moved = (" (a file renamed or moved in SRC is a vanished item and a new one: its image "
                 "is now held twice, one of index.json's copies; a dataset packed with --dedup "
                 "exact skips it)"
                 if change.vanished and any(change.new.values()) else "")  # fmt: skip
        said.append(f"{' and '.join(kinds)} left as packed{moved}; pack with --update to bring "
                    f"{'it' if changed + change.vanished == 1 else 'them'} in line")  # fmt: skip
    if mode == "append" and change.moved:
        said.append(f"{plural(change.moved, 'item')} SRC lists under a new name (a file renamed "
                    "or moved, Parquet files renamed as a Hub dataset grows) held already: the "
                    "same bytes, label and fields as a record whose name it no longer lists, "
                    "left as packed under that name")  # fmt: skip
    if copies is not None:
        said += duplicates.crowded_warning(copies.crowded)
    if copies is not None and copies.yielded:
        said.append(f"{plural(copies.yielded, 'new copy', 'new copies')} of held images "
                    "skipped where a fresh pack "
                    "keeps the new one (an evaluation split's) and drops the held one: pack "
                    "with --update to do so")  # fmt: skip
    return tuple(said)


def _nothing(
    root: str,
    old: Index,
    change: Change,
    copies: Copies | None,
    mode: str,
    start: float,
    retold: bool,
    restored: tuple[str, ...] = (),
) -> PackResult:
    """The result of a grow that found nothing to write: no shard touched (`retold`: its
    index.json now tells new (empty) classes, copies, skips, files that are no image or
    warnings; `restored`: the files beside the shards it wrote again, OUT lacking them)."""
    records = sum(s.num_records for s in old.splits.values())
    shards = sum(len(s.shards) for s in old.splits.values())
    return PackResult(root, old, records, old.num_skipped,
                             time.perf_counter() - start, shards, shards, 0,
                             _said(change, mode, copies),
                             {**change.summary(mode, 0), "nothing": True,
                              "retold": retold, "restored": list(restored)})  # fmt: skip
