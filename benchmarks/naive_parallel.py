"""The obvious parallel version of the seed: a multiprocessing pool, one task per shard.

What someone would write first to use all cores: the seed's listing and shuffle in the
parent, the shuffled list cut into one contiguous shard per worker, and a Pool whose workers
each run the seed's loop (cv2.imread, tf.train.Example, tf.io.TFRecordWriter) into their own
file. TensorFlow is imported at the top, as in the seed, so forked workers inherit it.

    python -m benchmarks.naive_parallel SRC OUT --workers N [--encode raw|jpeg|png|keep]
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing
import os
import time

import numpy as np
import tensorflow as tf

from benchmarks.baseline import image_bytes, seed_example


def write_shard(task: tuple[list[str], list[int], str, str, int]) -> int:
    paths, labels, tfrecord_file, encode, quality = task
    writer = tf.io.TFRecordWriter(tfrecord_file)
    for path, label in zip(paths, labels, strict=True):
        writer.write(seed_example(image_bytes(path, encode, quality), label))
    writer.close()
    return len(paths)


def main(argv: list[str] | None = None) -> None:
    start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("out")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--encode", default="raw", choices=("raw", "jpeg", "png", "keep"))
    parser.add_argument("--quality", type=int, default=95)
    args = parser.parse_args(argv)
    classes = sorted(d for d in os.listdir(args.src) if os.path.isdir(os.path.join(args.src, d)))
    im_data: list[str] = []
    im_labels: list[int] = []
    for idx, class_ in enumerate(classes):
        im_list = glob.glob(os.path.join(args.src, class_) + "/*")
        im_data += im_list
        im_labels += [idx] * len(im_list)
    index = np.arange(len(im_data))
    np.random.shuffle(index)
    os.makedirs(args.out, exist_ok=True)
    tasks = []
    for i, part in enumerate(np.array_split(index, args.workers)):
        out = os.path.join(args.out, f"naive.tfrecord-{i:05d}-of-{args.workers:05d}")
        tasks.append(
            (
                [im_data[j] for j in part],
                [im_labels[j] for j in part],
                out,
                args.encode,
                args.quality,
            )
        )
    with multiprocessing.Pool(args.workers) as pool:
        count = sum(pool.map(write_shard, tasks, chunksize=1))
    print(json.dumps({"images": count, "seconds": round(time.perf_counter() - start, 3)}))


if __name__ == "__main__":
    main()
