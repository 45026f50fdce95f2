"""Run the benchmark: shardpack against the seed's way, side by side, in one run.

    python -m benchmarks.run                  # the quick plan (make bench): < 10 min, 2 cores
    python -m benchmarks.run --plan full      # adds the sample set and a 16,000-photo job
    python -m benchmarks.run photos --encode jpeg --workers 1,2 --repeat 3
    python -m benchmarks.run path/to/SRC --encode keep --json out.json --plot out.png

Every contender is timed as a whole process (start-up included), the contenders alternate
within each repeat (A B C, then C B A), and the report takes the median of the repeats.
`main(argv)` is the entry point a `shardpack bench` command can call.
"""

from __future__ import annotations

import argparse
import compileall
import datetime as dt
import json
import os
import platform
import statistics
import sys
from importlib import metadata

from benchmarks import report, workloads
from benchmarks.contenders import KINDS, REPO, Case, Contender, run, shardpack_command
from benchmarks.measure import run_measured
from shardpack.containers import CONTAINERS

DEFAULT_ENCODE = {
    "cifar10": "raw",
    "small-jpeg": "raw",
    "small-jpeg-5k": "raw",
    "photos": "jpeg",
    "photos-600": "keep",
    "photos-6000": "keep",
    "photos-large": "jpeg",
    "sample": "keep",
    "demo": "keep",
    "million": "keep",
}
# (workload, encode, contender kinds); "extras" are the memory and start-up checks.
# "shardpack-default" runs with no --workers: the defaults' choice, checked against each count.
_FOLDER = ("baseline", "naive-parallel", "shardpack", "shardpack-default", "ceiling",
           "ceiling-parallel")  # fmt: skip
PLANS = {
    "quick": [
        ("cifar10", "raw", ("seed-2-scripts", "shardpack", "shardpack-default", "ceiling")),
        ("small-jpeg", "raw", _FOLDER),
        ("small-jpeg-5k", "raw", ("shardpack-max",)),
        ("photos", "jpeg", _FOLDER),
        ("photos", "keep", KINDS[1:]),  # every contender but the CIFAR-only seed scripts
        ("demo", "keep", ("shardpack", "shardpack-default")),
    ],
}
PLANS["full"] = [
    ("sample", "keep", ("baseline", "baseline-keep", "naive-parallel", "shardpack", "ceiling")),
    *PLANS["quick"],
    ("photos-large", "jpeg", ("shardpack", "ceiling")),
]
# make bench-long: the scaling run (>= 60 s of one core's work, every worker count) and the
# listing-scale run (1,000,000 files); about 5 min on 2 cores, plus making the workloads.
PLANS["long"] = [("photos-large", "png", ("shardpack", "shardpack-default"))]
LISTING_WORKLOAD = "million"
# The start-up check packs a folder of this many images, whole process.
SMALL_PACK_IMAGES = 10


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def default_workers() -> list[int]:
    """1, the powers of two below the core count, and the core count."""
    cores = len(os.sched_getaffinity(0))
    return sorted({1, cores} | {2**k for k in range(1, 8) if 2**k < cores})


def _parse_list(text: str, cast=str) -> list:
    return [cast(part) for part in text.split(",") if part.strip()]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Time shardpack against the seed's single writer, naive parallelism and "
        "the hardware ceiling, each as a whole process.",
    )
    parser.add_argument(
        "targets",
        nargs="*",
        metavar="SRC-or-workload",
        help=f"workload names ({', '.join(workloads.NAMES)}) or SRC folders (class folders "
        "or CIFAR-10 python batches); none runs the --plan",
    )
    add = parser.add_argument
    add("--plan", choices=sorted(PLANS), default="quick", help="what to run with no SRC [quick]")
    add(
        "--workers",
        type=lambda t: _parse_list(t, int),
        default=None,
        help="shardpack worker counts, e.g. 1,2,4 [1 up to the cores]",
    )
    add(
        "--encode",
        type=_parse_list,
        default=None,
        help="encodings for the SRCs given, e.g. raw,jpeg [per workload]",
    )
    add("--quality", type=int, default=95, help="JPEG quality [95]")
    add(
        "--format",
        choices=sorted(CONTAINERS),
        default="tfrecord",
        help="shardpack's shard container; the other contenders write TFRecord [tfrecord]",
    )
    add("--repeat", type=int, default=3, help="runs of each contender [3]")
    add(
        "--contenders",
        type=_parse_list,
        default=None,
        help=f"only these kinds ({', '.join(KINDS)})",
    )
    add(
        "--cache",
        default=os.path.join(REPO, "bench-out"),
        help="folder for workloads, scratch output and results [bench-out]",
    )
    add(
        "--json",
        dest="json_path",
        default=None,
        help="results file [CACHE/results/bench-<time>.json]; the markdown report is written "
        "beside it (.md)",
    )
    add("--plot", default=None, help="PNG plot [beside the JSON]")
    add("--no-extras", action="store_true", help="skip the start-up check")
    add(
        "--cold",
        action="store_true",
        help="drop the inputs from the page cache before each run (read from the disk)",
    )
    return parser


