"""Reading shards back: tf_dataset for TensorFlow, iter_examples for plain Python."""

from __future__ import annotations

import itertools
import math
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from shardpack import images
from shardpack.containers import CONTAINERS, checked, open_shard, size_fault
from shardpack.errors import (
    RESTORE_SHARD,
    Option,
    RecordError,
    ShardpackError,
    install_hint,
    is_count,
)
from shardpack.images import BadImage
from shardpack.index import (
    MOST_CHANNELS,
    MOST_SIDE,
    Index,
    ShardInfo,
    load_index,
    record_fault,
)
from shardpack.options import DEFAULT_MAX_PIXELS
from shardpack.read.changed import check_opened, out_changed, unless_changed
from shardpack.read.order import check_seed, none_to_read, segments, share
from shardpack.schema import Schema

# Records held for iter_examples' shuffle: enough to mix neighbours from different shards.
SHUFFLE_BUFFER = 1024
# And the most bytes they may hold: 1,024 small photos fit many times, while 1,024 records of
# up to a GiB each (MAX_RECORD_BYTES) would not fit any machine; larger records, fewer held.
SHUFFLE_BUFFER_BYTES = 256 << 20
# tf_dataset's record shuffle buffer; the file-order shuffle does most of the mixing.
TF_SHUFFLE_BUFFER = 8192
# What tf_dataset's OutChangedError says to do.
_TF_AGAIN = "call tf_dataset again"


def to_python(example: dict[str, list], schema: Schema) -> dict[str, object]:
    """A decoded Example that record_fault passed, as the schema declares it: scalars as int,
    float or str (text), lists as numpy arrays of their dtype and shape (boxes as n x 4), text
    lists as lists of str."""
    decoders = schema.decoders
    return {name: decoders[name](values) for name, values in example.items()}


