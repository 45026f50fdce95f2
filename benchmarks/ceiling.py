"""The cost floor: one core reading and decoding/encoding the images, and nothing else.

No Example, no framing, no writing, no process pool: a tight loop over the same images that
a contender packs, on one core (OpenCV held to one thread). Its images/s, times the number of
cores, is the most any packer can reach on this machine for that work; start-up and listing
are outside the timed loop.

Per encoding, the loop does what a packer cannot avoid:
- keep: read the file's bytes; with --write OUT (the I/O ceiling) also sha256 them, write them
        to one file in OUT and fsync it once, timed as a whole process like the packers;
- raw:  read, decode, convert BGR to RGB, take the bytes (for CIFAR: unpickle each batch once,
        make it HWC, take each image's bytes);
- jpeg/png: read, decode, encode at the quality asked; with --center-crop N, between the two,
        shrink with area interpolation until the shorter side is N and cut the middle N x N
        (the full-decode way to what `pack --resize NxN --resize-mode center-crop` makes).

With --processes N (class folders, not keep) the loop runs in N processes at once, each over
every N-th image, started together: the machine's measured ceiling for N workers, where cores
sharing a memory bus or a physical core (a VM's vCPUs) give less than N times one.

    python -m benchmarks.ceiling SRC [--encode raw|jpeg|png|keep] [--quality 95] [--limit N]
    python -m benchmarks.ceiling SRC --encode jpeg --processes 2
    python -m benchmarks.ceiling SRC --encode keep --write OUT
    python -m benchmarks.ceiling SRC --encode jpeg --center-crop 128
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import time


def _files(root: str) -> list[str]:
    found = []
    for cls in sorted(os.listdir(root)):
        folder = os.path.join(root, cls)
        if not cls.startswith(".") and os.path.isdir(folder):
            found.extend(os.path.join(folder, n) for n in sorted(os.listdir(folder)))
    return found


def io_loop(paths: list[str], out: str) -> int:
    """Read, hash and write every file's bytes into one file in `out`, fsynced once."""
    import hashlib

    os.makedirs(out, exist_ok=True)
    digest = hashlib.sha256()
    with open(os.path.join(out, "ceiling.bin"), "wb", buffering=1 << 20) as dest:
        for path in paths:
            with open(path, "rb") as f:
                data = f.read()
            digest.update(data)
            dest.write(data)
        dest.flush()
        os.fsync(dest.fileno())
        return dest.tell()


def _encoder(encode: str, quality: int):
    import cv2

    if encode == "raw":
        return lambda px: cv2.cvtColor(px, cv2.COLOR_BGR2RGB).tobytes()
    if encode == "jpeg":
        params = [cv2.IMWRITE_JPEG_QUALITY, quality]
        return lambda px: cv2.imencode(".jpg", px, params)[1].tobytes()
    if encode == "png":
        return lambda px: cv2.imencode(".png", px)[1].tobytes()
    raise ValueError(f"no encoder for {encode!r}")


def center_crop(pixels, size: int):
    """Area-shrink so the shorter side is `size`, then the middle size x size: a full decode's
    center crop, what reduced-decode cropping is measured against (benchmarks/reduced.py)."""
    import cv2

    height, width = pixels.shape[:2]
    scale = size / min(height, width)
    scaled = max(size, round(width * scale)), max(size, round(height * scale))
    pixels = cv2.resize(pixels, scaled, interpolation=cv2.INTER_AREA)
    top, left = (scaled[1] - size) // 2, (scaled[0] - size) // 2
    return pixels[top : top + size, left : left + size]


def folder_loop(paths: list[str], encode: str, quality: int, crop: int | None = None) -> int:
    """Read (and decode, center-crop and encode) every file; returns the bytes produced."""
    produced = 0
    if encode == "keep":
        for path in paths:
            with open(path, "rb") as f:
                produced += len(f.read())
        return produced
    import cv2
    import numpy as np

    to_bytes = _encoder(encode, quality)
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        pixels = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if crop is not None:
            pixels = center_crop(pixels, crop)
        produced += len(to_bytes(pixels))
    return produced


def parallel_loop(paths: list[str], encode: str, quality: int, processes: int) -> float:
    """Seconds from the first start of `processes` forked loops (released together) to the end
    of the last; each runs folder_loop over every processes-th path and times itself."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    ready, spans = context.Barrier(processes), context.Queue()

    def loop(part: list[str]) -> None:
        ready.wait()
        start = time.perf_counter()  # CLOCK_MONOTONIC: one clock for every process
        folder_loop(part, encode, quality)
        spans.put((start, time.perf_counter()))

    children = [context.Process(target=loop, args=(paths[i::processes],)) for i in range(processes)]
    for child in children:
        child.start()
    starts, ends = zip(*(spans.get() for _ in children), strict=True)
    for child in children:
        child.join()
    return max(ends) - min(starts)


def cifar_loop(root: str, encode: str, quality: int) -> tuple[int, int]:
    """Unpickle each batch once and produce every image's bytes; returns (images, bytes)."""
    import cv2
    import numpy as np

    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    images = produced = 0
    to_bytes = None if encode in ("raw", "keep") else _encoder(encode, quality)
    for name in names:
        path = os.path.join(root, name)
        if not os.path.exists(path):
            continue
        with open(path, "rb") as f:
            data = pickle.load(f, encoding="bytes")[b"data"]
        hwc = np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        for rgb in hwc:
            if to_bytes is None:
                produced += len(rgb.tobytes())
            else:
                produced += len(to_bytes(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)))
        images += len(hwc)
    return images, produced


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("--encode", default="raw", choices=("raw", "jpeg", "png", "keep"))
    parser.add_argument("--quality", type=int, default=95)
    parser.add_argument("--limit", type=int, default=None, help="time only the first N images")
    parser.add_argument("--write", default=None, help="keep only: also hash, write and fsync")
    parser.add_argument("--processes", type=int, default=1, help="class folders: N loops at once")
    parser.add_argument("--center-crop", type=int, default=None, metavar="N",
                        help="class folders, one process: shrink and crop to N x N")  # fmt: skip
    args = parser.parse_args(argv)
    if args.encode != "keep":  # the I/O ceiling imports neither OpenCV nor numpy
        import cv2

        cv2.setNumThreads(1)
    if os.path.exists(os.path.join(args.src, "batches.meta")):
        start = time.perf_counter()
        images, produced = cifar_loop(args.src, args.encode, args.quality)
        seconds = time.perf_counter() - start
    else:
        paths = _files(args.src)[: args.limit]
        images, produced = len(paths), 0
        start = time.perf_counter()
        if args.processes > 1 and args.write is None:
            seconds = parallel_loop(paths, args.encode, args.quality, args.processes)
        else:
            if args.write is not None:
                produced = io_loop(paths, args.write)
            else:
                produced = folder_loop(paths, args.encode, args.quality, args.center_crop)
            seconds = time.perf_counter() - start
    print(json.dumps({"images": images, "seconds": round(seconds, 4), "out_bytes": produced}))


if __name__ == "__main__":
    main()
