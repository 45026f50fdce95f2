"""Errors a user can act on: each message names the file and the fix."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from dataclasses import dataclass


def printable(text: str) -> str:
    """`text` with control characters, undecodable bytes and other unprintables escaped
    (a class folder named with a newline must not break a line of the summary); a byte of a
    name that os.fsdecode could not decode (kept as a surrogate) as the byte it is, \\xNN."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def _escaped(c: str) -> str:
    if "\udc80" <= c <= "\udcff":  # surrogateescape's undecodable byte
        return f"\\x{ord(c) - 0xDC00:02x}"
    return ascii(c)[1:-1]


def shortened(text: str, most: int = 40) -> str:
    """`text` for a message: whole, or its start and "..." where longer than `most`."""
    return text if len(text) <= most else text[: most - 3] + "..."


def plural(count: int, noun: str, many: str | None = None) -> str:
    """'1 shard', '2 shards', '1,000 images'."""
    return f"{count:,} {noun if count == 1 else many or noun + 's'}"


def classes_said(images: int, objects: int) -> str:
    """A dataset's classes in a few words: the images' ('2 classes'), else, where the images hold
    none, their objects' (COCO, YOLO, VOC: 'no image classes, 3 object classes'), else
    'unlabeled' (as pack's summary says it: not '0 classes', a class list misread)."""
    if not images and not objects:
        return "unlabeled"
    if images or not objects:
        return plural(images, "class", "classes")
    return f"no image classes, {plural(objects, 'object class', 'object classes')}"


def is_count(value: object, least: int = 1) -> bool:
    """Whether `value` is an int (a bool is none) of at least `least`: what a count takes."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def check_progress(progress: object) -> None:
    """A Python caller's progress callback, refused by name before any work unless callable (a
    call deep in the run failed on it once the records were read)."""
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be called with (done, total); got: {progress!r}")


def install_hint(extra: str) -> str:
    """The pip line that adds an extra; shardpack is installed from a checkout until published."""
    return (f"pip install '.[{extra}]' from shardpack's checkout (pip install "
            f"'shardpack[{extra}]' once published)")  # fmt: skip


@dataclass(frozen=True)
class Option:
    """A pack option (a PackOptions field) that a message names, with the value it says, if
    any: str() says it as a Python caller writes it, `on_error='skip'`, or `compression=`
    without one; the CLI says it as its flag, `--on-error skip` (options.as_flags)."""

    name: str
    value: object = ...  # ...: the option alone, no value

    def __str__(self) -> str:
        return f"{self.name}=" + (
            "" if self.value is ... else said_value(repr(self.value), self.value)
        )


@dataclass(frozen=True)
class Was(Option):
    """An option's earlier value (a journal's), said beside the option given now: str() says
    the value alone as Python gives it, `('a', 0.5)`; the CLI the flag that gives it, `--split
    a=0.5`, as the user would type it."""

    def __str__(self) -> str:
        return said_value(repr(self.value), self.value)


def earlier(name: str, value: object) -> str | Was:
    """An earlier value of option `name` as kept in JSON (a journal's, index.json's), said
    beside the option given now: as the option it is (Was: the CLI says its flag) where it is a
    short value of an option's kind; "unset" for none; else (a file written by hand) cut short."""
    if value is None:
        return "unset"
    value = python_value(value)
    said = printable(repr(value))
    return Was(name, value) if _option_like(value) and said == shortened(said) else shortened(said)


def _option_like(value: object) -> bool:
    """Whether `value` is what an option holds: a str, number or bool, or a tuple of them."""
    if isinstance(value, tuple):
        return all(map(_option_like, value))
    return isinstance(value, str | int | float | bool)


def python_value(value: object) -> object:
    """An option's value from JSON as Python gives it (a list as the tuple it was)."""
    return tuple(python_value(v) for v in value) if isinstance(value, list) else value


# What ends a message of an item that --on-error fail stopped the run at: the flag past it.
SKIP_HINT = ("pass ", Option("on_error", "skip"), " to leave it out")
# What a failed run's message says before resume: ShardpackError.without_resume looks for it
RERUN = "rerun with "
# The way on after a run stopped with shards written: a message's last clause.
RESUME_KEEPS = (RERUN, Option("resume", True), " to keep the shards already finished")


# A reason that names its own fix says it as a clause of its own that begins with a flag or
# with one of these verbs ("...: move it into its class's folder", "...; rename it", "...;
# --allow-private-urls fetches it"): the verbs the reasons of images, sources and fetch use.
_OWN_FIX = re.compile(
    r"(?:[;:]|, or|, then) (?:--[a-z]|(?:fix|rename|give|list|move|add|remove|repair|pass|check|"
    r"decode|drop|choose|convert|raise|lower|simplify|split|store|save|write|extract|fill|"
    r"prepare|pack|name|run|restore|install|set|use|delete|replace|rewrite|embed|place|serve|"
    r"try) )"  # a verb and its object: a host of that name (list.example.com) is none
)