def decode_pixels(features: dict, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Decode a record's image to uint8 HxWx3 RGB (raw records are reshaped, not decoded).

    The size is checked against `max_pixels` from the header before any pixel is decoded.

    Raises:
        images.BadImage: the image does not decode, disagrees with its fields, or is too large.
    """

    data = features["image"]
    if features["format"] == "raw":
        shape = (features["height"], features["width"], features["channels"])
        if min(shape) < 1 or shape[2] != 3 or len(data) != math.prod(shape):
            raise images.BadImage(f"raw image of {len(data)} bytes, fields say "
                                  f"{shape[0]}x{shape[1]}x{shape[2]}")  # fmt: skip
        height, width = shape[:2]
    else:
        info = images.probe(data)
        if info is None:
            raise images.BadImage("not a JPEG, PNG or WebP image")
        height, width = info.height, info.width
    if height * width > max_pixels:
        raise images.BadImage(f"{width}x{height} pixels is over max_pixels {max_pixels}")
    if features["format"] == "raw":
        return np.frombuffer(data, np.uint8).reshape(shape)
    # As TensorFlow decodes it: an EXIF orientation (bytes packed with --encode keep) is left
    # unapplied, so the pixels agree with the height and width fields, which follow the header.
    return images.decode(data, order="rgb", orient=False)


def check_max_pixels(max_pixels: object) -> int:
    """A reader's max_pixels, refused by name unless a positive int: a text failed deep inside a
    read, and 0 or less blamed the first record's image as if its shard were damaged."""
    if not is_count(max_pixels):
        raise ShardpackError(f"max_pixels must be a positive integer, got: {max_pixels!r}")
    return max_pixels


def reader_share(shard: tuple[int, int] | None = None) -> tuple[int, int]:
    """(index, count) of this reader among all readers: `shard` times the PyTorch DataLoader
    worker this runs in, if any (torch is consulted only when the caller imported it)."""
    index, count = _checked_shard(shard)
    torch = sys.modules.get("torch")
    data = getattr(getattr(torch, "utils", None), "data", None)
    worker = data.get_worker_info() if data is not None else None
    if worker is not None:
        index, count = index * worker.num_workers + worker.id, count * worker.num_workers
    return index, count


def _checked_shard(shard: tuple[int, int] | None) -> tuple[int, int]:
    if shard is None:
        return 0, 1
    if (
        not isinstance(shard, tuple | list)
        or len(shard) != 2
        or not all(type(v) is int for v in shard)
        or not 0 <= shard[0] < shard[1]
    ):
        raise ShardpackError(
            f"shard must be (index, count) with 0 <= index < count, got: {shard!r}"
        )
    return shard[0], shard[1]


@dataclass(frozen=True)
class _Share:
    """One reader's part of a split: runs of records (shard, first record, end), in the
    split's written order, and how many records they hold."""

    runs: list[tuple[ShardInfo, int, int]]
    num_records: int


def _share_of(index: Index, split: str, reader: int, readers: int, drop_remainder: bool) -> _Share:
    """A contiguous range of the split's written order, the same length for every reader
    (order.share): the shares together hold each record once, padding aside."""
    shards = index.split(split).shards
    counts = [s.num_records for s in shards]
    none_to_read(sum(counts), readers, drop_remainder, f"{index.out}: split {split!r}",
                 "readers (hosts x DataLoader workers)")  # fmt: skip
    positions = share(sum(counts), reader, readers, drop_remainder)
    runs = [(shards[k], first, end) for k, first, end in segments(counts, positions)]
    return _Share(runs, len(positions))


def iter_examples(
    out: str | os.PathLike | Index,
    split: str = "train",
    *,
    decode: bool = False,
    shuffle: bool = False,
    seed: int | None = None,
    shard: tuple[int, int] | None = None,
    drop_remainder: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    storage_options: dict | None = None,
) -> Iterator[dict[str, object]]:
    """Yield every record of a split as a dict of Python and numpy values, without TensorFlow.

    CRCs and each record's features are checked as the shards are read. Run from several
    readers, each yields its own share: a contiguous range of the split's records in the
    order pack wrote them, and every reader's the same length, whatever the shard and reader
    counts. By default the last shares are padded with the split's first records (a few
    records come twice, none is left out); with drop_remainder they are cut (a few records,
    fewer than the readers, are left out). Either way the shares together yield each record
    once, padding aside. Inside a PyTorch DataLoader with workers, each worker is a reader of
    its own (torch.utils.data.get_worker_info()), so an IterableDataset over this needs no
    code of its own to split the data. Shards in an object store stream, record by record.

    Args:
        out: the output folder or URL (s3://, gs://, memory://...) of a pack run, or its
            Index loaded already (index.json read once: inspect's).
        split: which split to read.
        decode: turn `image` into a uint8 HxWx3 RGB array instead of its stored bytes.
        shuffle: visit shards in random order and mix records through a buffer of at most
            1,024 records and 256 MiB (SHUFFLE_BUFFER, SHUFFLE_BUFFER_BYTES): large records
            mix less, and memory stays bounded.
        seed: makes the shuffled order repeat.
        shard: (index, count): read only this host's share, for training on several hosts.
        drop_remainder: make the shares equal by leaving records out rather than repeating.
        max_pixels: with decode, refuse an image claiming more pixels than this.
        storage_options: options for the URL's fsspec filesystem (credentials, endpoint...).

    Raises:
        IndexFormatError: the index is missing, malformed or names an unsafe path.
        RecordError: a record fails its CRC, is not an Example the index describes, or (with
            decode) its image does not decode.
        ShardpackError: `shard` is not (index, count), max_pixels is not a positive integer, or
            seed is not None nor an integer of at least 0.
        StorageError: the URL's filesystem package is missing.
    """
    check_max_pixels(max_pixels)
    if seed is not None:  # random.Random takes -1 for 1, and a float or a text as any other
        check_seed("seed", seed)
    index = out if isinstance(out, Index) else load_index(out, storage_options)
    runs = list(_share_of(index, split, *reader_share(shard), drop_remainder).runs)
    rng = random.Random(seed)
    if shuffle:
        rng.shuffle(runs)
    records = (
        parse_record(index, index.shard_path(info), position, example, decode, max_pixels)
        for info, first, end in runs
        for position, example in _run(index, info, first, end)
    )
    if shuffle:
        records = _buffer_shuffle(records, rng)
    with unless_changed(index):  # a shard gone or rewritten as OUT was updated: not damaged
        yield from records


def _run(index: Index, info: ShardInfo, first: int, end: int) -> Iterator[tuple[int, object]]:
    """(position, example) of records first..end of one shard. A shard that ends before `end`
    is refused, not read as fewer records: a TFRecord cut at a record's end frames well, and
    a reader short of its share would leave the other ranks waiting. A run to the shard's end
    reads on past its last record, so that a shard holding more (another shard put in its
    place, bytes appended, a tar's end cut or changed) is refused as Records and verify
    refuse it, not read as if whole."""
    records = _shard_records(index, info)
    held = 0
    for held, (position, example) in enumerate(itertools.islice(records, end), 1):
        if held == 1:  # the shard is open: the same name and size may hold another pack's
            check_opened(index, index.shard_path(info))
        if held > first:
            yield position, example
    if held < end:
        raise count_fault(index.shard_path(info), held, info.num_records)
    if end == info.num_records and next(records, None) is not None:
        raise count_fault(index.shard_path(info), f"more than {held:,}", info.num_records)


def count_fault(path: str, held: int | str, said: int) -> RecordError:
    """A shard holding another number of records than the index says: a fault of the whole
    file, at no byte of it."""
    held = f"{held:,}" if isinstance(held, int) else held
    return RecordError(path, None, f"holds {held} records, index.json says {said:,} (cut "
                                   f"short or replaced); {RESTORE_SHARD}")  # fmt: skip


def check_sizes(index: Index, shards: list[ShardInfo] | tuple[ShardInfo, ...]) -> None:
    """Refuse a shard missing or of another size than the index says, from one listing of
    OUT: for a reader that sizes its work by the shards' record counts before it reads one
    (index.py bounds each count by the bytes the index gives; this holds them to the files).

    Raises:
        RecordError: naming the shard.
    """
    sizes = {e.name: e.size for e in index.storage.listdir() if not e.is_dir}
    for info in shards:
        if (size := sizes.get(info.file)) != info.num_bytes:
            path = index.shard_path(info)
            what = "gone" if size is None else "rewritten"
            raise out_changed(index, path, what) or size_fault(path, size, info.num_bytes)


def _shard_records(index: Index, info: ShardInfo) -> Iterator[tuple[int, object]]:
    """(position, example) of every record of one shard, as its container reads them."""
    return index.container.iter_records(
        index.storage, info.file, index.compression, num_bytes=info.num_bytes
    )


def parse_record(
    index: Index, path: str, position: int, example: dict[str, list] | RecordError, decode: bool,
    max_pixels: int,
) -> dict[str, object]:  # fmt: skip
    """One record, as its container read it, as the dict iter_examples yields, checked
    against the index.

    Raises:
        RecordError: not a record the index describes, or (with decode) an image that does
            not decode; names the shard and the record's position.
    """
    example = checked(example)  # what the container could not decode
    if fault := record_fault(example, index.schema):
        raise RecordError(path, position, fault, index.container.position_unit)
    record = to_python(example, index.schema)
    if decode:
        try:
            record["image"] = decode_pixels(record, max_pixels)
        except BadImage as e:
            raise RecordError(path, position, f"image does not decode: {e}",
                              index.container.position_unit) from None  # fmt: skip
    return record


def _buffer_shuffle(records: Iterator[dict], rng: random.Random) -> Iterator[dict]:
    """Mix records through a buffer of at most SHUFFLE_BUFFER records and SHUFFLE_BUFFER_BYTES
    bytes. A record larger than that is never held: it passes on as it comes, so that memory
    holds at most one of them beside the buffer (the reader's, while the next is read)."""
    buffer: list[tuple[int, dict]] = []
    held = 0
    for record in records:
        size = _record_bytes(record)
        if size > SHUFFLE_BUFFER_BYTES:
            yield record
            continue
        while buffer and (len(buffer) >= SHUFFLE_BUFFER or held + size > SHUFFLE_BUFFER_BYTES):
            i = rng.randrange(len(buffer))
            buffer[i], buffer[-1] = buffer[-1], buffer[i]
            held -= buffer[-1][0]
            yield buffer.pop()[1]  # no name kept for it here while the next record is read
        buffer.append((size, record))
        held += size
    rng.shuffle(buffer)
    yield from (record for _, record in buffer)


def _record_bytes(record: dict) -> int:
    """About the bytes a record holds: its arrays, byte strings and text, 8 a number."""
    return sum(
        v.nbytes if isinstance(v, np.ndarray) else len(v) if isinstance(v, bytes | str) else 8
        for v in record.values()
    )


def tf_dataset(
    out: str | os.PathLike,
    split: str = "train",
    *,
    shuffle: bool = True,
    seed: int | None = None,
    epochs: int | None = 1,
    batch_size: int | None = None,
    decode: bool = True,
    image_size: tuple[int, int] | None = None,
    num_parallel_reads: int | None = None,
    deterministic: bool = False,
    shard: tuple[int, int] | None = None,
    drop_remainder: bool = False,
    input_context=None,
    lists: str = "ragged",
    storage_options: dict | None = None,
):
    """A tf.data.Dataset of {"image", "label", ...} dicts over one split.

    Shard files are shuffled every epoch, read interleaved, mixed through a record buffer,
    parsed with the index's feature schema (every feature, with its dtype and shape: boxes as
    [n, 4]), decoded, batched and prefetched.

    TensorFlow reads local shards itself. Shards under a URL (any scheme, gs:// too) are read
    by shardpack's own reader through the filesystem the index was loaded with (the same
    storage_options), record by record, and handed to tf.data (`from_generator`): no
    tensorflow-io, and the credentials are the ones iter_examples uses.

    Args:
        out: the output folder or URL (s3://, gs://, memory://...) of a pack run.
        split: which split to read.
        shuffle: shuffle shard order and records, anew each epoch.
        seed: makes the order repeat run to run (and implies deterministic order).
        epochs: passes over the data; None repeats forever.
        batch_size: batch this many records; None yields single records.
        decode: decode `image` to uint8 HxWx3 RGB; False leaves the stored bytes.
        image_size: (height, width) to resize decoded images to, so that batches stack.
        num_parallel_reads: shards read at once; None lets tf.data tune it.
        deterministic: keep a fixed order even when reading in parallel.
        shard: (index, count): read only this pipeline's share, as iter_examples does: a
            contiguous range of the written order, every pipeline's the same length (the last
            padded with the split's first records); the shares together read each record
            once, padding aside.
        drop_remainder: make the shares equal by leaving records out rather than repeating.
        input_context: a tf.distribute.InputContext, as `distribute_datasets_from_function`
            passes; its pipeline id and count act as `shard`.
        lists: how batches hold variable-length list features: "ragged" (tf.RaggedTensor,
            [batch, None] or [batch, None, k]) or "padded" (dense, padded to the longest in the
            batch with 0, or -1 for lists of class labels such as a multi-label `label`;
            other variable-size tensors, such as images without image_size, are padded too).
            Single records hold them as dense [n] or [n, k] tensors.
        storage_options: options for the URL's fsspec filesystem (credentials, endpoint...).

    Raises:
        ShardpackError: TensorFlow is not installed, tf.data cannot read the shards, `shard` is
            not (index, count), `lists` is neither "ragged" nor "padded", epochs, batch_size or
            image_size is not a positive count or (height, width), seed not None nor a count
            (0 too), or batches would stack decoded images of sizes the index says differ.
        tf.errors.InvalidArgumentError: while iterating, a record is damaged or out of range,
            or a shard changed as OUT was updated: it names the shard and what to do (reading.md).
    """
    _check_tf_args(batch_size, epochs, image_size, lists, seed)
    index = load_index(out, storage_options)
    _check_tf_readable(index)  # before TensorFlow's import
    _check_stackable(index, batch_size, decode, image_size, lists)
    if input_context is not None:
        shard = (input_context.input_pipeline_id, input_context.num_input_pipelines)
    mine = _share_of(index, split, *_checked_shard(shard), drop_remainder)
    _check_local_shards(index, mine)
    tf = _tensorflow()
    ordered = deterministic or seed is not None or not shuffle
    ds = _tf_records(tf, index, mine, shuffle, seed, num_parallel_reads, ordered)
    ds = ds.repeat(epochs)  # after the shuffles, so that each epoch is a whole permutation
    if epochs is not None:  # the index knows the length: Keras then knows its steps per epoch
        ds = ds.apply(tf.data.experimental.assert_cardinality(mine.num_records * epochs))
    ds = _tf_parsed(tf, ds, index, decode, image_size, ordered)
    if batch_size is not None:
        ds = _batch(tf, ds, batch_size, lists, index.schema)
    return ds.prefetch(tf.data.AUTOTUNE)


def _tf_parsed(tf, ds, index: Index, decode: bool, image_size, ordered: bool):
    """Records parsed with the index's feature schema, class ids held to their class lists
    (as every other reader holds them: TensorFlow's parser knows no classes, and served a
    label of 12 in a dataset of 2), images decoded where asked."""
    spec = _tf_spec(tf, index.schema)
    labels = [(name, len(f.classes)) for name, f in index.schema.items() if f.classes is not None]

    def parse(record):
        features = tf.io.parse_single_example(record, spec)
        checks = [_tf_in_classes(tf, features[name], name, count, index.out)
                  for name, count in labels] + [_tf_sized(tf, features, index.out)]  # fmt: skip
        with tf.control_dependencies(checks):
            features["image"] = tf.identity(features["image"])
        if decode:
            features["image"] = _tf_decode(tf, features, index.encoding, image_size,
                                           index.image_size)  # fmt: skip
        return features

    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=ordered)


