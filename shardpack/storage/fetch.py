"""Images behind http(s) URLs, fetched many at a time with the standard library alone.

A worker reads its shard's URLs through `Prefetch`: a pool of threads fetches the next ones in
the plan's order while the worker decodes and writes the current one, so latency, not the CPU,
is what waits. Connections are kept per host and reused; a semaphore per host caps the requests
in flight to it. Every address connected to (after DNS, after each redirect) is checked before a
byte is sent: link-local and cloud metadata addresses never, private and loopback ones only
when allowed. Transient failures (a reset or refused connection, a timeout, 5xx, 429) are
retried with backoff, honouring Retry-After; permanent ones (404, 403, DNS, over the byte cap,
an opt-out header, a header over max_pixels) fail at once. Each URL has a deadline (the policy's
`deadline` seconds from its first request, tries, redirects and waits together): what is left
of it bounds each connect, read, answer and retry. A body sent gzip'ed or deflated is decoded
under the same cap.
A failure's message starts with what `reason_kind` counts it by and ends, for an HTTP status,
with `(HTTP <status>)`, which `status_of` reads back.
"""

from __future__ import annotations

import email.utils
import functools
import heapq
import http.client
import io
import itertools
import random
import re
import select
import socket
import ssl
import threading
import time
import urllib.parse
import weakref
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress

from shardpack.errors import printable
from shardpack.signatures import declared_size, sniff, too_many_pixels
from shardpack.storage.failures import said
from shardpack.storage.srcfiles import FileTooLarge, RefusedFile, over_the_limit
from shardpack.storage.urlpolicy import (
    NETWORK_ERROR,
    WEB_SCHEMES,
    FetchPolicy,
    opted_out,
    refusal,
    tls_verdict,
)

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_STATUS_SAID = re.compile(r" \(HTTP \d{3}\)$")  # how a failure's reason ends in its status
_CHUNK = 1 << 16  # bytes a read takes at most: a body over the cap is refused within a chunk
# Content-Encoding -> zlib's wbits: gzip's header, or zlib's (deflate as RFC 9110 means it)
_ZLIB_WBITS = {"gzip": 31, "x-gzip": 31, "deflate": 15}  # 16 + MAX_WBITS; MAX_WBITS
_DRAIN = 1 << 16  # the most of an error page read to keep its connection; past it, closed
# A body past LARGE_BODY bytes reads on only in one of the worker's LARGE_TURNS: bodies in
# flight hold at most threads x LARGE_BODY + LARGE_TURNS limits, not a limit a thread (1.5 GB at
# the default --max-pixels). Few images on the web are larger; a few turns keep a list of large
# photos from reading them one at a time (a wait for a turn counts in total_timeout).
LARGE_BODY = 8 << 20
LARGE_TURNS = 4
BACKOFF_S = 0.5  # the first retry's wait; each next one doubles it (img2dataset: none)
MOST_WAIT_S = 60.0  # a Retry-After longer than this is a failure, not a wait; the most backoff
# URLs a worker fetches ahead of its reads, per thread, and the most bytes of fetched bodies it
# holds unread: a read waiting out a Retry-After at the head stops the fetching once the window
# is fetched, so it must hold more than a second's fetches (`python -m benchmarks.urls --urls
# 1000 --flaky 0.1 --fetch-only 16`, benchmarks/README.md).
AHEAD_PER_THREAD = 32
HELD_BYTES = 256 << 20
# A 200 whose body begins with no image format's signature (signatures.sniff), whatever
# Content-Type the server sent, is no image: said so with what the server called it, and as a
# page where its head is text: markup (HTML, XML, SVG) or JSON after white space and a
# byte-order mark, or UTF-8 of printable characters (a message: a login wall, "removed").
_TEXT_STARTS = (b"<", b"{", b"[")
_WHITE, _BOM, _PAGE_HEAD = b" \t\r\n\f", b"\xef\xbb\xbf", 1024
# An image's header is looked for in its body's first bytes up to this many (a JPEG's frame
# header comes after its EXIF, ICC profile and XMP segments, 64 KiB each at most), at each
# doubling of what has come from _PAGE_HEAD on (the looks cost twice the head at most): one
# declaring over max_pixels is refused there, not read on to the byte cap.
_SIZE_HEAD = 1 << 20


class UrlFailed(RefusedFile):
    """A URL that gave no image: str() is the reason (what it is counted by first)."""

    def __init__(self, reason: str, transient: bool = False, wait: float | None = None) -> None:
        super().__init__(reason)
        self.transient = transient
        self.wait = wait  # Retry-After's seconds, when the server said


