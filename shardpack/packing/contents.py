"""contents.json: which items each shard holds (their keys, content keys, a digest of their
label and fields, the written sizes, per-class and per-format counts and the images made PNG
losslessly) and which it skipped
with the reason, and the copies --dedup left out with their content keys, so that `pack
--append` and `--update` know what OUT has without reading a shard (nor fetching a copy left
out again), and recount its statistics, skips and copies as a fresh pack would.

Written by every pack beside index.json (before it); read back, as untrusted, by
shardpack.contentsfile (a lower layer: `--source shardpack` reads it too).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from shardpack.contentsfile import (
    DIGESTED,
    FORMAT,
    MAX_CONTENTS_BYTES,
    VALUES_PER_ITEM,
    VALUES_PER_SHARD,
    Contents,
    Dropped,
    Entry,
    Noted,
    Skip,
    load_contents,
)
from shardpack.layout import CONTENTS_NAME
from shardpack.packing.facts import facts_of
from shardpack.packing.packeditems import columns
from shardpack.packing.plan import Plan, ShardResult, ShardSpec
from shardpack.sources import Item
from shardpack.storage import Storage

# What a grow reads of OUT is read by shardpack.contentsfile, and named here too.
__all__ = ["FORMAT", "MAX_CONTENTS_BYTES", "VALUES_PER_ITEM", "VALUES_PER_SHARD", "Contents",
           "Dropped", "Entry", "Noted", "Skip", "dropped_copies", "entries", "load_contents",
           "meta", "with_copies", "write_contents"]  # fmt: skip

# Records a shard's entry is rendered at a time (spool.py): what it costs is bounded by this,
# not by the shard's size.
RENDER_CHUNK = 4096


def meta(item: Item) -> int:
    """A number for an item's label and fields: what its record holds beside the image, so that
    a relabelled row with the same image bytes is a changed item. An item of one class and no
    fields (a folder tree's: a million a grow) is its label + 1, unlabelled 0; others a
    digest, from 2**62 up."""
    return meta_of(item.label, item.fields)


def meta_of(label: object, fields: Mapping[str, object]) -> int:
    """meta() of an item of this label and these fields."""
    if not fields and (label is None or type(label) is int):
        return 0 if label is None else label + 1
    digest = hashlib.blake2b(repr((label, sorted(fields.items()))).encode(), digest_size=8)
    return DIGESTED | (int.from_bytes(digest.digest(), "little") >> 2)


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
    keys, labels, fields = columns(spec.items, "key", "label", "fields")
    # planned but skipped (a bad image): not new to the next --append either
    skipped = [keys[i] for i in np.flatnonzero(rows["size"] == 0).tolist()]
    rows, written = rows[written], written.tolist()
    return {
        "keys": [keys[i] for i in written],
        "crc": rows["crc"],
        "size": rows["size"],
        "width": rows["width"],
        "height": rows["height"],
        "stored": rows["stored"],
        "meta": [meta_of(labels[i], fields[i]) for i in written],
        # each record's digest of its bytes (facts.content_digest) as hex: a grow knows a held
        # image by it with no read (a file renamed or moved; "": not noted, a journal's before)
        "digest": _hex(rows["digest"]),
        "label_counts": list(result.label_counts),
        "tally": [list(t) for t in result.tally],
        "lossless": [result.lossless],
        "sha256": [result.sha256],  # the shard's: ties the entry to the shard index.json names
        "skipped": skipped,
        "reasons": [reasons.get(key, "skipped") for key in skipped],
    }


def _hex(digests: np.ndarray) -> list[str]:
    """Each 16-byte digest as 32 hex digits; "" for one not noted (all zeros)."""
    text = digests.tobytes().hex()
    return [text[i : i + 32].strip("0") and text[i : i + 32] for i in range(0, len(text), 32)]


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


def dropped_copies(
    copies: Iterable[tuple[str, Item, int, int, int]], number: Mapping[str, int]
) -> tuple[Dropped, ...]:
    """contents.json's `dropped` of the copies --dedup left out, each (split, item, crc, size,
    mtime): with its item's meta and the `number` its exact copies share (copy_numbers)."""
    return tuple((split, item.key, crc, size, meta(item), number.get(item.key, 0), mtime)
                 for split, item, crc, size, mtime in copies)  # fmt: skip


def rendered(value: object) -> bytes:
    """An entry (or one of its values) as contents.json holds it."""
    return _utf8(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def with_copy(entry: bytes, copies: list[int]) -> bytes:
    """A rendered entry without "copy", with it (last, where with_copies puts it)."""
    return b'%s,"copy":%s}' % (entry[:-1], json.dumps(copies, separators=(",", ":")).encode())


def write_contents(
    out: Storage, shards: dict[str, Entry], loose: tuple[Skip, ...] = (), noted: Noted = Noted()
) -> None:
    """Write contents.json for the shards an index is about to list."""
    write_rendered(out, ((file, rendered(entry)) for file, entry in shards.items()), loose,
                   noted)  # fmt: skip


def write_rendered(
    out: Storage, shards: Iterable[tuple[str, bytes]], loose: tuple[Skip, ...] = (),
    noted: Noted = Noted(),
) -> None:  # fmt: skip
    """Write contents.json from each shard's rendered entry, a shard at a time: compact, as
    json's C encoder writes (an indent takes its Python one, ~5x slower on a million keys)."""

    def parts() -> Iterator[bytes]:
        yield b'{"format":%s,"shards":{' % _utf8(json.dumps(FORMAT))
        for i, (file, entry) in enumerate(shards):
            yield b"%s%s:%s" % (b"," if i else b"", _utf8(json.dumps(file, ensure_ascii=False)),
                                entry)  # fmt: skip
        loose_ = json.dumps([list(s) for s in loose], ensure_ascii=False, separators=(",", ":"))
        dropped, near = (json.dumps([list(n) for n in rows], ensure_ascii=False,
                                    separators=(",", ":")) for rows in noted)  # fmt: skip
        yield b'},"loose":%s,"dropped":%s,"near":%s}' % (_utf8(loose_), _utf8(dropped),
                                                         _utf8(near))  # fmt: skip

    out.put_parts(CONTENTS_NAME, parts())


def _utf8(text: str) -> bytes:
    """JSON text as the file holds it: a name that is not UTF-8 (lone surrogates) escaped."""
    return text.encode("utf-8", "backslashreplace")
