"""The contenders: how each is started as a whole process, and what one run of it yields.

| name            | what runs                                                                 |
|-----------------|---------------------------------------------------------------------------|
| seed-2-scripts  | CIFAR only: the seed's two scripts one after the other (batches -> JPEG     |
|                 | folders, then JPEG folders -> one TFRecord per split); walls are summed    |
| baseline        | the seed's writer: one process, cv2.imread, tf.train.Example, one          |
|                 | tf.io.TFRecordWriter (benchmarks/baseline.py)                              |
| baseline-keep   | the same loop passing file bytes through, no decode (keep runs only)       |
| naive-parallel  | multiprocessing.Pool, one task per shard, TF Example + writer in each      |
| shardpack       | the real CLI: shardpack pack SRC OUT --workers N --no-progress --json      |
|                 | (--format: the run's container, TFRecord unless the run says otherwise)    |
| shardpack-default | the same with no --workers: the worker count the defaults choose         |
| ceiling         | one core reading and decoding/encoding in a tight loop, nothing else       |
| ceiling-parallel | the same loop in N processes at once (N: the most workers run), each on  |
|                 | every N-th image: what N cores of this machine really give                 |
| io-ceiling      | keep runs: one process reading, hashing, writing and fsyncing the bytes    |
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
from dataclasses import dataclass

from benchmarks.measure import Measurement, run_measured
from benchmarks.workloads import Workload
from shardpack.containers import CONTAINERS
from shardpack.errors import ShardpackError
from shardpack.storage import storage_at

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = (
    "seed-2-scripts",
    "baseline",
    "baseline-keep",
    "naive-parallel",
    "shardpack",
    "shardpack-default",
    "ceiling",
    "ceiling-parallel",
    "io-ceiling",
)


@dataclass(frozen=True)
class Case:
    """One workload packed with one encoding: the unit the report has a table for."""

    workload: Workload
    encode: str
    quality: int = 95
    format: str = "tfrecord"  # shardpack's container; the other contenders write TFRecord

    @property
    def id(self) -> str:
        tail = "" if self.format == "tfrecord" else f"-{self.format}"
        return f"{self.workload.name}-{self.encode}{tail}"


@dataclass(frozen=True)
class Contender:
    """One contender at one worker count."""

    kind: str
    workers: int = 1

    @property
    def id(self) -> str:
        if self.kind == "shardpack-default":
            return "shardpack@default"
        parallel = self.kind in ("naive-parallel", "shardpack")
        return f"{self.kind}@{self.workers}" if parallel else self.kind


def _env() -> dict:
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"  # quiet TF's banners; it changes no work done
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def shardpack_command() -> list[str]:
    """The installed console script beside this Python, else `python -m shardpack`."""
    script = os.path.join(os.path.dirname(sys.executable), "shardpack")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "shardpack"]


def _run(argv: list[str]) -> Measurement:
    return run_measured(argv, REPO, _env())


def _module(name: str) -> list[str]:
    return [sys.executable, "-m", f"benchmarks.{name}"]


def _clear(path: str) -> None:
    """Remove a run's output and flush, outside the timed part, so runs do not overlap on disk."""
    shutil.rmtree(path, ignore_errors=True)
    os.sync()


def count_records(folder: str, fmt: str = "tfrecord") -> tuple[int, int]:
    """(records, bytes) over the *.tfrecord* files in folder, walking record headers only;
    for another shardpack container, over its shards, by the container's framing check."""
    if fmt != "tfrecord":
        container, storage = CONTAINERS[fmt], storage_at(folder)
        shards = [n for n in sorted(os.listdir(folder)) if container.shard_pattern.fullmatch(n)]
        checked = [container.check(storage, name) for name in shards]
        return sum(c.num_records for c in checked), sum(c.num_bytes for c in checked)
    records = size = 0
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.startswith(".") or ".tfrecord" not in name or not os.path.isfile(path):
            continue  # shardpack also writes index.json, TFDS metadata and label files
        size += os.path.getsize(path)
        with open(path, "rb") as f:
            while header := f.read(12):
                if len(header) < 12:
                    raise ValueError(f"{path}: truncated record header")
                (length,) = struct.unpack("<Q", header[:8])
                f.seek(length + 4, os.SEEK_CUR)
                records += 1
    return records, size


def _last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    try:
        return json.loads(text)  # shardpack --json prints an indented document
    except ValueError:
        return {}