class Deadline:
    """When one URL's fetching ends: `seconds` after its first request got its turn at the host
    (a wait for a turn is the host's other URLs', not its own), whatever tries, redirects and
    waits it took."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._at: float | None = None  # time.monotonic()'s, once started

    def start(self) -> None:
        if self._at is None:
            self._at = time.monotonic() + self.seconds

    def left(self) -> float:
        """Seconds left of it (all of them before its start)."""
        return self.seconds if self._at is None else self._at - time.monotonic()

    def failure(self) -> UrlFailed:
        """The URL's failure at its deadline (transient: a later run may fetch it in time)."""
        return UrlFailed(f"timed out: not fetched within its deadline of {self.seconds:g} s", True)

    def passed(self) -> UrlFailed | None:
        """failure() once the deadline has passed, else None."""
        return self.failure() if self.left() <= 0 else None


class Fetcher:
    """Fetches URLs under a FetchPolicy from any number of threads: connections kept per host,
    requests to one host capped, each URL retried as the policy says. One shared by the
    readings of `workers` threads (the --dedup pass, each reading as a worker does) holds what
    that many workers' own would: workers x per_host requests to a host, no more."""

    def __init__(self, policy: FetchPolicy, workers: int = 1) -> None:
        self.policy, self.workers = policy, workers
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        # every idle connection, oldest first: a list of a million hosts keeps the last few
        # (2 x threads a worker), not a socket for each host it met (the descriptors run out)
        self._kept: OrderedDict[http.client.HTTPConnection, tuple[str, str, int]] = OrderedDict()
        # each host asked now: its cap, and the requests holding or awaiting a turn (a worker
        # keeps its Fetcher through the shards it takes: one kept a host would grow by each)
        self._hosts: dict[str, tuple[threading.Semaphore, int]] = {}
        # every socket connected, so that close() can cut the requests in flight: a stopped
        # run (Ctrl-C) exits at once, not when a stalled server's read timeout ends
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._lookups: set[threading.Event] = set()  # DNS look-ups waited for: close() ends them
        self._closed = threading.Event()
        self._large = threading.Semaphore(LARGE_TURNS)  # turns of bodies past LARGE_BODY bytes

    def get(self, url: str, limit: int) -> bytes:
        """The body of `url`, at most `limit` bytes.

        Raises:
            UrlFailed: a permanent failure, or a transient one on each of 1 + retries tries.
            FileTooLarge: the body is over `limit` (from Content-Length, or while read).
        """
        tries, deadline = 1, Deadline(self.policy.deadline)
        while True:
            try:
                return self.once(url, limit, deadline)
            except UrlFailed as e:
                self._closed.wait(self.retry_in(e, tries, deadline))  # (a close ends the wait)
                tries += 1

    def retry_in(self, failed: UrlFailed, tries: int, deadline: Deadline) -> float:
        """The seconds to wait before the next try of a URL whose `tries`-th try failed so:
        the backoff, or the Retry-After the server asked for if longer.

        Raises:
            UrlFailed: the failure, final (permanent, the retries spent, a Retry-After over
                MOST_WAIT_S, or the URL's deadline ending before the next try), its reason
                saying how many tries it took.
        """
        if self._closed.is_set():
            raise UrlFailed("stopped: the fetching was closed") from None
        if not failed.transient or tries > self.policy.retries or deadline.left() <= 0:
            raise UrlFailed(_tried(str(failed), tries)) from None
        if failed.wait is not None and failed.wait > MOST_WAIT_S:
            raise UrlFailed(f"{failed}: Retry-After {failed.wait:g} s is over {MOST_WAIT_S:g} s"
                            ) from None  # fmt: skip
        # doubling up to the longest Retry-After waited for (the exponent bounded: a float
        # overflows past 2**1023)
        backoff = BACKOFF_S * 2 ** min(tries - 1, 16) * random.uniform(0.75, 1.25)
        wait = max(min(backoff, MOST_WAIT_S), failed.wait or 0)
        if wait >= deadline.left():
            raise UrlFailed(_tried(f"{failed}: no time for another try within its deadline of "
                                   f"{deadline.seconds:g} s", tries)) from None  # fmt: skip
        return wait

    def once(self, url: str, limit: int, deadline: Deadline | None = None) -> bytes:
        """One try at `url`, following up to max_redirects redirects, within its `deadline`
        (started by its first request: a fresh one where None); raises as get does, whether or
        not a retry could help (retry_in says). A failure past a redirect names the URL it was
        sent to: the one listed may answer, with that redirect."""
        deadline = deadline or Deadline(self.policy.deadline)
        for hops in range(self.policy.max_redirects + 1):
            try:
                status, headers, body = self._request(*_parts(url), limit, deadline)
            except UrlFailed as e:
                raise _redirected(e, url, hops > 0) from None
            if status in _REDIRECTS and headers.get("Location"):
                try:
                    url = urllib.parse.urljoin(url, _utf8(headers["Location"]))
                except ValueError as e:  # an unclosed IPv6 bracket, a bad address in one
                    raise UrlFailed(f"bad redirect: {said(e, 200)}") from None  # the server's text
                continue
            if status == 200:
                if (wrong := _not_image(body, headers)) is not None:
                    raise _redirected(UrlFailed(wrong), url, hops > 0)
                return body
            phrase = _phrase(status)
            if status == 429 or status >= 500:
                failed = UrlFailed(f"HTTP {phrase} (HTTP {status})", True, _retry_after(headers))
            else:
                failed = UrlFailed(f"HTTP {phrase} (HTTP {status})")
            raise _redirected(failed, url, hops > 0)
        raise UrlFailed(f"too many redirects (over {self.policy.max_redirects})")

    def _request(
        self, scheme: str, host: str, port: int, target: str, limit: int, deadline: Deadline
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """(status, headers, body) of one GET: the body read for a 200 only."""
        key = (scheme, host, port)
        with self._host(host):
            deadline.start()  # at the URL's first turn: the waits for one are the host's
            conn, reused = self._connection(key, deadline)
            try:
                try:
                    response = self._send(conn, target, deadline)
                except (http.client.BadStatusLine, ConnectionResetError, BrokenPipeError):
                    if not reused:
                        raise
                    # the server closed a kept connection, or left bytes past an answer's
                    # length in it (no status line: RemoteDisconnected is one): a fresh one, once
                    conn.close()
                    conn, reused = self._connection(key, deadline, fresh=True)
                    response = self._send(conn, target, deadline)
                _one_length(response.headers)
                if response.status == 200:
                    reason = opted_out(response.headers.get_all("X-Robots-Tag") or [])
                    if reason and self.policy.opt_out:
                        conn.close()
                        raise UrlFailed(f"opted out (X-Robots-Tag: {reason})")
                    body = self._body(response, limit)
                else:
                    body = b""
                    if len(response.read(_DRAIN + 1)) > _DRAIN:
                        response.will_close = True
            except UrlFailed:
                conn.close()
                raise
            except FileTooLarge:
                conn.close()
                raise
            except (OSError, http.client.HTTPException, ValueError) as e:
                conn.close()
                raise (deadline.passed() or _failure(e)) from None
            if response.will_close:
                conn.close()
            else:
                self._keep(key, conn)
            return response.status, response.headers, body

    def _keep(self, key: tuple[str, str, int], conn: http.client.HTTPConnection) -> None:
        """Keep a connection for the host's next request; close the oldest kept past the cap."""
        gone = []
        with self._lock:
            self._idle.setdefault(key, []).append(conn)
            self._kept[conn] = key
            while len(self._kept) > 2 * self.policy.threads * self.workers:
                old, where = self._kept.popitem(last=False)
                self._idle[where].remove(old)
                if not self._idle[where]:
                    del self._idle[where]
                gone.append(old)
        for old in gone:
            old.close()

    def _send(
        self, conn: http.client.HTTPConnection, target: str, deadline: Deadline
    ) -> http.client.HTTPResponse:
        conn.request("GET", target, headers={"User-Agent": self.policy.user_agent,
                                             "Accept": "image/*, */*;q=0.5",
                                             "Accept-Encoding": "identity"})  # fmt: skip
        conn.response_class = functools.partial(_Answer, policy=self.policy, deadline=deadline)
        return conn.getresponse()

    def _body(self, response: http.client.HTTPResponse, limit: int) -> bytes:
        """The body, refused as soon as it is known to be over `limit` (Content-Length, or
        bytes read), to be no image, or to be an image over max_pixels (its head: an endless
        page, stream of zeros or image of a huge header was read to the cap, 1.5 GB at the
        default --max-pixels); read a chunk at a time as it arrives (within total_timeout:
        _Answer)."""
        over = over_the_limit(limit)
        length = response.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > limit:
            raise FileTooLarge(f"{over} (Content-Length: {int(length):,})")
        coding = (response.getheader("Content-Encoding") or "identity").strip().lower()
        parts, got, look_at = [], 0, _PAGE_HEAD
        with ExitStack() as turn:
            for chunk in _decoded(response, coding, limit):
                if got <= LARGE_BODY < got + len(chunk):
                    # the holder ends within total_timeout (or at close): a wait is bounded
                    turn.enter_context(self._large)
                got += len(chunk)
                if got > limit:
                    raise FileTooLarge(over if coding == "identity" else f"{over} ({coding})")
                parts.append(chunk)
                if look_at is not None and got >= look_at:
                    look_at = self._look(b"".join(parts), response.headers)
        if self._closed.is_set():  # close() cut it: a body with no length seemed to end there
            raise UrlFailed("stopped: the fetching was closed")
        if response.length:  # closed short of its Content-Length: read1 returns what came
            raise http.client.IncompleteRead(b"", response.length)
        if not response.isclosed():  # read1 leaves a body read to its length open: the
            response.read()  # connection could not send the next request
        return b"".join(parts)

    def _look(self, head: bytes, headers: http.client.HTTPMessage) -> int | None:
        """Refuse a body by its head: no image (its first KiB says: no more is read of an endless
        page), or an image whose header declares over max_pixels. How much of the head to look
        at next; None once there is nothing more to learn from it."""
        if wrong := _not_image(head, headers):
            raise UrlFailed(wrong)
        if self.policy.max_pixels is None:
            return None
        if (size := declared_size(head)) is not None:
            if over := too_many_pixels(*size, self.policy.max_pixels):
                raise UrlFailed(over)
            return None
        return 2 * len(head) if len(head) < _SIZE_HEAD else None

    @contextmanager
    def _host(self, host: str) -> Iterator[None]:
        """A turn among the per_host requests (a worker's) in flight to `host`."""
        with self._lock:
            cap = self.policy.per_host * self.workers
            gate, users = self._hosts.get(host) or (threading.Semaphore(cap), 0)
            self._hosts[host] = gate, users + 1
        try:
            with gate:
                yield
        finally:
            with self._lock:
                if users := self._hosts[host][1] - 1:
                    self._hosts[host] = gate, users
                else:
                    del self._hosts[host]

    def _connection(
        self, key: tuple[str, str, int], deadline: Deadline, fresh: bool = False
    ) -> tuple[http.client.HTTPConnection, bool]:
        """A kept connection to the host (and whether it is one), else a new one, connected
        within what is left of `deadline`."""
        while not fresh:
            with self._lock:
                idle = self._idle.get(key)
                if not idle:
                    break
                conn = idle.pop()
                del self._kept[conn]
                if not idle:
                    del self._idle[key]
            if not _unasked(conn):
                return conn, True
            conn.close()
        scheme, host, port = key
        if scheme == "https":
            conn = http.client.HTTPSConnection(host, port, context=_tls())
        else:
            conn = http.client.HTTPConnection(host, port)
        conn.timeout = self.policy.read_timeout
        # connect() calls it: our checks, every time
        conn._create_connection = functools.partial(self._connect, deadline=deadline)
        return conn, False

    def _connect(
        self, address: tuple[str, int], timeout=None, source=None, *, deadline: Deadline
    ) -> socket.socket:
        """A socket connected to an allowed address of the host, checked as connected, within
        what is left of `deadline` (the system's resolver bounds the DNS look-up itself)."""
        host, port = address
        found = self._addresses(host, port, deadline)
        failed: BaseException | None = None
        for family, kind, proto, _, where in found:
            if why := refusal(where[0], self.policy.allow_private):
                failed = UrlFailed(why)
                continue
            sock = socket.socket(family, kind, proto)
            with self._lock:
                if self._closed.is_set():
                    sock.close()
                    raise UrlFailed("stopped: the fetching was closed")
                self._sockets.add(sock)
            try:
                if (left := deadline.left()) <= 0:
                    raise deadline.failure()
                sock.settimeout(min(self.policy.connect_timeout, left))
                sock.connect(where)
                if why := refusal(sock.getpeername()[0], self.policy.allow_private):
                    raise UrlFailed(why)
                # (a TLS handshake reads under it)
                sock.settimeout(min(self.policy.read_timeout, max(deadline.left(), 0.001)))
                return sock
            except BaseException as e:
                sock.close()
                if not isinstance(e, OSError):
                    raise
                failed = e
        raise failed or UrlFailed(f"DNS failure: {host}: no address")

    def _addresses(self, host: str, port: int, deadline: Deadline) -> list[tuple]:
        """getaddrinfo's addresses of the host: at once for an IP address; else looked up on a
        thread of its own, waited for until it answers, the deadline passes or close(). The
        system's resolver takes its own time (5 s a try and server, resolv.conf says) and
        cannot be cut: a stopped run (Ctrl-C) leaves the look-up behind (a daemon thread)."""
        with suppress(socket.gaierror):  # no look-up: a number is parsed
            return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                      flags=socket.AI_NUMERICHOST)  # fmt: skip
        answer: list = []
        ready = threading.Event()

        def look_up() -> None:
            try:
                answer.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
            except BaseException as e:  # raised where it is waited for
                answer.append(e)
            ready.set()

        with self._lock:
            if self._closed.is_set():
                raise UrlFailed("stopped: the fetching was closed")
            self._lookups.add(ready)
        try:
            threading.Thread(target=look_up, name="shardpack-dns", daemon=True).start()
            ready.wait(max(deadline.left(), 0))
        finally:
            with self._lock:
                self._lookups.discard(ready)
        if self._closed.is_set():
            raise UrlFailed("stopped: the fetching was closed")
        if not answer:
            raise deadline.failure()
        if isinstance(answer[0], socket.gaierror):
            raise UrlFailed(f"DNS failure: {host}: {answer[0].strerror}")
        if isinstance(answer[0], BaseException):
            raise answer[0]
        return answer[0]

    def close(self) -> None:
        """Close every kept connection, and cut the requests still in flight (each fails at
        once, and is not retried), a DNS look-up waited for too."""
        with self._lock:
            self._closed.set()
            kept, cut = list(self._kept), list(self._sockets)
            self._idle.clear()
            self._kept.clear()
            for ready in self._lookups:
                ready.set()
        for conn in kept:
            conn.close()
        for sock in cut:  # a recv blocked in another thread returns now
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _Answer(http.client.HTTPResponse):
    """An answer read within the policy's total_timeout from now and its URL's deadline, status
    line and headers too: a server that drips them (or 100 Continue after 100 Continue) is cut
    off, not waited for a read_timeout a byte. Interim answers (103 Early Hints) are skipped as
    100 Continue is."""

    def __init__(
        self, sock: socket.socket, *args, policy: FetchPolicy, deadline: Deadline, **kwargs
    ) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp.close()  # its buffered reader of the socket: ours reads it under the deadline
        self.fp = io.BufferedReader(_Timed(sock, policy, deadline))

    def _read_status(self) -> tuple[str, int, str]:
        # http.client skips 100 alone: a 103 taken as the answer left the real one in the kept
        # connection, for the next URL to get as its own
        version, status, reason = super()._read_status()
        return version, http.client.CONTINUE if 100 <= status < 200 else status, reason