def _tf_in_classes(tf, values, name: str, count: int, out: str):
    """An assertion that a record's class ids (a scalar, or a list's values) index `count`
    classes; it stops the loop naming the feature and the mend."""
    flat = values.flat_values if isinstance(values, tf.RaggedTensor) else tf.reshape(values, [-1])
    # no quotes: TensorFlow's assertion message escapes them
    said = (f"{out}: a record holds a {name} class id outside its {count:,} classes; "
            f"`shardpack verify {out}` names the record: restore its shard from a copy or pack "
            "again")  # fmt: skip
    inside = tf.reduce_all(tf.logical_and(flat >= 0, flat < count))
    return tf.debugging.Assert(inside, [said])


def _tf_sized(tf, features, out: str):
    """An assertion that a record's height, width and channels are an image's, as record_fault
    holds them for every other reader; it stops the loop naming the mend."""
    said = (f"{out}: a record holds a height, width or channels that no image has (sides of 1 "
            f"to {MOST_SIDE:,} pixels, 1 to {MOST_CHANNELS} channels); `shardpack verify {out}` "
            "names the record: restore its shard from a copy or pack again")  # fmt: skip
    sides = tf.stack([features["height"], features["width"]])
    channels = features["channels"]
    inside = tf.logical_and(
        tf.reduce_all(tf.logical_and(sides >= 1, sides <= MOST_SIDE)),
        tf.logical_and(channels >= 1, channels <= MOST_CHANNELS),
    )
    return tf.debugging.Assert(inside, [said])


