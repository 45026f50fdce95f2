"""An item's stamp: the size and modification time (ns) of its image file just before a worker
read it: its read's own fstat, before the first byte (Storage.read_stamped; the worker notes it
in its facts table). OUT/.shardpack.stamps keeps each
packed item's mtime (its size is the content key's, in contents.json), so that `pack --append`
and `--update` take a file whose size and mtime are unchanged as unchanged without reading it
(rsync's quick check: a rewrite that keeps both goes unseen).

Only an item that is a whole file, read whole by the default loader (a folder tree's image, a
manifest's image), gets one, and only where its mtime is not 0 (settled()). A record inside a
file (a table's row, a CIFAR batch's, a tar member, a shard's) gets none: its bytes are read
and keyed as the workers key them. An object in a store is stamped by its folder's listing
(Storage.stamps: a request a thousand objects), as its read takes none: the parent lists the
folders of a shard's objects before sending it (with_listed, ShardSpec.listed), so the stamp
noted is never newer than the bytes read (a rewrite after the listing is another stamp at the
next grow: read again), and a grow and unchanged() compare it with a fresh listing. An object
a grow read before its workers (its compare, --dedup), whose bytes they take from its
UrlSpool, is noted with the stamp listed before that read, not the later listing's; an object
whose stamp is unchanged keeps its record, and its stamp, when --update rewrites its shard
(kept.py). A store whose listing gives no modification time (memory://) gives none.

An item skipped when packed (a damaged image) keeps the stamp of the file its worker's read
refused (the read's own fstat, as a record's: the bytes that would not decode, an empty
file's, a file over the limit's), as `"key":[size,mtime]`: a grow reads it again once its
file's stamp now (skip_stamps: a stat) is another, and leaves it unread while it is the noted
one. A skip without one (a file that could not be opened, a missing one or no regular file;
stamps of an older shardpack) is read again where its file now has a stamp, once: then it
has one. A file of mtime 0, a record inside a file and an object of a store whose listing
gives no mtime have none: their skips stay. Unlike a record's, a skip's stamp is kept however
recent its file (not settled): a grow run just after the file was fixed must see it changed,
and a bad file packed just after it was written must not be read again at every grow; what
that misses (a rewrite of the same size within the clock tick of the read) leaves the item
skipped, as before, until its file is touched.

The stamps say what the source was, not what the dataset is: a hidden file beside the journal,
outside what a pack must reproduce byte for byte. It is written after index.json, for the
index whose plan_digest it names; a stop before it leaves the older stamps, which can only send
a file to be read again. Read as untrusted: bounded in bytes and in values (no more than its
index's records need), and anything off is taken as no stamps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from itertools import chain, islice
from typing import NamedTuple

import numpy as np

from shardpack.index import Index, json_values
from shardpack.layout import STAMPS_NAME
from shardpack.options import PackOptions
from shardpack.packing.contents import RENDER_CHUNK
from shardpack.packing.facts import facts_of
from shardpack.packing.packeditems import PackedItems, columns
from shardpack.packing.plan import Plan, ShardResult, ShardSpec
from shardpack.sources import Item, Source
from shardpack.sources.source import read_stamped_image
from shardpack.storage import Storage

FORMAT = "shardpack-stamps"
MAX_STAMPS_BYTES = 1 << 30  # a million items' keys and mtimes fit many times over
# The JSON values a stamps file may hold per record of its index (a key and an mtime each)
# and per item skipped (a key and a list of two), beyond a few of its own: past that it is
# planted, and taken as no stamps, unparsed.
VALUES_PER_RECORD = 2
VALUES_PER_SKIP = 4
Stamp = tuple[int, int] | None  # (size, mtime_ns); None: none taken, the bytes tell
# A file modified this close before its stamp was taken gets none: a rewrite just after the
# worker read it could fall in the same tick of the filesystem's clock (2 s on FAT) and keep
# the mtime the stamp holds.
RACY_NS = 2_000_000_000


def take_stamps(source: Source, root: Storage, items: Iterable[Item]) -> list[Stamp]:
    """The stamp of each item's file (under root, read by source) now (None for one that has
    none, see above)."""
    oldest = settled_before()
    return [settled(stamp, oldest) for stamp in _stamps_now(source, root, items)]


def listed_before_read(source: Source, root: Storage, items: Iterable[Item]) -> dict[str, Stamp]:
    """key -> the stamp of each item now, listed before a read ahead of the workers (--dedup's
    keys, a grow's compare) whose bytes they take from the run's UrlSpool (Planned.stamped,
    with_listed's `read`), where the store's reads take none (an object's; none asked of a
    disk, whose reads take their own)."""
    if not root.stamps_listed:
        return {}
    items = list(items)
    now = take_stamps(source, root, items)
    return {item.key: stamp for item, stamp in zip(items, now, strict=True)}


def skip_stamps(source: Source, root: Storage, items: Iterable[Item]) -> list[Stamp]:
    """The stamp of each skipped item's file now, as a worker's skip notes it (above: however
    recent; None for one that has none)."""
    return [now if now and now[1] else None for now in _stamps_now(source, root, items)]


def _stamps_now(source: Source, root: Storage, items: Iterable[Item]) -> list[Stamp]:
    """Storage.stamps of the items that are whole files (None for the others), in one call."""
    items = list(items)
    whole = loads_whole_files(source)
    files = [i for i, item in enumerate(items) if whole and item.position is None]
    found: list[Stamp] = [None] * len(items)
    for i, stamp in zip(files, root.stamps(items[i].path for i in files), strict=True):
        found[i] = stamp
    return found


def load_stamped(
    item: Item, src: Storage, limit: int, stamping: bool, source: Source, options: PackOptions,
    cache: dict, listed: Stamp = None,
) -> tuple[bytes | np.ndarray, Stamp]:  # fmt: skip
    """An item's image as its source gives it, and its file's stamp where its read takes one
    (`stamping`: loads_whole_files): the read's own, no stat of its own; where the read takes
    none (an object's), `listed` (ShardSpec.listed: its listing's, before the read)."""
    if stamping and item.position is None:
        return read_stamped_image(item, src, limit, listed)
    return source.load(item, src, options, cache), None


def with_listed(
    specs: list[ShardSpec], source: Source, root: Storage, read: Mapping[str, Stamp] | None = None
) -> list[ShardSpec]:
    """The specs with their items' stamps from their folders' listings (ShardSpec.listed)
    where the store's reads take none (Storage.stamps_listed: an object store), taken now, in
    one call (each folder listed once), before a worker reads them: a rewrite after the
    listing is another stamp at the next grow. `read`: key -> the stamp listed before a read
    ahead of the workers (a grow's compare, whose bytes the workers take from its UrlSpool),
    noted in place of the listing now, which may be newer than those bytes."""
    held = [spec for spec in specs if isinstance(spec.items, tuple | PackedItems)]
    if not root.stamps_listed or not held:  # (a streamed range's items are not held)
        return specs
    now = iter(take_stamps(source, root, chain.from_iterable(spec.items for spec in held)))
    listed = {}  # file -> (size, mtime) int64 pairs, (0, 0) for none: 16 bytes an item
    for spec in held:
        got = list(islice(now, len(spec.items)))
        if read:
            (keys,) = columns(spec.items, "key")
            got = [read.get(key, stamp) for key, stamp in zip(keys, got, strict=True)]
        if any(got):
            listed[spec.file] = np.array([s or (0, 0) for s in got], "<i8").tobytes()
    return [replace(spec, listed=listed[spec.file]) if spec.file in listed else spec
            for spec in specs]  # fmt: skip


def listed_of(spec: ShardSpec) -> list[Stamp]:
    """The stamp of each item of the shard as with_listed noted it (None: none)."""
    if spec.listed is None:
        return [None] * len(spec.items)
    pairs = np.frombuffer(spec.listed, "<i8").reshape(-1, 2).tolist()
    return [(size, mtime) if mtime else None for size, mtime in pairs]


def loads_whole_files(source: Source) -> bool:
    """Whether the source's items are their files' bytes (the default loader): those whose
    position is None get stamps."""
    return type(source).load is Source.load


def unchanged(
    results: list[ShardResult], specs: Mapping[str, ShardSpec], source: Source, root: Storage
) -> list[bool]:
    """Whether every item of each finished shard is a file whose size and mtime now are those
    its worker noted as it read it (the shard's facts table), asked in one call: a shard that
    the same job run again keeps holds the bytes its files hold now. An http(s) URL of a list
    names its image, taken as unchanged as a grow takes it (nothing is asked of its server:
    the same command again fetches none of a finished pack's URLs). Any other item without a
    stamp (a record inside a file, a file modified as it was read) or not held (a streamed
    range's) is not known unchanged: its shard is written again."""
    held = [r for r in results if isinstance(specs[r.file].items, tuple)]
    now = iter(take_stamps(source, root, chain.from_iterable(specs[r.file].items for r in held)))
    web = getattr(root, "web_url", None)  # an ImageRoot's: the URL an image path names
    same = set()
    for result in held:
        items = specs[result.file].items
        facts = facts_of(result.content, len(items))
        noted = zip(items, islice(now, len(items)), facts["size"].tolist(),
                    facts["mtime"].tolist(), strict=True)  # fmt: skip
        if all((stamp is not None and stamp == (size, mtime))
               or (web is not None and item.path is not None and web(item.path) is not None)
               for item, stamp, size, mtime in noted):  # fmt: skip
            same.add(result.file)
    return [result.file in same for result in results]


def settled_before() -> int:
    """The mtime (ns) a file's stamp taken from now on must be older than to be kept."""
    return time.time_ns() - RACY_NS


def settled(stamp: Stamp, oldest: int) -> Stamp:
    """The stamp, where its file was modified before `oldest` (settled_before); else None. An
    mtime of 0 (the epoch: files a reproducible archive unpacked) is none: 0 is what a facts
    table notes for a record without a stamp, and a file's 0 then agreed with it."""
    return stamp if stamp is not None and stamp[1] != 0 and stamp[1] < oldest else None


def mtime_to_keep(stamp: Stamp, size: int) -> int | None:
    """The mtime kept for an item whose content key's size is `size`: the stamp's, where the
    stamp's size is that (else the file changed as it was read: none)."""
    return stamp[1] if stamp is not None and stamp[0] == size else None


def written(plan: Plan, results: list[ShardResult]) -> dict[str, int | None]:
    """key -> mtime of each planned item, as its worker noted it (None: no stamp, or not
    written)."""
    by_file = {r.file: r for r in results}
    return {key: mtime for spec in plan.shards for key, mtime in noted(spec, by_file[spec.file])}


def noted(spec: ShardSpec, result: ShardResult) -> Iterator[tuple[str, int | None]]:
    """(key, mtime) of each item of the shard, as its worker noted it (None: no stamp, or not
    written)."""
    rows = facts_of(result.content, len(spec.items))
    for item, size, mtime in zip(spec.items, rows["size"].tolist(), rows["mtime"].tolist(),
                                 strict=True):  # fmt: skip
        yield item.key, mtime if size and mtime else None


def skipped(plan: Plan, results: list[ShardResult]) -> dict[str, tuple[int, int]]:
    """key -> stamp of each planned item skipped whose worker noted one (ShardFacts.skip)."""
    by_file = {r.file: r for r in results}
    return {key: stamp for spec in plan.shards
            for key, stamp in _skipped(spec, by_file[spec.file])}  # fmt: skip


def _skipped(spec: ShardSpec, result: ShardResult) -> Iterator[tuple[str, tuple[int, int]]]:
    """(key, stamp) of each item of the shard skipped with a stamp noted."""
    rows = facts_of(result.content, len(spec.items))
    at = np.flatnonzero((rows["size"] == 0) & (rows["mtime"] != 0)).tolist()
    (keys,) = columns(spec.items, "key") if at else ((),)
    for i in at:
        yield keys[i], (int(rows["stored"][i]), int(rows["mtime"][i]))


def mtimes_to_save(shards: Iterable[dict], mtimes: dict[str, int | None]) -> dict[str, int]:
    """The mtimes of the items these contents.json entries hold (those that have one)."""
    return {key: mtimes[key] for entry in shards for key in entry["keys"]
            if mtimes.get(key) is not None}  # fmt: skip


def skips_to_save(
    shards: Iterable[dict], loose: Iterable[tuple[str, str, str]],
    skips: dict[str, tuple[int, int]],
) -> dict[str, tuple[int, int]]:  # fmt: skip
    """The stamps of the items these contents.json entries and loose skips skipped (those that
    have one)."""
    keys = chain(chain.from_iterable(entry["skipped"] for entry in shards),
                 (key for _, key, _ in loose))  # fmt: skip
    return {key: skips[key] for key in keys if key in skips}


def rendered(spec: ShardSpec, result: ShardResult) -> bytes:
    """The shard's part of the stamps file: its items' `"key":mtime` (those that have one), a
    contents.RENDER_CHUNK of them at a time."""
    rows = facts_of(result.content, len(spec.items))
    stamped = np.flatnonzero((rows["size"] > 0) & (rows["mtime"] != 0))
    (keys,) = columns(spec.items, "key") if len(stamped) else ((),)
    parts = []
    for start in range(0, len(stamped), RENDER_CHUNK):
        at = stamped[start : start + RENDER_CHUNK]
        mtimes = dict(zip([keys[i] for i in at.tolist()], rows["mtime"][at].tolist(),
                          strict=True))  # fmt: skip
        parts.append(json.dumps(mtimes, separators=(",", ":")).encode()[1:-1])
    if skips := dict(_skipped(spec, result)):  # (a shard skips few: no chunks)
        parts.append(_rendered_skips(skips))
    return b",".join(parts)


def _rendered_skips(skips: dict[str, tuple[int, int]]) -> bytes:
    """`"key":[size,mtime]` of each skipped item's stamp, as the file's map holds them."""
    return json.dumps({key: list(stamp) for key, stamp in skips.items()},
                      separators=(",", ":")).encode()[1:-1]  # fmt: skip


def save(
    out: Storage, index: Index, mtimes: dict[str, int | None],
    skips: dict[str, tuple[int, int]] | None = None,
) -> None:  # fmt: skip
    """Write the stamps of the dataset whose index.json just landed (the mtimes not None, and
    the stamps of its items skipped: `skips`)."""
    mtimes = {key: mtime for key, mtime in mtimes.items() if mtime is not None}
    parts = [json.dumps(mtimes, separators=(",", ":")).encode()[1:-1]]
    save_rendered(out, index, [*parts, _rendered_skips(skips)] if skips else parts)


def save_rendered(out: Storage, index: Index, shards: Iterable[bytes]) -> None:
    """save() from each shard's rendered part, a shard at a time."""

    def parts() -> Iterator[bytes]:
        yield b'{"format":%s,"plan_digest":%s,"mtimes":{' % (
            json.dumps(FORMAT).encode(),
            json.dumps(index.plan_digest).encode(),
        )
        first = True
        for part in shards:
            if part:
                yield part if first else b"," + part
                first = False
        yield b"}}"

    out.put_parts(STAMPS_NAME, parts())


class Held(NamedTuple):
    """What a stamps file holds: the mtime of each item packed, the stamp of each skipped."""

    mtimes: dict[str, int]
    skips: dict[str, tuple[int, int]]


def load(out: Storage, index: Index) -> Held:
    """The stamps of the items `index` holds as last packed (and of those it skipped); none
    where the file is missing, too large, not ours or of another index."""
    none = Held({}, {})
    records = sum(split.num_records for split in index.splits.values())
    try:
        with out.open(STAMPS_NAME) as blob:
            if blob.size > MAX_STAMPS_BYTES:
                return none
            text = blob.pread(blob.size, 0)
        limit = VALUES_PER_RECORD * records + VALUES_PER_SKIP * index.num_skipped + 16
        if json_values(text, limit) > limit:  # each a Python object: more than the index's records
            return none
        doc = json.loads(text)
    except (OSError, ValueError, RecursionError):
        return none
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return none
    held = doc.get("mtimes")
    if doc.get("plan_digest") != index.plan_digest or not isinstance(held, dict):
        return none
    if all(type(m) is int for m in held.values()):  # no skip noted: no copy of a million
        return Held(held, {})
    mtimes = {key: m for key, m in held.items() if type(m) is int}
    skips = {key: (s[0], s[1]) for key, s in held.items() if type(s) is list and len(s) == 2
             and type(s[0]) is int and type(s[1]) is int}  # fmt: skip
    return Held(mtimes, skips) if len(mtimes) + len(skips) == len(held) else none
