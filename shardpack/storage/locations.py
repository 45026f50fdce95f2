"""Locations as text: local paths and fsspec URLs (scheme://...), told apart, made absolute,
normalised and joined, with no store asked. What a manifest's path column, --root, SRC and OUT
name is one of these before a Storage is rooted at it."""

from __future__ import annotations

import os
import posixpath
import re

# `scheme://`: what makes SRC or OUT an fsspec URL rather than a local path.
URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://")
# Schemes naming this machine's disk: what follows them is a local path.
LOCAL_SCHEMES = ("file", "local")


def shell_slip(given: object, name: str, instead: str) -> str | None:
    """Why `given` (the location `name`: SRC, OUT, --out) is text a shell left as it was, or
    None: an empty one (a variable left unset: `"$OUT"`) would be the current folder, and a
    quoted `~/data` a file or folder named `~` here. `instead`: what to pass for an empty one."""
    if not isinstance(given, str):
        return None
    if not given.strip():
        return f"{name} is an empty string ({given!r}); pass {instead}"
    if given.startswith("~") and os.path.expanduser(given) != given:
        return (
            f"{name} {given!r} starts with '~', which only a shell expands (was it quoted?); "
            f"pass {os.path.expanduser(given)!r}, or './{given}' for one named so here"
        )
    return None


def is_url(text: str | os.PathLike) -> bool:
    """Whether SRC or OUT names a URL (scheme://...) rather than a local path."""
    return isinstance(text, str) and URL.match(text) is not None


def is_data_url(text: str) -> bool:
    """Whether `text` is a data: URL (RFC 2397), an image held inline, not an address."""
    return text[:5].lower() == "data:"


def location_said(text: str) -> str:
    """What a message calls a manifest cell's location: "URL" (scheme://, data:) or "file name"."""
    return "URL" if is_url(text.strip()) or is_data_url(text) else "file name"


def unspaced_url(text: str) -> str:
    """A manifest cell's location: a URL with spaces around it (`, https://...`) as the URL,
    as an HTTP client takes it; anything else as it is (a file name may hold such spaces)."""
    stripped = text.strip()
    return stripped if stripped != text and is_url(stripped) else text


def is_relative(path: str) -> bool:
    """Whether a path (as a manifest row writes it) is relative to a root folder: neither a URL
    nor an absolute path."""
    return not (is_url(path) or os.path.isabs(path))


def local_file(location: str | os.PathLike) -> str | None:
    """The local path a location names, for a tool that writes a file itself (an image, a
    page); None for a URL."""
    text = os.fspath(location)
    return None if is_url(text) else text


def absolute(location: str | os.PathLike) -> str:
    """A local path made absolute (against the working folder); a URL as it is."""
    text = os.fspath(location)
    return text if is_url(text) else os.path.abspath(text)


def normal(location: str) -> str:
    """A location in its normal form (os.path.normpath); a URL keeps its scheme's "//"."""
    if "://" in location and is_url(location):
        scheme, _, rest = location.partition("://")
        return f"{scheme}://{posixpath.normpath(rest)}"
    return os.path.normpath(location)


def joined(root: str, path: str) -> str:
    """`path` (as a manifest row writes it) resolved against `root`: a URL or an absolute path
    stays itself, a relative one goes under root (a URL root: slash-joined and normalised)."""
    if is_url(path):
        return path
    if is_url(root):
        return path if os.path.isabs(path) else normal(f"{root.rstrip('/')}/{path}")
    return os.path.normpath(os.path.join(root, path))


def stays_under(path: str) -> bool:
    """Whether `path` names a file under whatever folder it is joined to: relative, no `..`
    part, no URL, no NUL."""
    return not (is_url(path) or path.startswith("/") or ".." in path.split("/") or "\0" in path)


def relative_to(location: str, root: str) -> str:
    """`location` relative to `root` where it lies under it, else as it is."""
    under = root.rstrip("/") + "/"
    return location[len(under) :] if location.startswith(under) else location
