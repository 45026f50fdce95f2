"""The state of OUT: one run at a time (lock), what may be replaced, and per-shard completion
records (the journal) that let an interrupted run resume.

Everything in OUT that this run did not just write is treated as hostile: no link is followed,
no special file is opened, reads are bounded, and only regular files under shard names (or our
own temporary names) are ever removed.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, fields

from shardpack.atomic import (
    is_regular,
    open_regular,
    remove_files,
    remove_temp_files,
    replace_with,
    sha256_file,
)
from shardpack.containers import is_shard_name
from shardpack.errors import IndexFormatError, OutputError, os_error_fix
from shardpack.index import INDEX_FILES_DIR, INDEX_NAME, METADATA_NAMES, load_index
from shardpack.plan import Plan, ShardResult

LOCK_NAME = ".shardpack.lock"
JOURNAL_NAME = ".shardpack.journal"
# A journal holds one line of a few hundred bytes per shard (more with many skipped images):
# 256 MiB is far past any real one; past it, the rest counts as a torn tail.
_JOURNAL_CAP = 256 << 20


@contextmanager
def locked(out: str, created: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on OUT for the block; a second run into the same OUT is refused.

    The kernel holds the lock (flock), so it ends with its process however that ends. The lock
    file is removed at the end while still locked; a run that locked a file since removed
    locks again, so two runs never hold different files. An OUT this run `created` is removed
    too when the block fails and left it empty.
    """
    path = os.path.join(out, LOCK_NAME)
    while True:
        fd = _open_lock(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise OutputError(
                f"{out}: another shardpack run (pid {owner}) is writing here; wait for it to "
                "finish, or choose another output folder"
            ) from None
        if _is_file_at(fd, path):
            break
        os.close(fd)  # the run before us removed this file as it finished: lock the new one
    failed = True
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)  # for the message above, nothing more
        yield
        failed = False
    finally:
        if _is_file_at(fd, path):
            with suppress(OSError):
                os.unlink(path)
        os.close(fd)
        if created and failed:
            with suppress(OSError):  # not empty: finished shards stay for --resume
                os.rmdir(out)


def _open_lock(path: str) -> int:
    try:
        return open_regular(path, os.O_RDWR | os.O_CREAT)
    except OSError as e:
        hint = (
            "it is a link or not a plain file, not shardpack's: remove it"
            if e.errno in (errno.ELOOP, errno.EINVAL, errno.EISDIR)
            else os_error_fix(e)
        )
        raise OutputError(f"{path}: cannot open the lock file ({e.strerror}); {hint}") from None


def _is_file_at(fd: int, path: str) -> bool:
    """Whether `path` (not followed) is still the file open as `fd`."""
    try:
        here, ours = os.lstat(path), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (ours.st_dev, ours.st_ino)


@dataclass(frozen=True)
class OutState:
    """What earlier runs left in OUT, read once before a run touches it."""

    names: frozenset[str]  # OUT's entries
    has_index: bool  # an index.json is there, readable or not
    digests: tuple[str | None, ...]  # plan digest of each record found; None where unreadable
    journal_digest: str | None  # the journal's plan digest, when it has a readable one
    finished: tuple[ShardResult, ...]  # the journal's well-formed shard entries
    listed: frozenset[str]  # shard file names the old index or journal say shardpack wrote

    @property
    def ours(self) -> bool:
        """OUT holds an index.json or a journal: shardpack wrote here."""
        return bool(self.digests)


def read_state(out: str) -> OutState:
    """Read OUT's index.json and journal once (no link followed, bounded reads).

    Raises:
        OutputError: the journal's name holds a link, a folder or another special file.
    """
    names = frozenset(os.listdir(out))
    digests: list[str | None] = []
    listed: set[str] = set()
    has_index = INDEX_NAME in names
    if has_index:
        document = _old_index(out)
        digest = document.get("plan_digest") if document is not None else None
        digests.append(digest if isinstance(digest, str) else None)
        if document is not None:  # load_index checked its shape
            listed |= {s["file"] for s in _index_shards(document)}
    header, finished = _read_journal(out) if JOURNAL_NAME in names else (None, ())
    journal_digest = None
    if header is not None:
        digest = header.get("plan_digest") if isinstance(header, dict) else None
        journal_digest = digest if isinstance(digest, str) else None
        digests.append(journal_digest)
    listed |= {r.file for r in finished}
    return OutState(
        names=names,
        has_index=has_index,
        digests=tuple(digests),
        journal_digest=journal_digest,
        finished=finished,
        listed=frozenset(f for f in listed if is_shard_name(f)),  # never anyone else's file
    )


