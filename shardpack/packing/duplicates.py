"""Exact duplicates: images with the same bytes, found from the content keys the workers note
(facts.py: CRC32C and size), confirmed by sha256 of the candidates alone, and --dedup exact
(or near: also images whose perceptual hashes are close, near.py), which keeps one image of
each group and skips the others before the plan is made."""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from shardpack.errors import ImageError, printable
from shardpack.images import BadImage, max_file_bytes
from shardpack.options import PackOptions
from shardpack.packing import near
from shardpack.packing.facts import content_bytes, content_key, table
from shardpack.packing.plan import Plan, ShardResult
from shardpack.sources import Dataset, Item

# Splits a model is judged on: their copy of an image is the one --dedup keeps.
EVAL_SPLITS = frozenset({"test", "testing", "validation", "valid", "val", "eval", "dev"})
# What index.json lists: the first groups, each its first keys (the totals count them all).
MAX_LISTED_GROUPS = 1000
MAX_LISTED_KEYS = 100
# Items a thread of the --dedup pass hashes at a time (one read-ahead window on a store).
HASH_CHUNK = 256

Entry = tuple[str, Item]  # (split, item)
Group = list[tuple[str, str]]  # (split, key) of each copy, the one kept first


def _kept_first(member: tuple[str, str]) -> tuple[bool, str, str]:
    """The order of a group: evaluation splits first, then by split and key."""
    split, key = member
    return split not in EVAL_SPLITS, split, key


def candidates(crc: np.ndarray, size: np.ndarray) -> list[np.ndarray]:
    """Positions that share (crc, size) with another, one array each; size 0 (nothing noted)
    never. A sort of one 64-bit key: a million items in well under a second."""
    live = np.flatnonzero(size > 0)
    # a size past 2**32 wraps: a false candidate more at worst, which sha256 then tells apart
    key = (size[live].astype(np.uint64) << np.uint64(32)) | crc[live].astype(np.uint64)
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    counts = np.diff(np.r_[starts, len(ordered)])
    shared = counts > 1
    return [live[order[s : s + c]] for s, c in zip(starts[shared], counts[shared], strict=True)]


def confirm(
    sets: list[np.ndarray],
    entries: Sequence[Entry] | _PlanEntries,
    dataset: Dataset,
    options: PackOptions,
) -> list[Group]:
    """Split each candidate set by the sha256 of its bytes, re-read through the source's
    loader; the groups of two or more, each its kept copy first, in the order of those. One
    read-ahead serves every set: many pairs of image URLs are fetched many at a time, not a
    pair at a time."""
    load, cache, limit = dataset.source.load, {}, max_file_bytes(options.max_pixels)
    groups: list[Group] = []
    every = [[entries[p] for p in positions] for positions in sets]
    items = (item for members in every for _, item in members)
    with dataset.root.reading(dataset.source.item_files(items), limit) as src:
        for members in every:
            by_digest: dict[bytes, Group] = defaultdict(list)
            for split, item in members:
                try:
                    data = content_bytes(load(item, src, options, cache))
                except ImageError:  # gone or changed since: not a copy we can vouch for
                    continue
                by_digest[hashlib.sha256(data).digest()].append((split, item.key))
            groups += [sorted(g, key=_kept_first) for g in by_digest.values() if len(g) > 1]
    return sorted(groups, key=lambda g: _kept_first(g[0]))


def found_in_shards(
    plan: Plan, results: list[ShardResult], dataset: Dataset, options: PackOptions
) -> list[Group]:
    """The groups of exact copies among the records the workers wrote."""
    by_file = {r.file: r for r in results}
    tables = [table(by_file[spec.file].content, len(spec.items)) for spec in plan.shards]
    rows = np.concatenate(tables) if tables else table(b"", 0)
    entries = _PlanEntries(plan)
    return confirm(candidates(rows["crc"], rows["size"]), entries, dataset, options)


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


