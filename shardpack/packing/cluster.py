"""A Dask cluster for the shard tasks: its client (a LocalCluster's, or a scheduler's that has
workers), and the check that its workers share SRC and OUT with us. The tasks run through
daskpool.py. Nothing here imports `distributed` until a dask run is asked for (it is the `dask`
extra).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from shardpack.errors import Option, ShardpackError, install_hint
from shardpack.storage import Storage, storage_at
from shardpack.storage.failures import is_store_failure, said

# A scheduler's address as shardpack reaches it: HOST:PORT, plain TCP ([::1]:8786 for IPv6).
_ADDRESS = re.compile(
    r"^(?:tcp://)?(?:\[(?P<ip6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\s:/\[\]]+)):(?P<port>[0-9]{1,5})$"
)
_PROBE = ".shardpack-probe-"  # hidden, and of no pattern a reader or cleanup looks for
# How long a run waits for a scheduler's first worker (workers may be starting with it), and
# for one to come back where every worker left mid-run (daskpool).
WAIT_FOR_WORKERS_S = 30


class ClusterError(ShardpackError):
    """The cluster cannot be reached, or its workers do not share SRC and OUT with us."""


@contextmanager
def dask_client(scheduler: str | None, workers: int) -> Iterator[object]:
    """A distributed.Client on `scheduler`, or on a LocalCluster of `workers` processes."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ClusterError(Option("backend", "dask"), " needs the dask extra: ",
                           install_hint("dask")) from None  # fmt: skip
    import logging  # here: `shardpack.ClusterError` imports this module, and no logging

    if scheduler is None:
        # Loopback only: a Dask scheduler has no authentication, and runs what it is sent.
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            # its HTTP server starts whatever this says (None: on 8787, which a second run
            # finds taken): a free port, on loopback
            dashboard_address="127.0.0.1:0",
            host="127.0.0.1",
            # a stopped run cancels the tasks in flight, and each worker logged that as a
            # warning under the one line that says why the run stopped; and a worker closed
            # with a heartbeat in flight logged an error ('Failed to communicate with
            # scheduler during heartbeat'). What fails a run is said by the run itself.
            silence_logs=logging.CRITICAL,
            preload=[__name__],  # dask_setup below, in each worker
        )
        with cluster, Client(cluster) as client:
            yield client
        return  # its workers are up: LocalCluster waits for them
    address = _ADDRESS.match(scheduler)
    if address is None or not 1 <= int(address["port"]) <= 65535:
        # ucx:// and tls:// need settings shardpack does not pass; they failed in distributed
        raise ClusterError(Option("scheduler", scheduler), ": not an address shardpack can "
                           "reach; give it as HOST:PORT or tcp://HOST:PORT") from None  # fmt: skip
    import socket  # here: only a --scheduler run probes the network

    try:
        # A port nobody listens on is known at once; Dask would retry it for its whole timeout.
        host = address["ip6"] or address["host"]
        socket.create_connection((host, int(address["port"])), timeout=10).close()
        client = Client(scheduler, timeout="10s")
    except OSError as e:
        raise ClusterError(f"{scheduler}: cannot reach the Dask scheduler ({e}); check the "
                           "address and that a scheduler runs there (dask scheduler), or drop ",
                           Option("scheduler"), " for a local cluster") from None  # fmt: skip
    # it logged "Failed to reconnect to scheduler" above the line that says so (daskpool)
    logger = logging.getLogger("distributed.client")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    with client, _restored(logger, level):
        try:
            client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS_S)
        except TimeoutError:
            raise ClusterError(f"{scheduler}: the Dask scheduler has no workers (waited "
                               f"{WAIT_FOR_WORKERS_S} s); start them (dask worker {scheduler}), "
                               "or drop ", Option("scheduler"),
                               " for a local cluster") from None  # fmt: skip
        yield client


def dask_setup(worker) -> None:
    """Run by each worker of a LocalCluster as it starts (its preload): Ctrl-C, which the
    terminal sends to the whole process group, is the client's to handle (it stops its
    cluster); each worker printed a KeyboardInterrupt traceback above the line saying why the
    run stopped."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def _restored(logger, level: int) -> Iterator[None]:
    """Set `logger`'s level back to `level` when the block ends."""
    try:
        yield
    finally:
        logger.setLevel(level)


def _probe(src: Storage, out: Storage, token: str, first_item: str) -> str:
    """Run on a worker: write a probe file into OUT and look for one source file."""
    import socket

    name, where = f"{socket.gethostname()}-{os.getpid()}", src.path(first_item)
    try:
        if src.kind(first_item) != "file":
            return f"{name} cannot see {where}"
        where = out.root
        out.put(f"{_PROBE}{token}-{name}", b"")
    except Exception as e:  # a store's refusal too: a worker without its credentials
        if not is_store_failure(e):
            raise
        why = e.strerror if isinstance(e, OSError) and e.strerror else said(e, 200)
        return f"{name} cannot reach {where} ({why})"
    return ""


def _remove_probes(out: Storage, token: str) -> int:
    """Remove the probe files of `token` this machine sees in OUT; return how many."""
    try:
        probes = [e.name for e in out.listdir() if e.name.startswith(f"{_PROBE}{token}-")]
    except OSError:
        return 0
    out.remove(probes)
    return len(probes)


def check_shared_storage(client, src: Storage, out: Storage, first_item: str) -> None:
    """Every worker writes a probe file into OUT that we must then see, and finds SRC's files:
    a shared folder, or the same object store.

    Raises:
        ClusterError: a worker sees other storage than this process.
    """
    src = storage_at(src)
    token = uuid.uuid4().hex
    try:
        answers = client.run(_probe, src, out, token, first_item)
        seen = _remove_probes(out, token)
    finally:  # a worker on storage of its own removes the probe it left there
        with suppress(Exception):
            client.run(_remove_probes, out, token)
        _remove_probes(out, token)
    problems = [answer for answer in answers.values() if answer]
    if not problems and seen < len(answers):
        problems.append(f"{len(answers) - seen} workers wrote probe files this machine "
                        "cannot see")  # fmt: skip
    if problems:
        raise ClusterError(f"SRC and OUT must be on storage every Dask worker shares (the "
                           f"cluster at {client.scheduler.address}): {problems[0]}; "
                           f"{out.how_to_share}")  # fmt: skip
