"""A real S3 API on loopback for the tests: moto's server in a process of its own, started once a
session, a fresh bucket per test, and the environment through which s3fs reaches it from the test
process and from every process the test starts (the CLI, its workers, Dask workers).

What s3fs 2026.9 does against moto 5.2 server (tests/storage/test_remote.py relies on it):
- `fs.open(path, "wb", block_size=5 MiB)` streams a multipart upload, opened with the first
  flushed part and visible in `fs.list_multipart_uploads(bucket)`; the key appears only at close.
- `f.discard()` aborts the upload but leaves `f.closed` False: when the object is collected, its
  `__del__` closes it again and prints an "Exception ignored" traceback on stderr (set
  `f.closed = True` after discarding).
- `fs.pipe_file(path, data, mode="create")` and `fs.open(path, "xb")` send If-None-Match: *;
  moto answers 412 for an existing key and s3fs raises FileExistsError. For a multipart "xb"
  the refusal comes at CompleteMultipartUpload, and s3fs leaves that upload open.
- moto reports every upload's `Initiated` as 2010-11-10: a stale upload cannot be told by age.

`start_server(log, latency=S)` runs moto's app behind `tests.motoserve._Slowed`: each GET of an
object answers S seconds late, as a remote store's round trip would, and the server counts the
GETs and the most in flight at once (`gets(endpoint)`); one object can be held back until other
GETs have been answered (`hold(endpoint, ...)`).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import die_with_parent

REGION = "us-east-1"
# Credentials and settings of the machine that runs the tests must not reach the server, and
# nothing may look for credentials beyond loopback (EC2's metadata address, SSO, a profile).
_UNSET = (
    "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE",
)  # fmt: skip
# A GET in the server's log (werkzeug's: its status colours aside): the path.
_REQUEST = re.compile(r'"(?:\x1b\[[0-9;]*m)*GET (\S+) HTTP/')
_LOGS: dict[str, Path] = {}  # endpoint -> its server's log


def environment(endpoint: str, home: Path) -> dict[str, str]:
    """The variables that point botocore (and so s3fs) at `endpoint` with dummy credentials."""
    no_proxy = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"]))
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": os.fspath(home / "config"),  # files that do not exist
        "AWS_SHARED_CREDENTIALS_FILE": os.fspath(home / "credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    """Whether moto's server answers on port (http.client: no proxy can intercept)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", "/moto-api/data.json")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def start_server(
    log: Path, timeout: float = 30, latency: float | None = None
) -> tuple[subprocess.Popen, str]:
    """Start moto's server (`python -m tests.motoserve`) on a free loopback port (with
    `latency`, its app behind `_Slowed`); return it and its endpoint URL."""
    for _ in range(3):  # another process may take the free port before the server binds it
        port = _free_port()
        argv = ["-m", "tests.motoserve", "--port", str(port)]
        if latency is not None:
            argv += ["--latency", str(latency)]
        with open(log, "ab") as sink:
            server = subprocess.Popen(
                [sys.executable, *argv], stdout=sink, stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent, cwd=Path(__file__).parent.parent,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while server.poll() is None and time.monotonic() < deadline:
            if _answers(port):
                return server, f"http://127.0.0.1:{port}"
            time.sleep(0.05)
        server.kill()
        server.wait()
    raise RuntimeError(f"moto's S3 server did not start; see {log}")


def reset(endpoint: str) -> None:
    """Drop every bucket, object and upload the server holds (moto's own reset call)."""
    port = int(endpoint.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/moto-api/reset")
        assert connection.getresponse().status == 200
    finally:
        connection.close()


@dataclass
class Bucket:
    """A test's own bucket on the loopback server, and an s3fs filesystem without caches."""

    name: str
    endpoint: str
    env: dict[str, str]  # what a process needs to reach the server (already in os.environ)
    fs: object  # s3fs.S3FileSystem, without caches (the session's: shared by every test)
    log: Path  # the server's log: a line per request

    def fetched(self, prefix: str = "") -> list[str]:
        """Keys under prefix of every GET of an object (not of a listing) so far, in order."""
        lines = self.log.read_text(errors="replace").splitlines()
        paths = (m[1] for m in map(_REQUEST.search, lines) if m is not None)
        keys = (p[len(self.name) + 2 :] for p in paths if p.startswith(f"/{self.name}/"))
        return [k for k in keys if k.startswith(prefix) and "?" not in k]

    def url(self, path: str = "") -> str:
        """s3://bucket/path."""
        return f"s3://{self.name}/{path}".rstrip("/")

    def keys(self, prefix: str = "") -> list[str]:
        """Every object's key under prefix (relative to prefix), sorted; fresh, not cached."""
        self.fs.invalidate_cache()
        base = f"{self.name}/{prefix}".rstrip("/")
        if not self.fs.exists(base):
            return []
        return sorted(p[len(base) + 1 :] for p in self.fs.find(base))

    def uploads(self, prefix: str = "") -> list[str]:
        """Keys of the multipart uploads open under prefix (neither completed nor aborted)."""
        uploads = self.fs.list_multipart_uploads(self.name)
        return sorted(u["Key"] for u in uploads if u["Key"].startswith(prefix))

    def read(self, key: str) -> bytes:
        """An object's bytes."""
        return self.fs.cat_file(f"{self.name}/{key}")

    def write(self, key: str, data: bytes) -> None:
        """Put an object, replacing any."""
        self.fs.pipe_file(f"{self.name}/{key}", data)

    def put_tree(self, local: Path, prefix: str) -> str:
        """Upload a local folder's files under prefix, as `aws s3 cp --recursive`; its URL."""
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            self.write(f"{prefix}/{path.relative_to(local).as_posix()}", path.read_bytes())
        return self.url(prefix)

    def get_tree(self, prefix: str, local: Path) -> Path:
        """Download every object under prefix into a local folder; the folder."""
        for key in self.keys(prefix):
            (local / key).parent.mkdir(parents=True, exist_ok=True)
            (local / key).write_bytes(self.read(f"{prefix}/{key}"))
        return local


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[str]:
    """moto's S3 server on loopback for the whole session; its endpoint URL."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    log = tmp_path_factory.mktemp("s3server") / "moto.log"
    server, endpoint = start_server(log)
    _LOGS[endpoint] = log
    try:
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=30)


_count = iter(range(1_000_000))
# endpoint -> the tests' s3fs filesystem on it: one a session, as a new one's client loads
# botocore's models again (~0.15 s of CPU); it keeps no listings, and nothing else a test
# could see
_filesystems: dict[str, object] = {}


@pytest.fixture
def s3(s3_server: str, request, monkeypatch, tmp_path_factory) -> Iterator[Bucket]:
    """A fresh bucket for one test, with os.environ set so that s3fs reaches the server here
    and in every subprocess the test starts; the server is emptied after the test."""
    import s3fs

    env = environment(s3_server, tmp_path_factory.getbasetemp())
    for name in _UNSET:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")
    name = f"t{next(_count)}-{slug}"[:63].rstrip("-")
    if s3_server not in _filesystems:  # made with the environment above, the same each test
        _filesystems[s3_server] = s3fs.S3FileSystem(skip_instance_cache=True,
                                                    use_listings_cache=False)  # fmt: skip
    fs = _filesystems[s3_server]
    fs.mkdir(name)
    try:
        yield Bucket(name, s3_server, env, fs, _LOGS[s3_server])
    finally:
        reset(s3_server)


def gets(endpoint: str, reset: bool = False) -> dict[str, int]:
    """The GETs of objects a server `start_server(latency=...)` started has answered, and the
    most it had in flight at once ({"gets", "most"}); with `reset`, both set back to 0 after."""
    port = int(endpoint.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/_gets")
        counted = json.loads(connection.getresponse().read())
        if reset:
            connection.request("POST", "/_gets")
            connection.getresponse().read()
        return counted
    finally:
        connection.close()


def hold(endpoint: str, path: str, until: int) -> None:
    """Hold the next GET of `path` (/bucket/key) on a server `start_server(latency=...)` started
    until `until` other GETs have been answered since it came; gets()["held"] says how many
    were (None: it was answered when the hold ran out, 10 s)."""
    port = int(endpoint.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", f"/_hold?path={path}&until={until}")
        connection.getresponse().read()
    finally:
        connection.close()
