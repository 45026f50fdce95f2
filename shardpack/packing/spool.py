"""A fresh pack's contents.json entries and stamps, rendered as each shard lands and kept in
a temporary file until the merge writes both out, in the plan's order, a shard at a time: the
packing process never holds a Python object per item for them (a 200,000-file pack peaked
~30 MB higher when both were built whole at the end: benchmarks/README.md, "Big listings")."""

from __future__ import annotations

import tempfile

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
        self._spans: dict[str, tuple[int, int, int]] = {}  # file -> (offset, entry, stamps)

    def add(self, result: ShardResult) -> None:
        """Render and keep what the merge writes of the shard `result` says was written."""
        spec = self._specs[result.file]
        entry = contents.rendered_shard(spec, result)
        part = stamps.rendered(spec, result)
        self._file.seek(0, 2)
        self._spans[result.file] = (self._file.tell(), len(entry), len(part))
        self._file.write(entry + part)

    def _parts(self, spec: ShardSpec, result: ShardResult) -> tuple[bytes, bytes]:
        """The shard's rendered entry and stamps part: kept, or (a shard an earlier run wrote,
        --resume) rendered now."""
        if spec.file not in self._spans:
            self.add(result)
        offset, entry, part = self._spans[spec.file]
        self._file.seek(offset)
        data = self._file.read(entry + part)
        return data[:entry], data[entry:]

    def write_contents(
        self, out: Storage, results: list[ShardResult], number: dict[str, int] | np.ndarray
    ) -> None:
        """Write contents.json of every planned shard, each record's copy numbered as `number`
        says: by key (contents.copy_numbers of the groups of exact copies), or by plan
        position (duplicates.PlanCopies.numbers)."""
        by_file = {r.file: r for r in results}

        def shards():
            start = 0
            for spec in self._specs.values():
                result = by_file[spec.file]
                sizes = facts_of(result.content, len(spec.items))["size"]
                if isinstance(number, np.ndarray):
                    copies = number[start : start + len(spec.items)][sizes > 0].tolist()
                else:
                    (keys,) = columns(spec.items, "key")
                    written = zip(keys, sizes.tolist(), strict=True)
                    copies = [number.get(key, 0) for key, size in written if size]
                start += len(spec.items)
                yield spec.file, contents.with_copy(self._parts(spec, result)[0], copies)

        contents.write_rendered(out, shards())

    def write_stamps(self, out: Storage, index: Index, results: list[ShardResult]) -> None:
        """Write the stamps of the dataset whose index.json just landed."""
        by_file = {r.file: r for r in results}
        parts = (self._parts(spec, by_file[spec.file])[1] for spec in self._specs.values())
        stamps.save_rendered(out, index, parts)

    def close(self) -> None:
        self._file.close()
