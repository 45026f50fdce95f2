"""Images behind URLs: shardpack packing a URL list from a local server that adds latency.

    .venv/bin/python -m benchmarks.urls                      # 2,000 URLs at 50 and 200 ms
    .venv/bin/python -m benchmarks.urls --urls 400 --latency 0.05 --flaky 0.1 --workers 2
    .venv/bin/python -m benchmarks.urls --img2dataset -- --per-host 128   # side by side
    .venv/bin/python -m benchmarks.urls --img2dataset --pairs 3 -- --per-host 128  # medians
    .venv/bin/python -m benchmarks.urls --retry-run -- --per-host 128    # clean, then flaky
    .venv/bin/python -m benchmarks.urls --retry-run --long 6000 --pairs 3 -- --per-host 128
    .venv/bin/python -m benchmarks.urls --urls 1000 --latency 0.05 --copies 0.2 -- --dedup exact

A threaded HTTP server on 127.0.0.1 answers every URL with a 500x375 JPEG (its own bytes: a
comment names the URL) after `--latency` seconds; with `--flaky F`, a fraction F of the URLs
fail their first request (a 503, a 429 with Retry-After: 1, or a reset connection, in turn);
with `--copies F`, a fraction F of the URLs (every 1/F-th) answer the bytes of the URL before
them, exact copies for `--dedup`. Each run counts the requests the server answered.
Each run packs the list with the CLI (`--allow-private-urls`, passthrough unless `--resize`;
more flags after `--`) and prints its images/s end to end, the server's most requests in
flight, and how many were packed. One server is one host: `--per-host` caps what is in flight.

With `--img2dataset`, each latency runs shardpack and img2dataset (from its own venv,
.venv-img2dataset: `make peers-img2dataset`; its pins conflict with ours) in turn on the same
list, passthrough and with a 256 px center-crop re-encode, both writing WebDataset tars, and
prints each one's images/s and the ratio. img2dataset runs as the issue measured it: 2
processes x 64 threads, its retries set to shardpack's 2.

With `--retry-run` (at the first `--latency`), shardpack packs 2,000 URLs passthrough and the
same cropped to 256 px (with `--long N`, N URLs passthrough too), each clean and then with
`--flaky 0.1`, and prints the flaky run's time over the clean one's, and when its last first
request and its last retry reached the server: a URL told at its first request to come back in
a second is packed no sooner, so the last first request plus that second is the floor of the
flaky run.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import resource
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

import cv2
import numpy as np


def _photo() -> bytes:
    rng = np.random.default_rng(0)
    small = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    pixels = cv2.GaussianBlur(cv2.resize(small, (500, 375)), (9, 9), 0)
    return cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def handle_error(self, request, client_address) -> None:
        pass  # the resets this benchmark makes on purpose


def serve(latency: float, flaky: float, copies: float = 0.0) -> tuple[_Server, dict]:
    """The server, and its counters: the requests, the most in flight, and when (perf_counter)
    the last URL's first request came and the last request of a URL asked before (a retry)."""
    body, seen = _photo(), set()
    state = {"requests": 0, "active": 0, "most": 0, "last_first": 0.0, "last_retry": 0.0}
    every = round(1 / copies) if copies else 0  # /{i}.jpg is /{i - 1}.jpg's copy
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # headers and body are two writes: Nagle would hold the body until the client's
            # delayed ACK of the headers, 40 ms a response more than `latency`
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            with lock:
                first = self.path not in seen
                seen.add(self.path)
                state["last_first" if first else "last_retry"] = time.perf_counter()
                state["requests"] += 1
                state["active"] += 1
                state["most"] = max(state["most"], state["active"])
            try:
                time.sleep(latency)
                self._answer(first)
            finally:
                with lock:
                    state["active"] -= 1

        def _answer(self, first: bool) -> None:
            mark = zlib.crc32(self.path.encode())
            if first and mark % 1000 < flaky * 1000:
                kind = mark % 3
                if kind == 0:
                    linger = struct.pack("ii", 1, 0)
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    self.connection.close()
                    self.close_connection = True
                    return
                status, headers = (503, {}) if kind == 1 else (429, {"Retry-After": "1"})
                self._send(status, b"later", headers)
                return
            # a comment segment naming the URL: each image its own bytes (but the copies)
            number = int(self.path.strip("/").split(".")[0])
            copy = every and number % every == every - 1
            named = (f"/{number - 1}.jpg" if copy else self.path).encode()
            unique = body[:2] + b"\xff\xfe" + struct.pack(">H", len(named) + 2) + named + body[2:]
            self._send(200, unique, {"Content-Type": "image/jpeg"})

        def _send(self, status: int, data: bytes, headers: dict) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, state


IMG2DATASET = os.path.join(".venv-img2dataset", "bin", "img2dataset")
_CROP = ["--resize", "256x256", "--resize-mode", "center-crop"]  # the 256 px crop


