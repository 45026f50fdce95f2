"""Images behind http(s) URLs (storage.fetch, storage.urlpolicy, the manifest's URL rows and
packing.urlfailures), against a real threaded HTTP server on 127.0.0.1: latency, transient and
permanent failures, opt-out headers, redirects, oversize and dripping bodies, and the order
records keep whatever arrives first."""

from __future__ import annotations

import contextlib
import gc
import gzip
import http.server
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import cv2
import pytest

from shardpack import PackOptions, SourceError, StorageError, iter_examples, pack
from shardpack.errors import ShardpackError
from shardpack.layout import FETCHED_PREFIX
from shardpack.options import as_flags
from shardpack.packing import duplicates
from shardpack.sources import scan
from shardpack.sources.streamed import BAD_ROW
from shardpack.storage import fetch
from shardpack.storage.fetch import Fetcher, Prefetch, UrlFailed
from shardpack.storage.srcfiles import FileTooLarge
from shardpack.storage.urlpolicy import FetchPolicy, is_transient, opted_out, refusal, status_of
from tests import forkserver, helpers

# A loopback HTTP server answering with injected latency: the slow tier's, as the S3 server is.
pytestmark = pytest.mark.slow


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a connection the test reset on purpose


class Site:
    """A web server of tiny PNGs whose paths say how it answers (see _Handler)."""

    def __init__(self, latency: float = 0.0, jitter: bool = False) -> None:
        self.latency, self.jitter = latency, jitter
        self.hits: Counter[str] = Counter()
        self.times: dict[str, list[float]] = {}  # path -> when each request of it came
        self.agents: set[str] = set()
        self.active = self.most = 0
        self.again = self.most_again = 0  # of those, requests of a path asked for before
        self.connections = 0  # open now
        self.accepted = 0  # taken in all
        self.started: list[str] = []  # paths in the order their requests came
        self.finished: list[str] = []  # and in the order they were answered
        self.lock = threading.Lock()
        self.held: frozenset[str] = frozenset()  # paths answered only once `gate` is set
        self.gate = threading.Event()
        self.down: set[str] = set()  # paths answered 503 for now
        self.gone: set[str] = set()  # paths answered 404 for now
        self.retry_after = 1  # what a first request of /429/N.png is told
        self.dripped = 0  # bytes /dripimage.png sent after its head
        handler = type("Handler", (_Handler,), {"site": self})
        self.server = _Server(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


GZIP_BOMB = gzip.compress(bytes(1 << 20))


def _png(n: int) -> bytes:
    return cv2.imencode(".png", helpers.image(n))[1].tobytes()


WIDE = 20_000  # the sides a header of WIDE_HEADS declares: 400 million pixels


def _wide_jpeg() -> bytes:
    """A JPEG's head declaring WIDE x WIDE, its frame header after 4 KB of EXIF (past the
    first KiB looked at)."""
    real = cv2.imencode(".jpg", helpers.image(0))[1].tobytes()
    exif = b"Exif\x00\x00" + bytes(4000)
    frame = real.index(b"\xff\xc0")
    sized = real[: frame + 5] + struct.pack(">HH", WIDE, WIDE) + real[frame + 9 :]
    return sized[:2] + b"\xff\xe1" + struct.pack(">H", len(exif) + 2) + exif + sized[2:]


def _wide_png() -> bytes:
    ihdr = b"IHDR" + struct.pack(">IIBBBBB", WIDE, WIDE, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr))


def _wide_webp() -> bytes:
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes(4) + (WIDE - 1).to_bytes(3, "little") * 2
    return b"RIFF" + struct.pack("<I", 1 << 30) + b"WEBP" + vp8x


# /wide/jpg, /wide/png, /wide/webp: such a head, then zeros without end; /widelength/...: and
# a Content-Length of 50 MB that it does not keep to either
WIDE_HEADS = {"jpg": _wide_jpeg(), "png": _wide_png(), "webp": _wide_webp()}


