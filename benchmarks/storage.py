"""The three storage pairings on the same job: local -> local, local -> store and store -> store,
images/s each, the store being a real S3 API server (moto's, as the tests start it) on loopback,
reached through s3fs as a user's S3 would be.

    python -m benchmarks.storage [WORKLOAD] [--encode keep] [--workers 2] [--shards 8]
                                 [--repeat 3] [--cache bench-out] [--json FILE]

Each run is the CLI as a whole process (start-up included), measured by benchmarks.measure;
the pairings alternate within each repeat (A B C, then C B A) and the report takes the median
wall time. The source is uploaded once, untimed; each run's output is deleted, untimed, before
the next. Every run must write one record per image, and the three pairings the same shards
(the sha256s in their index.json). `store GET` is the store's own ceiling: every source object
read back through s3fs, `--workers` at a time, in this process. The server shares this
machine's cores with the run: the figures are shardpack plus moto, not shardpack against S3.

    python -m benchmarks.storage --manifest 1000 --latency 0.02 [--against DIR] [--pairs 3]

With `--manifest N`: a CSV on the local disk naming N small images (the demo workload's) by
their s3:// URLs, packed to the local disk (`--encode keep`), on a server whose every GET of an
object answers `--latency` s late (tests/s3server.py: a remote store's round trip); with
`--against DIR` (another checkout, e.g. main `git archive`d), that code's run and this one's
alternate (A B A B), each a whole process. The server counts each run's GETs and the most in
flight at once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import fsspec

from benchmarks.measure import run_measured
from benchmarks.workloads import ensure, image_files
from tests.s3server import environment, gets, start_server

BUCKET = "bench"
PAIRINGS = ("local -> local", "local -> store", "store -> store")


def _pack(src: str, out: str, args, env: dict[str, str]) -> dict:
    argv = [sys.executable, "-m", "shardpack", "pack", src, out, "--name", "bench",
            "--workers", str(args.workers), "--encode", args.encode, "--shards", str(args.shards),
            "--no-progress", "--json"]  # fmt: skip
    measured = run_measured(argv, env=env)
    if measured.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {measured.stderr.strip()}")
    return {"wall_s": measured.wall_s, "cpu_s": measured.cpu_s, **json.loads(measured.stdout)}


def _shards(fs, out: str) -> list[str]:
    """The sha256 of each shard, from the index a run wrote."""
    index = json.loads(fs.cat_file(f"{out}/index.json"))
    return [s["sha256"] for split in index["splits"].values() for s in split["shards"]]


def _store_get(fs, keys: list[str], concurrency: int) -> float:
    """Seconds to read every object back, `concurrency` requests in flight."""
    start = time.perf_counter()
    fs.cat(keys, batch_size=concurrency)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="photos-600")
    parser.add_argument("--encode", default="keep")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache", default="bench-out")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--manifest", type=int, help="a manifest of N s3:// images instead")
    parser.add_argument("--latency", type=float, default=0.02, help="with --manifest: s a GET")
    parser.add_argument("--against", help="with --manifest: another checkout to alternate with")
    parser.add_argument("--pairs", type=int, default=3, help="with --manifest: runs of each")
    args = parser.parse_args(argv)
    if args.manifest:
        return manifest_row(args)
    workload = ensure(args.workload, args.cache)
    files = image_files(workload.path)
    megabytes = sum(os.path.getsize(p) for p in files) / 1e6
    scratch = Path(tempfile.mkdtemp(prefix="storage-", dir=args.cache))
    server, endpoint = start_server(scratch / "moto.log")
    try:
        os.environ.update(environment(endpoint, scratch))  # this process's s3fs, and the CLI's
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
        fs.mkdir(BUCKET)
        remote_src = f"{BUCKET}/src/{workload.name}"
        keys = [f"{remote_src}/{os.path.relpath(p, workload.path)}" for p in files]
        fs.pipe({key: Path(p).read_bytes() for key, p in zip(keys, files, strict=True)})  # untimed
        local_out = os.fspath(scratch / "out")
        jobs = {
            "local -> local": (workload.path, local_out),
            "local -> store": (workload.path, f"s3://{BUCKET}/out"),
            "store -> store": (f"s3://{remote_src}", f"s3://{BUCKET}/out"),
        }
        runs: dict[str, list[dict]] = {p: [] for p in PAIRINGS}
        shards: dict[str, list[str]] = {}
        get_s = []
        for r in range(args.repeat):
            get_s.append(_store_get(fs, keys, args.workers))
            for pairing in PAIRINGS if r % 2 == 0 else PAIRINGS[::-1]:
                src, out = jobs[pairing]
                result = _pack(src, out, args, dict(os.environ))
                if result["records"] != len(files):
                    raise SystemExit(f"{pairing}: {result['records']} records, not {len(files)}")
                runs[pairing].append(result)
                if out == local_out:
                    shards[pairing] = _shards(fsspec.filesystem("file"), out)
                    shutil.rmtree(out)
                else:
                    shards[pairing] = _shards(fs, out)
                    fs.rm(out, recursive=True)
        if len({tuple(s) for s in shards.values()}) != 1:
            raise SystemExit("the pairings wrote different shards")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    rows = [_row(p, runs[p], len(files), megabytes) for p in PAIRINGS]
    get = statistics.median(get_s)
    rows.append({"pairing": f"store GET ({args.workers} in flight)", "wall_s": round(get, 2),
                 "images_per_s": round(len(files) / get, 1),
                 "mb_per_s": round(megabytes / get, 1), "pack_images_per_s": None})  # fmt: skip
    print(f"\n## Storage pairings ({workload.name}: {len(files):,} images, {megabytes:.0f} MB; "
          f"--encode {args.encode} --workers {args.workers} --shards {args.shards}; median of "
          f"{args.repeat}; {os.cpu_count()} cores, moto on loopback)\n")  # fmt: skip
    print("| pairing | wall s | images/s | MB/s | pack's own images/s |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        own = "" if row["pack_images_per_s"] is None else f"{row['pack_images_per_s']:,.0f}"
        print(f"| {row['pairing']} | {row['wall_s']} | {row['images_per_s']:,.0f} | "
              f"{row['mb_per_s']:,.1f} | {own} |")  # fmt: skip
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def manifest_row(args) -> int:
    """A local manifest of `args.manifest` s3:// images packed from the slowed server, this
    code's run alternating with `args.against`'s (A B A B); each run's images/s, GETs and the
    most in flight."""
    workload = ensure("demo", args.cache)
    files = image_files(workload.path)[: args.manifest]
    scratch = Path(tempfile.mkdtemp(prefix="manifest-", dir=args.cache))
    server, endpoint = start_server(scratch / "moto.log", latency=args.latency)
    codes = {"this": os.getcwd(), **({"against": os.path.abspath(args.against)}
                                     if args.against else {})}  # fmt: skip
    runs: dict[str, list[dict]] = {code: [] for code in codes}
    try:
        os.environ.update(environment(endpoint, scratch))
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
        fs.mkdir(BUCKET)
        keys = [f"{BUCKET}/images/{os.path.relpath(p, workload.path)}" for p in files]
        fs.pipe({key: Path(p).read_bytes() for key, p in zip(keys, files, strict=True)})
        manifest = scratch / "images.csv"
        rows = (f"s3://{key},{Path(p).parent.name}\n" for key, p in zip(keys, files, strict=True))
        manifest.write_text("path,label\n" + "".join(rows))
        gets(endpoint, reset=True)  # the uploads' own
        for r in range(args.pairs):
            for code in codes if r % 2 == 0 else list(codes)[::-1]:
                out = scratch / "out"
                # -P: the code is PYTHONPATH's, not the working folder's
                argv = [sys.executable, "-P", "-m", "shardpack", "pack", os.fspath(manifest),
                        os.fspath(out), "--name", "bench", "--workers", str(args.workers),
                        "--encode", "keep", "--no-progress", "--json"]  # fmt: skip
                env = {**os.environ, "PYTHONPATH": codes[code]}
                measured = run_measured(argv, env=env)
                if measured.returncode != 0:
                    raise SystemExit(f"{' '.join(argv)} failed: {measured.stderr.strip()}")
                records = json.loads(measured.stdout)["records"]
                if records != len(files):
                    raise SystemExit(f"{code}: {records} records, not {len(files)}")
                served = gets(endpoint, reset=True)
                served = {key: served[key] for key in ("gets", "most")}
                runs[code].append({"wall_s": round(measured.wall_s, 3),
                                   "images_per_s": round(len(files) / measured.wall_s, 1),
                                   **served})  # fmt: skip
                print(f"# {code}: {runs[code][-1]}", flush=True)
                shutil.rmtree(out)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n## A manifest of {len(files):,} s3:// images ({workload.name}), "
          f"{args.latency * 1000:g} ms a GET, --workers {args.workers} --encode keep; "
          f"{args.pairs} alternated runs each\n")  # fmt: skip
    print("| code | images/s (median) | each run | GETs | most in flight |")
    print("|---|---:|---:|---:|---:|")
    rows = []
    for code, done in runs.items():
        rate = statistics.median(r["images_per_s"] for r in done)
        rows.append({"code": code, "images_per_s": rate, "runs": done})
        each = ", ".join(f"{r['images_per_s']:,.0f}" for r in done)
        print(f"| {code} ({codes[code]}) | {rate:,.0f} | {each} | {done[-1]['gets']:,} | "
              f"{max(r['most'] for r in done)} |")  # fmt: skip
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def _row(pairing: str, runs: list[dict], images: int, megabytes: float) -> dict:
    wall = statistics.median(r["wall_s"] for r in runs)
    return {
        "pairing": pairing,
        "wall_s": round(wall, 2),
        "images_per_s": round(images / wall, 1),  # the whole process, as a user waits for it
        "mb_per_s": round(megabytes / wall, 1),
        "pack_images_per_s": statistics.median(r["images_per_second"] for r in runs),
        "runs": runs,
    }


if __name__ == "__main__":
    raise SystemExit(main())