def run(urls: int, latency: float, flaky: float, workers: int, extra: list[str],
        peer: str | None = None, copies: float = 0.0) -> dict:  # fmt: skip
    """One pack of `urls` URLs from a fresh server, by shardpack or by `peer` (img2dataset,
    with `extra` its flags): its figures."""
    server, state = serve(latency, flaky, copies)
    port = server.server_address[1]
    with tempfile.TemporaryDirectory(prefix="shardpack-urls-") as folder:
        src, out = os.path.join(folder, "urls.csv"), os.path.join(folder, "out")
        with open(src, "w") as f:
            f.write("url,caption\n")
            f.writelines(f"http://127.0.0.1:{port}/{i}.jpg,photo {i}\n" for i in range(urls))
        if peer:  # one input shard a process, as shardpack's shard a worker
            command = [peer, "--url_list", src, "--output_folder", out, "--input_format", "csv",
                       "--url_col", "url", "--caption_col", "caption", "--output_format",
                       "webdataset", "--processes_count", str(workers), "--thread_count", "64",
                       "--retries", "2", "--number_sample_per_shard", str(-(-urls // workers)),
                       *extra]  # fmt: skip
        else:
            command = [sys.executable, "-m", "shardpack", "pack", src, out, "--path-column", "url",
                       "--workers", str(workers), "--allow-private-urls", "--no-progress",
                       "--json", *extra]  # fmt: skip
        before, start = _children_cpu(), time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              env={**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1"})  # fmt: skip
        seconds, cpu = time.perf_counter() - start, _children_cpu() - before
        packed = _img2dataset_successes(out) if peer and not done.returncode else None
    server.shutdown()
    server.server_close()
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    if not peer:
        packed = json.loads(done.stdout)["records"]
    return {"packer": "img2dataset" if peer else "shardpack", "urls": urls,
            "latency_s": latency, "flaky": flaky, "workers": workers, "packed": packed,
            "seconds": round(seconds, 2), "images_per_s": round(packed / seconds, 1),
            "cpu_s": round(cpu, 2), "requests": state["requests"],
            "most_in_flight": state["most"], **_arrivals(state, start)}  # fmt: skip


def _arrivals(state: dict, start: float) -> dict:
    """When, in seconds from the run's start, the last first request and the last retry came
    (no retry: none)."""
    times = {"last_first_s": state["last_first"], "last_retry_s": state["last_retry"]}
    return {key: round(at - start, 2) for key, at in times.items() if at}


def _children_cpu() -> float:
    """User + system seconds of the children reaped so far (and of theirs they reaped)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _img2dataset_successes(out: str) -> int:
    """The images img2dataset wrote, from the `_stats.json` beside each of its shards."""
    names = [name for name in os.listdir(out) if name.endswith("_stats.json")]
    return sum(json.load(open(os.path.join(out, name)))["successes"] for name in names)


def fetch_only(urls: int, latency: float, flaky: float, threads: int, read_ms: float = 0.0) -> dict:
    """One worker's fetching alone: a Prefetch of `threads` over `urls` URLs read in order, in
    this process (the server's threads too), no packing: where a retry's wait goes. Each read
    is followed by `read_ms` of sleep: a writer's work that, as OpenCV's, leaves the GIL free
    (a 256 px crop's ~2.5 ms); `waited_s` is the time the reads waited for their bytes."""
    from shardpack.storage.fetch import Fetcher, Prefetch  # the code under test, in-process
    from shardpack.storage.urlpolicy import FetchPolicy

    server, state = serve(latency, flaky)
    port = server.server_address[1]
    listed = [f"http://127.0.0.1:{port}/{i}.jpg" for i in range(urls)]
    policy = FetchPolicy(allow_private=True, threads=threads, per_host=threads)
    start = time.perf_counter()
    ahead = Prefetch(Fetcher(policy), iter(listed), 1 << 20)
    try:
        got, waited = 0, 0.0
        for url in listed:
            before = time.perf_counter()
            got += bool(ahead.read(url, 1 << 20))
            waited += time.perf_counter() - before
            time.sleep(read_ms / 1000)
    finally:
        ahead.close()
    seconds = time.perf_counter() - start
    server.shutdown()
    server.server_close()
    return {"fetch_only": urls, "latency_s": latency, "flaky": flaky, "threads": threads,
            "got": got, "seconds": round(seconds, 2), "most_in_flight": state["most"],
            "read_ms": read_ms, "waited_s": round(waited, 2),
            **_arrivals(state, start)}  # fmt: skip


def side_by_side(urls: int, latency: float, workers: int, extra: list[str], peer: str,
                 pairs: int = 1) -> None:  # fmt: skip
    """shardpack then img2dataset, passthrough and center-cropped to 256 px, `pairs` times in
    turn: a line each, their ratio of images/s a pair, and over several pairs the median."""
    modes = {
        "passthrough": (["--format", "webdataset"],
                        ["--resize_mode", "no", "--skip_reencode", "True"]),
        "center-crop 256": (
            ["--format", "webdataset", *_CROP],
            ["--image_size", "256", "--resize_mode", "center_crop"],
        ),
    }  # fmt: skip
    for mode, (ours, theirs) in modes.items():
        ratios, cpu = [], []
        for _ in range(pairs):
            mine = run(urls, latency, 0.0, workers, ours + extra)
            peers = run(urls, latency, 0.0, workers, theirs, peer)
            for figures in (mine, peers):
                print(json.dumps({"mode": mode, **figures}), flush=True)
            ratios.append(mine["images_per_s"] / peers["images_per_s"])
            cpu.append(peers["cpu_s"] / mine["cpu_s"])
            print(f"# {mode}, {latency * 1000:g} ms: shardpack {mine['images_per_s']} images/s, "
                  f"img2dataset {peers['images_per_s']}: {ratios[-1]:.2f}x; CPU s "
                  f"{mine['cpu_s']} against {peers['cpu_s']}", flush=True)  # fmt: skip
        if pairs > 1:
            print(f"# {mode}, {latency * 1000:g} ms, median of {pairs} pairs: "
                  f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}); "
                  f"of CPU {statistics.median(cpu):.2f}x", flush=True)  # fmt: skip


# The retry run: 10% of the URLs failing their first request, each list clean then
# flaky (with --long, a passthrough list where Retry-After's second is a small part of a run).
RETRY_RUN = (("passthrough", 2000, []), ("center-crop 256", 2000, _CROP))


def retry_run(latency: float, workers: int, extra: list[str], pairs: int = 1, long: int = 0
              ) -> None:  # fmt: skip
    """Each of RETRY_RUN's lists (and `long` URLs passthrough) packed clean then with 10%
    transient failures, `pairs` times in turn: a line each, the flaky run's time over the clean
    one's a pair, over several pairs the median, and where the flaky run's last first request
    and last retry came."""
    for mode, urls, flags in RETRY_RUN + ((("passthrough", long, []),) if long else ()):
        ratios, gaps = [], []
        for _ in range(pairs):
            clean = run(urls, latency, 0.0, workers, flags + extra)
            flaky = run(urls, latency, 0.1, workers, flags + extra)
            for figures in (clean, flaky):
                print(json.dumps({"mode": mode, **figures}), flush=True)
            ratios.append(flaky["seconds"] / clean["seconds"])
            gaps.append(flaky["last_retry_s"] - flaky["last_first_s"])
            print(f"# retry run, {mode}, {urls:,} URLs, {latency * 1000:g} ms: clean "
                  f"{clean['seconds']} s, 10% failing first {flaky['seconds']} s "
                  f"({flaky['packed']:,} packed): {ratios[-1]:.2f}x; its last first request "
                  f"at {flaky['last_first_s']} s, last retry at {flaky['last_retry_s']} s",
                  flush=True)  # fmt: skip
        if pairs > 1:
            print(f"# retry run, {mode}, {urls:,} URLs, median of {pairs} pairs: "
                  f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}); "
                  f"last retry after the last first request {statistics.median(gaps):.2f} s",
                  flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--urls", type=int, default=2000)
    parser.add_argument("--latency", default="0.05,0.2", help="seconds a response, comma list")
    parser.add_argument("--flaky", type=float, default=0.0, help="fraction failing at first")
    parser.add_argument("--copies", type=float, default=0.0,
                        help="fraction answering the bytes of the URL before them")  # fmt: skip
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--resize", help="WxH: re-encode, center-cropped (else passthrough)")
    parser.add_argument("--fetch-only", type=int, metavar="THREADS",
                        help="one worker's Prefetch alone, in-process, at THREADS")  # fmt: skip
    parser.add_argument("--read-ms", type=float, default=0.0,
                        help="with --fetch-only: ms of sleep after each read (a writer's work)"
                        )  # fmt: skip
    parser.add_argument("--img2dataset", nargs="?", const=IMG2DATASET, metavar="PATH",
                        help=f"side by side with img2dataset [{IMG2DATASET}]")  # fmt: skip
    parser.add_argument("--retry-run", action="store_true",
                        help="2,000 URLs clean then 10%% failing first, passthrough and cropped"
                        )  # fmt: skip
    parser.add_argument("--long", type=int, default=0, metavar="URLS",
                        help="with --retry-run: a passthrough list of URLS too")  # fmt: skip
    parser.add_argument("--pairs", type=int, default=1,
                        help="with --img2dataset or --retry-run: runs of each in turn (A B A B), "
                        "the median")  # fmt: skip
    parser.add_argument("flags", nargs="*", help="more pack flags, after --")
    args = parser.parse_args(argv)
    extra = ["--resize", args.resize, "--resize-mode", "center-crop"] if args.resize else []
    extra += args.flags
    if args.retry_run:
        latency = float(args.latency.split(",")[0])
        return retry_run(latency, args.workers, args.flags, args.pairs, args.long)
    for latency in map(float, args.latency.split(",")):
        if args.fetch_only:
            alone = fetch_only(args.urls, latency, args.flaky, args.fetch_only, args.read_ms)
            print(json.dumps(alone), flush=True)
        elif args.img2dataset:
            if not os.path.exists(args.img2dataset):
                raise SystemExit(f"{args.img2dataset}: not there; run `make peers-img2dataset`")
            side_by_side(args.urls, latency, args.workers, args.flags, args.img2dataset,
                         args.pairs)  # fmt: skip
        else:
            figures = run(args.urls, latency, args.flaky, args.workers, extra, copies=args.copies)
            print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
