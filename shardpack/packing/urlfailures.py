"""OUT/failures.jsonl: every http(s) image URL a pack skipped, with why, one JSON object a line
(url, file, row, split, status, error, reason), for a person to find in the list and a grow to
retry (`pack --update` asks the transient ones again). img2dataset keeps the same in each
shard's Parquet (status, error_message)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable

from shardpack.layout import FAILURES_NAME
from shardpack.packing.contents import Contents
from shardpack.packing.stats import reason_kind
from shardpack.sources import Dataset
from shardpack.sources.tables.files import named_line
from shardpack.storage import Storage
from shardpack.storage.imageroot import INLINE, NOT_WEB
from shardpack.storage.urlpolicy import is_transient, is_web_url, status_of

# (manifest file name, line or row) of each URL the scan listed: ImageRoot.rows_of
RowsOf = Callable[[Iterable[str]], dict[str, tuple[str, int]]]


def url_failures(
    skipped: Iterable[tuple[str | None, str, str]],
    rows_of: RowsOf | None = None,
    listing: bool = False,
) -> list[dict]:
    """One row per skipped item whose key is an http(s) URL, of (split or None, key, reason)
    triples, and with `listing` (the dataset is a URL list: lists_urls) one per bad row of
    the list naming no http(s) URL (no image, a URL of another scheme, a line of the wrong
    width): url (the row's image as listed; None: it names none), the manifest file and line
    (or Parquet row) that lists it (None: not known), split, the HTTP status (None: no answer,
    or not an HTTP failure), the error's kind (what the index's statistics count it by; "bad
    row" for a row the scan refused) and the whole reason."""
    failed = [(split, key, reason) for split, key, reason in skipped
              if is_web_url(key) or (listing and _line_of(key, reason) is not None)]  # fmt: skip
    rows = _rows(failed, rows_of)
    found = []
    for split, key, reason in failed:
        bad, (file, row) = _where(key, reason, rows)
        if named_line(f"{key}: ") is not None:  # a row known by its line, which names it
            url, reason = None, f"{key}: {reason}"
        else:
            url = key
        found.append({"url": url, "file": file, "row": row, "split": None if bad else split,
                      "status": status_of(reason), "reason": reason,
                      "error": "bad row" if bad else reason_kind(reason)})  # fmt: skip
    # in the list's order, whichever shard finished first
    return sorted(found, key=lambda f: _listed(f["file"], f["row"], f["url"] or ""))


def lists_urls(dataset: Dataset, skipped: Iterable[tuple[str | None, str, str]]) -> bool:
    """Whether a dataset is a URL list, whose bad rows failures.jsonl holds too: its scan
    listed an http(s) URL (a list read whole: its root knows), or (a streamed list, whose rows
    no process holds) one of its skips is an http(s) URL or a URL list's row naming none
    (else its ranges tell: rangeplan.ranges_list_urls)."""
    if getattr(dataset.root, "listed_urls", lambda: False)():
        return True
    return any(is_web_url(key) or reason.endswith((NOT_WEB, INLINE)) for _, key, reason in skipped)


def is_bad_row(key: str, reason: str) -> bool:
    """Whether a (key, reason) skip is a manifest's bad row (it names its file and line)."""
    return _line_of(key, reason) is not None


def first_listed(skipped: list[tuple[str, str]], rows_of: RowsOf | None) -> tuple[str, str]:
    """Of (key, reason) skips (at least one), the one a list names first, as failures.jsonl
    orders them: by the manifest file and line that lists it, then (no line known: not a URL
    list's) by key."""
    rows = _rows([(None, key, reason) for key, reason in skipped if is_web_url(key)], rows_of)
    return min(skipped, key=lambda skip: _listed(*_where(*skip, rows)[1], skip[0]))


def _rows(failed: list[tuple], rows_of: RowsOf | None) -> dict[str, tuple[str, int]]:
    """Where the scan listed each of the (split, URL, reason) failures' URLs, where known."""
    return rows_of(key for _, key, _ in failed) if rows_of is not None and failed else {}


def _where(
    key: str, reason: str, rows: dict[str, tuple[str, int]]
) -> tuple[bool, tuple[str | None, int | None]]:
    """Whether a skip is a bad row, and the manifest file and line (or row) that lists it: a
    bad row names its own (its URL's good row, if any, is another line), else where the scan
    listed its URL ((None, None): not known)."""
    bad = _line_of(key, reason)
    return bad is not None, bad or rows.get(key, (None, None))


def _line_of(key: str, reason: str) -> tuple[str, int] | None:
    """The (file name, line) of a bad row: its reason's first words name it, or its key does
    (a row of no image: "urls.csv line 7"); None for any other skip."""
    return named_line(reason) or named_line(f"{key}: ")


def _listed(file: str | None, row: int | None, key: str) -> tuple:
    """Where a skip is listed, those of no known row last (by key)."""
    return (row is None, file or "", row or 0, key)


def rows_of(dataset: Dataset) -> RowsOf | None:
    """Where the scan listed each URL: a URL list's root knows (storage.imageroot.ImageRoot),
    other sources' roots do not."""
    return getattr(dataset.root, "rows_of", None)


def counts(failures: list[dict]) -> dict[str, int]:
    """How many URLs failed for each kind of error, most first."""
    return dict(Counter(row["error"] for row in failures).most_common())


def write_failures(out: Storage, failures: list[dict]) -> None:
    """OUT/failures.jsonl of these rows, in one put (whole or absent); an earlier run's is
    removed when this run has none."""
    if not failures:
        out.remove([FAILURES_NAME])
        return
    lines = (json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in failures)
    out.put(FAILURES_NAME, "".join(lines).encode())


def retried(held: Contents) -> tuple[Contents, frozenset[str]]:
    """What OUT holds without the skips of the URLs whose failure a retry may mend (HTTP 5xx,
    429, a timeout, a reset), and those URLs: a grow without their skips finds them new, and
    fetches them again."""
    again = frozenset(key for key, why in held.skips() if is_web_url(key) and is_transient(why))
    return held.without_skips(again), again
