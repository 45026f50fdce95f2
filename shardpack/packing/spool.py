"""A fresh pack's contents.json entries and stamps, rendered as each shard lands and kept in
a temporary file until the merge writes both out, in the plan's order, a shard at a time: the
packing process never holds a Python object per item for them (a 200,000-file pack peaked
~30 MB higher when both were built whole at the end: benchmarks/README.md, "Big listings")."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence

import numpy as np

from shardpack.index import Index
from shardpack.packing import contents, stamps
from shardpack.packing.facts import facts_of
from shardpack.packing.packeditems import columns
from shardpack.packing.plan import Plan, ShardResult, ShardSpec
from shardpack.storage import Storage


class EntrySpool:
    """Each landed shard's rendered contents entry (its "copy" numbers come last, once every
    shard's copies are known) and stamps part, by shard file."""

    def __init__(self, plan: Plan) -> None:
        self._specs = {spec.file: spec for spec in plan.shards}
        self._file = tempfile.TemporaryFile()  # noqa: SIM115  closed by close(); unlinked now
        # file -> (offset, entry, stamps, written): the lengths of its parts, kept in that order
        self._spans: dict[str, tuple[int, int, int, int]] = {}

    def add(self, result: ShardResult) -> None:
        """Render and keep what the merge writes of the shard `result` says was written, and
        which of its items were (the result's facts are not kept: factspill.py); once a shard."""
        if result.file in self._spans:
            return
        spec = self._specs[result.file]
        entry = contents.rendered_shard(spec, result)
        part = stamps.rendered(spec, result)
        written = np.packbits(facts_of(result.content, len(spec.items))["size"] > 0).tobytes()
        self._file.seek(0, 2)
        self._spans[result.file] = (self._file.tell(), len(entry), len(part), len(written))
        self._file.write(entry + part + written)

    def _parts(self, spec: ShardSpec) -> tuple[bytes, bytes, np.ndarray]:
        """The shard's rendered entry, its stamps part and whether each item was written, as
        add() kept them (every shard is added before the merge: fresh.FreshPack)."""
        offset, entry, part, written = self._spans[spec.file]
        self._file.seek(offset)
        data = self._file.read(entry + part + written)
        mask = np.unpackbits(np.frombuffer(data[entry + part :], np.uint8), count=len(spec.items))
        return data[:entry], data[entry : entry + part], mask.astype(bool)

    def write_contents(
        self, out: Storage, number: dict[str, int] | np.ndarray,
        noted: contents.Noted = contents.Noted(), left_out: Sequence[ShardResult] = (),
    ) -> None:  # fmt: skip
        """Write contents.json of every planned shard, each record's copy numbered as `number`
        says: by key (contents.copy_numbers of the groups of exact copies), or by plan
        position (duplicates.PlanCopies.numbers); and what it notes of --dedup's copies. The
        shards `left_out` (of a split none of whose images was written) are not listed: their
        items' skips are kept as loose ones, so that a grow knows them."""
        gone = {result.file for result in left_out}
        loose = tuple((r.split, key, reason) for r in left_out for key, reason in r.skipped)

        def shards():
            start = 0
            for spec in self._specs.values():
                if spec.file in gone:
                    start += len(spec.items)
                    continue
                entry, _, written = self._parts(spec)
                if isinstance(number, np.ndarray):
                    copies = number[start : start + len(spec.items)][written].tolist()
                else:
                    (keys,) = columns(spec.items, "key")
                    kept = zip(keys, written.tolist(), strict=True)
                    copies = [number.get(key, 0) for key, was in kept if was]
                start += len(spec.items)
                yield spec.file, contents.with_copy(entry, copies)

        contents.write_rendered(out, shards(), loose, noted=noted)

    def write_stamps(self, out: Storage, index: Index) -> None:
        """Write the stamps of the dataset whose index.json just landed."""
        parts = (self._parts(spec)[1] for spec in self._specs.values())
        stamps.save_rendered(out, index, parts)

    def close(self) -> None:
        self._file.close()
