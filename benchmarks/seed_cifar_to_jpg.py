"""The seed's first script (seed/: cifar10_bin_to_jpg.py): CIFAR-10 batches to JPEG folders.

Kept as the seed wrote it: unpickle every batch, grow one Python list of rows, np.reshape it,
then for each image transpose, convert RGB to BGR and cv2.imwrite into a folder per class.
Two changes only, both needed to time it fairly against a packer that writes train and test:
the paths come from the command line, and the test batch is converted too (to DEST/test).

    python -m benchmarks.seed_cifar_to_jpg CIFAR_DIR DEST  # DEST/{train,test}/<class>/<i>.jpg
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time

import cv2
import numpy as np


def unpickle(file):
    with open(file, "rb") as fo:
        return pickle.load(fo, encoding="bytes")


def convert(batch_files: list[str], classes, dest: str) -> int:
    """The seed's loop over some batches; returns the number of images written."""
    data = []
    labels = []
    for file_name in batch_files:
        result = unpickle(file_name)
        data += list(result[b"data"])
        labels += list(result[b"labels"])

    imgs = np.reshape(data, [-1, 3, 32, 32])

    for i in range(imgs.shape[0]):
        im_data = imgs[i, ...]
        im_data = np.transpose(im_data, [1, 2, 0])
        im_data = cv2.cvtColor(im_data, cv2.COLOR_RGB2BGR)

        f = "{}/{}".format(dest, classes[labels[i]])  # noqa: UP032 (as the seed)

        if not os.path.exists(f):
            os.makedirs(f)  # the seed's os.mkdir, but DEST itself may not exist yet

        cv2.imwrite("{}/{}.jpg".format(f, str(i)), im_data)  # noqa: UP032
    return int(imgs.shape[0])


def main(argv: list[str]) -> None:
    start = time.perf_counter()
    src, dest = argv
    classes = [c.decode() for c in unpickle(os.path.join(src, "batches.meta"))[b"label_names"]]
    train = [os.path.join(src, f"data_batch_{i}") for i in range(1, 6)]
    count = convert(train, classes, os.path.join(dest, "train"))
    count += convert([os.path.join(src, "test_batch")], classes, os.path.join(dest, "test"))
    print(json.dumps({"images": count, "seconds": round(time.perf_counter() - start, 3)}))


if __name__ == "__main__":
    main(sys.argv[1:])