def way_past(reason: str, *fix: str | Option) -> tuple[str | Option, ...]:
    """What follows an item's `reason` where --on-error fail stopped the run, so that the
    message reads as one sentence with one fix: the reason's own fix where it names one, else
    `fix` ("fix it" unless given), then the flag that skips the item instead."""
    if _OWN_FIX.search(reason):
        return (", or ", *SKIP_HINT)
    return ("; ", *(fix or ("fix it",)), ", or ", *SKIP_HINT)


def said_value(text: str, value: object) -> str:
    """A value's `text` for a message: escaped, and a collection's cut short (a path whole)."""
    return shortened(printable(text)) if isinstance(value, tuple | list) else printable(text)


def _rebuilt(cls: type, text: object) -> str | None:
    """The one-line message of a `cls` error out of the text a PyTorch DataLoader rebuilds it
    from when a worker raised it: `cls(text)`, text "Caught <cls> in DataLoader worker process
    N.\nOriginal Traceback ...", whose last line names the type and says the message. None:
    `text` is no such text."""
    if not isinstance(text, str) or not text.startswith(f"Caught {cls.__name__} "):
        return None
    said = f"{cls.__module__}.{cls.__qualname__}: "
    lines = [line for line in text.splitlines() if line.startswith(said)]
    return lines[-1].removeprefix(said) if lines else None


class ShardpackError(Exception):
    """Base class: the CLI prints the message on one line and exits with code 2.

    A message that names pack options is given in parts, text and Option, so that the option
    names travel as data (`options`) and each face says them its own way: str() as Python
    keywords, the CLI as flags. `raise SourceError(path, ": pass ", Option("root"), " DIR")`

    Every subclass can be made from its message alone, as a DataLoader's worker errors are
    (`type(error)(text)`): the user then sees our type and our line, not torch's RuntimeError.
    """

    def __init__(self, *parts: object) -> None:
        line = _rebuilt(type(self), parts[0]) if len(parts) == 1 else None
        super().__init__(*(parts if line is None else (line,)))

    def __str__(self) -> str:
        return self.said(str)

    def said(self, say: Callable[[Option], str]) -> str:
        """The message with each option it names said by `say`."""
        return "".join(say(part) if isinstance(part, Option) else str(part) for part in self.args)

    @property
    def options(self) -> tuple[str, ...]:
        """The PackOptions fields the message names, in its order."""
        return tuple(part.name for part in self.args if isinstance(part, Option))

    def without_resume(self, instead: str) -> ShardpackError:
        """This error for a run that cannot be resumed (the demo's, which removes what it
        made): its advice to rerun with resume said as `instead`; itself where it gives none."""
        parts = self.args
        at = next((i for i, p in enumerate(parts) if p == Option("resume", True)), 0)
        before = parts[at - 1] if at else None
        if not (isinstance(before, str) and before.endswith(RERUN)):
            return self
        return type(self)(*parts[: at - 1], before[: -len(RERUN)] + instead)


class OptionError(ShardpackError, ValueError):
    """A pack option, or a combination of them, is refused; `options` names them."""


class SourceError(ShardpackError):
    """SRC is missing, empty, unreadable or of a layout shardpack does not know."""


class UnsafePickleError(SourceError):
    """A CIFAR pickle asked for something the real files never contain."""


class ImageError(ShardpackError):
    """One image cannot be stored: empty, not an image, truncated or too large."""

    # (size, mtime in ns) of the file as the read that refused it saw it (the worker's, not
    # carried across processes): where the read itself refused it, empty or too large
    stamp: tuple[int, int] | None = None

    def __init__(self, key: str, *reason: str | Option) -> None:
        if not reason and (line := _rebuilt(type(self), key)) is not None:  # a worker's
            key, _, said = line.partition(": ")
            reason = (said,)
        super().__init__(f"{key}: ", *reason)
        self.key = key
        self.reason_parts = reason  # text and the options it names (Option)
        self.reason = "".join(map(str, reason))  # as recorded in the index

    def __reduce__(self):  # keep both fields when the error crosses a process boundary
        return (type(self), (self.key, *self.reason_parts))


# What a user can do about a failed file operation, by errno; any other errno gets _OS_FIX.
_OS_FIXES = {
    errno.EROFS: "choose a folder on a writable file system",
    errno.EACCES: "check the permissions of the file and its folder (or choose another)",
    errno.EPERM: "check the permissions of the file and its folder (or choose another)",
    errno.ENOSPC: "free some space",
    errno.EDQUOT: "free some space (the disk quota is used up)",
    errno.EFBIG: "free some space, or raise the file size limit (ulimit -f)",
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "a part of the path is a file, not a folder: check the path",
    errno.EISDIR: "it is a folder: pass a file",
    errno.ELOOP: "it is a symbolic link, which shardpack does not follow: pass the real path",
    errno.EMFILE: "this process has too many files open: raise its limit (ulimit -n)",
    errno.ENFILE: "the system has too many files open: close some, or raise its limit",
}
_OS_FIX = "check the path and its permissions"
# An object store's refusal (s3fs's Forbidden, Access Denied): as often the credentials as the
# object's permissions.
STORE_REFUSED_FIX = "check its permissions and the credentials"


