"""`python -c CODE ARGS` in a child forked from a Python kept running that has imported numpy,
OpenCV, joblib and shardpack.cli already: a real process of its own (its pid, session, limits,
pipes, environment, cwd and exit code), without paying a fresh interpreter's start again (~0.35
s of CPU for `python -m shardpack pack`, most of what a test of a one-image pack costs; ~0.12 s
forked). shardpack.cli is what `python -m shardpack` has imported by the time its command runs;
shardpack/__main__.py itself runs in the child (its CPU sample, its collector's settings), and
the rest of shardpack is imported there as a fresh run imports it. numpy, OpenCV and joblib
read nothing of a run as they are imported (OpenBLAS's threads aside: see _BLAS).

A run whose environment names an S3 endpoint (AWS_ENDPOINT_URL, as tests/s3server.py's does) is
forked from a second server that has imported s3fs too (~0.4 s of CPU a run saved); not every
run is, as a child of a larger server pays more for its interpreter's teardown (~25 ms a run).
s3fs and what it loads (fsspec, aiohttp, botocore) read a few variables as they are imported
(_AT_IMPORT): a run whose environment differs from its server's there starts fresh.

Not for a run that is about its start: what it imports (or a package made missing before it
does), a signal as it starts, or a worker count the cost model picks (packing/cpuload measures
others' load over the start-up, which a fork does not have). Those keep a fresh interpreter.

A server of each kind a test process, started at its first run, reaped at its exit; a run at a
time of either (one asked for while another runs starts a fresh interpreter: see start).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import io
import json
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import time
from itertools import count

from tests.helpers import die_with_parent

# Imported before the first fork. OpenBLAS sizes its threads at numpy's import: the server sets
# what shardpack/__main__.py sets first, and hands a run whose environment says otherwise to a
# fresh interpreter (as it does one whose _AT_IMPORT variables differ from the server's).
PRELOADED = ("numpy", "cv2", "joblib", "shardpack.cli")
S3_PRELOADED = (*PRELOADED, "s3fs")
_BLAS = {"OPENBLAS_NUM_THREADS": "1"}
# What those imports read of the environment (besides _BLAS): Python's own variables, fsspec's
# configuration (FSSPEC_*, its folder under HOME), s3fs's log level, and aiohttp's and its
# helpers' switches for their compiled parts.
_AT_IMPORT = ("PYTHON", "FSSPEC_", "AIOHTTP_", "S3FS_", "WRAPT_", "HOME")
_AT_IMPORT_SUFFIX = "_NO_EXTENSIONS"
_SERVE = """
import gc, importlib, json, os, resource, socket, sys
os.environ.update(json.loads(sys.argv[2]))
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
channel = socket.socket(fileno=int(sys.argv[3]))
# out of the collector's sight: a child's collections (its last, at exit) would otherwise write
# to every page of them and copy each (~0.1 s of CPU a run)
gc.freeze()
while True:
    message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 3)
    if not message:
        raise SystemExit(0)  # the test process ended
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        break
    for fd in fds:
        os.close(fd)
    channel.send(json.dumps([request["id"], "pid", pid]).encode())
    status = os.waitpid(pid, 0)[1]
    channel.send(json.dumps([request["id"], "exit", os.waitstatus_to_exitcode(status)]).encode())
channel.close()
for target, fd in enumerate(fds):
    os.dup2(fd, target)
    os.close(fd)
if request["session"]:
    os.setsid()