class _Handler(http.server.BaseHTTPRequestHandler):
    """/img/N.png: image N. The first request of /503/N.png is a 503, of /429/N.png a 429 with
    Retry-After: 1 (Site.retry_after), of /reset/N.png a reset connection, of /cut/N.png half
    the Content-Length it states, the connection then closed; then image N. /long/N.png:
    image N, and bytes past its Content-Length on the connection kept. /garbled.png: no HTTP.
    /503odd.png: a 503 whose Retry-After is a digit of latin-1 past ASCII (a superscript 2);
    /503past.png and /503minus.png: a 503 to retry after a date past, or -5 s. /badchunk.png:
    a chunk size that is no number. /gzipbomb.png: GZIP_BOMB as Content-Encoding: gzip;
    /gzip/N.png, /deflate/N.png: image N so encoded, whatever was asked (as some servers do);
    /brotli.png: Content-Encoding: br, /gzipcut.png: half of a gzip'ed image (its length right).
    /badredirect.png: a 302 to a URL urllib cannot parse. /dripheaders.png: a status line, then a
    header's byte every 50 ms (2 s); /continues.png: a 100 Continue every 50 ms (2 s);
    /hints/N.png: a 103 Early Hints, then 50 ms later image N. /idle408/N.png: image N, then
    50 ms later a 408 on the idle connection, closed (as servers time out a kept one);
    /utf8redirect/N.png: a 302 to /img/N.café.png, its Location's é sent as UTF-8 bytes.
    /429long.png asks to be retried in a day. /redirect/N.png: a 302 to /img/N.png.
    /noai/N.png and /otherbot/N.png: image N with an X-Robots-Tag (noai for every agent; noai
    for another bot). /404.png, /403.png, /always503.png, /loop.png (a redirect to
    itself), /meta.png (a redirect to the metadata address), /tofile.png and /tos3.png (to
    file:///etc/hostname and s3://bucket/a.png), /huge.png (Content-Length 100 GB),
    /html.png (a web page), /text.png (a message in plain text), /svg.png and /svgxml.png (an
    SVG drawing as image/svg+xml and text/xml), /octets.png (bytes of no image format,
    application/octet-stream), /gone/N.png (a 404), /stream.png (5,000 bytes,
    no Content-Length),
    /drip.png (a byte every 50 ms), /endless.png (no Content-Length, bytes until the client
    hangs up), after an image's head (/endlessjunk.png: none; /wide/FORMAT: WIDE_HEADS');
    /stall.png: an image's head, no Content-Length, then nothing until `Site.gate` is set (10 s
    at most). /dripimage.png: an image's head, then a byte every 50 ms (10 s at most), counted in
    `Site.dripped`, until the client hangs up. /twin/N.png: image
    N // 2; /jpeg/N.png: image N as a JPEG; /changing/N.png: image N, then image N + 1 to every
    later request. A path in `Site.held` is answered once
    `Site.gate` is set; one in `Site.down`, 503; one in `Site.gone`, 404."""

    protocol_version = "HTTP/1.1"  # connections kept
    site: Site

    def setup(self) -> None:
        super().setup()
        with self.site.lock:
            self.site.connections += 1
            self.site.accepted += 1

    def finish(self) -> None:
        with self.site.lock:
            self.site.connections -= 1
        super().finish()

    def do_GET(self) -> None:
        site, path = self.site, self.path
        with site.lock:
            site.hits[path] += 1
            site.times.setdefault(path, []).append(time.monotonic())
            site.started.append(path)
            first = site.hits[path] == 1
            site.active += 1
            site.most = max(site.most, site.active)
            site.again += not first
            site.most_again = max(site.most_again, site.again)
            site.agents.add(self.headers.get("User-Agent", ""))
        try:
            if path in site.held:
                site.gate.wait(60)
            delay = site.latency * ((hash(path) % 7) / 6 if site.jitter else 1)
            time.sleep(delay)
            self._answer(path, first)
        finally:
            with site.lock:
                site.active -= 1
                site.again -= not first
                site.finished.append(path)

    def _answer(self, path: str, first: bool) -> None:
        kind, _, name = path.strip("/").partition("/")
        number = int(name.split(".")[0]) if name[:1].isdigit() else 0
        if path in self.site.down:
            return self._send(503, b"down for now")
        if path in self.site.gone:
            return self._send(404, b"gone")
        if first and kind == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if first and kind == "cut":
            body = _png(number)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
            return
        if kind == "utf8redirect":  # headers go as latin-1: these are é's two UTF-8 bytes
            where = f"/img/{number}.café.png".encode().decode("latin-1")
            return self._send(302, b"", {"Location": where})
        if kind == "idle408":
            self._send(200, _png(number))
            time.sleep(0.05)
            self.wfile.write(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")  # fmt: skip
            self.close_connection = True
            return None
        if kind == "hints":
            self.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
            self.wfile.flush()
            time.sleep(0.05)  # the final answer comes when ready
            return self._send(200, _png(number))
        if path in ("/dripheaders.png", "/continues.png"):
            drip = b"X" if path == "/dripheaders.png" else b"HTTP/1.1 100 Continue\r\n\r\n"
            self.wfile.write(b"HTTP/1.1 200 OK\r\n" if drip == b"X" else b"")
            for _ in range(40):
                self.wfile.write(drip)
                self.wfile.flush()
                time.sleep(0.05)
            self.close_connection = True
            return None
        if path == "/badredirect.png":
            return self._send(302, b"", {"Location": "http://[::1/x.png"})
        if path == "/503odd.png":
            return self._send(503, b"busy", {"Retry-After": "\xb2"})
        if path in ("/503past.png", "/503minus.png"):
            when = "Wed, 21 Oct 2015 07:28:00 GMT" if path == "/503past.png" else "-5"
            return self._send(503, b"busy", {"Retry-After": when})
        if path == "/badchunk.png":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nab\r\n")
            self.close_connection = True
            return None
        if path == "/gzipbomb.png":  # 1 MB of zeros in 1 KB, sent whatever was asked
            return self._send(200, GZIP_BOMB, {"Content-Encoding": "gzip"})
        if path in ("/brotli.png", "/gzipcut.png"):
            body = gzip.compress(_png(1))
            body, coding = (b"\x0b\x01\x80", "br") if path == "/brotli.png" else (body[:50], "gzip")
            return self._send(200, body, {"Content-Encoding": coding})
        if kind in ("gzip", "deflate"):
            body = (gzip.compress if kind == "gzip" else zlib.compress)(_png(number))
            return self._send(200, body, {"Content-Encoding": kind})
        if path == "/garbled.png":
            self.wfile.write(b"not HTTP at all\r\n\r\n")
            self.close_connection = True
            return None
        if kind == "long":
            self._send(200, _png(number))
            time.sleep(0.05)  # after the answer was read: in the connection's next answer
            self.wfile.write(b"<!-- a footer past the length -->")
            return None
        if (first and kind == "503") or path == "/always503.png":
            return self._send(503, b"busy")
        if first and kind == "429":
            return self._send(429, b"slow down", {"Retry-After": str(self.site.retry_after)})
        if path == "/429long.png":
            return self._send(429, b"come back tomorrow", {"Retry-After": "86400"})
        if kind == "redirect":
            return self._send(302, b"", {"Location": f"/img/{name}"})
        if path in ("/loop.png", "/meta.png"):
            where = "/loop.png" if path == "/loop.png" else "http://169.254.169.254/latest/"
            return self._send(302, b"", {"Location": where})
        if path in ("/tofile.png", "/tos3.png"):
            where = "file:///etc/hostname" if path == "/tofile.png" else "s3://bucket/a.png"
            return self._send(302, b"", {"Location": where})
        if path in ("/404.png", "/403.png") or kind == "gone":
            return self._send(404 if kind == "gone" else int(path[1:4]), b"no")
        if path in ("/twolengths.png", "/samelengths.png"):  # RFC 9112: the second, invalid
            body = _png(1)
            first = len(body) // 2 if path == "/twolengths.png" else len(body)
            self.send_response(200)
            self.send_header("Content-Length", str(first))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None
        if path == "/huge.png":
            self.send_response(200)
            self.send_header("Content-Length", str(10**11))
            self.end_headers()
            self.close_connection = True
            return None
        if path == "/html.png":
            page = b"\n  <!DOCTYPE html><html><body>moved</body></html>"
            return self._send(200, page, {"Content-Type": "text/html; charset=utf-8"})
        if path == "/text.png":
            return self._send(200, b"Image removed by its owner.\n", {"Content-Type": "text/plain"})
        if path in ("/svg.png", "/svgxml.png"):  # a logo: a drawing, as image/svg+xml or not
            drawing = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>'
            kind = "image/svg+xml" if path == "/svg.png" else "text/xml"
            return self._send(200, drawing, {"Content-Type": kind})
        if path == "/octets.png":
            return self._send(200, bytes(range(256)), {"Content-Type": "application/octet-stream"})
        if path in ("/stream.png", "/drip.png"):
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for _ in range(5 if path == "/stream.png" else 40):
                self.wfile.write(bytes(1000 if path == "/stream.png" else 1))
                self.wfile.flush()
                time.sleep(0 if path == "/stream.png" else 0.05)
            return None
        if path == "/stall.png":  # an image's head, no Content-Length, then nothing for 10 s
            self.send_response(200)
            self.end_headers()
            self.close_connection = True
            self.wfile.write(_png(0)[:64])
            self.wfile.flush()
            self.site.gate.wait(10)
            return None
        if path == "/dripimage.png":  # within every read timeout, never ending in time
            self.send_response(200)
            self.end_headers()
            self.close_connection = True
            with contextlib.suppress(OSError):  # until the client hangs up
                self.wfile.write(_png(0)[:64])
                for _ in range(200):
                    self.wfile.write(b"\0")
                    self.wfile.flush()
                    with self.site.lock:
                        self.site.dripped += 1
                    time.sleep(0.05)
            return None
        if path in ("/endless.png", "/endlessjunk.png") or kind in ("wide", "widelength"):
            self.send_response(200)  # no Content-Length (or a false one), and no end
            if kind == "widelength":
                self.send_header("Content-Length", str(50_000_000))
            self.end_headers()
            self.close_connection = True
            with contextlib.suppress(OSError):  # until the client hangs up
                if path == "/endless.png":  # an image's head: read on as one
                    self.wfile.write(_png(0)[:64])
                elif kind in ("wide", "widelength"):
                    self.wfile.write(WIDE_HEADS[name])
                while True:
                    self.wfile.write(bytes(1 << 16))
            return None
        if kind == "changing":  # another image the second time (a CDN's other variant)
            return self._send(200, _png(number if first else number + 1))
        if kind == "twin":  # /twin/N.png: image N // 2, the same bytes as its twin's
            return self._send(200, _png(number // 2))
        if kind == "jpeg":  # /jpeg/N.png: image N as a JPEG, a near copy of /img/N.png
            return self._send(200, cv2.imencode(".jpg", helpers.image(number))[1].tobytes())
        tags = {"noai": "noai", "otherbot": "otherbot: noai, noimageai"}
        headers = {"X-Robots-Tag": tags[kind]} if kind in tags else {}
        return self._send(200, _png(number), headers)

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@contextmanager
def serving(**options) -> Iterator[Site]:
    """A Site of these options, closed after."""
    served = Site(**options)
    try:
        yield served
    finally:
        served.close()


@pytest.fixture
def site():
    with serving() as served:
        yield served


def _pack_urls(tmp_path: Path, site: Site, paths: list[str], out: str = "out", **options):
    """Pack a URL list of these paths of the site, in this process unless options say."""
    src = _manifest(tmp_path, [site.url(path) for path in paths])
    given = {"workers": 1, "path_column": "url", "allow_private_urls": True, **options}
    return pack(src, tmp_path / out, PackOptions(**given))


def _manifest(tmp_path: Path, urls: list[str], name: str = "urls.csv") -> Path:
    rows = [{"url": url, "caption": f"photo {i}"} for i, url in enumerate(urls)]
    return helpers.write_csv(tmp_path / name, rows)


def test_each_kind_of_answer_is_packed_or_kept_with_its_reason(tmp_path, site):
    good = ["/img/0.png", "/503/1.png", "/429/2.png", "/reset/3.png", "/redirect/4.png",
            "/otherbot/5.png", "/gzip/7.png", "/deflate/8.png"]  # fmt: skip
    bad = {
        "/404.png": ("HTTP Not Found", 404, 1),
        "/403.png": ("HTTP Forbidden", 403, 1),
        "/always503.png": ("HTTP Service Unavailable", 503, 3),  # 1 + --retries 2
        "/429long.png": ("HTTP Too Many Requests", 429, 1),  # not waited for
        "/noai/6.png": ("opted out", None, 1),
        "/loop.png": ("too many redirects", None, 6),
        "/meta.png": ("refused address", None, 1),
        "/huge.png": ("over the limit of N bytes", None, 1),
        "/html.png": ("not an image", None, 1),
        "/text.png": ("not an image", None, 1),
        "/gzipbomb.png": ("not an image", None, 1),  # 1 MB of zeros, under the cap
        "/wide/jpg": ("NxN pixels is over --max-pixels N", None, 1),  # its header: no more read
    }
    src = _manifest(tmp_path, [site.url(p) for p in [*good, *bad]])
    out = tmp_path / "out"
    done = helpers.run_cli("pack", str(src), str(out), "--path-column", "url", "--workers", "1",
                           "--allow-private-urls", "--max-pixels", "1000")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "URL list rows skipped: " in done.stdout and "failures.jsonl" in done.stdout
    index = json.loads((out / "index.json").read_text())
    assert sum(s["num_records"] for s in index["splits"]["train"]["shards"]) == len(good)
    rows = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    failed = {row["url"].split(":", 2)[2].partition("/")[2]: row for row in rows}
    assert sorted(failed) == sorted(p.lstrip("/") for p in bad)
    for line, (path, (error, status, hits)) in enumerate(bad.items(), len(good) + 2):
        row = failed[path.lstrip("/")]
        assert (row["error"], row["status"], row["split"]) == (error, status, "train"), row
        assert (row["file"], row["row"]) == ("urls.csv", line), row  # the header is line 1
        assert site.hits[path] == hits, (path, site.hits)
    assert "after 3 tries" in failed["always503.png"]["reason"]
    page = "not an image: the server sent 'text/html; charset=utf-8' (a web page or a message, "
    assert failed["html.png"]["reason"] == page + "not the image)"
    assert failed["text.png"]["reason"] == (  # as the web page: not 'unknown format'
        "not an image: the server sent 'text/plain' (a web page or a message, not the image)"
    )
    assert "Retry-After 86400 s is over 60 s" in failed["429long.png"]["reason"]
    first, second = site.times["/429/2.png"]
    assert second - first >= 0.95  # Retry-After: 1 honoured
    assert index["stats"]["url_failures"] == Counter(error for error, _, _ in bad.values())
    # transient ones took one retry each, permanent ones none
    assert [site.hits[p] for p in good] == [1, 2, 2, 2, 1, 1, 1, 1]
    assert site.hits["/img/4.png"] == 1  # the redirect's target
    assert all(agent.startswith("shardpack ") for agent in site.agents), site.agents
    images = {record["caption"]: record["image"] for record in iter_examples(out)}
    assert sorted(images) == [f"photo {i}" for i in range(len(good))]
    assert (images["photo 6"], images["photo 7"]) == (_png(7), _png(8))  # gzip'ed, deflated


def test_many_requests_are_in_flight_while_a_server_takes_its_time(tmp_path):
    """100 URLs answered in 100 ms each: one worker keeps at least 8 in flight (one at a
    time, the scan's request per image and the fetch one by one, it kept 1)."""
    with serving(latency=0.1) as slow:
        result = _pack_urls(tmp_path, slow, [f"/img/{i}.png" for i in range(100)])
    assert result.num_records == 100
    assert slow.most >= 8, slow.most
    assert sum(slow.hits.values()) == 100  # one request an image: none at scan


def test_the_backoff_between_tries_waits_no_longer_than_a_retry_after_may():
    """The backoff doubled without end: --retries 20 waited 3 days before its last try of an
    always-503 URL, --retries 30 over 8 years (the pack did not end)."""
    fetcher = Fetcher(FetchPolicy(retries=40))
    busy = UrlFailed("HTTP Service Unavailable (HTTP 503)", True)
    unstarted = fetch.Deadline(fetcher.policy.deadline)  # all of it left at each try
    waits = [fetcher.retry_in(busy, tries, unstarted) for tries in range(1, 41)]
    assert 0.375 <= waits[0] <= 0.625 and waits[-1] <= fetch.MOST_WAIT_S
    assert max(waits) > fetch.MOST_WAIT_S / 2  # doubling still, up to the cap


def test_a_url_waiting_for_its_retry_holds_no_fetching_thread():
    """Two threads, two URLs asked to come back in a second first: the ten after them are
    fetched meanwhile, not after (a thread asleep through Retry-After left none to fetch)."""
    with serving(latency=0.02) as site:
        paths = ["/429/0.png", "/429/1.png", *(f"/img/{i}.png" for i in range(10))]
        policy = FetchPolicy(allow_private=True, threads=2, per_host=2)
        ahead = Prefetch(Fetcher(policy), iter(site.url(p) for p in paths), 10**6)
        try:
            assert all(ahead.read(site.url(p), 10**6) for p in paths)
        finally:
            ahead.close()
    retried = min(site.times[p][1] for p in paths[:2])
    assert max(site.times[p][0] for p in paths[2:]) < retried
    assert not [t for t in threading.enumerate() if t.name.startswith("shardpack-")]  # joined


def test_bodies_fetched_while_a_read_waits_stop_at_the_bytes_held(monkeypatch, site):
    """HELD_BYTES stopped only new URLs joining the window: with the next read's server
    stalled, every URL already in it (4,096 at the defaults) was fetched and held, each up to
    the byte cap. First tries wait for reads once the bodies held reach it."""
    size = len(_png(1))
    monkeypatch.setattr(fetch, "HELD_BYTES", 3 * size)
    site.held = frozenset({"/img/0.png"})
    paths = [f"/img/{i}.png" for i in range(30)]
    policy = FetchPolicy(allow_private=True, threads=2, per_host=2)
    ahead = Prefetch(Fetcher(policy), iter(site.url(p) for p in paths), 10**6)
    try:
        futures = [future for _, future in ahead._ahead][1:]
        for _ in range(500):  # each URL but the stalled one fetched, or waiting for a read
            if sum(f.done() for f in futures) + getattr(ahead, "_parked", 0) == len(futures):
                break
            time.sleep(0.01)
        assert ahead._held <= 5 * size, ahead._held  # the most, and a try a thread past it
        site.gate.set()
        assert [ahead.read(site.url(p), 10**6) for p in paths] == [_png(i) for i in range(30)]
    finally:
        ahead.close()
    assert [site.hits[p] for p in paths] == [1] * 30


def test_a_retry_due_goes_before_the_first_tries_still_queued(monkeypatch):
    """One thread, a 503 first and 30 URLs answered in 20 ms each behind it: the 503's retry,
    due after a 20-40 ms backoff, is the next request once due, not the 31st (it waited in the
    pool's queue behind every first try, and a read in plan order waited on it)."""
    monkeypatch.setattr(fetch, "BACKOFF_S", 0.03)
    with serving(latency=0.02) as site:
        paths = ["/503/0.png", *(f"/img/{i}.png" for i in range(1, 31))]
        policy = FetchPolicy(allow_private=True, threads=1, per_host=1)
        ahead = Prefetch(Fetcher(policy), iter(site.url(p) for p in paths), 10**6)
        try:
            assert ahead.read(site.url(paths[0]), 10**6)
        finally:
            ahead.close()
    retried = site.started.index(paths[0], 1)
    assert retried <= 10, site.started[:retried]  # 1-2 first tries end while it is due


def test_copies_behind_urls_are_confirmed_without_fetching_them_again(tmp_path):
    """Exact copies found in the shards are confirmed by the digest the worker took of the
    bytes it fetched: no URL is fetched twice (before, each copy was fetched again to confirm
    it). With --dedup exact, the pre-pass fetches each URL, and the workers read the kept ones
    from what it kept: confirming its candidates fetches none again (before, 40 more), and
    packing them none either (before, 20 more)."""
    urls = [f"/twin/{i}.png" for i in range(40)]
    with serving() as site:
        result = _pack_urls(tmp_path, site, urls)
    assert result.index.duplicates["groups"] == 20
    assert sorted(site.hits.values()) == [1] * 40
    with serving() as site:
        result = _pack_urls(tmp_path, site, urls, out="deduped", dedup="exact")
    assert result.num_records == 20 and result.index.duplicates["removed"] == 20
    assert sorted(site.hits.values()) == [1] * 40


def _images(out: Path) -> dict[str, bytes]:
    return {record["key"]: record["image"] for record in iter_examples(out)}


@pytest.mark.parametrize(("dedup", "workers"), [("exact", 2), ("near", 1)])
def test_dedup_fetches_each_url_once_and_packs_a_plain_packs_records_but_the_copies(
    tmp_path, dedup, workers
):
    """--dedup's pass keeps what it fetched (and why a fetch failed) for the workers (forked,
    or the packing process): each URL is asked once in the whole pack (before, each one kept
    was asked again by its worker, the 404 too), and the records are a plain pack's but the
    copies it left out (with near: /jpeg/9.png as well, a near copy of /img/9.png), with the
    same skip reasons. Nothing is left of what it kept."""
    paths = [*(f"/twin/{i}.png" for i in range(8)), "/img/8.png", "/img/9.png", "/jpeg/9.png",
             "/404.png"]  # fmt: skip
    with serving() as site:
        plain = _pack_urls(tmp_path, site, paths, out="plain", shards=2, workers=workers)
        site.hits.clear()
        deduped = _pack_urls(tmp_path, site, paths, out="deduped", shards=2, workers=workers,
                             dedup=dedup)  # fmt: skip
    assert sorted(site.hits.elements()) == sorted(paths), site.hits
    left_out = {s.key for s in deduped.index.skipped if "duplicate of" in s.reason}
    assert len(left_out) == 4 + (dedup == "near")
    kept = _images(tmp_path / "deduped")
    assert kept == {k: v for k, v in _images(tmp_path / "plain").items() if k not in left_out}
    assert {s for s in deduped.index.skipped if s.key not in left_out} == set(plain.index.skipped)
    assert not list((tmp_path / "deduped").glob(f"{FETCHED_PREFIX}*"))


def test_a_grow_with_dedup_fetches_each_new_url_once(tmp_path):
    """--append of a --dedup pack keys its new URLs, and its workers pack them from what that
    kept (before, /img/10.png was asked twice); /img/0.png is a copy left out, and one held
    image of its group is fetched to confirm it (docs/sources.md)."""
    given = {"path_column": "url", "allow_private_urls": True, "workers": 1, "dedup": "exact"}
    with serving() as site:
        urls = [site.url(f"/twin/{i}.png") for i in range(4)]
        src, out = _manifest(tmp_path, urls), tmp_path / "out"
        pack(src, out, PackOptions(**given))
        site.hits.clear()
        _manifest(tmp_path, [*urls, site.url("/img/10.png"), site.url("/img/0.png")])
        grown = pack(src, out, PackOptions(**given, grow="append"))
    assert grown.num_records == 3
    assert site.hits["/img/10.png"] == site.hits["/img/0.png"] == 1, site.hits
    assert not list(out.glob(f"{FETCHED_PREFIX}*"))


def test_the_dedup_pass_threads_fetch_every_url_whatever_chunk_ends_first(tmp_path, monkeypatch):
    """The --dedup pass reads its chunks on threads that share one Fetcher: the first reading
    to end closed it, cutting the other thread's requests ("stopped: the fetching was
    closed"), and those URLs were keyed as unreadable (a copy among them unfound), now
    skipped; the last reading closes it."""
    monkeypatch.setattr(duplicates, "HASH_CHUNK", 4)
    paths = [f"/img/{i}.png" for i in range(40)]
    with serving(latency=0.01, jitter=True) as site:
        result = _pack_urls(tmp_path, site, paths, workers=2, shards=1, dedup="exact")
    assert result.num_records == 40, result.index.skipped[:3]
    assert sorted(site.hits.values()) == [1] * 40


def test_a_server_answering_another_image_the_second_time_changes_nothing_packed(tmp_path):
    """/changing/0.png is image 0 when --dedup exact keys it, a copy of /img/0.png, which it
    keeps (its key sorts first); then image 1. What is packed is the image keyed (before,
    its worker fetched it again and packed image 1: image 0 was packed nowhere)."""
    with serving() as site:
        result = _pack_urls(tmp_path, site, ["/changing/0.png", "/img/0.png"], dedup="exact")
    assert result.index.skipped[0].key == site.url("/img/0.png")
    assert result.index.skipped[0].reason.startswith("duplicate of ")
    assert _images(tmp_path / "out") == {site.url("/changing/0.png"): _png(0)}
    assert site.hits["/changing/0.png"] == 1


def test_records_keep_the_plans_order_whatever_arrives_first(tmp_path):
    """Answers in 0-20 ms by path: 16 in flight in each of 2 workers get them back in another
    order than one at a time in-process does, and the shards are the same bytes."""
    paths = [f"/img/{i}.png" for i in range(16)]
    with serving(latency=0.02, jitter=True) as jittery:
        for threads, workers in ((1, 1), (16, 2)):  # in-process, then forked workers
            result = _pack_urls(tmp_path, jittery, paths, f"out{threads}", workers=workers,
                                url_threads=threads, shards=2)  # fmt: skip
            assert result.index.stats.workers == workers
    assert jittery.most > 1 and jittery.finished != jittery.started  # answered out of order
    one, many = helpers.shard_files(tmp_path / "out1"), helpers.shard_files(tmp_path / "out16")
    assert len(one) == 2 and one == many


def test_the_scan_sends_no_request_and_refuses_other_schemes_by_name(tmp_path, site):
    urls = [site.url("/img/0.png"), "ftp://example.com/a.png", "sftp://10.0.0.1/a.png"]
    dataset = scan(_manifest(tmp_path, urls), PackOptions(path_column="url"))
    assert sum(site.hits.values()) == 0
    assert [item.key for item in dataset.splits["train"]] == [urls[0]]
    reasons = dict(dataset.skipped)
    assert "refused scheme: ftp://" in reasons[urls[1]]
    assert "refused scheme: sftp://" in reasons[urls[2]]


def test_loopback_needs_the_flag_and_link_local_is_never_fetched(site):
    with pytest.raises(UrlFailed, match=r"refused address: 127\.0\.0\.1 is private"):
        Fetcher(FetchPolicy()).get(site.url("/img/0.png"), 1000)
    assert sum(site.hits.values()) == 0
    allowed = Fetcher(FetchPolicy(allow_private=True))
    assert allowed.get(site.url("/img/0.png"), 10_000) == _png(0)
    for address in ("169.254.169.254", "fe80::1%eth0", "fd00:ec2::254", "::ffff:169.254.1.1"):
        assert "link-local or a cloud metadata" in refusal(address, allow_private=True)
    # the metadata address carried in IPv6: 6to4, NAT64's two prefixes, IPv4-compatible
    for address in ("2002:a9fe:a9fe::1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::a9fe:a9fe",
                    "::169.254.169.254"):  # fmt: skip
        assert refusal(address, allow_private=True) == (
            "refused address: 169.254.169.254 is link-local or a cloud metadata address"
        )
    for address in ("64:ff9b::7f00:1", "2002:a00:1::1", "::10.0.0.1"):  # loopback, private
        assert "is private" in refusal(address, allow_private=False)
    assert refusal("64:ff9b::808:808", allow_private=False) is None  # 8.8.8.8 through NAT64
    assert refusal("::1", allow_private=True) is None
    with pytest.raises(UrlFailed, match=r"^DNS failure: no-such-host\.invalid: [^()]*$"):
        Fetcher(FetchPolicy()).get("http://no-such-host.invalid/a.png", 1000)  # not retried
    assert refusal("8.8.8.8", allow_private=False) is None
    assert "private" in refusal("10.1.2.3", allow_private=False)


def test_a_body_over_the_cap_or_dripping_past_the_deadline_is_cut_off(site):
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=0, total_timeout=0.3))
    with pytest.raises(FileTooLarge, match="over the limit of 1,000 bytes"):
        fetcher.get(site.url("/stream.png"), 1000)
    start = time.monotonic()
    with pytest.raises(UrlFailed, match="timed out"):
        fetcher.get(site.url("/drip.png"), 1000)
    assert time.monotonic() - start < 1.5


def test_a_url_dripping_its_image_is_skipped_at_its_deadline_with_the_reason(tmp_path, site):
    """A server sending an image's head, then a byte within every read timeout: each answer ran
    to total_timeout (120 s) and was tried 1 + --retries times, ~6 minutes a URL. Its deadline
    (--url-deadline) bounds the URL, tries together: it is skipped, `timed out` with its reason
    in failures.jsonl, asked once, the drip cut as the deadline passed (a few bytes, not 200)."""
    src = _manifest(tmp_path, [site.url("/img/0.png"), site.url("/dripimage.png")])
    done = helpers.run_cli("pack", str(src), str(tmp_path / "out"), "--path-column", "url",
                           "--workers", "1", "--allow-private-urls",
                           "--url-deadline", "0.5")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "out/failures.jsonl").read_text().splitlines()]
    assert [(r["url"], r["error"], r["status"], r["reason"]) for r in rows] == [
        (site.url("/dripimage.png"), "timed out", None,
         "timed out: not fetched within its deadline of 0.5 s"),
    ]  # fmt: skip
    assert site.hits["/dripimage.png"] == 1 and site.dripped < 100, (site.hits, site.dripped)
    assert is_transient(rows[0]["reason"])  # --update asks it again


