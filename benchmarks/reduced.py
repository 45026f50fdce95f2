"""Reduced JPEG decode: `pack --resize NxN --resize-mode center-crop` on one worker against one
core's loop of full decode, area resize, crop and encode (ceiling.py --center-crop N).

    python -m benchmarks.reduced [--workload photos] [--size 128] [--repeat 3] [--json FILE]

Both sides are whole processes (start-up included), alternated within each repeat; the row
takes the median walls. Then every image pack wrote is compared with the loop's own (both JPEG
at the same quality, decoded): the PSNR shows what the reduced decode's rounding changes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import cv2
import numpy as np

from benchmarks.ceiling import center_crop
from benchmarks.contenders import REPO, shardpack_command
from benchmarks.measure import run_measured
from benchmarks.workloads import ensure
from shardpack import iter_examples

# The targets: the speed-up over the full-decode loop, and the least PSNR against it.
SPEEDUP = 1.3
PSNR_DB = 30.0
QUALITY = 95


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def _loop_image(path: str, size: int) -> np.ndarray:
    """The loop's image of one file, as it encodes it, decoded again (RGB)."""
    pixels = center_crop(cv2.imread(path, cv2.IMREAD_COLOR), size)
    _, buf = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, QUALITY])
    return cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


def psnr_against_loop(src: str, out: str, size: int) -> dict:
    """The least and the median PSNR of pack's images against the loop's, over all of them."""
    values = [
        _psnr(record["image"], _loop_image(os.path.join(src, record["key"]), size))
        for record in iter_examples(out, decode=True)
    ]
    return {"images": len(values), "min_db": round(min(values), 2),
            "median_db": round(statistics.median(values), 2)}  # fmt: skip


def measure(workload: str, size: int, repeat: int, cache: str) -> dict:
    src = ensure(workload, cache).path
    out = os.path.join(cache, "runs", f"reduced-{workload}-{size}")
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    pack = [*shardpack_command(), "pack", src, out, "--workers", "1", "--encode", "jpeg",
            "--quality", str(QUALITY), "--resize", f"{size}x{size}", "--resize-mode",
            "center-crop", "--no-progress", "--json", "--overwrite"]  # fmt: skip
    loop = [sys.executable, "-m", "benchmarks.ceiling", src, "--encode", "jpeg", "--quality",
            str(QUALITY), "--center-crop", str(size)]  # fmt: skip
    walls: dict[str, list[float]] = {"pack": [], "loop": []}
    for r in range(repeat):
        for name in ("pack", "loop") if r % 2 == 0 else ("loop", "pack"):
            run = run_measured(pack if name == "pack" else loop, REPO, env)
            if run.returncode != 0:
                raise SystemExit(f"{name} failed: {run.stderr.strip()[-600:]}")
            walls[name].append(round(run.wall_s, 3))
    pack_s, loop_s = statistics.median(walls["pack"]), statistics.median(walls["loop"])
    return {
        "workload": workload,
        "size": size,
        "command": " ".join(pack[:2] + pack[3:4] + ["OUT"] + pack[5:]),
        "pack_walls": walls["pack"],
        "loop_walls": walls["loop"],
        "speedup": round(loop_s / pack_s, 2),
        "psnr": psnr_against_loop(src, out, size),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="photos")
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache", default=os.path.join(REPO, "bench-out"))
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    row = measure(args.workload, args.size, args.repeat, args.cache)
    speed_met = row["speedup"] >= SPEEDUP
    psnr_met = row["psnr"]["min_db"] >= PSNR_DB
    print(f"\n## Reduced JPEG decode ({args.workload}, center-crop {args.size}x{args.size}, "
          f"1 worker, {os.cpu_count()} cores)\n")  # fmt: skip
    print("| pack s (median) | full-decode loop s | speed-up | goal | PSNR min / median | goal |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {statistics.median(row['pack_walls']):.2f} | {statistics.median(row['loop_walls']):.2f}"
        f" | {row['speedup']:.2f}x | >= {SPEEDUP}x {'yes' if speed_met else 'NO'}"
        f" | {row['psnr']['min_db']:.1f} / {row['psnr']['median_db']:.1f} dB"
        f" | >= {PSNR_DB:.0f} dB {'yes' if psnr_met else 'NO'} |"
    )
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(row, f, indent=1)
    return 0  # a target missed is a "NO" in the row, as benchmarks.run reports its targets


if __name__ == "__main__":
    sys.exit(main())
