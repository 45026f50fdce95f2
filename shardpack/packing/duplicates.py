"""Exact duplicates: images with the same bytes, found from what the workers note of each
record they write (facts.py: size and a digest of all its bytes; the parent groups them and
reads nothing), and --dedup exact (or near: also images whose perceptual hashes are close,
near.py), which keeps one image of each group and skips the others before the plan is made:
its candidates (alike in CRC32C and size) confirmed by the digest of their bytes."""

from __future__ import annotations

import itertools
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from shardpack.errors import ImageError, printable
from shardpack.images import BadImage, max_file_bytes
from shardpack.options import PackOptions
from shardpack.packing import near, stamps
from shardpack.packing.contents import Noted, copy_numbers, dropped_copies, meta_of
from shardpack.packing.facts import content_digest, content_key
from shardpack.packing.packeditems import picked
from shardpack.packing.plan import CUT_WARNING, Plan
from shardpack.sources import Dataset, Item
from shardpack.sources.objects import ANNOTATED_SIZE

# Splits a model is judged on: their copy of an image is the one --dedup keeps.
EVAL_SPLITS = frozenset({"test", "testing", "validation", "valid", "val", "eval", "dev"})
# What index.json lists: the first groups, each its first keys (the totals count them all).
MAX_LISTED_GROUPS = 1000
MAX_LISTED_KEYS = 100
# Items a thread of the --dedup pass hashes at a time (one read-ahead window on a store), at
# most: fewer where a shorter list gives each thread a chunk (each fetches as a worker does).
HASH_CHUNK = 256

# The groups of copies that carry more than one label index.json names (the count has all).
MAX_LISTED_CONFLICTS = 20
_CONFLICT = "label conflict: "  # how a warning of copies labelled differently begins
# What a label conflict's copies are, as the warning, inspect, the card and the report say it.
LABELLED_DIFFERENTLY = "labelled differently"
# What the skip reason of a copy --dedup leaves out adds where its labels are not the kept one's.
_OTHERWISE = ", whose labels differ: this copy's are not packed"
_CROWDED = "--dedup near: "  # how crowded_warning begins


class ContentKey(NamedTuple):
    """What an item read in the packing process is known by: its content key (crc, size), its
    perceptual hash (--dedup near alone) and the digest of its bytes (facts.py); a held item
    that a grow knows from contents.json has no digest (None). `stamp`: its file's, as its
    read saw it (stamps.load_stamped, settled; None: none)."""

    crc: int
    size: int
    near: int | None
    digest: bytes | None = None
    stamp: stamps.Stamp = None


Entry = tuple[str, Item]  # (split, item)
Member = tuple[str, str, object]  # (split, key, labelling) of a copy
Group = list[Member]  # each copy, the one kept first


def _kept_first(member: Member) -> tuple[bool, str, str]:
    """The order of a group: evaluation splits first, then by split and key."""
    split, key = member[:2]
    return split not in EVAL_SPLITS, split, key


def record_name(split: str, key: str) -> str:
    """A record as readers see it: its key where that starts with its split's folder (a split
    tree's `test/ant/x.jpg`), else `<split>/<key>`."""
    return key if key.startswith(f"{split}/") else f"{split}/{key}"


def labelling(label: object, fields: Mapping[str, object]) -> object:
    """What a record says of its image beside its bytes, as one hashable value: its label,
    and its fields (boxes, masks, captions, ...) but those that name the record or its objects
    (an `id`: COCO's image/id and objects/id, which every copy has its own of) and its
    annotated size (never written). Copies of two labellings are a label conflict."""
    said = {name: value for name, value in fields.items()
            if name != ANNOTATED_SIZE and name.rsplit("/", 1)[-1] != "id"}  # fmt: skip
    return meta_of(label, said)  # a held record's meta (contents.py), where it has no id


def _member(entry: Entry, labelled: Mapping[str, object] | None = None) -> Member:
    """A copy as groups hold it; its labelling the one `labelled` gives by key, where it does
    (a held record a grow no longer lists: its meta), else its item's."""
    split, item = entry
    if labelled and (said := labelled.get(item.key)) is not None:
        return split, item.key, said
    return split, item.key, labelling(item.label, item.fields)