for limit, value in request["limits"]:
    resource.setrlimit(limit, (value, value))
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
sys.argv = ["-c", *request["args"]]
_code = request["code"]
del _, channel, fd, fds, gc, importlib, json, message, name, os, pid, request, resource
del socket, sys, target
globals().pop("status", None)  # the run before's
exec(compile(globals().pop("_code"), "<string>", "exec"))
"""
_servers: dict[tuple[str, ...], list] = {}  # what it imported -> [Popen, socket, its
# _AT_IMPORT variables]: this process's servers
_ids = count()
_running: list = []  # the last Forked started: the server forks no other run till it ends


def _read_at_import(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if k.startswith(_AT_IMPORT) or k.endswith(_AT_IMPORT_SUFFIX)}  # fmt: skip


def _started(preloaded: tuple[str, ...]) -> list:
    """The connection to this process's server of `preloaded`, started if there is none (or
    it ended)."""
    if (server := _servers.get(preloaded)) and server[0].poll() is None:
        return server
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVE, json.dumps(preloaded), json.dumps(_BLAS),
         str(theirs.fileno())],
        pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )  # fmt: skip
    theirs.close()
    _servers[preloaded] = [server, ours, _read_at_import(os.environ)]
    atexit.register(_stop, server, ours)
    return _servers[preloaded]


def _stop(server: subprocess.Popen, channel: socket.socket) -> None:
    """End the server (it ends as its channel closes) and reap it: its CPU, and that of every
    run it forked, is counted as this process's children's."""
    channel.close()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


class Forked:
    """A run of `python -c code args` from the server, as subprocess.Popen(..., text=True) with
    stdout and stderr piped would be: its pid, stdout and stderr (text streams), poll, wait,
    communicate, send_signal, terminate, kill and returncode. The server reaps it and says its
    exit code; a signal goes to its real pid, unless that exit was heard already."""

    def __init__(
        self,
        code: str,
        *args: str,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        limits: tuple[tuple[int, int], ...] = (),
        start_new_session: bool = False,
    ):
        env = dict(os.environ if env is None else env)
        s3 = "AWS_ENDPOINT_URL" in env and importlib.util.find_spec("s3fs") is not None
        _, self._channel, imported = _started(S3_PRELOADED if s3 else PRELOADED)
        if _read_at_import(env) != imported or any(env.get(k, v) != v for k, v in _BLAS.items()):
            raise NotImplementedError("an environment the server was not started with")
        if any(run.poll() is None for run in _running):  # the server waits for it to end
            raise NotImplementedError("a run while another is running")
        self.id, self.returncode = next(_ids), None
        out, read_out = os.pipe()[::-1]
        err, read_err = os.pipe()[::-1]
        # as subprocess's text=True reads them: the locale's encoding, universal newlines
        self.stdout, self.stderr = open(read_out), open(read_err)  # noqa: SIM115
        request = {
            "id": self.id,
            "code": code,
            "args": list(args),
            "env": env,
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "session": start_new_session,
            "limits": list(limits),
        }
        try:
            socket.send_fds(self._channel, [json.dumps(request).encode()], [0, out, err])
        finally:
            os.close(out)
            os.close(err)
        self.pid = self._reply("pid", None)
        _running[:] = [self]

    def _reply(self, kind: str, deadline: float | None) -> int:
        """The server's next word on this run of `kind`, skipping those about earlier runs."""
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._channel.settimeout(left)
            try:
                message = self._channel.recv(4096)
            except (TimeoutError, BlockingIOError):  # BlockingIOError: no time left at all
                raise subprocess.TimeoutExpired(["forked"], left or 0) from None
            finally:
                self._channel.settimeout(None)
            if not message:
                raise AssertionError("the fork server ended")
            run, said, value = json.loads(message)
            if run == self.id and said == kind:
                return value

    def poll(self) -> int | None:
        """Its exit code if the server said it ended, else None (without waiting)."""
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.returncode = self._reply("exit", time.monotonic())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code once it ended; TimeoutExpired past `timeout`."""
        if self.returncode is None:
            deadline = None if timeout is None else time.monotonic() + timeout
            self.returncode = self._reply("exit", deadline)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """os.kill(pid, sig), unless it ended (its pid may be another's by then)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # ended since: as Popen's
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM it."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL it."""
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Its stdout and stderr (text) once it ended; TimeoutExpired past `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        streams = [stream for stream in (self.stdout, self.stderr) if not stream.closed]
        fds = [-1 if stream.closed else stream.fileno() for stream in (self.stdout, self.stderr)]
        chunks: dict[int, list[bytes]] = {fd: [] for fd in fds if fd >= 0}
        with selectors.DefaultSelector() as selector:
            for fd in chunks:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(["forked"], timeout)
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for stream in streams:
            stream.close()
        # as subprocess's text=True reads them: the locale's encoding, universal newlines
        return tuple(io.TextIOWrapper(io.BytesIO(b"".join(chunks.get(fd, [])))).read()
                     for fd in fds)  # fmt: skip


Child = Forked | subprocess.Popen  # what start gives


def start(code: str, *args: str, **options) -> Child:
    """Forked(code, *args, **options), or where the server cannot give the run the environment
    it asks for (or runs another still), `python -c code args` started as subprocess.Popen
    (text, stdout and stderr piped, the same options)."""
    try:
        return Forked(code, *args, **options)
    except NotImplementedError:
        limits = options.pop("limits", ())
        return subprocess.Popen(
            [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, preexec_fn=(lambda: [resource.setrlimit(k, (v, v)) for k, v in limits]),
            **options,
        )  # fmt: skip


def run(code: str, *args: str, timeout: float, **options) -> subprocess.CompletedProcess:
    """start(code, *args, **options) to its end, as subprocess.run(..., capture_output=True,
    text=True, timeout=timeout) would: past the timeout, the run (its session, if it has one
    of its own) is killed and TimeoutExpired raised."""
    child = start(code, *args, **options)
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill = os.killpg if options.get("start_new_session") else os.kill
        kill(child.pid, signal.SIGKILL)
        child.communicate()
        raise
    return subprocess.CompletedProcess(["python", "-c", code, *args], child.returncode, stdout,
                                       stderr)  # fmt: skip


# `python -m shardpack ARGS`: runpy sets sys.argv[0] to the module's file, as -m does.
SHARDPACK = "import runpy; runpy.run_module('shardpack', run_name='__main__', alter_sys=True)"
