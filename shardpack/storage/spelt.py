"""A missing local file found under another spelling of its path: in another case or Unicode
form, which the disks of macOS and Windows take for the same name and Linux's do not, so a
manifest written there names its files otherwise (`IMG_1.jpg` of `IMG_1.JPG`; "ü" as one
character of a name macOS wrote as `u` and a combining mark, NFD)."""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterable
from itertools import islice

# The most entries read of one folder while looking: a hint is not worth a huge listing.
MOST_LISTED = 100_000
# Of a source's missing images, the first this many are looked for under another spelling,
# each a few stats and listings: the first reasons say it for the rest.
LOOKED_FOR = 16


def folded(name: str) -> str:
    """A name as the disks of macOS and Windows compare names: in any case and Unicode form."""
    return unicodedata.normalize("NFC", name).casefold()


def alike(name: str, names: Iterable[str]) -> str | None:
    """The one of `names` alike `name` but for case and Unicode form; None where none or
    several are."""
    key = folded(name)
    found = [n for n in islice(names, MOST_LISTED) if folded(n) == key]
    return found[0] if len(found) == 1 else None


def spelt_otherwise(root: str, path: str) -> str | None:
    """`path` (under `root` unless absolute) as the disk spells it, where each missing part of
    it is the one entry of its folder alike but for case and Unicode form; None where a part is
    no entry's, or several's, or is one to look past ('..', an unreadable folder)."""
    here = "/" if path.startswith("/") else root
    found = []
    for part in path.strip("/").split("/"):
        if part in ("", ".", "..") or os.path.lexists(os.path.join(here, part)):
            found.append(part)
        else:
            try:
                with os.scandir(here) as entries:
                    other = alike(part, (entry.name for entry in entries))
            except OSError:
                return None
            if other is None:
                return None
            found.append(other)
        here = os.path.join(here, found[-1])
    spelt = ("/" if path.startswith("/") else "") + "/".join(found)
    return None if spelt == path or not os.path.exists(os.path.join(root, spelt)) else spelt


def how_spelt(path: str, spelt: str) -> str:
    """The end of the reason a manifest's `path` is missing, where the disk holds it as
    `spelt`: how the two differ, and the way on."""
    if unicodedata.normalize("NFC", path) == unicodedata.normalize("NFC", spelt):
        form, other = (("NFD", "NFC") if unicodedata.is_normalized("NFD", spelt)
                       else ("NFC", "NFD"))  # fmt: skip
        mac = {"NFD": " (as macOS writes names)", "NFC": ""}
        return (f", but it is there named in Unicode {form}{mac[form]}, which this disk tells "
                f"apart from the manifest's {other}{mac[other]}: write the manifest's paths in "
                f"{form}, or rename the files to {other} (convmv -f utf8 -t utf8 "
                f"--{other.lower()} -r FOLDER lists the renames)")  # fmt: skip
    return (f", but it is there as {spelt!r}, in another case, which this disk tells apart (the "
            "disks of macOS and Windows do not): write the manifest's paths as the files are "
            "named")  # fmt: skip
