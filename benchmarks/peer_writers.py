"""Passthrough packing against the peers' writers (issue 35 item 4): the same photos, their
bytes as they are with their class index, into each one's own shards; each a whole process
(start-up, listing and the last byte written included), alternated in every repeat.

    .venv/bin/python -m benchmarks.peer_writers [WORKLOAD] [--repeat 3] [--json FILE]

- shardpack: `shardpack pack SRC OUT --encode keep` at its default workers.
- webdataset's `ShardWriter` (in .venv): one loop, `.jpg` and `.cls` a sample.
- litData's `optimize` (in .venv-peers, `make peers`): its default workers (the cores).
- MosaicML's `MDSWriter` (in .venv-peers): one loop, `bytes` and `int` columns.

Each peer lists SRC's class folders itself, as shardpack's scan does, and writes with its
library's defaults. `--write KIND SRC OUT` is one peer's run (what the harness starts).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

from benchmarks import workloads

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS_PYTHON = os.path.join(".venv-peers", "bin", "python")
CHUNK_BYTES = 64 << 20  # litData's and MDS's default chunk size


def _listed(src: str) -> list[tuple[str, int]]:
    """(path, class index) of every file under SRC's class folders, classes sorted."""
    classes = sorted(e.name for e in os.scandir(src) if e.is_dir())
    return [(os.path.join(src, name, f.name), label) for label, name in enumerate(classes)
            for f in sorted(os.scandir(os.path.join(src, name)), key=lambda f: f.name)
            if f.is_file()]  # fmt: skip


def _read(item: tuple[str, int]) -> dict:
    path, label = item
    with open(path, "rb") as f:
        return {"image": f.read(), "label": label}


def _write(kind: str, src: str, out: str) -> None:
    items = _listed(src)
    if kind == "shardwriter":
        import webdataset as wds

        with wds.ShardWriter(os.path.join(out, "shard-%06d.tar"), verbose=0) as sink:
            for i, item in enumerate(items):
                record = _read(item)
                sink.write({"__key__": f"{i:08d}", "jpg": record["image"],
                            "cls": record["label"]})  # fmt: skip
    elif kind == "litdata":
        import litdata

        litdata.optimize(fn=_read, inputs=items, output_dir=out, chunk_bytes=CHUNK_BYTES)
    elif kind == "mds":
        from streaming import MDSWriter

        with MDSWriter(out=out, columns={"image": "bytes", "label": "int"}) as sink:
            for item in items:
                sink.write(_read(item))
    else:
        raise SystemExit(f"unknown writer {kind!r}")


def _command(kind: str, src: str, out: str) -> list[str]:
    if kind == "shardpack":
        return [os.path.join(".venv", "bin", "shardpack"), "pack", src, out, "--encode", "keep",
                "--no-progress", "--overwrite"]  # fmt: skip
    python = sys.executable if kind == "shardwriter" else PEERS_PYTHON
    return [python, "-m", "benchmarks.peer_writers", "--write", kind, src, out]


def _timed(kind: str, src: str, out: str) -> tuple[float, float]:
    """Wall and CPU seconds (the process and its children) of one run into a fresh OUT."""
    shutil.rmtree(out, ignore_errors=True)
    if kind != "shardpack":
        os.makedirs(out)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # this tree's shardpack, not whichever the venv's editable install points at
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(_command(kind, src, out), capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{kind} failed: {done.stderr.strip()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="photos-6000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache", default="bench-out")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--write", nargs=3, metavar=("KIND", "SRC", "OUT"))
    args = parser.parse_args(argv)
    if args.write:
        _write(*args.write)
        return 0
    if not os.path.exists(PEERS_PYTHON):
        raise SystemExit("litData and MDS run in .venv-peers: run `make peers` first")
    src = workloads.ensure(args.workload, args.cache).path
    for path, _ in _listed(src):  # every input in the page cache, untimed
        with open(path, "rb") as f:
            f.read()
    kinds = ["shardpack", "shardwriter", "litdata", "mds"]
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    work = os.path.join(args.cache, "runs", "peer-writers")
    for r in range(args.repeat):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            runs[kind].append(_timed(kind, src, os.path.join(work, kind)))
    shutil.rmtree(work, ignore_errors=True)
    wall = {k: statistics.median(w for w, _ in v) for k, v in runs.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in runs.items()}
    count = len(_listed(src))
    print(f"\n## Passthrough against the peers' writers ({args.workload}: {count:,} images, "
          f"{args.repeat} repeats, median; load average {os.getloadavg()[0]:.1f})\n")  # fmt: skip
    print("| writer | images/s | wall s | CPU s | shardpack's speed over it |")
    print("|---|---:|---:|---:|---:|")
    for kind in kinds:
        print(f"| {kind} | {count / wall[kind]:,.0f} | {wall[kind]:.2f} | {cpu[kind]:.2f} | "
              f"{wall[kind] / wall['shardpack']:.1f}x |")  # fmt: skip
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"workload": args.workload, "images": count, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
