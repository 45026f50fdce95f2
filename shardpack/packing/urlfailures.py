"""OUT/failures.jsonl: every http(s) image URL a pack skipped, with why, one JSON object a line
(url, split, status, error, reason), for a person to read and a rerun to retry exactly those.
img2dataset keeps the same in each shard's Parquet (status, error_message)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable

from shardpack.layout import FAILURES_NAME
from shardpack.packing.stats import reason_kind
from shardpack.storage import Storage
from shardpack.storage.urlpolicy import is_web_url, status_of


def url_failures(skipped: Iterable[tuple[str | None, str, str]]) -> list[dict]:
    """One row per skipped item whose key is an http(s) URL, of (split or None, key, reason)
    triples: url, split, the HTTP status (None: no answer, or not an HTTP failure), the error's
    kind (what the index's statistics count it by) and the whole reason."""
    return [
        {"url": key, "split": split, "status": status_of(reason), "error": reason_kind(reason),
         "reason": reason}
        for split, key, reason in skipped
        if is_web_url(key)
    ]  # fmt: skip


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