# In namespaces of its own (user, mount, network: `unshare -rmn`), run as `python LAUNCHER
# QUERIES ARGS...`: loopback up, a DNS server on 127.0.0.1:53 that hears every query (a line in
# QUERIES) and answers none, then `shardpack ARGS` in this very process (the pid signalled).
_SLOW_DNS = """
import fcntl, runpy, socket, struct, sys, threading
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH", fcntl.ioctl(probe, 0x8913, struct.pack("16sH", b"lo", 0)))[1]
fcntl.ioctl(probe, 0x8914, struct.pack("16sH", b"lo", flags | 1))  # SIOCSIFFLAGS: IFF_UP
server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
server.bind(("127.0.0.1", 53))
def hear(log=sys.argv[1]):
    while True:
        server.recvfrom(4096)
        with open(log, "a") as f:
            f.write("query\\n")
threading.Thread(target=hear, daemon=True).start()
sys.argv = ["shardpack", *sys.argv[2:]]
runpy.run_module("shardpack", run_name="__main__")
"""


def test_ctrl_c_while_a_dns_look_up_waits_stops_a_single_worker_run_at_once(tmp_path):
    """--workers 1, a resolver that never answers (its own 30 s timeout): a Ctrl-C while the
    host is looked up stopped the run only once the look-up gave up (exit waited for the pool's
    threads, each in getaddrinfo). A look-up runs on a thread of its own now, waited for until
    the fetching is closed: the run stops at once (130, one line)."""
    import shutil
    import subprocess

    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-rmn", "true"]).returncode != 0:
        pytest.skip("needs unshare -rmn (user, mount and network namespaces)")
    (tmp_path / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:30 attempts:1\n")
    (tmp_path / "launch.py").write_text(_SLOW_DNS)
    queries = tmp_path / "queries"
    queries.touch()
    src = _manifest(tmp_path, [f"http://slow-dns.test/{i}.png" for i in range(3)])
    bind = 'mount --bind "$0" /etc/resolv.conf && exec "$@"'
    run = subprocess.Popen(
        [unshare, "-rmn", "sh", "-c", bind, str(tmp_path / "resolv.conf"), sys.executable,
         str(tmp_path / "launch.py"), str(queries), "pack", str(src), str(tmp_path / "out"),
         "--path-column", "url", "--workers", "1", "--no-progress"],
        stderr=subprocess.PIPE, text=True, preexec_fn=helpers.die_with_parent,
    )  # fmt: skip
    try:
        helpers.wait_for(lambda: queries.read_text() or run.poll() is not None, 60)
        assert run.poll() is None, run.communicate()[1]
        run.send_signal(signal.SIGINT)
        stderr = run.communicate(timeout=15)[1]  # (the resolver's own timeout: 30 s)
    finally:
        run.kill()
        run.wait()
    assert run.returncode == 130, stderr
    assert stderr.strip().splitlines() == [
        "interrupted: no index written; rerun with --resume to continue"
    ]


def test_a_retry_its_deadline_leaves_no_time_for_is_not_made(site):
    """An answer cut at total_timeout with less of the URL's deadline left than the backoff:
    the URL fails then, saying so, asked once (1 + retries times without a deadline)."""
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=2, total_timeout=0.3, deadline=0.5))
    said = r"^timed out: the answer took over 0\.3 s: no time for another try within its "
    with pytest.raises(UrlFailed, match=said + r"deadline of 0\.5 s$"):
        fetcher.get(site.url("/dripimage.png"), 10_000)
    assert site.hits["/dripimage.png"] == 1, site.hits