def _contenders(kinds, kind: str, encode: str, workers: list[int]) -> list[Contender]:
    top = max(workers)
    chosen: list[Contender] = []
    for k in kinds:
        if k in ("baseline", "baseline-keep", "naive-parallel") and kind != "folder":
            continue  # the seed's writer reads class folders
        if k == "seed-2-scripts" and (kind != "cifar" or encode != "raw"):
            continue  # the seed's scripts make raw pixels from CIFAR only
        if k == "baseline-keep" and encode != "keep":
            continue
        if k == "io-ceiling" and encode != "keep":
            continue
        if k == "ceiling-parallel" and (kind != "folder" or encode == "keep" or top < 2):
            continue  # the measured N-at-once loop runs over class folders
        if k == "shardpack":
            chosen += [Contender("shardpack", n) for n in workers]
        elif k == "shardpack-max":
            chosen.append(Contender("shardpack", top))
        elif k in ("naive-parallel", "ceiling-parallel"):
            chosen.append(Contender(k, top))
        else:
            chosen.append(Contender(k, 1))
    return chosen


def _plan(args, cache: str, workers: list[int]) -> list[tuple[Case, list[Contender]]]:
    if args.targets:
        steps = []
        for target in args.targets:
            is_name = target in workloads.NAMES and not os.path.isdir(target)
            default = DEFAULT_ENCODE[target] if is_name else "raw"  # a SRC: the seed's encoding
            for encode in args.encode or [default]:
                kinds: tuple = ("seed-2-scripts", *_FOLDER)
                if encode == "keep":
                    kinds = (*kinds[:2], "baseline-keep", *kinds[2:], "io-ceiling")
                steps.append((target, encode, kinds))
    else:
        steps = PLANS[args.plan]
    plan = []
    for target, encode, kinds in steps:
        if target in workloads.NAMES and not os.path.isdir(target):
            workload = workloads.ensure(target, cache, _log)
        else:
            workload = workloads.from_path(target)
        if args.contenders:
            kinds = tuple(
                k
                for k in kinds
                if k in args.contenders or (k == "shardpack-max" and "shardpack" in args.contenders)
            )
        chosen = _contenders(kinds, workload.kind, encode, workers)
        if chosen:
            plan.append((Case(workload, encode, args.quality, args.format), chosen))
    return plan


def _warm(workload: workloads.Workload) -> None:
    """Read every input file once, untimed, so that no contender pays for a cold cache."""
    for root, _, files in os.walk(workload.path):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                while f.read(1 << 20):
                    pass