def _check_tf_readable(index: Index) -> None:
    """Refuse shards tf.data has no reader for, naming the readers that do."""
    if not index.container.tf_readable:
        readable = [name for name, c in CONTAINERS.items() if c.tf_readable]
        raise ShardpackError(
            f"{index.out}: tf_dataset reads {' or '.join(readable)} shards; these are "
            f"{index.container.name} (read them with iter_examples or Records, or pack with ",
            Option("format", readable[0]),
            ")",
        )


def _tensorflow():
    """TensorFlow, imported here only: `import shardpack` and the workers never load it."""
    try:
        import tensorflow as tf
    except ImportError as e:
        raise ShardpackError(
            f"tf_dataset needs TensorFlow ({e}); install it with: {install_hint('tf')}"
        ) from None
    return tf


def _check_tf_args(batch_size, epochs, image_size, lists, seed) -> None:
    """Refuse tf_dataset arguments tf.data would take wrongly or fail on deep inside."""
    if seed is not None:  # a float or a text: a TypeError inside tf.data; -1: iter_examples' 1
        check_seed("seed", seed)
    if batch_size is not None and not is_count(batch_size):
        raise ShardpackError(f"batch_size must be a positive integer or None, got: {batch_size!r}")
    if epochs is not None and not is_count(epochs):  # tf.data: 0 raised, -1 miscounted
        raise ShardpackError(
            f"epochs must be a positive integer, or None to repeat forever, got: {epochs!r}"
        )
    if image_size is not None and not (
        isinstance(image_size, (tuple, list)) and len(image_size) == 2
        and all(map(is_count, image_size))
    ):  # fmt: skip
        raise ShardpackError(f"image_size must be (height, width) in pixels, got: {image_size!r}")
    if lists not in ("ragged", "padded"):
        raise ShardpackError(f"lists must be 'ragged' or 'padded', got: {lists!r}")