def dedup(dataset: Dataset, options: PackOptions, threads: int) -> tuple[Dataset, list[Group]]:
    """--dedup exact|near: every item read and keyed on `threads` threads (reads, CRC32C and
    OpenCV leave the interpreter's lock), the copies confirmed, and all but the kept copy of
    each group moved from the splits to the skipped, `duplicate of <split>/<key>` (`near
    duplicate of` where only the perceptual hashes tell them alike)."""
    entries = [(s, item) for s in sorted(dataset.splits) for item in dataset.splits[s]]
    keys = content_keys(entries, dataset, options, threads)
    crc = np.array([k[0] for k in keys], np.uint32)
    size = np.array([k[1] for k in keys], np.uint64)
    groups = confirm(candidates(crc, size), entries, dataset, options)
    same = {member: group[0] for group in groups for member in group}
    if options.dedup == "near":
        groups = _near_groups(keys, entries, groups, options.near_distance)
    dropped = {}
    for kept, *copies in groups:
        dropped.update({copy: f"{'' if same.get(copy) == kept else 'near '}duplicate of "
                              f"{kept[0]}/{kept[1]}" for copy in copies})  # fmt: skip
    splits = {
        split: tuple(item for item in items if (split, item.key) not in dropped)
        for split, items in dataset.splits.items()
    }
    skipped = tuple((key, reason) for (_, key), reason in sorted(dropped.items()))
    return replace(dataset, splits=splits, skipped=dataset.skipped + skipped), groups


def content_keys(
    entries: list[Entry], dataset: Dataset, options: PackOptions, threads: int
) -> list[tuple[int, int, int | None]]:
    """(crc, size, perceptual hash or None) of each entry's item, read on `threads` threads
    (reads, CRC32C and OpenCV leave the interpreter's lock); the hash with --dedup near alone;
    (0, 0, None) for one the loader refuses."""
    chunks = [entries[i : i + HASH_CHUNK] for i in range(0, len(entries), HASH_CHUNK)]
    with ThreadPoolExecutor(max(1, threads)) as pool:
        return list(itertools.chain.from_iterable(
            pool.map(lambda chunk: _keys(chunk, dataset, options), chunks)))  # fmt: skip


def _near_groups(
    keys: list[tuple[int, int, int | None]], entries: list[Entry], exact: list[Group], distance: int
) -> list[Group]:
    """The groups of images whose perceptual hashes are within `distance` bits, joined with
    the exact groups (an image with no hash is in its exact group alone)."""
    live = [i for i, key in enumerate(keys) if key[2] is not None]
    hashes = np.array([keys[i][2] for i in live], np.uint64)
    pairs = np.array(live, np.int64)[near.near_pairs(hashes, distance)].reshape(-1, 2)
    position = {(split, item.key): i for i, (split, item) in enumerate(entries)}
    joins = [(position[g[0]], position[m]) for g in exact for m in g[1:]]
    pairs = np.concatenate([pairs, np.array(joins, np.int64).reshape(-1, 2)])
    found = near.components(len(entries), pairs)
    groups = [sorted(((entries[i][0], entries[i][1].key) for i in g), key=_kept_first)
              for g in found]  # fmt: skip
    return sorted(groups, key=lambda g: _kept_first(g[0]))


def _keys(
    chunk: list[Entry], dataset: Dataset, options: PackOptions
) -> list[tuple[int, int, int | None]]:
    """(crc, size, perceptual hash or None) of each item of a chunk, the hash with --dedup
    near alone; (0, 0, None) for one the loader refuses."""
    load, cache, limit = dataset.source.load, {}, max_file_bytes(options.max_pixels)
    keys = []
    items = [item for _, item in chunk]
    with dataset.root.reading(dataset.source.item_files(items), limit) as src:
        for item in items:
            try:
                loaded = load(item, src, options, cache)
            except ImageError:
                keys.append((0, 0, None))
                continue
            keys.append((*content_key(loaded), _hash(loaded, options)))
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
    return dict(Counter(split for group in groups for split, _ in group[1:]))


def summary(groups: list[Group], removed: int, options: PackOptions) -> dict:
    """index.json's `duplicates`: totals, the images of each split also in another, and the
    first MAX_LISTED_GROUPS groups as `<split>/<key>` (each its first MAX_LISTED_KEYS)."""
    across: Counter[tuple[str, str]] = Counter()
    for group in groups:
        per_split = Counter(split for split, _ in group)
        for split, other in itertools.permutations(per_split, 2):
            across[split, other] += per_split[split]
    images = sum(map(len, groups))
    return {
        "method": "near" if options.dedup == "near" else "exact",
        **({"near_distance": options.near_distance} if options.dedup == "near" else {}),
        "groups": len(groups),
        "images": images,
        "copies": images - len(groups),
        "removed": removed,
        "across_splits": [
            {"split": split, "also_in": other, "images": n}
            for (split, other), n in sorted(across.items())
        ],
        "listed": [
            [f"{split}/{key}" for split, key in group[:MAX_LISTED_KEYS]]
            for group in groups[:MAX_LISTED_GROUPS]
        ],
    }


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
                 f"{printable(a['split'])} {'is' if a['images'] == 1 else 'are'} also in "
                 f"{printable(a['also_in'])}" for a in doc["across_splits"]]  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return []
    return said if groups else []
