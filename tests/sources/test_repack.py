"""Our own shards packed again: a record that would be written unchanged passes through,
parsed once in the worker, never encoded again; the scan takes the items from contents.json,
which the worker checks record by record."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import shardpack
from shardpack import PackOptions
from shardpack.containers import example, tfrecord
from shardpack.containers.tfrecord import TFRecordWriter
from shardpack.sources import repack
from shardpack.storage import storage_at
from tests.helpers import make_tree

COUNT = 7


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repack")
    out = root / "packed"
    shardpack.pack(make_tree(root / "src", {"a": 4, "b": 3}), out, PackOptions(workers=1))
    return out


def _shards(out: Path) -> dict[str, bytes]:
    index = json.loads((out / "index.json").read_text())
    files = [s["file"] for split in index["splits"].values() for s in split["shards"]]
    return {file: (out / file).read_bytes() for file in files}


def _records(out: Path) -> list[bytes]:
    return [
        bytes(data)
        for file in _shards(out)
        for _, data in tfrecord.iter_records(storage_at(str(out)), file)
    ]


@pytest.mark.parametrize("fmt", ["tfrecord", "array_record"])
def test_a_repack_passes_records_through_parsing_each_once(packed, tmp_path, monkeypatch, fmt):
    calls = {"canonical": 0, "general": 0, "encode": 0}

    def counted(name, function):
        def call(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(example, "_decode_canonical",
                        counted("canonical", example._decode_canonical))  # fmt: skip
    monkeypatch.setattr(example, "_decode_general", counted("general", example._decode_general))
    monkeypatch.setattr(example, "_example_parts", counted("encode", example._example_parts))
    out = tmp_path / fmt
    shardpack.pack(packed, out, PackOptions(workers=1, format=fmt, shuffle=False))
    # once, in the worker (the scan reads contents.json); each record checked against the one
    # it would be (encode_example's pieces, not joined), then written as it was read
    assert calls == {"canonical": COUNT, "general": 0, "encode": COUNT}
    assert sorted(_read(out, fmt)) == sorted(_records(packed))
    assert shardpack.verify(out).ok


def _read(out: Path, fmt: str) -> list[bytes]:
    container = shardpack.containers.get_container(fmt)
    return [bytes(d) for f in _shards(out) for _, d in container.iter_raw(storage_at(str(out)), f)]


def test_a_record_in_another_layout_is_encoded_again(packed, tmp_path):
    """Entries out of order (as another writer may put them) decode alike, but the output is
    encode_example's bytes, as a repack of the sorted records gives."""
    bent = tmp_path / "bent"
    bent.mkdir()
    for name in ("index.json", "features.json", "label.labels.txt", "dataset_info.json"):
        (bent / name).write_bytes((packed / name).read_bytes())
    shuffled = random.Random(0)
    for file in _shards(packed):
        with TFRecordWriter(bent / file) as writer:
            for _, data in tfrecord.iter_records(storage_at(str(packed)), file):
                entries = list(example._decode_general(data).items())
                shuffled.shuffle(entries)
                parts = [_entry(name, values) for name, values in entries]
                writer.write(b"\x0a" + example._varint(sum(map(len, parts))) + b"".join(parts))
    assert _records(bent) != _records(packed)  # the same size: the index's sizes still hold
    options = PackOptions(workers=1, shuffle=False)
    shardpack.pack(packed, tmp_path / "a", options)
    shardpack.pack(bent, tmp_path / "b", options)
    assert _shards(tmp_path / "a") == _shards(tmp_path / "b")


def _entry(name: str, values: list) -> bytes:
    """One map entry, as encode_example writes it (its value a list: the same bytes)."""
    return b"".join(example._example_parts({name: values})[2:])


def test_the_scans_quick_check_agrees_with_record_fault(packed):
    from shardpack.errors import RecordError
    from shardpack.index import load_index, record_fault

    index = load_index(storage_at(str(packed)))
    checks = repack._checks(index.schema)
    good = example.decode_example(_records(packed)[0])
    bent = [good, {k: v for k, v in good.items() if k != "width"}, {**good, "more": [1]},
            {**good, "width": [1.5]}, {**good, "height": [1, 2]}, {**good, "label": [99]},
            {**good, "label": [-1]}, {**good, "format": [b"tiff"]}, {**good, "key": [3]},
            RecordError("x", 0, "broken")]  # fmt: skip
    fits = [repack._fits(record, checks) for record in bent]
    assert fits == [isinstance(r, dict) and record_fault(r, index.schema) is None for r in bent]
    assert fits == [True] + [False] * (len(bent) - 1)