def _check_stackable(index: Index, batch_size, decode: bool, image_size, lists: str) -> None:
    """Refuse batches of decoded images of different sizes, which tf.data finds only mid-training
    ("Cannot batch tensors with different shapes"); an index from before `image_size` cannot
    tell, and is read as before."""
    if not decode or image_size is not None or batch_size in (None, 1) or lists == "padded":
        return
    if index.image_size is None and index.image_size_told:
        raise ShardpackError(
            f"{index.out}: the images differ in size, so batch_size={batch_size} cannot stack "
            "them; pass image_size=(height, width) to resize them (or lists='padded' to pad them)"
        )


def _check_local_shards(index: Index, mine: _Share) -> None:
    """Open each local shard of the share as our readers do (TensorFlow follows links and waits
    on FIFOs) and refuse one of another size than the index's: a TFRecord cut at a record's end
    frames well, and tf.data would read it short, failing at the epoch's end or, repeated,
    never (DDP ranks then wait on the one short of its share)."""
    if index.storage.tf_path() is None:
        return
    with unless_changed(index, _TF_AGAIN):
        for info, _, _ in mine.runs:
            open_shard(index.storage, info.file, info.num_bytes).close()


def _tf_records(tf, index: Index, mine: _Share, shuffle: bool, seed, parallel_reads, ordered):
    """One epoch of this reader's serialized records: its runs of shards shuffled and interleaved,
    records mixed through a buffer; or, without shuffle, in the order pack wrote them."""
    # Only a local disk has paths TensorFlow opens itself; elsewhere the container's reader
    # streams the shard names through the index's storage.
    local = index.storage.tf_path() is not None
    paths = [index.storage.tf_path(info.file) if local else info.file for info, _, _ in mine.runs]
    container, compression = index.container, index.compression
    opened = _tf_opened(tf, index, mine) if local else None

    # tf.data ops only: AutoGraph has nothing to convert, and would warn at every call that it
    # cannot convert the generator a store's shards are streamed through (make_tf_data)
    @tf.autograph.experimental.do_not_convert
    def read(path, first, end):
        if opened is not None:
            path = opened(path)
        records = (
            container.make_tf_data(tf, index.storage, path, compression)
            .skip(first)
            .take(end - first)
        )
        return _whole_or_named(tf, records, path, end - first, index.out) if local else records

    files = tf.data.Dataset.from_tensor_slices((
        tf.constant(paths, tf.string),
        tf.constant([first for _, first, _ in mine.runs], tf.int64),
        tf.constant([end for _, _, end in mine.runs], tf.int64),
    ))  # fmt: skip
    if not shuffle:  # shard after shard, record after record: the order pack wrote
        return files.flat_map(read)
    files = files.shuffle(max(1, len(paths)), seed=seed, reshuffle_each_iteration=True)
    ds = files.interleave(
        read,
        cycle_length=max(1, min(len(paths), 16)),
        num_parallel_calls=tf.data.AUTOTUNE if parallel_reads is None else parallel_reads,
        deterministic=ordered,
    )
    return ds.shuffle(TF_SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True)


