"""What a grow costs: `pack --append` of NEW new files to a packed dataset of FILES records.

    python -m benchmarks.grow [--files 1000000] [--new 1000] [--cache DIR] [--json FILE]

The source is a class-folder tree of FILES hard links to small JPEGs (100 classes, one each),
packed once with --encode keep and kept in the cache (packing it is most of a first run's
time). Each run adds NEW files in a class folder of their own, appends them to a hard-linked
copy of the packed dataset (an append never writes into an old shard), and removes both again.
The append runs in this process, its steps timed (as benchmarks.dedup times its pre-pass): the
listing (the source's scan), the check of the held items (a stat each: stamps.py),
contents.json and the stamps read and written, the new items packed (the workers), and the
rest (index, metadata); held_reads_s, part of the check, is what reading held files took
(~0: none was read). One JSON line.
`make bench-long` runs it at 1,000,000 files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections import defaultdict

import cv2
import numpy as np

from benchmarks.contenders import REPO
from benchmarks.dedup import _timed
from shardpack import PackOptions, pack
from shardpack.packing import grow, packer, stamps

CLASSES = 100
WORKERS = 2


def _jpeg(path: str, seed: int) -> None:
    """A 32 x 24 JPEG of noise at `path`."""
    pixels = np.random.default_rng(seed).integers(0, 256, (24, 32, 3), np.uint8)
    cv2.imwrite(path, pixels)


def _tree(cache: str, files: int) -> str:
    """The FILES-link class-folder tree, made once (under a .partial name until whole); a
    class's files are links to its own JPEG (a file takes at most 65,000 links on ext4)."""
    dest = os.path.join(cache, "workloads", f"grow-{files}")
    if os.path.isdir(dest):
        return dest
    partial = dest + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(os.path.join(partial, ".originals"))  # hidden: not listed
    per_class = -(-files // CLASSES)
    hour_ago = (time.time() - 3600,) * 2  # every link's mtime: well before the pack
    for c in range(CLASSES):
        original = os.path.join(partial, ".originals", f"{c:03d}.jpg")
        _jpeg(original, c)
        os.utime(original, hour_ago)
        folder = os.path.join(partial, f"class_{c:03d}")
        os.makedirs(folder)
        for i in range(c * per_class, min(files, (c + 1) * per_class)):
            os.link(original, os.path.join(folder, f"{i:07d}.jpg"))
    os.replace(partial, dest)
    return dest


def _packed(cache: str, src: str, files: int) -> tuple[str, float | None]:
    """The packed dataset of the tree (made once), and the seconds packing it took now."""
    out = os.path.join(cache, "runs", f"grow-{files}")
    if os.path.exists(os.path.join(out, "index.json")):
        return out, None
    start = time.perf_counter()
    pack(src, out, PackOptions(encode="keep", workers=WORKERS, overwrite=True))
    return out, round(time.perf_counter() - start, 1)


def measure(cache: str, files: int, new: int) -> dict:
    """One timed --append of `new` files to the packed tree of `files`."""
    src = _tree(cache, files)
    base, packed_s = _packed(cache, src, files)
    out = base + "-appended"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(base, out, copy_function=os.link)  # shards shared: an append leaves them
    added = os.path.join(src, "zz_added")
    os.makedirs(added)
    spent: dict[str, float] = defaultdict(float)
    for module, name in ((grow, "_scan"), (grow, "_compare"), (grow, "load_contents"),
                         (grow, "write_contents"), (stamps, "load"), (stamps, "save"),
                         (grow, "content_keys"), (packer, "write_shards")):  # fmt: skip
        _timed(spent, module, name)
    try:
        for i in range(new):
            _jpeg(os.path.join(added, f"{i:05d}.jpg"), CLASSES + i)
        start = time.perf_counter()
        result = pack(src, out, PackOptions(grow="append", workers=WORKERS))
        total = time.perf_counter() - start
    finally:
        shutil.rmtree(added)
        shutil.rmtree(out, ignore_errors=True)
    assert result.grow["added"] == new, result.grow
    steps = {"listing_s": spent["_scan"], "held_check_s": spent["_compare"],
             "bookkeeping_s": sum(spent[k] for k in ("load_contents", "write_contents", "load",
                                                     "save")),
             "packing_s": spent["write_shards"]}  # fmt: skip
    return {
        "files": files,
        "new": new,
        "append_s": round(total, 2),
        **{k: round(v, 2) for k, v in steps.items()},
        "other_s": round(total - sum(steps.values()), 2),
        "held_reads_s": round(spent["content_keys"], 2),  # ~0: no held file was read
        "base_pack_s": packed_s,
        "workers": WORKERS,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--cache", default=os.path.join(REPO, "bench-out"))
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    found = measure(os.path.abspath(args.cache), args.files, args.new)
    line = json.dumps(found)
    print(line)
    if args.json_path:
        with open(args.json_path, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
