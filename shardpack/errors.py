"""Errors a user can act on: each message names the file and the fix."""

from __future__ import annotations

import errno


class ShardpackError(Exception):
    """Base class: the CLI prints the message on one line and exits with code 2."""


class SourceError(ShardpackError):
    """SRC is missing, empty, unreadable or of a layout shardpack does not know."""


class UnsafePickleError(SourceError):
    """A CIFAR pickle asked for something the real files never contain."""


class ImageError(ShardpackError):
    """One image cannot be stored: empty, not an image, truncated or too large."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason

    def __reduce__(self):  # keep both fields when the error crosses a process boundary
        return (type(self), (self.key, self.reason))


class OutputError(ShardpackError):
    """OUT cannot be written: it is a file, holds other data, is locked, or the disk is full."""

    @classmethod
    def writing(cls, path: str, error: OSError) -> OutputError:
        """A one-line error for a failed write, naming the path and what to do."""
        full = error.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
        hint = "free some space" if full else "check the folder's permissions"
        return cls(
            f"{path}: cannot write ({error.strerror or error}); {hint}, then rerun with "
            "--resume to keep the shards already finished"
        )


class WorkerDiedError(ShardpackError):
    """A worker process was killed mid-shard (the out-of-memory killer, a signal)."""


class IndexFormatError(ShardpackError):
    """index.json is missing, malformed, of an unknown version, or points outside OUT."""


class RecordError(ShardpackError):
    """A TFRecord file is damaged: bad length or data CRC, or cut short."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path} at byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason

    def __reduce__(self):
        return (type(self), (self.path, self.offset, self.reason))
