"""The state of OUT: one run at a time (lock), what may be replaced, and per-shard completion
records (the journal) that let an interrupted run resume."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict

from shardpack.errors import OutputError
from shardpack.index import INDEX_NAME
from shardpack.plan import Plan
from shardpack.worker import ShardResult

LOCK_NAME = ".shardpack.lock"
JOURNAL_NAME = ".shardpack.journal"
# Files shardpack writes into OUT; nothing else there is ever removed.
_OURS = re.compile(
    r"^(index\.json|dataset_info\.json|features\.json|[a-z_]+\.labels\.txt"
    r"|.+\.tfrecord-\d{5}-of-\d{5}|\..+\.(partial|progress))$"
)
_HASH_CHUNK = 1 << 20


def remove_files(paths: Iterable[str]) -> None:
    """Remove each path that exists."""
    for path in paths:
        with suppress(FileNotFoundError):
            os.remove(path)


@contextmanager
def locked(out: str) -> Iterator[None]:
    """Hold OUT/.shardpack.lock for the block; a second run into the same OUT is refused.

    A lock left by a process that no longer exists (on this machine) is taken over.
    """
    path = os.path.join(out, LOCK_NAME)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileExistsError:
            pid = _lock_owner(path)
            if pid is not None and _alive(pid):
                raise OutputError(
                    f"{out}: another shardpack run (pid {pid}) is writing here; wait for it to "
                    f"finish, or remove {path} if that process is gone"
                ) from None
            remove_files([path])  # stale: its owner died without cleaning up
    else:
        raise OutputError(f"{path}: cannot take the lock; remove it and retry")
    try:
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        yield
    finally:
        remove_files([path])


def _lock_owner(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prepare(out: str, plan: Plan, overwrite: bool, resume: bool) -> tuple[set[str], list]:
    """Make OUT ready for `plan`.

    Returns:
        (names of our old shard files that the new index will not list, ShardResults of
        finished shards that can be reused because their journal entry and sha256 match).

    Raises:
        OutputError: OUT holds a different dataset (without overwrite), or a resume finds
            that the options or the source changed.
    """
    names = set(os.listdir(out))
    digests = {_index_digest(out), _journal_digest(out)} - {None}
    if digests and digests != {plan.digest} and not overwrite:
        what = (
            "was packed with other options or from a changed source"
            if resume
            else ("already holds a different dataset")
        )
        raise OutputError(
            f"{out}: {what}; pass --overwrite to start over, or choose another output folder"
        )
    reused = _reusable(out, plan) if resume else []
    ours = {n for n in names if _OURS.match(n)}
    if INDEX_NAME in ours:
        os.remove(os.path.join(out, INDEX_NAME))  # no index may point at shards being rewritten
    remove_files(os.path.join(out, n) for n in ours if n.startswith("."))
    return {n for n in ours if ".tfrecord-" in n and not n.startswith(".")}, reused


def _index_digest(out: str) -> str | None:
    try:
        with open(os.path.join(out, INDEX_NAME), encoding="utf-8") as f:
            return json.load(f).get("plan_digest") or "unknown"
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError):
        return "unknown"


def _journal_lines(out: str) -> list[dict]:
    try:
        with open(os.path.join(out, JOURNAL_NAME), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            break  # a line cut short by a crash ends the journal
    return entries


def _journal_digest(out: str) -> str | None:
    entries = _journal_lines(out)
    return entries[0].get("plan_digest", "unknown") if entries else None


def _reusable(out: str, plan: Plan) -> list[ShardResult]:
    """Finished shards whose journal entry matches the plan and whose bytes are intact."""
    import hashlib

    planned = {spec.file for spec in plan.shards}
    reused = []
    for entry in _journal_lines(out)[1:]:
        try:
            result = ShardResult(**{**entry, "label_counts": tuple(entry["label_counts"]),
                                    "skipped": tuple(map(tuple, entry["skipped"]))})  # fmt: skip
        except TypeError:
            continue
        path = os.path.join(out, result.file)
        if result.file not in planned or not os.path.isfile(path):
            continue
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(_HASH_CHUNK):
                digest.update(chunk)
        if digest.hexdigest() == result.sha256:
            reused.append(result)
    return reused


class Journal:
    """Append-only completion records: the plan digest, then one line per finished shard."""

    def __init__(self, out: str, digest: str, reused: list[ShardResult]) -> None:
        self.path = os.path.join(out, JOURNAL_NAME)
        with open(self.path, "w", encoding="utf-8") as f:
            f.write(json.dumps({"plan_digest": digest}) + "\n")
        for result in reused:
            self.add(result)

    def add(self, result: ShardResult) -> None:
        """Record a finished shard durably (its file was fsynced before its rename)."""
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(result), ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
