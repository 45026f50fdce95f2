"""Soak test for resume: many pack runs, a third interrupted at random points and resumed.

Every run must end verified and byte-identical to the clean run. Not part of `make test`:

    python -m benchmarks.soak --images 200000 --runs 9 --workers 1,2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np

SHARDPACK = [sys.executable, "-m", "shardpack"]


def make_source(root: Path, images: int, seed: int = 0) -> Path:
    """Small JPEGs in 10 class folders (cached: reused when the count matches)."""
    marker = root / f".complete-{images}"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 255, 32, dtype=np.float32)[None, :, None]
    for i in range(images):
        pixels = (np.broadcast_to(ramp, (32, 32, 3)) * rng.uniform(0.2, 1, 3)).astype(np.uint8)
        pixels[rng.integers(0, 16) :, rng.integers(0, 16) :][:8, :8] = rng.integers(0, 256, 3)
        folder = root / f"class{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(folder / f"{i:07d}.jpg"), pixels)
    marker.write_text("ok")
    return root


def fingerprint(out: Path) -> dict[str, str]:
    """sha256 of every shard and of the index without its timing fields."""
    prints = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
              for p in sorted(out.iterdir()) if ".tfrecord-" in p.name}  # fmt: skip
    index = json.loads((out / "index.json").read_text())
    index.pop("stats")
    prints["index.json"] = hashlib.sha256(json.dumps(index, sort_keys=True).encode()).hexdigest()
    return prints


def finished_shards(out: Path) -> int:
    """Shards the journal records as finished (its first line is the plan digest)."""
    try:
        return len((out / ".shardpack.journal").read_text().splitlines()) - 1
    except FileNotFoundError:
        return 0


def pack_args(src: Path, out: Path, workers: int, shards: int) -> list[str]:
    return [*SHARDPACK, "pack", str(src), str(out), "--shards", str(shards),
            "--workers", str(workers), "--no-progress"]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--dir", type=Path, default=Path("bench-out/soak"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    worker_counts = [int(w) for w in args.workers.split(",")]
    src = make_source(args.dir / f"src-{args.images}", args.images)

    clean = args.dir / "clean"
    shutil.rmtree(clean, ignore_errors=True)
    started = time.perf_counter()
    subprocess.run(pack_args(src, clean, max(worker_counts), args.shards), check=True,
                   capture_output=True)  # fmt: skip
    clean_seconds = time.perf_counter() - started
    expected = fingerprint(clean)

    report = {"images": args.images, "shards": args.shards, "runs": [], "clean_s": clean_seconds}
    for run in range(args.runs):
        workers = worker_counts[run % len(worker_counts)]
        out = args.dir / "run"
        shutil.rmtree(out, ignore_errors=True)
        interruptions = 0
        if run % 3 == 0:  # a third of the runs: stopped at a random point, then resumed
            proc = subprocess.Popen(pack_args(src, out, workers, args.shards),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
            stop_after = rng.randrange(0, args.shards - 1)  # finished shards before the signal
            while proc.poll() is None and finished_shards(out) <= stop_after:
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.2))  # land anywhere inside the next shards
            if proc.poll() is None:
                proc.send_signal(rng.choice([signal.SIGINT, signal.SIGTERM]))
                interruptions += 1
            proc.wait()
            command = [*pack_args(src, out, workers, args.shards), "--resume"]
        else:
            command = pack_args(src, out, workers, args.shards)
        subprocess.run(command, check=True, capture_output=True)
        verify = subprocess.run([*SHARDPACK, "verify", str(out), "--json"], capture_output=True,
                                text=True)  # fmt: skip
        checked = json.loads(verify.stdout)
        identical = fingerprint(out) == expected
        report["runs"].append({
            "workers": workers, "interruptions": interruptions, "records": checked["records"],
            "faults": len(checked["faults"]), "identical": identical,
        })  # fmt: skip
        print(f"run {run}: workers={workers} interrupted={interruptions} "
              f"records={checked['records']} faults={len(checked['faults'])} "
              f"identical={identical}", flush=True)  # fmt: skip
    runs = report["runs"]
    summary = {
        "runs": len(runs),
        "interruptions": sum(r["interruptions"] for r in runs),
        "records_checked": sum(r["records"] for r in runs),
        "faults_found": sum(r["faults"] for r in runs),
        "identical_runs": sum(r["identical"] for r in runs),
    }
    report["summary"] = summary
    (args.dir / "soak.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(summary))
    return 0 if summary["faults_found"] == 0 and summary["identical_runs"] == len(runs) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