def candidates(size: np.ndarray, *keys: np.ndarray) -> list[np.ndarray]:
    """Positions that share their size and each of `keys` (columns as long) with another, one
    array each; size 0 (nothing noted) never. A sort: a million items in well under a second."""
    live = np.flatnonzero(size > 0)
    columns = [column[live] for column in (size, *keys)]
    order = np.lexsort(columns[::-1])  # lexsort's last key sorts first
    differ = np.zeros(max(0, len(live) - 1), bool)
    for column in columns:
        ordered = column[order]
        differ |= ordered[1:] != ordered[:-1]
    starts = np.flatnonzero(np.r_[True, differ]) if len(live) else np.zeros(0, np.intp)
    counts = np.diff(np.r_[starts, len(live)])
    shared = counts > 1
    return [live[order[s : s + c]] for s, c in zip(starts[shared], counts[shared], strict=True)]


def _ordered(groups: list[Group]) -> list[Group]:
    """Each group with its kept copy first, in the order of those."""
    return sorted((sorted(g, key=_kept_first) for g in groups), key=lambda g: _kept_first(g[0]))


def confirm(
    sets: list[np.ndarray],
    entries: Sequence[Entry] | _PlanEntries,
    dataset: Dataset,
    options: PackOptions,
    known: Sequence[int] | None = None,
    digests: Sequence[bytes | None] | None = None,
    labelled: Mapping[str, object] | None = None,
) -> list[Group]:
    """Split each candidate set by the digest of its bytes (facts.content_digest): the one
    `digests` gives (read already), else read through the source's loader; the groups of two
    or more, each its kept copy first, in the order of those. One read-ahead serves every set:
    many pairs of image URLs are fetched many at a time, not a pair at a time. `known`: per
    entry, a number it shares with the entries already known to hold its bytes (0: none): one
    of those is read for all (a grow's held copies, contents.py), none where a set holds
    nothing else. `labelled`: as _member takes it."""
    load, cache, limit = dataset.source.load, {}, max_file_bytes(options.max_pixels)
    every = []  # per set: the entry digested -> the entries it stands for
    groups: list[Group] = []
    for positions in sets:
        alike: dict[int, list[int]] = defaultdict(list)
        first: dict[int, int] = {}  # known number -> the entry read for it
        for p in map(int, positions):
            number = known[p] if known is not None else 0
            alike[first.setdefault(number, p) if number else p].append(p)
        if len(alike) == 1:  # known copies alone: nothing to confirm (no held URL fetched)
            groups.append([_member(entries[q], labelled) for q in next(iter(alike.values()))])
        else:
            every.append(alike)
    found = {p: digests[p] for alike in every for p in alike} if digests else {}
    unread = [p for alike in every for p in alike if found.get(p) is None]
    with dataset.root.reading(dataset.source.item_files(entries[p][1] for p in unread),
                              limit) as src:  # fmt: skip
        for p in unread:
            try:
                found[p] = content_digest(load(entries[p][1], src, options, cache))
            except ImageError:  # gone or changed since: not a copy we can vouch for
                found[p] = None
    for alike in every:
        by_digest: dict[bytes, Group] = defaultdict(list)
        for p, stands_for in alike.items():
            if found[p] is not None:
                by_digest[found[p]] += [_member(entries[q], labelled) for q in stands_for]
        groups += [g for g in by_digest.values() if len(g) > 1]
    return _ordered(groups)


def found_in_shards(plan: Plan, sets: Iterable[np.ndarray]) -> PlanCopies:
    """The groups of exact copies among the records the workers wrote, from `sets`: the plan
    positions of the records alike in size and digest (the workers digested every byte;
    factspill.FactSpill.copy_sets finds them, a bucket of digests at a time; nothing is read
    again here), by plan position."""
    return PlanCopies.of(plan, sets)