def _evict(workload: workloads.Workload) -> None:
    """Drop every input file's pages from the page cache, untimed (--cold): each contender
    reads them from the disk, as a dataset larger than memory is read. Its folders' entries and
    inodes stay cached (dropping those needs root)."""
    os.sync()
    for root, _, files in os.walk(workload.path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def machine() -> dict:
    """Facts about this machine and the libraries that decide the figures."""

    def version(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "not installed"

    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                model,
            )
    except OSError:
        pass
    memory_gb = None
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
        memory_gb = round(kb / 2**20, 1)
    except (OSError, StopIteration):
        pass
    import cv2
    import numpy

    return {
        "cores": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "memory_gb": memory_gb,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "opencv": cv2.__version__,
        "tensorflow": version("tensorflow"),
        "joblib": version("joblib"),
        "shardpack": version("shardpack"),
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }


def _small_folder(cache: str) -> str:
    """A class folder of SMALL_PACK_IMAGES images (hard links into the demo workload)."""
    demo = workloads.ensure("demo", cache, _log)
    dest = os.path.join(cache, "workloads", f"small-{SMALL_PACK_IMAGES}")
    if not os.path.isdir(dest):
        os.makedirs(dest + ".partial/a", exist_ok=True)
        for path in workloads.image_files(demo.path)[:SMALL_PACK_IMAGES]:
            target = os.path.join(dest + ".partial/a", os.path.basename(path))
            if not os.path.exists(target):
                os.link(path, target)
        os.replace(dest + ".partial", dest)
    return dest


def startup(cache: str, repeat: int = 5) -> dict:
    """`shardpack --help` and `shardpack pack` of a 10-image folder, whole processes; a worker
    module's import time, and whether it loads TF."""
    # Bytecode first, as an installed package has it: with PYTHONDONTWRITEBYTECODE set (or a
    # read-only checkout) every run would compile shardpack's modules again, ~0.08 s here.
    compileall.compile_dir(os.path.join(REPO, "shardpack"), quiet=1)
    help_walls = [
        run_measured([*shardpack_command(), "--help"], REPO).wall_s for _ in range(repeat)
    ]
    small, out = _small_folder(cache), os.path.join(cache, "runs", "small-pack")
    pack = [*shardpack_command(), "pack", small, out, "--no-progress", "--overwrite"]
    pack_walls = [run_measured(pack, REPO).wall_s for _ in range(repeat)]
    probe = [
        sys.executable,
        "-c",
        "import sys, shardpack.packing.worker, shardpack.packing.packer; "
        "print('tensorflow' in sys.modules)",
    ]
    imports = [run_measured(probe, REPO) for _ in range(3)]
    bare = [run_measured([sys.executable, "-c", "pass"], REPO).wall_s for _ in range(3)]
    return {
        "help_s": round(statistics.median(help_walls), 3),
        "help_walls": [round(w, 3) for w in help_walls],
        "small_pack_s": round(statistics.median(pack_walls), 3),
        "small_pack_walls": [round(w, 3) for w in pack_walls],
        "small_pack_images": SMALL_PACK_IMAGES,
        "worker_import_s": round(statistics.median(m.wall_s for m in imports), 3),
        "python_start_s": round(statistics.median(bare), 3),
        "worker_imports_tensorflow": imports[0].stdout.strip() == "True",
    }


# What the design card fixes a pack's process to import (the CLI's, the plan's and the pool's
# libraries), timed alone: the part of a pack's start-up no code of ours can remove.
FIXED_IMPORTS = "import typer, numpy, numpy.random, joblib"


def fixed_imports(repeat: int = 5) -> dict:
    """A fresh Python importing FIXED_IMPORTS, whole processes: the median wall."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}  # as the CLI sets it
    argv = [sys.executable, "-c", FIXED_IMPORTS]
    walls = [run_measured(argv, REPO, env).wall_s for _ in range(repeat)]
    return {"imports": FIXED_IMPORTS, "wall_s": round(statistics.median(walls), 3)}


def listing(cache: str) -> dict:
    """Scan and plan of the million-file tree in a fresh process (benchmarks/listing.py)."""
    workload = workloads.ensure(LISTING_WORKLOAD, cache, _log)
    probe = [sys.executable, "-m", "benchmarks.listing", workload.path]
    measured = run_measured(probe, REPO)
    if measured.returncode != 0:
        return {"error": (measured.stderr or measured.stdout).strip()[-600:]}
    return {**json.loads(measured.stdout.strip().splitlines()[-1]), "wall_s": measured.wall_s}


def _memory(results: dict) -> dict | None:
    """A worker's peak private memory on small-jpeg-5k against small-jpeg (10x the images),
    same workers: what a worker holds alone must not grow with the dataset. Its RSS would:
    a forked worker's RSS counts the parent's pages it shares (the listing among them)."""
    cases = {c["id"]: c for c in results["cases"]}
    small, large = cases.get("small-jpeg-5k-raw"), cases.get("small-jpeg-raw")
    if not small or not large:
        return None
    ids = {c["id"] for c in small["contenders"]} & {c["id"] for c in large["contenders"]}
    ids = sorted(i for i in ids if i.startswith("shardpack@"))
    if not ids:
        return None
    a = next(c["summary"] for c in small["contenders"] if c["id"] == ids[-1])
    b = next(c["summary"] for c in large["contenders"] if c["id"] == ids[-1])
    if not a.get("repeats") or not b.get("repeats"):
        return None
    # With one worker shardpack writes in-process: the parent is then the worker.
    small_mb = a.get("worker_private_mb") or a["parent_rss_mb"]
    large_mb = b.get("worker_private_mb") or b["parent_rss_mb"]
    return {
        "what": f"{ids[-1]}, small-jpeg-5k -> small-jpeg, raw",
        "small_mb": small_mb,
        "large_mb": large_mb,
        "small_rss_mb": a["worker_rss_mb"],
        "large_rss_mb": b["worker_rss_mb"],
        "small_parent_mb": a["parent_rss_mb"],
        "large_parent_mb": b["parent_rss_mb"],
        "ratio": round(large_mb / small_mb, 3) if small_mb else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the markdown report; write JSON, markdown and PNG."""
    args = _parser().parse_args(argv)
    if args.repeat < 1:
        raise SystemExit(f"--repeat must be a positive integer, got: {args.repeat!r}")
    workers = sorted(set(args.workers or default_workers()))
    cache = os.path.abspath(args.cache)
    started = dt.datetime.now().astimezone()
    stamp = started.strftime("%Y%m%d-%H%M%S")
    json_path = args.json_path or os.path.join(cache, "results", f"bench-{stamp}.json")
    plot_path = args.plot or os.path.splitext(json_path)[0] + ".png"
    command = "python -m benchmarks.run " + " ".join(argv if argv is not None else sys.argv[1:])
    results: dict = {
        "command": command.strip(),
        "started": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "repeat": args.repeat,
        "workers": workers,
        "cases": [],
        "extras": {},
    }
    plan = _plan(args, cache, workers)
    scratch = os.path.join(cache, "runs")
    for case, contenders in plan:
        _log(
            f"== {case.id}: {case.workload.num_images:,} images, "
            f"{case.workload.input_bytes / 1e6:.0f} MB"
        )
        _warm(case.workload)
        runs: dict[str, list[dict]] = {c.id: [] for c in contenders}
        for r in range(args.repeat):
            order = contenders if r % 2 == 0 else contenders[::-1]
            for contender in order:
                if args.cold:
                    _evict(case.workload)
                result = run(contender, case, scratch)
                runs[contender.id].append(result)
                status = f"{result['wall_s']:.2f} s" if result["ok"] else "FAILED"
                _log(f"   {contender.id:<18} repeat {r + 1}/{args.repeat}: {status}")
                if not result["ok"]:
                    _log("     " + result.get("error", "")[-600:].replace("\n", "\n     "))
        input_mb = case.workload.input_bytes / 1e6
        results["cases"].append(
            {
                "id": case.id,
                "workload": case.workload.to_json(),
                "encode": case.encode,
                "quality": case.quality,
                "format": case.format,
                "contenders": [
                    {
                        "id": c.id,
                        "kind": c.kind,
                        "workers": c.workers,
                        "summary": report.summarize(runs[c.id], case.workload.num_images, input_mb),
                        "runs": runs[c.id],
                    }
                    for c in contenders
                ],
            }
        )
    memory = _memory(results)
    if memory:
        results["extras"]["memory"] = memory
    if any(c["kind"] == "io-ceiling" for case in results["cases"] for c in case["contenders"]):
        _log("== the imports the design fixes, alone")
        results["extras"]["fixed_imports"] = fixed_imports()
    if not args.no_extras:
        _log("== start-up")
        results["extras"]["startup"] = startup(cache)
    if args.plan == "long" and not args.targets:
        _log(f"== listing: scan + plan of the {LISTING_WORKLOAD} workload")
        results["extras"]["listing"] = listing(cache)
    results["targets"] = report.targets(results)
    text = report.markdown(results)
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.splitext(json_path)[0] + ".md", "w") as f:
        f.write(text)
    report.plot(results, plot_path)
    print(text)
    _log(f"results: {json_path} (+ .md), plot: {plot_path}")
    failed = [
        c["id"]
        for case in results["cases"]
        for c in case["contenders"]
        if c["summary"].get("failed")
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
