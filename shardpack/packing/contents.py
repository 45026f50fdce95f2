"""contents.json: which items each shard holds (their keys, content keys, a digest of their
label and fields, the written sizes and per-class and per-format counts) and which it skipped
with the reason, so that `pack --append` and `--update` know what OUT has without reading a
shard, and recount its statistics, skips and copies as a fresh pack would.

Written by every pack beside index.json (before it), read back as untrusted: bounded in bytes
and in values (as index.json is: each a Python object), and every field checked against the
index it must agree with.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from shardpack.errors import Option, OutputError
from shardpack.index import Index
from shardpack.layout import CONTENTS_NAME
from shardpack.packing.facts import facts_of
from shardpack.packing.plan import Plan, ShardResult, ShardSpec
from shardpack.sources import Item
from shardpack.storage import Storage

FORMAT = "shardpack-contents"
# A million records' keys and content keys fit many times over.
MAX_CONTENTS_BYTES = 1 << 30
# The JSON values (numbers, strings, lists, objects: each a Python object once parsed) a file
# may hold per record and skipped item it describes, and per shard: what a pack writes is
# under half of each; past them it is planted, and refused unread.
VALUES_PER_ITEM = 16
VALUES_PER_SHARD = 256

# What values() keeps of a planted file (quotes and what it counts), and reads at a time.
_UNCOUNTED = bytes(set(range(256)) - set(b'",[{'))
_QUOTE = ord('"')
_CHUNK = 16 << 20

# Records a shard's entry is rendered at a time (spool.py): what it costs is bounded by this,
# not by the shard's size.
RENDER_CHUNK = 4096

# One shard's: "keys", "crc", "size", "width", "height", "meta", "copy" (one per record),
# "label_counts", "tally" ([what, value, count]), "skipped" and "reasons" (one per item skipped)
Entry = dict[str, list]
Skip = tuple[str, str, str]  # (split, key, reason)


@dataclass(frozen=True)
class Contents:
    """What OUT holds: each listed shard's entry, and the items skipped with no shard to note
    them (`loose`: the shard that tried them was rewritten, or came out empty)."""

    shards: dict[str, Entry]
    loose: tuple[Skip, ...] = ()


def meta(item: Item) -> int:
    """A number for an item's label and fields: what its record holds beside the image, so that
    a relabelled row with the same image bytes is a changed item. An item of one class and no
    fields (a folder tree's: a million a grow) is its label + 1, unlabelled 0; others a
    digest, from 2**62 up."""
    label = item.label
    if not item.fields and (label is None or type(label) is int):
        return 0 if label is None else label + 1
    digest = hashlib.blake2b(repr((label, sorted(item.fields.items()))).encode(), digest_size=8)
    return (1 << 62) | (int.from_bytes(digest.digest(), "little") >> 2)


def entries(plan: Plan, results: list[ShardResult]) -> dict[str, Entry]:
    """Each written shard's entry: the keys and content keys of its records, in order."""
    by_file = {r.file: r for r in results}
    return {spec.file: shard_entry(spec, by_file[spec.file]) for spec in plan.shards}


def shard_entry(spec: ShardSpec, result: ShardResult) -> Entry:
    """The entry of the shard `spec` planned and `result` says was written (no "copy" yet)."""
    return {name: _listed(value) for name, value in _columns(spec, result).items()}


def rendered_shard(spec: ShardSpec, result: ShardResult) -> bytes:
    """rendered(shard_entry(spec, result)), a field and RENDER_CHUNK records at a time: a
    shard's numbers are never all Python ints at once."""
    fields = _columns(spec, result).items()
    return b"{%s}" % b",".join(b'"%s":%s' % (name.encode(), _rendered_column(value))
                               for name, value in fields)  # fmt: skip


def _rendered_column(value: list | np.ndarray) -> bytes:
    """A field as rendered() writes it, RENDER_CHUNK values at a time."""
    if len(value) <= RENDER_CHUNK:
        return rendered(_listed(value))
    chunks = range(0, len(value), RENDER_CHUNK)
    return b"[%s]" % b",".join(rendered(_listed(value[i : i + RENDER_CHUNK]))[1:-1] for i in chunks)


def _listed(value: list | np.ndarray) -> list:
    return value.tolist() if isinstance(value, np.ndarray) else value


def _columns(spec: ShardSpec, result: ShardResult) -> dict[str, list | np.ndarray]:
    """shard_entry's fields, its records' numbers as the facts table's columns."""
    rows = facts_of(result.content, len(spec.items))
    written = np.flatnonzero(rows["size"] > 0)
    reasons = dict(result.skipped)
    # planned but skipped (a bad image): not new to the next --append either
    skipped = [spec.items[i].key for i in np.flatnonzero(rows["size"] == 0).tolist()]
    rows, written = rows[written], written.tolist()
    return {
        "keys": [spec.items[i].key for i in written],
        "crc": rows["crc"],
        "size": rows["size"],
        "width": rows["width"],
        "height": rows["height"],
        "meta": [meta(spec.items[i]) for i in written],
        "label_counts": list(result.label_counts),
        "tally": [list(t) for t in result.tally],
        "skipped": skipped,
        "reasons": [reasons.get(key, "skipped") for key in skipped],
    }


def copy_numbers(groups: list[list[tuple]]) -> dict[str, int]:
    """key -> the number its exact copies share (the groups' order, from 1), for those in one."""
    return {member[1]: i for i, group in enumerate(groups, 1) for member in group}


def with_copies(
    shards: dict[str, Entry], groups: list[list[tuple]], unknown: frozenset[str]
) -> dict[str, Entry]:
    """The entries with each record's "copy": a number its exact copies (confirmed by digest)
    share, 0 for none known, so that the next grow reads one of them for all; those of the
    `unknown` shards (rewritten: their old records' bytes are not the items' now) all 0."""
    number = copy_numbers(groups)
    return {file: {**entry, "copy": [0 if file in unknown else number.get(key, 0)
                                     for key in entry["keys"]]}
            for file, entry in shards.items()}  # fmt: skip


def rendered(value: object) -> bytes:
    """An entry (or one of its values) as contents.json holds it."""
    return _utf8(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def with_copy(entry: bytes, copies: list[int]) -> bytes:
    """A rendered entry without "copy", with it (last, where with_copies puts it)."""
    return b'%s,"copy":%s}' % (entry[:-1], json.dumps(copies, separators=(",", ":")).encode())


def write_contents(out: Storage, shards: dict[str, Entry], loose: tuple[Skip, ...] = ()) -> None:
    """Write contents.json for the shards an index is about to list."""
    write_rendered(out, ((file, rendered(entry)) for file, entry in shards.items()), loose)


def write_rendered(
    out: Storage, shards: Iterable[tuple[str, bytes]], loose: tuple[Skip, ...] = ()
) -> None:
    """Write contents.json from each shard's rendered entry, a shard at a time: compact, as
    json's C encoder writes (an indent takes its Python one, ~5x slower on a million keys)."""

    def parts() -> Iterator[bytes]:
        yield b'{"format":%s,"shards":{' % _utf8(json.dumps(FORMAT))
        for i, (file, entry) in enumerate(shards):
            yield b"%s%s:%s" % (b"," if i else b"", _utf8(json.dumps(file, ensure_ascii=False)),
                                entry)  # fmt: skip
        loose_ = json.dumps([list(s) for s in loose], ensure_ascii=False, separators=(",", ":"))
        yield b'},"loose":%s}' % _utf8(loose_)

    out.put_parts(CONTENTS_NAME, parts())


def _utf8(text: str) -> bytes:
    """JSON text as the file holds it: a name that is not UTF-8 (lone surrogates) escaped."""
    return text.encode("utf-8", "backslashreplace")


def values(text: bytes, limit: int) -> int:
    """How many JSON values `text` holds at least: its `,`, `[` and `{` outside strings (exact
    only once the quick count, strings included, passes `limit`). Past it, the escapes go
    and every byte but quotes and those three, and what is left is read a chunk at a time: a
    byte is in a string after an odd count of quotes (a regex substitution over a planted
    file took 4x its size in small objects)."""
    rough = text.count(b",") + text.count(b"[") + text.count(b"{")
    if rough <= limit:
        return rough
    plain = text.replace(b"\\\\", b"").replace(b'\\"', b"")  # no quote inside a string now
    kept = plain.translate(None, _UNCOUNTED)
    found, quotes = 0, 0  # quotes before the chunk
    for start in range(0, len(kept), _CHUNK):
        chunk = np.frombuffer(kept, np.uint8, min(_CHUNK, len(kept) - start), start)
        quote = chunk == _QUOTE
        inside = (np.cumsum(quote, dtype=np.uint8) + quotes) & 1  # mod 256 keeps the parity
        found += int(np.count_nonzero(~quote & (inside == 0)))
        quotes = (quotes + int(np.count_nonzero(quote))) & 1
    return found


def load_contents(out: Storage, index: Index) -> Contents:
    """The entry of every shard `index` lists, checked against it, and the loose skips.

    Raises:
        OutputError: contents.json is missing, too large (in bytes or in values for the items
            the index counts), not JSON, or disagrees with the index.
    """
    path = out.path(CONTENTS_NAME)
    fix = ("repack with ", Option("overwrite", True), " to write it anew")
    shards = [s for split in index.splits.values() for s in split.shards]
    items = sum(s.num_records for s in shards) + index.num_skipped
    limit = VALUES_PER_ITEM * items + VALUES_PER_SHARD * (len(shards) + 1)
    try:
        with out.open(CONTENTS_NAME) as blob:
            if blob.size > MAX_CONTENTS_BYTES:
                raise OutputError(f"{path}: over {MAX_CONTENTS_BYTES:,} bytes; ", *fix)
            text = blob.pread(blob.size, 0)
        if (found := values(text, limit)) > limit:  # each value a Python object: refused unread
            raise OutputError(f"{path}: {found:,} values, over the {limit:,} that the "
                              f"index's {items:,} items and {len(shards):,} shards allow; ",
                              *fix)  # fmt: skip
        doc = json.loads(text)
    except FileNotFoundError:
        raise OutputError(f"{path}: not found (OUT was packed by an older shardpack, which "
                          f"kept no list of its items); ", *fix) from None  # fmt: skip
    except (OSError, ValueError, RecursionError) as e:
        raise OutputError(f"{path}: unreadable ({e}); ", *fix) from None
    listed = doc.get("shards") if isinstance(doc, dict) else None
    loose = doc.get("loose", []) if isinstance(doc, dict) else None
    if not isinstance(listed, dict) or doc.get("format") != FORMAT or not _skips(loose):
        raise OutputError(f"{path}: not a contents file shardpack wrote; ", *fix)
    found = {}
    for shard in shards:
        entry = listed.get(shard.file)
        if not _agrees(entry, shard.num_records):
            raise OutputError(f"{path}: does not agree with index.json about "
                              f"{shard.file}; ", *fix)  # fmt: skip
        found[shard.file] = _filled(entry)
    return Contents(found, tuple(map(tuple, loose)))


def _skips(loose: object) -> bool:
    """Whether `loose` is a list of [split, key, reason] strings."""
    return isinstance(loose, list) and all(
        isinstance(s, list) and len(s) == 3 and all(isinstance(v, str) for v in s) for s in loose
    )


def _filled(entry: Entry) -> Entry:
    """An entry with the fields an older shardpack did not write: no sizes, digests, tallies or
    reasons noted (its items' labels and fields are then taken as unchanged)."""
    n = len(entry["keys"])
    older = {"width": [0] * n, "height": [0] * n, "meta": [None] * n, "copy": [0] * n,
             "tally": [], "reasons": ["skipped"] * len(entry["skipped"])}  # fmt: skip
    return {**entry, **{k: v for k, v in older.items() if k not in entry}}  # entry's order kept


def _agrees(entry: object, records: int) -> bool:
    """Whether a shard's entry holds `records` keys, content keys, sizes and digests, integer
    class counts, and a reason for each item skipped."""
    if not isinstance(entry, dict):
        return False
    fields = ("keys", "crc", "size", "label_counts", "skipped")
    keys, crc, size, counts, skipped = (entry.get(k) for k in fields)
    more = {k: entry[k] for k in ("width", "height", "meta", "copy") if k in entry}
    tally, reasons = entry.get("tally", []), entry.get("reasons", ["skipped"] * len(skipped or ()))
    return (
        all(isinstance(v, list) for v in (keys, crc, size, counts, skipped, tally, reasons))
        and all(isinstance(v, list) and len(v) == records for v in more.values())
        and len(keys) == len(crc) == len(size) == records
        and len(reasons) == len(skipped)
        and all(_only(v, str) for v in (keys, skipped, reasons))
        and all(
            _only(v, int) and min(v, default=0) >= 0 for v in (crc, size, counts, *more.values())
        )
        and all(_tallied(t) for t in tally)
    )


def _only(values_: list, kind: type) -> bool:
    """Whether every value is of exactly `kind` (a bool is no int): map and set run in C, a
    tenth of a test per value over a million records."""
    return set(map(type, values_)) <= {kind}


def _tallied(row: object) -> bool:
    """Whether a tally row is [what, value, count]."""
    return (
        isinstance(row, list)
        and len(row) == 3
        and isinstance(row[0], str)
        and isinstance(row[1], str)
        and type(row[2]) is int
    )