class PlanCopies:
    """Groups of exact copies among a plan's records, as plan positions (its shards' items in
    order), in the order _ordered gives: 8 bytes a copy where a Group's member takes a tuple
    and its key (200,000 copies of ten images: ~27 MB at the pack's peak). The few names the
    summary lists are read from the plan's items when asked."""

    def __init__(self, plan: Plan, positions: np.ndarray, starts: np.ndarray,
                 otherwise: np.ndarray) -> None:  # fmt: skip
        self.plan = plan
        self.positions = positions  # every copy, a group after another, its kept copy first
        self.starts = starts  # each group's first in `positions`, then len(positions)
        # each group's first copy labelled otherwise than its kept one, by place in
        # `positions` (-1: none, the group is no label conflict)
        self.otherwise = otherwise
        self._shard_starts = np.cumsum([0, *(len(spec.items) for spec in plan.shards)])

    @classmethod
    def of(cls, plan: Plan, sets: Iterable[np.ndarray]) -> PlanCopies:
        """The groups of these sets of plan positions, each its kept copy first (evaluation
        splits first, then by split and key: _kept_first), in the order of those."""
        sets = list(sets)
        sizes = np.array([len(s) for s in sets], np.intp)
        group = np.repeat(np.arange(len(sets)), sizes)
        positions = np.concatenate(sets) if sets else np.zeros(0, np.intp)
        ascending = np.argsort(positions, kind="stable")  # each packed chunk unpacked once
        shards, keys, labels = _PlanEntries(plan).columns(positions[ascending], sortable=True)
        labelled = np.empty(len(positions), np.intp)  # by position in `positions`, as rank
        labelled[ascending] = _numbered(labels)
        labels = []
        rank = np.empty(len(positions), np.intp)
        rank[ascending] = _ranks(plan, shards, keys)
        keys = None
        by_group = np.lexsort((rank, group))  # each group's copies in that order
        firsts = np.cumsum(sizes) - sizes
        groups = np.argsort(rank[by_group[firsts]], kind="stable")  # by their kept copies
        order = np.concatenate([by_group[f : f + n] for f, n in
                                zip(firsts[groups].tolist(), sizes[groups].tolist(),
                                    strict=True)] or [by_group])  # fmt: skip
        starts = np.r_[0, np.cumsum(sizes[groups])]
        return cls(plan, positions[order], starts, _otherwise(labelled[order], starts))

    def __len__(self) -> int:
        return len(self.starts) - 1

    @property
    def images(self) -> int:
        return len(self.positions)

    def sizes(self) -> np.ndarray:
        return np.diff(self.starts)

    def across(self) -> Counter[tuple[str, str]]:
        """(split, other split) -> the images of the split whose group is also in the other."""
        splits = sorted({spec.split for spec in self.plan.shards})
        if len(splits) < 2:
            return Counter()
        of_shard = np.array([splits.index(spec.split) for spec in self.plan.shards], np.intp)
        shard = np.searchsorted(self._shard_starts, self.positions, side="right") - 1
        counts = np.zeros((len(self), len(splits)), np.int64)  # a row a group
        np.add.at(counts, (np.repeat(np.arange(len(self)), self.sizes()), of_shard[shard]), 1)
        across: Counter[tuple[str, str]] = Counter()
        for (a, split), (b, other) in itertools.permutations(enumerate(splits), 2):
            if n := int(counts[counts[:, b] > 0, a].sum()):
                across[split, other] = n
        return across

    def conflicts(self) -> list[int]:
        """The groups whose copies carry more than one label (_Groups.conflicts)."""
        return np.flatnonzero(self.otherwise >= 0).tolist()

    def names(self, groups: Sequence[int], most: int, otherwise: bool = False) -> list[list[str]]:
        """The record_name of the first `most` copies of each of these groups (`otherwise`:
        each group's first copy labelled otherwise than its kept one second, as _Groups.names
        lists them)."""
        picks = []  # each group's, by place in `positions`
        for g in groups:
            kept, end = int(self.starts[g]), int(self.starts[g + 1])
            other = int(self.otherwise[g]) if otherwise else -1
            first = [kept, other] if other > kept else [kept]
            rest = np.arange(kept + 1, min(end, kept + most + 1))
            picks.append(np.r_[first, rest[rest != other]][:most])
        flat = self.positions[np.concatenate(picks or [np.zeros(0, np.intp)])]
        ascending = np.sort(flat)
        shards, keys, _ = _PlanEntries(self.plan).columns(ascending)
        splits = [self.plan.shards[shard].split for shard in shards.tolist()]
        name = dict(zip(ascending.tolist(), map(record_name, splits, keys), strict=True))
        named = [name[p] for p in flat.tolist()]
        ends = np.cumsum([len(pick) for pick in picks]).tolist()
        return [named[end - len(pick) : end] for pick, end in zip(picks, ends, strict=True)]

    def numbers(self) -> np.ndarray:
        """Each plan position's copy number: its group's place in the order (from 1), 0 where
        it is in none (contents.copy_numbers, by position)."""
        number = np.zeros(int(self._shard_starts[-1]), np.int64)
        number[self.positions] = np.repeat(np.arange(1, len(self) + 1), self.sizes())
        return number


