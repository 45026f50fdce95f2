"""Where the time goes per image: each stage of packing timed on its own, one core.

For ~2000 images of each workload, a loop does what a worker does, one step at a time, with
time.perf_counter around each step, using shardpack's own functions:

    read       open + read the file (CIFAR: unpickling the batch, shared over its images)
    probe      images.probe: walk the JPEG/PNG header (shardpack's structure check)
    decode     images.decode (cv2.imdecode)
    encode     images.encode: raw = BGR->RGB + bytes; jpeg = cv2.imencode at quality 95
    serialize  tfrecord.encode_example: the Example's bytes (7 features, as pack writes)
    frame      tfrecord.frame: length, data and their masked CRC32C
    hash       sha256 of the framed record (pack keeps one per shard for the index)
    facts      packing.facts.ShardFacts.add: CRC32C and size of the source bytes (exact
               duplicates), the record's size, format, channels and EXIF orientation
    write      buffered write of the framed record to a file (fsync once at the end, shared)

and, for comparison, TensorFlow's way for the same record (what the baseline pays):
    tf-example tf.train.Example(...) with image and label, then SerializeToString()
    tf-write   tf.io.TFRecordWriter.write (framing, CRC and write inside TF)

Then --cprofile runs shardpack.packing.packer.pack (one worker, in-process) on the same images under
cProfile and prints the functions that take the time.

    python -m benchmarks.stages [--images 2000] [--no-tf] [--cprofile] [WORKLOAD...]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import os
import pickle
import pstats
import shutil
import sys
import tempfile
import time
from collections import defaultdict

import cv2
import numpy as np

from benchmarks import workloads
from shardpack import images
from shardpack.containers import tfrecord
from shardpack.packing.facts import ShardFacts

CASES = (("cifar10", "raw"), ("small-jpeg", "raw"), ("photos", "jpeg"), ("photos", "keep"))
STAGES = ("read", "probe", "decode", "encode", "serialize", "frame", "hash", "facts", "write")
TF_STAGES = ("tf-example", "tf-write")


def _pick(paths: list[str], count: int) -> list[str]:
    """`count` files spread evenly over the sorted list (every class, every size)."""
    step = max(1, len(paths) // count)
    return paths[::step][:count]


def _cifar_items(root: str, count: int, timer: dict) -> list[tuple[int, np.ndarray]]:
    """(label, HWC RGB pixels) for the first `count` images; the unpickle is timed as read."""
    start = time.perf_counter()
    with open(os.path.join(root, "data_batch_1"), "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    hwc = np.ascontiguousarray(batch[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    # the whole batch's read is shared by its 10,000 images
    timer["read"] += (time.perf_counter() - start) * count / len(hwc)
    return list(zip(batch[b"labels"][:count], hwc[:count], strict=True))


def profile_case(name: str, encode: str, count: int, cache: str, use_tf: bool) -> dict:
    """Seconds per stage summed over `count` images of one workload."""
    workload = workloads.ensure(name, cache)
    timer: dict[str, float] = defaultdict(float)
    tmp = tempfile.mkdtemp(prefix="stages-", dir=cache)
    out = open(os.path.join(tmp, "out.tfrecord"), "wb", buffering=1 << 20)  # noqa: SIM115
    sha = hashlib.sha256()
    notes = ShardFacts(1)
    tf, tf_writer = None, None
    if use_tf:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        tf_writer = tf.io.TFRecordWriter(os.path.join(tmp, "tf.tfrecord"))
    cv2.setNumThreads(1)
    if workload.kind == "cifar":
        sources = [(label, None, rgb) for label, rgb in _cifar_items(workload.path, count, timer)]
    else:
        files = _pick(workloads.image_files(workload.path), count)
        for path in files:  # warm the page cache: time the work, not the disk
            with open(path, "rb") as f:
                f.read()
        sources = [(0, path, None) for path in files]
    clock = time.perf_counter
    for label, path, rgb in sources:
        if path is not None:
            t0 = clock()
            with open(path, "rb") as f:
                data = f.read()
            t1 = clock()
            info = images.probe(data)
            t2 = clock()
            timer["read"] += t1 - t0
            timer["probe"] += t2 - t1
            if encode == "keep":
                payload, height, width = data, info.height, info.width
            else:
                pixels = images.decode(data)
                t3 = clock()
                payload = images.encode(pixels, encode, 95)
                t4 = clock()
                timer["decode"] += t3 - t2
                timer["encode"] += t4 - t3
                height, width = pixels.shape[:2]
        else:
            t3 = clock()
            bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)  # as the worker holds pixels
            payload = images.encode(bgr, encode, 95)
            timer["encode"] += clock() - t3
            height, width = 32, 32
        t5 = clock()
        features = {
            "image": payload,
            "label": label,
            "height": height,
            "width": width,
            "channels": 3,
            "format": encode,
            "key": b"class/some_file_name.jpg",
        }
        record = tfrecord.encode_example(features)
        t6 = clock()
        framed = tfrecord.frame(record)
        t7 = clock()
        sha.update(framed)
        t8 = clock()
        notes.add(0, data if path is not None else rgb, features, 1)  # probe's orientation
        noted = clock()
        out.write(framed)
        t9 = clock()
        timer["serialize"] += t6 - t5
        timer["frame"] += t7 - t6
        timer["hash"] += t8 - t7
        timer["facts"] += noted - t8
        timer["write"] += t9 - noted
        if tf is not None:
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[payload])),
                        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                    }
                )
            ).SerializeToString()
            t10 = clock()
            tf_writer.write(example)
            timer["tf-example"] += t10 - t9
            timer["tf-write"] += clock() - t10
    t = clock()
    out.flush()
    os.fsync(out.fileno())
    out.close()
    timer["write"] += clock() - t
    if tf_writer is not None:
        tf_writer.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return {"workload": name, "encode": encode, "images": len(sources), "seconds": dict(timer)}


def cprofile_case(name: str, encode: str, count: int, cache: str, top: int = 14) -> str:
    """cProfile of pack, one worker in-process, on `count` of the images."""
    from shardpack.options import PackOptions
    from shardpack.packing.packer import pack

    workload = workloads.ensure(name, cache)
    tmp = tempfile.mkdtemp(prefix="cprofile-", dir=cache)
    src = workload.path
    if workload.kind == "folder":  # a subset tree of hard links, so the job is `count` images
        src = os.path.join(tmp, "src")
        for path in _pick(workloads.image_files(workload.path), count):
            target = os.path.join(src, os.path.relpath(path, workload.path))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.link(path, target)
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    result = pack(src, os.path.join(tmp, "out"), PackOptions(workers=1, encode=encode))
    profiler.disable()
    seconds = time.perf_counter() - start
    shutil.rmtree(tmp, ignore_errors=True)
    stream = __import__("io").StringIO()
    stats = pstats.Stats(profiler, stream=stream).sort_stats("tottime")
    stats.print_stats(top)
    per = seconds / result.num_records * 1e6
    head = (
        f"### cProfile: shardpack pack {name} --encode {encode} --workers 1, "
        f"{result.num_records} images, {seconds:.2f} s ({per:.0f} µs/image under the "
        "profiler)\n"
    )
    body = stream.getvalue()
    body = body[body.find("   ncalls") :] if "   ncalls" in body else body
    return head + "\n```\n" + body.rstrip() + "\n```\n"


def table(rows: list[dict]) -> str:
    """Markdown: µs per image for each stage and workload."""
    stages = [s for s in (*STAGES, *TF_STAGES) if any(s in r["seconds"] for r in rows)]
    head = "| workload | " + " | ".join(stages) + " | shardpack sum | images/s/core |"
    lines = [head, "|---|" + "---:|" * (len(stages) + 2)]
    for r in rows:
        per = {s: r["seconds"].get(s, 0.0) / r["images"] * 1e6 for s in stages}
        ours = sum(per[s] for s in STAGES if s in per)
        cells = " | ".join(f"{per[s]:.1f}" for s in stages)
        lines.append(
            f"| {r['workload']} --encode {r['encode']} ({r['images']}) | {cells} | "
            f"{ours:.1f} | {1e6 / ours:,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stages", description=__doc__)
    parser.add_argument("cases", nargs="*", help="WORKLOAD:ENCODE, e.g. photos:jpeg [the four]")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument(
        "--cache", default=os.path.join(os.path.dirname(__file__), "..", "bench-out")
    )
    parser.add_argument("--no-tf", action="store_true", help="skip TensorFlow's stages")
    parser.add_argument("--cprofile", action="store_true", help="also cProfile pack per case")
    args = parser.parse_args(argv)
    cases = [tuple(c.split(":")) for c in args.cases] or list(CASES)
    for case in cases:
        if len(case) != 2:
            parser.error(f"a case is WORKLOAD:ENCODE, e.g. photos:jpeg; got: {':'.join(case)!r}")
    cache = os.path.abspath(args.cache)
    rows = [profile_case(n, e, args.images, cache, not args.no_tf) for n, e in cases]
    print(
        f"µs per image, one core, {args.images} images per workload "
        f"(`python -m benchmarks.stages {' '.join(argv or sys.argv[1:])}`)\n"
    )
    print(table(rows))
    if args.cprofile:
        for name, encode in cases:
            print()
            print(cprofile_case(name, encode, args.images, cache))
    return 0


if __name__ == "__main__":
    sys.exit(main())