class _Timed(io.RawIOBase):
    """A socket's reads, each waiting at most read_timeout and what is left of total_timeout and
    of the URL's deadline."""

    def __init__(self, sock: socket.socket, policy: FetchPolicy, deadline: Deadline) -> None:
        self._sock, self._raw, self._policy = sock, sock.makefile("rb", buffering=0), policy
        self._answer_by = time.monotonic() + policy.total_timeout
        self._url = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int | None:
        answer, url = self._answer_by - time.monotonic(), self._url.left()
        left = min(answer, url)
        if left > 0:
            self._sock.settimeout(min(self._policy.read_timeout, left))
            try:
                return self._raw.readinto(buffer)
            except TimeoutError:
                if left >= self._policy.read_timeout:
                    raise  # read_timeout's, not the deadline's
        if url <= answer:
            raise self._url.failure()
        raise UrlFailed(f"timed out: the answer took over {self._policy.total_timeout:g} s", True)

    def close(self) -> None:
        self._raw.close()
        with suppress(OSError):  # the connection's next request is sent under read_timeout
            self._sock.settimeout(self._policy.read_timeout)
        super().close()


def _unasked(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection has something to read, which no request of ours asked for:
    the server closed it, or said so first (a 408), or sent bytes past an answer. Sent on,
    the next request would take them as its answer."""
    sock = conn.sock
    if sock is None or (isinstance(sock, ssl.SSLSocket) and sock.pending()):
        return True
    ready = select.poll()
    ready.register(sock, select.POLLIN)
    return bool(ready.poll(0))


@functools.cache
def _tls() -> ssl.SSLContext:
    """The process's TLS settings (certificates verified): made once, 70 ms (the CA store)."""
    return ssl.create_default_context()


def _parts(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, request target) of an http(s) URL."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise UrlFailed(f"bad URL: {e}") from None
    scheme = parts.scheme.lower()
    if scheme not in WEB_SCHEMES:
        raise UrlFailed(f"refused scheme: {scheme or 'none'}:// is not http(s)")
    if not parts.hostname:
        raise UrlFailed("bad URL: no host")
    if not parts.hostname.isprintable() or " " in parts.hostname:  # http.client's refusal
        raise UrlFailed(f"bad URL: the host {parts.hostname!r} holds a space or a control "
                        "character")  # fmt: skip
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    if not (target.isascii() and target.isprintable()) or " " in target:
        # as a browser sends what a page wrote: UTF-8 bytes %-escaped (http.client sends ASCII)
        target = urllib.parse.quote(target, safe="/?&=%:;@!$'()*+,~-._")
    return scheme, parts.hostname, port or (443 if scheme == "https" else 80), target


def _utf8(value: str) -> str:
    """A header's value as UTF-8, as browsers read a Location (http.client reads latin-1: a
    raw é became 'Ã©', another path), where its bytes are UTF-8."""
    with suppress(UnicodeError):
        return value.encode("latin-1").decode("utf-8")
    return value


def _redirected(failed: UrlFailed, url: str, moved: bool) -> UrlFailed:
    """`failed`, naming the URL a redirect sent the fetch to (`moved`), cut to 200 characters
    (a stranger's server wrote it), beside its HTTP status or after it; else as it is."""
    if not moved:
        return failed
    where = f"redirected to {printable(url[:200])}"
    reason = str(failed)
    status = _STATUS_SAID.search(reason)
    reason = f"{reason[:-1]}, {where})" if status else f"{reason} ({where})"
    return UrlFailed(reason, failed.transient, failed.wait)


def _tried(reason: str, tries: int) -> str:
    """A failure's reason saying how many tries it took, inside its last parentheses (what it
    is counted by stays first)."""
    if tries == 1:
        return reason
    if reason.endswith(")"):
        return f"{reason[:-1]}, after {tries} tries)"
    return f"{reason} (after {tries} tries)"


def _one_length(headers: http.client.HTTPMessage) -> None:
    """Refuse an answer whose Content-Length headers disagree (RFC 9112: its body's end is
    unknown, never read). http.client reads to the first, and the image came cut short, said as
    a truncated JPEG; the rest of the body was left on the connection."""
    lengths = dict.fromkeys(value.strip() for value in headers.get_all("Content-Length") or ())
    if len(lengths) > 1:  # each once, as sent
        said = printable(" and ".join(lengths)[:200])
        raise UrlFailed(f"an invalid answer: Content-Length {said} at once, so its body's end "
                        "is unknown")  # fmt: skip


def _not_image(body: bytes, headers: http.client.HTTPMessage) -> str | None:
    """Why a 200's body is not an image (a page of text, bytes of no image format, nothing),
    naming the Content-Type the server sent; None for an image."""
    if sniff(body) is not None:
        return None
    kind = headers.get("Content-Type")
    what = f"{said(kind, 80)!r}" if kind else "no Content-Type"
    head = body[:_PAGE_HEAD].lstrip(_WHITE).removeprefix(_BOM).strip(_WHITE)
    if not head:
        why = "an empty body"
    elif _svg(head, kind):
        why = "an SVG drawing: shardpack packs images of pixels, not vector ones"
    elif _text(head):
        why = "a web page or a message, not the image"
    else:
        why = "bytes of no image format shardpack reads"
    return f"not an image: the server sent {what} ({why})"


def _svg(head: bytes, kind: str | None) -> bool:
    """Whether a body of text is an SVG drawing (a logo or an icon in a scraped list): its
    Content-Type says so, or an <svg element opens in its head."""
    declared = (kind or "").split(";")[0].strip().lower() == "image/svg+xml"
    return declared or (head.startswith(b"<") and b"<svg" in head.lower())


def _text(head: bytes) -> bool:
    """Whether the head of a body (white space stripped) reads as a page of text."""
    if head.startswith(_TEXT_STARTS):
        return True
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:  # but a character the head's end cut in two
        if e.reason != "unexpected end of data":
            return False
        text = head[: e.start].decode("utf-8")
    return "".join(text.split()).isprintable()


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "status"


def _decoded(response: http.client.HTTPResponse, coding: str, limit: int) -> Iterator[bytes]:
    """The body's chunks as the server meant them: servers that compress every answer send
    gzip even when asked for identity, and browsers undo it. Decoded a chunk at a time, so the
    caller's byte cap and turns for large bodies hold for what a small body inflates to.

    Raises:
        UrlFailed: an encoding other than gzip or deflate, or a stream that does not decode.
        FileTooLarge: more than `limit` bytes sent (decoding to less).
    """
    if coding == "identity":
        yield from iter(functools.partial(response.read1, _CHUNK), b"")
        return
    if coding not in _ZLIB_WBITS:
        raise UrlFailed(f"not an image: its body came in Content-Encoding {said(coding, 40)!r}, "
                        "which shardpack does not decode (gzip and deflate only)")  # fmt: skip
    inflate, sent = zlib.decompressobj(_ZLIB_WBITS[coding]), 0
    try:
        while data := response.read1(_CHUNK):
            sent += len(data)
            if sent > limit:  # bytes that inflate to little are bound too
                raise FileTooLarge(f"{over_the_limit(limit)} (sent, {coding})")
            if inflate.eof:  # past the stream's end: never held
                raise UrlFailed(f"not an image: its body has bytes past its {coding} stream")
            while out := inflate.decompress(data, _CHUNK):
                yield out
                data = inflate.unconsumed_tail
    except zlib.error as e:
        raise UrlFailed(f"not an image: its body does not decode as {coding} ({e})") from None
    if not inflate.eof and not response.length:  # (a body cut short is the caller's to say)
        raise UrlFailed(f"not an image: its body's {coding} stream ends early")


def _retry_after(headers: http.client.HTTPMessage) -> float | None:
    """Retry-After's seconds (a number, or an HTTP date), else None."""
    value = (headers.get("Retry-After") or "").strip()
    if value.isascii() and value.isdigit():  # '²' is a digit to isdigit, not to float
        return float(value)
    with suppress(TypeError, ValueError, IndexError, OverflowError):
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    return None


# OpenSSL's reasons for a first answer that is no TLS: a server not speaking TLS on that port
# (a plain http:// one answers "HTTP/1.1 400" to the handshake: WRONG_VERSION_NUMBER).
_NO_TLS = frozenset({"WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL", "HTTP_REQUEST",
                     "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"})  # fmt: skip
# An SSLError that is no verdict of TLS but the connection ending under it (transient)
_ENDED = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


def _failure(e: BaseException) -> UrlFailed:
    """A failed request as a UrlFailed: transient unless retrying cannot help."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return UrlFailed(f"TLS certificate refused: {e.verify_message}")
    if (
        isinstance(e, ssl.SSLError)
        and not isinstance(e, _ENDED)
        and (
            code := tls_verdict(str(e.strerror or e))  # the same answer next time
        )
    ):
        if code in _NO_TLS:
            return UrlFailed(f"TLS failed: the server answered in no TLS ({code}), as a plain "
                             "http:// server does; check the URL's scheme and port")  # fmt: skip
        return UrlFailed(f"TLS failed ({code}); check the URL's scheme and port, or whether "
                         "the server shares a TLS version and cipher with this machine's "
                         "OpenSSL")  # fmt: skip
    if isinstance(e, TimeoutError | socket.timeout):
        return UrlFailed("timed out (no answer within the connect or read timeout)", True)
    if isinstance(e, ConnectionRefusedError):
        return UrlFailed("connection refused", True)
    if isinstance(e, ConnectionResetError | BrokenPipeError | http.client.RemoteDisconnected):
        return UrlFailed("connection reset", True)
    if isinstance(e, http.client.IncompleteRead):
        return UrlFailed("connection cut: answer incomplete", True)
    if isinstance(e, http.client.HTTPException | ValueError):
        return UrlFailed(f"bad answer: {type(e).__name__}")
    return UrlFailed(f"{NETWORK_ERROR}{e.strerror or e}", True)


class Prefetch:
    """A worker's URLs fetched ahead, in the order it will read them, `threads` at a time; a read of
    anything but the next URL fetches it then and there. Up to AHEAD_PER_THREAD x threads URLs (and
    HELD_BYTES of fetched bodies: past them a first try waits for reads) run ahead of the reads: a
    URL waiting out a Retry-After holds up the reads, not the fetching. A URL waiting for its retry
    holds no thread either: the retry is handed back to the pool when it is due (a thread asleep
    through each 1 s Retry-After left fewer fetching the rest), and the next free thread takes it
    before any first try still queued (behind them, a read waited on it until the window's first
    tries had all started). A Prefetch started for the next shard (`leaves`) fetches within what
    this one leaves of the window and bytes until `adopt` makes it the one read."""

    def __init__(
        self,
        fetcher: Fetcher,
        urls: Iterator[str],
        limit: int,
        window: tuple[int, int] | None = None,
    ) -> None:
        self.fetcher, self.limit = fetcher, limit
        self._urls = urls
        self._ahead: deque[tuple[str, Future]] = deque()
        # the most URLs ahead and bytes held: all of them, or what the shard read now leaves
        self._window, self._most_held = window or (self._full(), HELD_BYTES)
        self._held = 0  # bytes fetched and not yet read
        self._firsts = 0  # first tries queued, not yet started
        self._parked = 0  # pool tasks that left their first try queued, the bytes held at most
        self._exhausted = False  # every URL has been queued once
        self._then: Callable[[], None] | None = None  # called once every first try started
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(fetcher.policy.threads, "shardpack-fetch")
        # retries: a heap by time of (due, tie, url, its future, its tries, its deadline)
        self._due: list[tuple[float, int, str, Future, int, Deadline]] = []
        # tries to run, retries (0) before first tries (1), each in the order it came: a pool
        # task runs the first of them when a thread is free, not the try it was submitted for
        self._queued: list[tuple[int, int, str, Future, int, Deadline]] = []
        self._count = itertools.count()  # ties in the heaps: first come, first tried
        self._wake = threading.Condition(self._lock)
        self._stopped = False
        self._timer: threading.Thread | None = None  # started by the first retry
        self._read: Future | None = None  # the URL read last: a stop may leave it in flight
        try:
            self._fill()
        except BaseException:  # Ctrl-C while the first requests start: they end now too
            self.close()
            raise

    def _full(self) -> int:
        return AHEAD_PER_THREAD * self.fetcher.policy.threads

    def _fill(self) -> None:
        new: list[tuple[str, Future]] = []
        while len(self._ahead) < self._window and self._held < self._most_held:
            url = next(self._urls, None)
            if url is None:
                self._exhausted = True
                break
            new.append((url, Future()))
            self._ahead.append(new[-1])
        with self._lock:  # once for them all: the pool's threads take it for each try
            seconds = self.fetcher.policy.deadline
            for url, future in new:
                heapq.heappush(
                    self._queued, (True, next(self._count), url, future, 1, Deadline(seconds))
                )
            self._firsts += len(new)
            self._started_all()
        for _ in new:
            self._pool.submit(self._next)

    def adopt(self, then: Callable[[], None] | None) -> None:
        """Make this the Prefetch read now: the whole window and bytes, and `then` called once
        (under the lock, on the reader's thread or a fetching one) when every URL's first try
        has started: the rest are in flight or retries, and the next shard can start."""
        self._window, self._most_held = self._full(), HELD_BYTES
        with self._lock:
            self._then = then
            self._unpark()
        self._fill()

    def leaves(self) -> tuple[int, int]:
        """(URLs, bytes) of the window this one leaves to the next shard's Prefetch (a
        thread's worth at least); read under the lock, as `then` is called."""
        threads = self.fetcher.policy.threads
        return max(threads, self._window - len(self._ahead)), max(0, HELD_BYTES - self._held)

    def _started_all(self) -> None:
        """Under the lock: call `then` once every URL's first try has started."""
        if self._then is not None and self._exhausted and not self._firsts and not self._stopped:
            then, self._then = self._then, None
            then()

    def _next(self) -> None:
        """A pool task: the most urgent try queued (retries before first tries, each in the
        order it came), not the one this task was submitted for."""
        with self._lock:
            if not self._queued:  # dropped by close
                return
            if self._queued[0][0] and self._held >= self._most_held:
                # a first try waits for reads (none is of a URL ahead of the next read: those
                # started first); bodies fetched meanwhile were held whatever their bytes
                self._parked += 1
                return
            _, _, url, future, tries, deadline = heapq.heappop(self._queued)
            if tries == 1:
                self._firsts -= 1
                self._started_all()
        self._try(url, future, tries, deadline)

    def _try(self, url: str, future: Future, tries: int, deadline: Deadline) -> None:
        """One try of `url` on a pool thread: its body or its final failure into `future`, or
        its next try put off until due."""
        if tries == 1 and not future.set_running_or_notify_cancel():
            return  # passed over before its turn
        try:
            data = self.fetcher.once(url, self.limit, deadline)
        except UrlFailed as e:
            try:
                wait = self.fetcher.retry_in(e, tries, deadline)
            except UrlFailed as final:
                future.set_exception(final)
            else:
                self._later(time.monotonic() + wait, url, future, tries + 1, deadline)
        except BaseException as e:  # FileTooLarge, and whatever else: the reader's to raise
            future.set_exception(e)
        else:
            with self._lock:
                self._held += len(data)
            future.set_result(data)

    def _later(self, due: float, url: str, future: Future, tries: int, deadline: Deadline) -> None:
        with self._wake:
            if self._stopped:
                future.set_exception(UrlFailed("stopped before its retry"))
                return
            heapq.heappush(self._due, (due, next(self._count), url, future, tries, deadline))
            if self._timer is None:
                self._timer = threading.Thread(
                    target=self._retries, name="shardpack-retry", daemon=True
                )
                self._timer.start()
            self._wake.notify()

    def _retries(self) -> None:
        """The timer thread: each retry handed to the pool when due, until stopped."""
        with self._wake:
            while not self._stopped:
                if not self._due:
                    self._wake.wait()
                    continue
                wait = self._due[0][0] - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                _, _, *retry = heapq.heappop(self._due)
                heapq.heappush(self._queued, (False, next(self._count), *retry))
                self._pool.submit(self._next)

    def _forget(self, future: Future) -> None:
        """A fetched body leaves the bytes held: read, or passed over."""
        if not future.cancelled() and future.exception() is None:
            with self._lock:
                self._held -= len(future.result())
                self._unpark()

    def _unpark(self) -> None:
        """Under the lock: the first tries left waiting handed back to the pool, once the bytes
        held are under the most."""
        if self._parked and self._held < self._most_held and not self._stopped:
            for _ in range(self._parked):
                self._pool.submit(self._next)
            self._parked = 0

    def read(self, url: str, limit: int) -> bytes:
        if limit > self.limit or all(ahead != url for ahead, _ in self._ahead):
            return self.fetcher.get(url, limit)
        while self._ahead[0][0] != url:  # URLs the worker passed over: not waited for
            passed = self._ahead.popleft()[1]
            passed.cancel()
            passed.add_done_callback(self._forget)
        future = self._read = self._ahead.popleft()[1]
        try:
            data = future.result()
        finally:
            future.add_done_callback(self._forget)
            self._fill()
        if len(data) > limit:
            raise FileTooLarge(over_the_limit(limit))
        return data

    def close(self, fetcher: bool = True) -> None:
        """Stop fetching: at a shard's end every thread is idle and joined (a process that
        forks later forks no thread); after a failure, or a stop (Ctrl-C) while a read waited,
        they are not waited for: requests running end by their timeouts (at once where the
        Fetcher is closed) and retries not yet due are dropped. The Fetcher is closed too
        unless `fetcher` is False (the next shard's Prefetch fetches with it)."""
        done = not self._ahead and (self._read is None or self._read.done())
        for _, future in self._ahead:
            future.cancel()
        self._ahead.clear()
        with self._wake:
            self._stopped = True
            dropped = [f for *_, f, tries, _ in (*self._due, *self._queued) if tries > 1]
            self._due, self._queued = [], []
            self._wake.notify()
        for future in dropped:
            future.set_exception(UrlFailed("stopped before its retry"))
        if self._timer is not None:
            self._timer.join()
        self._pool.shutdown(wait=done, cancel_futures=True)
        if fetcher:
            self.fetcher.close()