def _tf_opened(tf, index: Index, mine: _Share):
    """A function of a local shard's path (a tensor) that gives it back once the shard is the
    one `index` lists: there, of its size, and OUT's index.json the same or listing it alike.
    Else it stops tf.data with what our readers raise, in one line (OutChangedError's where
    OUT was updated or packed again since): TensorFlow would call the shard missing, and
    retry it for ever past the ignore_errors of _whole_or_named. Python runs once a shard as
    tf.data opens it (tf.py_function), not once a record."""
    shards = {index.storage.tf_path(info.file): info for info, _, _ in mine.runs}

    def fault(path) -> bytes:
        info = shards[path.numpy().decode()]
        try:
            with unless_changed(index, _TF_AGAIN):
                index.container.open_for_tf(index.storage, info.file, index.compression,
                                            info.num_bytes)  # fmt: skip
                check_opened(index, index.shard_path(info), _TF_AGAIN)
        except ShardpackError as e:
            return str(e).encode()
        return b""

    def opened(path):
        said = tf.py_function(fault, [path], tf.string)
        check = tf.debugging.Assert(tf.equal(said, ""), [said])
        with tf.control_dependencies([check]):
            return tf.identity(path)

    return opened


def _whole_or_named(tf, records, path, count, out: str):
    """A local shard's `count` records, or after those it could read an error naming the shard:
    TensorFlow's own (DataLossError, "corrupted record at N") names no file. Its error is passed
    over, which ends the shard there; the zip asks for the element after the records only when
    they fall short of `count`, so a whole shard costs no Python and no function call a record
    (the map returning its argument is passed through)."""
    said = (": TensorFlow could not read its records whole (a record is damaged, or the file "
            f"changed since it was packed); `shardpack verify {out}` names the damaged record: "
            "restore the shard from a copy or pack again")  # fmt: skip

    def fail(name):
        check = tf.debugging.Assert(False, [tf.strings.join([name, said])])
        with tf.control_dependencies([check]):
            return tf.identity(name)

    ended = records.ignore_errors().concatenate(tf.data.Dataset.from_tensors(path).map(fail))
    return tf.data.Dataset.zip((tf.data.Dataset.range(count), ended)).map(lambda _, r: r)