def test_endless_bodies_read_at_once_hold_one_limit_not_one_a_thread(site, monkeypatch):
    """Each of 128 threads read a body up to the limit (1.5 GB at the default --max-pixels):
    endless bodies from a hostile list held 128 x 1.5 GB. Past LARGE_BODY bytes, LARGE_TURNS
    bodies at a time read on."""
    monkeypatch.setattr(fetch, "LARGE_BODY", 1 << 20)
    monkeypatch.setattr(fetch, "LARGE_TURNS", 1)
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=0, threads=4, per_host=4))
    limit, failed = 8 << 20, []

    def get() -> None:
        try:
            fetcher.get(site.url("/endless.png"), limit)
        except FileTooLarge as e:
            failed.append(str(e))

    tracemalloc.start()
    try:
        threads = [threading.Thread(target=get) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert failed == [f"over the limit of {limit:,} bytes"] * 4
    assert peak < 3 * (1 << 20) + limit + (2 << 20), peak  # it was 4 x limit


def test_a_body_of_no_image_format_is_refused_by_its_head_not_read_to_the_cap(site):
    """An endless body of no image (zeros; a page) was read to the byte cap (1.5 GB at the
    default --max-pixels, for one URL) and then refused as over it, 'raise --max-pixels if it
    is an image'. Its first KiB, all that is read of it to say so, says it is none."""
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=0))
    tracemalloc.start()
    try:
        with pytest.raises(UrlFailed, match=r"^not an image: the server sent no Content-Type "
                           r"\(bytes of no image format shardpack reads\)$"):  # fmt: skip
            fetcher.get(site.url("/endlessjunk.png"), 64 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak  # a chunk or two, not the 64 MB cap
    assert fetcher.get(site.url("/img/1.png"), 64 << 20) == _png(1)  # an image is read whole


@pytest.mark.parametrize("kind", ["wide", "widelength"])
@pytest.mark.parametrize("fmt", sorted(WIDE_HEADS))
def test_an_endless_body_of_an_image_over_max_pixels_is_refused_by_its_header(site, kind, fmt):
    """A body that began with a real JPEG, PNG or WebP header declaring 20000x20000 pixels and
    streamed on without end (no Content-Length, or a false one) was read to the byte cap, then
    refused as over it, 'raise --max-pixels if it is an image'. Its header says it is over
    --max-pixels: refused there, a chunk or two read. Under --max-pixels it is read on, to the
    cap, as before."""
    url = site.url(f"/{kind}/{fmt}")
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=0, max_pixels=10**6))
    tracemalloc.start()
    try:
        with pytest.raises(
            UrlFailed, match=rf"^{WIDE}x{WIDE} pixels is over --max-pixels 1000000$"
        ):
            fetcher.get(url, 48 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak  # a chunk or two, not the 48 MB cap
    allowed = Fetcher(FetchPolicy(allow_private=True, retries=0, max_pixels=WIDE * WIDE))
    with pytest.raises(FileTooLarge, match="over the limit of 1,048,576 bytes"):  # (or its length)
        allowed.get(url, 1 << 20)
    assert fetcher.get(site.url("/jpeg/1.png"), 48 << 20)[:3] == b"\xff\xd8\xff"  # (24x32)


def test_a_body_with_no_length_cut_by_a_stop_is_no_body(site):
    """Ctrl-C closes the Fetcher, which cuts the sockets in flight: a body with no
    Content-Length then seemed to end there, and was returned as the whole image (joined:
    four large bodies of a hostile list held up the exit by seconds, copying GBs)."""
    fetcher, got = Fetcher(FetchPolicy(allow_private=True, retries=0)), []

    def get() -> None:
        try:
            got.append(fetcher.get(site.url("/stall.png"), 10_000))
        except UrlFailed as e:
            got.append(str(e))

    thread = threading.Thread(target=get)
    thread.start()
    try:
        helpers.wait_for(lambda: _reading_body(thread), 10)
        fetcher.close()
        thread.join(10)
    finally:
        site.gate.set()
    assert got == ["stopped: the fetching was closed"], got


def _reading_body(thread: threading.Thread) -> bool:
    """Whether the thread is reading an answer's body (past its status line and headers)."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None and frame.f_code.co_name != "_decoded":
        frame = frame.f_back
    return frame is not None


def test_a_body_cut_short_of_its_content_length_is_a_cut_connection_and_retried(site):
    """A server that closes before the bytes its Content-Length states: the half body was
    taken whole (a truncated PNG, a permanent skip that --update never asks again)."""
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=1))
    assert fetcher.get(site.url("/cut/1.png"), 10_000) == _png(1)
    assert site.hits["/cut/1.png"] == 2
    with pytest.raises(UrlFailed, match=r"^connection cut: answer incomplete$") as cut:
        Fetcher(FetchPolicy(allow_private=True, retries=0)).get(site.url("/cut/2.png"), 10_000)
    assert is_transient(str(cut.value))  # pack --update asks it again


def test_bytes_past_an_answers_length_fail_no_other_url_on_its_connection(site):
    """A server that sends more than its Content-Length leaves them in the kept connection:
    the next URL's answer began with them, a 'bad answer: BadStatusLine' for an image that
    was there. A kept connection that gives no status line is tried once on a fresh one, as one
    the server closed is."""
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=0, threads=1, per_host=1))
    assert fetcher.get(site.url("/long/1.png"), 10_000) == _png(1)
    assert fetcher.get(site.url("/img/2.png"), 10_000) == _png(2)
    with pytest.raises(UrlFailed, match="bad answer: BadStatusLine"):
        fetcher.get(site.url("/garbled.png"), 10_000)  # a fresh connection's: the server's own


def test_a_retry_after_of_digits_past_ascii_is_no_number_and_no_traceback(site):
    """'²' is a digit to str.isdigit, not to float(): the ValueError stopped the whole pack
    with a traceback. A Retry-After that is no number is not waited for."""
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=1))
    with pytest.raises(UrlFailed, match=r"^HTTP Service Unavailable \(HTTP 503, after 2 tries\)$"):
        fetcher.get(site.url("/503odd.png"), 10_000)


def test_bad_framing_a_past_retry_after_and_a_gzip_bomb_fail_their_url_alone(site, monkeypatch):
    """A hostile server's framing and asks: each a failure of its URL, tried as often as
    --retries says (a Retry-After in the past or below 0 is the backoff's), or a gzip bomb's
    bytes inflated only as far as the byte cap (then what it inflates to: not an image)."""
    monkeypatch.setattr(fetch, "BACKOFF_S", 0.01)
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=1))
    with pytest.raises(UrlFailed, match=r"^connection cut: answer incomplete \(after 2 tries\)$"):
        fetcher.get(site.url("/badchunk.png"), 10_000)
    for path in ("/503past.png", "/503minus.png"):
        with pytest.raises(UrlFailed, match=r"^HTTP Service Unavailable \(HTTP 503, after 2 "):
            fetcher.get(site.url(path), 10_000)
        assert site.hits[path] == 2
    with pytest.raises(FileTooLarge, match=r"^over the limit of 10,000 bytes \(gzip\)$"):
        fetcher.get(site.url("/gzipbomb.png"), 10_000)
    with pytest.raises(
        UrlFailed,
        match=r"^not an image: the server sent no Content-Type "
        r"\(bytes of no image format shardpack reads\)$",
    ):
        fetcher.get(site.url("/gzipbomb.png"), 2 << 20)  # inflated whole: 1 MB of zeros
    with pytest.raises(UrlFailed, match=r"^not an image: its body came in Content-Encoding 'br'"):
        fetcher.get(site.url("/brotli.png"), 10_000)
    with pytest.raises(UrlFailed, match=r"^not an image: its body's gzip stream ends early$"):
        fetcher.get(site.url("/gzipcut.png"), 10_000)
    assert fetcher.get(site.url("/img/1.png"), 10_000) == _png(1)  # the run goes on


def test_a_200_that_is_no_image_names_the_content_type_the_server_sent(site):
    """A page of plain text, or bytes of no image format, were fetched and then skipped as
    'not an image (unknown format)', saying nothing of what the server sent; markup said it.
    Every such body now says the Content-Type, and is not retried. An SVG drawing is an image,
    of a kind not packed: it was called 'a web page or a message, not the image'."""
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=2))
    drawing = "(an SVG drawing: shardpack packs images of pixels, not vector ones)"
    said = {
        "/svg.png": f"'image/svg+xml' {drawing}",
        "/svgxml.png": f"'text/xml' {drawing}",
        "/text.png": "'text/plain' (a web page or a message, not the image)",
        "/octets.png": "'application/octet-stream' (bytes of no image format shardpack reads)",
        "/html.png": "'text/html; charset=utf-8' (a web page or a message, not the image)",
    }
    for path, what in said.items():
        with pytest.raises(UrlFailed) as failed:
            fetcher.get(site.url(path), 10_000)
        assert str(failed.value) == f"not an image: the server sent {what}"
        assert not failed.value.transient and site.hits[path] == 1
    assert fetcher.get(site.url("/img/3.png"), 10_000) == _png(3)


def test_a_redirect_to_a_url_that_does_not_parse_is_a_failure_not_a_traceback(site):
    """urljoin raised the ValueError of an unclosed IPv6 bracket out of the worker."""
    fetcher = Fetcher(FetchPolicy(allow_private=True))
    with pytest.raises(UrlFailed, match=r"^bad redirect: Invalid IPv6 URL$"):
        fetcher.get(site.url("/badredirect.png"), 10_000)
    assert site.hits["/badredirect.png"] == 1  # permanent: not asked again


def test_a_redirect_to_a_file_or_an_object_store_is_refused_and_nothing_read(site):
    """A stranger's server sending a fetch on to this machine's files or an object store: the
    scheme is refused before anything is opened (loopback and private addresses reached by a
    redirect are refused on the address connected: /meta.png in the test above)."""
    fetcher = Fetcher(FetchPolicy(allow_private=True))
    for path, where in (
        ("/tofile.png", "file:///etc/hostname"),
        ("/tos3.png", "s3://bucket/a.png"),
    ):
        scheme = where.partition(":")[0]
        said = rf"^refused scheme: {scheme}:// is not http\(s\) \(redirected to {where}\)$"
        with pytest.raises(UrlFailed, match=said):
            fetcher.get(site.url(path), 10_000)
        assert site.hits[path] == 1  # permanent: not asked again


def test_a_failure_past_a_redirect_names_the_url_it_was_sent_to(site):
    """A listed URL that redirects to one failing said only `connection refused` or `HTTP Not
    Found (HTTP 404)`, and the URL failures.jsonl lists answered (a 302) when the user tried
    it: the reason names where the redirect went, its kind and status unchanged; a failure
    without a redirect reads as before."""
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=1))
    site.gone, site.down = {"/img/5.png"}, {"/img/6.png"}
    target = site.url("/img/5.png")
    with pytest.raises(UrlFailed) as failed:
        fetcher.get(site.url("/redirect/5.png"), 10_000)
    assert str(failed.value) == f"HTTP Not Found (HTTP 404, redirected to {target})"
    assert status_of(str(failed.value)) == 404 and not is_transient(str(failed.value))
    with pytest.raises(UrlFailed) as failed:  # retried as ever, and counted so
        fetcher.get(site.url("/redirect/6.png"), 10_000)
    target = site.url("/img/6.png")
    assert str(failed.value) == (f"HTTP Service Unavailable (HTTP 503, redirected to {target}, "
                                 "after 2 tries)")  # fmt: skip
    assert site.hits["/redirect/6.png"] == site.hits["/img/6.png"] == 2
    with pytest.raises(UrlFailed, match=r"^HTTP Not Found \(HTTP 404\)$"):
        fetcher.get(site.url("/img/5.png"), 10_000)


def test_a_host_holding_a_space_or_a_control_character_is_a_bad_url(site):
    """http.client refuses such a host as it makes the connection: its InvalidURL left the
    worker as a traceback and stopped the pack."""
    fetcher = Fetcher(FetchPolicy(allow_private=True))
    for url in ("http://exa mple.invalid/a.png", "http://a\x01b.invalid/a.png"):
        with pytest.raises(UrlFailed, match=r"^bad URL: the host '.*' holds a space or a "):
            fetcher.get(url, 10_000)


def test_an_interim_answer_is_skipped_and_no_url_gets_another_ones_image(site):
    """A 103 Early Hints before the answer was taken as the answer (a failure), and the answer
    that followed it was left in the kept connection: the next URL on it got this one's image,
    and each after it the one before's (labels and captions off by one from the pixels)."""
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=0, threads=1, per_host=1))
    assert fetcher.get(site.url("/hints/1.png"), 10_000) == _png(1)
    assert fetcher.get(site.url("/img/2.png"), 10_000) == _png(2)
    assert site.connections == 1  # the connection was kept


