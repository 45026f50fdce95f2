"""JSONL manifests as chunks: one JSON object a line, decoded by json's C scanner."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import BinaryIO

from shardpack.errors import printable, shortened
from shardpack.sources.tables import chunks
from shardpack.sources.tables.cells import HugeInt
from shardpack.sources.tables.chunks import Chunk, text_blocks


def jsonl_chunks(path: str, f: BinaryIO, first_line: int = 0) -> Iterator[Chunk]:
    """The file's records as chunks; `f` may start `first_line` lines in (a streamed range)."""
    lines, records, problems = [], [], []
    n = first_line
    for block in text_blocks(path, f, first_line):
        for text in block:
            n += 1
            body = text.strip(_JSON_SPACE)
            try:  # json's C scanner as json.loads calls it, less its Python (1/3 of the time)
                record, end = _SCAN(body, 0)
            except (StopIteration, ValueError, RecursionError):
                record, end = None, -1
            if end != len(body) or type(record) is not dict:
                if not text.strip():
                    continue  # a blank line
                record = _json_line(text)
                if isinstance(record, str):  # a bad row, like any other: skipped or fatal
                    problems.append((n, record))
                    continue
            if "\\u" in body and _lone_surrogate(record):
                problems.append((n, _LONE_SURROGATE))
                continue
            # each key ends in '":' as writers write them: a line holding more of those than
            # its object has keys may hold a key twice (or nest, or quote), and is read again
            if body.count('":') != len(record) and (twice := _twice(body)) is not None:
                problems.append((n, twice))
                continue
            lines.append(n)
            records.append(record)
            if len(records) == chunks.CHUNK_ROWS:
                yield _jsonl_chunk(lines, records, problems)
                lines, records, problems = [], [], []
    yield _jsonl_chunk(lines, records, problems)


# A bad row's reason (the caller adds the fix): JSON allows these escapes, UTF-8 holds none.
_LONE_SURROGATE = "holds a lone surrogate (an escape \\ud800 to \\udfff: half a character)"


def _lone_surrogate(record: dict) -> bool:
    """Whether a key or value holds half a surrogate pair (JSON lets `"\\ud800"` through)."""
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _json_line(text: str) -> dict | str:
    """A line decoded as one JSON object, or why it is not one."""
    try:
        record = _JSON.decode(text)
    except (ValueError, RecursionError) as e:
        why = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
        return f'not valid JSON ({why}); a line is one object like {{"file_name": "a.jpg"}}'
    if not isinstance(record, dict):
        return f'holds a JSON {type(record).__name__}, not an object like {{"file_name": "a.jpg"}}'
    return record


def _jsonl_chunk(lines: list[int], records: list[dict], problems: list[tuple[int, str]]) -> Chunk:
    """Records as columns: every key any of them has, in order of first appearance."""
    names = dict.fromkeys(k for keys in dict.fromkeys(map(tuple, records)) for k in keys)
    columns = {n: list(map(dict.get, records, itertools.repeat(n))) for n in names}
    return Chunk(lines, columns, problems)


def _json_int(text: str) -> int:
    return int(text) if len(text) <= 20 else HugeInt(0)


class _Twice(ValueError):
    """A JSON object holding a key twice (the key)."""


def _object(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object's pairs as a dict; refused where a key comes twice."""
    record = dict(pairs)
    if len(record) != len(pairs):
        seen: set[str] = set()
        raise _Twice(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return record


def _twice(body: str) -> str | None:
    """Why a line is a bad row for an object holding a key twice (json keeps the last, pandas
    too; pyarrow's reader, so datasets', refuses the line: it is ambiguous), or None."""
    try:
        _PAIRS(body, 0)
    except _Twice as e:
        return (f"holds the key {shortened(printable(e.args[0]))!r} twice in one object, which "
                "pyarrow and datasets refuse (json keeps the last): keep one")  # fmt: skip
    except (StopIteration, ValueError, RecursionError):
        pass  # read already, otherwise: an integer of thousands of digits
    return None


_JSON = json.JSONDecoder(parse_int=_json_int)
# Integers parsed in C: Python refuses a literal of over 4,300 digits (so none takes long),
# and then _json_line reads the line again with _JSON, which marks it a HugeInt.
_SCAN = json.JSONDecoder().scan_once
_PAIRS = json.JSONDecoder(object_pairs_hook=_object).scan_once  # each object's pairs, checked
_JSON_SPACE = " \t\n\r"  # the whitespace JSON allows around a value
