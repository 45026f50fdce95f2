"""The seed's writer (seed/: cifar10_jpg_to_tfrecord.py) in TensorFlow 2 names: the baseline.

One process, one loop, one writer, as the seed wrote it: glob each class folder, build the
label list, shuffle an index with np.random.shuffle, and for each image cv2.imread it, wrap it
in a tf.train.Example (image bytes + label) and write it through one tf.io.TFRecordWriter.

What changes from the seed, and only so that it can be timed against other encodings:
- the class folders are found by listing SRC (the seed hard-codes CIFAR's ten names);
- several SRC folders may be given, each written to OUT/<folder name>.tfrecord in turn
  (the CIFAR end-to-end run passes train/ and test/ to one process, as one script would);
- --encode raw stores the decoded pixels exactly as the seed (data.tobytes(), BGR);
  jpeg/png re-encode the decoded pixels with cv2.imencode; keep stores the file's bytes
  without decoding (not something the seed can do: it is the loop with TF's writer, nothing
  else, for comparing passthrough).

    python -m benchmarks.baseline --out OUT [--encode raw|jpeg|png|keep] [--quality 95] SRC...
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time

import cv2
import numpy as np
import tensorflow as tf


def image_bytes(path: str, encode: str, quality: int) -> bytes:
    if encode == "keep":
        with open(path, "rb") as f:
            return f.read()
    data = cv2.imread(path)
    if encode == "raw":
        return data.tobytes()
    if encode == "jpeg":
        return cv2.imencode(".jpg", data, [cv2.IMWRITE_JPEG_QUALITY, quality])[1].tobytes()
    return cv2.imencode(".png", data)[1].tobytes()


def write_folder(src: str, tfrecord_file: str, encode: str, quality: int) -> int:
    classes = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    idx = 0
    im_data = []
    im_labels = []
    for class_ in classes:
        path = os.path.join(src, class_)
        im_list = glob.glob(path + "/*")
        im_label = [idx for i in range(im_list.__len__())]
        idx += 1  # noqa: SIM113 (the seed's own counter)
        im_data += im_list
        im_labels += im_label

    writer = tf.io.TFRecordWriter(tfrecord_file)

    index = [i for i in range(im_data.__len__())]
    np.random.shuffle(index)

    for i in range(im_data.__len__()):
        im_d = im_data[index[i]]
        im_l = im_labels[index[i]]
        writer.write(seed_example(image_bytes(im_d, encode, quality), im_l))

    writer.close()
    return im_data.__len__()


def seed_example(data: bytes, label: int) -> bytes:
    """The seed's record: a tf.train.Example of the image bytes and the label."""
    ex = tf.train.Example(
        features=tf.train.Features(
            feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }
        )
    )
    return ex.SerializeToString()


def main(argv: list[str] | None = None) -> None:
    start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", nargs="+", help="class-folder trees")
    parser.add_argument("--out", required=True, help="folder for <src name>.tfrecord files")
    parser.add_argument("--encode", default="raw", choices=("raw", "jpeg", "png", "keep"))
    parser.add_argument("--quality", type=int, default=95)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    count = 0
    for src in args.src:
        name = os.path.basename(os.path.normpath(src))
        out = os.path.join(args.out, f"{name}.tfrecord")
        count += write_folder(src, out, args.encode, args.quality)
    print(json.dumps({"images": count, "seconds": round(time.perf_counter() - start, 3)}))


if __name__ == "__main__":
    main()