def test_a_kept_connection_the_server_answered_unasked_is_not_reused(site):
    """A server timing out an idle kept connection may say so (408) before it closes it: the
    next URL sent on it took that 408 as its own answer, a permanent failure."""
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=0, threads=1, per_host=1))
    assert fetcher.get(site.url("/idle408/1.png"), 10_000) == _png(1)
    while "/idle408/1.png" not in site.finished:  # its 408 sent
        time.sleep(0.01)
    assert fetcher.get(site.url("/img/2.png"), 10_000) == _png(2)


def test_a_url_of_characters_past_ascii_is_sent_percent_encoded_as_a_browser_does(site):
    """Web lists (LAION's) hold URLs as written on the page, with accents and spaces: each
    such character goes as its UTF-8 bytes, %-escaped (a raw é was 'bad answer:
    UnicodeEncodeError', a control character 'bad answer: InvalidURL'); escapes already there
    are kept."""
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=0))
    assert fetcher.get(site.url("/img/8.café.png?q=crème"), 10_000) == _png(8)
    assert fetcher.get(site.url("/img/9.a%20b\x01.png"), 10_000) == _png(9)
    assert site.hits["/img/8.caf%C3%A9.png?q=cr%C3%A8me"] == 1
    # a redirect's Location in UTF-8 bytes, as a browser reads it (http.client reads latin-1)
    assert fetcher.get(site.url("/utf8redirect/8.png"), 10_000) == _png(8)
    assert site.hits["/img/8.caf%C3%A9.png"] == 1
    assert site.hits["/img/9.a%20b%01.png"] == 1


def test_a_timeout_past_what_a_socket_takes_is_refused_in_one_line():
    """--storage-option read_timeout=1e400 (infinity) or 1e300 passed, and each socket's
    settimeout raised an OverflowError out of the worker: a traceback."""
    for key in ("read_timeout", "connect_timeout", "total_timeout"):
        for value in (1e400, 1e300, 86_401):
            with pytest.raises(StorageError, match=rf"^--storage-option {key}=.*at most 86400"):
                FetchPolicy.of(PackOptions(), {key: value})
    assert FetchPolicy.of(PackOptions(), {"read_timeout": 86_400}).read_timeout == 86_400


def test_a_timeout_spelled_as_img2dataset_spells_it_is_warned_of_as_pack_starts(tmp_path, site):
    """--storage-option timeout=1 (img2dataset's --timeout) or read_timout=1 set no fetch's
    timeout and pack said nothing: the server's stall was waited for at the default 30 s, the
    user's 1 s silently unused. Warned of now, naming the key to pass, before any fetch."""
    src = _manifest(tmp_path, [site.url("/img/0.png")])
    given = ("--storage-option", "timeout=1", "--storage-option", "read_timout=2",
             "--storage-option", "read_timeout=3", "--storage-option", "anon=true",
             "--path-column", "url", "--allow-private-urls", "--workers", "1")  # fmt: skip
    done = helpers.run_cli("pack", str(src), str(tmp_path / "out"), "--no-progress", *given)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "sets no image URL's timeout" in line]
    assert len(warned) == 2, done.stderr  # neither read_timeout itself nor anon (s3fs's)
    assert warned[0].startswith("warning: --storage-option timeout=1 ") and warned[0].endswith(
        "for image URLs, pass read_timeout=1")  # fmt: skip
    assert warned[1].endswith("pass read_timeout=2"), warned


def test_an_answer_dripping_its_status_or_headers_is_cut_off_at_the_total_timeout(site):
    """total_timeout bounded the body only: a server sending a header's byte, or a 100
    Continue, every 50 ms held the fetch for as long as it went on (forever, for a hostile
    one: the pack never ended), each read within read_timeout."""
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=0, total_timeout=0.3))
    for path in ("/dripheaders.png", "/continues.png"):
        with pytest.raises(UrlFailed, match=r"^timed out: the answer took over 0\.3 s$"):
            fetcher.get(site.url(path), 10_000)