def run(contender: Contender, case: Case, scratch: str) -> dict:
    """Run one contender once on one case; returns the run's figures (see report.py)."""
    out = os.path.join(scratch, case.id, contender.id.replace("@", "-w"))
    _clear(out)
    src, encode, quality = case.workload.path, case.encode, str(case.quality)
    steps: list[Measurement] = []
    if contender.kind == "seed-2-scripts":
        jpgs = out + "-jpgs"
        _clear(jpgs)
        steps.append(_run([*_module("seed_cifar_to_jpg"), src, jpgs]))
        if steps[0].returncode == 0:
            writer = [*_module("baseline"), "--out", out, "--encode", "raw"]
            steps.append(_run([*writer, f"{jpgs}/train", f"{jpgs}/test"]))
        _clear(jpgs)
    elif contender.kind in ("baseline", "baseline-keep"):
        # In keep runs the seed itself stores decoded pixels: baseline is the seed unchanged.
        mode = "keep" if contender.kind == "baseline-keep" else encode
        mode = "raw" if mode == "keep" and contender.kind == "baseline" else mode
        steps.append(
            _run([*_module("baseline"), "--out", out, "--encode", mode, "--quality", quality, src])
        )
    elif contender.kind == "naive-parallel":
        workers = str(contender.workers)
        steps.append(
            _run(
                [
                    *_module("naive_parallel"),
                    src,
                    out,
                    "--workers",
                    workers,
                    "--encode",
                    encode,
                    "--quality",
                    quality,
                ]
            )
        )
    elif contender.kind in ("shardpack", "shardpack-default"):
        workers = (
            [] if contender.kind == "shardpack-default" else ["--workers", str(contender.workers)]
        )
        steps.append(
            _run(
                [
                    *shardpack_command(),
                    "pack",
                    src,
                    out,
                    *workers,
                    "--encode",
                    encode,
                    "--quality",
                    quality,
                    "--format",
                    case.format,
                    "--no-progress",
                    "--json",
                    "--overwrite",
                ]
            )
        )
    elif contender.kind in ("ceiling", "ceiling-parallel"):
        loop = [*_module("ceiling"), src, "--encode", encode, "--quality", quality]
        steps.append(_run([*loop, "--processes", str(contender.workers)]))
    elif contender.kind == "io-ceiling":
        steps.append(_run([*_module("ceiling"), src, "--encode", "keep", "--write", out]))
    else:
        raise ValueError(f"unknown contender {contender.kind!r}; choose one of {KINDS}")
    result = _result(contender, case, steps, out)
    _clear(out)
    return result


def _result(contender: Contender, case: Case, steps: list[Measurement], out: str) -> dict:
    failed = next((s for s in steps if s.returncode != 0), None)
    reported = _last_json(steps[-1].stdout) if failed is None else {}
    result = {
        "contender": contender.kind,
        "workers": contender.workers,
        "ok": failed is None,
        "wall_s": sum(s.wall_s for s in steps),
        "cpu_s": sum(s.cpu_s for s in steps),
        "maxrss_mb": max(s.maxrss_mb for s in steps),
        "tree_pss_mb": max(s.tree_pss_mb for s in steps),
        "parent_rss_mb": max(s.parent_rss_mb for s in steps),
        "worker_rss_mb": max(s.worker_rss_mb for s in steps),
        "worker_private_mb": max(s.worker_private_mb for s in steps),
        "processes": max(s.processes for s in steps),
        "other_cores": sum(s.other_cores * s.wall_s for s in steps) / sum(s.wall_s for s in steps),
        "steps": [s.to_json() for s in steps],
    }
    if failed is not None:
        result["error"] = (failed.stderr or failed.stdout).strip()[-2000:]
        return result
    if contender.kind in ("ceiling", "ceiling-parallel", "io-ceiling"):
        result["images"] = reported.get("images", 0)
        result["inner_s"] = reported.get("seconds")
        return result
    result["inner_s"] = reported.get("seconds")
    result["chosen_workers"] = reported.get("workers")
    try:
        fmt = case.format if contender.kind.startswith("shardpack") else "tfrecord"
        result["images"], result["out_bytes"] = count_records(out, fmt)
    except (OSError, ValueError, ShardpackError) as e:
        result.update(ok=False, error=f"cannot read the output: {e}")
        return result
    if result["images"] != case.workload.num_images:
        result.update(
            ok=False,
            error=f"wrote {result['images']} records for {case.workload.num_images} images",
        )
    return result
