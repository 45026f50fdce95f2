"""Files that appear under their final name only when complete, and hashing them back."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from contextlib import suppress

_HASH_CHUNK = 1 << 20


def partial_path(path: str) -> str:
    """The hidden temporary name a file is written under before it is renamed into place."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.partial")


def remove_files(paths: Iterable[str]) -> None:
    """Remove each path that exists."""
    for path in paths:
        with suppress(FileNotFoundError):
            os.remove(path)


def write_atomic(path: str, data: bytes) -> None:
    """Write `data` under a temporary name, fsync it, then rename it to `path`.

    On any failure the temporary file is removed and `path` is left as it was.
    """
    tmp = partial_path(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        remove_files([tmp])
        raise


def write_json_atomic(path: str, document: object) -> None:
    """write_atomic for a JSON document, as readable UTF-8.

    A file name that is not UTF-8 (kept by Python as lone surrogates) is written as a JSON
    \\u escape, which reads back to the same name.
    """
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    write_atomic(path, text.encode("utf-8", "backslashreplace"))


def sha256_file(path: str) -> str:
    """The sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