def test_opt_out_headers_are_read_as_img2dataset_reads_them(site):
    assert opted_out(["noindex, nofollow"]) == "noindex"
    assert opted_out(["shardpack: noimageai"]) == "noimageai"
    assert opted_out(["otherbot: noai", "nofollow"]) is None
    assert opted_out(["noarchive, unavailable_after: 25 Jun 2010"]) is None
    ignoring = Fetcher(FetchPolicy(allow_private=True, opt_out=False))
    assert ignoring.get(site.url("/noai/1.png"), 10_000) == _png(1)
    assert status_of("HTTP Not Found (HTTP 404)") == 404 and status_of("timed out") is None


def test_a_tsv_lists_captions_that_start_with_a_quote_are_read_as_written(tmp_path, site):
    """CC3M's and CC12M's TSVs are not CSV-quoted: a caption `"Hello" world` was read as
    `Hello world` (as pandas and pyarrow, img2dataset's readers, read it), and one whose quote
    never closes (`"A cat`) stopped the run, a quote never closed. Each is its line's text
    now; a quoted cell as a CSV writer writes it (say "hi" with its quotes doubled, a newline
    inside) is read as CSV quotes it, and a CSV's quoting is as it was."""
    urls = [site.url(f"/img/{i}.png") for i in range(5)]
    captions = ['"Hello" world', '"say ""hi"""', '"two\nlines"', '"A cat', "plain"]
    rows = [f"{caption}\t{url}" for caption, url in zip(captions, urls, strict=True)]
    (tmp_path / "cc3m.tsv").write_text("\n".join(["caption\turl", *rows]) + "\n")
    done = helpers.run_cli("pack", str(tmp_path / "cc3m.tsv"), str(tmp_path / "out"),
                           "--path-column", "url", "--allow-private-urls", "--no-shuffle",
                           "--workers", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [r["caption"] for r in iter_examples(tmp_path / "out")] == [
        '"Hello" world', 'say "hi"', "two\nlines", '"A cat', "plain",
    ]  # fmt: skip
    (tmp_path / "list.csv").write_text(f'caption,url\n"Hello" world,{urls[0]}\n')
    done = helpers.run_cli("pack", str(tmp_path / "list.csv"), str(tmp_path / "csv"),
                           "--path-column", "url", "--allow-private-urls",
                           "--workers", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [r["caption"] for r in iter_examples(tmp_path / "csv")] == ["Hello world"]


def test_a_bad_row_of_a_url_list_is_a_failure_at_its_own_line(tmp_path, site):
    """A URL listed twice is a bad row at the second line: failures.jsonl named the first
    line (whose URL was packed, or failed for its own reason) and counted it as the kind
    'urls.csv line N'."""
    result = _pack_urls(tmp_path, site, ["/img/0.png", "/gone/1.png", "/img/0.png", "/gone/1.png"])
    rows = [json.loads(line) for line in (tmp_path / "out/failures.jsonl").read_text().splitlines()]
    assert [(row["url"][-10:], row["file"], row["row"], row["error"]) for row in rows] == [
        ("gone/1.png", "urls.csv", 3, "HTTP Not Found"),
        ("/img/0.png", "urls.csv", 4, "bad row"),
        ("gone/1.png", "urls.csv", 5, "bad row"),
    ]
    assert rows[1]["reason"] == "urls.csv line 4: the same image as line 2"
    assert result.index.stats.url_failures == {"bad row": 2, "HTTP Not Found": 1}


def test_every_bad_row_of_a_url_list_is_in_failures_whatever_it_names(tmp_path, site):
    """A row of a URL list naming no http(s) URL (none, ftp://, file://, a line of the wrong
    width) was skipped and listed in index.json, but left out of failures.jsonl, the file a
    person holds the list against (img2dataset gives every input row a status): it is there
    now at its line, `url` the image as listed or null. A list of local files keeps none."""
    gone = site.url("/gone/2.png")
    lines = ["url,caption", f"{site.url('/img/0.png')},ok", ",no image",
             "ftp://example.com/a.png,ftp", "file:///etc/hostname,file",
             f"{site.url('/img/1.png')},too,many", f"{gone},gone"]  # fmt: skip
    src = tmp_path / "urls.csv"
    src.write_text("\n".join(lines) + "\n")
    options = PackOptions(workers=1, path_column="url", allow_private_urls=True)
    result = pack(src, tmp_path / "out", options)
    rows = [json.loads(line) for line in (tmp_path / "out/failures.jsonl").read_text().splitlines()]
    assert [(row["url"], row["file"], row["row"], row["error"]) for row in rows] == [
        (None, "urls.csv", 3, "bad row"),
        ("ftp://example.com/a.png", "urls.csv", 4, "bad row"),
        ("file:///etc/hostname", "urls.csv", 5, "bad row"),
        (None, "urls.csv", 6, "bad row"),
        (gone, "urls.csv", 7, "HTTP Not Found"),
    ]
    assert rows[0]["reason"] == "urls.csv line 3: no image path in column 'url'"
    assert rows[3]["reason"] == "urls.csv line 6: has 3 cells, the header has 2"
    assert len(rows) == result.index.num_skipped
    assert result.index.stats.url_failures == {"bad row": 4, "HTTP Not Found": 1}
    # the summary counts what failures.jsonl holds: rows, two of which name no URL (it said
    # "image URLs skipped")
    done = helpers.run_cli("pack", str(src), str(tmp_path / "said"), "--path-column", "url",
                           "--workers", "1", "--allow-private-urls")  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = f"\nURL list rows skipped: bad row 4, HTTP Not Found 1 (each in {tmp_path}/said/"
    assert said in done.stdout, done.stdout
    (tmp_path / "a.png").write_bytes(_png(0))
    local = tmp_path / "local.csv"
    local.write_text("path,caption\na.png,ok\nmissing.png,gone\nftp://example.com/a.png,x\n")
    result = pack(local, tmp_path / "local", PackOptions(workers=1))
    assert result.index.num_skipped == 2 and not (tmp_path / "local/failures.jsonl").exists()


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_data_url_or_a_nul_in_a_url_list_is_a_bad_row_saying_what_it_is(tmp_path, site, streamed):
    """A data: URL in a URL list was told to list local and object-store images elsewhere,
    and a URL holding a NUL was "not a usable file name": each says what it is now, and a
    streamed list (a folder, no global shuffle) whose skips are data: URLs still keeps them in
    failures.jsonl. Stopped at, the data: URL's fix is said once."""
    inline = "data:image/png;base64," + "iVBORw0KGgo" * 20
    rows = [{"url": site.url("/img/0.png")}, {"url": inline}]
    if not streamed:
        rows.append({"url": site.url("/img/1\0.png")})
    (tmp_path / "lists").mkdir()
    src = helpers.write_jsonl(tmp_path / "lists" / "urls.jsonl", rows)
    given = {"workers": 1, "path_column": "url", "allow_private_urls": True}
    src = src.parent if streamed else src
    pack(src, tmp_path / "out", PackOptions(**given, shuffle=not streamed))
    said = [json.loads(line) for line in (tmp_path / "out/failures.jsonl").read_text().splitlines()]
    assert [(row["url"], row["row"], row["error"]) for row in said][:1] == [(inline, 2, "bad row")]
    assert said[0]["reason"] == (
        f"urls.jsonl line 2: image {inline[:37]}...: a data: URL, which holds its image inline, "
        "but shardpack packs images by their address; decode it to a file and list the file in "
        "a manifest of its own"
    )
    if not streamed:
        assert said[1]["reason"] == ("urls.jsonl line 3: the image path in column 'url' is not a "
                                     "usable URL (it holds a NUL)")  # fmt: skip
        return
    with pytest.raises(ShardpackError) as stopped:
        pack(src, tmp_path / "fail", PackOptions(**given, shuffle=False, on_error="fail"))
    # a streamed list's rows are read by the workers, which say where the list is
    ending = f"a manifest of its own (in {src}), or pass on_error='skip' to leave it out"
    assert str(stopped.value).endswith(ending), stopped.value


def test_a_proxy_in_the_environment_is_said_to_be_unused_where_urls_were_unreached(
    tmp_path, site, monkeypatch
):
    """HTTPS_PROXY set (a cluster that reaches the web through one): every URL failed as a
    refused connection or a DNS failure, and nothing said that the proxy is not used. A pack
    with such a failure now says it (a 404 is no sign of it), and so does the error of a list
    of which nothing was packed; without the variable, neither does."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{closed.getsockname()[1]}/a.png"
    options = {"retries": 0}
    for name in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy",
                 "ALL_PROXY"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    said = "HTTPS_PROXY is set, but image URLs are fetched directly, never through a proxy"
    packed = _pack_urls(tmp_path, site, ["/img/0.png", "/gone/1.png"], "gone", **options)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert not [note for note in packed.notes if said in note]
    packed = _pack_urls(tmp_path, site, ["/img/0.png", "/gone/1.png"], "gone2", **options)
    assert not [note for note in packed.notes if said in note]  # a 404: the web was reached
    src = _manifest(tmp_path, [site.url("/img/0.png"), refused], "refused.csv")
    given = PackOptions(workers=1, path_column="url", allow_private_urls=True, retries=0)
    assert [note for note in pack(src, tmp_path / "refused", given).notes if said in note]
    alone = _manifest(tmp_path, [refused], "alone.csv")
    with pytest.raises(SourceError, match=f"connection refused.*; fix or remove them; {said}"):
        pack(alone, tmp_path / "alone", given)
    monkeypatch.delenv("HTTPS_PROXY")
    with pytest.raises(SourceError) as caught:
        pack(alone, tmp_path / "alone", given)
    assert "fix or remove them" in str(caught.value) and said not in str(caught.value)


def test_a_list_of_which_nothing_was_packed_names_its_first_failure_in_its_order(tmp_path, site):
    """The first failure named is the list's first (as failures.jsonl lists them), not the
    first URL in text order: a person reads the list from its top."""
    with pytest.raises(SourceError) as refused:
        _pack_urls(tmp_path, site, ["/gone/9.png", "/gone/1.png", "/404.png"])
    assert "(the first, http://127.0.0.1:" in str(refused.value)
    assert "/gone/9.png: HTTP Not Found" in str(refused.value), refused.value


def test_a_folder_or_a_pattern_of_url_lists_is_one_manifest(tmp_path, site):
    """A folder of CSV files (img2dataset's --url_list folder) was refused as class folders
    without classes; each file is now part of one manifest, and so are the files a pattern
    names. An image in two files is refused in the second, as one listed twice in a file."""
    lists = tmp_path / "lists"
    lists.mkdir()
    _manifest(lists, [site.url(f"/img/{i}.png") for i in range(3)], "part-0.csv")
    _manifest(lists, [site.url(f"/img/{i}.png") for i in (2, 3, 4)], "part-1.csv")
    _manifest(lists, [site.url("/img/5.png")], "other.csv")
    (lists / "_SUCCESS").write_bytes(b"")
    options = PackOptions(path_column="url")
    whole = scan(lists, options)
    assert sorted(item.key.rsplit("/", 1)[1] for item in whole.splits["train"]) == [
        f"{i}.png" for i in range(6)
    ]
    assert [reason.split(": ", 1)[1] for _, reason in whole.skipped] == [
        f"image {site.url('/img/2.png')} is listed in an earlier file too"
    ]
    assert "part-1.csv line 2" in whole.skipped[0][1]
    listed = [site.url(p) for p in ("/img/3.png", "/img/5.png", "/img/0.png", "/img/9.png")]
    assert whole.root.rows_of(listed) == {listed[0]: ("part-1.csv", 3),
                                          listed[1]: ("other.csv", 2),
                                          listed[2]: ("part-0.csv", 2)}  # fmt: skip
    some = scan(str(lists / "part-*.csv"), options)
    assert len(some.splits["train"]) == 5
    with pytest.raises(SourceError, match=r"names no file"):
        scan(str(lists / "none-*.csv"), options)
    (lists / "sub").mkdir()  # beside a folder: not a folder of lists (class folders, say)
    with pytest.raises(SourceError):
        scan(lists, options)
    assert sum(site.hits.values()) == 0


def test_a_folder_of_parquet_and_jsonl_lists_is_one_list_and_columns_that_differ_are_named(
    tmp_path,
):
    """img2dataset's input: a folder of Parquet files (and JSONL) with a url column, read as
    one list in name order, each URL's row known; a file whose columns differ is refused
    naming the column (it said "split None; give every split folder's metadata file ...")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lists = tmp_path / "lists"
    lists.mkdir()
    urls = [f"http://images.example/{i}.png" for i in range(4)]
    pq.write_table(pa.table({"url": urls[2:3], "caption": ["c"]}), lists / "part-1.parquet")
    pq.write_table(pa.table({"url": urls[:2], "caption": ["a", "b"]}), lists / "part-0.parquet")
    (lists / "part-2.jsonl").write_text(json.dumps({"url": urls[3], "caption": "d"}) + "\n")
    whole = scan(lists, PackOptions(path_column="url"))
    assert [item.key for item in whole.splits["train"]] == urls
    assert whole.root.rows_of(urls[1:]) == {urls[1]: ("part-0.parquet", 1),
                                            urls[2]: ("part-1.parquet", 0),
                                            urls[3]: ("part-2.jsonl", 1)}  # fmt: skip
    pq.write_table(pa.table({"url": urls[2:3], "caption": [3]}), lists / "part-1.parquet")
    with pytest.raises(SourceError, match=r"part-1\.parquet: .*'caption' column holds another "
                       r"type\); give every file of the list the same columns"):  # fmt: skip
        scan(lists, PackOptions(path_column="url"))


def test_url_flags_given_to_another_source_are_refused(tmp_path):
    src = helpers.make_tree(tmp_path / "src", {"a": 1})
    with pytest.raises(SourceError, match="retries= is for a manifest table") as refused:
        scan(src, PackOptions(retries=5))
    assert as_flags(refused.value).startswith(f"{src}: --retries is for a manifest table")


def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return cert_file, key_file


def test_https_checks_the_certificate_and_the_address(tmp_path, site, monkeypatch):
    """The TLS connection is made on the socket our address check made: an untrusted
    certificate is a permanent failure, a trusted one (SSL_CERT_FILE) is fetched."""
    import ssl

    from shardpack.storage import fetch

    cert, key = _certificate(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    site.server.socket = tls.wrap_socket(site.server.socket, server_side=True)
    url = site.url("/img/3.png").replace("http://", "https://")
    fetch._tls.cache_clear()  # the process's TLS settings, read again below
    with pytest.raises(UrlFailed, match="TLS certificate refused"):
        Fetcher(FetchPolicy(allow_private=True)).get(url, 10_000)
    with pytest.raises(UrlFailed, match="refused address"):
        Fetcher(FetchPolicy()).get(url, 10_000)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    fetch._tls.cache_clear()
    try:
        assert Fetcher(FetchPolicy(allow_private=True)).get(url, 10_000) == _png(3)
    finally:
        fetch._tls.cache_clear()
    assert site.hits["/img/3.png"] == 1


@contextmanager
def _refusing_tls() -> Iterator[tuple[str, list[int]]]:
    """A loopback server answering each TLS handshake with a fatal handshake_failure alert (as
    one sharing no TLS version or cipher with the client does): an https URL of it, and how
    many connections it took."""
    server = socket.create_server(("127.0.0.1", 0))
    taken = [0]

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                taken[0] += 1
                with conn:
                    conn.recv(4096)  # the ClientHello
                    conn.sendall(bytes([0x15, 3, 3, 0, 2, 2, 40]))  # alert: fatal, handshake

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.getsockname()[1]}/a.png", taken
    finally:
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_RDWR)  # wakes the accept
        server.close()


def test_a_tls_failure_is_permanent_and_names_the_urls_scheme_and_port(tmp_path, site):
    """An https:// URL of a plain http server (WRONG_VERSION_NUMBER) or of one refusing the
    handshake was a transient "network error: [SSL: ...]": tried 3 times, and `pack --update`
    asked it again. It is a TLS failure now, saying the likely fix, tried once and not asked
    again (a certificate refused is as it was: test_https_checks_the_certificate_...)."""
    with serving() as plain, _refusing_tls() as (refusing, taken):
        https = plain.url("/img/1.png").replace("http://", "https://")
        src = _manifest(tmp_path, [site.url("/img/0.png"), https, refusing])
        given = {"workers": 1, "path_column": "url", "allow_private_urls": True}
        out = tmp_path / "out"
        pack(src, out, PackOptions(**given))
        rows = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
        assert [(row["url"], row["error"]) for row in rows] == [
            (https, "TLS failed"),
            (refusing, "TLS failed"),
        ]
        assert rows[0]["reason"] == ("TLS failed: the server answered in no TLS "
                                     "(WRONG_VERSION_NUMBER), as a plain http:// server does; "
                                     "check the URL's scheme and port")  # fmt: skip
        assert rows[1]["reason"].startswith("TLS failed (") and "ALERT" in rows[1]["reason"]
        assert "; check the URL's scheme and port" in rows[1]["reason"]
        assert not any(is_transient(row["reason"]) for row in rows)
        assert (plain.accepted, taken[0]) == (1, 1)  # no retry
        pack(src, out, PackOptions(**given, grow="update"))
        assert (plain.accepted, taken[0]) == (1, 1)  # not asked again
        assert (out / "failures.jsonl").read_text().count("TLS failed") == 4  # error and reason
        # A pack made before kept them as "network error: [SSL: CODE] ...", which --update
        # took as transient and asked again: read by the same verdict now, they are not.
        contents = json.loads((out / "contents.json").read_text())
        (shard,) = contents["shards"].values()
        shard["reasons"] = [OLD_TLS[reason.partition(")")[0] + ")"] for reason in shard["reasons"]]
        (out / "contents.json").write_text(json.dumps(contents))
        pack(src, out, PackOptions(**given, grow="update"))
        assert (plain.accepted, taken[0]) == (1, 1)  # not asked again (before: 2, 2)
    assert not any(map(is_transient, OLD_TLS.values()))
    assert is_transient(
        "network error: [SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in "
        "violation of protocol (_ssl.c:1006)"
    )  # the connection ending: as ever


# The reasons an older shardpack kept for TLS failures, by the start of those it gives now
OLD_TLS = {
    "TLS failed: the server answered in no TLS (WRONG_VERSION_NUMBER)":
        "network error: [SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)",
    "TLS failed (SSLV3_ALERT_HANDSHAKE_FAILURE)":
        "network error: [SSL: SSLV3_ALERT_HANDSHAKE_FAILURE] sslv3 alert handshake failure "
        "(_ssl.c:1006)",
}  # fmt: skip


def test_connections_kept_are_capped_whatever_the_hosts(site):
    """One kept connection a host of a list of a million hosts would run out of file
    descriptors: at most 2 x threads are kept, the oldest closed."""
    port = site.server.server_address[1]
    fetcher = Fetcher(FetchPolicy(allow_private=True, threads=1))
    names = ("127.0.0.1", "localhost", "127.1", "127.0.1", "2130706433", "0x7f.1")
    for n, name in enumerate(names):
        assert fetcher.get(f"http://{name}:{port}/img/{n}.png", 10_000) == _png(n)
    helpers.wait_for(lambda: site.connections <= 2, timeout=5)
    fetcher.close()
    helpers.wait_for(lambda: site.connections == 0, timeout=5)


def test_a_worker_keeps_nothing_of_each_host_it_is_done_with():
    """The per-host cap's semaphore was kept for every host a worker ever asked (1.3 kB each):
    a worker's Fetcher lives through every shard it takes in turn, so a LAION-sized list of
    millions of hosts grew it by gigabytes. 300 hosts (refused addresses: no request)."""

    def semaphores() -> int:
        gc.collect()  # an earlier test's thread pool (each holds one) goes now, not midway
        return sum(isinstance(o, threading.Semaphore) for o in gc.get_objects())

    fetcher, before = Fetcher(FetchPolicy()), semaphores()
    for n in range(300):
        with pytest.raises(UrlFailed, match="refused address"):
            fetcher.get(f"http://10.0.{n >> 8}.{n & 255}/a.png", 1000)
    assert semaphores() <= before


def test_a_url_lists_image_root_pickles_for_a_cluster_and_fetches_there(tmp_path, site):
    """Dask pickles the dataset's root to its workers: the fetch policy goes with it, the
    threads, locks and connections of a Fetcher already used here do not."""
    import pickle

    src = _manifest(tmp_path, [site.url("/img/7.png")])
    root = scan(src, PackOptions(path_column="url", allow_private_urls=True, retries=0)).root
    url = site.url("/img/7.png")
    assert root.read(url, 10_000) == _png(7)  # made this process's Fetcher
    there = pickle.loads(pickle.dumps(root))
    assert there.policy == root.policy and there.policy.retries == 0
    with there.reading(iter([(url, 1)]), 10_000) as ahead:
        assert ahead.read(url, 10_000) == _png(7)
    assert site.hits["/img/7.png"] == 2


def test_a_url_shard_opening_on_a_bad_row_is_fetched_ahead_all_the_same(tmp_path, site):
    """A streamed list's shard whose first item is a bad row (it names no file, and no URL)
    is still a URL shard: its URLs are asked before the worker reads them, not read as files
    on the disk."""
    paths = [f"/img/{i}.png" for i in range(4)]
    urls = [site.url(path) for path in paths]
    options = PackOptions(path_column="url", allow_private_urls=True)
    root = scan(_manifest(tmp_path, urls), options).root
    files = [(f"{BAD_ROW}urls.csv line 2: no image", 0), *((url, 1) for url in urls)]
    with root.reading(iter(files), 10**6) as ahead:
        helpers.wait_for(lambda: all(site.hits[path] for path in paths), 10)  # none read yet
        assert ahead.read(urls[0], 10**6) == _png(0)


def test_a_shard_of_files_objects_and_urls_reads_each_ahead_by_its_kind(tmp_path, site):
    """A shard mixing files on the disk, objects in a store and URLs (a folder of lists, one
    of each kind) was read ahead by its first image's kind alone: opening on a file, its URLs
    were fetched one at a time as the worker came to each. Each kind is read ahead by its own:
    once the worker starts on the first URL, every URL is asked before it reads on, the objects
    come from an ObjectsAhead and the files from a ReadAhead; each read gives what the root's
    read of it alone gives (a URL's failure too), in the shard's order, each URL asked once."""
    import fsspec

    from shardpack.storage import storage_at
    from shardpack.storage.imageroot import ImageRoot
    from shardpack.storage.remote import ObjectsAhead

    memory, prefix = fsspec.filesystem("memory"), f"memory://mixed-{os.getpid()}-{id(tmp_path)}"
    names, paths = [], ["/img/20.png", "/404.png", "/img/21.png", "/img/22.png"]
    for i, path in enumerate(paths):
        (tmp_path / f"{i}.png").write_bytes(_png(i))
        memory.pipe_file(f"{prefix}/{i}.png", _png(10 + i))
        names += [str(tmp_path / f"{i}.png"), site.url(path), f"{prefix}/{i}.png"]
    images = ImageRoot(storage_at(tmp_path), policy=FetchPolicy(allow_private=True))
    try:
        with images.reading(iter([(name, 1000) for name in names]), 10**6) as reading:
            read = [_outcome(reading.read, name) for name in names[:2]]
            helpers.wait_for(lambda: all(site.hits[path] for path in paths), 10)  # unread yet
            read += [_outcome(reading.read, name) for name in names[2:]]
            assert isinstance(reading._objects, ObjectsAhead) and reading._disk.reads == 4
        assert sorted(site.hits.elements()) == sorted(paths)  # each once
        assert read == [_outcome(images.read, name) for name in names]
        assert read[1] == _png(20) and read[4] == (UrlFailed, "HTTP Not Found (HTTP 404)")
    finally:
        memory.rm(prefix, recursive=True)


def _outcome(read, name: str) -> bytes | tuple[type, str]:
    try:
        return read(name, 10**6)
    except Exception as e:
        return type(e), str(e)


@pytest.mark.parametrize(("workers", "shards"), [(2, 4), (1, 2)])
def test_a_worker_fetches_its_next_shard_while_the_last_waits_for_its_retries(
    tmp_path, workers, shards
):
    """Shards of ten URLs, each asked at its first request to come back in 3 s, on two forked
    workers (a shard each, and the next) or in-process (two shards): every first request
    reaches the server before any retry (a worker took its next shard only once its last had
    its retries: ten first requests a worker, then retries), and the shards are the bytes a
    sequential run writes."""
    paths = [f"/429/{i:02}.png" for i in range(10 * shards)]
    with serving(latency=0.01) as site:
        site.retry_after = 3  # a margin for a loaded machine's slow worker
        result = _pack_urls(tmp_path, site, paths, workers=workers, shards=shards,
                            url_threads=16)  # fmt: skip
        assert result.num_records == len(paths) and result.index.stats.workers == workers
        assert sorted(site.started[: len(paths)]) == paths, site.started  # no retry among them
        assert set(site.hits.values()) == {2}  # a first try and a retry each, no more
        _pack_urls(tmp_path, site, paths, out="sequential", shards=shards)  # no 429 now
    assert helpers.shard_files(tmp_path / "out") == helpers.shard_files(tmp_path / "sequential")


def test_a_shard_reserved_by_a_busy_worker_is_written_by_it_and_each_url_asked_once(tmp_path):
    """Four shards on two workers, the first held up by one URL: its worker reserves the
    third shard and fetches it, the other writes the second and the fourth. The other took
    the third too rather than leave its task idle, its URLs fetched twice (50 requests for 40
    URLs, the first bytes dropped): it waits now, and the third is written by the worker that
    fetched it. Every URL is asked once, every shard written once, the bytes a sequential run
    writes."""
    paths = [f"/img/{i:02}.png" for i in range(40)]
    with serving(latency=0.01) as site:
        site.held = frozenset({paths[0]})
        # the gate opens once every URL was asked and the other worker wrote its two shards
        # (before, it then took the third at once: 50 requests)
        opening = (site, 40, 60, tmp_path / "out")
        threading.Thread(target=_open_at, args=opening, daemon=True).start()
        result = _pack_urls(tmp_path, site, paths, workers=2, shards=4, url_threads=16,
                            shuffle=False)  # fmt: skip
        site.gate.set()
        assert set(site.hits) == set(paths) and max(site.hits.values()) == 1, site.hits
        _pack_urls(tmp_path, site, paths, out="sequential", shards=4, shuffle=False)
    assert result.num_records == 40 and len(result.index.splits["train"].shards) == 4
    assert helpers.shard_files(tmp_path / "out") == helpers.shard_files(tmp_path / "sequential")


def test_a_worker_killed_while_the_other_waits_for_its_reservation_fails_the_run(tmp_path):
    """The worker fetching its reserved shard, killed while the other waits for that shard to
    be taken: the run fails at once in one line (the pool breaks, and ends the waiting one),
    no hang; nothing is left under a final name but the shards written."""
    paths = [f"/img/{i:02}.png" for i in range(40)]
    out = tmp_path / "out"
    with serving(latency=0.01) as site:
        site.held = frozenset({paths[0]})
        src = _manifest(tmp_path, [site.url(path) for path in paths])
        run = forkserver.start(forkserver.SHARDPACK, "pack", str(src), str(out), "--path-column",
                               "url", "--allow-private-urls", "--workers", "2", "--shards", "4",
                               "--url-threads", "16", "--no-shuffle",
                               "--no-progress")  # fmt: skip
        try:
            helpers.wait_for(lambda: sum(site.hits.values()) == 40 and _others_landed(out), 60)
            workers = helpers.worker_pids(run.pid)
            (fetching,) = [pid for pid in workers if helpers.writing_a_shard(pid)]
            os.kill(fetching, signal.SIGKILL)
            stderr = run.communicate(timeout=60)[1]
        finally:
            site.gate.set()
            if run.poll() is None:
                run.kill()
    assert run.returncode == 2, stderr
    assert "worker died while writing urls-train" in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert max(site.hits.values()) == 1 and not (out / "index.json").exists()
    assert not [p.name for p in out.iterdir() if p.name.endswith((".partial", ".lock"))]


def _others_landed(out: Path) -> bool:
    """Whether two of a 4-shard pack's shards but the first (held up) are in `out`: which two
    the other worker wrote depends on when the held one's worker reserved its next."""
    return len([p for p in out.glob("*-of-00004") if "-00000-of-" not in p.name]) >= 2


@pytest.mark.parametrize("shards", [8, 3])
def test_every_url_of_a_run_on_two_workers_is_asked_once(tmp_path, shards):
    """A list of many shards on two workers (as seen: one shard of each 8-shard run fetched
    twice, the last reservation taken by the worker left idle), and of fewer shards than
    tasks: each URL is asked once and the shards are a sequential run's."""
    paths = [f"/img/{i:03}.png" for i in range(10 * shards)]
    with serving(latency=0.01, jitter=True) as site:
        result = _pack_urls(tmp_path, site, paths, workers=2, shards=shards, url_threads=8,
                            shuffle=False)  # fmt: skip
        assert set(site.hits) == set(paths) and max(site.hits.values()) == 1, site.hits
        _pack_urls(tmp_path, site, paths, out="sequential", shards=shards, shuffle=False)
    assert result.num_records == len(paths) and result.index.stats.workers == 2
    assert helpers.shard_files(tmp_path / "out") == helpers.shard_files(tmp_path / "sequential")


def _open_at(site: Site, hits: int, timeout: float, out: Path | None = None) -> None:
    """Set the site's gate once it has had `hits` requests (and, given `out`, the worker not
    held up wrote its two shards there: _others_landed), or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (
        sum(site.hits.values()) < hits or (out is not None and not _others_landed(out))
    ):
        time.sleep(0.01)
    site.gate.set()


def _sockets_to(port: int) -> int:
    """This process's TCP sockets connected to a port on loopback (not every fd it has: another
    test's server thread in this worker may open one meanwhile)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since the listing
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    with open("/proc/self/net/tcp") as table:
        rows = [line.split() for line in table.read().splitlines()[1:]]
    return sum(int(row[2].rsplit(":", 1)[1], 16) == port and row[9] in inodes for row in rows)


@pytest.mark.parametrize("stop", [ValueError, KeyboardInterrupt])
def test_a_reading_stopped_closes_the_next_shards_fetching_too(tmp_path, stop):
    """A shard stopped (an error, Ctrl-C) while the next one's requests are in flight: no
    thread and no socket of either is left."""
    from shardpack.storage import imageroot

    first = [f"/img/{i}.png" for i in range(10)]
    following = [f"/img/{i}.png" for i in range(10, 20)]
    with serving(latency=0.01) as site:
        site.held = frozenset(following)  # in flight until the end
        urls = [site.url(path) for path in first + following]
        options = PackOptions(path_column="url", allow_private_urls=True)
        root = scan(_manifest(tmp_path, urls), options).root
        files = [(url, 1) for url in urls]
        with (
            pytest.raises(stop),
            root.reading(files[:10], 10**6, "first", lambda: ("next", files[10:])) as ahead,
        ):
            assert ahead.read(urls[0], 10**6) == _png(0)
            helpers.wait_for(lambda: all(site.hits[path] for path in following), 10)
            helpers.wait_for(lambda: imageroot._started is not None, 10)  # (set after its start)
            assert _sockets_to(site.server.server_address[1]) > 0  # what must go is seen
            raise stop
        assert imageroot._started is None
        for thread in threading.enumerate():
            if thread.name.startswith("shardpack-"):
                thread.join(10)
        assert not [t for t in threading.enumerate() if t.name.startswith("shardpack-")]
        site.gate.set()
        helpers.wait_for(lambda: site.connections == 0, 10)
        gc.collect()  # a stopped try's exception holds its frames, and they its socket, in a cycle
        assert _sockets_to(site.server.server_address[1]) == 0


def test_an_answer_of_two_content_lengths_that_disagree_is_refused_as_such(site):
    """http.client read the body to the first one: the image came cut short, skipped later as
    a truncated JPEG, and the rest of the body was left on the connection. The same length
    twice is one length."""
    fetcher = Fetcher(FetchPolicy(allow_private=True, retries=1))
    half = len(_png(1)) // 2
    with pytest.raises(UrlFailed, match=rf"^an invalid answer: Content-Length {half} and "
                       rf"{len(_png(1))} at once, so its body's end is unknown$"):  # fmt: skip
        fetcher.get(site.url("/twolengths.png"), 10_000)
    assert site.hits["/twolengths.png"] == 1  # not asked again
    assert fetcher.get(site.url("/samelengths.png"), 10_000) == _png(1)
    assert fetcher.get(site.url("/img/1.png"), 10_000) == _png(1)  # the connection after it