def prepare(out: str, plan: Plan, overwrite: bool, resume: bool) -> tuple[set[str], list]:
    """Make OUT ready for `plan`, touching only files shardpack wrote or will write.

    OUT is shardpack's when it holds an index.json or a journal; then the shard files they
    list are ours. Otherwise any file under a name pack is about to write is the user's, and is
    replaced only with overwrite.

    Returns:
        (old shard files, listed by the old index or journal, that the new index drops;
        ShardResults of finished shards of this very plan whose sha256 matches, with resume).

    Raises:
        OutputError: OUT holds a different dataset or files of the user's under names pack
            writes (without overwrite), or a resume finds the options or the source changed.
    """
    state = read_state(out)
    if state.ours and set(state.digests) != {plan.digest} and not overwrite:
        what = (
            "was packed with other options or from a changed source"
            if resume
            else "already holds a different dataset"
        )
        raise OutputError(
            f"{out}: {what}; pass --overwrite to start over, or choose another output folder"
        )
    planned = {spec.file for spec in plan.shards}
    if not state.ours and not overwrite:
        clash = sorted(state.names & (planned | {INDEX_NAME, *METADATA_NAMES}))
        if clash:
            raise OutputError(
                f"{os.path.join(out, clash[0])}: exists and was not written by shardpack "
                f"({len(clash)} such files); choose an empty folder, or pass --overwrite to "
                "replace them"
            )
    # Only shards of this very plan are kept, whatever --overwrite says.
    same_plan = resume and state.journal_digest == plan.digest
    reused = _reusable(out, state.finished, planned) if same_plan else []
    if state.has_index:
        remove_files([os.path.join(out, INDEX_NAME)])
    rewritten = planned | state.listed
    remove_temp_files(out, rewritten | {INDEX_NAME, JOURNAL_NAME, *METADATA_NAMES})
    idx = os.path.join(out, INDEX_FILES_DIR)
    if os.path.isdir(idx) and not os.path.islink(idx):  # never into a folder a link points at
        kept = {r.file for r in reused}
        remove_temp_files(idx, {f"{f}.idx" for f in rewritten})
        remove_files(os.path.join(idx, f"{f}.idx") for f in rewritten - kept)
    return state.listed - planned, reused


def _old_index(out: str) -> dict | None:
    """The old index document, or None when it is unreadable or not a plain file."""
    if not is_regular(os.path.join(out, INDEX_NAME)):
        return None
    try:
        return load_index(out).raw
    except IndexFormatError:
        return None


def _index_shards(document: dict) -> Iterator[dict]:
    for split in document["splits"].values():
        yield from split["shards"]


def _read_journal(out: str) -> tuple[object, tuple[ShardResult, ...]]:
    """The journal's first line (its header) and its well-formed shard entries, up to the first
    line that is not JSON (a crash's torn line). (None, ()) for an empty journal."""
    path = os.path.join(out, JOURNAL_NAME)
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return None, ()
    except OSError as e:
        raise OutputError(
            f"{path}: not shardpack's journal ({e.strerror}: a link, a folder or a special "
            "file); remove it"
        ) from None
    with open(fd, "rb") as f:
        lines = f.read(_JOURNAL_CAP).splitlines()
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:  # UnicodeDecodeError included
            break
    if not entries:
        return None, ()
    results = (_shard_result(entry) for entry in entries[1:])
    return entries[0], tuple(r for r in results if r is not None)


_RESULT_FIELDS = frozenset(f.name for f in fields(ShardResult))


def _shard_result(entry: object) -> ShardResult | None:
    """A journal line as a ShardResult, or None when it is not one this version wrote."""
    if not isinstance(entry, dict) or set(entry) != _RESULT_FIELDS:
        return None
    ints = ("index", "num_records", "num_bytes")
    good = (
        all(type(entry[k]) is int and entry[k] >= 0 for k in ints)
        and all(isinstance(entry[k], str) for k in ("split", "file", "sha256"))
        and is_shard_name(entry["file"])
        and isinstance(entry["seconds"], int | float)
        and isinstance(entry["label_counts"], list)
        and all(type(c) is int for c in entry["label_counts"])
        and isinstance(entry["skipped"], list)
        and all(
            isinstance(s, list) and len(s) == 2 and all(isinstance(x, str) for x in s)
            for s in entry["skipped"]
        )
    )
    if not good:
        return None
    return ShardResult(**{**entry, "label_counts": tuple(entry["label_counts"]),
                          "skipped": tuple(map(tuple, entry["skipped"]))})  # fmt: skip


def _reusable(out: str, finished: tuple[ShardResult, ...], planned: set[str]) -> list[ShardResult]:
    """Finished shards the plan still has whose bytes are intact (a regular file, same sha256)."""
    reused = []
    for result in finished:
        path = os.path.join(out, result.file)
        if result.file not in planned:
            continue
        try:  # sha256_file opens no link and nothing but a regular file: OSError otherwise
            intact = sha256_file(path) == result.sha256
        except OSError:
            continue
        if intact:
            reused.append(result)
    return reused


class Journal:
    """Append-only completion records: the plan digest, then one line per finished shard.

    The file is written (under a temporary name, then renamed) only when the first shard of
    this run lands, so a run that fails before that leaves the old journal as it was; it is
    then kept open and appended to, never opened by name again.
    """

    def __init__(self, out: str, digest: str, reused: list[ShardResult]) -> None:
        self.path = os.path.join(out, JOURNAL_NAME)
        self._head = [{"plan_digest": digest}, *map(asdict, reused)]
        self._file = None

    def add(self, result: ShardResult) -> None:
        """Record a finished shard durably (its file was fsynced before its rename)."""
        lines = [*self._head, asdict(result)] if self._file is None else [asdict(result)]
        data = "".join(json.dumps(line) + "\n" for line in lines).encode("ascii")  # any name
        if self._file is None:
            self._file = open(replace_with(self.path, data), "ab")  # noqa: SIM115 (close())
            return
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the journal file, if this run wrote one."""
        if self._file is not None:
            self._file.close()
