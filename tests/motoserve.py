"""moto's S3 server as tests/s3server.py starts it: `python -m tests.motoserve --port P` serves
moto's app as `python -m moto.server` does; with `--latency S`, behind `_Slowed`. A module of
its own, importing neither pytest nor the tests' helpers (numpy, OpenCV): a server starts
with moto's imports alone.

moto looks for the host of each request among the folders of its package, listed anew each
time (`moto.backends.list_of_moto_modules`: ~180 stat calls, ~2 ms of a 4-7 ms request); the
folders do not change while it runs, so the list is made once.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import threading
import time


class _Slowed:
    """moto's WSGI app with each GET of an object (a path /bucket/key, no query: not a listing)
    answered `latency` seconds late, the GETs counted and the most in flight at once kept;
    GET /_gets answers them as JSON ({"gets", "most", "held"}), POST /_gets sets them back to 0.
    POST /_hold?path=/bucket/key&until=N holds that object's next GET until N other GETs have
    been answered since it came (HOLD_S at most); "held" is then how many were, or None where
    HOLD_S ran out first."""

    HOLD_S = 10.0

    def __init__(self, app, latency: float) -> None:
        self.app, self.latency = app, latency
        self._lock = threading.Condition()
        self.gets = self.active = self.most = self.answered = 0
        self.hold: tuple[str, int] | None = None  # (path, GETs answered that release it)
        self.held: int | None = None  # GETs answered while the held one waited

    def __call__(self, environ, start_response):
        path, method = environ.get("PATH_INFO", ""), environ["REQUEST_METHOD"]
        if path in ("/_gets", "/_hold"):
            with self._lock:
                if path == "/_hold":
                    asked = dict(p.split("=", 1) for p in environ["QUERY_STRING"].split("&"))
                    self.hold, self.held = (asked["path"], int(asked["until"])), None
                elif method == "POST":
                    self.gets = self.most = 0
                body = json.dumps({"gets": self.gets, "most": self.most,
                                   "held": self.held}).encode()  # fmt: skip
            start_response("200 OK", [("Content-Type", "application/json"),
                                      ("Content-Length", str(len(body)))])  # fmt: skip
            return [body]
        if not (method == "GET" and path.count("/") >= 2 and not environ.get("QUERY_STRING")
                and not path.startswith("/moto-api/")):  # fmt: skip
            return self.app(environ, start_response)
        with self._lock:
            self.gets += 1
            self.active += 1
            self.most = max(self.most, self.active)
            held = self.hold if self.hold is not None and self.hold[0] == path else None
            since = self.answered
            if held is not None:
                self.hold = None
        try:
            time.sleep(self.latency)
            if held is not None:
                with self._lock:
                    released = self._lock.wait_for(lambda: self.answered - since >= held[1],
                                                   self.HOLD_S)  # fmt: skip
                    self.held = self.answered - since if released else None
            return list(self.app(environ, start_response))  # answered whole while counted
        finally:
            with self._lock:
                self.active -= 1
                self.answered += 1
                self._lock.notify_all()


def serve(argv: list[str] | None = None) -> None:
    """moto's server on 127.0.0.1 (as `python -m moto.server` runs it), its app behind _Slowed
    where --latency is given."""
    from moto import backends
    from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    listed = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = functools.partial(iter, listed)
    app = DomainDispatcherApplication(create_backend_app)
    if args.latency is not None:
        app = _Slowed(app, args.latency)
    run_simple("127.0.0.1", args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    serve()
