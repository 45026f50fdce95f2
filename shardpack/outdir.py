"""The state of OUT: one run at a time (lock), what may be replaced, and per-shard completion
records (the journal) that let an interrupted run resume."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict

from shardpack.atomic import remove_files, sha256_file
from shardpack.errors import IndexFormatError, OutputError
from shardpack.index import (
    INDEX_FILES_DIR,
    INDEX_NAME,
    METADATA_NAMES,
    SAFE_FILE,
    load_index,
)
from shardpack.plan import Plan, ShardResult

LOCK_NAME = ".shardpack.lock"
JOURNAL_NAME = ".shardpack.journal"


@contextmanager
def locked(out: str) -> Iterator[None]:
    """Hold an exclusive lock on OUT for the block; a second run into the same OUT is refused.

    The kernel holds the lock (flock), so it ends with its process however that ends; the
    lock file itself stays, since removing it would let a third run lock a different file.
    """
    path = os.path.join(out, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise OutputError(
                f"{out}: another shardpack run (pid {owner}) is writing here; wait for it to "
                "finish, or choose another output folder"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)  # for the message above, nothing more
        yield
    finally:
        os.close(fd)


def prepare(
    out: str, plan: Plan, overwrite: bool, resume: bool
) -> tuple[set[str], list[ShardResult]]:
    """Make OUT ready for `plan`, touching only files shardpack wrote or will write.

    OUT is shardpack's when it holds an index.json or a journal; then the files they list
    are ours. Otherwise any file under a name pack is about to write is the user's, and is
    replaced only with overwrite.

    Returns:
        (old shard files, listed by the old index or journal, that the new index drops;
        ShardResults of finished shards whose journal entry and sha256 match, with resume).

    Raises:
        OutputError: OUT holds a different dataset or files of the user's under names pack
            writes (without overwrite), or a resume finds the options or the source changed.
    """
    names = set(os.listdir(out))
    old_index = _old_index(out) if INDEX_NAME in names else None
    journal = _journal_entries(out)
    digests = {d for d in (_digest_of(old_index), _digest_of(journal[:1])) if d is not None}
    if digests and digests != {plan.digest} and not overwrite:
        what = (
            "was packed with other options or from a changed source"
            if resume
            else ("already holds a different dataset")
        )
        raise OutputError(
            f"{out}: {what}; pass --overwrite to start over, or choose another output folder"
        )
    planned = {spec.file for spec in plan.shards}
    if old_index is None and not journal and not overwrite:
        clash = sorted(names & (planned | {INDEX_NAME, *METADATA_NAMES}))
        if clash:
            raise OutputError(
                f"{os.path.join(out, clash[0])}: exists and was not written by shardpack "
                f"({len(clash)} such files); choose an empty folder, or pass --overwrite to "
                "replace them"
            )
    reused = _reusable(out, journal, planned) if resume else []
    listed = _listed(old_index, journal)
    remove_files([os.path.join(out, INDEX_NAME)] if old_index is not None else [])
    rewritten = planned | listed
    remove_files(
        os.path.join(out, f".{name}.{kind}")
        for name in rewritten | {INDEX_NAME, *METADATA_NAMES}
        for kind in ("partial", "progress")
    )
    kept = {r.file for r in reused}
    remove_files(os.path.join(out, INDEX_FILES_DIR, f"{f}.idx") for f in rewritten - kept)
    return listed - planned, reused


def _old_index(out: str) -> dict | str:
    """The old index document, or "unreadable" (its shard names are then not trusted)."""
    try:
        return load_index(out).raw
    except IndexFormatError:
        return "unreadable"


def _digest_of(source: dict | str | list | None) -> str | None:
    if source is None or source == []:
        return None
    document = source[0] if isinstance(source, list) else source
    digest = document.get("plan_digest") if isinstance(document, dict) else None
    return digest if isinstance(digest, str) else "unknown"


def _listed(old_index: dict | str | None, journal: list) -> set[str]:
    """Shard file names the old index and journal say shardpack wrote (plain names only)."""
    names = set()
    if isinstance(old_index, dict):  # load_index checked every name
        names |= {s["file"] for split in old_index["splits"].values() for s in split["shards"]}
    names |= {e["file"] for e in journal[1:] if isinstance(e, dict) and isinstance(
        e.get("file"), str) and SAFE_FILE.fullmatch(e["file"])}  # fmt: skip
    return names


def _journal_entries(out: str) -> list:
    """The journal's lines, parsed, up to the first that is not JSON (a crash's torn line)."""
    try:
        with open(os.path.join(out, JOURNAL_NAME), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return []
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            break
    return entries


def _reusable(out: str, journal: list, planned: set[str]) -> list[ShardResult]:
    """Finished shards whose journal entry matches the plan and whose bytes are intact."""
    reused = []
    for entry in journal[1:]:
        try:
            result = ShardResult(**{**entry, "label_counts": tuple(entry["label_counts"]),
                                    "skipped": tuple(map(tuple, entry["skipped"]))})  # fmt: skip
        except (TypeError, KeyError, ValueError):
            continue  # not an entry this version wrote: redo that shard
        path = os.path.join(out, result.file)
        if result.file in planned and os.path.isfile(path) and (sha256_file(path) == result.sha256):
            reused.append(result)
    return reused


class Journal:
    """Append-only completion records: the plan digest, then one line per finished shard."""

    def __init__(self, out: str, digest: str, reused: list[ShardResult]) -> None:
        self.path = os.path.join(out, JOURNAL_NAME)
        with open(self.path, "w", encoding="ascii") as f:
            f.write(json.dumps({"plan_digest": digest}) + "\n")
        for result in reused:
            self.add(result)

    def add(self, result: ShardResult) -> None:
        """Record a finished shard durably (its file was fsynced before its rename)."""
        with open(self.path, "a", encoding="ascii") as f:
            f.write(json.dumps(asdict(result)) + "\n")  # ASCII: any file name survives
            f.flush()
            os.fsync(f.fileno())
