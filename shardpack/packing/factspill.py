"""A fresh pack's per-record facts (facts.py), folded or spilled as each shard lands, so that
the packing process holds none of them a record until the merge: the tallies, skip reasons
and whether every image has one size are running totals; each written record's size, width,
height and stored size go to its split's temporary file, which the summaries read back a chunk
at a time (stats.py); its size, digest and place in the plan go to the temporary file of its
digest's bucket, and each bucket is read alone to find the exact copies in it (copies share a
digest, so a bucket holds every copy of its images)."""

from __future__ import annotations

import itertools
import math
import tempfile
from dataclasses import replace
from typing import IO

import numpy as np

from shardpack.errors import OutputError
from shardpack.packing import stats
from shardpack.packing.duplicates import candidates
from shardpack.packing.facts import facts_of, record_sizes
from shardpack.packing.plan import Plan, ShardResult, ShardSpec
from shardpack.storage import Storage

# A bucket of content keys holds at most about this many records (32 bytes each; finding the
# copies in it sorts them, ~100 bytes a record at the merge's peak: 1M records in one bucket
# peaked ~100 MB over the rest of the pack, `python -m benchmarks.manifest_scale --pack`).
BUCKET_ROWS = 1 << 18
# At most 2**MAX_BITS buckets, a file open each: 256 hold 67M records as above; beyond, each
# bucket grows (100M: ~390,000 records a bucket).
MAX_BITS = 8
# The summaries read a split's rows back this many at a time (24 bytes each; a chunk's
# histogram2d makes ~60 bytes a row: 1M rows a chunk peaked ~70 MB over the pack's rest).
CHUNK_ROWS = 1 << 16
# A written record's content key: its size, its digest's halves and its place in the plan.
_KEYED = np.dtype([("size", "<u8"), ("high", "<u8"), ("low", "<u8"), ("position", "<i8")])


class FactSpill:
    """What the merge needs of each landed shard's facts, folded or in temporary files (in
    OUT's folder on a disk, else the system's)."""

    def __init__(self, plan: Plan, out: Storage, copies: bool = True) -> None:
        """`copies`: whether the merge finds the copies here (not where --dedup found them)."""
        starts = np.cumsum([0, *(len(spec.items) for spec in plan.shards)]).tolist()
        self._specs = {spec.file: (spec, at) for spec, at in zip(plan.shards, starts, strict=False)}
        bits = math.ceil(math.log2(max(1, starts[-1] / BUCKET_ROWS)))
        self._bits = min(MAX_BITS, bits) if copies else -1  # -1: no key is kept
        self._folder = out.scratch_folder()
        self._rows: dict[str, IO[bytes]] = {}  # split -> its written records' SUMMED rows
        self._keys: dict[int, IO[bytes]] = {}  # bucket -> its records' _KEYED rows
        self._tallies = {spec.split: stats.Tallies() for spec in plan.shards}
        self._sizes: set[tuple[int, int]] | None = set()  # None: not one size, or unknown
        self._added: set[str] = set()

    def add(self, result: ShardResult) -> ShardResult:
        """Fold and spill a shard's facts (once: a result added again is not counted twice);
        returns the result without them, which is what the packing process keeps."""
        if result.file not in self._added:
            self._added.add(result.file)
            spec, start = self._specs[result.file]
            self._fold(spec, start, result)
        return replace(result, content=b"")

    def _fold(self, spec: ShardSpec, start: int, result: ShardResult) -> None:
        rows = facts_of(result.content, len(spec.items))
        self._tallies[spec.split].add(result.tally, (r for _, r in result.skipped))
        if self._sizes is not None:  # None once two sizes (or an unknown one) are met
            noted = record_sizes(rows, result.num_records)
            sizes = None if noted is None else self._sizes | noted
            self._sizes = sizes if sizes is not None and len(sizes) <= 1 else None
        self._write(self._rows, spec.split, stats.summed(rows).tobytes())
        if self._bits >= 0:
            self._spill_keys(rows, start)

    def _spill_keys(self, rows: np.ndarray, start: int) -> None:
        """Each written record's content key, to the file of its digest's bucket."""
        written = np.flatnonzero(rows["size"] > 0)
        if not len(written):  # every item skipped: nothing to key
            return
        halves = rows["digest"][written].view("<u8").reshape(-1, 2)
        keyed = np.empty(len(written), _KEYED)
        keyed["size"], keyed["high"], keyed["low"] = rows["size"][written], *halves.T
        keyed["position"] = start + written
        if not self._bits:
            self._write(self._keys, 0, keyed.tobytes())
            return
        bucket = keyed["high"] >> np.uint64(64 - self._bits)
        order = np.argsort(bucket, kind="stable")
        keyed, bucket = keyed[order], bucket[order]
        cuts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1], True]).tolist()
        for first, end in itertools.pairwise(cuts):
            self._write(self._keys, int(bucket[first]), keyed[first:end].tobytes())

    def _write(self, files: dict[object, IO[bytes]], name: object, data: bytes) -> None:
        """Append to the temporary file `name` of `files` (made on first use: unnamed, and
        gone with the process whatever happens); a full disk is a one-line error."""
        try:
            if name not in files:
                files[name] = tempfile.TemporaryFile(  # noqa: SIM115  closed by close()
                    prefix=".shardpack.spill.", dir=self._folder
                )
            files[name].write(data)
        except OSError as e:
            raise OutputError.writing(
                f"{self._folder} (a temporary file of each record's facts)", e
            ) from None

    def image_size(self) -> tuple[int, int] | None:
        """(height, width) when every record written has that size (merge.uniform_size)."""
        return next(iter(self._sizes)) if self._sizes and len(self._sizes) == 1 else None

    def summaries(self, dropped: dict[str, int]) -> dict[str, dict]:
        """index.json's `summaries`: one per split, of the records written (read back from the
        spill) and the items skipped (`dropped`: each split's copies --dedup exact left out)."""
        tables = {split: _chunks(file) for split, file in self._rows.items()}
        return stats.summaries(tables, self._tallies, dropped)

    def copy_sets(self) -> list[np.ndarray]:
        """The plan positions of each set of records alike in size and digest, a bucket at a
        time; each set's positions in order, the sets in the order of their (size, digest), as
        duplicates.candidates gives them of every record at once."""
        found = []
        for bucket in self._keys.values():
            bucket.seek(0)
            keyed = np.frombuffer(bucket.read(), _KEYED)
            for alike in candidates(keyed["size"], keyed["high"], keyed["low"]):
                size, high, low, _ = keyed[alike[0]].tolist()
                found.append(((size, high, low), np.sort(keyed["position"][alike])))
            del keyed
        found.sort(key=lambda pair: pair[0])
        return [positions for _, positions in found]

    def close(self) -> None:
        for file in (*self._rows.values(), *self._keys.values()):
            file.close()


def _chunks(file: IO[bytes]) -> stats.Rows:
    """A split's spilled rows, read back CHUNK_ROWS at a time."""

    def chunks():
        file.seek(0)
        while data := file.read(CHUNK_ROWS * stats.SUMMED.itemsize):
            yield np.frombuffer(data, stats.SUMMED)

    return chunks
