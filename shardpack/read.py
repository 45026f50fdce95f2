"""Reading shards back: tf_dataset for TensorFlow, iter_examples for plain Python."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import numpy as np

from shardpack.index import Index, load_index
from shardpack.tfrecord import decode_example, iter_records

# Records held for iter_examples' shuffle: enough to mix neighbours from different shards.
SHUFFLE_BUFFER = 1024
# tf_dataset's record shuffle buffer; the file-order shuffle does most of the mixing.
TF_SHUFFLE_BUFFER = 8192
_TEXT_FEATURES = ("format", "key")


def _shard_paths(index: Index, split: str) -> list[str]:
    return [index.shard_path(shard) for shard in index.split(split).shards]


def decode_pixels(features: dict) -> np.ndarray:
    """Decode a record's image to uint8 HxWx3 RGB (raw records are reshaped, not decoded)."""
    from shardpack import images

    if features["format"] == "raw":
        shape = (features["height"], features["width"], features["channels"])
        return np.frombuffer(features["image"], np.uint8).reshape(shape)
    return images.decode(features["image"], order="rgb")


def to_python(example: dict[str, list]) -> dict[str, object]:
    """One-value lists become scalars; format and key become str."""
    record: dict[str, object] = {}
    for name, values in example.items():
        value = values[0] if len(values) == 1 else values
        record[name] = os.fsdecode(value) if name in _TEXT_FEATURES else value
    return record


def iter_examples(
    out: str | os.PathLike,
    split: str = "train",
    *,
    decode: bool = False,
    shuffle: bool = False,
    seed: int | None = None,
) -> Iterator[dict[str, object]]:
    """Yield every record of a split as a dict of Python and numpy values, without TensorFlow.

    CRCs are checked as the shards are read.

    Args:
        out: the output folder of a pack run.
        split: which split to read.
        decode: turn `image` into a uint8 HxWx3 RGB array instead of its stored bytes.
        shuffle: visit shards in random order and mix records through a buffer.
        seed: makes the shuffled order repeat.

    Raises:
        IndexFormatError: the index is missing, malformed or names an unsafe path.
        RecordError: a record fails its CRC.
    """
    index = load_index(out)
    paths = _shard_paths(index, split)
    rng = random.Random(seed)
    if shuffle:
        rng.shuffle(paths)
    records = (
        to_python(decode_example(data))
        for path in paths
        for _, data in iter_records(path, index.compression)
    )
    if shuffle:
        records = _buffer_shuffle(records, rng)
    for record in records:
        if decode:
            record["image"] = decode_pixels(record)
        yield record


def _buffer_shuffle(records: Iterator[dict], rng: random.Random) -> Iterator[dict]:
    buffer: list[dict] = []
    for record in records:
        if len(buffer) < SHUFFLE_BUFFER:
            buffer.append(record)
            continue
        i = rng.randrange(SHUFFLE_BUFFER)
        yield buffer[i]
        buffer[i] = record
    rng.shuffle(buffer)
    yield from buffer


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
):
    """A tf.data.Dataset of {"image", "label", ...} dicts over one split.

    Shard files are shuffled every epoch, read interleaved, mixed through a record buffer,
    parsed with the feature spec the index declares, decoded, batched and prefetched.

    Args:
        out: the output folder of a pack run.
        split: which split to read.
        shuffle: shuffle shard order and records, anew each epoch.
        seed: makes the order repeat run to run (and implies deterministic order).
        epochs: passes over the data; None repeats forever.
        batch_size: batch this many records; None yields single records.
        decode: decode `image` to uint8 HxWx3 RGB; False leaves the stored bytes.
        image_size: (height, width) to resize decoded images to, so that batches stack.
        num_parallel_reads: shards read at once; None lets tf.data tune it.
        deterministic: keep a fixed order even when reading in parallel.
    """
    import tensorflow as tf

    index = load_index(out)
    paths = _shard_paths(index, split)
    compression = "GZIP" if index.compression == "gzip" else ""
    parallel = tf.data.AUTOTUNE if num_parallel_reads is None else num_parallel_reads
    ordered = deterministic or seed is not None or not shuffle
    spec = {
        name: tf.io.FixedLenFeature([], tf.string if kind == "bytes" else tf.int64)
        for name, kind in index.features.items()
    }

    def parse(record):
        features = tf.io.parse_single_example(record, spec)
        if decode:
            features["image"] = _tf_decode(tf, features, index.encoding, image_size)
        return features

    if shuffle:
        files = tf.data.Dataset.from_tensor_slices(paths)
        files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
        ds = files.interleave(
            lambda path: tf.data.TFRecordDataset(path, compression_type=compression),
            cycle_length=min(len(paths), 16),
            num_parallel_calls=parallel,
            deterministic=ordered,
        )
        ds = ds.shuffle(TF_SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True)
    else:  # shard after shard, record after record: the order pack wrote
        ds = tf.data.TFRecordDataset(paths, compression_type=compression)
    ds = ds.repeat(epochs)  # after the shuffles, so that each epoch is a whole permutation
    if epochs is not None:  # the index knows the length: Keras then knows its steps per epoch
        total = index.split(split).num_records * epochs
        ds = ds.apply(tf.data.experimental.assert_cardinality(total))
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=ordered)
    if batch_size is not None:
        ds = ds.batch(batch_size)
    return ds.prefetch(tf.data.AUTOTUNE)


def _tf_decode(tf, features, encoding: str, image_size):
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
    return image
