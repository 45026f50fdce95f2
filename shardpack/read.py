"""Reading shards back: tf_dataset for TensorFlow, iter_examples for plain Python."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import numpy as np

from shardpack.errors import RecordError
from shardpack.index import Index, load_index
from shardpack.schema import Schema, check_values, decode_value
from shardpack.tfrecord import decode_example, iter_records

# Records held for iter_examples' shuffle: enough to mix neighbours from different shards.
SHUFFLE_BUFFER = 1024
# tf_dataset's record shuffle buffer; the file-order shuffle does most of the mixing.
TF_SHUFFLE_BUFFER = 8192


def _shard_paths(index: Index, split: str) -> list[str]:
    return [index.shard_path(shard) for shard in index.split(split).shards]


def decode_pixels(features: dict) -> np.ndarray:
    """Decode a record's image to uint8 HxWx3 RGB (raw records are reshaped, not decoded)."""
    from shardpack import images

    if features["format"] == "raw":
        shape = (features["height"], features["width"], features["channels"])
        return np.frombuffer(features["image"], np.uint8).reshape(shape)
    return images.decode(features["image"], order="rgb")


def to_python(example: dict[str, list], schema: Schema) -> dict[str, object]:
    """A decoded Example as the schema declares it: scalars as int, float or str (text),
    lists as numpy arrays of their dtype and shape (boxes as n x 4), text lists as lists of str.

    Raises:
        ValueError: a feature's values do not fit the schema (says which and how).
    """
    record: dict[str, object] = {}
    for name, values in example.items():
        feature = schema.get(name)
        if feature is None:  # not in the schema: as stored, one value unwrapped
            record[name] = values[0] if len(values) == 1 else values
            continue
        reason = check_values(name, feature, values)
        if reason is not None:
            raise ValueError(reason)
        record[name] = decode_value(feature, values)
    return record


def read_example(path: str, offset: int, data: bytes, schema: Schema) -> dict[str, object]:
    """One record's bytes (read from `path` at `offset`) as to_python gives them.

    Raises:
        RecordError: the bytes are not an Example, or do not fit the schema.
    """
    try:
        return to_python(decode_example(data), schema)
    except ValueError as e:
        raise RecordError(path, offset, str(e)) from None


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
        read_example(path, offset, data, index.schema)
        for path in paths
        for offset, data in iter_records(path, index.compression)
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
    lists: str = "ragged",
    num_parallel_reads: int | None = None,
    deterministic: bool = False,
):
    """A tf.data.Dataset of {"image", "label", ...} dicts over one split.

    Shard files are shuffled every epoch, read interleaved, mixed through a record buffer,
    parsed with the index's feature schema (every feature, with its dtype and shape: boxes as
    [n, 4]), decoded, batched and prefetched.

    Args:
        out: the output folder of a pack run.
        split: which split to read.
        shuffle: shuffle shard order and records, anew each epoch.
        seed: makes the order repeat run to run (and implies deterministic order).
        epochs: passes over the data; None repeats forever.
        batch_size: batch this many records; None yields single records.
        decode: decode `image` to uint8 HxWx3 RGB; False leaves the stored bytes.
        image_size: (height, width) to resize decoded images to, so that batches stack.
        lists: how batches hold variable-length list features: "ragged" (tf.RaggedTensor,
            [batch, None] or [batch, None, k]) or "padded" (dense, zero-padded to the longest
            in the batch; other variable-size tensors, such as images without image_size,
            are padded too). Single records hold them as dense [n] or [n, k] tensors.
        num_parallel_reads: shards read at once; None lets tf.data tune it.
        deterministic: keep a fixed order even when reading in parallel.
    """
    import tensorflow as tf

    if lists not in ("ragged", "padded"):
        raise ValueError(f"lists must be 'ragged' or 'padded', got: {lists!r}")
    index = load_index(out)
    paths = _shard_paths(index, split)
    compression = "GZIP" if index.compression == "gzip" else ""
    parallel = tf.data.AUTOTUNE if num_parallel_reads is None else num_parallel_reads
    ordered = deterministic or seed is not None or not shuffle
    spec = _tf_spec(tf, index.schema)

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
        ds = _batch(tf, ds, batch_size, lists, [n for n, f in index.schema.items() if f.is_list])
    return ds.prefetch(tf.data.AUTOTUNE)


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


def _batch(tf, ds, batch_size: int, lists: str, names: list[str]):
    """Batch records whose list features differ in length: ragged or padded per batch."""
    if lists == "padded":
        return ds.padded_batch(batch_size)
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