def _tf_spec(tf, schema: Schema) -> dict:
    """The parse spec for every feature: scalars fixed, lists ragged (dense [n] or [n, k] per
    record: a (-1, k) feature's flat values come back in rows of k)."""
    dtypes = {"int64": tf.int64, "float32": tf.float32, "bytes": tf.string}
    spec = {}
    for name, feature in schema.items():
        dtype = dtypes[feature.dtype]
        if not feature.is_list:
            spec[name] = tf.io.FixedLenFeature([], dtype)
        elif feature.row is None:
            spec[name] = tf.io.RaggedFeature(dtype)
        else:
            rows = [tf.io.RaggedFeature.UniformRowLength(feature.row)]
            spec[name] = tf.io.RaggedFeature(dtype, partitions=rows)
    return spec


def _batch(tf, ds, batch_size: int, lists: str, schema: Schema):
    """Batch records whose list features differ in length: ragged or padded per batch."""
    names = [n for n, f in schema.items() if f.is_list]
    if lists == "padded":  # class lists pad with -1: 0 is a class
        pad = {n for n in names if schema[n].classes is not None}
        values = {
            n: tf.constant(-1 if n in pad else 0, s.dtype) if s.dtype.is_integer
            else tf.zeros([], s.dtype)
            for n, s in ds.element_spec.items()
        }  # fmt: skip
        return ds.padded_batch(batch_size, padding_values=values)
    if not names:
        return ds.batch(batch_size)

    # Each list becomes a one-row RaggedTensor so that batch() stacks them as rows of a
    # [batch, 1, None, ...] ragged tensor; .values drops the one-row dimension again. This
    # keeps every other feature (the image above all) as batch() would give it.
    def wrap(features):
        return {**features, **{n: tf.RaggedTensor.from_tensor(features[n][None]) for n in names}}

    def unwrap(features):
        return {**features, **{n: features[n].values for n in names}}

    return ds.map(wrap).batch(batch_size).map(unwrap)


def _tf_decode(tf, features, encoding: str, image_size, uniform: tuple[int, int] | None):
    """Decode a record's image to uint8 HxWx3; its static shape is known when `image_size` is
    given or when the index says every image has the size `uniform`, so batches stack."""
    if encoding == "raw":
        shape = tf.stack([features["height"], features["width"], features["channels"]])
        image = tf.reshape(tf.io.decode_raw(features["image"], tf.uint8), shape)
    elif encoding == "webp":
        image = tf.io.decode_webp(features["image"], channels=3)[0]  # [frames, h, w, c]
    else:
        image = tf.io.decode_image(features["image"], channels=3, expand_animations=False)
    if image_size is not None:
        resized = tf.image.resize(image, image_size, antialias=True)
        image = tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)
    elif uniform is not None:
        image = tf.ensure_shape(image, [*uniform, 3])
    return image