def _numbered(labels: list) -> np.ndarray:
    """Each labelling's number, the labellings numbered in order met: no tuple a copy."""
    number: dict[object, int] = {}
    return np.fromiter((number.setdefault(label, len(number)) for label in labels), np.intp,
                       len(labels))  # fmt: skip


def _otherwise(labelled: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each group's first copy whose labelling is not its kept copy's, by place in `labelled`
    (each copy's labelling numbered, a group after another from `starts`, its kept copy
    first); -1 where none."""
    at = np.flatnonzero(labelled != np.repeat(labelled[starts[:-1]], np.diff(starts)))
    groups, first = np.unique(np.searchsorted(starts, at, side="right") - 1, return_index=True)
    otherwise = np.full(len(starts) - 1, -1, np.intp)
    otherwise[groups] = at[first]
    return otherwise


def _ranks(plan: Plan, shards: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Each copy's place in the order _kept_first gives (`shards`: each key's shard in the
    plan; `keys` sortable, as _PlanEntries.columns gives them): by split, then key, sorted in C
    with no tuple a copy."""
    splits = [spec.split for spec in plan.shards]
    order = sorted(set(splits), key=lambda split: _kept_first((split, "")))
    split_of = np.array([order.index(split) for split in splits], np.intp)[shards]
    by_key = np.argsort(keys, kind="stable")
    ranked = by_key[np.argsort(split_of[by_key], kind="stable")]
    rank = np.empty(len(keys), np.intp)
    rank[ranked] = np.arange(len(keys))
    return rank


class _PlanEntries:
    """The plan's items in order as (split, item), found by position: no list of them all
    is made for the few candidates looked up."""

    def __init__(self, plan: Plan) -> None:
        self.shards = plan.shards
        self.starts = np.cumsum([0, *(len(spec.items) for spec in plan.shards)])

    def __getitem__(self, position: int) -> Entry:
        shard = int(np.searchsorted(self.starts, position, side="right")) - 1
        spec = self.shards[shard]
        return spec.split, spec.items[position - int(self.starts[shard])]

    def columns(
        self, positions: np.ndarray, sortable: bool = False
    ) -> tuple[np.ndarray, list | np.ndarray, list]:
        """The shard, key and labelling of the items at these positions (ascending): an array
        and two lists; `sortable`: the keys as one array that sorts as they do (_sortable)."""
        shards = np.searchsorted(self.starts, positions, side="right") - 1
        runs: list = []  # the keys of each run of positions in one shard
        labels: list = []
        cuts = np.flatnonzero(np.r_[True, shards[1:] != shards[:-1], True]).tolist()
        for start, end in itertools.pairwise(cuts if len(positions) else ()):  # a shard's
            shard = int(shards[start])
            for first in range(start, end, _READ_AT_ONCE):  # a few strings at a time
                last = min(end, first + _READ_AT_ONCE)
                at = (positions[first:last] - self.starts[shard]).tolist()
                some_keys, some_labels, some_fields = picked(self.shards[shard].items, at, "key",
                                                             "label", "fields")  # fmt: skip
                runs.append(_sortable(some_keys) if sortable else some_keys)
                labels += map(labelling, some_labels, some_fields)
        if not sortable:
            return shards, list(itertools.chain.from_iterable(runs)), labels
        keys = np.concatenate(runs) if runs else np.zeros(0, "S1")
        wide = (
            len(keys)
            and keys.dtype != object
            and (keys.itemsize > _WIDEST + np.char.str_len(keys).mean())
        )
        if keys.dtype == object or wide:
            keys = np.array(self.columns(positions)[1], object)  # the strings themselves
        return shards, keys, labels


# Keys read at once by _PlanEntries.columns: made sortable, they are a byte a character.
_READ_AT_ONCE = 4096
# A key array's width (its longest key's bytes) may pass the mean by this much before the
# strings themselves take less (a str is 49 bytes and its text, beside a pointer of 8).
_WIDEST = 57


def _sortable(keys: list[str]) -> np.ndarray:
    """The keys as fixed-width UTF-8 bytes (lone surrogates passed as such), which numpy sorts
    in C as Python sorts the keys (UTF-8 keeps the code points' order), at a byte a character
    where a str takes 49 more; an object array of them where a key holds a NUL (numpy's bytes
    lose their trailing NULs)."""
    encoded = [key.encode("utf-8", "surrogatepass") for key in keys]
    if b"\x00" in b"".join(encoded):
        return np.array(keys, object)
    return np.array(encoded, f"S{max([1, *map(len, encoded)])}")


def dedup(
    dataset: Dataset, options: PackOptions, threads: int,
    listed: Mapping[str, stamps.Stamp] | None = None,
) -> tuple[Dataset, list[Group], Noted]:  # fmt: skip
    """--dedup exact|near: every item read and keyed on `threads` threads (reads, CRC32C and
    OpenCV leave the interpreter's lock), the copies confirmed, and all but the kept copy of
    each group moved from the splits to the skipped, `duplicate of <record_name>` (`near
    duplicate of` where only the perceptual hashes tell them alike); a warning where a near
    bucket was crowded. `listed`: as content_keys takes it. Returns the dataset, the groups and
    what contents.json notes of them (noted)."""
    entries = [(s, item) for s in sorted(dataset.splits) for item in dataset.splits[s]]
    keys = content_keys(entries, dataset, options, threads, listed)
    groups, same, crowded = find_groups(entries, keys, dataset, options)
    warnings = (*dataset.warnings, *crowded_warning(crowded))
    dropped = drop_reasons(groups, same)
    splits = {
        split: tuple(item for item in items if (split, item.key) not in dropped)
        for split, items in dataset.splits.items()
    }
    skipped = tuple((key, reason) for (_, key), reason in sorted(dropped.items()))
    dataset = replace(dataset, splits=splits, skipped=dataset.skipped + skipped,
                      warnings=warnings)  # fmt: skip
    return dataset, groups, noted(entries, keys, groups, dropped, [key.stamp for key in keys])


def noted(
    entries: list[Entry], keys: list[ContentKey], groups: list[Group],
    dropped: Mapping[tuple[str, str], str], marks: Sequence[stamps.Stamp],
) -> Noted:  # fmt: skip
    """What contents.json notes of these groups among `entries` (keyed by `keys`, stamped as
    `marks` say before they were read): the copies `dropped` left out, each with its content
    key and mtime, for a grow to find them again unread; and with --dedup near, every image's
    perceptual hash, grouped or not, so that a grow finds a new near copy of any held image
    without reading it again."""
    left_out, near = [], []
    for (split, item), key, mark in zip(entries, keys, marks, strict=True):
        if (split, item.key) in dropped:
            mtime = stamps.mtime_to_keep(mark, key.size) or 0
            left_out.append((split, item, key.crc, key.size, mtime))
        if key.near is not None:
            near.append((item.key, key.near))
    return Noted(dropped_copies(left_out, copy_numbers(groups)), tuple(near))


def find_groups(
    entries: list[Entry],
    keys: list[ContentKey],
    dataset: Dataset,
    options: PackOptions,
    known: Sequence[int] | None = None,
    labelled: Mapping[str, object] | None = None,
) -> tuple[list[Group], dict[Member, int], int]:
    """The groups of copies among `entries` (whose content keys are `keys`: near ones too with
    --dedup near; `known` and `labelled` as confirm takes them), each its kept copy first; the
    number of each exact copy's exact group; how many images sat in a crowded near bucket."""
    crc = np.array([k.crc for k in keys], np.uint32)
    size = np.array([k.size for k in keys], np.uint64)
    digests = [k.digest for k in keys]
    groups = confirm(candidates(size, crc), entries, dataset, options, known, digests, labelled)
    same = {member: i for i, group in enumerate(groups) for member in group}
    crowded = 0
    if options.dedup == "near":
        groups, crowded = _near_groups(keys, entries, groups, options.near_distance, labelled)
    return groups, same, crowded


def crowded_warning(crowded: int) -> tuple[str, ...]:
    """What a run says of the images --dedup near found in crowded buckets (none: nothing)."""
    if not crowded:
        return ()
    return (f"{_CROWDED}{crowded:,} images have hashes alike in most bits (flat, blank or "
            f"synthetic images?); each was compared with {near.MAX_BUCKET} of them alone, so "
            "near copies among them may be kept",)  # fmt: skip


def with_splits(
    skipped: Iterable[tuple[str, str]], groups: list[Group] | None
) -> Iterator[tuple[str | None, str, str]]:
    """(split, key, reason) of a dataset's (key, reason) skips: a copy --dedup left out (each
    member of `groups` but the first: keys are unique across the splits) with its split, as a
    grow lists it; the scan's with none."""
    split_of = {member[1]: member[0] for group in groups or () for member in group[1:]}
    return ((split_of.get(key), key, reason) for key, reason in skipped)


def drop_reasons(groups: list[Group], same: dict[Member, int]) -> dict[tuple[str, str], str]:
    """(split, key) -> skip reason of each copy but the first of each group: `duplicate of
    <record_name>`, `near duplicate of` where only the perceptual hashes tell them alike
    (`same`: find_groups's numbers of the exact groups); a copy labelled otherwise than the
    kept one says so (its labels are not packed)."""
    dropped = {}
    for kept, *copies in groups:
        exact, name = same.get(kept, -1), record_name(*kept[:2])
        near_, exact_ = f"near duplicate of {name}", f"duplicate of {name}"  # one a group
        for copy in copies:
            reason = exact_ if same.get(copy) == exact else near_
            dropped[copy[:2]] = reason + _OTHERWISE * (copy[2] != kept[2])
    return dropped


def content_keys(
    entries: list[Entry], dataset: Dataset, options: PackOptions, threads: int,
    listed: Mapping[str, stamps.Stamp] | None = None,
) -> list[ContentKey]:  # fmt: skip
    """The ContentKey of each entry's item, read on `threads` threads (reads, CRC32C, XXH3
    and OpenCV leave the interpreter's lock), each fetching image URLs as a worker does, the
    per-host cap shared as `threads` workers' (Storage.reading_together); (0, 0, None) for one
    the loader refuses. Each key's stamp is its read's, or where the read takes none (an
    object's) the item's in `listed` (key -> its stamp listed before the read; None: none)."""
    # here: concurrent.futures brings logging; only a pack that confirms copies hashes on threads
    from concurrent.futures import ThreadPoolExecutor

    size = max(1, min(HASH_CHUNK, -(-len(entries) // max(1, threads))))
    chunks = [entries[i : i + size] for i in range(0, len(entries), size)]
    stop = threading.Event()
    # each thread's loader cache, kept across its chunks (dropped as the threads end): a
    # Parquet row group is read once a thread, not once a chunk of HASH_CHUNK of its rows
    caches = threading.local()
    with dataset.root.reading_together(threads), ThreadPoolExecutor(max(1, threads)) as pool:
        try:
            return list(itertools.chain.from_iterable(
                pool.map(lambda chunk: _keys(chunk, dataset, options, stop, listed or {},
                                             vars(caches).setdefault("cache", {})),
                         chunks)))  # fmt: skip
        except BaseException:
            # Ctrl-C, SIGTERM or a chunk's error: the threads end now (their requests in flight
            # cut, no next item read), not when their chunks do: the pool's exit waits for them
            stop.set()
            dataset.root.stop_reading()
            raise


def _near_groups(
    keys: list[ContentKey], entries: list[Entry], exact: list[Group], distance: int,
    labelled: Mapping[str, object] | None = None,
) -> tuple[list[Group], int]:  # fmt: skip
    """The groups of images whose perceptual hashes are within `distance` bits of the kept
    one's (near.star_groups: never a chain), each exact group inside one (an image with no
    hash is in its exact group alone); and how many images sat in a crowded bucket."""
    live = [i for i, key in enumerate(keys) if key.near is not None]
    unique, inverse = np.unique(np.array([keys[i].near for i in live], np.uint64),
                                return_inverse=True)  # fmt: skip
    close, crowded = near.close_hashes(unique, distance)
    counts = np.bincount(inverse.ravel(), minlength=len(unique))
    wanted = counts > 1
    wanted[close.ravel()] = True
    members: dict[int, Group] = defaultdict(list)  # the images of each hash that has company
    for position, u in zip(live, inverse.ravel().tolist(), strict=True):
        if wanted[u]:
            members[u].append(_member(entries[position], labelled))
    for group in members.values():
        group.sort(key=_kept_first)
    order = sorted(members, key=lambda u: _kept_first(members[u][0]))
    groups = [sorted(itertools.chain.from_iterable(members[u] for u in star), key=_kept_first)
              for star in near.star_groups(order, close)]  # fmt: skip
    hashed = set(itertools.chain.from_iterable(members.values()))
    groups = [g for g in groups if len(g) > 1] + [g for g in exact if g[0] not in hashed]
    return sorted(groups, key=lambda g: _kept_first(g[0])), int(counts[crowded].sum())


def _keys(
    chunk: list[Entry], dataset: Dataset, options: PackOptions, stop: threading.Event,
    listed: Mapping[str, stamps.Stamp], cache: dict,
) -> list[ContentKey]:  # fmt: skip
    """The ContentKey of each item of a chunk, `cache` what the source's loader keeps between
    items; (0, 0, None) for one the loader refuses; those read before `stop` was set alone (the
    pass stopped: no one takes them)."""
    source, limit = dataset.source, max_file_bytes(options.max_pixels)
    # each stamp from its file's read, before its first byte (a file changed since is read
    # again), kept if the file was settled by now: as the workers stamp
    stamping, settled = stamps.loads_whole_files(source), stamps.settled_before()
    keys = []
    items = [item for _, item in chunk]
    with dataset.root.reading(dataset.source.item_files(items), limit) as src:
        for item in items:
            if stop.is_set():
                break
            try:
                loaded, stamp = stamps.load_stamped(item, src, limit, stamping, source, options,
                                                    cache, listed.get(item.key))  # fmt: skip
            except ImageError:
                keys.append(ContentKey(0, 0, None))
                continue
            keys.append(ContentKey(*content_key(loaded), _hash(loaded, options),
                                   content_digest(loaded),
                                   stamps.settled(stamp, settled)))  # fmt: skip
    return keys


def _hash(loaded: bytes | np.ndarray, options: PackOptions) -> int | None:
    """The perceptual hash --dedup near compares; None without it, or for what will not decode
    (the worker then skips it with the reason)."""
    if options.dedup != "near":
        return None
    try:
        return near.image_hash(loaded, options.max_pixels)
    except BadImage:
        return None


def removed(groups: list[Group]) -> dict[str, int]:
    """The copies --dedup exact leaves out of each split: all but each group's first."""
    return dict(Counter(member[0] for group in groups for member in group[1:]))


class _Groups:
    """Groups held as lists of members, read as summary() reads a PlanCopies."""

    def __init__(self, groups: list[Group]) -> None:
        self.groups = groups
        self.images = sum(map(len, groups))

    def __len__(self) -> int:
        return len(self.groups)

    def across(self) -> Counter[tuple[str, str]]:
        """(split, other split) -> the images of the split whose group is also in the other."""
        across: Counter[tuple[str, str]] = Counter()
        for group in self.groups:
            per_split = Counter(member[0] for member in group)
            for split, other in itertools.permutations(per_split, 2):
                across[split, other] += per_split[split]
        return across

    def conflicts(self) -> list[int]:
        """The groups whose copies carry more than one labelling: the same image filed under
        two classes or annotated otherwise (a wrong label somewhere, which --dedup picks)."""
        return [i for i, g in enumerate(self.groups) if len({member[2] for member in g}) > 1]

    def names(self, groups: Sequence[int], most: int, otherwise: bool = False) -> list[list[str]]:
        """The record_name of the first `most` copies of each of these groups (`otherwise`:
        each group's first copy labelled otherwise than its kept one second, the pair the
        label-conflict warning names)."""
        named = []
        for group in (self.groups[g] for g in groups):
            other = [m for m in group if m[2] != group[0][2]][:1] if otherwise else []
            listed = [group[0], *other, *(m for m in group[1:] if m not in other)]
            named.append([record_name(*member[:2]) for member in listed[:most]])
        return named


def summary(groups: list[Group] | PlanCopies, removed: int, options: PackOptions) -> dict:
    """index.json's `duplicates`: totals, the images of each split also in another, the
    groups that carry more than one label (each its kept copy, then its first copy labelled
    otherwise: two that differ), and the first MAX_LISTED_GROUPS groups by record_name (each
    its first MAX_LISTED_KEYS)."""
    found = groups if isinstance(groups, PlanCopies) else _Groups(groups)
    conflicts = found.conflicts()
    return {
        "method": "near" if options.dedup == "near" else "exact",
        **({"near_distance": options.near_distance} if options.dedup == "near" else {}),
        "groups": len(found),
        "images": found.images,
        "copies": found.images - len(found),
        "removed": removed,
        "across_splits": [
            {"split": split, "also_in": other, "images": n}
            for (split, other), n in sorted(found.across().items())
        ],
        "label_conflicts": len(conflicts),
        "listed": found.names(range(min(len(found), MAX_LISTED_GROUPS)), MAX_LISTED_KEYS),
        "conflicts_listed": found.names(
            conflicts[:MAX_LISTED_CONFLICTS], MAX_LISTED_KEYS, otherwise=True
        ),
    }


def warnings(doc: dict) -> list[str]:
    """The warnings of a summary() for the pack's: the copies labelled differently, the
    first group's kept copy and its first labelled otherwise named."""
    count, listed = doc.get("label_conflicts"), doc.get("conflicts_listed") or [[]]
    if not count:
        return []
    example = " and ".join(printable(name) for name in listed[0][:2])
    dedup = (f"--dedup {doc.get('method', 'exact')} kept the first copy's and skipped the "
             "others'" if doc.get("removed") else "--dedup exact keeps the first copy's and "
             "skips the others'")  # fmt: skip
    return [f"{_CONFLICT}{count:,} {'group' if count == 1 else 'groups'} of copies "
            f"{'is' if count == 1 else 'are'} {LABELLED_DIFFERENTLY}: another class, or other "
            f"boxes, masks or fields (e.g. {example}); fix the labels: {dedup} (index.json's "
            "duplicates.conflicts_listed names them)"]  # fmt: skip


def rewarned(held: tuple[str, ...], doc: dict, scanned: tuple[str, ...]) -> tuple[str, ...]:
    """A grown index's warnings, as a fresh pack of SRC tells them: the grow's scan's
    (`scanned`: a class folder filled since is no more said to be empty), the held ones of
    the run's own (its shard cut, crowded near buckets), and its label conflicts told anew
    from the grown dataset's summary() (gone with the conflicts)."""
    kept = (w for w in held if w.startswith((_CROWDED, CUT_WARNING)))
    return (*scanned, *kept, *warnings(doc))


def all_removed(doc: Mapping) -> bool:
    """Whether --dedup removed every copy an index's `duplicates` counts: its leaks across
    splits are then SRC's, no more the pack's."""
    return bool(doc["removed"]) and doc["removed"] >= doc["copies"]


def also_in(images: int, doc: Mapping) -> str:
    """'is also in' of a leak the pack holds, 'was also in' of one --dedup removed."""
    if all_removed(doc):
        return "was also in" if images == 1 else "were also in"
    return "is also in" if images == 1 else "are also in"


def lines(doc: object) -> list[str]:
    """What the pack summary and inspect print of an index's `duplicates` (read as untrusted:
    anything not as summary() writes it prints nothing)."""
    try:
        groups, copies, removed = doc["groups"], doc["copies"], doc["removed"]
        near_ = doc.get("method") == "near"
        alike = f"near-same pixels, within {doc['near_distance']} bits" if near_ else "same bytes"
        said = [f"{copies:,} duplicate {'copy' if copies == 1 else 'copies'} of "
                f"{groups:,} {'image' if groups == 1 else 'images'} ({alike})"]  # fmt: skip
        if removed:
            said.append(f"  {removed:,} removed by --dedup {'near' if near_ else 'exact'} "
                        "(skipped as duplicates)")  # fmt: skip
        said += [f"  {a['images']:,} {'image' if a['images'] == 1 else 'images'} of "
                 f"{printable(a['split'])} {also_in(a['images'], doc)} "
                 f"{printable(a['also_in'])}{' before --dedup' * all_removed(doc)}"
                 for a in doc["across_splits"]]  # fmt: skip
        if conflicts := doc.get("label_conflicts"):
            said.append(f"  {conflicts:,} {'group' if conflicts == 1 else 'groups'} of copies "
                        f"{LABELLED_DIFFERENTLY} (label conflicts)")  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return []
    return said if groups else []