def os_error_fix(error: OSError) -> str:
    """What to do about a failed file operation, in a few words."""
    if is_store_refusal(error):
        return STORE_REFUSED_FIX
    return _OS_FIXES.get(error.errno, _OS_FIX)


def is_machine_limit(error: OSError) -> bool:
    """Whether `error` is a limit of the process or the machine (too many open files), not a
    fault of the file it names."""
    return error.errno in (errno.EMFILE, errno.ENFILE)


def is_store_refusal(error: BaseException) -> bool:
    """Whether `error` is an object store refusing access: a PermissionError without the errno
    an operating system's call gives it (s3fs raises its 403s with none)."""
    return isinstance(error, PermissionError) and error.errno not in (errno.EACCES, errno.EPERM)


class FileAccessError(ShardpackError):
    """A file or folder cannot be read or written: permissions, a read-only or full disk."""

    def __init__(self, path: str | None, message: str | None = None) -> None:
        if message is None:  # the message alone (a DataLoader worker's error rebuilt)
            path, message = None, _rebuilt(type(self), path) or path
        super().__init__(message)
        self.path = path

    def __reduce__(self):
        return (type(self), (self.path, str(self)))

    @classmethod
    def from_os_error(cls, error: OSError, path: str | None = None) -> FileAccessError:
        """One line naming the path (given, or the one the error carries) and the fix."""
        path = path or (os.fsdecode(error.filename) if error.filename is not None else None)
        what = error.strerror or str(error)
        where = f"{path}: " if path else ""
        return cls(path, f"{where}{what}; {os_error_fix(error)}")


class OutputError(ShardpackError):
    """OUT cannot be written: it is a file, holds other data, is locked, or the disk is full."""

    @classmethod
    def folder_at(cls, path: str) -> OutputError:
        """A folder under a name a run writes, refused before the run writes anything."""
        return cls(f"{path}: is a folder where pack writes a file; move it out of OUT, or "
                   "choose another output folder")  # fmt: skip

    @classmethod
    def writing(cls, path: str, error: OSError) -> OutputError:
        """A one-line error for a failed write of a pack run, naming the path and what to do."""
        return cls(
            f"{path}: cannot write ({error.strerror or error}); {os_error_fix(error)}, then ",
            *RESUME_KEEPS,
        )


class MissingPackageError(ShardpackError, ImportError):
    """A package that an optional feature (a --format, a source) needs is not installed."""


class StorageError(ShardpackError):
    """A URL cannot be used: its filesystem package is missing, or an option is malformed."""


class WorkerDiedError(ShardpackError):
    """A worker process was killed mid-shard (the out-of-memory killer, a signal)."""


class IndexFormatError(ShardpackError):
    """index.json is missing, malformed, of an unknown version, or points outside OUT."""


# A RecordError's message, in its parts: the path, what its offset counts, the offset, why;
# else, a fault of the whole file, the path and why (patterns re compiles when a message is
# first rebuilt: most runs never do).
_RECORD_ERROR = r"(?P<path>.+?) at (?P<unit>byte|record) (?P<offset>\d+): (?P<reason>.*)"
_FILE_ERROR = r"(?P<path>.+?): (?P<reason>.*)"


# The mend for a damaged shard, as a fault's message says it where it knows the shard is
# damaged (cut short, replaced, a record failing its CRC) and as the CLI adds it to any other.
RESTORE_SHARD = "restore it from a copy or pack again"


class RecordError(ShardpackError):
    """A shard file is damaged: bad framing or CRC, cut short, or a record that does not decode.

    `offset` is a byte offset, or a record number where `unit` is "record" (ArrayRecord); None
    for a fault of the whole file (missing, of another size or record count than the index
    says), whose message then names the file alone: "at byte 0" would point at nothing.
    """

    def __init__(
        self, path: str, offset: int | None = None, reason: str | None = None, unit: str = "byte"
    ) -> None:
        line = None
        if reason is None:  # the message alone (a DataLoader worker's error rebuilt): its parts
            line = _rebuilt(type(self), path) or path
            if said := re.fullmatch(_RECORD_ERROR, line):
                path, unit, offset = said["path"], said["unit"], int(said["offset"])
            said = said or re.fullmatch(_FILE_ERROR, line)
            if said:
                path, reason = said["path"], said["reason"]
        where = path if offset is None else f"{path} at {unit} {offset}"
        super().__init__(line if reason is None else f"{where}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason
        self.unit = unit

    def __reduce__(self):
        return (type(self), (self.path, self.offset, self.reason, self.unit))


class ShardSizeError(RecordError):
    """A shard the index lists is missing, or of another size than it says: damaged, or OUT
    changed under a reader that holds an older index (the readers tell which, OutChangedError)."""


class OutChangedError(ShardpackError):
    """OUT was updated or packed again since a reader loaded its index.json: the shards that
    index lists are gone or rewritten, so the reader must open OUT again."""
