"""PyTorch datasets over packs: every rank the same number of records, a new order each epoch,
resume mid-epoch, several packs mixed by weight. The only module that imports torch.

An epoch's order is a function of (seed, epoch) alone, the same on every rank: the shards in a
drawn order, taken `shuffle_block` at a time, and the records of each block in a drawn order
(a uniform permutation of the block: two records that are neighbours in a shard of m records
per block stay neighbours with chance 2/m). Rank r of R reads positions [r * n, (r + 1) * n)
of that order, n = ceil(records / R) (the last positions wrap to the first records) or, with
drop_remainder, floor(records / R). Its DataLoader workers take `batch_size`-long chunks of
that range in turn, so the DataLoader yields the rank's range in order whatever the worker
count, and "records taken" is all a resume needs. Records are read by random access
(shardpack.Records), so a resume starts at once, with no records read to skip.

Memory per reader: 8 bytes per record of the rank's range (its record numbers), one block's
record numbers while they are drawn, and the open readers of the shards being read (each
closed after its last record of the epoch); no record buffer. With
`cache_dir`, whole shards are copied to local disk ahead of the reader (read/cache.py).
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from shardpack import images
from shardpack.errors import ShardpackError, is_count
from shardpack.index import load_index
from shardpack.options import DEFAULT_MAX_PIXELS
from shardpack.packing.daliindex import random_access_index
from shardpack.read.cache import ShardCache
from shardpack.read.changed import unless_changed
from shardpack.read.objects import decode_mask, pixel_boxes
from shardpack.read.order import (
    MIX_ENDS,
    check_seed,
    epoch_order,
    mix_choices,
    none_to_read,
    share,
    worker_part,
)
from shardpack.read.random_access import Records
from shardpack.read.stream import check_sizes

# Shards whose records are permuted together: more mixes more, each costs an open shard.
SHUFFLE_BLOCK = 4
# What a ShardDataset says to do once its pack changed under it (as _check_unchanged does).
_BUILD_AGAIN = "build the ShardDataset again"

# What mix and Mix take, as their refusals say it.
_MIX_TAKES = (
    "mix takes [(dataset, weight), ...]: ShardDatasets or packs' OUT, weights finite and > 0"
)


class _Epochs(IterableDataset):
    """Epochs, the split of a rank's sequence among DataLoader workers, and resume: what
    ShardDataset and Mix share. A subclass gives the rank's sequence of an epoch and reads one
    item of it."""

    def __init__(self, seed: int, batch_size: int, world_size: int) -> None:
        self.seed = check_seed("seed", seed)
        if not is_count(batch_size):
            raise ShardpackError(f"batch_size must be a positive integer, got: {batch_size!r}")
        self.batch_size, self.world_size = batch_size, world_size
        self.epoch = 0
        self._start = 0  # records of this epoch taken before this iteration (a resume)
        self._taken = 0  # records this process's own iteration has yielded since
        # a DataLoader worker resumed from its own state: (worker, workers, records of its
        # part already yielded), set by load_state_dict in that worker
        self._part: tuple[int, int, int] | None = None
        self._resuming = False  # a state loaded, and no iteration of this process begun since
        self._worker_ran = False  # this copy began an iteration in a DataLoader worker
        # 1 while this iteration runs in DataLoader workers: shared with them (forked or
        # spawned), so that state_dict() here, which cannot see what they yield, says so
        self._in_workers = torch.zeros(1, dtype=torch.uint8).share_memory_()

    def sequence(self) -> np.ndarray:
        """This rank's items of the current epoch, in the order the DataLoader yields them."""
        raise NotImplementedError

    def read(self, item) -> object:
        """One item of the sequence, read and decoded."""
        raise NotImplementedError

    def total(self) -> int:
        """The records an epoch's order is drawn over (every rank's together)."""
        raise NotImplementedError

    def reorders(self) -> bool:
        """Whether the sequence differs from epoch to epoch."""
        return True

    def epoch_length(self, epoch: int) -> int:
        """The length of this rank's sequence in epoch `epoch`, without drawing its order."""
        raise NotImplementedError

    def version(self) -> int:
        """A number that changes when the records an epoch's order is drawn over do (a grown or
        updated pack, another one of as many records): a state taken over others is refused."""
        raise NotImplementedError

    def ordering(self) -> str:
        """The arguments besides the seed that an epoch's sequence follows from, as the refusal
        of a state taken with others shows them."""
        raise NotImplementedError

    def read_all(self, items: np.ndarray) -> Iterator[object]:
        """The items, read in turn (a subclass may fetch ahead)."""
        return map(self.read, items)

    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` (call it before each epoch, on every rank): its order follows
        from (seed, epoch) alone. A resume point loaded before is kept by set_epoch of its own
        epoch (a loop that calls set_epoch before each epoch resumes), forgotten by another's."""
        epoch = check_seed("epoch", epoch)
        if self._resuming and epoch == self.epoch:
            return
        self.epoch, self._resuming = epoch, False
        self._start = self._taken = 0
        self._part = None
        self._in_workers[0] = 0

    def __len__(self) -> int:
        return max(self.epoch_length(self.epoch) - self._start, 0)

    def __iter__(self):
        worker = get_worker_info()
        self._taken = 0  # an iteration in this process counts afresh
        self._resuming = False
        self._in_workers[0] = worker is not None
        items = self.sequence()[self._start :]
        if worker is not None:
            if self._worker_ran and (self.reorders() or self._start or self._part):
                raise ShardpackError(
                    "a DataLoader with persistent_workers=True began another epoch: its workers "
                    "hold the dataset as they copied it (set_epoch and load_state_dict do not "
                    "reach them) and would read that order again; build the DataLoader with "
                    "persistent_workers=False"
                )
            self._worker_ran = True
            _check_loader_batch(self.batch_size, sys._getframe(1))
            items = worker_part(items, worker.id, worker.num_workers, self.batch_size)
            items = items[self._part[2] :] if self._part else items
        for record in self.read_all(items):
            self._taken += 1
            yield record

    def state_dict(self, consumed: int | None = None) -> dict[str, int]:
        """Where this rank is in the epoch: enough for load_state_dict to yield exactly the
        records not yet taken. torchdata's StatefulDataLoader calls it by itself (in each of
        its workers, which then add `worker`, `workers` and `worker_taken`: their part's
        records yielded).

        Args:
            consumed: records the training loop has taken from this rank's DataLoader since
                the iteration began (batches x batch_size). Needed with a plain DataLoader's
                workers, whose copies of the dataset this process cannot see; None counts what
                this process's own iteration yielded (num_workers=0), and is refused while
                this iteration runs in DataLoader workers.
        """
        if consumed is None and get_worker_info() is None and self._in_workers[0]:
            # else consumed=0 here: a resume would read the records taken again
            raise ShardpackError(
                "state_dict() cannot count the records this iteration's DataLoader workers "
                "yielded (they hold copies of the dataset): pass consumed=, the records your "
                "loop took from this rank's DataLoader since the iteration began (batches x "
                "batch_size), or use torchdata's StatefulDataLoader"
            )
        taken = self._taken if consumed is None else consumed
        if not is_count(taken, 0):
            raise ShardpackError(f"consumed must be an integer of at least 0, got: {consumed!r}")
        left = len(self)  # an epoch's last batch may be short: batches x batch_size passes it
        if consumed is not None and consumed > -(-left // self.batch_size) * self.batch_size:
            raise ShardpackError(  # else a resume skips the rest of the epoch unread
                f"consumed={consumed} is more than this rank's DataLoader gives this iteration "
                f"({left} records in batches of {self.batch_size}): count the records your "
                "loop took from this rank's DataLoader since the iteration began (batches x "
                "batch_size), not every rank's nor every epoch's"
            )
        state = {"epoch": self.epoch, "consumed": self._start, "seed": self.seed,
                 "world_size": self.world_size, "records": self.total(),
                 "version": self.version(), "order": _version([self.ordering()])}  # fmt: skip
        worker = get_worker_info()
        if worker is None or consumed is not None:
            return {**state, "consumed": self._start + taken}
        done = self._part[2] if self._part else 0
        return {**state, "worker": worker.id, "workers": worker.num_workers,
                "worker_taken": done + taken}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        """Resume where a state was taken: the next iteration yields the rest of that epoch
        (with any DataLoader worker count, in the same order; set_epoch of that epoch keeps
        it), then set_epoch of the next goes on. The state of an epoch read to its end,
        loaded once a later epoch is set (a StatefulDataLoader without workers loads it when
        its next iteration begins, after the loop's set_epoch), leaves that later epoch be.

        Args:
            state: what state_dict returned, or a torchdata StatefulDataLoader's state_dict
                (loaded here, it resumes a DataLoader with any worker count; loaded into a
                StatefulDataLoader, one with the worker count it was taken with).
        """
        state = _from_loader(state, self.batch_size)
        if not isinstance(state, dict) or not all(
            is_count(state.get(k), 0) for k in ("epoch", "consumed", "seed", "world_size")
        ):
            raise ShardpackError(f"not a state_dict of a shardpack dataset: {state!r}")
        if state["seed"] != self.seed:
            raise ShardpackError(
                f"the state was taken with seed={state['seed']}, this dataset has {self.seed}: "
                f"its order differs, so the rest of the epoch cannot be found; build the "
                f"dataset with seed={state['seed']}"
            )
        if state["world_size"] != self.world_size:  # a job's rank count is not the caller's pick
            raise ShardpackError(
                f"the state was taken with world_size={state['world_size']}, this dataset has "
                f"{self.world_size}: each rank's share of the epoch differs, so the rest of "
                f"epoch {state['epoch']} cannot be found; resume on {state['world_size']} "
                f"ranks, or go on with set_epoch({state['epoch'] + 1})"
            )
        if state.get("records", self.total()) != self.total():  # a state from before has none
            raise ShardpackError(
                f"the state was taken over {state['records']!r} records, this dataset reads "
                f"{self.total()} (the pack grew, or is another): the rest of epoch "
                f"{state['epoch']} cannot be found; go on with set_epoch({state['epoch'] + 1})"
            )
        if state.get("version", self.version()) != self.version():  # (none before versions)
            raise ShardpackError(
                "the state was taken over other shards than this dataset reads (the pack was "
                f"grown or updated since, or is another): the rest of epoch {state['epoch']} "
                f"cannot be found; go on with set_epoch({state['epoch'] + 1})"
            )
        order = _version([self.ordering()])
        if state.get("order", order) != order:  # (none before orders)
            raise ShardpackError(  # else the rest read would be another order's: wrong records
                f"the state was taken with other arguments than this dataset's "
                f"({self.ordering()}): epoch {state['epoch']}'s order differs, so its rest "
                f"cannot be found; build the dataset with the arguments the state was taken "
                f"with, or go on with set_epoch({state['epoch'] + 1})"
            )
        part = _worker_part_state(state)
        if state["epoch"] < self.epoch and state["consumed"] >= self.epoch_length(state["epoch"]):
            return  # that epoch was read to its end and a later one is set: none of it is left
        self._resuming = False
        self.set_epoch(state["epoch"])
        self._start, self._part, self._resuming = state["consumed"], part, True


class ShardDataset(_Epochs):
    """An IterableDataset over one split of a pack, for training on one or many GPUs.

    See this module's docstring for the order, the shares and the memory. Under DDP, build it
    after init_process_group (rank and world size come from torch.distributed; one built
    before refuses to read once the group has more than one rank), give the
    DataLoader the same batch_size, call set_epoch(e) before each epoch (DataLoader workers
    must not be persistent: each epoch's workers copy the dataset as set_epoch left it, and a
    persistent one refuses a second epoch whose order would differ).

    Args:
        out: the output folder or URL of a pack run (compression "none": records are read at
            their offsets).
        split: which split to read.
        shuffle: a new order each epoch; False reads the order pack wrote.
        seed: the orders' seed; the same on every rank.
        shuffle_block: shards whose records are permuted together.
        batch_size: the DataLoader's batch size (1 for batch_size=None).
        drop_remainder: make ranks equal by leaving records out rather than repeating the
            first ones (the default keeps every record in every epoch).
        rank, world_size: this rank and the rank count; one None: torch.distributed's when it
            is initialised (outside a group, give both or neither: a world of one).
        decode: decode `image` to a uint8 tensor; False leaves the stored bytes.
        layout: "chw" (3 x H x W, as torchvision's models take) or "hwc".
        transform: called on each record (a dict) before it is yielded; what it returns is
            yielded.
        max_pixels: with decode, refuse an image claiming more pixels than this.
        storage_options: options for the URL's fsspec filesystem.
        cache_dir: a local folder where whole shards are copied, fetched ahead of the
            records read (a pack under a URL then reads at disk speed), and kept for a reader
            started later; its own subfolder per pack. None reads records where they are.
        cache_limit: the most bytes the cache keeps, besides the shards being read (the
            longest held go first); None keeps every shard fetched. Only with cache_dir.

    Raises:
        IndexFormatError: the index is missing or malformed, or the shards are GZIP.
        ShardpackError: an argument is out of range, or rank or world_size is given alone
            outside a torch.distributed group.
    """

    def __init__(
        self,
        out: str | os.PathLike,
        split: str = "train",
        *,
        shuffle: bool = True,
        seed: int = 0,
        shuffle_block: int = SHUFFLE_BLOCK,
        batch_size: int = 1,
        drop_remainder: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        decode: bool = True,
        layout: str = "chw",
        transform: Callable[[dict], object] | None = None,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        storage_options: dict | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | None = None,
    ) -> None:
        # a world of one by default, before init_process_group: sequence() checks it still is
        self._alone = rank is None and world_size is None and not _distributed()
        rank, world_size = _rank_and_world(rank, world_size)
        super().__init__(seed, batch_size, world_size)
        if not is_count(shuffle_block):
            raise ShardpackError(
                f"shuffle_block must be a positive integer, got: {shuffle_block!r}"
            )
        if cache_limit is not None and cache_dir is None:  # else no cache, and nothing said
            raise ShardpackError(
                f"cache_limit bounds the copies in cache_dir, and none is given, got: "
                f"cache_limit={cache_limit!r}; pass cache_dir= too, or no cache_limit"
            )
        if layout not in ("chw", "hwc"):
            raise ShardpackError(f"layout must be 'chw' or 'hwc', got: {layout!r}")
        if transform is not None and not callable(transform):  # else a TypeError in a worker
            raise ShardpackError(
                f"transform must be a function of a record (a dict), or None, got: {transform!r}"
            )
        self.out, self.split, self.storage_options = out, split, storage_options
        self.shuffle, self.shuffle_block = shuffle, shuffle_block
        self.drop_remainder = drop_remainder
        self.rank, self.decode, self.layout, self.transform = rank, decode, layout, transform
        self.max_pixels = max_pixels
        self.cache_dir, self.cache_limit = cache_dir, cache_limit
        index = random_access_index(out, storage_options=storage_options)  # GZIP: OUT named
        shards = index.split(split).shards
        check_sizes(index, shards)  # before 8 bytes a record are taken for what they claim
        none_to_read(sum(s.num_records for s in shards), self.world_size, drop_remainder,
                     f"{index.out}: split {split!r}", "ranks")  # fmt: skip
        self.counts = [s.num_records for s in shards]
        self._files = [s.file for s in shards]
        self._version = _version(f"{s.file} {s.sha256}" for s in shards)
        self._ends = np.cumsum(self.counts)
        self._records: Records | None = None
        self._cache: ShardCache | None = None
        self._records_pid = 0
        self._open()  # refuses GZIP shards and a bad cache now, not in a worker
        if decode:  # loaded once here, not by each DataLoader worker of each epoch (~0.1-1 s)
            images._opencv()

    def _positions(self) -> range:
        return share(self.total(), self.rank, self.world_size, self.drop_remainder)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        if self._records is not None:  # opened afresh, as each epoch's DataLoader workers do:
            self._records.close()  # a pack updated since is refused (_check_unchanged), not
            self._records = None  # read through shards opened before and after it changed

    def total(self) -> int:
        return sum(self.counts)

    def version(self) -> int:
        return self._version

    def reorders(self) -> bool:
        return self.shuffle

    def ordering(self) -> str:
        block = f", shuffle_block={self.shuffle_block}" if self.shuffle else ""
        return f"shuffle={bool(self.shuffle)}{block}, drop_remainder={bool(self.drop_remainder)}"

    def epoch_length(self, epoch: int) -> int:
        return len(self._positions())

    def sequence(self) -> np.ndarray:
        if self._alone and _distributed() and torch.distributed.get_world_size() != 1:
            raise ShardpackError(
                "this ShardDataset was built before init_process_group, as a world of one: "
                "every rank would read every record; build it after init_process_group (or "
                "pass rank= and world_size=)"
            )
        total = self.total()
        positions = self._positions()
        positions = np.arange(positions.start, positions.stop, dtype=np.int64)
        if not self.shuffle:
            return positions % max(total, 1)
        return epoch_order(self.counts, positions, self.seed, self.epoch, self.shuffle_block)

    def read(self, item) -> object:
        records = self._open()
        if self._cache is None:
            record = records[int(item)]
        else:  # the fetch reads the pack's own index's shards; Records, the cache's copies
            with unless_changed(self._cache.index, _BUILD_AGAIN):
                record = self._cache.read(self._files[self._shard(item)],
                                          lambda: records[int(item)])  # fmt: skip
        if self.decode:
            pixels = record["image"]  # raw pixels are the record's read-only bytes: copied
            image = torch.from_numpy(pixels if pixels.flags.writeable else pixels.copy())
            record["image"] = image.permute(2, 0, 1) if self.layout == "chw" else image
        return record if self.transform is None else self.transform(record)

    def read_all(self, items: np.ndarray) -> Iterator[object]:
        """Each shard closed after its last record of `items` (a rank's range spans
        shards / ranks of them: all kept open, a large pack ran past the open-file limit), and
        with a cache, fetched ahead of its first record, so that the cache may remove it."""
        if not len(items):
            return
        shards = np.searchsorted(self._ends, items, side="right")
        last = np.full(len(self.counts), -1, np.int64)
        np.maximum.at(last, shards, np.arange(len(shards)))
        records, cache = self._open(), self._cache
        order = [self._files[k] for k in dict.fromkeys(shards.tolist())] if cache else []
        seen: set[int] = set()
        try:
            for p, (item, k) in enumerate(zip(items, shards.tolist(), strict=True)):
                if cache is not None and k not in seen:  # its first record: fetch it, and
                    seen.add(k)  # start on the next ones
                    with unless_changed(cache.index, _BUILD_AGAIN):
                        cache.ensure(self._files[k], order[len(seen) :])
                yield self.read(item)
                if last[k] == p:
                    records.release(k)
                    if cache is not None:
                        cache.done(self._files[k])
        finally:
            if cache is not None:
                cache.close()

    def _shard(self, item) -> int:
        return int(np.searchsorted(self._ends, item, side="right"))

    def _open(self) -> Records:
        """This process's Records (over the cache folder, with one): a forked DataLoader
        worker opens its own files."""
        if self._records is None or self._records_pid != os.getpid():
            out, options = self.out, self.storage_options
            if self.cache_dir is not None:
                index = load_index(self.out, self.storage_options)
                self._cache = ShardCache(index, self.cache_dir, self.cache_limit)
                out, options = self._cache.folder, None
            records = _Records(out, self.split, decode=self.decode,
                               max_pixels=self.max_pixels, storage_options=options)  # fmt: skip
            self._check_unchanged(records)
            self._records, self._records_pid = records, os.getpid()
        return self._records

    def _check_unchanged(self, records: Records) -> None:
        """Refuse a Records (a DataLoader worker's, opened as an epoch starts) whose index no
        longer lists this dataset's shards first: its record numbers would name other records
        (an update rewrote or removed shards). An append lists new shards after them: read as
        they were when the dataset was built."""
        shards = records.index.split(self.split).shards[: len(self._files)]
        if _version(f"{s.file} {s.sha256}" for s in shards) != self._version:
            records.close()
            raise ShardpackError(
                f"{os.fspath(self.out)}: split {self.split!r} holds other shards than when "
                "this ShardDataset was built (the pack was updated since, or replaced): its "
                "records moved; build the ShardDataset again"
            )

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_records": None, "_cache": None}


class _Records(Records):
    """A ShardDataset's Records: once its pack changed under it, it is built again."""

    AGAIN = _BUILD_AGAIN


class Mix(_Epochs):
    """Several ShardDatasets read as one, each record from a source drawn by weight from
    (seed, epoch) alone; made by mix(), which says how an epoch ends. set_epoch,
    state_dict and load_state_dict work as ShardDataset's, for the mixed stream."""

    def __init__(self, sources: Sequence[tuple[ShardDataset, float]], seed: int = 0,
                 end: str = "first") -> None:  # fmt: skip
        sources = _pairs(sources)
        bad = [w for s, w in sources
               if not (isinstance(s, ShardDataset) and isinstance(w, int | float) and w > 0
                       and math.isfinite(w))]  # fmt: skip
        if not sources or bad:
            raise ShardpackError(f"{_MIX_TAKES}, got: {(bad[0] if bad else sources)!r}")
        if end not in MIX_ENDS:
            raise ShardpackError(f"end must be one of {', '.join(MIX_ENDS)}, got: {end!r}")
        first = sources[0][0]
        for s, _ in sources:
            if (s.rank, s.world_size, s.batch_size) != (first.rank, first.world_size,
                                                        first.batch_size):  # fmt: skip
                raise ShardpackError("mixed datasets must have one rank, world_size and batch_size")
        super().__init__(seed, first.batch_size, first.world_size)
        self.sources = [s for s, _ in sources]
        self.weights = [float(w) for _, w in sources]
        self.end = end

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        for source in self.sources:
            source.set_epoch(epoch)

    def sequence(self) -> np.ndarray:
        """(source, record number) pairs."""
        own = [s.sequence() for s in self.sources]
        choices = mix_choices(self.weights, [len(o) for o in own], self.seed, self.epoch, self.end)
        items = np.empty((len(choices), 2), np.int64)
        items[:, 0] = choices
        for j, records in enumerate(own):
            mine = choices == j
            items[mine, 1] = records[: int(mine.sum())]
        return items

    def read(self, item) -> object:
        return self.sources[int(item[0])].read(item[1])

    def read_all(self, items: np.ndarray) -> Iterator[object]:
        """Each source's records through its own read_all (its shards closed after their last
        record, and fetched ahead with a cache, whose limit then holds), in the mixed order."""
        streams = [source.read_all(items[items[:, 0] == j, 1])
                   for j, source in enumerate(self.sources)]  # fmt: skip
        try:
            for j in items[:, 0].tolist():
                yield next(streams[j])
        finally:
            for stream in streams:
                stream.close()

    def total(self) -> int:
        return sum(source.total() for source in self.sources)

    def version(self) -> int:
        return _version(str(source.version()) for source in self.sources)

    def ordering(self) -> str:
        sources = "; ".join(f"seed={source.seed}, {source.ordering()}" for source in self.sources)
        return f"weights={self.weights}, end={self.end!r}, sources: {sources}"

    def epoch_length(self, epoch: int) -> int:
        lengths = [source.epoch_length(epoch) for source in self.sources]
        return len(mix_choices(self.weights, lengths, self.seed, epoch, self.end))


def mix(
    sources: Sequence[tuple[ShardDataset | str | os.PathLike, float]], seed: int = 0,
    end: str = "first", **options,
) -> Mix:  # fmt: skip
    """Several packs read as one PyTorch dataset, each record from a source drawn by weight:
    `mix([(a, 0.7), (b, 0.3)], seed=0)`.

    Args:
        sources: (dataset, weight) pairs: shardpack.torch.ShardDatasets (of one rank, world
            size and batch size), or packs' OUT, made into ShardDataset(out, **options).
        seed: the draws' seed, the same on every rank (the choices are then the same on
            every rank, and ranks stay equal).
        end: "first": the epoch ends when a source drawn has no record left (the weights
            hold to the last record; the other sources' rest is unread that epoch). "all":
            a spent source drops out and the rest are drawn with their weights renormalised
            until every source has given each of its records once.
        options: ShardDataset's arguments, for sources given as OUT.

    Raises:
        ShardpackError: a source is no (dataset, weight) pair, a weight is not above 0, `end`
            is not one of MIX_ENDS, or the datasets differ in rank, world size or batch size.
    """
    made = [(s if isinstance(s, ShardDataset) else ShardDataset(s, **options), w)
            for s, w in _pairs(sources)]  # fmt: skip
    return Mix(made, seed, end)


def _pairs(sources: object) -> list[tuple[object, object]]:
    """mix's sources as (source, weight) pairs, refused by name where one is no pair (a
    list of OUTs alone failed with a ValueError from inside the unpacking)."""
    if isinstance(sources, str | bytes | dict | os.PathLike) or not isinstance(sources, Iterable):
        raise ShardpackError(f"{_MIX_TAKES}, got: {sources!r}")
    pairs = list(sources)
    for pair in pairs:
        if not (isinstance(pair, list | tuple) and len(pair) == 2):
            raise ShardpackError(f"{_MIX_TAKES}, got: {pair!r}")
    return [tuple(pair) for pair in pairs]


def _from_loader(state: dict, batch_size: int) -> dict:
    """A torchdata StatefulDataLoader's state_dict as this module's own (epoch, records of the
    rank's sequence consumed, seed, world size); any other dict as it is.

    A worker-less loader keeps the dataset's own state. A loader with workers keeps each
    worker's, as of the last batch it yielded from that worker: the batches come in the
    sequence's order, so the records consumed are a prefix of it, and its length is the sum of
    what each worker yielded of its part, plus the batches taken since the last snapshot
    (`snapshot_every_n_steps`; full ones, since only an epoch's last batch can be short).
    """
    if not isinstance(state, dict):
        return state
    if "_num_yielded" in state and "dataset_state" in state:  # no workers
        return state["dataset_state"] or {}
    snapshot = state.get("_snapshot")
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("_worker_snapshots"), dict):
        return state
    workers = [w.get("dataset_state") if isinstance(w, dict) else None
               for w in snapshot["_worker_snapshots"].values()]  # fmt: skip
    if not workers or not all(isinstance(w, dict) and "worker_taken" in w for w in workers):
        raise ShardpackError("a StatefulDataLoader's state without its workers' dataset states: "
                             "take it from a loader over a shardpack dataset")  # fmt: skip
    since = state.get("_steps_since_snapshot", 0)
    first = workers[0]
    if not all(is_count(w.get("worker_taken"), 0) for w in workers) or not is_count(since, 0):
        raise ShardpackError(f"not a state_dict of a shardpack dataset: {first!r}")
    keys = ("epoch", "consumed", "seed", "world_size", "records", "version", "order")
    if any(tuple(w.get(k) for k in keys) != tuple(first.get(k) for k in keys) for w in workers):
        raise ShardpackError("a StatefulDataLoader's workers disagree on the epoch: "
                             "not a state of one loader over one shardpack dataset")  # fmt: skip
    consumed = first.get("consumed", 0) + sum(w["worker_taken"] for w in workers)
    # "records", "version", "order": not in a state from before them
    state = {k: first[k] for k in keys if k in first}
    return state | {"consumed": consumed + since * batch_size}


def _version(parts: Iterator[str]) -> int:
    """A 48-bit number of these texts in this order (exact in JSON, where a state may be kept)."""
    digest = hashlib.blake2b("\n".join(parts).encode("utf-8", "surrogateescape"), digest_size=6)
    return int.from_bytes(digest.digest(), "big")


def _worker_part_state(state: dict) -> tuple[int, int, int] | None:
    """A worker's own state (which StatefulDataLoader loads into that worker): its (worker,
    workers, records of its part yielded); None for a rank's state."""
    if "worker" not in state:
        return None
    part = (state.get("worker"), state.get("workers"), state.get("worker_taken"))
    worker = get_worker_info()
    if worker is not None and is_count(part[1]) and part[1] != worker.num_workers:
        raise ShardpackError(  # a StatefulDataLoader hands each worker its own part's state
            f"a StatefulDataLoader's state taken with num_workers={part[1]}, loaded into one "
            f"with num_workers={worker.num_workers}: load it into a StatefulDataLoader with "
            f"num_workers={part[1]}, or into the dataset (ShardDataset.load_state_dict takes "
            "the loader's state and resumes any worker count)"
        )
    if (
        not all(is_count(v, 0) for v in part)
        or worker is None
        or part[:2] != (worker.id, worker.num_workers)
    ):
        raise ShardpackError(
            "a DataLoader worker's state, loaded outside that worker: load the whole "
            "StatefulDataLoader's state_dict() instead (the dataset's load_state_dict takes it)"
        )
    return part


def _rank_and_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """The rank and world size given; one not given is torch.distributed's when it is
    initialised (as DistributedSampler takes them), and neither given outside a group is a
    world of one. One alone outside a group is refused: a world_size without its rank made
    every rank rank 0, each reading the same share."""
    told = ""  # where one came from the group, the refusal says so
    if _distributed() and (rank is None) != (world_size is None):
        told = " (torch.distributed's rank; pass rank= too)" if rank is None else (
            " (torch.distributed's world size; pass world_size= too)")  # fmt: skip
    if _distributed():
        rank = torch.distributed.get_rank() if rank is None else rank
        world_size = torch.distributed.get_world_size() if world_size is None else world_size
    elif (rank is None) != (world_size is None):
        raise ShardpackError(
            f"rank and world_size go together, got: rank={rank!r}, world_size={world_size!r}; "
            "pass both, or neither (torch.distributed's once init_process_group has run, else "
            "a world of one)"
        )
    rank = 0 if rank is None else rank
    world_size = 1 if world_size is None else world_size
    if not (is_count(world_size) and is_count(rank, 0) and rank < world_size):
        raise ShardpackError(
            f"rank must be 0 <= rank < world_size, got: rank={rank!r}, "
            f"world_size={world_size!r}{told}"
        )
    return rank, world_size


def _check_loader_batch(batch_size: int, caller) -> None:
    """Refuse a DataLoader whose batch size is not the dataset's, asked of the frame that takes
    the first record in its worker: torch's fetcher, whose index list is a batch long (a
    DataLoader shows its batch size to a dataset nowhere else). Another caller passes."""
    for _ in range(3):  # the fetcher, or a generator or two of the caller's between
        if caller is None:
            return
        fetcher, asked = caller.f_locals.get("self"), caller.f_locals.get("possibly_batched_index")
        if caller.f_code.co_name == "fetch" and hasattr(fetcher, "auto_collation"):
            loader = len(asked) if fetcher.auto_collation else 1
            if loader != batch_size:
                raise ShardpackError(
                    f"the DataLoader's batch_size is {loader}, the dataset's {batch_size}: give "
                    f"the dataset batch_size={loader} (1 for the DataLoader's batch_size=None); "
                    "its workers take turns by the dataset's, so the DataLoader's batches would "
                    "hold its records out of order, and a resume would read some twice and "
                    "some never"
                )
            return
        caller = caller.f_back


def _distributed() -> bool:
    """Whether this process is in a torch.distributed group."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def collate_objects(
    records: Sequence[dict],
    boxes: str = "objects/bbox",
    labels: str = "objects/label",
    masks: str | None = None,
) -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]]]:
    """A DataLoader's collate_fn for object datasets, giving what torchvision's detection models
    take: a list of images (float32 3 x H x W in [0, 1]) and a list of targets, one a record,
    {"boxes": float32 [n, 4] [xmin, ymin, xmax, ymax] in pixels, "labels": int64 [n]}, and
    with `masks` (an instance-id map feature: schema.py's MASK) "masks": uint8
    [n, H, W] as Mask R-CNN takes them (all 0 for a record without a map); records hold
    different numbers of objects, so nothing is stacked. Use with ShardDataset's defaults
    (decode=True, layout="chw"): `DataLoader(ds, batch_size=8, collate_fn=collate_objects)`, or
    `functools.partial(collate_objects, masks="mask")`.

    Raises:
        ShardpackError: a record lacks `boxes`, `labels` or `masks`, its labels are not class
            ids (text: map the names to ids in ShardDataset's transform), or its map is not a
            PNG of its image's size.
    """
    images, targets = [], []
    for record in records:
        named = (boxes, labels) if masks is None else (boxes, labels, masks)
        if any(name not in record for name in named):
            raise ShardpackError(f"collate_objects: record {record.get('key')!r} has no "
                                 f"{' or '.join(map(repr, named))}; name the features it holds "
                                 "(boxes=..., labels=..., masks=...)")  # fmt: skip
        ids = np.asarray(record[labels])
        ids = ids.astype(np.int64) if ids.size == 0 else ids  # an empty text list: no labels
        if ids.dtype.kind not in "iu":
            shown = ", ".join(map(repr, ids[:2].tolist())) + (", ..." if ids.size > 2 else "")
            held = f"text ({shown})" if ids.dtype.kind in "US" else f"{ids.dtype} values"
            raise ShardpackError(
                f"collate_objects: record {record.get('key')!r}: {labels!r} holds {held}, not "
                "class ids; map the names to ids in ShardDataset's transform"
            )
        images.append(record["image"].float() / 255)
        xyxy = pixel_boxes(record[boxes], record["height"], record["width"])
        target = {"boxes": torch.from_numpy(xyxy),
                  "labels": torch.from_numpy(ids.astype(np.int64))}  # fmt: skip
        if masks is not None:
            target["masks"] = torch.from_numpy(_instance_masks(record, masks, len(xyxy)))
        targets.append(target)
    return images, targets


def _instance_masks(record: dict, name: str, count: int) -> np.ndarray:
    """A record's instance-id map as `count` binary masks [count, H, W] (uint8)."""
    size = (record["height"], record["width"])
    try:
        ids = decode_mask(record[name])
    except ValueError as e:  # images.BadImage
        raise ShardpackError(
            f"collate_objects: record {record.get('key')!r}: {name!r} does "
            f"not decode ({e}); shardpack verify --decode names each"
        ) from None
    if ids is None:
        return np.zeros((count, *size), np.uint8)
    if ids.shape != size:
        raise ShardpackError(
            f"collate_objects: record {record.get('key')!r}: {name!r} is "
            f"{ids.shape[1]}x{ids.shape[0]}, its image {size[1]}x{size[0]}"
        )
    return (ids[None] == np.arange(1, count + 1)[:, None, None]).astype(np.uint8)
